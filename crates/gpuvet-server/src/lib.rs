//! `gpuvet serve`: a gpuvet store over HTTP. A JSON API under `/api/v1` (described by
//! the OpenAPI document at `/api/v1/openapi.json`), server-rendered web pages, and
//! Prometheus `/metrics`.
//!
//! Reads are open; writes (nodes pushing their reports and events) need the bearer
//! token the server was started with. A server started without a token takes no
//! writes. Every report and event carries its own id, so a node that pushes one twice
//! (a retry after a lost reply) has it stored once.
//!
//! The store is synchronous (SQLite or PostgreSQL handles), so each request borrows a
//! handle from a small [`pool`] on tokio's blocking threads.

mod api;
mod auth;
mod error;
mod extract;
mod metrics;
mod openapi;
mod pages;
pub mod pool;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;

pub use crate::error::ServerError;
use crate::metrics::Metrics;
pub use crate::openapi::document as openapi_document;
use crate::pool::StorePool;

/// The address `gpuvet serve` listens on unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9470";

/// The largest body a push may have: a 1,024-node group report is about 3 MB of JSON.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// What every request handler shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub pool: Arc<StorePool>,
    /// Writes take turns here rather than in the database: SQLite lets one writer in at
    /// a time and makes the others sleep and retry, which is what a burst of pushes
    /// would otherwise spend its time on.
    pub writers: Arc<tokio::sync::Semaphore>,
    /// `None`: the server takes no writes.
    pub token: Option<Arc<str>>,
    pub metrics: Arc<Metrics>,
}

/// A server bound to its address, ready to run.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    router: Router,
}

impl Server {
    /// Binds `listen` and builds the routes over `pool`; writes need `token`.
    pub async fn bind(
        listen: SocketAddr,
        pool: StorePool,
        token: Option<String>,
    ) -> Result<Server, ServerError> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|error| ServerError::Bind {
                addr: listen,
                error,
            })?;
        let state = AppState {
            writers: Arc::new(tokio::sync::Semaphore::new(pool.concurrent_writers())),
            pool: Arc::new(pool),
            token: token.filter(|t| !t.is_empty()).map(Arc::from),
            metrics: Arc::new(Metrics::default()),
        };
        Ok(Server {
            listener,
            router: router(state),
        })
    }

    /// The address the server listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        self.listener.local_addr().map_err(ServerError::Io)
    }

    /// Serves until `shutdown` completes, then finishes the requests in flight.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ServerError::Io)
    }
}

fn router(state: AppState) -> Router {
    Router::new()
        .merge(api::routes())
        .merge(pages::routes())
        .route("/metrics", axum::routing::get(metrics::render))
        .fallback(pages::not_found)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::count_requests,
        ))
        .with_state(state)
}
