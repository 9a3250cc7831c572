//! The server's connections, accepted and served by hand (hyper's HTTP/1.1), so that
//! no client can hold the server's sockets for as long as it likes:
//!
//! - a request's head must arrive within the header timeout, counted from when the
//!   server starts waiting for it (so a keep-alive connection that sends nothing more
//!   is closed after it too);
//! - a connection on which no byte moves, either way, for the idle timeout is closed,
//!   whatever it waits for (a stalled upload, a client that stopped reading);
//! - at most `max_connections` are open at once; one more is answered `503` with
//!   `Retry-After` and closed, and the refusals are reported (at most one event a
//!   second, with their count), since a flood must not flood the log as well.
//!
//! With TLS, the handshake must finish within the header timeout too.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::metrics::Metrics;
use crate::server_event::{EventSink, ServerEvent};
use crate::tls::ServerTls;

/// How long a client may take, and how many may be connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// A request head (and a TLS handshake) must arrive within this.
    pub header_timeout: Duration,
    /// A connection on which nothing moves for this long is closed.
    pub idle_timeout: Duration,
    /// Connections open at once; one more is answered `503`.
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// A head is a few hundred bytes; ten seconds is slow even over a bad link.
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// Longer than any request the server answers takes to compute.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
    /// A fleet of thousands of nodes pushes over short connections; this leaves room
    /// for them and for a few thousand slow clients, under a file limit of 20,000.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 8_192;
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// How long a refused client gets to read its `503` before the socket closes.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Refusals being answered at once; past this, a refused connection is just closed.
const MAX_REFUSALS_IN_FLIGHT: usize = 256;

/// Everything the accept loop needs.
pub(crate) struct Acceptor {
    pub listener: TcpListener,
    pub router: Router,
    pub tls: Option<Arc<ServerTls>>,
    pub limits: ConnectionLimits,
    pub metrics: Arc<Metrics>,
    pub events: Option<EventSink>,
}

impl Acceptor {
    /// Accepts until `shutdown` completes, then waits for the connections in flight.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let Acceptor {
            listener,
            router,
            tls,
            limits,
            metrics,
            events,
        } = self;
        let emit = |event: ServerEvent| {
            if let Some(events) = &events {
                events(event);
            }
        };
        let graceful = GracefulShutdown::new();
        let open = Arc::new(Semaphore::new(limits.max_connections));
        let refusing = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
        let refusals = RefusalReport::new();
        let mut http = http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout);
        let shared = Arc::new(Shared {
            router,
            tls,
            limits,
            metrics,
            http,
        });
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            let (stream, _peer): (TcpStream, SocketAddr) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    if !is_connection_error(&error) {
                        emit(ServerEvent::AcceptFailed {
                            error: error.to_string(),
                        });
                        // Out of descriptors: retrying at once would spin.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let Ok(permit) = open.clone().try_acquire_owned() else {
                shared
                    .metrics
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                if let Some(count) = refusals.note() {
                    emit(ServerEvent::Refused {
                        count,
                        max_connections: limits.max_connections,
                    });
                }
                if let Ok(turn) = refusing.clone().try_acquire_owned() {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        shared.refuse(stream).await;
                        drop(turn);
                    });
                }
                continue;
            };
            let shared = shared.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                shared
                    .metrics
                    .connections_open
                    .fetch_add(1, Ordering::Relaxed);
                shared.serve(stream, watcher).await;
                shared
                    .metrics
                    .connections_open
                    .fetch_sub(1, Ordering::Relaxed);
                drop(permit);
            });
        }
        drop(listener);
        graceful.shutdown().await;
    }
}

/// What every connection's task shares.
struct Shared {
    router: Router,
    tls: Option<Arc<ServerTls>>,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    http: http1::Builder,
}

