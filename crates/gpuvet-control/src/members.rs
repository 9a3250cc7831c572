//! One thread reads every admitted member's frames (heartbeats, reports, goodbyes),
//! woken by the transport's [`Poller`], instead of a blocked thread per connection.
//!
//! At 4,096 members a thread each meant 4,096 wake-ups per heartbeat round, eight a
//! second; here one wake-up serves every member with something to read. The handshake
//! still runs on a thread of its own (a reused one; it waits on one peer for a few
//! round trips) and hands the connection over when it admits the member.
//!
//! Every [`CLOCK_PING_BEATS`] heartbeats the acknowledgement goes out with a clock
//! ping, and the pong's sample refines the member's clock offset (see
//! [`crate::clock::ClockTracker`]).

use std::collections::HashMap;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::{PingSample, unix_now_ns};
use crate::connection::{MemberFrame, member_gone, on_member_message, record_clock_sample};
use crate::coordinator::{Shared, lock};
use crate::protocol::{FrameReader, MAX_FRAME_BYTES, Message, decode_message, write_message};
use crate::transport::{Poller, Stream};

/// How often the thread looks for a stop when nothing wakes it.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// A clock ping goes out with every this many heartbeats' acknowledgements: every 5 s
/// at the default half-second heartbeat. Often enough to follow drift and to replace
/// an offset taken while a machine was busy; rare enough to cost nothing.
pub(crate) const CLOCK_PING_BEATS: u64 = 10;

/// The reading thread's handle: where handshakes hand admitted members over.
#[derive(Debug)]
pub(crate) struct MemberReader {
    poller: Arc<dyn Poller>,
    admitted: Mutex<Vec<Session>>,
    stopping: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// An admitted member's connection.
#[derive(Debug)]
pub(crate) struct Session {
    rank: u32,
    stream: Stream,
    writer: Arc<Mutex<Stream>>,
    frames: FrameReader,
    /// Heartbeats acknowledged since the last clock ping went out.
    beats_since_ping: u64,
    ping_seq: u32,
    /// The clock ping awaiting its pong: its `seq` and `t0`.
    ping: Option<(u32, i64)>,
}

impl MemberReader {
    pub(crate) fn new(poller: Arc<dyn Poller>) -> MemberReader {
        MemberReader {
            poller,
            admitted: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            thread: Mutex::new(None),
        }
    }

    /// Starts the reading thread; it holds `shared` until [`stop`](Self::stop).
    pub(crate) fn start(shared: &Arc<Shared>) -> std::io::Result<()> {
        let thread_shared = Arc::clone(shared);
        let thread = std::thread::Builder::new()
            .name("gpuvet-members".to_owned())
            .spawn(move || read_members(&thread_shared))?;
        *lock(&shared.members.thread) = Some(thread);
        Ok(())
    }

    /// Hands an admitted member's connection to the reading thread.
    pub(crate) fn adopt(&self, rank: u32, stream: Stream, writer: Arc<Mutex<Stream>>) {
        lock(&self.admitted).push(Session {
            rank,
            stream,
            writer,
            frames: FrameReader::new(MAX_FRAME_BYTES),
            beats_since_ping: 0,
            ping_seq: 0,
            ping: None,
        });
        let _ = self.poller.wake();
    }

