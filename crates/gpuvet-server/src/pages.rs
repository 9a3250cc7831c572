//! The web pages: server-rendered HTML from `gpuvet-html`, with a little inline script
//! for live refresh and nothing to build.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use gpuvet_html::site;
use gpuvet_model::events::EventKind;
use gpuvet_model::overview::JobSummary;
use gpuvet_model::time::unix_now_ms;
use gpuvet_store::{EventFilter, RunFilter};
use serde::Deserialize;

use crate::AppState;
use crate::api::read::explained;
use crate::error::ApiError;
use crate::extract::{Path, Query};

/// Events a page lists at most; the page says how many more match.
const EVENTS_SHOWN: usize = 200;

/// Runs of one instance a page lists at most.
const HISTORY_SHOWN: usize = 20;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(instances_page))
        .route("/instances", get(instances_page))
        .route("/instances/{job}/{node}", get(instance_page))
        .route("/jobs/{job}/timeline", get(timeline_page))
        .route("/events", get(events_page))
        .route("/nodes", get(nodes_page))
        .route("/nodes/{node}", get(node_page))
        .route("/reports/{file}", get(report_page))
        .route("/session/{ticket}", get(crate::access::open_session_link))
}

/// A form's empty field means "any".
fn given(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

#[derive(Debug, Deserialize)]
struct InstancesQuery {
    job: Option<String>,
}

/// `GET /` and `GET /instances?job=JOB`: every job with its instances.
async fn instances_page(
    State(state): State<AppState>,
    Query(query): Query<InstancesQuery>,
) -> Response {
    let job = given(query.job);
    let filter = job.clone();
    let found = state
        .store(move |store| {
            let jobs: Vec<JobSummary> = match &filter {
                Some(job) => store.job(job)?.into_iter().collect(),
                None => store.jobs()?,
            };
            let mut instances = Vec::new();
            for job in &jobs {
                instances.extend(store.instances(&job.job_id, None)?);
            }
            Ok((jobs, instances))
        })
        .await;
    match found {
        Ok((jobs, instances)) => Html(site::instances_page(
            &jobs,
            &instances,
            job.as_deref(),
            unix_now_ms(),
        ))
        .into_response(),
        Err(error) => page_error(error),
    }
}

#[derive(Debug, Deserialize)]
struct InstanceQuery {
    attempt: Option<u32>,
}

/// `GET /instances/{job}/{node}`: one instance's latest run, panel by panel.
async fn instance_page(
    State(state): State<AppState>,
    Path((job, node)): Path<(String, String)>,
    Query(query): Query<InstanceQuery>,
) -> Response {
    let (lookup_job, lookup_node) = (job.clone(), node.clone());
    let found = state
        .store(move |store| {
            let Some(instance) = store.instance(&lookup_job, &lookup_node, query.attempt)? else {
                return Ok(None);
            };
            let report = match &instance.latest_run {
                Some(run) => store.run(run.run_id)?.map(|(_, report)| report),
                None => None,
            };
            let history = store
                .runs(&RunFilter {
                    job_id: Some(lookup_job.clone()),
                    node: Some(lookup_node.clone()),
                    limit: Some(HISTORY_SHOWN),
                    ..RunFilter::default()
                })?
                .into_iter()
                .map(|stored| stored.run)
                .collect::<Vec<_>>();
            let events = store.events(&EventFilter {
                job_id: Some(lookup_job),
                attempt: Some(instance.attempt.attempt),
                node: Some(lookup_node),
                limit: Some(EVENTS_SHOWN),
                ..EventFilter::default()
            })?;
            Ok(Some((instance, report, history, events)))
        })
        .await;
    match found {
        Ok(Some((instance, report, history, events))) => {
            // Until its report arrives, the page watches for it.
            let live = instance.latest_run.is_none();
            Html(site::instance_page(
                &instance,
                report.as_ref(),
                &history,
                &events,
                live,
            ))
            .into_response()
        }
        Ok(None) => html_error(
            StatusCode::NOT_FOUND,
            "No such instance",
            &format!("the store has no instance of job `{job}` on node `{node}`"),
        ),
        Err(error) => page_error(error),
    }
}

#[derive(Debug, Deserialize)]
struct TimelineQuery {
    /// Read as text, so that a bad number gets the site's page rather than JSON.
    attempt: Option<String>,
}

/// `GET /jobs/{job}/timeline?attempt=N`: one attempt on one clock, a lane per node,
/// with its explanation; the job's latest attempt without `attempt`.
async fn timeline_page(
    State(state): State<AppState>,
    Path(job): Path<String>,
    Query(query): Query<TimelineQuery>,
) -> Response {
    let attempt = match given(query.attempt) {
        None => None,
        Some(text) => match text.parse::<u32>() {
            Ok(attempt) => Some(attempt),
            Err(_) => {
                return html_error(
                    StatusCode::BAD_REQUEST,
                    "Bad attempt",
                    &format!(
                        "`attempt` is `{text}`, not a number; attempts are numbered from 1 \
                         (leave it out for the job's latest attempt)"
                    ),
                );
            }
        },
    };
    match explained(&state, job, attempt).await {
        Ok(found) => Html(site::timeline_page(
            &found.timeline,
            &found.explanation,
            found.latest,
        ))
        .into_response(),
        Err(error) if error.status == StatusCode::NOT_FOUND => {
            html_error(error.status, "Not found", &error.message)
        }
        Err(error) if error.status == StatusCode::BAD_REQUEST => {
            html_error(error.status, "Bad attempt", &error.message)
        }
        Err(error) => page_error(error),
    }
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    kind: Option<String>,
    job: Option<String>,
    node: Option<String>,
}

/// `GET /events?kind=&job=&node=`: deployment events, the newest first.
async fn events_page(State(state): State<AppState>, Query(query): Query<EventsQuery>) -> Response {
    let kind = match given(query.kind)
        .map(|k| k.parse::<EventKind>())
        .transpose()
    {
        Ok(kind) => kind,
        Err(message) => return html_error(StatusCode::BAD_REQUEST, "Bad filter", &message),
    };
    let filter = EventFilter {
        kind,
        job_id: given(query.job),
        node: given(query.node),
        limit: Some(EVENTS_SHOWN),
        newest_first: true,
        ..EventFilter::default()
    };
    let shown = filter.clone();
    let found = state
        .store(move |store| Ok((store.events(&filter)?, store.count_events(&filter)?)))
        .await;
    match found {
        Ok((events, total)) => Html(site::events_page(
            &events,
            shown.kind,
            shown.job_id.as_deref(),
            shown.node.as_deref(),
            usize::try_from(total).unwrap_or(usize::MAX),
        ))
        .into_response(),
        Err(error) => page_error(error),
    }
}

#[derive(Debug, Deserialize)]
struct NodesPageQuery {
    /// Days back the ranking counts runs from; read as text for the site's own error.
    days: Option<String>,
    failures: Option<String>,
    of_last: Option<String>,
}

/// A page's number parameter: `None` when absent or empty; the message of its 400
/// page when not a number.
fn number<T: std::str::FromStr>(name: &str, value: Option<String>) -> Result<Option<T>, String> {
    match given(value) {
        None => Ok(None),
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|_| format!("`{name}` is `{text}`, not a number")),
    }
}

