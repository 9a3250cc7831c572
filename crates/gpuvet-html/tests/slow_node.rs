//! A slow node on every page, as issue 30 asks: the verdict first (the culprit, team,
//! lane, why and next step), then the findings folded so that the rows do not grow with
//! the node's GPUs (one row for the node, one per other finding), every entity still in
//! a collapsed list; the timeline's table folds the same way, and the group section
//! says what happened to a rank in words.

mod support;

use gpuvet_analysis::explain::explain;
use gpuvet_analysis::timeline::assemble;
use gpuvet_html::page;
use gpuvet_html::site::{instance_page, timeline_page};
use gpuvet_model::record::JobRecord;
use gpuvet_model::results::{GroupIncident, GroupSummary, IncidentKind, Lane, Outcome};
use support::{SLOW_NODE, job_instances, one_node_report, run_summary, slow_node_report};

/// The acceptance bound of issue 30: a slow node's page has at most this many rows in
/// its folded findings table, whatever its GPU count.
const MOST_FOLDED_ROWS: usize = 12;

/// The part of `html` from `start` to the end of the element it opens, as far as the
/// first `end` after it.
fn part<'a>(html: &'a str, start: &str, end: &str) -> &'a str {
    let from = html
        .find(start)
        .unwrap_or_else(|| panic!("no {start}: {html}"));
    let to = from + html[from..].find(end).unwrap_or(html.len() - from);
    &html[from..to]
}

/// The rows of the folded findings table.
fn folded_rows(html: &str) -> Vec<&str> {
    let table = part(html, "<table class=\"findings folded\">", "</table>");
    table.split("<tr class=").skip(1).collect()
}

#[test]
fn the_static_report_of_a_slow_node_leads_with_the_verdict_and_folds_its_findings() {
    for devices in [8, 64] {
        let report = slow_node_report(devices);
        let html = page(&report);
        let verdict = part(&html, "<section id=\"verdict\"", "</section>");
        assert!(
            verdict.contains("<strong class=\"culprit\">local-2 is slow</strong>; hand it to <span class=\"team\">the host team</span> <span class=\"lane\">host</span>"),
            "{verdict}"
        );
        assert!(
            verdict.contains(&format!(
                "<dd class=\"why\">slow in 5 of 7 checks, all {devices} GPUs and every link</dd>"
            )),
            "{verdict}"
        );
        assert!(verdict.contains("<dd class=\"next-step\">"), "{verdict}");
        assert!(
            html.find("id=\"verdict\"") < html.find("id=\"findings\""),
            "the conclusion comes first"
        );
        let rows = folded_rows(&html);
        assert!(rows.len() <= MOST_FOLDED_ROWS, "{devices} GPUs: {rows:#?}");
        assert_eq!(rows.len(), 2, "{rows:#?}");
        assert!(
            rows[0].contains(&format!("data-row=\"node\" data-node=\"{SLOW_NODE}\"")),
            "{}",
            rows[0]
        );
        assert!(
            rows[0].contains(&format!(
                "<td>slow in 5 of 7 checks, all {devices} GPUs and every link</td>"
            )),
            "{}",
            rows[0]
        );
        assert!(
            rows[1].contains("<td>local-0/dev1</td>"),
            "the GPU of another node is a row of its own: {}",
            rows[1]
        );
        // Every entity is still on the page, collapsed.
        let findings = 2 * devices as usize + 3 + 1;
        assert!(
            html.contains(&format!(
                "<details class=\"every-entity\"><summary>every entity ({findings})</summary>"
            )),
            "{devices} GPUs"
        );
        let listed = part(&html, "<table class=\"entities\">", "</table>");
        assert_eq!(listed.matches("<tr class=").count(), findings);
        assert!(listed.contains(&format!("<td>local-2/dev{}</td>", devices - 1)));
        assert!(html.contains(&format!(
            "<p class=\"count\">{findings} findings in 2 rows: "
        )));
    }
}

#[test]
fn the_instance_page_of_a_slow_node_has_its_verdict_and_at_most_twelve_finding_rows() {
    let (_, instances) = job_instances(4);
    for devices in [8, 64] {
        let report = slow_node_report(devices);
        let html = instance_page(
            &instances[0],
            Some(&report),
            &[run_summary(0, Outcome::Failed)],
            &[],
            false,
        );
        let rows = folded_rows(&html);
        assert!(rows.len() <= MOST_FOLDED_ROWS, "{devices} GPUs: {rows:#?}");
        let verdict = part(&html, "<section id=\"verdict\"", "</section>");
        assert!(verdict.contains(SLOW_NODE), "{verdict}");
        assert!(
            html.find("id=\"verdict\"") < html.find("id=\"group\""),
            "the verdict leads"
        );
    }
}

