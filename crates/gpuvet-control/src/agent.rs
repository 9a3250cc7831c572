//! The agent: one per node. It joins the coordinator (retrying until a deadline, since
//! agents may start before it), proves it holds the token, sends heartbeats with its
//! phase, and carries commands in and reports out.
//!
//! One thread keeps the link (see `links`): it reads the coordinator's frames, sends
//! heartbeats and judges the coordinator's liveness; agents of one process may share
//! it. If the coordinator dies or stops answering, every call returns an error within
//! the agent's deadline; nothing waits forever.

use std::collections::BTreeMap;
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::auth::{Token, agent_proof, from_hex, random_nonce, to_hex, verify_coordinator_proof};
use crate::clock::{ClockOffset, unix_now_ns};
use crate::coordinator::lock;
use crate::error::ClusterError;
use crate::links::AgentLinks;
use crate::protocol::{
    Body, FrameError, Hello, MAX_FRAME_BYTES, MAX_HANDSHAKE_FRAME_BYTES, Message, PROTOCOL_VERSION,
    RosterEntry, Welcome, decode_message, read_frame, write_message,
};
use crate::rendezvous::Endpoint;
use crate::transport::{self, Stream, Transport};
use gpuvet_model::diagnostics::with_causes;

/// Who this agent is, as it introduces itself.
#[derive(Debug, Clone)]
pub struct AgentIdentity {
    pub job_id: String,
    pub rank: u32,
    /// The group size this node was told; the coordinator refuses a mismatch.
    pub nnodes: u32,
    pub node: String,
    /// Where this node's data plane listens; `0.0.0.0:PORT` lets the coordinator fill in
    /// the IP its connection comes from.
    pub data_addr: Option<SocketAddr>,
    /// Anything else for the coordinator (backend, devices, versions).
    pub info: Body,
}

/// What the coordinator says of itself in its challenge, before the agent introduces
/// itself: what an agent may need to choose where it listens (see
/// [`Agent::connect_with`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoordinatorScope {
    /// The coordinator listens on a loopback address only, so every member of the
    /// group is on its host. Unauthenticated (the challenge comes before any proof),
    /// so only worth believing when the agent reached the coordinator over loopback:
    /// then only a process of this host can have said it.
    pub loopback_only: bool,
}

/// How [`Agent::connect_with`] learns who the agent is, from what the coordinator said.
pub type Identify<'a> = Box<
    dyn FnOnce(CoordinatorScope) -> Result<AgentIdentity, Box<dyn std::error::Error + Send + Sync>>
        + 'a,
>;

/// Who the agent is: known from the start, or made from the first challenge.
struct Introduction<'a> {
    identity: Option<AgentIdentity>,
    identify: Option<Identify<'a>>,
}

impl Introduction<'_> {
    fn identity(&mut self, scope: CoordinatorScope) -> Result<&AgentIdentity, ClusterError> {
        if let Some(identify) = self.identify.take() {
            self.identity =
                Some(identify(scope).map_err(|source| ClusterError::Identity { source })?);
        }
        self.identity
            .as_ref()
            .ok_or_else(|| ClusterError::Identity {
                source: "it failed at an earlier attempt".into(),
            })
    }
}

/// How the agent judges time.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// One connection attempt's handshake, clock pings included.
    pub handshake_timeout: Duration,
    /// Silence from the coordinator after which it is declared gone. Longer than the
    /// coordinator's own deadline, so the coordinator names a hung node before that
    /// node's peers give up on the coordinator.
    pub coordinator_deadline: Duration,
    /// The first pause between connection attempts; it doubles up to `max_retry_delay`.
    pub retry_delay: Duration,
    pub max_retry_delay: Duration,
    /// How long one send may block.
    pub write_timeout: Duration,
    /// What carries the connection: TCP, or an in-memory network.
    pub transport: Arc<dyn Transport>,
    /// The thread that keeps the link, shared by the agents of one process (a group in
    /// one process); `None` starts one for this agent.
    pub links: Option<AgentLinks>,
    /// Called each time something arrives for [`Agent::try_recv`]; `None` for an agent
    /// that waits in [`Agent::recv`].
    pub on_inbound: Option<OnInbound>,
}

