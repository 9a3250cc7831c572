//! The OpenAPI document of the API, generated from the handlers and the types they
//! take and return, served at `/api/v1/openapi.json`.

use axum::Json;
use axum::extract::State;
use gpuvet_model::env_vars::{READ_TOKEN, REPORT_TOKEN};
use gpuvet_model::events::EventKind;
use gpuvet_model::results::Outcome;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::{AppState, api};

/// The scheme the pushes name: the write token.
const WRITE_SCHEME: &str = "token";
/// The scheme the reads name: the read token.
const READ_SCHEME: &str = "read_token";
/// Operations that need no token, whatever the server was started with.
const OPEN_PATHS: [&str; 1] = ["/api/v1/health"];

#[derive(OpenApi)]
#[openapi(
    info(
        title = "gpuvet",
        description = "Sanity-check reports, per-check results and deployment events of GPU jobs, \
                       as kept by `gpuvet serve`. Pushing needs the server's write token (`token`); \
                       reading needs its read token (`read_token`) when the server was started with one \
                       (a server without one leaves its reads open, and says so in this document by \
                       naming no security on them). The health check and this document are always open."
    ),
    paths(
        api::read::health,
        api::read::list_jobs,
        api::read::get_job,
        api::read::list_attempts,
        api::read::list_instances,
        api::read::get_instance,
        api::read::get_timeline,
        api::read::get_explanation,
        api::read::get_bundle,
        api::read::list_runs,
        api::read::get_run,
        api::read::list_results,
        api::read::list_baselines,
        api::read::list_events,
        api::nodes::list_nodes,
        api::nodes::get_node,
        api::push::push_attempt,
        api::push::push_report,
        api::push::push_event,
        crate::access::new_session_link,
    ),
    // Query parameters' types are not collected from the paths the way bodies are;
    // `ErrorBody` is named by the 401 the modifier adds.
    components(schemas(api::read::Order, EventKind, Outcome, crate::error::ErrorBody)),
    modifiers(&BearerTokens),
    tags(
        (name = "jobs", description = "Jobs, their attempts, their instances (one per node), and each attempt's timeline and explanation"),
        (name = "runs", description = "Sanity-check runs and their per-check results"),
        (name = "events", description = "Deployment events"),
        (name = "nodes", description = "Nodes across jobs: ranked by failed runs, each one's history, and repeat offenders"),
        (name = "push", description = "Nodes push reports and events; each is stored once by its id"),
        (name = "server", description = "The server itself"),
    )
)]
struct ApiDoc;

/// Declares the two bearer schemes, and names the read token, with its 401, on every
/// operation that names no scheme of its own and is not open: the reads. The same
/// rule as the server's guard (`access.rs`), so a read added later is described as
/// guarded without being told.
struct BearerTokens;

impl Modify for BearerTokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let scheme = |description: String| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme(
            WRITE_SCHEME,
            scheme(format!(
                "The write token (`{REPORT_TOKEN}` of the server and its nodes): pushes only; it grants no reads"
            )),
        );
        components.add_security_scheme(
            READ_SCHEME,
            scheme(format!(
                "The read token (`{READ_TOKEN}` of the server), when it was started with one. \
                 A browser signs in without it: POST /api/v1/session answers a one-time link that sets a session cookie"
            )),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            if OPEN_PATHS.contains(&path.as_str()) {
                continue;
            }
            for operation in operations(item) {
                if operation.security.is_none() {
                    operation.security = Some(read_token());
                }
                let unauthorized = ResponseBuilder::new()
                    .description("No token, or not the server's")
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build();
                operation
                    .responses
                    .responses
                    .entry("401".to_owned())
                    .or_insert(RefOr::T(unauthorized));
            }
        }
    }
}

/// The security of an operation that needs the read token.
fn read_token() -> Vec<SecurityRequirement> {
    vec![SecurityRequirement::new(READ_SCHEME, Vec::<String>::new())]
}

fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// The API's OpenAPI document, as for a server with a read token.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document of a server whose reads are open: no operation names the read token,
/// not even the one that makes sign-in links, which answers 404 whatever it is sent.
fn with_open_reads(mut document: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    for item in document.paths.paths.values_mut() {
        for operation in operations(item) {
            if operation.security.as_ref() == Some(&read_token()) {
                operation.security = None;
                operation.responses.responses.remove("401");
            }
        }
    }
    document
}

/// `GET /api/v1/openapi.json`: the document of this server as it was started.
pub(crate) async fn serve(State(state): State<AppState>) -> Json<utoipa::openapi::OpenApi> {
    let document = document();
    Json(if state.read.is_some() {
        document
    } else {
        with_open_reads(document)
    })
}
