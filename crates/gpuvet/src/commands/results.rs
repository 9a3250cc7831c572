//! `gpuvet results`: per-check results from the store, by default of the job's latest
//! attempt, so a retry never mixes with the previous try.

use comfy_table::Table;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use gpuvet_model::analysis::fmt_value;
use gpuvet_model::catalog::CheckName;
use gpuvet_model::exit_codes;
use gpuvet_model::time::format_utc_ms;
use gpuvet_store::ResultFilter;

use super::events::open_existing;
use crate::cli::ResultsArgs;
use crate::failure::Failure;
use crate::identity::DEFAULT_JOB_ID;
use crate::output;

pub fn results(args: ResultsArgs) -> Result<i32, Failure> {
    let check = args
        .check
        .as_deref()
        .map(|name| {
            name.parse::<CheckName>().map_err(|err| {
                let failure = Failure::usage(format!("`--check`: unknown check `{}`", err.name));
                match err.suggestion {
                    Some(s) => failure.with_hint(format!("did you mean `{s}`?")),
                    None => failure.with_hint("`gpuvet checks` lists them"),
                }
            })
        })
        .transpose()?;
    let store = open_existing(args.config.as_deref(), args.store.store.as_deref())?;
    let job_id = args.job_id.unwrap_or_else(|| DEFAULT_JOB_ID.to_owned());
    let attempt = match (args.attempt, args.all_attempts) {
        (Some(attempt), _) => Some(attempt),
        (None, true) => None,
        (None, false) => store.latest_attempt(&job_id)?,
    };
    let filter = ResultFilter {
        job_id: Some(job_id.clone()),
        attempt,
        check,
        node: None,
    };
    let results = store.results(&filter)?;
    if args.json {
        let mut text = serde_json::to_string_pretty(&results).expect("results serialize");
        text.push('\n');
        return output::stdout(&text).map(|()| exit_codes::SUCCESS);
    }
    if results.is_empty() {
        output::stderr(&format!("no results for job `{job_id}`\n"));
        return Ok(exit_codes::SUCCESS);
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "started (UTC)",
        "job",
        "attempt",
        "node",
        "check",
        "status",
        "median",
        "findings",
    ]);
    for stored in &results {
        let result = &stored.result;
        let median = result
            .median_value()
            .map(|v| format!("{} {}", fmt_value(v), result.metric.unit))
            .unwrap_or_else(|| "-".into());
        let findings: Vec<String> = result
            .findings()
            .map(|f| format!("{}: {}", f.entity, f.reason))
            .collect();
        table.add_row([
            format_utc_ms(stored.started_at_ms),
            stored.attempt.job_id.clone(),
            stored.attempt.attempt.to_string(),
            stored.attempt.node.clone(),
            result.name.to_string(),
            result.status.to_string(),
            median,
            if findings.is_empty() {
                result.reason.clone().unwrap_or_else(|| "-".into())
            } else {
                findings.join("\n")
            },
        ]);
    }
    output::stdout(&format!("{table}\n")).map(|()| exit_codes::SUCCESS)
}