/// Called from the link's thread each time a message or the link's end arrives for an
/// agent: many agents of one process then share a few threads, which take what came
/// with [`Agent::try_recv`], instead of a thread blocked in [`Agent::recv`] each. It
/// runs on the link's thread, so it must only note the agent and return.
#[derive(Clone)]
pub struct OnInbound(Arc<dyn Fn() + Send + Sync>);

impl OnInbound {
    pub fn new(notify: impl Fn() + Send + Sync + 'static) -> OnInbound {
        OnInbound(Arc::new(notify))
    }
}

impl std::fmt::Debug for OnInbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnInbound").finish_non_exhaustive()
    }
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            handshake_timeout: Duration::from_secs(10),
            coordinator_deadline: Duration::from_secs(5),
            retry_delay: Duration::from_millis(100),
            max_retry_delay: Duration::from_secs(1),
            write_timeout: Duration::from_secs(5),
            transport: transport::tcp(),
            links: None,
            on_inbound: None,
        }
    }
}

/// A message from the coordinator.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    Command(Command),
    /// The group's members and their data-plane addresses.
    Roster(Vec<RosterEntry>),
    /// The coordinator said goodbye; the session is over and later calls fail.
    Closed {
        reason: String,
    },
}

/// A command, in the binary's own vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Name it in the report that answers it.
    pub seq: u64,
    pub body: Body,
}

impl Command {
    /// The body as the binary's command type.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ClusterError> {
        Ok(self.body.parse()?)
    }
}

/// What ended the link; kept so every later call reports the same cause.
#[derive(Debug, Clone)]
pub(crate) enum LinkFailure {
    Lost(String),
    Unresponsive {
        silent_for: Duration,
        deadline: Duration,
    },
    Aborted(String),
    Closed(String),
}

impl LinkFailure {
    fn to_error(&self) -> ClusterError {
        match self {
            LinkFailure::Lost(detail) => ClusterError::CoordinatorLost {
                detail: detail.clone(),
            },
            LinkFailure::Unresponsive {
                silent_for,
                deadline,
            } => ClusterError::CoordinatorUnresponsive {
                silent_for: *silent_for,
                deadline: *deadline,
            },
            LinkFailure::Aborted(reason) => ClusterError::Aborted {
                reason: reason.clone(),
            },
            LinkFailure::Closed(reason) => ClusterError::SessionClosed {
                reason: reason.clone(),
            },
        }
    }
}

pub(crate) enum Inbound {
    Received(Received),
    Failed,
}

/// The phase this agent reports; cheap to clone into any thread that does the work.
#[derive(Debug, Clone)]
pub struct PhaseHandle(pub(crate) Arc<Mutex<(String, i64)>>);

impl PhaseHandle {
    /// Enters a new phase, e.g. "all_reduce_2 round 1 step 3"; the next heartbeat
    /// carries it with the time it was entered.
    pub fn set(&self, phase: impl Into<String>) {
        *lock(&self.0) = (phase.into(), unix_now_ns());
    }

    pub fn get(&self) -> String {
        lock(&self.0).0.clone()
    }
}

pub(crate) struct AgentShared {
    pub(crate) rank: u32,
    pub(crate) writer: Mutex<Stream>,
    /// Another handle on the socket, to shut it down without the writer lock.
    control: Stream,
    pub(crate) phase: PhaseHandle,
    /// When the oldest heartbeat still unanswered was sent; `None` when all are answered.
    pub(crate) awaiting_since: Mutex<Option<Instant>>,
    pub(crate) failure: Mutex<Option<LinkFailure>>,
    /// Signalled when `failure` is set.
    pub(crate) ended: Condvar,
    pub(crate) heartbeats_suspended: AtomicBool,
    pub(crate) closing: AtomicBool,
    inbound: mpsc::Sender<Inbound>,
    on_inbound: Option<OnInbound>,
    /// Called once when the link ends; see [`Agent::on_link_end`].
    link_end_hooks: Mutex<LinkEndHooks>,
}

