//! The JSON API under `/api/v1`: jobs, attempts, instances, runs, per-check results and
//! events to read, and reports and events to push.
//!
//! Lists take their filters as query parameters and answer `[]` when nothing matches;
//! one thing named by its id or name answers 404 when the store has no such thing.

// utoipa's `params(...)` expansion names each query type by a path the lint calls
// redundant.
#![allow(unused_qualifications)]

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use gpuvet_core::catalog::CheckName;
use gpuvet_core::events::{Attempt, AttemptStart, Event, EventKind, EventRecord};
use gpuvet_core::overview::{InstanceSummary, JobSummary};
use gpuvet_core::results::{Outcome, RunReport};
use gpuvet_store::{
    EventFilter, ResultFilter, RunFilter, Store, StoreError, StoredResult, StoredRun,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::auth::require_token;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{JsonBody, Path, Query, refuse_nul_in};

/// The most items one list answers with.
pub const MAX_LIMIT: usize = 10_000;
/// Items a list answers with when no `limit` is given.
pub const DEFAULT_LIMIT: usize = 1_000;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/health", get(health))
        .route("/api/v1/jobs", get(list_jobs))
        .route("/api/v1/jobs/{job}", get(get_job))
        .route("/api/v1/jobs/{job}/attempts", get(list_attempts))
        .route("/api/v1/jobs/{job}/instances", get(list_instances))
        .route("/api/v1/jobs/{job}/instances/{node}", get(get_instance))
        .route("/api/v1/runs", get(list_runs))
        .route("/api/v1/runs/{run_id}", get(get_run))
        .route("/api/v1/results", get(list_results))
        .route("/api/v1/events", get(list_events).post(push_event))
        .route("/api/v1/reports", post(push_report))
        .route("/api/v1/attempts", post(push_attempt))
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

    /// Like [`AppState::store`], for a write: it waits for its turn among writers.
    pub(crate) async fn store_write<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let _turn = self.writers.acquire().await.map_err(|closed| {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                format!("the server is shutting down: {closed}"),
            )
        })?;
        self.store(work).await
    }
}

/// The server is up and its store answers.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// Always `ok`.
    status: &'static str,
    /// The version of gpuvet serving.
    version: &'static str,
}

#[utoipa::path(get, path = "/api/v1/health", tag = "server",
    responses((status = 200, body = Health), (status = 500, body = ErrorBody)))]
pub(crate) async fn health(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state.store(|store| store.latest_attempt("")).await?;
    Ok(Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    }))
}

#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs",
    responses((status = 200, description = "Every job, the most recently started first", body = [JobSummary])))]
pub(crate) async fn list_jobs(
    State(state): State<AppState>,
) -> Result<Json<Vec<JobSummary>>, ApiError> {
    Ok(Json(state.store(|store| store.jobs()).await?))
}

#[utoipa::path(get, path = "/api/v1/jobs/{job}", tag = "jobs",
    params(("job" = String, Path, description = "The job's id")),
    responses((status = 200, body = JobSummary), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn get_job(
    State(state): State<AppState>,
    Path(job): Path<String>,
) -> Result<Json<JobSummary>, ApiError> {
    let lookup = job.clone();
    state
        .store(move |store| store.job(&lookup))
        .await?
        .map(Json)
        .ok_or_else(|| unknown_job(&job))
}

fn unknown_job(job: &str) -> ApiError {
    ApiError::not_found(format!("no job `{job}` in the store"))
        .with_hint("list the jobs at /api/v1/jobs")
}

/// One attempt of a job, over every node that made it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub(crate) struct AttemptSummary {
    pub attempt: u32,
    pub nodes: u32,
    pub passed: u32,
    pub failed: u32,
    pub incomplete: u32,
    /// Nodes with no report yet in this attempt.
    pub running: u32,
    /// Unix milliseconds of the earliest start of this attempt on any node.
    pub started_at_ms: u64,
}

impl AttemptSummary {
    fn of(attempt: u32, instances: &[InstanceSummary]) -> Self {
        let count = |status: &str| instances.iter().filter(|i| i.status() == status).count() as u32;
        AttemptSummary {
            attempt,
            nodes: instances.len() as u32,
            passed: count(Outcome::Passed.as_str()),
            failed: count(Outcome::Failed.as_str()),
            incomplete: count(Outcome::Incomplete.as_str()),
            running: count("running"),
            started_at_ms: instances
                .iter()
                .map(|i| i.attempt_started_at_ms)
                .min()
                .unwrap_or(0),
        }
    }
}

