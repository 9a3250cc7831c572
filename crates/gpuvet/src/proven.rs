//! "Proven healthy first": a node gpuvet took out of service (drained in Slurm) goes
//! back only once a passing run on it is recorded after it was taken out. One function,
//! so that every command that lifts a quarantine asks the same question.

use gpuvet_model::results::Outcome;
use gpuvet_model::time::format_utc_ms;
use gpuvet_store::{RunFilter, Store, StoreError, StoredRun};

/// The newest passing run on `node` that started after `since_ms` (when the node was
/// taken out of service), from `store`; `Err` says in words why there is none. A
/// quarantine of unknown time is proven by no run, since none can be shown to follow it.
pub fn proven_healthy(
    store: &Store,
    node: &str,
    since_ms: Option<u64>,
) -> Result<Result<StoredRun, String>, StoreError> {
    let Some(since_ms) = since_ms else {
        return Ok(Err(format!(
            "the time node `{node}` was taken out of service is unknown, so no run can be \
             shown to follow it"
        )));
    };
    let latest = store
        .runs(&RunFilter {
            node: Some(node.to_owned()),
            outcome: Some(Outcome::Passed),
            limit: Some(1),
            ..RunFilter::default()
        })?
        .into_iter()
        .next();
    let since = format_utc_ms(since_ms);
    Ok(match latest {
        Some(run) if run.run.started_at_ms > since_ms => Ok(run),
        Some(run) => Err(format!(
            "the latest passing run on node `{node}` started at {}, before it was taken out \
             of service at {since}",
            format_utc_ms(run.run.started_at_ms)
        )),
        None => Err(format!(
            "the store has no passing run on node `{node}` after it was taken out of service \
             at {since}"
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::results::RunReport;
    use serde_json::json;

    const DRAINED_AT: u64 = 1_796_379_548_000;

    fn run(store: &mut Store, node: &str, outcome: &str, started_at_ms: u64) {
        let attempt = store
            .begin_attempt("job", node, "i", started_at_ms)
            .unwrap();
        let report: RunReport = serde_json::from_value(json!({
            "gpuvet_version": "0", "job_id": "job", "attempt": attempt.attempt,
            "node": node, "instance": "i", "backend": "sim", "devices": [],
            "started_at_ms": started_at_ms, "duration_secs": 1.0, "timeout_secs": 1.0,
            "outcome": outcome, "checks": [],
        }))
        .unwrap();
        store.record_report(&attempt, &report).unwrap();
    }

    #[test]
    fn only_a_passing_run_after_the_drain_proves_the_node() {
        let mut store = Store::open_in_memory().unwrap();
        let proof = |store: &Store| proven_healthy(store, "gpu-02", Some(DRAINED_AT)).unwrap();
        assert_eq!(
            proof(&store).unwrap_err(),
            "the store has no passing run on node `gpu-02` after it was taken out of service \
             at 2026-12-04T10:19:08.000Z"
        );
        run(&mut store, "gpu-02", "passed", DRAINED_AT - 1);
        assert!(
            proof(&store)
                .unwrap_err()
                .contains("before it was taken out of service")
        );
        run(&mut store, "gpu-02", "failed", DRAINED_AT + 1);
        run(&mut store, "gpu-03", "passed", DRAINED_AT + 1);
        assert!(
            proof(&store).is_err(),
            "a failed run, or another node's, proves nothing"
        );
        run(&mut store, "gpu-02", "passed", DRAINED_AT + 2);
        assert_eq!(proof(&store).unwrap().run.started_at_ms, DRAINED_AT + 2);
        // Without the drain's time nothing can be shown to follow it.
        assert!(
            proven_healthy(&store, "gpu-02", None)
                .unwrap()
                .unwrap_err()
                .contains("unknown")
        );
    }
}
