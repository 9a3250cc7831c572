//! The API's reads of nodes across jobs: the nodes ranked by failed runs in a window,
//! and one node's history (its runs, each check's figures over time, findings,
//! quarantines), each with its repeat-offender flag (`failures` of its last `of_last`
//! runs failed).

// utoipa's `params(...)` expansion names each query type by a path the lint calls
// redundant.
#![allow(unused_qualifications)]

use axum::Json;
use axum::extract::State;
use gpuvet_model::offenders::{MAX_OF_LAST, RepeatOffenderPolicy};
use gpuvet_store::{NodeFailures, NodeHistory};
use serde::Deserialize;
use utoipa::IntoParams;

use super::limit;
use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Path, Query};

/// The window of the ranking when no `since_ms` is given: the last 7 days.
pub const DEFAULT_WINDOW_MS: u64 = 7 * 24 * 3_600_000;
/// A node's runs its history holds when no `limit` is given.
pub const DEFAULT_HISTORY_RUNS: usize = 100;

/// The repeat-offender rule a request asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PolicyQuery {
    failures: Option<u32>,
    of_last: Option<u32>,
}

impl PolicyQuery {
    pub(crate) fn new(failures: Option<u32>, of_last: Option<u32>) -> PolicyQuery {
        PolicyQuery { failures, of_last }
    }

    pub(crate) fn policy(self) -> Result<RepeatOffenderPolicy, ApiError> {
        let defaults = RepeatOffenderPolicy::default();
        let of_last = self.of_last.unwrap_or(defaults.of_last);
        if !(1..=MAX_OF_LAST).contains(&of_last) {
            return Err(ApiError::bad_request(format!(
                "`of_last` is {of_last}; it must be from 1 to {MAX_OF_LAST}"
            )));
        }
        let failures = self.failures.unwrap_or(defaults.failures.min(of_last));
        if !(1..=of_last).contains(&failures) {
            return Err(ApiError::bad_request(format!(
                "`failures` is {failures}; it must be from 1 to `of_last` ({of_last})"
            ))
            .with_hint("a node is flagged when `failures` of its last `of_last` runs failed"));
        }
        Ok(RepeatOffenderPolicy { failures, of_last })
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodesQuery {
    /// Unix milliseconds: count the runs that started at or after this time (default:
    /// the last 7 days).
    since_ms: Option<u64>,
    /// K: failed runs, of a node's last `of_last`, that flag it as a repeat offender
    /// (1 to `of_last`; default 3).
    #[param(minimum = 1, maximum = 100)]
    failures: Option<u32>,
    /// M: how many of a node's latest runs are looked at (1 to 100; default 5).
    #[param(minimum = 1, maximum = 100)]
    of_last: Option<u32>,
    /// At most this many nodes (1 to 10000; default 1000).
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<usize>,
}

impl NodesQuery {
    pub(crate) fn new(
        since_ms: Option<u64>,
        failures: Option<u32>,
        of_last: Option<u32>,
    ) -> NodesQuery {
        NodesQuery {
            since_ms,
            failures,
            of_last,
            limit: None,
        }
    }
}

/// The ranking `query` asks for, as the API and the `/nodes` page answer it.
pub(crate) async fn ranked(
    state: &AppState,
    query: NodesQuery,
) -> Result<(u64, RepeatOffenderPolicy, Vec<NodeFailures>), ApiError> {
    let policy = PolicyQuery {
        failures: query.failures,
        of_last: query.of_last,
    }
    .policy()?;
    let limit = limit(query.limit)?;
    let since_ms = query
        .since_ms
        .unwrap_or_else(|| gpuvet_model::time::unix_now_ms().saturating_sub(DEFAULT_WINDOW_MS));
    let nodes = state
        .store(move |store| store.nodes_by_failures(since_ms, &policy, limit))
        .await?;
    Ok((since_ms, policy, nodes))
}

#[utoipa::path(get, path = "/api/v1/nodes", tag = "nodes", params(NodesQuery),
    responses((status = 200, description = "The nodes with runs in the window, the most failed runs first, each flagged when it is a repeat offender", body = [NodeFailures]),
              (status = 400, body = ErrorBody)))]
pub(crate) async fn list_nodes(
    State(state): State<AppState>,
    Query(query): Query<NodesQuery>,
) -> Result<Json<Vec<NodeFailures>>, ApiError> {
    Ok(Json(ranked(&state, query).await?.2))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    /// The node's latest runs to hold (1 to 10000; default 100).
    #[param(minimum = 1, maximum = 10000)]
    pub(crate) limit: Option<usize>,
    /// K: failed runs, of its last `of_last`, that flag it (1 to `of_last`; default 3).
    #[param(minimum = 1, maximum = 100)]
    pub(crate) failures: Option<u32>,
    /// M: how many of its latest runs are looked at (1 to 100; default 5).
    #[param(minimum = 1, maximum = 100)]
    pub(crate) of_last: Option<u32>,
}

/// `node`'s history as `query` asks for it; a 404 when the store has none.
pub(crate) async fn history(
    state: &AppState,
    node: String,
    query: HistoryQuery,
) -> Result<NodeHistory, ApiError> {
    let policy = PolicyQuery {
        failures: query.failures,
        of_last: query.of_last,
    }
    .policy()?;
    let runs = match query.limit {
        None => DEFAULT_HISTORY_RUNS,
        given => limit(given)?,
    };
    let lookup = node.clone();
    state
        .store(move |store| store.node_history(&lookup, runs, &policy))
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no run or quarantine of node `{node}` in the store"
            ))
            .with_hint("list the nodes with runs at /api/v1/nodes")
        })
}

#[utoipa::path(get, path = "/api/v1/nodes/{node}", tag = "nodes",
    params(("node" = String, Path, description = "The node's name"), HistoryQuery),
    responses((status = 200, description = "The node across jobs: its latest runs, each check's figures over them, its findings, quarantines and their lifting, and its repeat-offender flag", body = NodeHistory),
              (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn get_node(
    State(state): State<AppState>,
    Path(node): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<NodeHistory>, ApiError> {
    Ok(Json(history(&state, node, query).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_defaults_and_out_of_range_values_are_named() {
        let policy = |failures, of_last| PolicyQuery { failures, of_last }.policy();
        assert_eq!(policy(None, None).unwrap(), RepeatOffenderPolicy::default());
        assert_eq!(
            policy(None, Some(2)).unwrap(),
            RepeatOffenderPolicy {
                failures: 2,
                of_last: 2
            }
        );
        for (failures, of_last, words) in [
            (None, Some(0), "`of_last` is 0"),
            (None, Some(101), "`of_last` is 101"),
            (Some(0), None, "`failures` is 0"),
            (
                Some(6),
                Some(5),
                "`failures` is 6; it must be from 1 to `of_last` (5)",
            ),
        ] {
            let error = policy(failures, of_last).unwrap_err();
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(error.message.contains(words), "{}", error.message);
        }
    }
}
