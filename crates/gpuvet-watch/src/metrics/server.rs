//! The HTTP/1.1 endpoint for `GET /metrics`: std sockets and threads, with the
//! request head parsed by `httparse` (hyper's parser, no dependencies of its own).
//!
//! Why not a server crate (tiny_http, oxhttp, touche): none keeps the bounds below
//! and also stops cleanly; the comparison is in this crate's Cargo.toml.
//!
//! One thread accepts; each connection gets a short-lived thread of its own, at most
//! [`ServerOptions::max_connections`] at once, with one deadline for its whole request
//! head and a cap on its size, so a slow or silent client holds only its own thread,
//! never the accept loop, another scrape or the watcher (rendering holds the metrics'
//! lock only while it formats the text, never while it writes to a client). Every
//! answer closes the connection.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{Metrics, MetricsError};

/// Prometheus' text format, as its client libraries announce it.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A request head larger than this is refused (`431`): a scrape sends a few hundred
/// bytes.
const MAX_HEAD: usize = 8 * 1024;

/// Header fields parsed at most; a head with more is refused (`431`).
const MAX_HEADERS: usize = 32;

/// The server's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    /// Time a client has to send its whole request head (5 s); then the connection is
    /// closed (`408` if it sent part of one).
    pub request_timeout: Duration,
    /// How long one write of the answer may block (5 s).
    pub write_timeout: Duration,
    /// Connections served at once (8); more are closed unanswered.
    pub max_connections: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            request_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            max_connections: 8,
        }
    }
}

/// A running `/metrics` endpoint. Dropping it stops it, as [`MetricsServer::stop`]
/// does.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port, see [`MetricsServer::local_addr`])
    /// and serves `metrics` until stopped.
    pub fn bind(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<MetricsServer, MetricsError> {
        MetricsServer::bind_with(addr, metrics, ServerOptions::default())
    }

    pub fn bind_with(
        addr: SocketAddr,
        metrics: Arc<Metrics>,
        options: ServerOptions,
    ) -> Result<MetricsServer, MetricsError> {
        let bind_err = |source| MetricsError::Bind { addr, source };
        let listener = TcpListener::bind(addr).map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            thread::Builder::new()
                .name("gpuvet-metrics".to_owned())
                .spawn(move || accept_loop(listener, metrics, options, stop))
                .map_err(MetricsError::Spawn)?
        };
        Ok(MetricsServer {
            addr: local,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and ends the accept thread. Connections being answered finish
    /// on their own threads within the [`ServerOptions`] timeouts.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // `accept` blocks; a connection of our own wakes it to see the flag. If that
        // connection fails, joining could block forever: the thread is left to end at
        // the next connection instead.
        if TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(2)).is_ok() {
            let _ = thread.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Where to connect to reach a listener bound to `addr` (loopback for a wildcard).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// Decrements the count of connections being served when their thread ends (or when
/// it could not start).
struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    options: ServerOptions,
    stop: Arc<AtomicBool>,
) {
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(_) => {
                // Out of file descriptors and the like: back off so the loop does not
                // spin on an error that repeats.
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if active.load(Ordering::SeqCst) >= options.max_connections {
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let guard = Active(Arc::clone(&active));
        let metrics = Arc::clone(&metrics);
        let options = options.clone();
        // If the thread cannot start, the closure is dropped: the connection closes and
        // the guard gives its slot back.
        let _ = thread::Builder::new()
            .name("gpuvet-metrics-conn".to_owned())
            .stack_size(256 * 1024)
            .spawn(move || {
                let _guard = guard;
                serve(stream, &metrics, &options);
            });
    }
}

/// Why no request was read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// The client closed; `partial`: after sending part of a request.
    Closed {
        partial: bool,
    },
    TimedOut {
        partial: bool,
    },
    /// Not HTTP/1.x.
    Malformed,
    /// Past [`MAX_HEAD`] bytes or [`MAX_HEADERS`] fields.
    TooLarge,
    Io,
}

fn serve(mut stream: TcpStream, metrics: &Metrics, options: &ServerOptions) {
    let _ = stream.set_write_timeout(Some(options.write_timeout));
    let _ = stream.set_nodelay(true);
    let answer = match read_request(&mut stream, options.request_timeout) {
        Ok(request) => respond(&request, metrics),
        Err(HeadError::Closed { partial: true } | HeadError::Malformed) => {
            simple(400, "Bad Request", "bad request\n")
        }
        Err(HeadError::TooLarge) => simple(
            431,
            "Request Header Fields Too Large",
            "request header fields too large\n",
        ),
        Err(HeadError::TimedOut { partial: true }) => {
            simple(408, "Request Timeout", "request timeout\n")
        }
        // Nothing was asked, or the socket failed: nothing to answer.
        Err(HeadError::Closed { partial: false } | HeadError::TimedOut { partial: false })
        | Err(HeadError::Io) => return,
    };
    let _ = stream.write_all(&answer);
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}

/// The request line's method and target.
#[derive(Debug, PartialEq, Eq)]
struct RequestLine {
    method: String,
    target: String,
}

/// Reads until the request head is whole, within `timeout` in all (not per read: a
/// client dripping one byte at a time is cut off too), and parses it.
fn read_request(stream: &mut TcpStream, timeout: Duration) -> Result<RequestLine, HeadError> {
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let partial = !buf.is_empty();
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::TimedOut { partial });
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Io)?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err(HeadError::Closed { partial }),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if let Some(request) = parse(&buf)? {
                    return Ok(request);
                }
                if buf.len() > MAX_HEAD {
                    return Err(HeadError::TooLarge);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::TimedOut { partial });
            }
            Err(_) => return Err(HeadError::Io),
        }
    }
}

