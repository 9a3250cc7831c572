//! The agent's side of the link to the coordinator, kept by one thread: it reads the
//! coordinator's frames (commands, rosters, acknowledgements, goodbyes) and sends the
//! heartbeats, judging the coordinator's liveness by their acknowledgements.
//!
//! A real node has one agent and so one such thread. A group in one process shares one
//! [`AgentLinks`] among all its agents: at 4,096 agents, a reading thread and a
//! heartbeat thread each meant some 16,000 wake-ups a second; here heartbeats that fall
//! due within [`BATCH`] of each other go out on one wake-up, and every link with
//! something to read is served on one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::agent::{AgentShared, Command, Inbound, LinkFailure, Received};
use crate::clock::unix_now_ns;
use crate::coordinator::lock;
use crate::error::ClusterError;
use crate::protocol::{
    FrameError, FrameReader, Heartbeat, MAX_FRAME_BYTES, Message, decode_message, encode_frame,
};
use crate::transport::{Poller, Stream, Transport};
use gpuvet_model::diagnostics::with_causes;

/// Heartbeats due this close together go out on one wake-up.
const BATCH: Duration = Duration::from_millis(20);
/// The longest wait with nothing due, to notice a stop.
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Beyond this lateness a heartbeat tick finds the agent stalled (stopped, starved)
/// rather than late, on top of twice the interval.
const STALL_MARGIN: Duration = Duration::from_millis(200);

/// The thread that keeps agents' links. Clones share it; it stops when the last clone
/// (an agent holds one) is dropped.
#[derive(Clone)]
pub struct AgentLinks {
    inner: Arc<Inner>,
    _owner: Arc<StopOnDrop>,
}

impl std::fmt::Debug for AgentLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLinks").finish_non_exhaustive()
    }
}

struct Inner {
    poller: Arc<dyn Poller>,
    added: Mutex<Vec<Link>>,
    stopping: AtomicBool,
}

struct StopOnDrop {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        let _ = self.inner.poller.wake();
        let thread = lock(&self.thread).take();
        // The last clone may be dropped on the thread itself (by a hook it ran).
        if let Some(thread) = thread
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }
}

impl AgentLinks {
    /// Starts the thread, for connections of `transport`.
    pub fn start(transport: &dyn Transport) -> io::Result<AgentLinks> {
        let inner = Arc::new(Inner {
            poller: transport.poller()?,
            added: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
        });
        let thread_inner = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("gpuvet-agent-link".to_owned())
            .spawn(move || keep_links(&thread_inner))?;
        Ok(AgentLinks {
            _owner: Arc::new(StopOnDrop {
                inner: Arc::clone(&inner),
                thread: Mutex::new(Some(thread)),
            }),
            inner,
        })
    }

    /// Keeps `shared`'s link, read from `stream`, with a heartbeat every `interval`;
    /// the coordinator is declared gone after `deadline` without an answer.
    pub(crate) fn add(
        &self,
        shared: Arc<AgentShared>,
        stream: Stream,
        interval: Duration,
        deadline: Duration,
    ) {
        let now = Instant::now();
        lock(&self.inner.added).push(Link {
            shared,
            stream,
            frames: FrameReader::new(MAX_FRAME_BYTES),
            interval,
            deadline,
            next_beat: now,
            last_tick: now,
            was_suspended: false,
            seq: 0,
        });
        let _ = self.inner.poller.wake();
    }
}

/// One agent's link.
struct Link {
    shared: Arc<AgentShared>,
    /// The reading handle; the agent's writer is another clone.
    stream: Stream,
    frames: FrameReader,
    interval: Duration,
    deadline: Duration,
    next_beat: Instant,
    last_tick: Instant,
    was_suspended: bool,
    seq: u64,
}

fn keep_links(inner: &Inner) {
    let mut links: HashMap<u64, Link> = HashMap::new();
    // Heartbeats by when they are due; entries of links gone since are skipped.
    let mut due: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut next_token = 0u64;
    let mut ready = Vec::new();
    let mut frames = Vec::new();
    while !inner.stopping.load(Ordering::SeqCst) {
        let wait = due.peek().map_or(IDLE_WAIT, |Reverse((at, _))| {
            at.saturating_duration_since(Instant::now()).min(IDLE_WAIT)
        });
        ready.clear();
        if !wait.is_zero() && inner.poller.wait(&mut ready, wait).is_err() {
            // Nothing a peer does makes waiting fail; back off rather than spin.
            std::thread::sleep(Duration::from_millis(10));
        }
        for link in lock(&inner.added).drain(..) {
            let token = next_token;
            next_token += 1;
            if let Err(err) = link.stream.watch(&*inner.poller, token) {
                link.shared.fail(LinkFailure::Lost(format!(
                    "cannot watch the connection to the coordinator: {err}"
                )));
                continue;
            }
            due.push(Reverse((link.next_beat, token)));
            links.insert(token, link);
            // Frames may have come before the watch.
            ready.push(token);
        }
        ready.sort_unstable();
        ready.dedup();
        for token in &ready {
            let Some(link) = links.get_mut(token) else {
                continue;
            };
            if !link.read(&mut frames) {
                drop_link(inner, &mut links, *token);
            }
        }
        let batch_end = Instant::now() + BATCH;
        while let Some(&Reverse((at, token))) = due.peek() {
            if at > batch_end {
                break;
            }
            due.pop();
            let Some(link) = links.get_mut(&token) else {
                continue;
            };
            if link.next_beat != at {
                continue;
            }
            if link.tick(Instant::now()) {
                due.push(Reverse((link.next_beat, token)));
            } else {
                drop_link(inner, &mut links, token);
            }
        }
    }
    for link in links.values() {
        let _ = link.stream.unwatch(&*inner.poller);
    }
}

