//! Reachability and round-trip time between nodes, for `network_connectivity`.
//!
//! Like SuperBench's `tcp-connectivity` (tcping, count 10, timeout 1 s): each attempt
//! opens a TCP connection and times the handshake. With [`ProbeSpec::echo`] set it also
//! sends a 16-byte ping over the new connection and times the answer, which needs a
//! [`ProbeResponder`] on the far side; that round trip crosses both hosts' TCP stacks
//! and processes, not just the kernels' SYN handling.
//!
//! All targets are probed at once (one thread per target, in batches), so a group's
//! all-pairs probe takes about `count × interval`, not that times the number of peers.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::{BackendError, CancelToken, DataPlaneError};

const PING: [u8; 8] = *b"GVPING01";
const PONG: [u8; 8] = *b"GVPONG01";
const MESSAGE_BYTES: usize = 16;
/// Targets probed at the same time: plenty for a group, few enough threads.
const MAX_PARALLEL_TARGETS: usize = 64;
/// How long the responder serves one connection without a ping before closing it.
const RESPONDER_IDLE: Duration = Duration::from_secs(2);
const RESPONDER_MAX_CONNECTIONS: usize = 256;
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// How to probe each target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// Attempts per target.
    pub count: u32,
    /// Limit of each attempt (connect, and the echo when asked).
    pub timeout: Duration,
    /// Pause between two attempts on the same target.
    pub interval: Duration,
    /// Also time a 16-byte round trip; the target must run a [`ProbeResponder`].
    pub echo: bool,
}

impl Default for ProbeSpec {
    /// tcping's count and timeout as SuperBench runs it; a 100 ms interval keeps the
    /// whole probe near one second.
    fn default() -> Self {
        ProbeSpec {
            count: 10,
            timeout: Duration::from_secs(1),
            interval: Duration::from_millis(100),
            echo: false,
        }
    }
}

/// Minimum, mean and maximum of the successful attempts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RttStats {
    pub min: Duration,
    pub avg: Duration,
    pub max: Duration,
}

impl RttStats {
    fn of(times: &[Duration]) -> Option<RttStats> {
        let min = *times.iter().min()?;
        let max = *times.iter().max()?;
        let total: Duration = times.iter().sum();
        let count = u32::try_from(times.len()).unwrap_or(u32::MAX);
        Some(RttStats {
            min,
            avg: total / count,
            max,
        })
    }
}

/// What probing one target found.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeResult {
    pub target: SocketAddr,
    pub attempts: u32,
    pub successes: u32,
    /// TCP handshake time of the successful attempts.
    pub connect_rtt: Option<RttStats>,
    /// 16-byte round trip of the successful attempts, when echo was asked.
    pub echo_rtt: Option<RttStats>,
    /// Why the last failed attempt failed.
    pub last_error: Option<DataPlaneError>,
}

impl ProbeResult {
    /// Successful attempts over attempts, 0 to 1.
    pub fn success_rate(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            f64::from(self.successes) / f64::from(self.attempts)
        }
    }
}

/// Probes every target `spec.count` times, all targets at once; results in target
/// order. Only a cancel is an error: an unreachable target is a result.
pub fn probe_connectivity(
    targets: &[SocketAddr],
    spec: &ProbeSpec,
    cancel: &CancelToken,
) -> Result<Vec<ProbeResult>, BackendError> {
    let mut results = Vec::with_capacity(targets.len());
    for batch in targets.chunks(MAX_PARALLEL_TARGETS) {
        cancel.check()?;
        let batch_results: Vec<ProbeResult> = thread::scope(|scope| {
            let running: Vec<_> = batch
                .iter()
                .map(|&target| {
                    let spawned = thread::Builder::new()
                        .name("gpuvet-probe".to_owned())
                        .spawn_scoped(scope, move || probe_target(target, spec, cancel));
                    (target, spawned)
                })
                .collect();
            running
                .into_iter()
                .map(|(target, spawned)| {
                    let failed = |why: DataPlaneError| ProbeResult {
                        target,
                        attempts: 0,
                        successes: 0,
                        connect_rtt: None,
                        echo_rtt: None,
                        last_error: Some(why),
                    };
                    match spawned {
                        Ok(handle) => handle
                            .join()
                            .unwrap_or_else(|_| failed(DataPlaneError::ProbePanicked)),
                        Err(error) => failed(DataPlaneError::ProbeThread(error.into())),
                    }
                })
                .collect()
        });
        results.extend(batch_results);
    }
    cancel.check()?;
    Ok(results)
}