/// What to call when the link ends, by registration.
#[derive(Default)]
struct LinkEndHooks {
    next: u64,
    hooks: BTreeMap<u64, Box<dyn FnOnce() + Send>>,
}

impl AgentShared {
    /// Records the first failure, wakes `recv`, and closes the socket so the other
    /// thread stops too.
    pub(crate) fn fail(&self, failure: LinkFailure) {
        {
            let mut slot = lock(&self.failure);
            if slot.is_some() || self.closing.load(Ordering::SeqCst) {
                return;
            }
            *slot = Some(failure);
        }
        self.ended.notify_all();
        self.run_link_end_hooks();
        self.deliver(Inbound::Failed);
        let _ = self.control.shutdown(Shutdown::Both);
    }

    /// Hands `inbound` to [`Agent::recv`] or [`Agent::try_recv`].
    pub(crate) fn deliver(&self, inbound: Inbound) {
        let _ = self.inbound.send(inbound);
        if let Some(on_inbound) = &self.on_inbound {
            (on_inbound.0)();
        }
    }

    /// Runs (and forgets) every hook registered with [`Agent::on_link_end`]; called
    /// once the failure is set.
    pub(crate) fn run_link_end_hooks(&self) {
        let hooks = std::mem::take(&mut lock(&self.link_end_hooks).hooks);
        for hook in hooks.into_values() {
            hook();
        }
    }

    pub(crate) fn failure(&self) -> Option<LinkFailure> {
        lock(&self.failure).clone()
    }

    fn send(&self, message: &Message) -> Result<(), ClusterError> {
        if let Some(failure) = self.failure() {
            return Err(failure.to_error());
        }
        let sent = write_message(&mut *lock(&self.writer), message);
        if let Err(err) = &sent {
            self.fail(LinkFailure::Lost(with_causes(err)));
        }
        sent
    }
}

/// A joined agent. Dropping it says goodbye.
pub struct Agent {
    shared: Arc<AgentShared>,
    inbound: Mutex<InboundState>,
    nnodes: u32,
    clock: ClockOffset,
    heartbeat_interval: Duration,
    coordinator_addr: SocketAddr,
    /// Kept to derive each run's data-plane key; never sent anywhere.
    token: Token,
    job_id: String,
    /// Keeps the thread of this agent's link going.
    _links: AgentLinks,
}

struct InboundState {
    rx: mpsc::Receiver<Inbound>,
    /// Set once `recv` has reported the end of the link.
    ended: Option<LinkFailure>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("rank", &self.shared.rank)
            .field("coordinator", &self.coordinator_addr)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// How one connection attempt ended.
enum Attempt {
    Joined(Stream, Welcome, Box<AgentIdentity>),
    /// Worth another try: nobody listening yet, a reset, a timeout.
    Retry(String),
    /// Trying again cannot help: refused, wrong version, a coordinator without the token.
    GiveUp(ClusterError),
}

impl Agent {
    /// Joins the coordinator at `endpoint`, trying until `deadline`.
    pub fn connect(
        endpoint: &Endpoint,
        identity: AgentIdentity,
        token: &Token,
        options: AgentOptions,
        deadline: Instant,
    ) -> Result<Agent, ClusterError> {
        Agent::join(
            endpoint,
            Introduction {
                identity: Some(identity),
                identify: None,
            },
            token,
            options,
            deadline,
        )
    }

