//! The findings table, folded as the terminal folds it ([`fold`]): one row per node
//! that failed most of its checks (`local-2: slow in 10 of 13 checks, all 8 GPUs and
//! every link`) and one per check, verdict and node for the rest (`local-2/dev[0-7]`),
//! so the table does not grow with the GPUs of a node. Every entity is still on the
//! page, in a collapsed `<details>` under it, whenever folding hid one.

use gpuvet_analysis::fold::{FoldedFinding, NodeSummary, fold, touches, verdict_word};
use gpuvet_model::analysis::fmt_value;
use gpuvet_model::results::RunReport;

use crate::escape;

/// Every slow or faulty entity of the run: folded rows with their check, entities,
/// verdict, lane and what was measured, then each entity in a collapsed list.
pub fn findings_table(report: &RunReport) -> String {
    let findings: Vec<_> = report.findings().collect();
    let mut out = format!(
        "<section id=\"findings\">\n<h2>Findings ({})</h2>\n",
        findings.len()
    );
    if findings.is_empty() {
        out.push_str("<p>No GPU, node or link was found slow or faulty.</p>\n</section>\n");
        return out;
    }
    let folded = fold(report);
    let rows = folded.nodes.len() + folded.findings.len();
    let hid_some = rows < findings.len();
    if hid_some {
        let plural = if rows == 1 { "" } else { "s" };
        out.push_str(&format!(
            "<p class=\"count\">{} findings in {rows} row{plural}: repeats are said once; every entity is listed below the table</p>\n",
            findings.len()
        ));
    }
    out.push_str("<table class=\"findings folded\">\n<thead><tr><th>check</th><th>entities</th><th>verdict</th><th>lane</th><th>what</th></tr></thead>\n<tbody>\n");
    for node in &folded.nodes {
        out.push_str(&node_row(report, node));
    }
    for finding in &folded.findings {
        out.push_str(&finding_row(finding));
    }
    out.push_str("</tbody>\n</table>\n");
    if hid_some {
        out.push_str(&every_entity(report));
    }
    out.push_str("</section>\n");
    out
}

/// A node summed up: what it failed, in the summary's own words.
fn node_row(report: &RunReport, node: &NodeSummary) -> String {
    let verdict = verdict_word(node.verdict);
    let covered = report
        .findings()
        .filter(|(_, f)| touches(&f.entity, &node.node))
        .count();
    format!(
        "<tr class=\"{verdict}\" data-row=\"node\" data-node=\"{name}\" data-count=\"{covered}\"><td>{} of {} checks (first: <a href=\"#check-{first}\">{first}</a>)</td><td>{name}</td><td><span class=\"status {verdict}\">{verdict}</span></td><td><span class=\"lane\">{}</span></td><td>{}</td></tr>\n",
        node.failed_checks,
        node.judged_checks,
        node.lane,
        escape(&node.sentence()),
        name = escape(&node.node),
        first = node.first_check.as_str(),
    )
}

/// The findings of one check with one verdict on one node (or pair), as one row.
fn finding_row(finding: &FoldedFinding) -> String {
    let verdict = verdict_word(finding.verdict);
    format!(
        "<tr class=\"{verdict}\" data-row=\"finding\" data-node=\"{}\" data-count=\"{}\"><td><a href=\"#check-{check}\">{check}</a></td><td>{}</td><td><span class=\"status {verdict}\">{verdict}</span></td><td><span class=\"lane\">{}</span></td><td>{}</td></tr>\n",
        escape(&finding.node),
        finding.count,
        escape(&finding.entities),
        finding.lane,
        escape(&finding.what),
        check = finding.check.as_str(),
    )
}

/// Each finding on its own row, collapsed: nothing folding hid is lost.
fn every_entity(report: &RunReport) -> String {
    let findings: Vec<_> = report.findings().collect();
    let mut out = format!(
        "<details class=\"every-entity\"><summary>every entity ({})</summary>\n<table class=\"entities\">\n<thead><tr><th>check</th><th>entity</th><th>verdict</th><th>lane</th><th>value</th><th>reason</th></tr></thead>\n<tbody>\n",
        findings.len()
    );
    for (check, finding) in findings {
        let verdict = verdict_word(finding.verdict);
        let value = finding.measurement.value.map_or_else(
            || "-".to_owned(),
            |v| format!("{} {}", fmt_value(v), check.metric.unit),
        );
        out.push_str(&format!(
            "<tr class=\"{verdict}\"><td><a href=\"#check-{name}\">{name}</a></td><td>{}</td><td><span class=\"status {verdict}\">{verdict}</span></td><td><span class=\"lane\">{}</span></td><td>{}</td><td>{}</td></tr>\n",
            escape(&finding.entity.to_string()),
            finding.lane,
            escape(&value),
            escape(&finding.reason),
            name = check.name.as_str(),
        ));
    }
    out.push_str("</tbody>\n</table>\n</details>\n");
    out
}

/// The most degraded GPUs the table lists; the rest are counted, so the page stays
/// bounded at any GPU count.
const MAX_DEGRADED_ROWS: usize = 64;

/// GPUs worse than their own record that fail nothing (`gpuvet.history`): one row each,
/// the worst first, at most `MAX_DEGRADED_ROWS`; empty when there are none.
pub fn degraded_table(report: &RunReport) -> String {
    let mut degraded: Vec<_> = report.degraded().collect();
    if degraded.is_empty() {
        return String::new();
    }
    let deficit = |e: &gpuvet_model::results::EntityResult| {
        e.evidence.history.as_ref().map_or(0.0, |h| h.deficit_pct)
    };
    degraded.sort_by(|(_, a), (_, b)| deficit(b).total_cmp(&deficit(a)));
    let mut out = format!(
        "<section id=\"degraded\">\n<h2>Degraded ({})</h2>\n<p class=\"count\">Worse than their own record, though their peers agree with them; the start is not refused for it.</p>\n<table class=\"entities degraded\">\n<thead><tr><th>check</th><th>entity</th><th>below its record</th><th>reason</th></tr></thead>\n<tbody>\n",
        degraded.len()
    );
    for (check, entity) in degraded.iter().take(MAX_DEGRADED_ROWS) {
        out.push_str(&format!(
            "<tr class=\"degraded\"><td><a href=\"#check-{name}\">{name}</a></td><td>{}</td><td>{:.1}%</td><td>{}</td></tr>\n",
            escape(&entity.entity.to_string()),
            deficit(entity),
            escape(&entity.reason),
            name = check.name.as_str(),
        ));
    }
    out.push_str("</tbody>\n</table>\n");
    if degraded.len() > MAX_DEGRADED_ROWS {
        out.push_str(&format!(
            "<p class=\"count\">and {} more</p>\n",
            degraded.len() - MAX_DEGRADED_ROWS
        ));
    }
    out.push_str("</section>\n");
    out
}