    /// Stops the reading thread and waits for it.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.poller.wake();
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

fn read_members(shared: &Shared) {
    let reader = &shared.members;
    let mut sessions: HashMap<u64, Session> = HashMap::new();
    let mut next_token = 0u64;
    let mut ready = Vec::new();
    let mut frames = Vec::new();
    while !reader.stopping.load(Ordering::SeqCst) {
        ready.clear();
        if reader.poller.wait(&mut ready, IDLE_WAIT).is_err() {
            // Nothing a peer does makes waiting fail; back off rather than spin.
            std::thread::sleep(Duration::from_millis(10));
        }
        for session in lock(&reader.admitted).drain(..) {
            let token = next_token;
            next_token += 1;
            if let Err(err) = session.stream.watch(&*reader.poller, token) {
                member_gone(
                    shared,
                    session.rank,
                    &format!("the coordinator cannot watch its connection: {err}"),
                );
                let _ = session.stream.shutdown(Shutdown::Both);
                continue;
            }
            sessions.insert(token, session);
            // Frames may have come before the watch.
            ready.push(token);
        }
        ready.sort_unstable();
        ready.dedup();
        for token in &ready {
            let Some(session) = sessions.get_mut(token) else {
                continue;
            };
            if !serve_ready(shared, session, &mut frames)
                && let Some(session) = sessions.remove(token)
            {
                let _ = session.stream.unwatch(&*reader.poller);
            }
        }
    }
    for session in sessions.values() {
        let _ = session.stream.unwatch(&*reader.poller);
    }
}

/// Handles what one member has sent; `false` once its connection is over.
fn serve_ready(shared: &Shared, session: &mut Session, frames: &mut Vec<Vec<u8>>) -> bool {
    frames.clear();
    let read = session.frames.read_ready(&mut *session.stream, frames);
    // When a pong in this batch arrived, as near as this thread can tell.
    let read_at_ns = unix_now_ns();
    for frame in frames.drain(..) {
        let message = match decode_message(&frame) {
            Ok(message) => message,
            Err(err) => {
                member_gone(
                    shared,
                    session.rank,
                    &format!("it broke the protocol: {}", err.describe()),
                );
                let _ = session.stream.shutdown(Shutdown::Both);
                return false;
            }
        };
        let ack = match &message {
            Message::Heartbeat(heartbeat) => Some(heartbeat.seq),
            &Message::Pong {
                seq,
                t0_ns,
                t1_ns,
                t2_ns,
            } => {
                if session.ping == Some((seq, t0_ns)) {
                    session.ping = None;
                    let sample = PingSample {
                        t0_ns,
                        t1_ns,
                        t2_ns,
                        t3_ns: read_at_ns,
                    };
                    record_clock_sample(shared, session.rank, sample);
                }
                None
            }
            _ => None,
        };
        match on_member_message(shared, session.rank, message) {
            MemberFrame::Read => {}
            MemberFrame::Left => {
                let _ = session.stream.shutdown(Shutdown::Both);
                return false;
            }
        }
        if let Some(seq) = ack {
            session.beats_since_ping += 1;
            let ping_seq = (session.beats_since_ping >= CLOCK_PING_BEATS).then(|| {
                session.ping_seq = session.ping_seq.wrapping_add(1);
                session.ping_seq
            });
            if let Some(ping) = acknowledge(&session.writer, seq, ping_seq) {
                session.ping = Some(ping);
                session.beats_since_ping = 0;
            }
        }
    }
    match read {
        Ok(()) => true,
        Err(err) => {
            member_gone(shared, session.rank, &crate::connection::describe_end(&err));
            let _ = session.stream.shutdown(Shutdown::Both);
            false
        }
    }
}

/// Acknowledges a heartbeat, unless a send to the member is under way: that frame
/// tells the agent the coordinator is alive just as well, and waiting for it here
/// would hold up every other member. A failed ack shows up as a broken connection on
/// a later read. With `ping_seq`, a clock ping follows the acknowledgement; its `seq`
/// and `t0` when it went out.
fn acknowledge(writer: &Mutex<Stream>, seq: u64, ping_seq: Option<u32>) -> Option<(u32, i64)> {
    let mut writer = match writer.try_lock() {
        Ok(writer) => writer,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    write_message(&mut *writer, &Message::HeartbeatAck { seq }).ok()?;
    let seq = ping_seq?;
    let t0_ns = unix_now_ns();
    write_message(&mut *writer, &Message::Ping { seq, t0_ns }).ok()?;
    Some((seq, t0_ns))
}
