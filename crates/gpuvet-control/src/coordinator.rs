//! The coordinator: admits the group's agents, watches their heartbeats, and carries
//! the binary's commands and the agents' reports.
//!
//! Threads, all owned here: one accepts connections; one per connection runs the
//! handshake (see `connection`); one reads every admitted member's frames (see
//! `members`); one judges liveness. The binary talks to it through `&self` methods and a stream of
//! [`CoordinatorEvent`]s, so it can print progress while the group works.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::auth::Token;
use crate::clock::{ClockOffset, ClockTracker, unix_now_ms};
use crate::connection;
use crate::error::ClusterError;
use crate::events::{
    CoordinatorEvent, MemberEvent, MemberEventKind, MemberInfo, MemberState, MemberStatus,
    Membership,
};
use crate::members::MemberReader;
use crate::protocol::{Body, Message, RosterEntry, encode_frame, write_frame, write_message};
use crate::transport::{self, Listener, Stream, Transport};

/// How the coordinator judges time.
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// How long a new connection has to complete the handshake, clock pings included.
    pub handshake_timeout: Duration,
    /// How often agents must send a heartbeat; at most one second.
    pub heartbeat_interval: Duration,
    /// Silence after which a member is declared unresponsive; at least two intervals.
    pub heartbeat_deadline: Duration,
    /// Ping exchanges in each agent's handshake, for its first clock offset. More
    /// samples follow, one with every few heartbeats (`members::CLOCK_PING_BEATS`).
    pub clock_samples: u32,
    /// How long a send to one member may block before it counts as failed.
    pub write_timeout: Duration,
    /// Handshakes served at once; more connections wait in the listen queue.
    pub max_concurrent_handshakes: usize,
    /// What carries the connections: TCP, or an in-memory network.
    pub transport: Arc<dyn Transport>,
}

impl Default for CoordinatorOptions {
    /// Half-second heartbeats with a 3 s deadline: six missed beats before a node is
    /// named, and the name is out about 3 s after it stops — well inside the 10 s goal.
    fn default() -> Self {
        CoordinatorOptions {
            handshake_timeout: Duration::from_secs(5),
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_deadline: Duration::from_secs(3),
            clock_samples: 4,
            write_timeout: Duration::from_secs(5),
            max_concurrent_handshakes: 256,
            transport: transport::tcp(),
        }
    }
}