    /// Joins the coordinator at `endpoint`, trying until `deadline`, as [`Agent::connect`]
    /// does, with the identity `identify` makes from the first challenge that arrives
    /// (called once; later attempts reuse it). For an agent whose data plane depends on
    /// how the coordinator listens: bound only once the coordinator has said. An error
    /// of `identify` ends the join ([`ClusterError::Identity`]).
    pub fn connect_with(
        endpoint: &Endpoint,
        identify: Identify<'_>,
        token: &Token,
        options: AgentOptions,
        deadline: Instant,
    ) -> Result<Agent, ClusterError> {
        Agent::join(
            endpoint,
            Introduction {
                identity: None,
                identify: Some(identify),
            },
            token,
            options,
            deadline,
        )
    }

    fn join(
        endpoint: &Endpoint,
        mut introduction: Introduction<'_>,
        token: &Token,
        options: AgentOptions,
        deadline: Instant,
    ) -> Result<Agent, ClusterError> {
        let started = Instant::now();
        let mut delay = options.retry_delay;
        let mut attempts = 0u32;
        let mut last_error = "no attempt was made before the deadline".to_owned();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            attempts += 1;
            let attempt_deadline = deadline.min(Instant::now() + options.handshake_timeout);
            match attempt(
                endpoint,
                &mut introduction,
                token,
                &*options.transport,
                attempt_deadline,
            ) {
                Attempt::Joined(stream, welcome, identity) => {
                    return Agent::start(stream, *identity, token, welcome, &options);
                }
                Attempt::GiveUp(err) => return Err(err),
                Attempt::Retry(reason) => last_error = reason,
            }
            if options.transport.is_gone() {
                last_error.push_str("; this host is gone");
                break;
            }
            let pause = delay.min(deadline.saturating_duration_since(Instant::now()));
            std::thread::sleep(pause);
            delay = (delay * 2).min(options.max_retry_delay);
        }
        Err(ClusterError::Unreachable {
            endpoint: endpoint.to_string(),
            waited: started.elapsed(),
            attempts,
            last_error,
        })
    }

    fn start(
        stream: Stream,
        identity: AgentIdentity,
        token: &Token,
        welcome: Welcome,
        options: &AgentOptions,
    ) -> Result<Agent, ClusterError> {
        let io = |err| ClusterError::io("cannot set up the connection to the coordinator", err);
        let coordinator_addr = stream.peer_addr().map_err(io)?;
        let writer = stream.try_clone().map_err(io)?;
        writer
            .set_write_timeout(Some(options.write_timeout))
            .map_err(io)?;
        let control = stream.try_clone().map_err(io)?;
        let (inbound_tx, inbound_rx) = mpsc::channel();
        let shared = Arc::new(AgentShared {
            rank: identity.rank,
            writer: Mutex::new(writer),
            control,
            phase: PhaseHandle(Arc::new(Mutex::new(("joined".to_owned(), unix_now_ns())))),
            awaiting_since: Mutex::new(None),
            failure: Mutex::new(None),
            ended: Condvar::new(),
            heartbeats_suspended: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            inbound: inbound_tx,
            on_inbound: options.on_inbound.clone(),
            link_end_hooks: Mutex::new(LinkEndHooks::default()),
        });
        let heartbeat_interval =
            Duration::from_millis(welcome.heartbeat_interval_ms.clamp(10, 1000));
        let links = match &options.links {
            Some(links) => links.clone(),
            None => AgentLinks::start(&*options.transport)
                .map_err(|err| ClusterError::io("cannot start the agent's link thread", err))?,
        };
        links.add(
            Arc::clone(&shared),
            stream,
            heartbeat_interval,
            options.coordinator_deadline,
        );
        Ok(Agent {
            shared,
            inbound: Mutex::new(InboundState {
                rx: inbound_rx,
                ended: None,
            }),
            nnodes: welcome.nnodes,
            clock: welcome.clock,
            heartbeat_interval,
            coordinator_addr,
            token: token.clone(),
            job_id: identity.job_id.clone(),
            _links: links,
        })
    }

    pub fn rank(&self) -> u32 {
        self.shared.rank
    }

    pub fn nnodes(&self) -> u32 {
        self.nnodes
    }

