//! `gpuvet check`: run the sanity checks on this node and report.

use std::io::IsTerminal;

use gpuvet_core::events::Attempt;
use gpuvet_core::exit_codes;
use gpuvet_core::render;
use gpuvet_core::results::Outcome;

use crate::cli::CheckArgs;
use crate::failure::Failure;
use crate::identity::{Identity, load_config, store_path};
use crate::output;
use crate::push;
use crate::sanity::{self, group};
use gpuvet_core::time::unix_now_ms;

pub fn check(args: CheckArgs) -> Result<i32, Failure> {
    let config = load_config(args.sanity.config.as_deref())?;
    let sanity = sanity::sanity_settings(&args.sanity, &config, true)?
        .expect("checks run by hand always have a set");
    let backend = sanity::backend(&args.sanity, &config)?;
    // Group flags are checked before anything is recorded.
    let mode = group::mode(&args.sanity.group)?;
    let identity = Identity::resolve(&args.sanity.identity);

    // Without a store there is no outbox, so nothing is pushed either.
    let pusher = (!args.no_store)
        .then(|| push::pusher(&config, None))
        .flatten();
    let mut store = if args.no_store {
        None
    } else {
        Some(push::open_store(
            &store_path(args.sanity.store.store.as_deref(), &config),
            pusher.is_some(),
        )?)
    };
    let attempt = match store.as_mut() {
        Some(store) => store.begin_attempt(
            &identity.job_id,
            &identity.node,
            &identity.instance,
            unix_now_ms(),
        )?,
        None => Attempt {
            job_id: identity.job_id,
            attempt: 1,
            node: identity.node,
            instance: identity.instance,
        },
    };

    // Sends the attempt now, so a server shows this node while its checks run, and
    // the report once recorded (its last round, when dropped at the end).
    let sending = match &store {
        Some(store) if pusher.is_some() => store
            .path()
            .map(|path| push::Background::start(path, pusher)),
        _ => None,
    };
    let show_progress = !args.json && std::io::stdout().is_terminal();
    let report = sanity::execute(
        &args.sanity,
        mode,
        backend,
        &config,
        &sanity,
        &attempt,
        show_progress,
    )?;
    if let Some(store) = store.as_mut() {
        store.record_report(&attempt, &report)?;
    }
    drop(sending);
    output::write_report_files(&args.sanity, &report)?;
    if args.json {
        output::stdout(&output::json(&report))?;
    } else {
        output::stdout(&render::table(&report, None, output::detail(&args.sanity)))?;
    }
    Ok(match report.outcome {
        Outcome::Passed => exit_codes::SUCCESS,
        Outcome::Incomplete => exit_codes::INCOMPLETE,
        Outcome::Failed => exit_codes::CHECK_FAILED,
    })
}
