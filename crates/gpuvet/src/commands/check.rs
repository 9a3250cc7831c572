//! `gpuvet check`: run the sanity checks on this node and report.

use std::io::IsTerminal;

use gpuvet_core::events::Attempt;
use gpuvet_core::exit_codes;
use gpuvet_core::render;
use gpuvet_core::results::Outcome;
use gpuvet_push::Pusher;
use gpuvet_store::Store;

use crate::cli::CheckArgs;
use crate::failure::{Failure, warn};
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
        if let Some(pusher) = &pusher {
            send_now(store, pusher);
        }
    }
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

/// Sends the report (and whatever else is due) once; what fails stays in the outbox
/// for `gpuvet push` or the next command, and is said on stderr.
fn send_now(store: &mut Store, pusher: &Pusher) {
    match gpuvet_push::drain(store, pusher, unix_now_ms, false) {
        Ok(drained) => {
            if let Some(error) = drained.last_error {
                warn(format!(
                    "push: {error}; {} waiting in the outbox; `gpuvet push` sends them",
                    drained.waiting
                ));
            }
        }
        Err(error) => warn(format!("push: {error}")),
    }
}
