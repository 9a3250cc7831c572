//! The pages of nodes across jobs: `/nodes`, the nodes ranked by failed runs in a
//! window with the repeat offenders flagged; and `/nodes/{node}`, one node's history:
//! its runs in every job, each check's figure over time as an SVG sparkline (the
//! median per run, a failed run's point marked), its findings, and its quarantines
//! with their lifting.
//!
//! Bounded whatever the store holds: the server reads at most as many nodes and runs
//! as it is asked for, and a sparkline draws one point per run.

use gpuvet_model::analysis::fmt_value;
use gpuvet_model::events::EventKind;
use gpuvet_model::node_history::{CheckSeries, NodeFailures, NodeHistory};
use gpuvet_model::offenders::{RepeatOffender, RepeatOffenderPolicy};

use crate::escape;
use crate::site::events::events_table;
use crate::site::layout::{Section, document};
use crate::site::{href, when};

/// A sparkline's size in its own units; it scales to the width of its cell.
const SPARK_WIDTH: f64 = 240.0;
const SPARK_HEIGHT: f64 = 40.0;
const SPARK_PAD: f64 = 4.0;

/// The nodes page: `nodes` as the server ranked them (runs since `since_ms`), with
/// the rule that flags repeat offenders.
pub fn nodes_page(
    nodes: &[NodeFailures],
    since_ms: u64,
    policy: &RepeatOffenderPolicy,
    now_ms: u64,
) -> String {
    let mut body = String::from("<h1>Nodes by failures</h1>\n");
    body.push_str(&format!(
        "<p class=\"summary\">Runs since {}; a node is a <strong>repeat offender</strong> \
         when {} of its last {} runs failed.</p>\n",
        when::utc_and_ago(since_ms, now_ms),
        policy.failures,
        policy.of_last
    ));
    if nodes.is_empty() {
        body.push_str("<p class=\"empty\">No node ran in this window.</p>\n");
        return document("gpuvet: nodes", Some(Section::Nodes), &body);
    }
    let offenders = nodes.iter().filter(|n| n.repeat_offender.is_some()).count();
    body.push_str(&format!(
        "<p class=\"count\">{} node(s), {offenders} repeat offender(s)</p>\n",
        nodes.len()
    ));
    body.push_str(
        "<table class=\"nodes-ranked\">\n<thead><tr><th>node</th><th>failed</th><th>runs</th>\
         <th>failed by others</th><th>passed</th><th>incomplete</th><th>last failure (UTC)</th><th>last run (UTC)</th>\
         <th>flag</th></tr></thead>\n<tbody>\n",
    );
    for node in nodes {
        let class = if node.repeat_offender.is_some() {
            " class=\"failed repeat-offender\""
        } else if node.failed > 0 {
            " class=\"incomplete\""
        } else {
            ""
        };
        body.push_str(&format!(
            "<tr{class} data-node=\"{name}\"><td><a href=\"{}\">{name}</a></td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(&href::node(&node.node)),
            node.failed,
            node.runs,
            node.failed_by_others,
            node.passed,
            node.incomplete,
            node.last_failed_at_ms
                .map_or_else(|| "-".to_owned(), when::utc),
            when::utc(node.last_run_at_ms),
            flag(node.repeat_offender.as_ref()),
            name = escape(&node.node),
        ));
    }
    body.push_str("</tbody>\n</table>\n");
    document("gpuvet: nodes", Some(Section::Nodes), &body)
}

fn flag(offender: Option<&RepeatOffender>) -> String {
    match offender {
        Some(offender) => format!(
            "<span class=\"status failed\" title=\"{}\">repeat offender</span>",
            escape(&offender.to_string())
        ),
        None => String::new(),
    }
}