impl Shared {
    async fn serve(&self, stream: TcpStream, watcher: hyper_util::server::graceful::Watcher) {
        match &self.tls {
            None => self.serve_http(stream, watcher).await,
            Some(tls) => {
                let handshake = tls.acceptor().accept(stream);
                match tokio::time::timeout(self.limits.header_timeout, handshake).await {
                    Ok(Ok(stream)) => self.serve_http(stream, watcher).await,
                    Ok(Err(_)) => {}
                    Err(_) => {
                        self.metrics
                            .connections_timed_out
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    async fn serve_http<S>(&self, stream: S, watcher: hyper_util::server::graceful::Watcher)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Activity::new();
        let io = TokioIo::new(Watched {
            inner: stream,
            activity: activity.clone(),
        });
        let service = TowerToHyperService::new(self.router.clone());
        let connection = watcher.watch(self.http.serve_connection(io, service));
        tokio::select! {
            result = connection => {
                if result.as_ref().is_err_and(hyper::Error::is_timeout) {
                    self.metrics.connections_timed_out.fetch_add(1, Ordering::Relaxed);
                }
            }
            () = activity.idle_for(self.limits.idle_timeout) => {
                self.metrics.connections_timed_out.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Answers `503` over the cap (after the handshake, with TLS) and closes.
    async fn refuse(&self, stream: TcpStream) {
        match &self.tls {
            None => refuse_on(stream, self.limits.max_connections).await,
            Some(tls) => {
                let handshake = tls.acceptor().accept(stream);
                if let Ok(Ok(stream)) = tokio::time::timeout(REFUSAL_LINGER, handshake).await {
                    refuse_on(stream, self.limits.max_connections).await;
                }
            }
        }
    }
}

/// Writes the `503`, then reads what the client sent until it closes (or a second
/// passes): closing with its request unread would reset the connection and lose the
/// answer.
async fn refuse_on<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, max_connections: usize) {
    let answer = refusal(max_connections);
    let linger = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, linger).await;
}

/// The `503` a connection over the cap gets, in the API's error shape.
pub(crate) fn refusal(max_connections: usize) -> String {
    let body = serde_json::json!({
        "error": {
            "status": 503,
            "message": format!("the server has `{max_connections}` connections open, its limit"),
            "hint": "retry after the time in `Retry-After`; if this lasts, raise `--max-connections` or add a replica",
        }
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Errors of one connection (it went away before it was accepted), not the listener's.
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        error.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// Folds refusals into at most one report a second.
struct RefusalReport {
    started: Instant,
    /// Milliseconds since `started` of the last report; `u64::MAX`: none yet.
    last_ms: AtomicU64,
    unreported: AtomicU64,
}

impl RefusalReport {
    fn new() -> RefusalReport {
        RefusalReport {
            started: Instant::now(),
            last_ms: AtomicU64::new(u64::MAX),
            unreported: AtomicU64::new(0),
        }
    }

    /// Counts one refusal; `Some(count)` when it is time to report the count.
    fn note(&self) -> Option<u64> {
        self.note_at(millis_since(self.started))
    }

    fn note_at(&self, now_ms: u64) -> Option<u64> {
        let count = self.unreported.fetch_add(1, Ordering::Relaxed) + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != u64::MAX && now_ms.saturating_sub(last) < 1_000 {
            return None;
        }
        self.last_ms.store(now_ms, Ordering::Relaxed);
        self.unreported.fetch_sub(count, Ordering::Relaxed);
        Some(count)
    }
}

fn millis_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
}

/// When a connection last moved a byte (on tokio's clock, which tests can pause).
#[derive(Debug, Clone)]
struct Activity {
    started: tokio::time::Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: tokio::time::Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(elapsed, Ordering::Relaxed);
    }

    /// Completes once nothing has moved for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = self.started + last + limit;
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that notes every byte it moves in its [`Activity`].
struct Watched<S> {
    inner: S,
    activity: Activity,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_reported_at_most_once_a_second_with_their_count() {
        let report = RefusalReport::new();
        assert_eq!(report.note_at(0), Some(1));
        assert_eq!(report.note_at(10), None);
        assert_eq!(report.note_at(999), None);
        assert_eq!(report.note_at(1_000), Some(3));
        assert_eq!(report.note_at(1_500), None);
        assert_eq!(report.note_at(5_000), Some(2));
    }

    #[test]
    fn the_refusal_is_a_whole_503_in_the_apis_error_shape() {
        let text = refusal(8);
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nretry-after: 1"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["status"], 503);
        assert!(
            json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("`8` connections"),
            "{json}"
        );
        assert!(
            json["error"]["hint"]
                .as_str()
                .unwrap()
                .contains("--max-connections")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idleness_counts_from_the_last_byte_moved() {
        let activity = Activity::new();
        let limit = Duration::from_secs(60);
        let idle = activity.idle_for(limit);
        tokio::pin!(idle);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(poll_once(&mut idle).is_pending());
        activity.touch();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(poll_once(&mut idle).is_pending(), "a byte moved 59 s ago");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(poll_once(&mut idle).is_ready(), "nothing moved for 61 s");
    }

    fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        let waker = std::task::Waker::noop();
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }
}