impl CoordinatorOptions {
    fn validate(&self) -> Result<(), ClusterError> {
        let invalid = |name, reason: String| Err(ClusterError::InvalidOption { name, reason });
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval > Duration::from_secs(1) {
            return invalid(
                "heartbeat_interval",
                format!(
                    "`{:?}` must be above 0 and at most 1s",
                    self.heartbeat_interval
                ),
            );
        }
        if self.heartbeat_deadline < self.heartbeat_interval * 2 {
            return invalid(
                "heartbeat_deadline",
                format!(
                    "`{:?}` must be at least twice the heartbeat interval `{:?}`",
                    self.heartbeat_deadline, self.heartbeat_interval
                ),
            );
        }
        if self.handshake_timeout.is_zero() || self.write_timeout.is_zero() {
            return invalid("handshake_timeout", "timeouts must be above 0".to_owned());
        }
        if self.clock_samples == 0 {
            return invalid("clock_samples", "at least one ping is needed".to_owned());
        }
        if self.max_concurrent_handshakes == 0 {
            return invalid("max_concurrent_handshakes", "must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// What every coordinator thread shares.
pub(crate) struct Shared {
    pub(crate) job_id: String,
    pub(crate) token: Token,
    pub(crate) nnodes: u32,
    /// The coordinator listens on a loopback address only (`--listen-addr 127.0.0.1`):
    /// said in every challenge, so that agents on this host keep to loopback too.
    pub(crate) loopback_only: bool,
    pub(crate) options: CoordinatorOptions,
    pub(crate) state: Mutex<State>,
    /// Signalled whenever a member joins.
    joined: Condvar,
    events: mpsc::Sender<CoordinatorEvent>,
    /// Set once shutting down: closed connections are then no crash.
    pub(crate) closing: AtomicBool,
    next_command_seq: AtomicU64,
    handshakes_in_flight: Mutex<usize>,
    handshake_slot_freed: Condvar,
    /// Reads every admitted member's frames.
    pub(crate) members: MemberReader,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) slots: BTreeMap<u32, Slot>,
    /// Set when the rendezvous deadline has passed with ranks missing; they may no
    /// longer join.
    pub(crate) sealed: bool,
    /// Slots that became members (a member stays one when it leaves or is lost).
    pub(crate) joined: usize,
}

pub(crate) enum Slot {
    /// Reserved by a handshake in progress, so a second agent with the rank is refused.
    Joining {
        node: String,
    },
    Member(Box<Member>),
    /// Missing when the rendezvous closed.
    NeverJoined,
}

pub(crate) struct Member {
    pub(crate) info: MemberInfo,
    pub(crate) state: MemberState,
    pub(crate) last_seen: Instant,
    pub(crate) last_seen_ms: u64,
    pub(crate) phase: String,
    pub(crate) phase_since_ms: u64,
    /// Its clock samples; `info.clock` is their offset.
    pub(crate) clock: ClockTracker,
    /// Sends to this member; shared with its reader thread, which acknowledges heartbeats.
    pub(crate) writer: Arc<Mutex<Stream>>,
    /// Another handle on the socket, to shut it down without waiting for the writer lock.
    pub(crate) control: Stream,
}

impl Member {
    fn status(&self) -> MemberStatus {
        MemberStatus {
            info: self.info.clone(),
            state: self.state,
            last_seen_ms: self.last_seen_ms,
            phase: self.phase.clone(),
            phase_since_ms: self.phase_since_ms,
        }
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take the control plane down with it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn emit(&self, event: CoordinatorEvent) {
        // Nobody listening is fine: the binary may not care about events.
        let _ = self.events.send(event);
    }

    pub(crate) fn emit_member(&self, rank: u32, node: Option<String>, kind: MemberEventKind) {
        self.emit(CoordinatorEvent::Member(MemberEvent {
            rank,
            node,
            time_ms: unix_now_ms(),
            kind,
        }));
    }

    pub(crate) fn notify_joined(&self) {
        self.joined.notify_all();
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }
}

/// The coordinator of one group. Dropping it shuts it down.
pub struct Coordinator {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    data_session: [u8; crate::auth::SESSION_LEN],
    events: Mutex<mpsc::Receiver<CoordinatorEvent>>,
    stop_monitor: Mutex<Option<mpsc::Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("local_addr", &self.local_addr)
            .field("job_id", &self.shared.job_id)
            .field("nnodes", &self.shared.nnodes)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// Listens on `addr` (port 0 picks a free one) for a group of `expected_nodes`
    /// agents of job `job_id`, and starts serving at once.
    pub fn bind(
        addr: impl ToSocketAddrs,
        expected_nodes: u32,
        job_id: impl Into<String>,
        token: Token,
        options: CoordinatorOptions,
    ) -> Result<Coordinator, ClusterError> {
        options.validate()?;
        if expected_nodes == 0 {
            return Err(ClusterError::InvalidOption {
                name: "expected_nodes",
                reason: "a group has at least one node".to_owned(),
            });
        }
        let data_session = crate::auth::random_session()?;
        let listener = bind_first(&*options.transport, addr)
            .map_err(|err| ClusterError::io("cannot listen for agents", err))?;
        let transport = Arc::clone(&options.transport);
        let local_addr = listener
            .local_addr()
            .map_err(|err| ClusterError::io("cannot read the listening address", err))?;
        let poller = transport
            .poller()
            .map_err(|err| ClusterError::io("cannot set up the poller for members", err))?;
        let (events_tx, events_rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            job_id: job_id.into(),
            token,
            nnodes: expected_nodes,
            loopback_only: local_addr.ip().is_loopback(),
            options,
            state: Mutex::new(State::default()),
            joined: Condvar::new(),
            events: events_tx,
            closing: AtomicBool::new(false),
            next_command_seq: AtomicU64::new(1),
            handshakes_in_flight: Mutex::new(0),
            handshake_slot_freed: Condvar::new(),
            members: MemberReader::new(poller),
        });
        MemberReader::start(&shared)
            .map_err(|err| ClusterError::io("cannot start the thread that reads members", err))?;

        // The accept thread is not joined on shutdown: it leaves once a wake-up
        // connection gets it out of accept(), which cannot be waited on for sure.
        {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("gpuvet-accept".to_owned())
                .spawn(move || accept_loop(&shared, &*listener))
                .map_err(|err| ClusterError::io("cannot start the accept thread", err))?;
        }
        let (stop_tx, stop_rx) = mpsc::channel();
        let monitor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("gpuvet-liveness".to_owned())
                .spawn(move || liveness_loop(&shared, &stop_rx))
        };
        let monitor = match monitor {
            Ok(monitor) => monitor,
            Err(err) => {
                // Let the accept and reading threads go, so the port is free again.
                shared.closing.store(true, Ordering::SeqCst);
                shared.members.stop();
                let _ = transport.connect(wake_addr(local_addr), Duration::from_secs(1));
                return Err(ClusterError::io("cannot start the liveness thread", err));
            }
        };
        Ok(Coordinator {
            shared,
            local_addr,
            data_session,
            events: Mutex::new(events_rx),
            stop_monitor: Mutex::new(Some(stop_tx)),
            threads: Mutex::new(vec![monitor]),
        })
    }

    /// This run's data-plane session id, chosen at random when the coordinator started:
    /// agents derive the run's data-plane key from it ([`crate::Agent::data_plane_key`]),
    /// so a greeting recorded in one run proves nothing in another.
    pub fn data_session(&self) -> [u8; crate::auth::SESSION_LEN] {
        self.data_session
    }

    /// The address it listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn expected_nodes(&self) -> u32 {
        self.shared.nnodes
    }

    pub fn job_id(&self) -> &str {
        &self.shared.job_id
    }

    /// Waits until every rank has joined or `deadline` passes. Ranks still missing
    /// then are closed out: each gets a [`MemberEventKind::NeverJoined`] event and is
    /// refused if it turns up later, so the group's shape is settled.
    pub fn wait_for_members(&self, deadline: Instant) -> Membership {
        let started = Instant::now();
        let mut state = lock(&self.shared.state);
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if state.joined >= self.shared.nnodes as usize || remaining.is_zero() {
                break;
            }
            state = self
                .shared
                .joined
                .wait_timeout(state, remaining)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let mut missing = Vec::new();
        for rank in 0..self.shared.nnodes {
            match state.slots.get(&rank) {
                Some(Slot::Member(_)) => {}
                Some(Slot::NeverJoined) => missing.push(rank),
                Some(Slot::Joining { .. }) | None => {
                    // A handshake still running counts as missing: the group cannot
                    // wait for it any longer.
                    state.slots.insert(rank, Slot::NeverJoined);
                    let waited_ms =
                        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    self.shared
                        .emit_member(rank, None, MemberEventKind::NeverJoined { waited_ms });
                    missing.push(rank);
                }
            }
        }
        if !missing.is_empty() {
            state.sealed = true;
        }
        let joined = state
            .slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Member(member) => Some(member.info.clone()),
                _ => None,
            })
            .collect();
        Membership { joined, missing }
    }

    /// Every member now, by rank.
    pub fn members(&self) -> Vec<MemberStatus> {
        let state = lock(&self.shared.state);
        state
            .slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Member(member) => Some(member.status()),
                _ => None,
            })
            .collect()
    }

    pub fn member(&self, rank: u32) -> Option<MemberStatus> {
        match lock(&self.shared.state).slots.get(&rank) {
            Some(Slot::Member(member)) => Some(member.status()),
            _ => None,
        }
    }

    /// The clock offset of a member, to put its timestamps on the coordinator's timeline.
    pub fn clock_offset(&self, rank: u32) -> Option<ClockOffset> {
        // Asked for every reply: read in place rather than copy the member's status.
        match lock(&self.shared.state).slots.get(&rank) {
            Some(Slot::Member(member)) => Some(member.info.clock),
            _ => None,
        }
    }

    /// The next event, waiting until `deadline`; `None` when none came in time. Meant
    /// for one consuming thread: a second caller waits for the first.
    pub fn recv_event(&self, deadline: Instant) -> Option<CoordinatorEvent> {
        let events = lock(&self.events);
        events
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok()
    }

    /// The next event if one is waiting.
    pub fn try_recv_event(&self) -> Option<CoordinatorEvent> {
        lock(&self.events).try_recv().ok()
    }

    /// Sends a command to one member; returns its sequence number, which the agent's
    /// report names in `in_reply_to`.
    pub fn send<T: Serialize + ?Sized>(&self, rank: u32, command: &T) -> Result<u64, ClusterError> {
        let body = Body::to(command)?;
        let seq = self.shared.next_command_seq.fetch_add(1, Ordering::Relaxed);
        self.send_message(rank, &Message::Command { seq, body })?;
        Ok(seq)
    }

    /// Sends the same command to every connected member, under one sequence number.
    pub fn broadcast<T: Serialize + ?Sized>(&self, command: &T) -> Result<Broadcast, ClusterError> {
        let body = Body::to(command)?;
        let seq = self.shared.next_command_seq.fetch_add(1, Ordering::Relaxed);
        Ok(self.send_to_all(&Message::Command { seq, body }, seq))
    }

    /// Tells every connected member who is in the group and where its data plane listens.
    pub fn send_roster(&self) -> Broadcast {
        let members: Vec<RosterEntry> = self
            .members()
            .iter()
            .map(|member| member.info.roster_entry())
            .collect();
        self.send_to_all(&Message::Roster { members }, 0)
    }

    /// Tells every connected member to stop the run now, e.g. after a member crashed.
    pub fn abort(&self, reason: &str) -> Broadcast {
        self.send_to_all(
            &Message::Abort {
                reason: reason.to_owned(),
            },
            0,
        )
    }

    /// Says goodbye to every member and stops serving. Later calls do nothing.
    pub fn shutdown(&self, reason: &str) {
        if self.shared.closing.swap(true, Ordering::SeqCst) {
            return;
        }
        let connected: Vec<(Arc<Mutex<Stream>>, Stream)> = {
            let state = lock(&self.shared.state);
            state
                .slots
                .values()
                .filter_map(|slot| match slot {
                    Slot::Member(member) if member.state.is_connected() => {
                        Some((Arc::clone(&member.writer), member.control.try_clone().ok()?))
                    }
                    _ => None,
                })
                .collect()
        };
        for (writer, control) in connected {
            let _ = write_message(
                &mut *lock(&writer),
                &Message::Bye {
                    reason: reason.to_owned(),
                },
            );
            let _ = control.shutdown(std::net::Shutdown::Both);
        }
        // The accept thread waits in accept(); a connection of our own wakes it.
        let _ = self
            .shared
            .options
            .transport
            .connect(wake_addr(self.local_addr), Duration::from_secs(1));
        self.shared.handshake_slot_freed.notify_all();
        self.shared.members.stop();
        drop(lock(&self.stop_monitor).take());
        for thread in lock(&self.threads).drain(..) {
            let _ = thread.join();
        }
    }

    fn send_message(&self, rank: u32, message: &Message) -> Result<(), ClusterError> {
        self.send_frame(rank, &encode_frame(message)?, message.kind())
    }

    fn send_frame(&self, rank: u32, frame: &[u8], kind: &str) -> Result<(), ClusterError> {
        if self.shared.is_closing() {
            return Err(ClusterError::ShutDown);
        }
        let writer = {
            let state = lock(&self.shared.state);
            match state.slots.get(&rank) {
                Some(Slot::Member(member)) if member.state.is_connected() => {
                    Arc::clone(&member.writer)
                }
                Some(Slot::Member(member)) => {
                    return Err(ClusterError::MemberGone {
                        rank,
                        state: member.state,
                    });
                }
                _ => return Err(ClusterError::NoSuchMember { rank }),
            }
        };
        write_frame(&mut *lock(&writer), frame, kind)
    }

    /// Encodes `message` once and writes the same bytes to every connected member: a
    /// large verdict for a thousand nodes is serialized once, not a thousand times.
    fn send_to_all(&self, message: &Message, seq: u64) -> Broadcast {
        let ranks: Vec<u32> = lock(&self.shared.state)
            .slots
            .iter()
            .filter_map(|(&rank, slot)| match slot {
                Slot::Member(member) if member.state.is_connected() => Some(rank),
                _ => None,
            })
            .collect();
        let mut outcome = Broadcast {
            seq,
            sent_to: Vec::new(),
            failed: Vec::new(),
        };
        let frame = match encode_frame(message) {
            Ok(frame) => frame,
            Err(err) => {
                let reason = gpuvet_model::diagnostics::with_causes(&err);
                outcome.failed = ranks
                    .into_iter()
                    .map(|rank| {
                        let detail =
                            format!("cannot encode a `{}` message: {reason}", message.kind());
                        (rank, ClusterError::BadFrame { detail })
                    })
                    .collect();
                return outcome;
            }
        };
        for rank in ranks {
            match self.send_frame(rank, &frame, message.kind()) {
                Ok(()) => outcome.sent_to.push(rank),
                Err(err) => outcome.failed.push((rank, err)),
            }
        }
        outcome
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.shutdown("the coordinator stopped");
    }
}

