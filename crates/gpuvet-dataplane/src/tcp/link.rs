//! One established connection to a peer rank, and blocking I/O on it that can never
//! hang.
//!
//! Every socket of a group carries a short read and write timeout ([`POLL`]). A
//! blocked `read` or `write` therefore wakes up several times a second, and the loop
//! around it checks the cancel token, the deadline, the stall timer and the abort flag
//! that the other half of a full-duplex exchange raises when it fails. A dead or stopped
//! peer thus always ends in an error that names it, never in a hang.
//!
//! `read` and `write` (not `read_exact` and `write_all`) are used on purpose: they
//! report partial progress before a timeout, so no byte is lost or sent twice when a
//! wait is resumed.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::{BackendError, CancelToken};

/// How often a blocked socket call wakes up to look at the token, deadline and stall
/// timer: short enough for a prompt cancel, long enough to cost nothing.
pub(super) const POLL: Duration = Duration::from_millis(50);

/// The most one `read` or `write` call moves: one pipelining segment. Larger calls
/// mean fewer system calls and wake-ups; on a veth link, going from 128 KiB to 512 KiB
/// calls raised the all-reduce's rate by 5–10 %. (With one connection carrying both
/// directions it was the other way round, since the kernel holds a socket's lock for
/// the whole call; the connections here are one-way.)
const MAX_IO_BYTES: usize = 512 << 10;

/// A connected peer.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) rank: usize,
    pub(super) addr: SocketAddr,
    pub(super) stream: TcpStream,
}

impl Link {
    /// Tunes a freshly handshaken connection for bulk transfer.
    ///
    /// Socket buffers are left to Linux's autotuning on purpose: an explicit
    /// `SO_SNDBUF`/`SO_RCVBUF` turns autotuning off and is capped by
    /// `net.core.{w,r}mem_max` (often 4 MiB), while autotuning grows a receive buffer to
    /// `tcp_rmem`'s maximum (often 32 MiB or more).
    pub(super) fn new(rank: usize, addr: SocketAddr, stream: TcpStream) -> io::Result<Link> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(POLL))?;
        stream.set_write_timeout(Some(POLL))?;
        Ok(Link { rank, addr, stream })
    }

    /// `rank 2 (`10.0.0.3:29400`)`: how every error names this peer.
    pub(super) fn name(&self) -> String {
        peer_name(self.rank, self.addr)
    }
}

/// A rank's connections, indexed by peer rank: one-way each, see `establish`.
#[derive(Debug)]
pub(super) struct Links {
    /// To each peer this rank sends to.
    pub(super) outgoing: Vec<Option<Link>>,
    /// From each peer this rank receives from.
    pub(super) incoming: Vec<Option<Link>>,
}

impl Links {
    pub(super) fn world(&self) -> usize {
        self.outgoing.len()
    }

    /// The connection to send to `rank` on.
    pub(super) fn to(&self, rank: usize) -> Result<&Link, Stop> {
        Self::find(&self.outgoing, rank, "to")
    }

    /// The connection to receive from `rank` on.
    pub(super) fn from(&self, rank: usize) -> Result<&Link, Stop> {
        Self::find(&self.incoming, rank, "from")
    }

    fn find<'a>(links: &'a [Option<Link>], rank: usize, way: &str) -> Result<&'a Link, Stop> {
        links.get(rank).and_then(Option::as_ref).ok_or_else(|| {
            Stop::Failed(BackendError::Failed(format!(
                "no connection {way} rank {rank} in this group (a plan and topology mismatch)"
            )))
        })
    }

    /// `rank N (`addr`)` for any peer, connected or not.
    pub(super) fn name(&self, rank: usize) -> String {
        match self
            .outgoing
            .get(rank)
            .or(self.incoming.get(rank))
            .and_then(Option::as_ref)
        {
            Some(link) => link.name(),
            None => format!("rank {rank}"),
        }
    }

    /// Whether this rank can send to and receive from every other rank.
    pub(super) fn is_full_mesh(&self, rank: usize) -> bool {
        (0..self.world()).all(|peer| {
            peer == rank || (self.outgoing[peer].is_some() && self.incoming[peer].is_some())
        })
    }
}

pub(super) fn peer_name(rank: usize, addr: SocketAddr) -> String {
    format!("rank {rank} (`{addr}`)")
}

/// Why a wait ended early.
#[derive(Debug)]
pub(super) enum Stop {
    /// A real failure, reported to the caller.
    Failed(BackendError),
    /// The other half of the exchange failed first and reports the cause.
    Aborted,
}

impl From<BackendError> for Stop {
    fn from(error: BackendError) -> Self {
        Stop::Failed(error)
    }
}

/// The limits every blocking call of one collective runs under.
#[derive(Debug, Clone, Copy)]
pub(super) struct Watch<'a> {
    pub(super) deadline: Instant,
    pub(super) cancel: &'a CancelToken,
    /// Raised by whichever half of a full-duplex exchange fails first.
    pub(super) abort: &'a AtomicBool,
    /// How long a link may move no byte at all while data is due; `None` waits until
    /// the deadline (used while peers enter a collective, which may legitimately be
    /// late).
    pub(super) stall_timeout: Option<Duration>,
    /// Names the work in errors: `all-reduce`, `all-gather`, ….
    pub(super) context: &'a str,
}