    /// The data-plane key of the run whose session id the coordinator sent (see
    /// [`crate::auth::data_plane_key`]): what this node's greetings prove to its peers.
    pub fn data_plane_key(&self, session: &[u8]) -> [u8; 32] {
        crate::auth::data_plane_key(&self.token, &self.job_id, session)
    }

    /// The coordinator's address as connected.
    pub fn coordinator_addr(&self) -> SocketAddr {
        self.coordinator_addr
    }

    /// This agent's clock relative to the coordinator's, measured while joining.
    pub fn clock_offset(&self) -> ClockOffset {
        self.clock
    }

    /// The heartbeat interval the coordinator asked for.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }

    /// Enters a new phase; see [`PhaseHandle::set`].
    pub fn set_phase(&self, phase: impl Into<String>) {
        self.shared.phase.set(phase);
    }

    /// A handle for worker threads to report the phase themselves.
    pub fn phase_handle(&self) -> PhaseHandle {
        self.shared.phase.clone()
    }

    /// The next message from the coordinator, waiting until `deadline`; `Ok(None)` when
    /// none came in time. Fails once the link is gone: the coordinator crashed, stopped
    /// answering, aborted the run, or (after [`Received::Closed`]) ended the session.
    pub fn recv(&self, deadline: Instant) -> Result<Option<Received>, ClusterError> {
        let mut inbound = lock(&self.inbound);
        if let Some(ended) = &inbound.ended {
            return Err(ended.to_error());
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let got = match inbound.rx.recv_timeout(remaining) {
            Ok(got) => Some(got),
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(Inbound::Failed),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
        };
        self.take(&mut inbound, got)
    }

    /// The next message from the coordinator if one has come, without waiting; fails
    /// as [`Agent::recv`] does. For agents built with [`AgentOptions::on_inbound`].
    pub fn try_recv(&self) -> Result<Option<Received>, ClusterError> {
        let mut inbound = lock(&self.inbound);
        if let Some(ended) = &inbound.ended {
            return Err(ended.to_error());
        }
        let got = match inbound.rx.try_recv() {
            Ok(got) => Some(got),
            Err(mpsc::TryRecvError::Disconnected) => Some(Inbound::Failed),
            Err(mpsc::TryRecvError::Empty) => None,
        };
        self.take(&mut inbound, got)
    }

    /// What `recv` and `try_recv` got, remembering the link's end.
    fn take(
        &self,
        inbound: &mut InboundState,
        got: Option<Inbound>,
    ) -> Result<Option<Received>, ClusterError> {
        match got {
            Some(Inbound::Received(received)) => {
                if let Received::Closed { reason } = &received {
                    inbound.ended = Some(LinkFailure::Closed(reason.clone()));
                }
                Ok(Some(received))
            }
            Some(Inbound::Failed) => {
                let failure = self
                    .shared
                    .failure()
                    .unwrap_or_else(|| LinkFailure::Lost("the agent's threads stopped".to_owned()));
                inbound.ended = Some(failure.clone());
                Err(failure.to_error())
            }
            None => Ok(None),
        }
    }

    /// Sends a report, answering the command `in_reply_to` or on its own.
    pub fn report<T: Serialize + ?Sized>(
        &self,
        in_reply_to: Option<u64>,
        body: &T,
    ) -> Result<(), ClusterError> {
        let body = Body::to(body)?;
        self.shared.send(&Message::Report { in_reply_to, body })
    }

    /// Waits until the link to the coordinator ends or `deadline` passes, and returns
    /// why it ended (`None` while it stands). For a watcher thread that cancels the
    /// node's work as soon as the coordinator is gone, without taking its commands.
    pub fn wait_for_link_end(&self, deadline: Instant) -> Option<ClusterError> {
        let mut failure = lock(&self.shared.failure);
        loop {
            if let Some(ended) = failure.as_ref() {
                return Some(ended.to_error());
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return None;
            }
            failure = self
                .shared
                .ended
                .wait_timeout(failure, remaining)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Calls `hook` once, as soon as the link to the coordinator ends (at once if it
    /// already has), unless the returned guard is dropped first: the node's work is
    /// cancelled the moment the coordinator is gone, with no thread waiting for it.
    pub fn on_link_end(&self, hook: impl FnOnce() + Send + 'static) -> LinkEndGuard<'_> {
        let id = {
            let mut hooks = lock(&self.shared.link_end_hooks);
            let id = hooks.next;
            hooks.next += 1;
            hooks.hooks.insert(id, Box::new(hook));
            id
        };
        // Set after the check above and before the hooks were taken, a failure would
        // miss this hook: look once more, now that it is registered.
        if self.shared.failure().is_some() {
            let hook = lock(&self.shared.link_end_hooks).hooks.remove(&id);
            if let Some(hook) = hook {
                hook();
            }
        }
        LinkEndGuard {
            shared: &self.shared,
            id,
        }
    }

    /// `Ok` while the link to the coordinator stands; the reason it ended otherwise.
    pub fn link_status(&self) -> Result<(), ClusterError> {
        match self.shared.failure() {
            Some(failure) => Err(failure.to_error()),
            None => Ok(()),
        }
    }

    /// Stops (`true`) or restarts heartbeats, so this node looks hung to the
    /// coordinator: for drills and tests. While stopped, the agent does not judge the
    /// coordinator either, as a stopped process would not.
    pub fn suspend_heartbeats(&self, suspended: bool) {
        self.shared
            .heartbeats_suspended
            .store(suspended, Ordering::SeqCst);
    }

    /// Says goodbye with a reason and closes the connection.
    pub fn leave(mut self, reason: &str) {
        self.close(reason);
    }

    fn close(&mut self, reason: &str) {
        if self.shared.closing.load(Ordering::SeqCst) {
            return;
        }
        if self.shared.failure().is_none() {
            let _ = write_message(
                &mut *lock(&self.shared.writer),
                &Message::Bye {
                    reason: reason.to_owned(),
                },
            );
        }
        self.shared.closing.store(true, Ordering::SeqCst);
        // The link's thread reads the end of the connection and forgets it.
        let _ = self.shared.control.shutdown(Shutdown::Both);
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.close("the agent finished");
    }
}

/// Keeps a hook of [`Agent::on_link_end`] registered; dropping it forgets the hook.
#[must_use = "the hook is forgotten when the guard is dropped"]
pub struct LinkEndGuard<'a> {
    shared: &'a AgentShared,
    id: u64,
}

impl std::fmt::Debug for LinkEndGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkEndGuard")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Drop for LinkEndGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.link_end_hooks).hooks.remove(&self.id);
    }
}

/// One connection attempt: connect, prove, answer the clock pings, check the welcome.
fn attempt(
    endpoint: &Endpoint,
    introduction: &mut Introduction<'_>,
    token: &Token,
    transport: &dyn Transport,
    deadline: Instant,
) -> Attempt {
    let addrs: Vec<SocketAddr> = match (endpoint.host.as_str(), endpoint.port).to_socket_addrs() {
        Ok(addrs) => addrs.collect(),
        Err(err) => return Attempt::Retry(format!("cannot resolve `{}`: {err}", endpoint.host)),
    };
    let mut last = format!("`{}` resolves to no address", endpoint.host);
    for addr in addrs {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break;
        }
        match transport.connect(addr, remaining) {
            Ok(stream) => return handshake(stream, endpoint, introduction, token, deadline),
            Err(err) => last = format!("cannot connect to `{addr}`: {err}"),
        }
    }
    Attempt::Retry(last)
}

fn handshake(
    mut stream: Stream,
    endpoint: &Endpoint,
    introduction: &mut Introduction<'_>,
    token: &Token,
    deadline: Instant,
) -> Attempt {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ));
    let retry = |what: &str, err: FrameError| Attempt::Retry(format!("{what}: {}", err.describe()));

    // The challenge, read leniently: a coordinator of another version still tells us
    // its version and nonce, and then refuses us with the reason.
    let challenge = match read_frame(&mut *stream, MAX_HANDSHAKE_FRAME_BYTES, Some(deadline)) {
        Ok(frame) => frame,
        Err(err) => return retry("no challenge from the coordinator", err),
    };
    let challenge: Value = match serde_json::from_slice(&challenge) {
        Ok(value) => value,
        Err(err) => {
            return Attempt::GiveUp(ClusterError::BadFrame {
                detail: format!("the coordinator's challenge: {err}"),
            });
        }
    };
    if challenge.get("type").and_then(Value::as_str) == Some("refused") {
        let reason = challenge
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("no reason given")
            .to_owned();
        return Attempt::GiveUp(ClusterError::Refused { reason });
    }
    let their_version = challenge
        .get("protocol_version")
        .and_then(Value::as_u64)
        .map(|v| u32::try_from(v).unwrap_or(u32::MAX));
    let nonce = challenge
        .get("nonce")
        .and_then(Value::as_str)
        .and_then(from_hex)
        .unwrap_or_default();
    let scope = CoordinatorScope {
        loopback_only: challenge
            .get("loopback_only")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    let identity = match introduction.identity(scope) {
        Ok(identity) => identity,
        Err(err) => return Attempt::GiveUp(err),
    };

    let agent_nonce = match random_nonce() {
        Ok(nonce) => nonce,
        Err(err) => return Attempt::GiveUp(err),
    };
    let hello = Message::Hello(Hello {
        protocol_version: PROTOCOL_VERSION,
        job_id: identity.job_id.clone(),
        rank: identity.rank,
        nnodes: identity.nnodes,
        node: identity.node.clone(),
        data_addr: identity.data_addr,
        gpuvet_version: env!("CARGO_PKG_VERSION").to_owned(),
        info: identity.info.clone(),
        agent_nonce: to_hex(&agent_nonce),
        proof: to_hex(&agent_proof(token, &nonce, &identity.job_id, identity.rank)),
    });
    if let Err(err) = write_message(&mut stream, &hello) {
        return Attempt::Retry(with_causes(&err));
    }

    loop {
        let frame = match read_frame(&mut *stream, MAX_FRAME_BYTES, Some(deadline)) {
            Ok(frame) => frame,
            Err(err) => return retry("the handshake broke off", err),
        };
        let t1_ns = unix_now_ns();
        let message = match decode_message(&frame) {
            Ok(message) => message,
            Err(err) => {
                return Attempt::GiveUp(ClusterError::BadFrame {
                    detail: err.describe(),
                });
            }
        };
        match message {
            Message::Ping { seq, t0_ns } => {
                let pong = Message::Pong {
                    seq,
                    t0_ns,
                    t1_ns,
                    t2_ns: unix_now_ns(),
                };
                if let Err(err) = write_message(&mut stream, &pong) {
                    return Attempt::Retry(with_causes(&err));
                }
            }
            Message::Welcome(welcome) => {
                let proof = from_hex(&welcome.proof).unwrap_or_default();
                if !verify_coordinator_proof(
                    token,
                    &agent_nonce,
                    &identity.job_id,
                    identity.rank,
                    &proof,
                ) {
                    return Attempt::GiveUp(ClusterError::CoordinatorAuthFailed {
                        endpoint: endpoint.to_string(),
                    });
                }
                return Attempt::Joined(stream, welcome, Box::new(identity.clone()));
            }
            Message::Refused { reason } => {
                return Attempt::GiveUp(match their_version {
                    Some(theirs) if theirs != PROTOCOL_VERSION => ClusterError::ProtocolMismatch {
                        ours: PROTOCOL_VERSION,
                        theirs,
                    },
                    _ => ClusterError::Refused { reason },
                });
            }
            other => {
                return Attempt::GiveUp(ClusterError::BadFrame {
                    detail: format!(
                        "expected `ping`, `welcome` or `refused` from the coordinator, got `{}`",
                        other.kind()
                    ),
                });
            }
        }
    }
}
