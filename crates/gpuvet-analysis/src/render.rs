//! Report rendering as pure functions: the terminal table and JUnit XML. JSON is the
//! serde form of [`RunReport`].

use std::time::Duration;

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use gpuvet_model::analysis::fmt_value;
use gpuvet_model::node_list::{MAX_PARTS, fold_node_names};
use gpuvet_model::repeats::group_repeats;
use gpuvet_model::results::{CheckResult, CheckStatus, GroupIncident, RunReport, Verdict};

/// How much of each check the table's details column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// About [`BRIEF_DETAILS`] characters a check: the count of entities that are ok,
    /// the parameters a reader compares runs by, or the reason it did not run.
    Brief,
    /// Every parameter and the whole reason (`--verbose`; JSON always has them).
    Full,
}

/// The longest brief details cell, in characters.
pub const BRIEF_DETAILS: usize = 80;

/// Parameters worth a place in the brief cell, in this order.
const BRIEF_PARAMS: [&str; 4] = ["dtype", "engine", "group", "remeasured"];

/// The terminal report: a header, one row per check, then every finding.
pub fn table(report: &RunReport, width: Option<u16>, detail: Detail) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "gpuvet {} | job {} attempt {} | node {} | backend {} | {} devices\n",
        report.gpuvet_version,
        report.job_id,
        report.attempt,
        report.node,
        report.backend,
        report.devices.len()
    ));
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    if let Some(width) = width {
        table.set_width(width);
    }
    table.set_header(["check", "status", "time", "result", "details"]);
    for check in &report.checks {
        table.add_row([
            check.name.as_str().to_owned(),
            check.status.as_str().to_owned(),
            format!("{:.1}s", check.duration_secs),
            value_summary(check),
            details_cell(check, detail),
        ]);
    }
    out.push_str(&table.to_string());
    out.push('\n');
    if let Some(group) = &report.group {
        let names = match (group.size, group.nodes.is_empty()) {
            (None, _) => fold_node_names(&group.nodes, MAX_PARTS),
            (Some(_), true) => "the coordinator's report names them".to_owned(),
            (Some(_), false) => format!(
                "{} named here; the coordinator's report names them all",
                fold_node_names(&group.nodes, MAX_PARTS)
            ),
        };
        out.push_str(&format!("group of {}: {names}\n", group.node_count()));
        if let Some(first) = &group.first_error {
            out.push_str(&format!(
                "first error: {} {} [lane: {}]: {}\n",
                rank_name(first),
                first.kind,
                first.lane,
                first.detail
            ));
        }
        // Ranks that only waited on the first error mostly say the same: said once.
        let secondary: Vec<(String, String)> = group
            .secondary
            .iter()
            .map(|i| (rank_name(i), format!("{} {}", i.kind, i.detail)))
            .collect();
        for line in group_repeats(&secondary, group.node_count()) {
            out.push_str(&format!("  secondary: {line}\n"));
        }
        for incident in &group.other_failures {
            out.push_str(&format!(
                "  also: {} {} [lane: {}]: {}\n",
                rank_name(incident),
                incident.kind,
                incident.lane,
                incident.detail
            ));
        }
    }
    let findings: Vec<_> = report.findings().collect();
    if !findings.is_empty() {
        out.push_str("findings:\n");
        for (check, finding) in findings {
            let verdict = match finding.verdict {
                Verdict::Faulty => "faulty",
                _ => "slow",
            };
            out.push_str(&format!(
                "  {} {} on {} [lane: {}]: {}\n",
                check.name, verdict, finding.entity, finding.lane, finding.reason
            ));
        }
    }
    out.push_str(&format!(
        "outcome: {} ({}) in {:.1}s\n",
        report.outcome.as_str(),
        report.summary(),
        report.duration_secs
    ));
    out
}

/// `rank 3 (node-3)`, or `rank 3` when that is all that is known.
pub fn rank_name(incident: &GroupIncident) -> String {
    if incident.node.is_empty() || incident.node == format!("rank {}", incident.rank) {
        format!("rank {}", incident.rank)
    } else {
        format!("rank {} ({})", incident.rank, incident.node)
    }
}

