//! `gpuvet check`: run the sanity checks on this node and report.

use std::io::IsTerminal;

use gpuvet_analysis::render;
use gpuvet_model::exit_codes;
use gpuvet_model::results::Outcome;

use crate::cli::CheckArgs;
use crate::failure::Failure;
use crate::output;
use crate::sanity::{self, group};
use crate::settings::Recording;

pub fn check(args: CheckArgs) -> Result<i32, Failure> {
    let mut recording = Recording::resolve(
        args.sanity.config.as_deref(),
        &args.sanity.identity,
        &args.sanity.store,
    )?;
    let config = &recording.config;
    let sanity = sanity::sanity_settings(&args.sanity, config, true)?
        .expect("checks run by hand always have a set");
    let backend = sanity::backend(&args.sanity, config, &recording.identity.node)?;
    // Group flags are checked before anything is recorded.
    let mode = group::mode(&args.sanity.group)?;
    let (mut store, attempt) = recording.begin()?;

    // Sends the attempt now, so a server shows this node while its checks run, and
    // the report once recorded (its last round, when dropped at the end).
    let sending = recording.start_sending();
    let show_progress = !args.json && std::io::stdout().is_terminal();
    let mut report = sanity::execute(
        &args.sanity,
        mode,
        backend,
        &recording.config,
        &sanity,
        &attempt,
        show_progress,
        store.as_ref(),
    )?;
    sanity::flag_repeat_offender(
        store.as_ref(),
        &mut report,
        &recording.config.settings.repeat_offender,
    )?;
    if let Some(store) = store.as_mut() {
        store.record_report(&attempt, &report)?;
    }
    drop(sending);
    output::write_report_files(&args.sanity, &report)?;
    if args.json {
        output::stdout(&output::json(&report))?;
    } else {
        output::stdout(&render::table(
            &report,
            output::width(std::io::stdout().is_terminal()),
            output::detail(&args.sanity),
        ))?;
    }
    Ok(match report.outcome {
        Outcome::Passed => exit_codes::SUCCESS,
        Outcome::Incomplete => exit_codes::INCOMPLETE,
        Outcome::Failed => exit_codes::CHECK_FAILED,
    })
}