fn bad_parameter(message: &str) -> Response {
    html_error(StatusCode::BAD_REQUEST, "Bad parameter", message)
}

/// `GET /nodes?days=7&failures=3&of_last=5`: the nodes ranked by failed runs in the
/// last `days`, repeat offenders flagged.
async fn nodes_page(
    State(state): State<AppState>,
    Query(query): Query<NodesPageQuery>,
) -> Response {
    let (days, failures, of_last) = match (
        number::<u32>("days", query.days),
        number::<u32>("failures", query.failures),
        number::<u32>("of_last", query.of_last),
    ) {
        (Ok(days), Ok(failures), Ok(of_last)) => (days, failures, of_last),
        (Err(message), _, _) | (_, Err(message), _) | (_, _, Err(message)) => {
            return bad_parameter(&message);
        }
    };
    let now_ms = unix_now_ms();
    let since_ms = days.map(|days| now_ms.saturating_sub(u64::from(days) * 86_400_000));
    let query = crate::api::nodes::NodesQuery::new(since_ms, failures, of_last);
    match crate::api::nodes::ranked(&state, query).await {
        Ok((since_ms, policy, nodes)) => {
            Html(site::nodes_page(&nodes, since_ms, &policy, now_ms)).into_response()
        }
        Err(error) if error.status == StatusCode::BAD_REQUEST => bad_parameter(&error.message),
        Err(error) => page_error(error),
    }
}

