//! `gpuvet serve`: a gpuvet store over HTTP. A JSON API under `/api/v1` (described by
//! the OpenAPI document at `/api/v1/openapi.json`), server-rendered web pages, and
//! Prometheus `/metrics`.
//!
//! Writes (nodes pushing their reports and events) need the bearer token the server
//! was started with; a server started without one takes no writes. Reads are open,
//! unless the server was given a read token ([`Server::with_read_token`]): then every
//! read needs it, or a browser session opened with a one-time link (`access.rs`).
//! Every report and event carries its own id, so a node that pushes one twice (a
//! retry after a lost reply) has it stored once.
//!
//! The store is synchronous (SQLite or PostgreSQL handles), so each read borrows a
//! handle from a small [`pool`] on tokio's blocking threads. Pushes are queued and
//! stored by a writer task, those that queued meanwhile in one transaction (group
//! commit, `writer.rs`), and each is answered once its transaction committed.

mod access;
mod api;
mod auth;
mod connections;
mod error;
mod event_limit;
mod extract;
mod metrics;
mod openapi;
mod pages;
pub mod pool;
mod retention;
mod server_event;
mod tls;
mod writer;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;

use crate::connections::Acceptor;
pub use crate::connections::ConnectionLimits;
pub use crate::error::ServerError;
pub use crate::event_limit::EventLimits;
use crate::metrics::Metrics;
pub use crate::openapi::document as openapi_document;
use crate::pool::StorePool;
pub use crate::retention::Retention;
pub use crate::server_event::{EventSink, ServerEvent};
pub use crate::tls::{ServerTls, TlsFiles};

/// The address `gpuvet serve` listens on unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9470";

/// The largest body a push may have: a 1,024-node group report is about 3 MB of JSON.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// What every request handler shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub pool: Arc<StorePool>,
    /// Pushes are stored through its queue, many in one transaction (group commit),
    /// rather than each taking a turn of its own: SQLite lets one writer in at a time
    /// and makes the others sleep and retry, and a commit each is what a burst of
    /// pushes would otherwise spend its time on.
    pub writer: writer::Writer,
    /// `None`: the server takes no writes.
    pub token: Option<Arc<str>>,
    /// `None`: reads are open.
    pub read: Option<Arc<access::ReadAccess>>,
    pub metrics: Arc<Metrics>,
    /// Each node's budget of pushed events.
    pub event_limit: Arc<event_limit::EventLimiter>,
    /// Events stored lately, whose repeats spend no budget.
    pub recent_events: Arc<event_limit::RecentEvents>,
}

/// A server bound to its address, ready to run: plain HTTP with the default
/// [`ConnectionLimits`] unless told otherwise.
pub struct Server {
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    limits: ConnectionLimits,
    events: Option<EventSink>,
    retention: Option<Retention>,
    /// What the routes share; the router is built from it when the server runs, once
    /// every setting is given.
    state: AppState,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("tls", &self.tls)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds `listen` and builds the routes over `pool`; writes need `token`.
    pub async fn bind(
        listen: SocketAddr,
        pool: StorePool,
        token: Option<String>,
    ) -> Result<Server, ServerError> {
        let listener = listen_on(listen).map_err(|error| ServerError::Bind {
            addr: listen,
            error,
        })?;
        let pool = Arc::new(pool);
        let metrics = Arc::new(Metrics::default());
        let state = AppState {
            writer: writer::Writer::start(Arc::clone(&pool), Arc::clone(&metrics)),
            pool,
            token: token.filter(|t| !t.is_empty()).map(Arc::from),
            read: None,
            metrics,
            event_limit: Arc::new(event_limit::EventLimiter::new(EventLimits::default())),
            recent_events: Arc::default(),
        };
        Ok(Server {
            listener,
            state,
            tls: None,
            limits: ConnectionLimits::default(),
            events: None,
            retention: None,
        })
    }

    /// Serves HTTPS with `tls` instead of plain HTTP.
    pub fn with_tls(mut self, tls: Arc<ServerTls>) -> Server {
        self.tls = Some(tls);
        if let Some(read) = &self.state.read {
            read.set_secure();
        }
        self
    }

    /// Holds every connection to `limits`.
    pub fn with_limits(mut self, limits: ConnectionLimits) -> Server {
        self.limits = limits;
        self
    }

    /// Holds each node to `limits` of pushed events (the default otherwise).
    pub fn with_event_limits(mut self, limits: EventLimits) -> Server {
        self.state.event_limit = Arc::new(event_limit::EventLimiter::new(limits));
        self
    }

    /// Deletes what is older than `retention` says while serving.
    pub fn with_retention(mut self, retention: Retention) -> Server {
        self.retention = Some(retention);
        self
    }

    /// Sends what the server reports (refusals over the cap, failed accepts, what
    /// retention deleted) to `events`; a library does not print.
    pub fn on_event(mut self, events: EventSink) -> Server {
        self.events = Some(events);
        self
    }

    /// Makes every read need `read_token` (an empty one or `None`: reads stay open).
    /// The write token grants no reads.
    pub fn with_read_token(mut self, read_token: Option<&str>) -> Server {
        self.state.read = read_token
            .filter(|t| !t.is_empty())
            .map(|t| Arc::new(access::ReadAccess::new(t)));
        if let (Some(read), Some(_)) = (&self.state.read, &self.tls) {
            read.set_secure();
        }
        self
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
        let pruning = self.retention.map(|retention| {
            tokio::spawn(retention::run(
                self.state.clone(),
                retention,
                self.events.clone(),
            ))
        });
        Acceptor {
            listener: self.listener,
            metrics: self.state.metrics.clone(),
            router: router(self.state),
            tls: self.tls,
            limits: self.limits,
            events: self.events,
        }
        .run(shutdown)
        .await;
        if let Some(pruning) = pruning {
            pruning.abort();
        }
        Ok(())
    }
}

/// The kernel's queue of connections not yet accepted. tokio's default (1,024) made a
/// burst of 5,000 connects trickle in over the SYN-ACK retries (at most 757 open at
/// once in `tests/connections.rs`); the kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 8_192;

fn listen_on(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As std's `TcpListener::bind` does on Unix: a restarted server binds at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
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
            access::require_read,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::count_requests,
        ))
        .layer(axum::middleware::map_response(access::no_referrer))
        .with_state(state)
}
