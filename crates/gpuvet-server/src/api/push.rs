//! The API's writes: nodes push the attempts they begin, their reports and their
//! events, with the server's token. Each carries its own id (an attempt its job, node
//! and number), so one sent twice is stored once. Each is checked and encoded here,
//! then stored by the writer (`writer.rs`) with the others queued at the same time,
//! and answered once stored. What a node wrote as it liked (a report's context, an
//! event's message and details) is redacted again first, with the server's own
//! tokens as known secrets: a node of an older gpuvet may not have redacted it.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use gpuvet_model::events::{Attempt, AttemptStart, EventRecord};
use gpuvet_model::results::RunReport;
use gpuvet_store::{PreparedWrite, Written};
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::require_token;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{JsonBody, refuse_nul_in};
use crate::{AppState, access};

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
        let mut report: RunReport = decode_body(body, "report")?;
        if let Some(context) = report.context.as_mut() {
            context.redact(&state.own_secrets());
        }
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
        let write = prepare_report(attempt, report, &headers).await?;
        match state.writer.write(write).await? {
            Written::Report { run_id } => Ok(Json(ReportAccepted { run_id, report_id })),
            other => Err(not_what_was_written("report", other)),
        }
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
        match state
            .writer
            .write(PreparedWrite::attempt(start.clone()))
            .await?
        {
            Written::Attempt => Ok(Json(start)),
            other => Err(not_what_was_written("attempt", other)),
        }
    }
    .await;
    state.count_write(&result, &state.metrics.attempts_accepted);
    result
}

/// A pushed event, as stored.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventAccepted {
    /// The store's id of the event: of the event it repeats, when it was counted as a
    /// repeat (same attempt, kind, lane and subject within ten minutes).
    id: i64,
    event_id: String,
    /// How many times the stored event has happened, this one included: more than 1
    /// when this push was counted as a repeat.
    #[schema(minimum = 1)]
    count: u64,
}

#[utoipa::path(post, path = "/api/v1/events", tag = "push",
    request_body(content = EventPush, description = "An event of one attempt, with its `event_id`"),
    security(("token" = [])),
    responses((status = 200, description = "Stored, or already stored under its id", body = EventAccepted),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 409, description = "Another event is stored under this id", body = ErrorBody),
              (status = 415, description = "The body is not `application/json`", body = ErrorBody),
              (status = 429, description = "The node has pushed more events than its budget (`--event-rate`, `--event-burst`); nothing was stored: send it again after `Retry-After`. A repeat of an event stored within ten minutes is counted on its row and spends no budget", body = ErrorBody,
               headers(("Retry-After" = u64, description = "Seconds to wait before sending it again"))),
              (status = 500, description = "The store failed; nothing of this push was stored", body = ErrorBody),
              (status = 503, description = "The store is busy, or the server has its maximum of connections open", body = ErrorBody)))]
pub(crate) async fn push_event(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> Result<Json<EventAccepted>, ApiError> {
    let result = async {
        require_token(&headers, state.token.as_deref())?;
        let mut record: EventRecord = decode_body(body, "event")?;
        record.event.redact(&state.own_secrets());
        if record.event.event_id.is_empty() {
            return Err(ApiError::bad_request("the event has no `event_id`")
                .with_hint("a pushed event needs its own id, so that sending it twice stores it once; gpuvet gives every event one"));
        }
        first_attempt_is_one(record.attempt.attempt)?;
        storable_time("time_ms", record.event.time_ms)?;
        let event_id = record.event.event_id.clone();
        let time_ms = record.event.time_ms;
        let node = record.attempt.node.clone();
        let write = PreparedWrite::event(record)?;
        let repeat_key = write.repeat_key().unwrap_or_default().to_owned();
        // A repeat adds no row, so it spends no budget.
        if !state.recent_events.folds(&repeat_key, time_ms) {
            within_budget(&state, &node)?;
        }
        match state.writer.write(write).await? {
            Written::Event { id, count } => {
                state.recent_events.stored(&repeat_key, time_ms);
                if count > 1 {
                    state.metrics.events_folded.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Json(EventAccepted {
                    id,
                    event_id,
                    count,
                }))
            }
            other => Err(not_what_was_written("event", other)),
        }
    }
    .await;
    state.count_write(&result, &state.metrics.events_accepted);
    result
}

/// Takes one event of `node`'s budget, or refuses it with `429` and when to come back.
fn within_budget(state: &AppState, node: &str) -> Result<(), ApiError> {
    let Err(wait) = state.event_limit.take(node, std::time::Instant::now()) else {
        return Ok(());
    };
    state.metrics.events_limited.fetch_add(1, Ordering::Relaxed);
    let limits = state.event_limit.limits();
    let mut error = ApiError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        format!(
            "node `{node}` pushes more than {} events a second (a burst of {}); this one was not stored",
            limits.rate_per_sec, limits.burst
        ),
    )
    .with_hint("it stays in the node's outbox and goes again after `Retry-After`; a source that sends this many events a second should be fixed on the node");
    error.retry_after_secs = Some(wait.as_secs_f64().ceil().max(1.0) as u64);
    Err(error)
}