/// The request in `buf`: `None` while its head is incomplete, an error as soon as it
/// cannot be HTTP/1.x.
fn parse(buf: &[u8]) -> Result<Option<RequestLine>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(_)) => Ok(Some(RequestLine {
            method: request.method.unwrap_or_default().to_owned(),
            target: request.path.unwrap_or_default().to_owned(),
        })),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(_) => Err(HeadError::Malformed),
    }
}

/// The answer to one request.
fn respond(request: &RequestLine, metrics: &Metrics) -> Vec<u8> {
    let path = request.target.split(['?', '#']).next().unwrap_or_default();
    if path != "/metrics" {
        return simple(404, "Not Found", "not found; metrics are at /metrics\n");
    }
    match request.method.as_str() {
        method @ ("GET" | "HEAD") => {
            let body = metrics.render();
            let mut out = header(200, "OK", CONTENT_TYPE, body.len(), "");
            if method == "GET" {
                out.extend_from_slice(body.as_bytes());
            }
            out
        }
        _ => {
            let body = "method not allowed\n";
            let mut out = header(
                405,
                "Method Not Allowed",
                "text/plain; charset=utf-8",
                body.len(),
                "Allow: GET, HEAD\r\n",
            );
            out.extend_from_slice(body.as_bytes());
            out
        }
    }
}

fn header(code: u16, reason: &str, content_type: &str, len: usize, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\n\
         {extra}Connection: close\r\n\r\n"
    )
    .into_bytes()
}

fn simple(code: u16, reason: &str, body: &str) -> Vec<u8> {
    let mut out = header(code, reason, "text/plain; charset=utf-8", body.len(), "");
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(method: &str, target: &str) -> Option<RequestLine> {
        Some(RequestLine {
            method: method.to_owned(),
            target: target.to_owned(),
        })
    }

    #[test]
    fn a_whole_head_parses_to_its_method_and_target() {
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(line("GET", "/metrics"))
        );
        // Bare newlines from lenient clients, and whatever follows the head.
        assert_eq!(
            parse(b"HEAD /metrics?x=1 HTTP/1.0\n\nrest"),
            Ok(line("HEAD", "/metrics?x=1"))
        );
    }

    #[test]
    fn an_incomplete_head_asks_for_more() {
        for part in [&b""[..], b"GET /metr", b"GET /metrics HTTP/1.1\r\nHost:"] {
            assert_eq!(parse(part), Ok(None), "{part:?}");
        }
    }

    #[test]
    fn what_is_not_http_1_is_refused_at_once() {
        for bad in [
            &b"garbage\r\n\r\n"[..],
            b"GET /metrics\r\n\r\n",
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(parse(bad), Err(HeadError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn too_many_header_fields_are_too_large() {
        let mut head = b"GET /metrics HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            head.extend(format!("X-{i}: y\r\n").bytes());
        }
        head.extend(b"\r\n");
        assert_eq!(parse(&head), Err(HeadError::TooLarge));
    }

    #[test]
    fn wildcard_addresses_wake_through_loopback() {
        let a: SocketAddr = "0.0.0.0:9400".parse().unwrap();
        assert_eq!(wake_addr(a), "127.0.0.1:9400".parse().unwrap());
        let b: SocketAddr = "[::]:9400".parse().unwrap();
        assert_eq!(wake_addr(b), "[::1]:9400".parse().unwrap());
    }
}