fn drop_link(inner: &Inner, links: &mut HashMap<u64, Link>, token: u64) {
    if let Some(link) = links.remove(&token) {
        let _ = link.stream.unwatch(&*inner.poller);
    }
}

impl Link {
    /// Handles what the coordinator sent; `false` once the link is over.
    fn read(&mut self, frames: &mut Vec<Vec<u8>>) -> bool {
        frames.clear();
        let read = self.frames.read_ready(&mut *self.stream, frames);
        for frame in frames.drain(..) {
            match decode_message(&frame) {
                Ok(message) => {
                    if !self.on_message(message) {
                        return false;
                    }
                }
                Err(err) => {
                    self.shared.fail(LinkFailure::Lost(err.describe()));
                    return false;
                }
            }
        }
        match read {
            Ok(()) => !self.over(),
            Err(err) => {
                let detail = match err {
                    FrameError::Closed { mid_frame: false } => {
                        "the connection closed without a goodbye".to_owned()
                    }
                    _ => err.describe(),
                };
                self.shared.fail(LinkFailure::Lost(detail));
                false
            }
        }
    }

    /// One frame from the coordinator; `false` once the link is over.
    fn on_message(&mut self, message: Message) -> bool {
        let shared = &self.shared;
        *lock(&shared.awaiting_since) = None;
        let deliver = |received| {
            shared.deliver(Inbound::Received(received));
        };
        match message {
            Message::Command { seq, body } => deliver(Received::Command(Command { seq, body })),
            Message::Roster { members } => deliver(Received::Roster(members)),
            Message::Ping { seq, t0_ns } => {
                let t1_ns = unix_now_ns();
                let pong = Message::Pong {
                    seq,
                    t0_ns,
                    t1_ns,
                    t2_ns: unix_now_ns(),
                };
                if self.send_now(&pong).is_err() {
                    return false;
                }
            }
            Message::Abort { reason } => {
                shared.fail(LinkFailure::Aborted(reason));
                return false;
            }
            Message::Bye { reason } => {
                // A clean end: deliver it in order after what came before, then stop.
                *lock(&shared.failure) = Some(LinkFailure::Closed(reason.clone()));
                shared.ended.notify_all();
                shared.run_link_end_hooks();
                deliver(Received::Closed { reason });
                return false;
            }
            // Heartbeat acks have done their work above; nothing else is expected.
            _ => {}
        }
        true
    }

    fn over(&self) -> bool {
        self.shared.failure().is_some() || self.shared.closing.load(Ordering::SeqCst)
    }

    /// Sends a heartbeat and judges the coordinator's silence; `false` once the link
    /// is over. Schedules the next one.
    fn tick(&mut self, now: Instant) -> bool {
        if self.over() {
            return false;
        }
        self.next_beat = now + self.interval;
        let shared = &self.shared;
        // After a stall of our own (SIGSTOP, starvation) or a suspension, the
        // coordinator's silence says nothing about it: start judging afresh.
        let stalled = now.duration_since(self.last_tick) > self.interval * 2 + STALL_MARGIN;
        let suspended = shared.heartbeats_suspended.load(Ordering::SeqCst);
        if stalled || suspended || self.was_suspended {
            *lock(&shared.awaiting_since) = None;
        }
        self.was_suspended = suspended;
        if suspended {
            self.last_tick = now;
            return true;
        }
        let (phase, phase_since_ns) = lock(&shared.phase.0).clone();
        let heartbeat = Message::Heartbeat(Heartbeat {
            rank: shared.rank,
            seq: self.seq,
            phase,
            phase_since_ns,
            sent_at_ns: unix_now_ns(),
        });
        self.seq += 1;
        match self.send_now(&heartbeat) {
            Ok(Send::Done | Send::WriterBusy) => {}
            // A frozen host does nothing, as a stopped process would; its next tick
            // finds it stalled.
            Ok(Send::HostStopped) => return true,
            Err(()) => return false,
        }
        self.last_tick = now;
        let shared = &self.shared;
        let mut awaiting = lock(&shared.awaiting_since);
        let since = *awaiting.get_or_insert(now);
        drop(awaiting);
        let silent_for = now.duration_since(since);
        if silent_for > self.deadline {
            shared.fail(LinkFailure::Unresponsive {
                silent_for,
                deadline: self.deadline,
            });
            return false;
        }
        true
    }

    /// Sends `message` without waiting on the agent's own sends: a send under way
    /// already tells the coordinator this node is alive. `Err` once the link failed.
    fn send_now(&self, message: &Message) -> Result<Send, ()> {
        let frame = match encode_frame(message) {
            Ok(frame) => frame,
            Err(err) => {
                self.shared.fail(LinkFailure::Lost(with_causes(&err)));
                return Err(());
            }
        };
        let mut writer = match self.shared.writer.try_lock() {
            Ok(writer) => writer,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(Send::WriterBusy),
        };
        match writer.write_unless_stopped(&frame) {
            Ok(()) => Ok(Send::Done),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(Send::HostStopped),
            Err(err) => {
                drop(writer);
                let err =
                    ClusterError::io(format!("cannot send a `{}` message", message.kind()), err);
                self.shared.fail(LinkFailure::Lost(with_causes(&err)));
                Err(())
            }
        }
    }
}

/// What became of a send from the link's thread.
enum Send {
    Done,
    /// The agent's own thread was sending; this one was dropped.
    WriterBusy,
    /// The host is frozen; nothing was sent.
    HostStopped,
}