#[test]
fn a_report_without_a_diagnosis_or_a_fold_has_no_verdict_and_no_collapsed_list() {
    let html = page(&one_node_report("node-a"));
    assert!(!html.contains("id=\"verdict\""), "{html}");
    assert_eq!(folded_rows(&html).len(), 1);
    assert!(
        !html.contains("<details class=\"every-entity\""),
        "nothing was folded away: {html}"
    );
}

#[test]
fn the_timeline_of_a_slow_node_folds_its_gpus_into_one_row_per_check() {
    for devices in [8, 64] {
        let record = JobRecord {
            job_id: "job-slow".to_owned(),
            attempt: 1,
            reports: vec![slow_node_report(devices)],
            events: Vec::new(),
        };
        let timeline = assemble(&record);
        let explanation = explain(&record, &timeline);
        let html = timeline_page(&timeline, &explanation, 1);
        let verdict = part(&html, "<section id=\"verdict\"", "</section>");
        assert!(verdict.contains("local-2 is slow"), "{verdict}");
        let table = part(&html, "<table class=\"entries\">", "</table>");
        let rows = table.matches("<tr class=").count();
        assert!(rows <= MOST_FOLDED_ROWS + 4, "{devices} GPUs: {rows} rows");
        // The first error keeps its row; the other GPUs of its check are one row.
        assert!(
            table.contains("<a href=\"#first-error\">first error</a></td><td>local-2/dev0 "),
            "{table}"
        );
        let last = devices - 1;
        assert!(
            table.contains(&format!("<td>local-2/dev[1-{last}] ")),
            "{table}"
        );
        assert!(
            table.contains(&format!("data-count=\"{}\"", devices - 1)),
            "{table}"
        );
        assert!(
            table.contains(&format!("<td>local-2/dev[0-{last}] ")),
            "kernel_launch: {table}"
        );
        assert!(
            html.contains(&format!(
                "entries in {rows} rows: the findings of one check on one node are one row"
            )),
            "{html}"
        );
    }
}

#[test]
fn the_group_section_says_what_happened_to_a_rank_in_words() {
    let mut report = one_node_report("n0");
    let incident = |rank: u32, kind: IncidentKind, lane: Lane, detail: &str| GroupIncident {
        rank,
        node: format!("n{rank}"),
        kind,
        lane,
        time_ms: 1_767_225_605_000,
        detail: detail.to_owned(),
    };
    report.group = Some(GroupSummary {
        size: None,
        nodes: (0..4).map(|i| format!("n{i}")).collect(),
        first_error: Some(incident(
            1,
            IncidentKind::NeverJoined,
            Lane::Platform,
            "did not join within 120 s",
        )),
        secondary: vec![
            incident(
                0,
                IncidentKind::TimedOut,
                Lane::Platform,
                "waited on rank 1",
            ),
            incident(
                2,
                IncidentKind::TimedOut,
                Lane::Platform,
                "waited on rank 1",
            ),
        ],
        other_failures: vec![
            incident(
                3,
                IncidentKind::PeerError,
                Lane::Network,
                "connection reset",
            ),
            incident(
                2,
                IncidentKind::PeerError,
                Lane::Network,
                "connection reset",
            ),
            incident(
                1,
                IncidentKind::Crashed,
                Lane::Host,
                "its connection closed",
            ),
        ],
        timeline: None,
    });
    let html = page(&report);
    let group = part(&html, "<section id=\"group\">", "</section>");
    assert!(
        group.contains("<strong>first error</strong>: rank 1 (n1) never joined <span class=\"lane\">platform</span>: did not join within 120 s"),
        "{group}"
    );
    assert!(
        group.contains(
            "followed: rank 0 (n0), rank 2 (n2) (2 of 4 nodes): timed out: waited on rank 1"
        ),
        "repeats said once: {group}"
    );
    assert!(
        group.contains("also: rank 3 (n3), rank 2 (n2) (2 of 4 nodes): peer error <span class=\"lane\">network</span>: connection reset"),
        "{group}"
    );
    assert!(
        group.contains("<li>also: rank 1 (n1) crashed <span class=\"lane\">host</span>: its connection closed</li>"),
        "one rank's failure reads as the first error does: {group}"
    );
    for code in ["never_joined", "timed_out", "peer_error"] {
        assert!(!group.contains(code), "{code} in {group}");
    }
}
