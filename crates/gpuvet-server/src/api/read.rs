//! The API's reads: jobs, attempts, instances, runs, per-check results, events, and one
//! attempt's timeline and explanation (assembled from what the store keeps of it).

// utoipa's `params(...)` expansion names each query type by a path the lint calls
// redundant.
#![allow(unused_qualifications)]

use axum::Json;
use axum::extract::State;
use gpuvet_analysis::explain::{Explanation, explain};
use gpuvet_analysis::timeline::{Timeline, assemble};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Attempt, Event, EventKind};
use gpuvet_model::fleet::FleetBaseline;
use gpuvet_model::overview::{InstanceSummary, JobSummary};
use gpuvet_model::record::JobRecord;
use gpuvet_model::results::{Outcome, RunReport};
use gpuvet_store::{EventFilter, ResultFilter, RunFilter, StoredResult, StoredRun};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::limit;
use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Path, Query};

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
pub(crate) struct TimelineQuery {
    /// An attempt by number, from 1; without it, the job's latest attempt.
    #[param(minimum = 1)]
    attempt: Option<u32>,
}

/// One attempt of a job, assembled from what the store keeps of it.
#[derive(Debug)]
pub(crate) struct Explained {
    pub record: JobRecord,
    pub timeline: Timeline,
    pub explanation: Explanation,
    /// The job's latest attempt.
    pub latest: u32,
}

/// `attempt` as given, refused when it is 0.
fn attempt_number(attempt: Option<u32>) -> Result<Option<u32>, ApiError> {
    match attempt {
        Some(0) => Err(
            ApiError::bad_request("`attempt` is 0; attempts are numbered from 1")
                .with_hint("leave `attempt` out for the job's latest attempt"),
        ),
        attempt => Ok(attempt),
    }
}

/// The timeline and explanation of `attempt` of `job` (its latest when `None`). An
/// attempt that has begun but recorded nothing yet has an empty timeline; an unknown
/// job or attempt is a 404.
pub(crate) async fn explained(
    state: &AppState,
    job: String,
    attempt: Option<u32>,
) -> Result<Explained, ApiError> {
    let attempt = attempt_number(attempt)?;
    let lookup = job.clone();
    let found = state
        .store(move |store| {
            let Some(latest) = store.latest_attempt(&lookup)? else {
                return Ok(Err(None));
            };
            let attempt = attempt.unwrap_or(latest);
            let record = match store.job_record(&lookup, attempt)? {
                Some(record) => record,
                None if !store.instances(&lookup, Some(attempt))?.is_empty() => JobRecord {
                    job_id: lookup.clone(),
                    attempt,
                    reports: Vec::new(),
                    events: Vec::new(),
                },
                None => return Ok(Err(Some((attempt, latest)))),
            };
            let timeline = assemble(&record);
            let explanation = explain(&record, &timeline);
            Ok(Ok(Explained {
                record,
                timeline,
                explanation,
                latest,
            }))
        })
        .await?;
    found.map_err(|missing| match missing {
        None => unknown_job(&job),
        Some((attempt, latest)) => ApiError::not_found(format!(
            "job `{job}` has no attempt {attempt}; its latest is {latest}"
        ))
        .with_hint(format!(
            "list the job's attempts at /api/v1/jobs/{job}/attempts"
        )),
    })
}

#[utoipa::path(get, path = "/api/v1/jobs/{job}/timeline", tag = "jobs",
    params(("job" = String, Path, description = "The job's id"), TimelineQuery),
    responses((status = 200, description = "The attempt's timeline: what every node did and what went wrong, on one clock", body = Timeline),
              (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn get_timeline(
    State(state): State<AppState>,
    Path(job): Path<String>,
    Query(query): Query<TimelineQuery>,
) -> Result<Json<Timeline>, ApiError> {
    Ok(Json(explained(&state, job, query.attempt).await?.timeline))
}

#[utoipa::path(get, path = "/api/v1/jobs/{job}/explain", tag = "jobs",
    params(("job" = String, Path, description = "The job's id"), TimelineQuery),
    responses((status = 200, description = "The attempt's first error, the team it belongs to, the next step, and each hypothesis judged", body = Explanation),
              (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn get_explanation(
    State(state): State<AppState>,
    Path(job): Path<String>,
    Query(query): Query<TimelineQuery>,
) -> Result<Json<Explanation>, ApiError> {
    Ok(Json(
        explained(&state, job, query.attempt).await?.explanation,
    ))
}

#[utoipa::path(get, path = "/api/v1/jobs/{job}/bundle", tag = "jobs",
    params(("job" = String, Path, description = "The job's id"), TimelineQuery),
    responses((status = 200, description = "The attempt's fault bundle (`gpuvet bundle`): a gzip'd tar with a sha256 `MANIFEST`, a README for the team it goes to, the timeline, `explain`, every report, inventory and event, and the config without its secrets", content_type = "application/gzip"),
              (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub(crate) async fn get_bundle(
    State(state): State<AppState>,
    Path(job): Path<String>,
    Query(query): Query<TimelineQuery>,
) -> Result<axum::response::Response, ApiError> {
    use axum::http::header;
    use axum::response::IntoResponse;

    let explained = explained(&state, job, query.attempt).await?;
    let record = explained.record;
    let name = format!(
        "gpuvet-bundle-{}-attempt{}.tar.gz",
        gpuvet_bundle::safe_file_name(&record.job_id),
        record.attempt
    );
    // The server's own token is a secret no bundle may hold, like the nodes' were.
    let token = state.token.clone();
    let packed = tokio::task::spawn_blocking(move || {
        let secrets: Vec<&str> = token.as_deref().into_iter().collect();
        let mut bytes = Vec::new();
        gpuvet_bundle::layout::pack(
            &record,
            gpuvet_model::time::unix_now_ms(),
            env!("CARGO_PKG_VERSION"),
            &secrets,
            &mut bytes,
        )
        .map(|_| bytes)
    })
    .await
    .map_err(|err| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("packing the bundle stopped: {err}"),
        )
    })?
    .map_err(|err| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "cannot pack the bundle: {}",
                gpuvet_model::diagnostics::with_causes(&err)
            ),
        )
    })?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/gzip".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        packed,
    )
        .into_response())
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

/// The newest `ok` results of each GPU model and check a fleet baseline is learned
/// from: a month of a daily run on 32 GPUs, bounding the read at any fleet size.
const FLEET_RESULTS: usize = 1000;

#[utoipa::path(get, path = "/api/v1/baselines", tag = "runs",
    responses((status = 200, description = "The fleet's baseline of each GPU model and check, learned from its newest ok results (`gpuvet.baseline_from: server`)", body = [FleetBaseline])))]
pub(crate) async fn list_baselines(
    State(state): State<AppState>,
) -> Result<Json<Vec<FleetBaseline>>, ApiError> {
    Ok(Json(
        state
            .store(|store| store.fleet_baselines(FLEET_RESULTS))
            .await?,
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

#[cfg(test)]
mod tests {
    use super::*;

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
