//! `gpuvet history NODE`: one node across jobs, from the store or a fleet server
//! (`--server`): its latest runs, each check's median over them as a text sparkline,
//! its findings and quarantines, and whether it is a repeat offender
//! (`gpuvet.repeat_offender`).

use comfy_table::Table;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use gpuvet_model::analysis::fmt_value;
use gpuvet_model::exit_codes;
use gpuvet_model::node_history::{CheckSeries, NodeHistory};
use gpuvet_model::time::format_utc_ms;

use crate::cli::HistoryArgs;
use crate::failure::Failure;
use crate::identity::load_config;
use crate::{output, record};

pub fn history(args: HistoryArgs) -> Result<i32, Failure> {
    let config = load_config(args.source.config.as_deref())?;
    let policy = config.settings.repeat_offender;
    let runs = args.runs as usize;
    let history = match record::server_reader(args.source.server.as_deref(), &config)? {
        Some(server) => server
            .node_history(&args.node, runs, &policy)
            .map_err(record::fetch_failed)?,
        None => record::open_existing(args.source.store.as_deref(), &config)?
            .node_history(&args.node, runs, &policy)?
            .ok_or_else(|| {
                Failure::usage(format!(
                    "the store has no run or quarantine of node `{}`",
                    args.node
                ))
                .with_hint("`gpuvet results` lists the nodes of a job's runs; or read a fleet server's with `--server URL`")
            })?,
    };
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&history).expect("a history serializes");
        text.push('\n');
        text
    } else {
        render(&history)
    };
    output::stdout(&text).map(|()| exit_codes::SUCCESS)
}

/// The history as text: a line on the node, then its checks, runs, findings and
/// quarantines.
fn render(history: &NodeHistory) -> String {
    let failed = history.runs.iter().filter(|r| r.run.node_failed).count();
    let mut out = format!(
        "node `{}`: {failed} of its last {} runs failed because of it",
        history.node,
        history.runs.len()
    );
    match &history.repeat_offender {
        Some(flag) => out.push_str(&format!("; {flag}\n")),
        None => out.push('\n'),
    }
    if !history.checks.is_empty() {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        table.set_header(["check", "latest", "oldest → newest"]);
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
            table.add_row([series.check.to_string(), latest, spark(series)]);
        }
        out.push_str(&format!("{table}\n"));
    }
    let mut runs = Table::new();
    runs.load_preset(UTF8_FULL_CONDENSED);
    runs.set_header([
        "started (UTC)",
        "job",
        "attempt",
        "outcome",
        "failed checks",
        "findings",
    ]);
    for stored in &history.runs {
        runs.add_row([
            format_utc_ms(stored.run.started_at_ms),
            stored.attempt.job_id.clone(),
            stored.attempt.attempt.to_string(),
            stored.run.outcome.as_str().to_owned(),
            format!("{} of {}", stored.run.failed_checks, stored.run.checks),
            stored.run.findings.to_string(),
        ]);
    }
    out.push_str(&format!("{runs}\n"));
    for finding in &history.findings {
        out.push_str(&format!(
            "finding {} {}/{} #{}: {} {} {:?}: {}\n",
            format_utc_ms(finding.started_at_ms),
            finding.job_id,
            finding.attempt,
            finding.run_id,
            finding.check,
            finding.entity,
            finding.verdict,
            finding.reason
        ));
    }
    for event in &history.quarantines {
        out.push_str(&format!(
            "{} {} {}\n",
            format_utc_ms(event.event.time_ms),
            event.event.kind,
            event.event.message
        ));
    }
    out
}

/// A check's medians over the runs as one character each, lowest `▁` to highest `█`,
/// `·` for a run that measured nothing (whether the run failed is in the runs table).
fn spark(series: &CheckSeries) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let values: Vec<f64> = series.points.iter().filter_map(|p| p.median).collect();
    let least = values.iter().copied().fold(f64::INFINITY, f64::min);
    let most = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    series
        .points
        .iter()
        .map(|p| match p.median {
            None => '·',
            Some(_) if most <= least => LEVELS[3],
            Some(v) => {
                let level = ((v - least) / (most - least) * 7.0).round() as usize;
                LEVELS[level.min(7)]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::catalog::CheckName;
    use gpuvet_model::node_history::CheckPoint;
    use gpuvet_model::results::CheckStatus;

    #[test]
    fn a_text_sparkline_has_one_character_per_run() {
        let point = |median| CheckPoint {
            run_id: 1,
            started_at_ms: 0,
            status: CheckStatus::Passed,
            median,
        };
        let series = CheckSeries {
            check: CheckName::GemmFlops,
            unit: "TFLOPS".into(),
            points: vec![
                point(Some(700.0)),
                point(None),
                point(Some(400.0)),
                point(Some(550.0)),
            ],
        };
        assert_eq!(spark(&series), "█·▁▅");
        let flat = CheckSeries {
            points: vec![point(Some(1.0)), point(Some(1.0))],
            ..series
        };
        assert_eq!(spark(&flat), "▄▄");
    }
}