/// Who a message to the whole group reached.
#[derive(Debug)]
pub struct Broadcast {
    /// The command's sequence number (0 for roster and abort).
    pub seq: u64,
    pub sent_to: Vec<u32>,
    pub failed: Vec<(u32, ClusterError)>,
}

fn wake_addr(local: SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, local.port())
}

/// Binds the first of `addr`'s addresses that can be bound, as `TcpListener::bind`
/// does.
fn bind_first(
    transport: &dyn Transport,
    addr: impl ToSocketAddrs,
) -> std::io::Result<Box<dyn Listener>> {
    let mut last = std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "the address resolves to nothing",
    );
    for addr in addr.to_socket_addrs()? {
        match transport.bind(addr) {
            Ok(listener) => return Ok(listener),
            Err(err) => last = err,
        }
    }
    Err(last)
}

fn accept_loop(shared: &Arc<Shared>, listener: &dyn Listener) {
    loop {
        let accepted = listener.accept();
        if shared.is_closing() {
            return;
        }
        let (stream, peer) = match accepted {
            Ok(connection) => connection,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: pause and go on.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        // Bound the handshakes in flight so a flood of silent clients cannot exhaust
        // threads; the rest wait in the kernel's listen queue.
        {
            let mut in_flight = lock(&shared.handshakes_in_flight);
            while *in_flight >= shared.options.max_concurrent_handshakes && !shared.is_closing() {
                in_flight = shared
                    .handshake_slot_freed
                    .wait(in_flight)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if shared.is_closing() {
                return;
            }
            *in_flight += 1;
        }
        let slot = HandshakeSlot(Arc::clone(shared));
        let thread_shared = Arc::clone(shared);
        let spawned = gpuvet_threads::spawn_detached(format!("gpuvet-conn-{peer}"), move || {
            connection::serve(&thread_shared, stream, peer, slot);
        });
        if let Err(err) = spawned {
            shared.emit(CoordinatorEvent::Refused(crate::events::RefusedPeer {
                peer,
                time_ms: unix_now_ms(),
                rank: None,
                node: None,
                refusal: crate::events::Refusal::Unavailable {
                    detail: format!("cannot start a thread: {err}"),
                },
            }));
        }
    }
}

/// One handshake in flight; freeing it lets the accept loop take the next connection.
pub(crate) struct HandshakeSlot(Arc<Shared>);

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.0.handshakes_in_flight);
        *in_flight = in_flight.saturating_sub(1);
        self.0.handshake_slot_freed.notify_one();
    }
}