#[utoipa::path(get, path = "/api/v1/jobs/{job}/attempts", tag = "jobs",
    params(("job" = String, Path, description = "The job's id")),
    responses((status = 200, description = "The job's attempts, the first first", body = [AttemptSummary]),
              (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn list_attempts(
    State(state): State<AppState>,
    Path(job): Path<String>,
) -> Result<Json<Vec<AttemptSummary>>, ApiError> {
    let lookup = job.clone();
    let attempts = state
        .store(move |store| {
            let Some(latest) = store.latest_attempt(&lookup)? else {
                return Ok(None);
            };
            let mut attempts = Vec::new();
            for attempt in 1..=latest {
                let instances = store.instances(&lookup, Some(attempt))?;
                if !instances.is_empty() {
                    attempts.push(AttemptSummary::of(attempt, &instances));
                }
            }
            Ok(Some(attempts))
        })
        .await?;
    attempts.map(Json).ok_or_else(|| unknown_job(&job))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AttemptQuery {
    /// An attempt by number; without it, each node's latest attempt.
    attempt: Option<u32>,
}

#[utoipa::path(get, path = "/api/v1/jobs/{job}/instances", tag = "jobs",
    params(("job" = String, Path, description = "The job's id"), AttemptQuery),
    responses((status = 200, description = "The job's instances by node name", body = [InstanceSummary]),
              (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn list_instances(
    State(state): State<AppState>,
    Path(job): Path<String>,
    Query(query): Query<AttemptQuery>,
) -> Result<Json<Vec<InstanceSummary>>, ApiError> {
    let lookup = job.clone();
    let found = state
        .store(move |store| {
            let instances = store.instances(&lookup, query.attempt)?;
            let known = !instances.is_empty() || store.job(&lookup)?.is_some();
            Ok(known.then_some(instances))
        })
        .await?;
    found.map(Json).ok_or_else(|| unknown_job(&job))
}

#[utoipa::path(get, path = "/api/v1/jobs/{job}/instances/{node}", tag = "jobs",
    params(("job" = String, Path, description = "The job's id"),
           ("node" = String, Path, description = "The node's name"), AttemptQuery),
    responses((status = 200, body = InstanceSummary), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn get_instance(
    State(state): State<AppState>,
    Path((job, node)): Path<(String, String)>,
    Query(query): Query<AttemptQuery>,
) -> Result<Json<InstanceSummary>, ApiError> {
    let (lookup_job, lookup_node) = (job.clone(), node.clone());
    state
        .store(move |store| store.instance(&lookup_job, &lookup_node, query.attempt))
        .await?
        .map(Json)
        .ok_or_else(|| {
            let attempt = query
                .attempt
                .map_or_else(String::new, |a| format!(" in attempt {a}"));
            ApiError::not_found(format!(
                "no instance of job `{job}` on node `{node}`{attempt}"
            ))
            .with_hint(format!(
                "list the job's instances at /api/v1/jobs/{job}/instances"
            ))
        })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunQuery {
    job: Option<String>,
    attempt: Option<u32>,
    node: Option<String>,
    outcome: Option<Outcome>,
    /// At most this many, the newest first (1 to 10000; default 1000).
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", params(RunQuery),
    responses((status = 200, description = "Runs without their reports, the newest first", body = [StoredRun]),
              (status = 400, body = ErrorBody)))]
pub(crate) async fn list_runs(
    State(state): State<AppState>,
    Query(query): Query<RunQuery>,
) -> Result<Json<Vec<StoredRun>>, ApiError> {
    let filter = RunFilter {
        job_id: query.job,
        attempt: query.attempt,
        node: query.node,
        outcome: query.outcome,
        limit: Some(limit(query.limit)?),
    };
    Ok(Json(state.store(move |store| store.runs(&filter)).await?))
}

/// One run with its whole report.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RunDetail {
    run_id: i64,
    #[serde(flatten)]
    attempt: Attempt,
    report: RunReport,
}

#[utoipa::path(get, path = "/api/v1/runs/{run_id}", tag = "runs",
    params(("run_id" = i64, Path, description = "The store's id of the run")),
    responses((status = 200, body = RunDetail), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn get_run(
    State(state): State<AppState>,
    Path(run_id): Path<i64>,
) -> Result<Json<RunDetail>, ApiError> {
    state
        .store(move |store| store.run(run_id))
        .await?
        .map(|(attempt, report)| {
            Json(RunDetail {
                run_id,
                attempt,
                report,
            })
        })
        .ok_or_else(|| {
            ApiError::not_found(format!("no run `{run_id}` in the store"))
                .with_hint("list the runs at /api/v1/runs")
        })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResultQuery {
    job: Option<String>,
    attempt: Option<u32>,
    /// A check's name from the catalog, e.g. `gemm_flops`.
    check: Option<CheckName>,
    node: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/results", tag = "runs", params(ResultQuery),
    responses((status = 200, description = "Per-check results with their entities and findings", body = [StoredResult]),
              (status = 400, body = ErrorBody)))]
pub(crate) async fn list_results(
    State(state): State<AppState>,
    Query(query): Query<ResultQuery>,
) -> Result<Json<Vec<StoredResult>>, ApiError> {
    let filter = ResultFilter {
        job_id: query.job,
        attempt: query.attempt,
        check: query.check,
        node: query.node,
    };
    Ok(Json(
        state.store(move |store| store.results(&filter)).await?,
    ))
}

/// Which end of the time range a list starts from.
#[derive(Debug, Clone, Copy, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Order {
    #[default]
    Oldest,
    Newest,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventQuery {
    /// An event type, e.g. `SanityCheckFailed`.
    kind: Option<EventKind>,
    job: Option<String>,
    attempt: Option<u32>,
    node: Option<String>,
    /// Unix milliseconds: events at or after this time.
    since_ms: Option<u64>,
    /// Unix milliseconds: events before this time.
    until_ms: Option<u64>,
    /// At most this many (1 to 10000; default 1000).
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<usize>,
    /// `oldest` (the default) or `newest` first.
    order: Option<Order>,
}

impl EventQuery {
    pub(crate) fn filter(self) -> Result<EventFilter, ApiError> {
        if let (Some(since), Some(until)) = (self.since_ms, self.until_ms)
            && since > until
        {
            return Err(ApiError::bad_request(format!(
                "`since_ms` ({since}) is after `until_ms` ({until})"
            )));
        }
        Ok(EventFilter {
            job_id: self.job,
            attempt: self.attempt,
            kind: self.kind,
            node: self.node,
            since_ms: self.since_ms,
            until_ms: self.until_ms,
            limit: Some(limit(self.limit)?),
            newest_first: matches!(self.order, Some(Order::Newest)),
        })
    }
}

#[utoipa::path(get, path = "/api/v1/events", tag = "events", params(EventQuery),
    responses((status = 200, description = "Deployment events in time order", body = [Event]),
              (status = 400, body = ErrorBody)))]
pub(crate) async fn list_events(
    State(state): State<AppState>,
    Query(query): Query<EventQuery>,
) -> Result<Json<Vec<Event>>, ApiError> {
    let filter = query.filter()?;
    Ok(Json(state.store(move |store| store.events(&filter)).await?))
}

fn limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n @ 1..=MAX_LIMIT) => Ok(n),
        Some(n) => Err(ApiError::bad_request(format!(
            "`limit` is {n}; it must be from 1 to {MAX_LIMIT}"
        ))),
    }
}

/// The schema of `POST /api/v1/reports`'s body: a report whose `report_id` is
/// required, since the server stores a report once per id. The body is read as a
/// [`RunReport`]; this type only describes it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReportPush {
    /// The report's own id.
    #[schema(min_length = 1)]
    report_id: String,
    #[serde(flatten)]
    report: RunReport,
}