/// The headline values of a check in a few words: `median 12.3 TFLOPS (min 11.9, max
/// 12.5)`, the one value when there is one, `-` when none was measured.
pub fn value_summary(check: &CheckResult) -> String {
    let values: Vec<f64> = check
        .entities
        .iter()
        .filter_map(|e| e.measurement.value)
        .collect();
    let (Some(min), Some(median)) = (
        values.iter().copied().reduce(f64::min),
        check.median_value(),
    ) else {
        return "-".to_owned();
    };
    let max = values.iter().copied().fold(f64::MIN, f64::max);
    let unit = &check.metric.unit;
    if values.len() == 1 {
        format!("{} {unit}", fmt_value(median))
    } else {
        format!(
            "median {} {unit} (min {}, max {})",
            fmt_value(median),
            fmt_value(min),
            fmt_value(max)
        )
    }
}

fn details_cell(check: &CheckResult, detail: Detail) -> String {
    if let Some(reason) = &check.reason {
        return match detail {
            Detail::Full => reason.clone(),
            Detail::Brief => shorten(reason, BRIEF_DETAILS),
        };
    }
    let bad = check.findings().count();
    let mut cell = format!(
        "{} of {} ok",
        check.entities.len() - bad,
        check.entities.len()
    );
    let params: Vec<String> = match detail {
        Detail::Full => check
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        Detail::Brief => BRIEF_PARAMS
            .iter()
            .filter_map(|&k| Some(format!("{k}={}", check.params.get(k)?)))
            .collect(),
    };
    let mut separator = "; ";
    for param in params {
        if detail == Detail::Brief
            && cell.chars().count() + separator.len() + param.chars().count() > BRIEF_DETAILS
        {
            break;
        }
        cell.push_str(separator);
        cell.push_str(&param);
        separator = " ";
    }
    cell
}

/// `text` cut at a word boundary to at most `max` characters, with `…` when cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    let at_word = cut
        .rfind(' ')
        .filter(|&i| i > max / 2)
        .map_or(cut.as_str(), |i| &cut[..i]);
    format!("{}…", at_word.trim_end_matches([',', ';', ':']))
}

/// JUnit XML: one test suite per run, one test case per check. Skipped and
/// not-implemented checks are `skipped`, never passed.
pub fn junit(report: &RunReport) -> String {
    let mut junit = Report::new("gpuvet");
    let mut suite = TestSuite::new(format!("sanity_check {}", report.node));
    suite.add_property(("backend", report.backend.as_str()));
    suite.add_property(("job_id", report.job_id.as_str()));
    suite.add_property(("attempt", report.attempt.to_string().as_str()));
    for check in &report.checks {
        let mut status = match check.status {
            CheckStatus::Passed => TestCaseStatus::success(),
            CheckStatus::Skipped | CheckStatus::NotImplemented => {
                let mut status = TestCaseStatus::skipped();
                status.set_message(format!(
                    "{}: {}",
                    check.status,
                    check.reason.as_deref().unwrap_or("")
                ));
                status
            }
            CheckStatus::Failed => TestCaseStatus::non_success(NonSuccessKind::Failure),
            CheckStatus::TimedOut | CheckStatus::NotRun => {
                TestCaseStatus::non_success(NonSuccessKind::Error)
            }
        };
        if check.status.is_failure() {
            let findings: Vec<String> = check
                .findings()
                .map(|f| format!("{} [{}]: {}", f.entity, f.lane, f.reason))
                .collect();
            let message = match (&check.reason, findings.is_empty()) {
                (Some(reason), _) => reason.clone(),
                (None, false) => findings.join("; "),
                (None, true) => check.status.as_str().to_owned(),
            };
            status.set_message(message);
            status.set_type(check.status.as_str());
        }
        let mut case = TestCase::new(check.name.as_str(), status);
        case.set_classname(format!("gpuvet.{}", report.node));
        case.set_time(Duration::from_secs_f64(check.duration_secs.max(0.0)));
        suite.add_test_case(case);
    }
    junit.add_test_suite(suite);
    junit
        .to_string()
        .expect("JUnit XML rendering does not fail on valid strings")
}

#[cfg(test)]
mod tests;
