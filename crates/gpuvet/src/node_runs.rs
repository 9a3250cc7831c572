//! One node's runs across jobs, read where they are kept: the store on this machine
//! (`--store`, the config's `gpuvet.store`), or a fleet server (`--server URL`) over its
//! API, as `timeline --server` reads (the node binary links no PostgreSQL driver). What
//! `gpuvet untaint` proves a node healthy by; and the record of what happened to a node
//! (a lifted quarantine, a Slurm job's end), kept and sent on.

use gpuvet_model::config::Config;
use gpuvet_model::events::{Attempt, EventKind, NewEvent};
use gpuvet_model::ids::new_id;
use gpuvet_model::overview::RunSummary;
use gpuvet_model::time::unix_now_ms;
use gpuvet_store::{RunFilter, StoredRun};

use crate::cli::NodeSourceArgs;
use crate::failure::{Failure, note, warn};
use crate::identity::{hostname, store_path};
use crate::record;

/// How many of a node's latest runs are read: enough for any `gpuvet.repeat_offender`
/// before a quarantine and the runs since.
pub const RUNS_READ: usize = 1_000;

/// The node's latest runs, the newest first, from the server `--server` names, else
/// from the store.
pub fn latest_runs(
    source: &NodeSourceArgs,
    config: &Config,
    node: &str,
) -> Result<Vec<StoredRun>, Failure> {
    match record::server_reader(source.server.as_deref(), config)? {
        Some(server) => server
            .node_runs(node, RUNS_READ)
            .map_err(record::fetch_failed),
        None => {
            let store = record::open_existing(source.store.as_deref(), config)?;
            Ok(store.runs(&RunFilter {
                node: Some(node.to_owned()),
                limit: Some(RUNS_READ),
                ..RunFilter::default()
            })?)
        }
    }
}

/// The summaries of `runs`, in their order.
pub fn summaries(runs: &[StoredRun]) -> Vec<RunSummary> {
    runs.iter().map(|stored| stored.run.clone()).collect()
}

/// Who runs this command, for the record: `$USER@host`, or `uid N@host` where no
/// user name is set (a container's shell).
pub fn who() -> String {
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        // SAFETY: getuid(2) cannot fail and touches no memory.
        .unwrap_or_else(|| format!("uid {}", unsafe { libc::getuid() }));
    format!("{user}@{}", hostname())
}

/// The `NodeUntainted` event of a lifted quarantine: an attempt of its own (job
/// `gpuvet-untaint`), with the node, who, why and the proof or `forced` in details.
pub fn untainted_event(
    node: &str,
    message: String,
    details: serde_json::Value,
) -> (Attempt, NewEvent) {
    let attempt = Attempt {
        job_id: UNTAINT_JOB.to_owned(),
        attempt: 1,
        node: node.to_owned(),
        instance: node.to_owned(),
    };
    let event = NewEvent {
        event_id: new_id(),
        time_ms: unix_now_ms(),
        kind: EventKind::NodeUntainted,
        lane: None,
        message,
        details,
    };
    (attempt, event)
}

/// The job the events of `gpuvet untaint` belong to.
pub const UNTAINT_JOB: &str = "gpuvet-untaint";

/// Records the event in the store (the config's, or `--store`), queued for the fleet
/// server when `gpuvet.report_to` names one, and sends it there at once; a failure
/// to record is a warning: what it records (a lifted taint or drain, a job's end) has
/// happened already.
pub fn record_and_send(
    source: &NodeSourceArgs,
    config: &Config,
    attempt: &Attempt,
    event: &NewEvent,
) {
    let path = store_path(source.store.as_deref().map(std::path::Path::new), config);
    let pusher = match crate::push::pusher(config, &[], &attempt.node) {
        Ok(pusher) => pusher,
        Err(failure) => {
            warn(format!(
                "the `{}` event is not pushed: {}",
                event.kind, failure.error
            ));
            None
        }
    };
    let recorded = crate::push::open_store(&path, pusher.is_some())
        .and_then(|mut store| store.record_event(attempt, event).map(|_| store));
    let mut store = match recorded {
        Ok(store) => store,
        Err(err) => {
            warn(format!(
                "the `{}` event is not recorded in the store `{}`: {err}",
                event.kind,
                path.display()
            ));
            return;
        }
    };
    note(format!(
        "recorded as a `{}` event in `{}`",
        event.kind,
        path.display()
    ));
    if let Some(pusher) = pusher {
        match gpuvet_push::drain(&mut store, &pusher, unix_now_ms, true) {
            Ok(drained) if drained.waiting == 0 => {}
            Ok(_) | Err(_) => warn(format!(
                "the `{}` event waits in the store's outbox; `gpuvet push` sends it",
                event.kind
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_untaint_event_names_the_node_in_a_job_of_its_own() {
        let (attempt, event) = untainted_event(
            "gpu-7",
            "lifted".into(),
            serde_json::json!({ "forced": true }),
        );
        assert_eq!(attempt.job_id, UNTAINT_JOB);
        assert_eq!(attempt.node, "gpu-7");
        assert_eq!(event.kind, EventKind::NodeUntainted);
        assert!(!event.event_id.is_empty());
        assert_eq!(event.details["forced"], true);
        assert!(who().contains('@'));
    }
}