fn probe_target(target: SocketAddr, spec: &ProbeSpec, cancel: &CancelToken) -> ProbeResult {
    let mut connect_times = Vec::new();
    let mut echo_times = Vec::new();
    let mut result = ProbeResult {
        target,
        attempts: 0,
        successes: 0,
        connect_rtt: None,
        echo_rtt: None,
        last_error: None,
    };
    for attempt in 0..spec.count {
        if cancel.is_cancelled() {
            break;
        }
        if attempt > 0 {
            thread::sleep(spec.interval);
        }
        result.attempts += 1;
        match attempt_once(target, spec, attempt) {
            Ok((connect, echo)) => {
                result.successes += 1;
                connect_times.push(connect);
                echo_times.extend(echo);
            }
            Err(why) => result.last_error = Some(why),
        }
    }
    result.connect_rtt = RttStats::of(&connect_times);
    result.echo_rtt = RttStats::of(&echo_times);
    result
}

/// One tcping attempt: the handshake time, and the echo time when asked.
fn attempt_once(
    target: SocketAddr,
    spec: &ProbeSpec,
    attempt: u32,
) -> Result<(Duration, Option<Duration>), DataPlaneError> {
    let started = Instant::now();
    let stream = TcpStream::connect_timeout(&target, spec.timeout)
        .map_err(|error| DataPlaneError::Connect(error.into()))?;
    let connect = started.elapsed();
    if !spec.echo {
        return Ok((connect, None));
    }
    let echo_problem = |error: std::io::Error| DataPlaneError::Echo(error.into());
    let remaining = spec
        .timeout
        .saturating_sub(connect)
        .max(Duration::from_millis(1));
    stream.set_nodelay(true).map_err(echo_problem)?;
    stream
        .set_read_timeout(Some(remaining))
        .map_err(echo_problem)?;
    stream
        .set_write_timeout(Some(remaining))
        .map_err(echo_problem)?;
    let mut ping = [0u8; MESSAGE_BYTES];
    ping[..8].copy_from_slice(&PING);
    ping[8..].copy_from_slice(&u64::from(attempt).to_le_bytes());
    let sent = Instant::now();
    (&stream).write_all(&ping).map_err(echo_problem)?;
    let mut answer = [0u8; MESSAGE_BYTES];
    (&stream)
        .read_exact(&mut answer)
        .map_err(|error| match error.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => DataPlaneError::EchoTimedOut,
            ErrorKind::UnexpectedEof => DataPlaneError::EchoClosed,
            _ => echo_problem(error),
        })?;
    let echo = sent.elapsed();
    if answer[..8] != PONG || answer[8..] != ping[8..] {
        return Err(DataPlaneError::NotAProbeReply);
    }
    Ok((connect, Some(echo)))
}

/// Answers echo probes on a listener until dropped.
#[derive(Debug)]
pub struct ProbeResponder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl ProbeResponder {
    /// Serves `listener` on a background thread; each connection gets its own short-
    /// lived thread that answers pings until the prober closes or goes quiet.
    pub fn spawn(listener: TcpListener) -> std::io::Result<ProbeResponder> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = thread::Builder::new()
            .name("gpuvet-probe-responder".to_owned())
            .spawn({
                let stop = Arc::clone(&stop);
                move || serve(&listener, &stop)
            })?;
        Ok(ProbeResponder {
            addr,
            stop,
            acceptor: Some(acceptor),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ProbeResponder {
    /// The acceptor blocks in accept() (a node may hold one for a long run, and a
    /// polling loop would wake thousands of times a second in a large test group), so
    /// a connection of our own wakes it. If that fails the thread is left to end at
    /// the next connection rather than blocking the drop.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let wake = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.addr.port())
            }
            IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), self.addr.port())
            }
            _ => self.addr,
        };
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok()
            && let Some(acceptor) = self.acceptor.take()
        {
            let _ = acceptor.join();
        }
    }
}