impl Watch<'_> {
    /// Called after every timed-out socket call: whether to keep waiting.
    fn keep_waiting(&self, link: &Link, idle_since: Instant, doing: Doing) -> Result<(), Stop> {
        self.cancel.check()?;
        if self.abort.load(Ordering::SeqCst) {
            return Err(Stop::Aborted);
        }
        let now = Instant::now();
        if now >= self.deadline {
            return Err(Stop::Failed(BackendError::Failed(format!(
                "{} before the deadline of the {}: {}",
                doing.describe_stuck(&link.name()),
                self.context,
                doing.idle_for(now - idle_since),
            ))));
        }
        if let Some(stall) = self.stall_timeout
            && now - idle_since >= stall
        {
            return Err(Stop::Failed(BackendError::Failed(format!(
                "{} during the {}: {}",
                doing.describe_stuck(&link.name()),
                self.context,
                doing.idle_for(now - idle_since),
            ))));
        }
        Ok(())
    }

    /// Ends the work early when the token or the other half says so.
    pub(super) fn check(&self) -> Result<(), Stop> {
        self.cancel.check()?;
        if self.abort.load(Ordering::SeqCst) {
            return Err(Stop::Aborted);
        }
        Ok(())
    }

    pub(super) fn raise_abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy)]
enum Doing {
    Sending,
    Receiving,
}

impl Doing {
    fn describe_stuck(self, peer: &str) -> String {
        match self {
            Doing::Sending => format!("{peer} stopped receiving"),
            Doing::Receiving => format!("{peer} sent nothing"),
        }
    }

    fn idle_for(self, idle: Duration) -> String {
        let what = match self {
            Doing::Sending => "no byte could be sent",
            Doing::Receiving => "no byte arrived",
        };
        format!("{what} for {:.1} s", idle.as_secs_f64())
    }
}

/// Time and bytes one link spent in one direction, for attributing slowness.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Traffic {
    pub(super) bytes: u64,
    /// Time spent inside blocking socket calls: waiting for the peer, plus the copy.
    pub(super) blocked: Duration,
}

/// Sends all of `bytes` to the peer.
pub(super) fn send_all(
    link: &Link,
    bytes: &[u8],
    watch: &Watch<'_>,
    traffic: &mut Traffic,
) -> Result<(), Stop> {
    let mut sent = 0;
    let mut idle_since = Instant::now();
    while sent < bytes.len() {
        let call_started = Instant::now();
        let end = bytes.len().min(sent + MAX_IO_BYTES);
        let result = (&link.stream).write(&bytes[sent..end]);
        traffic.blocked += call_started.elapsed();
        match result {
            Ok(0) => return Err(closed(link, watch)),
            Ok(count) => {
                sent += count;
                traffic.bytes += count as u64;
                idle_since = Instant::now();
                watch.check()?;
            }
            Err(error) if timed_out(&error) => {
                watch.keep_waiting(link, idle_since, Doing::Sending)?
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(io_failure(link, watch, "sending to", error)),
        }
    }
    Ok(())
}

/// Fills `bytes` from the peer.
pub(super) fn receive_exact(
    link: &Link,
    bytes: &mut [u8],
    watch: &Watch<'_>,
    traffic: &mut Traffic,
) -> Result<(), Stop> {
    let mut received = 0;
    let mut idle_since = Instant::now();
    while received < bytes.len() {
        let call_started = Instant::now();
        let end = bytes.len().min(received + MAX_IO_BYTES);
        let result = (&link.stream).read(&mut bytes[received..end]);
        traffic.blocked += call_started.elapsed();
        match result {
            Ok(0) => return Err(closed(link, watch)),
            Ok(count) => {
                received += count;
                traffic.bytes += count as u64;
                idle_since = Instant::now();
            }
            Err(error) if timed_out(&error) => {
                watch.keep_waiting(link, idle_since, Doing::Receiving)?
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(io_failure(link, watch, "receiving from", error)),
        }
    }
    Ok(())
}

/// A socket timeout reads as `WouldBlock` on Unix and `TimedOut` elsewhere.
fn timed_out(error: &io::Error) -> bool {
    matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn closed(link: &Link, watch: &Watch<'_>) -> Stop {
    if let Some(stop) = explained_elsewhere(watch) {
        return stop;
    }
    Stop::Failed(BackendError::Failed(format!(
        "{} closed the connection during the {}",
        link.name(),
        watch.context
    )))
}

fn io_failure(link: &Link, watch: &Watch<'_>, doing: &str, error: io::Error) -> Stop {
    if let Some(stop) = explained_elsewhere(watch) {
        return stop;
    }
    Stop::Failed(BackendError::io(
        format!(
            "{doing} {} failed during the {}",
            link.name(),
            watch.context
        ),
        error,
    ))
}

/// A peer that closes because this side was cancelled, or because this side's other
/// half already failed, is no news: report the cancel or let the other half speak.
fn explained_elsewhere(watch: &Watch<'_>) -> Option<Stop> {
    if watch.cancel.is_cancelled() {
        Some(Stop::Failed(BackendError::Cancelled))
    } else if watch.abort.load(Ordering::SeqCst) {
        Some(Stop::Aborted)
    } else {
        None
    }
}

/// Views f32 values as their bytes, for the socket.
pub(super) fn f32_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and u8 has alignment 1, so the same memory read as
    // bytes is valid for the same lifetime; the length is the slice's size in bytes.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)) }
}

/// Views f32 values as writable bytes, to receive into them directly.
pub(super) fn f32_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: as in `f32_bytes`; in addition every bit pattern is a valid f32, so any
    // bytes written through the view leave valid values behind.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), size_of_val(values)) }
}
