//! The HTML report from whole reports: what a reader must find on the page, that
//! nothing from the report can inject markup, and that a group of 1,024 nodes gives a
//! page of bounded size with every finding still listed.

mod support;

use gpuvet_html::{chart, check_panel, escape, page};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{CheckResult, CheckStatus};
use support::{SLOW_DEVICE, SLOW_REASON, group_report, one_node_report};

/// The most a 1,024-node page may weigh. Per check, the chart is bounded (200 profile
/// buckets, 12 named findings: about 10 kB) and the text is a few hundred bytes; the
/// folded list of node names is about 10 bytes a node. What grows with the group is
/// only the findings table, about 300 bytes a finding. 1 MB leaves room for a dozen
/// checks and a thousand findings, and fails as soon as anything is drawn per entity:
/// a bar per GPU of 1,024 eight-GPU nodes alone would be about 2 MB.
const MAX_PAGE_BYTES: usize = 1_000_000;

#[test]
fn the_slow_gpu_is_named_with_its_reason_lane_and_a_highlighted_bar() {
    let html = page(&one_node_report("node-a"));
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.contains("<td>node-a/dev3</td>"), "{html}");
    assert!(html.contains(SLOW_REASON), "{html}");
    assert!(html.contains(r#"<span class="lane">host</span>"#), "{html}");
    assert_eq!(
        html.matches("<svg").count(),
        1,
        "one chart: the skipped check has none"
    );
    assert_eq!(html.matches(r#"<rect class="bar "#).count(), 8, "{html}");
    assert_eq!(
        html.matches(r#"<rect class="bar slow""#).count(),
        1,
        "{html}"
    );
    assert!(html.contains(r#"<line class="median""#), "{html}");
    assert!(html.contains(">floor 60.0 TFLOPS</text>"), "{html}");
    assert!(
        html.contains("needs at least 2 nodes"),
        "the skip reason: {html}"
    );
    assert!(
        html.contains("job-7") && html.contains("2026-01-01T00:00:00.000Z"),
        "{html}"
    );
}

#[test]
fn nothing_from_the_report_can_inject_markup() {
    let hostile = "<script>alert('x')</script>";
    let mut report = one_node_report(hostile);
    report.job_id = "\"><img src=x onerror=alert(1)>".to_owned();
    report.checks[0].entities[SLOW_DEVICE].reason = "<b>bold</b> & more".to_owned();
    report.checks[0]
        .params
        .insert("<k>".to_owned(), "</code><i>".to_owned());
    let html = page(&report);
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(
        !html.contains("<b>") && !html.contains("<i>") && !html.contains("<k>"),
        "{html}"
    );
    assert!(
        html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;/dev3"),
        "{html}"
    );
    assert!(
        html.contains("&lt;b&gt;bold&lt;/b&gt; &amp; more"),
        "{html}"
    );
    assert!(html.contains("&quot;&gt;&lt;img"), "{html}");
}

#[test]
fn escape_covers_the_five_special_characters() {
    assert_eq!(escape(r#"a&b<c>d"e'f"#), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
    assert_eq!(escape("node-1/dev0 ✓"), "node-1/dev0 ✓");
}

#[test]
fn a_check_without_values_has_a_panel_and_no_chart() {
    let check = CheckResult::without_work(
        CheckName::AllGather,
        CheckStatus::NotImplemented,
        "not implemented on the cpu backend yet",
    );
    assert_eq!(chart::svg(&check), None);
    let panel = check_panel(&check);
    assert!(panel.contains("not implemented</span>"), "{panel}");
    assert!(
        panel.contains("not implemented on the cpu backend yet"),
        "{panel}"
    );
}

#[test]
fn a_group_of_1024_nodes_is_drawn_as_distributions_and_lists_every_finding() {
    let html = page(&group_report(1024));
    assert!(
        html.len() < MAX_PAGE_BYTES,
        "{} bytes for 1,024 nodes",
        html.len()
    );
    // Three checks with values, three charts; none draws a bar per entity.
    assert_eq!(html.matches("<svg").count(), 3);
    assert_eq!(html.matches("<rect").count(), 0);
    assert_eq!(html.matches("<polyline").count(), 3);
    // Each finding is in the table, and those with a value are marked on their chart.
    assert!(html.contains("Findings (3)"), "{}", &html[..4000]);
    for entity in ["node-512/dev3", "node-1023/dev0", "node-1&lt;-&gt;node-2"] {
        assert!(html.contains(&format!("<td>{entity}</td>")), "{entity}");
    }
    assert_eq!(html.matches("<circle").count(), 2);
    assert!(html.contains(r#"<circle class="dot slow""#));
    assert!(html.contains("8191 entities sorted worst to best; 1 without a value"));
    assert!(html.contains("8192 GPUs on 1024 nodes: 8190 ok, 1 slow, 1 faulty"));
    assert!(html.contains("1024 pairs on 1024 nodes: 1023 ok, 1 slow"));
    // The node list is folded into one paragraph, not a row per node.
    assert!(html.contains("<summary>node-[0-1023] (all 1024 names)</summary>"));
    assert!(html.contains("first error</strong>: rank 1023 (node-1023) failed"));
}

/// GPUs degraded against their own record are listed apart from the findings, the
/// worst first, in a table bounded at any GPU count, with their bars in their colour.
#[test]
fn degraded_gpus_have_a_bounded_table_of_their_own() {
    use gpuvet_model::history::{GpuRecord, HistoryPolicy, RecordKey, judge_report, work_of};
    let html = page(&one_node_report("node-a"));
    assert!(!html.contains("id=\"degraded\""), "none without a record");

    let mut report = group_report(16);
    let records = report.checks[0]
        .entities
        .iter()
        .filter_map(|e| {
            let record = GpuRecord {
                values: vec![e.measurement.value? * 1.25; 20],
                first_at_ms: 0,
                degraded_since_ms: None,
            };
            let key = RecordKey {
                gpu: e.entity.to_string(),
                check: report.checks[0].name,
                work: work_of(&report.checks[0]),
            };
            Some((key, record))
        })
        .collect();
    let degraded = judge_report(&mut report, &records, &HistoryPolicy::default(), 1);
    assert!(degraded > 64, "{degraded}");
    let html = page(&report);
    assert!(
        html.contains(&format!("<h2>Degraded ({degraded})</h2>")),
        "{html}"
    );
    assert_eq!(html.matches("<tr class=\"degraded\">").count(), 64);
    assert!(
        html.contains(&format!("and {} more", degraded - 64)),
        "{html}"
    );
    assert!(html.contains(r#"<rect class="bar degraded""#) || html.contains("dot degraded"));
}
