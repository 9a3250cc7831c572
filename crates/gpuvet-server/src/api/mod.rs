//! The JSON API under `/api/v1`: the reads of jobs, attempts, instances, runs,
//! per-check results, events, and an attempt's timeline and explanation ([`read`]),
//! nodes across jobs ranked by failures and one node's history ([`nodes`]),
//! and the pushes of attempts, reports and events ([`push`]).
//!
//! Lists take their filters as query parameters and answer `[]` when nothing matches;
//! one thing named by its id or name answers 404 when the store has no such thing.

pub(crate) mod nodes;
pub(crate) mod push;
pub(crate) mod read;

use axum::Router;
use axum::routing::{get, post};
use gpuvet_store::{Store, StoreError};

use crate::AppState;
use crate::error::ApiError;

/// The most items one list answers with.
pub const MAX_LIMIT: usize = 10_000;
/// Items a list answers with when no `limit` is given.
pub const DEFAULT_LIMIT: usize = 1_000;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/health", get(read::health))
        .route("/api/v1/jobs", get(read::list_jobs))
        .route("/api/v1/jobs/{job}", get(read::get_job))
        .route("/api/v1/jobs/{job}/attempts", get(read::list_attempts))
        .route("/api/v1/jobs/{job}/instances", get(read::list_instances))
        .route(
            "/api/v1/jobs/{job}/instances/{node}",
            get(read::get_instance),
        )
        .route("/api/v1/jobs/{job}/timeline", get(read::get_timeline))
        .route("/api/v1/jobs/{job}/explain", get(read::get_explanation))
        .route("/api/v1/jobs/{job}/bundle", get(read::get_bundle))
        .route("/api/v1/runs", get(read::list_runs))
        .route("/api/v1/runs/{run_id}", get(read::get_run))
        .route("/api/v1/results", get(read::list_results))
        .route("/api/v1/baselines", get(read::list_baselines))
        .route("/api/v1/nodes", get(nodes::list_nodes))
        .route("/api/v1/nodes/{node}", get(nodes::get_node))
        .route(
            "/api/v1/events",
            get(read::list_events).post(push::push_event),
        )
        .route("/api/v1/reports", post(push::push_report))
        .route("/api/v1/attempts", post(push::push_attempt))
        .route("/api/v1/session", post(crate::access::new_session_link))
        .route("/api/v1/openapi.json", get(crate::openapi::serve))
}

impl AppState {
    /// Runs `work` with a store handle on a blocking thread.
    pub(crate) async fn store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let pool = self.pool.clone();
        match tokio::task::spawn_blocking(move || pool.with(work)).await {
            Ok(result) => result.map_err(ApiError::from),
            Err(join) => Err(ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("a store request failed: {join}"),
            )),
        }
    }
}

pub(crate) fn limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n @ 1..=MAX_LIMIT) => Ok(n),
        Some(n) => Err(ApiError::bad_request(format!(
            "`limit` is {n}; it must be from 1 to {MAX_LIMIT}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_default_and_out_of_range_ones_are_named() {
        assert_eq!(limit(None).unwrap(), DEFAULT_LIMIT);
        assert_eq!(limit(Some(1)).unwrap(), 1);
        assert_eq!(limit(Some(MAX_LIMIT)).unwrap(), MAX_LIMIT);
        for bad in [0, MAX_LIMIT + 1] {
            let error = limit(Some(bad)).unwrap_err();
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(
                error.message.contains(&format!("`limit` is {bad}")),
                "{}",
                error.message
            );
        }
    }
}