/// The schema of `POST /api/v1/events`'s body: an event whose `event_id` is required.
/// The body is read as an [`EventRecord`]; this type only describes it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventPush {
    /// The event's own id.
    #[schema(min_length = 1)]
    event_id: String,
    #[serde(flatten)]
    event: EventRecord,
}

/// A pushed report, as stored.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReportAccepted {
    /// The store's id of the run.
    run_id: i64,
    report_id: String,
}

#[utoipa::path(post, path = "/api/v1/reports", tag = "push",
    request_body(content = ReportPush, description = "A node's report, with its `report_id`"),
    security(("token" = [])),
    responses((status = 200, description = "Stored, or already stored under its id", body = ReportAccepted),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 409, description = "Another report is stored under this id", body = ErrorBody),
              (status = 415, description = "The body is not `application/json`", body = ErrorBody)))]
pub(crate) async fn push_report(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> Result<Json<ReportAccepted>, ApiError> {
    let result = async {
        require_token(&headers, state.token.as_deref())?;
        let report: RunReport = decode_body(body, "report")?;
        if report.report_id.is_empty() {
            return Err(ApiError::bad_request("the report has no `report_id`")
                .with_hint("a pushed report needs its own id, so that sending it twice stores it once; gpuvet gives every report one"));
        }
        first_attempt_is_one(report.attempt)?;
        storable_time("started_at_ms", report.started_at_ms)?;
        let attempt = Attempt {
            job_id: report.job_id.clone(),
            attempt: report.attempt,
            node: report.node.clone(),
            instance: report.instance.clone(),
        };
        let report_id = report.report_id.clone();
        let run_id = state
            .store_write(move |store| store.record_report(&attempt, &report))
            .await?;
        Ok(Json(ReportAccepted { run_id, report_id }))
    }
    .await;
    state.count_write(&result, &state.metrics.reports_accepted);
    result
}

#[utoipa::path(post, path = "/api/v1/attempts", tag = "push",
    request_body(content = AttemptStart, description = "An attempt as it begins on a node"),
    security(("token" = [])),
    responses((status = 200, description = "Recorded, or already recorded", body = AttemptStart),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 415, description = "The body is not `application/json`", body = ErrorBody)))]