/// One node's page.
pub fn node_page(history: &NodeHistory, policy: &RepeatOffenderPolicy, now_ms: u64) -> String {
    let node = &history.node;
    let mut body = format!(
        "<p class=\"back\"><a href=\"{}\">all nodes</a></p>\n<h1>Node <code>{}</code> {}</h1>\n",
        escape(&href::nodes()),
        escape(node),
        flag(history.repeat_offender.as_ref())
    );
    let failed = history.runs.iter().filter(|r| r.run.node_failed).count();
    let jobs: std::collections::BTreeSet<&str> = history
        .runs
        .iter()
        .map(|r| r.attempt.job_id.as_str())
        .collect();
    body.push_str(&format!(
        "<p class=\"summary\">{failed} of its last {} runs failed because of it, in {} \
         job(s); a repeat offender fails {} of its last {}.</p>\n",
        history.runs.len(),
        jobs.len(),
        policy.failures,
        policy.of_last
    ));
    if let Some(latest) = history.runs.first() {
        body.push_str(&format!(
            "<p class=\"ago\">latest run {}</p>\n",
            when::utc_and_ago(latest.run.started_at_ms, now_ms)
        ));
    }

    body.push_str("<h2>Checks over time</h2>\n");
    if history.checks.is_empty() {
        body.push_str("<p class=\"empty\">No check ran on this node.</p>\n");
    } else {
        body.push_str(
            "<table class=\"checks-over-time\">\n<thead><tr><th>check</th><th>latest</th>\
             <th>over its runs (oldest to newest)</th></tr></thead>\n<tbody>\n",
        );
        for series in &history.checks {
            let latest = series
                .points
                .iter()
                .rev()
                .find_map(|p| p.median)
                .map_or_else(
                    || "-".to_owned(),
                    |v| format!("{} {}", fmt_value(v), series.unit),
                );
            body.push_str(&format!(
                "<tr data-check=\"{check}\"><td>{check}</td><td>{}</td><td>{}</td></tr>\n",
                escape(&latest),
                sparkline(series),
                check = series.check.as_str(),
            ));
        }
        body.push_str("</tbody>\n</table>\n");
    }

    body.push_str("<h2>Runs across jobs</h2>\n");
    if history.runs.is_empty() {
        body.push_str("<p class=\"empty\">No run of this node is kept.</p>\n");
    } else {
        body.push_str(
            "<table class=\"node-runs\">\n<thead><tr><th>started (UTC)</th><th>job</th>\
             <th>attempt</th><th>outcome</th><th>failed checks</th><th>findings</th>\
             <th>report</th></tr></thead>\n<tbody>\n",
        );
        for stored in &history.runs {
            let (attempt, run) = (&stored.attempt, &stored.run);
            let outcome = run.outcome.as_str();
            body.push_str(&format!(
                "<tr class=\"{outcome}\"><td>{}</td><td><a href=\"{}\">{job}</a></td>\
                 <td>{}</td><td><span class=\"status {outcome}\">{outcome}</span></td>\
                 <td>{} of {}</td><td>{}</td><td><a href=\"{}\">report</a></td></tr>\n",
                when::utc(run.started_at_ms),
                escape(&href::instance(
                    &attempt.job_id,
                    &attempt.node,
                    Some(attempt.attempt)
                )),
                attempt.attempt,
                run.failed_checks,
                run.checks,
                run.findings,
                escape(&href::report(run.run_id)),
                job = escape(&attempt.job_id),
            ));
        }
        body.push_str("</tbody>\n</table>\n");
    }

    body.push_str("<h2>Findings</h2>\n");
    if history.findings.is_empty() {
        body.push_str("<p class=\"empty\">Its runs named nothing slow or faulty.</p>\n");
    } else {
        body.push_str(
            "<table class=\"node-findings\">\n<thead><tr><th>when (UTC)</th><th>entity</th>\
             <th>check</th><th>verdict</th><th>job</th><th>reason</th></tr></thead>\n<tbody>\n",
        );
        for finding in &history.findings {
            let verdict = crate::verdict_name(finding.verdict);
            body.push_str(&format!(
                "<tr class=\"{verdict}\"><td>{}</td><td>{}</td><td>{}</td>\
                 <td><span class=\"status {verdict}\">{verdict}</span></td><td>{}</td><td>{}</td></tr>\n",
                when::utc(finding.started_at_ms),
                escape(&finding.entity),
                finding.check.as_str(),
                escape(&format!("{} #{}", finding.job_id, finding.attempt)),
                escape(&finding.reason),
            ));
        }
        body.push_str("</tbody>\n</table>\n");
    }

    body.push_str("<h2>Quarantines</h2>\n");
    if history.quarantines.is_empty() {
        body.push_str("<p class=\"empty\">gpuvet never quarantined this node.</p>\n");
    } else {
        let lifted = history
            .quarantines
            .iter()
            .filter(|e| e.event.kind == EventKind::NodeUntainted)
            .count();
        body.push_str(&format!(
            "<p class=\"count\">{} quarantine(s), {lifted} lifted</p>\n",
            history.quarantines.len() - lifted
        ));
        body.push_str(&events_table(&history.quarantines));
    }
    document(&format!("gpuvet: node {node}"), Some(Section::Nodes), &body)
}