fn serve(listener: &TcpListener, stop: &Arc<AtomicBool>) {
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok(_) if stop.load(Ordering::SeqCst) => break,
            Ok((stream, _)) => {
                // Beyond the cap a connection is closed at once: the prober sees a
                // failed echo, and the responder cannot be flooded with threads.
                if active.load(Ordering::SeqCst) >= RESPONDER_MAX_CONNECTIONS {
                    continue;
                }
                active.fetch_add(1, Ordering::SeqCst);
                let stop = Arc::clone(stop);
                let finished = Arc::clone(&active);
                let spawned = thread::Builder::new()
                    .name("gpuvet-probe-echo".to_owned())
                    .spawn(move || {
                        answer_pings(stream, &stop);
                        finished.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::SeqCst);
                }
            }
            // Out of descriptors or an aborted handshake: brief pause, then go on.
            Err(_) => thread::sleep(ACCEPT_RETRY),
        }
    }
}

fn answer_pings(stream: TcpStream, stop: &AtomicBool) {
    let configured = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true))
        .and_then(|()| stream.set_read_timeout(Some(RESPONDER_IDLE)))
        .and_then(|()| stream.set_write_timeout(Some(RESPONDER_IDLE)));
    if configured.is_err() {
        return;
    }
    let mut message = [0u8; MESSAGE_BYTES];
    while !stop.load(Ordering::SeqCst) {
        if (&stream).read_exact(&mut message).is_err() || message[..8] != PING {
            return;
        }
        message[..8].copy_from_slice(&PONG);
        if (&stream).write_all(&message).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtt_stats_of_nothing_is_none() {
        assert_eq!(RttStats::of(&[]), None);
        let ms = Duration::from_millis;
        assert_eq!(
            RttStats::of(&[ms(3), ms(1), ms(2)]),
            Some(RttStats {
                min: ms(1),
                avg: ms(2),
                max: ms(3)
            })
        );
    }

    /// One echo attempt against a listener whose connection `serve` handles.
    fn echo_against(
        serve: impl FnOnce(TcpStream) + Send + 'static,
    ) -> Result<(Duration, Option<Duration>), DataPlaneError> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap();
        let server = thread::spawn(move || serve(listener.accept().unwrap().0));
        let spec = ProbeSpec {
            timeout: Duration::from_millis(300),
            echo: true,
            ..ProbeSpec::default()
        };
        let result = attempt_once(target, &spec, 3);
        server.join().unwrap();
        result
    }

    #[test]
    fn an_echo_that_fails_says_how() {
        // Reads the ping, then hangs up without answering.
        let closed = echo_against(|mut stream| {
            let _ = stream.read_exact(&mut [0u8; MESSAGE_BYTES]);
        });
        assert_eq!(closed, Err(DataPlaneError::EchoClosed));
        assert_eq!(
            closed.unwrap_err().to_string(),
            "echo: the target closed the connection (no gpuvet probe responder there?)"
        );
        // Answers with something else.
        let stranger = echo_against(|mut stream| {
            let _ = stream.read_exact(&mut [0u8; MESSAGE_BYTES]);
            let _ = stream.write_all(&[b'x'; MESSAGE_BYTES]);
        });
        assert_eq!(stranger, Err(DataPlaneError::NotAProbeReply));
        // Keeps the connection open and says nothing past the attempt's timeout.
        let silent = echo_against(|mut stream| {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.read_exact(&mut [0u8; MESSAGE_BYTES]);
            let _ = stream.read(&mut [0u8; 1]);
        });
        assert_eq!(silent, Err(DataPlaneError::EchoTimedOut));
        assert_eq!(
            DataPlaneError::EchoTimedOut.to_string(),
            "echo: no answer within the timeout"
        );
    }

    #[test]
    fn a_probe_s_io_failures_keep_their_cause() {
        let reset = || std::io::Error::from(ErrorKind::ConnectionReset);
        let echo = DataPlaneError::Echo(reset().into());
        assert_eq!(echo.to_string(), "echo");
        assert_eq!(
            gpuvet_backend::with_causes(&echo),
            format!("echo: {}", reset())
        );
        // Only an exhausted machine refuses a thread; it reads as it always has.
        let thread = DataPlaneError::ProbeThread(reset().into());
        assert_eq!(
            gpuvet_backend::with_causes(&thread),
            format!("could not start a probing thread: {}", reset())
        );
        assert_eq!(
            DataPlaneError::ProbePanicked.to_string(),
            "the probing thread panicked"
        );
    }

    #[test]
    fn success_rate_of_no_attempts_is_zero() {
        let result = ProbeResult {
            target: "127.0.0.1:1".parse().unwrap(),
            attempts: 0,
            successes: 0,
            connect_rtt: None,
            echo_rtt: None,
            last_error: None,
        };
        assert_eq!(result.success_rate(), 0.0);
    }
}