pub(crate) async fn push_attempt(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> Result<Json<AttemptStart>, ApiError> {
    let result = async {
        require_token(&headers, state.token.as_deref())?;
        let start: AttemptStart = decode_body(body, "attempt")?;
        first_attempt_is_one(start.attempt.attempt)?;
        storable_time("started_at_ms", start.started_at_ms)?;
        let recorded = start.clone();
        state
            .store_write(move |store| store.record_attempt(&recorded))
            .await?;
        Ok(Json(start))
    }
    .await;
    state.count_write(&result, &state.metrics.attempts_accepted);
    result
}

/// A pushed event, as stored.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventAccepted {
    /// The store's id of the event.
    id: i64,
    event_id: String,
}

#[utoipa::path(post, path = "/api/v1/events", tag = "push",
    request_body(content = EventPush, description = "An event of one attempt, with its `event_id`"),
    security(("token" = [])),
    responses((status = 200, description = "Stored, or already stored under its id", body = EventAccepted),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 409, description = "Another event is stored under this id", body = ErrorBody),
              (status = 415, description = "The body is not `application/json`", body = ErrorBody)))]
pub(crate) async fn push_event(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> Result<Json<EventAccepted>, ApiError> {
    let result = async {
        require_token(&headers, state.token.as_deref())?;
        let record: EventRecord = decode_body(body, "event")?;
        if record.event.event_id.is_empty() {
            return Err(ApiError::bad_request("the event has no `event_id`")
                .with_hint("a pushed event needs its own id, so that sending it twice stores it once; gpuvet gives every event one"));
        }
        first_attempt_is_one(record.attempt.attempt)?;
        storable_time("time_ms", record.event.time_ms)?;
        let event_id = record.event.event_id.clone();
        let stored = state
            .store_write(move |store| store.record_event(&record.attempt, &record.event))
            .await?;
        Ok(Json(EventAccepted {
            id: stored.id,
            event_id,
        }))
    }
    .await;
    state.count_write(&result, &state.metrics.events_accepted);
    result
}

/// Attempts are numbered from 1.
fn first_attempt_is_one(attempt: u32) -> Result<(), ApiError> {
    if attempt == 0 {
        return Err(ApiError::bad_request(
            "`attempt` is 0; attempts are numbered from 1",
        ));
    }
    Ok(())
}

/// The stores keep times as signed 64-bit milliseconds.
fn storable_time(field: &str, ms: u64) -> Result<(), ApiError> {
    if i64::try_from(ms).is_err() {
        return Err(ApiError::bad_request(format!(
            "`{field}` is {ms}, beyond the largest time the store keeps ({})",
            i64::MAX
        )));
    }
    Ok(())
}

fn decode_body<T: serde::de::DeserializeOwned>(
    body: serde_json::Value,
    what: &str,
) -> Result<T, ApiError> {
    refuse_nul_in(&body)?;
    serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a gpuvet {what}: {e}")))
}

impl AppState {
    fn count_write<T>(
        &self,
        result: &Result<T, ApiError>,
        accepted: &std::sync::atomic::AtomicU64,
    ) {
        let counter = match result {
            Ok(_) => accepted,
            Err(e) if e.status.is_client_error() => &self.metrics.writes_refused,
            Err(_) => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
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

    #[test]
    fn an_event_range_that_ends_before_it_starts_is_refused() {
        let query = EventQuery {
            kind: None,
            job: None,
            attempt: None,
            node: None,
            since_ms: Some(10),
            until_ms: Some(5),
            limit: None,
            order: Some(Order::Newest),
        };
        let error = query.filter().unwrap_err();
        assert!(
            error
                .message
                .contains("`since_ms` (10) is after `until_ms` (5)")
        );
    }
}