/// One check's medians over the runs as an inline SVG: a line through the measured
/// points, scaled between their least and greatest, each failed run's point marked.
pub fn sparkline(series: &CheckSeries) -> String {
    let measured: Vec<(usize, f64, bool)> = series
        .points
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            Some((
                i,
                p.median.filter(|v| v.is_finite())?,
                p.status.is_failure(),
            ))
        })
        .collect();
    let title = format!(
        "{} over {} run(s) ({})",
        series.check.as_str(),
        series.points.len(),
        series.unit
    );
    let mut out = format!(
        "<svg class=\"chart spark\" viewBox=\"0 0 {SPARK_WIDTH} {SPARK_HEIGHT}\" role=\"img\" \
         xmlns=\"http://www.w3.org/2000/svg\"><title>{}</title>",
        escape(&title)
    );
    if measured.is_empty() {
        out.push_str(&format!(
            "<text class=\"caption\" x=\"{SPARK_PAD}\" y=\"{}\">no figure</text></svg>",
            SPARK_HEIGHT / 2.0
        ));
        return out;
    }
    let least = measured.iter().map(|m| m.1).fold(f64::INFINITY, f64::min);
    let most = measured
        .iter()
        .map(|m| m.1)
        .fold(f64::NEG_INFINITY, f64::max);
    let span = (most - least).max(f64::EPSILON);
    let slots = series.points.len().saturating_sub(1).max(1) as f64;
    let x = |i: usize| SPARK_PAD + (SPARK_WIDTH - 2.0 * SPARK_PAD) * i as f64 / slots;
    let y = |v: f64| {
        if most == least {
            SPARK_HEIGHT / 2.0
        } else {
            SPARK_HEIGHT - SPARK_PAD - (SPARK_HEIGHT - 2.0 * SPARK_PAD) * (v - least) / span
        }
    };
    let points: Vec<String> = measured
        .iter()
        .map(|&(i, v, _)| format!("{:.1},{:.1}", x(i), y(v)))
        .collect();
    out.push_str(&format!(
        "<polyline class=\"profile\" points=\"{}\"/>",
        points.join(" ")
    ));
    for &(i, v, failed) in &measured {
        let class = if failed { "dot faulty" } else { "dot ok" };
        out.push_str(&format!(
            "<circle class=\"{class}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\"/>",
            x(i),
            y(v)
        ));
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::catalog::CheckName;
    use gpuvet_model::events::{Attempt, Event, NewEvent};
    use gpuvet_model::node_history::{CheckPoint, NodeFinding};
    use gpuvet_model::overview::{RunSummary, StoredRun};
    use gpuvet_model::results::{CheckStatus, Outcome, Verdict};

    const NOW: u64 = 1_764_673_200_000;
    const HOSTILE: &str = "n<1>&\"x\"";

    fn point(run_id: i64, median: Option<f64>, status: CheckStatus) -> CheckPoint {
        CheckPoint {
            run_id,
            started_at_ms: NOW - 1_000 * (10 - run_id as u64),
            status,
            median,
        }
    }

    fn series(points: Vec<CheckPoint>) -> CheckSeries {
        CheckSeries {
            check: CheckName::GemmFlops,
            unit: "TFLOPS".into(),
            points,
        }
    }

    #[test]
    fn a_sparkline_draws_one_point_per_measured_run_and_marks_the_failed() {
        let svg = sparkline(&series(vec![
            point(1, Some(700.0), CheckStatus::Passed),
            point(2, Some(400.0), CheckStatus::Failed),
            point(3, None, CheckStatus::NotRun),
            point(4, Some(710.0), CheckStatus::Passed),
        ]));
        assert!(svg.starts_with("<svg class=\"chart spark\""), "{svg}");
        assert!(
            svg.contains("<title>gemm_flops over 4 run(s) (TFLOPS)</title>"),
            "{svg}"
        );
        assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
        assert_eq!(svg.matches("class=\"dot faulty\"").count(), 1, "{svg}");
        // The least value at the bottom, the greatest at the top, x by run (the third
        // run, unmeasured, keeps its place).
        assert!(
            svg.contains("points=\"4.0,5.0 81.3,36.0 236.0,4.0\""),
            "{svg}"
        );
        assert!(svg.contains("cx=\"81.3\" cy=\"36.0\""), "{svg}");
        assert!(svg.contains("cx=\"236.0\" cy=\"4.0\""), "{svg}");
        // Nothing measured: said, not drawn.
        let empty = sparkline(&series(vec![point(1, None, CheckStatus::Skipped)]));
        assert!(
            empty.contains("no figure") && !empty.contains("<polyline"),
            "{empty}"
        );
        // One value throughout: a flat line at mid-height.
        let flat = sparkline(&series(vec![
            point(1, Some(5.0), CheckStatus::Passed),
            point(2, Some(5.0), CheckStatus::Passed),
        ]));
        assert!(flat.contains("points=\"4.0,20.0 236.0,20.0\""), "{flat}");
    }

    fn history() -> NodeHistory {
        let attempt = |job: &str| Attempt {
            job_id: job.into(),
            attempt: 2,
            node: HOSTILE.into(),
            instance: "pod".into(),
        };
        let run = |id: i64, job: &str, outcome: Outcome| StoredRun {
            attempt: attempt(job),
            run: RunSummary {
                run_id: id,
                report_id: String::new(),
                outcome,
                backend: "sim".into(),
                started_at_ms: NOW - 60_000 * (10 - id as u64),
                duration_secs: Some(2.0),
                checks: 1,
                failed_checks: u32::from(outcome == Outcome::Failed),
                findings: u32::from(outcome == Outcome::Failed),
                node_failed: outcome == Outcome::Failed,
            },
        };
        NodeHistory {
            node: HOSTILE.into(),
            runs: vec![
                run(3, "job-b", Outcome::Failed),
                run(2, "job-a", Outcome::Passed),
            ],
            checks: vec![series(vec![
                point(2, Some(700.0), CheckStatus::Passed),
                point(3, Some(400.0), CheckStatus::Failed),
            ])],
            findings: vec![NodeFinding {
                run_id: 3,
                job_id: "job-b".into(),
                attempt: 2,
                started_at_ms: NOW - 60_000,
                check: CheckName::GemmFlops,
                entity: format!("{HOSTILE}/dev1"),
                verdict: Verdict::Slow,
                reason: "<b>43% below</b>".into(),
            }],
            quarantines: vec![Event {
                id: 9,
                attempt: attempt("gpuvet-untaint"),
                event: NewEvent {
                    event_id: "e".into(),
                    time_ms: NOW,
                    kind: EventKind::NodeUntainted,
                    lane: None,
                    message: "lifted".into(),
                    details: serde_json::json!({}),
                },
                count: 1,
                last_seen_ms: None,
            }],
            repeat_offender: Some(RepeatOffender {
                failed: 3,
                of_last: 5,
            }),
        }
    }

    #[test]
    fn the_node_page_shows_runs_across_jobs_figures_findings_and_quarantines() {
        let html = node_page(&history(), &RepeatOffenderPolicy::default(), NOW);
        assert!(
            !html.contains(HOSTILE) && !html.contains("<b>"),
            "unescaped: {html}"
        );
        assert!(
            html.contains("<code>n&lt;1&gt;&amp;&quot;x&quot;</code>"),
            "{html}"
        );
        assert!(html.contains(">repeat offender</span>"), "{html}");
        assert!(
            html.contains("1 of its last 2 runs failed because of it, in 2 job(s)"),
            "{html}"
        );
        assert!(
            html.contains("<tr data-check=\"gemm_flops\"><td>gemm_flops</td><td>400 TFLOPS"),
            "{html}"
        );
        assert_eq!(html.matches("<svg class=\"chart spark\"").count(), 1);
        assert!(
            html.contains("job-b</a>") && html.contains("job-a</a>"),
            "{html}"
        );
        assert!(html.contains("href=\"/reports/3.html\""), "{html}");
        assert!(html.contains("43% below"), "{html}");
        assert!(html.contains("0 quarantine(s), 1 lifted"), "{html}");
        assert!(html.contains("NodeUntainted"), "{html}");
        assert!(
            html.contains("href=\"/nodes\" aria-current=\"page\""),
            "{html}"
        );
    }

    #[test]
    fn the_nodes_page_ranks_and_flags_and_says_when_there_is_none() {
        let nodes = [
            NodeFailures {
                node: HOSTILE.into(),
                runs: 5,
                failed: 3,
                failed_by_others: 0,
                passed: 2,
                incomplete: 0,
                last_run_at_ms: NOW,
                last_failed_at_ms: Some(NOW - 1_000),
                repeat_offender: Some(RepeatOffender {
                    failed: 3,
                    of_last: 5,
                }),
            },
            NodeFailures {
                node: "n2".into(),
                runs: 2,
                failed: 0,
                failed_by_others: 0,
                passed: 2,
                incomplete: 0,
                last_run_at_ms: NOW,
                last_failed_at_ms: None,
                repeat_offender: None,
            },
        ];
        let policy = RepeatOffenderPolicy::default();
        let html = nodes_page(&nodes, NOW - 3_600_000, &policy, NOW);
        assert!(!html.contains(HOSTILE), "unescaped: {html}");
        assert!(html.contains("2 node(s), 1 repeat offender(s)"), "{html}");
        assert!(html.contains("when 3 of its last 5 runs failed"), "{html}");
        assert_eq!(
            html.matches("<tr class=\"failed repeat-offender\"").count(),
            1
        );
        assert!(
            html.contains("href=\"/nodes/n%3C1%3E%26%22x%22\""),
            "{html}"
        );
        let first = html.find("n&lt;1&gt;").unwrap();
        assert!(first < html.find(">n2<").unwrap(), "ranked as given");
        let empty = nodes_page(&[], NOW, &policy, NOW);
        assert!(empty.contains("No node ran in this window."), "{empty}");
    }
}