/// Pushed bodies larger than this (or of unknown length) are encoded on a blocking
/// thread: a 1,024-node group report (about 3 MB) takes milliseconds to encode and read
/// back, which would hold up the connections served on the same thread. A one-node
/// report (about 6 kB) is encoded in place: the move to another thread would cost
/// more (a tenth of the throughput in `serve_load`, docs/benchmarks.md).
const ENCODE_IN_PLACE_BYTES: u64 = 256 << 10;

/// Checks and encodes a pushed report for the writer.
async fn prepare_report(
    attempt: Attempt,
    report: RunReport,
    headers: &HeaderMap,
) -> Result<PreparedWrite, ApiError> {
    let length = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if length.is_some_and(|n| n <= ENCODE_IN_PLACE_BYTES) {
        return Ok(PreparedWrite::report(attempt, report)?);
    }
    tokio::task::spawn_blocking(move || PreparedWrite::report(attempt, report))
        .await
        .map_err(|join| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding the report failed: {join}"),
            )
        })?
        .map_err(ApiError::from)
}

/// The writer answered a push with what another kind of push writes: a bug.
fn not_what_was_written(pushed: &str, written: Written) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        format!("the store answered a pushed {pushed} with `{written:?}`"),
    )
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
    /// The secrets the server knows, to be cut wherever a node repeated them.
    fn own_secrets(&self) -> Vec<&str> {
        self.token
            .as_deref()
            .into_iter()
            .chain(self.read.as_deref().map(access::ReadAccess::token))
            .collect()
    }

    fn count_write<T>(&self, result: &Result<T, ApiError>, accepted: &AtomicU64) {
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
    use axum::http::header::CONTENT_LENGTH;
    use gpuvet_model::results::Outcome;

    use super::*;

    fn report(duration_secs: f64) -> RunReport {
        RunReport {
            report_id: "r-1".to_owned(),
            gpuvet_version: "0.1.0".to_owned(),
            job_id: "job".to_owned(),
            attempt: 1,
            node: "n0".to_owned(),
            instance: "pod-0".to_owned(),
            backend: "sim".to_owned(),
            devices: Vec::new(),
            started_at_ms: 1,
            duration_secs,
            timeout_secs: 300.0,
            outcome: Outcome::of(&[]),
            checks: Vec::new(),
            group: None,
            context: None,
            diagnosis: None,
            repeat_offender: None,
        }
    }

    fn attempt() -> Attempt {
        Attempt {
            job_id: "job".to_owned(),
            attempt: 1,
            node: "n0".to_owned(),
            instance: "pod-0".to_owned(),
        }
    }

    #[tokio::test]
    async fn a_report_is_prepared_in_place_or_on_a_blocking_thread_with_the_same_refusals() {
        let large = (ENCODE_IN_PLACE_BYTES + 1).to_string();
        for length in [Some("6000"), Some(large.as_str()), None] {
            let mut headers = HeaderMap::new();
            if let Some(length) = length {
                headers.insert(CONTENT_LENGTH, length.parse().unwrap());
            }
            let prepared = prepare_report(attempt(), report(2.0), &headers).await;
            assert!(prepared.is_ok(), "{length:?}: {prepared:?}");
            // A NaN is written as `null`, which does not read back as a number.
            let error = prepare_report(attempt(), report(f64::NAN), &headers)
                .await
                .unwrap_err();
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(
                error.message.contains("does not read back"),
                "{length:?}: {}",
                error.message
            );
        }
    }
}
