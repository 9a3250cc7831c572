//! The API's writes: nodes push the attempts they begin, their reports and their
//! events, with the server's token. Each carries its own id (an attempt its job, node
//! and number), so one sent twice is stored once.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use gpuvet_model::events::{Attempt, AttemptStart, EventRecord};
use gpuvet_model::results::RunReport;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::require_token;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{JsonBody, refuse_nul_in};

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
    fn count_write<T>(&self, result: &Result<T, ApiError>, accepted: &AtomicU64) {
        let counter = match result {
            Ok(_) => accepted,
            Err(e) if e.status.is_client_error() => &self.metrics.writes_refused,
            Err(_) => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
