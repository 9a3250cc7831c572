//! The server's pages with whole reports: the instance page reuses the report's
//! findings and panels (charts with the peer median and the baseline), stays bounded
//! for a group of 1,024 nodes, and lets nothing from the report inject markup; the
//! instances page of that group folds its healthy nodes.

mod support;

use gpuvet_html::check_panel;
use gpuvet_html::site::{instance_page, instances_page};
use gpuvet_model::results::Outcome;
use support::{
    SLOW_REASON, group_report, job_instances, node_events, one_node_report, run_summary,
};

/// As `page.rs`'s bound for the static report, which the instance page contains.
const MAX_PAGE_BYTES: usize = 1_000_000;

#[test]
fn the_instance_page_shows_the_findings_and_a_panel_per_check_with_median_and_floor() {
    let report = one_node_report("node-a");
    let (_, mut instances) = job_instances(4);
    let mut instance = instances.remove(1);
    instance.attempt.node = "node-a".to_owned();
    let html = instance_page(
        &instance,
        Some(&report),
        &[run_summary(1, Outcome::Failed)],
        &[],
        false,
    );
    assert!(html.contains("<h2>Findings (1)</h2>"), "{html}");
    assert!(html.contains("<td>node-a/dev3</td>"), "{html}");
    assert!(html.contains(SLOW_REASON));
    assert_eq!(html.matches("<article class=\"panel").count(), 2, "{html}");
    assert!(html.contains("id=\"check-gemm_flops\""));
    assert_eq!(html.matches("<rect class=\"bar slow\"").count(), 1);
    assert!(html.contains("<line class=\"median\""), "{html}");
    assert!(html.contains("<line class=\"limit\""), "{html}");
    assert!(html.contains(">floor 60.0 TFLOPS</text>"), "{html}");
    assert!(html.contains("<a class=\"report\" href=\"/reports/1.html\">static report</a>"));
    assert!(!html.contains("<script"), "not live: {html}");
}

#[test]
fn the_instance_page_of_a_1024_node_group_stays_bounded() {
    let report = group_report(1024);
    let (_, instances) = job_instances(1024);
    let history = [
        run_summary(0, Outcome::Failed),
        run_summary(-1, Outcome::Passed),
    ];
    let html = instance_page(
        &instances[0],
        Some(&report),
        &history,
        &node_events(0),
        false,
    );
    assert!(html.len() < MAX_PAGE_BYTES, "{} bytes", html.len());
    // Findings (3), runs (2), events (2), each table with its header row.
    assert_eq!(html.matches("<tr").count(), 4 + 3 + 3, "{}", html.len());
    assert_eq!(html.matches("<rect").count(), 0, "no bar per entity");
    assert_eq!(html.matches("<polyline").count(), 3);
    assert!(html.contains("<summary>node-[0-1023] (all 1024 names)</summary>"));
}

#[test]
fn a_panel_of_a_1024_node_check_has_no_row_or_bar_per_node() {
    let report = group_report(1024);
    for check in &report.checks {
        let panel = check_panel(check);
        assert_eq!(panel.matches("<tr").count(), 0, "{}", check.name.as_str());
        assert_eq!(panel.matches("<rect").count(), 0, "{}", check.name.as_str());
        assert!(
            panel.len() < 30_000,
            "{}: {} bytes",
            check.name.as_str(),
            panel.len()
        );
    }
}

#[test]
fn nothing_from_the_report_can_inject_markup_into_the_instance_page() {
    let hostile = "<script>alert('x')</script>";
    let mut report = one_node_report(hostile);
    report.checks[0].entities[3].reason = "<b>bold</b>".to_owned();
    let (_, mut instances) = job_instances(2);
    instances[0].attempt.node = hostile.to_owned();
    let html = instance_page(&instances[0], Some(&report), &[], &[], true);
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<b>"), "{html}");
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the refresh script"
    );
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;/dev3"));
}

#[test]
fn the_instances_page_of_the_1024_node_group_lists_its_problems_and_folds_the_rest() {
    let (job, instances) = job_instances(1024);
    let html = instances_page(&[job], &instances, None, 1_767_225_900_000);
    let rows = html.matches("<tr").count();
    assert!(rows < 100, "{rows} rows");
    // Five failed and 16 running nodes each get a row; the passed fold into one.
    assert_eq!(html.matches("data-status=\"failed\"><td>").count(), 5);
    assert_eq!(html.matches("data-status=\"running\"><td>").count(), 16);
    assert!(
        html.contains("data-status=\"passed\" data-folded=\"1003\""),
        "{rows}"
    );
    assert_eq!(html.matches("data-node=").count(), 1024);
    assert!(html.contains("<span class=\"ago\">5 min ago</span>"));
}
