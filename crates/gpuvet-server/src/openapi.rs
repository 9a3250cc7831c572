//! The OpenAPI document of the API, generated from the handlers and the types they
//! take and return, served at `/api/v1/openapi.json`.

use axum::Json;
use gpuvet_model::events::EventKind;
use gpuvet_model::results::Outcome;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "gpuvet",
        description = "Sanity-check reports, per-check results and deployment events of GPU jobs, \
                       as kept by `gpuvet serve`. Reads are open; pushing needs the server's token."
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
        api::read::list_events,
        api::push::push_attempt,
        api::push::push_report,
        api::push::push_event,
    ),
    // Query parameters' types are not collected from the paths the way bodies are.
    components(schemas(api::read::Order, EventKind, Outcome)),
    modifiers(&BearerToken),
    tags(
        (name = "jobs", description = "Jobs, their attempts, their instances (one per node), and each attempt's timeline and explanation"),
        (name = "runs", description = "Sanity-check runs and their per-check results"),
        (name = "events", description = "Deployment events"),
        (name = "push", description = "Nodes push reports and events; each is stored once by its id"),
        (name = "server", description = "The server itself"),
    )
)]
struct ApiDoc;

/// Declares the `token` bearer scheme the write endpoints name.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The API's OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

pub(crate) async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(document())
}
