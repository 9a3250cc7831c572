//! Report rendering as pure functions: the terminal table and JUnit XML. JSON is the
//! serde form of [`RunReport`].

use std::time::Duration;

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use gpuvet_model::diagnosis::{fmt_quantity, quantity_number, wrap_hanging_into, wrap_into};
use gpuvet_model::node_list::{MAX_PARTS, fold_node_names};
use gpuvet_model::repeats::group_repeats;
use gpuvet_model::results::{CheckResult, CheckStatus, EntityResult, RunReport};

pub use crate::diagnose::rank_name;
use crate::diagnose::status_words;
use crate::fold::{fold, verdict_word};

/// How much of each check the table's details column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// About [`BRIEF_DETAILS`] characters a check: the count of entities that are ok,
    /// the parameters a reader compares runs by, or the reason it did not run.
    Brief,
    /// Every parameter and the whole reason (`--verbose`; JSON always has them).
    Full,
}

/// The longest brief details cell, in characters: the table fits 100 columns.
pub const BRIEF_DETAILS: usize = 32;

/// Parameters worth a place in the brief cell, in this order.
const BRIEF_PARAMS: [&str; 4] = ["dtype", "engine", "group", "remeasured"];

/// The terminal report, at most `width` columns wide: a header, one row per check,
/// the verdict block when the run failed (the report's [`Diagnosis`]), the group, the
/// findings folded (every entity with [`Detail::Full`]), and the outcome.
///
/// [`Diagnosis`]: gpuvet_model::diagnosis::Diagnosis
pub fn table(report: &RunReport, width: usize, detail: Detail) -> String {
    let mut out = String::new();
    let line = |text: &str, out: &mut String| {
        let mut lines = Vec::new();
        wrap_into(&mut lines, "", text, width, 1);
        out.push_str(&lines[0]);
        out.push('\n');
    };
    line(
        &format!(
            "gpuvet {} | job {} attempt {} | node {} | backend {} | {} devices",
            report.gpuvet_version,
            report.job_id,
            report.attempt,
            report.node,
            report.backend,
            report.devices.len()
        ),
        &mut out,
    );
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(u16::try_from(width).unwrap_or(u16::MAX));
    table.set_header(["check", "status", "time", "result", "details"]);
    for check in &report.checks {
        table.add_row([
            check.name.as_str().to_owned(),
            status_words(check.status).to_owned(),
            format!("{:.1}s", check.duration_secs),
            value_summary(check),
            details_cell(check, detail),
        ]);
    }
    out.push_str(&table.to_string());
    out.push('\n');
    if let Some(diagnosis) = &report.diagnosis {
        for text in diagnosis.lines(width) {
            out.push_str(&text);
            out.push('\n');
        }
    }
    if let Some(group) = &report.group {
        let names = match (group.size, group.nodes.is_empty()) {
            (None, _) => fold_node_names(&group.nodes, MAX_PARTS),
            (Some(_), true) => "the coordinator's report names them".to_owned(),
            (Some(_), false) => format!(
                "{} named here; the coordinator's report names them all",
                fold_node_names(&group.nodes, MAX_PARTS)
            ),
        };
        line(
            &format!("group of {}: {names}", group.node_count()),
            &mut out,
        );
        // Ranks that only waited on the first error mostly say the same: said once.
        let consequences: Vec<(String, String)> = group
            .secondary
            .iter()
            .map(|i| (rank_name(i), i.detail.clone()))
            .collect();
        for text in group_repeats(&consequences, group.node_count())
            .iter()
            .take(MAX_CONSEQUENCES)
        {
            line(&format!("  followed: {text}"), &mut out);
        }
        if report.diagnosis.is_none() {
            // Without a verdict block (a report from an older gpuvet), the incidents
            // are listed as they are.
            for incident in group.first_error.iter().chain(&group.other_failures) {
                line(
                    &format!(
                        "  {} {} [lane: {}]: {}",
                        rank_name(incident),
                        incident.kind.words(),
                        incident.lane,
                        incident.detail
                    ),
                    &mut out,
                );
            }
        }
    }
    let findings: Vec<String> = match detail {
        // What the verdict block said already is not said again.
        Detail::Brief => fold(report)
            .lines()
            .into_iter()
            .filter(|l| !report.diagnosis.as_ref().is_some_and(|d| d.says(l)))
            .collect(),
        Detail::Full => report
            .findings()
            .map(|(check, f)| {
                format!(
                    "{} {} on {} [lane: {}]: {}",
                    check.name,
                    verdict_word(f.verdict),
                    f.entity,
                    f.lane,
                    f.reason
                )
            })
            .collect(),
    };
    if !findings.is_empty() {
        out.push_str("findings:\n");
        let mut lines = Vec::new();
        for finding in findings {
            match detail {
                Detail::Brief => wrap_hanging_into(&mut lines, "  ", 4, &finding, width, 2),
                Detail::Full => lines.push(format!("  {finding}")),
            }
        }
        for text in lines {
            out.push_str(&text);
            out.push('\n');
        }
    }
    let degraded = degraded_lines(report, detail);
    if !degraded.is_empty() {
        out.push_str("degraded (below their own record; the start is not refused for it):\n");
        let mut lines = Vec::new();
        for text in degraded {
            match detail {
                Detail::Brief => wrap_hanging_into(&mut lines, "  ", 4, &text, width, 2),
                Detail::Full => lines.push(format!("  {text}")),
            }
        }
        for text in lines {
            out.push_str(&text);
            out.push('\n');
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

/// The most GPUs a brief line of degraded GPUs names; the rest are counted.
const BRIEF_DEGRADED: usize = 4;

/// The GPUs worse than their own record that do not fail their check: one line each in
/// full, one line per check in brief (the worst first, the rest counted), so the table
/// stays bounded at any GPU count.
fn degraded_lines(report: &RunReport, detail: Detail) -> Vec<String> {
    let mut lines = Vec::new();
    for check in &report.checks {
        let mut degraded: Vec<&EntityResult> = check.degraded().collect();
        if degraded.is_empty() {
            continue;
        }
        if detail == Detail::Full {
            lines.extend(
                degraded
                    .iter()
                    .map(|e| format!("{} degraded on {}: {}", check.name, e.entity, e.reason)),
            );
            continue;
        }
        let deficit = |e: &EntityResult| e.evidence.history.as_ref().map_or(0.0, |h| h.deficit_pct);
        degraded.sort_by(|a, b| deficit(b).total_cmp(&deficit(a)));
        let named: Vec<String> = degraded
            .iter()
            .take(BRIEF_DEGRADED)
            .map(|e| format!("{} {:.1}%", e.entity, deficit(e)))
            .collect();
        let more = degraded.len().saturating_sub(BRIEF_DEGRADED);
        let mut line = format!(
            "{} on {} GPU(s), worse than their own median by: {}",
            check.name,
            degraded.len(),
            named.join(", ")
        );
        if more > 0 {
            line.push_str(&format!(" and {more} more"));
        }
        lines.push(line);
    }
    lines
}

/// The most lines of ranks that only followed the first error.
const MAX_CONSEQUENCES: usize = 3;

/// The headline values of a check in a few words: the median and the range, `700
/// TFLOPS (420–700)`; the one value when they agree; `-` when none was measured.
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
    if values.len() == 1 || min == max {
        fmt_quantity(median, unit)
    } else {
        format!(
            "{} ({}–{})",
            fmt_quantity(median, unit),
            quantity_number(min, unit),
            quantity_number(max, unit)
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
    let degraded = check.degraded().count();
    let mut cell = format!(
        "{} of {} ok",
        check.entities.len() - bad - degraded,
        check.entities.len()
    );
    if degraded > 0 {
        cell.push_str(&format!(", {degraded} degraded"));
    }
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