/// Declares members unresponsive once they are silent past the deadline.
fn liveness_loop(shared: &Shared, stop: &mpsc::Receiver<()>) {
    let deadline = shared.options.heartbeat_deadline;
    let tick = (deadline / 10).clamp(Duration::from_millis(10), Duration::from_millis(100));
    let mut last_tick = Instant::now();
    loop {
        match stop.recv_timeout(tick) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Sender dropped: shutting down.
            _ => return,
        }
        let now = Instant::now();
        // If this thread itself did not run for a long while (the coordinator was
        // stopped or starved), the members' silence says nothing about them: give
        // everyone a fresh deadline instead of accusing the whole group.
        let stalled = now.duration_since(last_tick) > tick + deadline / 2;
        last_tick = now;
        let mut state = lock(&shared.state);
        for (rank, slot) in &mut state.slots {
            let Slot::Member(member) = slot else { continue };
            if member.state != MemberState::Alive {
                continue;
            }
            if stalled {
                member.last_seen = member.last_seen.max(now);
                continue;
            }
            let silent_for = now.duration_since(member.last_seen);
            if silent_for > deadline {
                member.state = MemberState::Unresponsive;
                shared.emit_member(
                    *rank,
                    Some(member.info.node.clone()),
                    MemberEventKind::Unresponsive {
                        last_seen_ms: member.last_seen_ms,
                        silent_for_ms: u64::try_from(silent_for.as_millis()).unwrap_or(u64::MAX),
                        last_phase: member.phase.clone(),
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_keep_heartbeats_within_a_second_and_the_deadline_above_two_beats() {
        assert!(CoordinatorOptions::default().validate().is_ok());
        let slow = CoordinatorOptions {
            heartbeat_interval: Duration::from_secs(2),
            ..Default::default()
        };
        assert!(
            slow.validate()
                .unwrap_err()
                .to_string()
                .contains("at most 1s")
        );
        let tight = CoordinatorOptions {
            heartbeat_deadline: Duration::from_millis(600),
            ..Default::default()
        };
        assert!(
            tight
                .validate()
                .unwrap_err()
                .to_string()
                .contains("at least twice")
        );
        let no_pings = CoordinatorOptions {
            clock_samples: 0,
            ..Default::default()
        };
        assert!(no_pings.validate().is_err());
    }

    #[test]
    fn the_wake_address_is_reachable_for_wildcard_binds() {
        assert_eq!(
            wake_addr("0.0.0.0:7".parse().unwrap()),
            "127.0.0.1:7".parse().unwrap()
        );
        assert_eq!(
            wake_addr("[::]:7".parse().unwrap()),
            "[::1]:7".parse().unwrap()
        );
        assert_eq!(
            wake_addr("10.1.2.3:7".parse().unwrap()),
            "10.1.2.3:7".parse().unwrap()
        );
    }
}