#[derive(Debug, Deserialize)]
struct NodePageQuery {
    failures: Option<String>,
    of_last: Option<String>,
}

/// `GET /nodes/{node}`: one node across jobs.
async fn node_page(
    State(state): State<AppState>,
    Path(node): Path<String>,
    Query(query): Query<NodePageQuery>,
) -> Response {
    let (failures, of_last) = match (
        number::<u32>("failures", query.failures),
        number::<u32>("of_last", query.of_last),
    ) {
        (Ok(failures), Ok(of_last)) => (failures, of_last),
        (Err(message), _) | (_, Err(message)) => return bad_parameter(&message),
    };
    let asked = crate::api::nodes::HistoryQuery {
        limit: None,
        failures,
        of_last,
    };
    let policy = match crate::api::nodes::PolicyQuery::new(failures, of_last).policy() {
        Ok(policy) => policy,
        Err(error) => return bad_parameter(&error.message),
    };
    match crate::api::nodes::history(&state, node, asked).await {
        Ok(history) => Html(site::node_page(&history, &policy, unix_now_ms())).into_response(),
        Err(error) if error.status == StatusCode::NOT_FOUND => {
            html_error(error.status, "No such node", &error.message)
        }
        Err(error) => page_error(error),
    }
}

/// `GET /reports/{run_id}.html`: one run's static report.
async fn report_page(State(state): State<AppState>, Path(file): Path<String>) -> Response {
    let Some(run_id) = file
        .strip_suffix(".html")
        .and_then(|id| id.parse::<i64>().ok())
    else {
        return html_error(
            StatusCode::NOT_FOUND,
            "No such report",
            &format!("`{file}` names no report: reports are at /reports/RUN_ID.html"),
        );
    };
    match state.store(move |store| store.run(run_id)).await {
        Ok(Some((_, report))) => Html(gpuvet_html::page(&report)).into_response(),
        Ok(None) => html_error(
            StatusCode::NOT_FOUND,
            "No such report",
            &format!("there is no run {run_id}"),
        ),
        Err(error) => page_error(error),
    }
}

/// Any other address: a JSON 404 under `/api/`, an HTML one elsewhere.
pub(crate) async fn not_found(uri: Uri) -> Response {
    let path = uri.path();
    if path.starts_with("/api/") {
        ApiError::not_found(format!("no endpoint at `{path}`"))
            .with_hint("the endpoints are listed in /api/v1/openapi.json")
            .into_response()
    } else {
        html_error(
            StatusCode::NOT_FOUND,
            "Not found",
            &format!("there is no page at `{path}`"),
        )
    }
}

pub(crate) fn page_error(error: ApiError) -> Response {
    html_error(error.status, "Error", &error.message)
}

pub(crate) fn html_error(status: StatusCode, title: &str, message: &str) -> Response {
    let body = site::error_page(status.as_u16(), title, message);
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}
