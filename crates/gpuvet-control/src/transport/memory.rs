//! An in-memory network: every host is an IP address, every connection a pair of
//! byte pipes, so a coordinator and thousands of agents can form a group inside one
//! process with no socket and no port.
//!
//! A host can be frozen (its reads and writes wait, as a stopped process's would, while
//! what its peers send piles up as in a kernel buffer) or cut (every connection it has
//! closes at once and new ones are refused, as when its process dies). Those are the
//! faults a drill plays on the control plane; everything else behaves like TCP:
//! clones share a connection and its timeouts, a read times out with `WouldBlock`, a
//! closed peer reads as end of file and a write to it fails with `BrokenPipe`.
//!
//! Its [`Poller`] is told by the pipes themselves: a write or a close to a watched
//! pipe queues the watcher's token.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::{Connection, Listener, Poller, Stream, Transport};

/// The first port handed out for port 0, as an ephemeral range starts.
const FIRST_EPHEMERAL_PORT: u32 = 32_768;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A network in this process. Clones are handles on the same network.
#[derive(Debug, Clone, Default)]
pub struct MemoryNetwork {
    inner: Arc<Network>,
}

#[derive(Debug, Default)]
struct Network {
    listeners: Mutex<HashMap<SocketAddr, Arc<Backlog>>>,
    hosts: Mutex<HashMap<IpAddr, Arc<HostState>>>,
    next_port: AtomicU32,
}

impl MemoryNetwork {
    pub fn new() -> MemoryNetwork {
        MemoryNetwork::default()
    }

    /// The host at `ip`, as a transport whose connections come from that address.
    pub fn host(&self, ip: IpAddr) -> MemoryHost {
        MemoryHost {
            network: self.clone(),
            ip,
            state: self.state(ip),
        }
    }

    /// Stops every read and write of `ip`'s connections until [`thaw`](Self::thaw) or
    /// [`cut`](Self::cut): the host goes silent, as a stopped process does.
    pub fn freeze(&self, ip: IpAddr) {
        self.state(ip).set(HostMode::Frozen);
    }

    pub fn thaw(&self, ip: IpAddr) {
        let state = self.state(ip);
        let mut mode = lock(&state.mode);
        if *mode == HostMode::Frozen {
            *mode = HostMode::Running;
            state.changed.notify_all();
            drop(mode);
            // What piled up while frozen is now readable by the host's pollers.
            let ends: Vec<Arc<End>> = lock(&state.ends).iter().filter_map(Weak::upgrade).collect();
            for end in ends {
                end.incoming.tell_watcher(&lock(&end.incoming.state));
            }
        }
    }

    /// Closes every connection of `ip` without a word and refuses new ones, as when
    /// the host's process dies.
    pub fn cut(&self, ip: IpAddr) {
        let state = self.state(ip);
        state.set(HostMode::Cut);
        let ends: Vec<Weak<End>> = std::mem::take(&mut *lock(&state.ends));
        for end in ends.iter().filter_map(Weak::upgrade) {
            end.close();
        }
        lock(&self.inner.listeners).retain(|addr, backlog| {
            if addr.ip() == ip {
                backlog.close();
                false
            } else {
                true
            }
        });
    }

    fn state(&self, ip: IpAddr) -> Arc<HostState> {
        Arc::clone(lock(&self.inner.hosts).entry(ip).or_default())
    }

    fn ephemeral_port(&self) -> u16 {
        let n = self.inner.next_port.fetch_add(1, Ordering::Relaxed);
        // 32768..=65535, wrapping; a clash with a bound port is refused at bind.
        (FIRST_EPHEMERAL_PORT + n % (65_536 - FIRST_EPHEMERAL_PORT)) as u16
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum HostMode {
    #[default]
    Running,
    Frozen,
    Cut,
}

#[derive(Debug, Default)]
struct HostState {
    mode: Mutex<HostMode>,
    changed: Condvar,
    /// Every connection end this host holds, to close them when it is cut.
    ends: Mutex<Vec<Weak<End>>>,
}

impl HostState {
    fn set(&self, new: HostMode) {
        let mut mode = lock(&self.mode);
        if *mode != HostMode::Cut {
            *mode = new;
        }
        self.changed.notify_all();
    }

    /// Whether the host may read now: `WouldBlock` while it is frozen, an error once
    /// it is cut.
    fn running_now(&self) -> io::Result<()> {
        match *lock(&self.mode) {
            HostMode::Running => Ok(()),
            HostMode::Frozen => Err(io::ErrorKind::WouldBlock.into()),
            HostMode::Cut => Err(io::ErrorKind::ConnectionReset.into()),
        }
    }

    /// Waits while the host is frozen; fails once it is cut.
    fn wait_running(&self) -> io::Result<()> {
        let mut mode = lock(&self.mode);
        loop {
            match *mode {
                HostMode::Running => return Ok(()),
                HostMode::Cut => return Err(io::ErrorKind::ConnectionReset.into()),
                HostMode::Frozen => {
                    mode = self
                        .changed
                        .wait(mode)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }

    fn register(&self, end: &Arc<End>) {
        let mut ends = lock(&self.ends);
        if ends.len() >= 64 && ends.len().is_power_of_two() {
            ends.retain(|end| end.strong_count() > 0);
        }
        ends.push(Arc::downgrade(end));
    }
}

/// One host of a [`MemoryNetwork`], as a [`Transport`].
#[derive(Debug, Clone)]
pub struct MemoryHost {
    network: MemoryNetwork,
    ip: IpAddr,
    state: Arc<HostState>,
}

impl MemoryHost {
    pub fn ip(&self) -> IpAddr {
        self.ip
    }
}

impl Transport for MemoryHost {
    fn bind(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>> {
        if !addr.ip().is_unspecified() && addr.ip() != self.ip {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("`{}` is not this host's address `{}`", addr.ip(), self.ip),
            ));
        }
        self.state.wait_running()?;
        let port = match addr.port() {
            0 => self.network.ephemeral_port(),
            port => port,
        };
        let addr = SocketAddr::new(self.ip, port);
        let backlog = Arc::new(Backlog::default());
        {
            let mut listeners = lock(&self.network.inner.listeners);
            if listeners.contains_key(&addr) {
                return Err(io::ErrorKind::AddrInUse.into());
            }
            listeners.insert(addr, Arc::clone(&backlog));
        }
        Ok(Box::new(MemoryListener {
            network: self.network.clone(),
            addr,
            backlog,
        }))
    }

    fn poller(&self) -> io::Result<Arc<dyn Poller>> {
        Ok(Arc::new(MemoryPoller::default()))
    }

    fn is_gone(&self) -> bool {
        *lock(&self.state.mode) == HostMode::Cut
    }

    fn connect(&self, addr: SocketAddr, _timeout: Duration) -> io::Result<Stream> {
        self.state.wait_running()?;
        let backlog = lock(&self.network.inner.listeners)
            .get(&addr)
            .cloned()
            .ok_or(io::ErrorKind::ConnectionRefused)?;
        let server_host = self.network.state(addr.ip());
        let local = SocketAddr::new(self.ip, self.network.ephemeral_port());
        let (to_server, to_client) = (Arc::new(Pipe::default()), Arc::new(Pipe::default()));
        let client = End::new(&to_client, &to_server, local, addr, &self.state);
        let server = End::new(&to_server, &to_client, addr, local, &server_host);
        if !backlog.push(MemoryStream(server), local) {
            return Err(io::ErrorKind::ConnectionRefused.into());
        }
        Ok(Box::new(MemoryStream(client)))
    }
}

/// Connections waiting to be accepted.
#[derive(Debug, Default)]
struct Backlog {
    state: Mutex<BacklogState>,
    arrived: Condvar,
}

#[derive(Debug, Default)]
struct BacklogState {
    pending: VecDeque<(MemoryStream, SocketAddr)>,
    closed: bool,
}

impl Backlog {
    fn push(&self, stream: MemoryStream, peer: SocketAddr) -> bool {
        let mut state = lock(&self.state);
        if state.closed {
            return false;
        }
        state.pending.push_back((stream, peer));
        self.arrived.notify_one();
        true
    }

    fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        // Dropping the server ends closes them: their clients read end of file.
        state.pending.clear();
        self.arrived.notify_all();
    }
}

#[derive(Debug)]
struct MemoryListener {
    network: MemoryNetwork,
    addr: SocketAddr,
    backlog: Arc<Backlog>,
}

impl Listener for MemoryListener {
    fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        let mut state = lock(&self.backlog.state);
        loop {
            if let Some((stream, peer)) = state.pending.pop_front() {
                return Ok((Box::new(stream), peer));
            }
            if state.closed {
                return Err(io::ErrorKind::NotConnected.into());
            }
            state = self
                .backlog
                .arrived
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

impl Drop for MemoryListener {
    fn drop(&mut self) {
        let mut listeners = lock(&self.network.inner.listeners);
        if listeners
            .get(&self.addr)
            .is_some_and(|backlog| Arc::ptr_eq(backlog, &self.backlog))
        {
            listeners.remove(&self.addr);
        }
        drop(listeners);
        self.backlog.close();
    }
}

/// Bytes one way. Unbounded: the control plane sends a few small frames per second,
/// and a frozen host's unread input stays as small as a kernel buffer would hold.
#[derive(Debug, Default)]
struct Pipe {
    state: Mutex<PipeState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct PipeState {
    bytes: VecDeque<u8>,
    writer_closed: bool,
    reader_closed: bool,
    /// The poller told when there is something to read, and its token for this pipe.
    watcher: Option<(Arc<Readiness>, u64)>,
}

impl Pipe {
    fn close_reader(&self) {
        let mut state = lock(&self.state);
        state.reader_closed = true;
        self.tell_watcher(&state);
        drop(state);
        self.changed.notify_all();
    }

    fn close_writer(&self) {
        let mut state = lock(&self.state);
        state.writer_closed = true;
        self.tell_watcher(&state);
        drop(state);
        self.changed.notify_all();
    }

    /// Queues the watcher's token when there is something to read (bytes or the end).
    fn tell_watcher(&self, state: &PipeState) {
        if let Some((readiness, token)) = &state.watcher
            && (!state.bytes.is_empty() || state.writer_closed || state.reader_closed)
        {
            readiness.push(*token);
        }
    }
}

/// The tokens a [`MemoryPoller`] has to report.
#[derive(Debug, Default)]
struct Readiness {
    state: Mutex<ReadyState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct ReadyState {
    tokens: Vec<u64>,
    woken: bool,
}

impl Readiness {
    fn push(&self, token: u64) {
        lock(&self.state).tokens.push(token);
        self.changed.notify_one();
    }
}

/// The in-memory network's [`Poller`].
#[derive(Debug, Default)]
struct MemoryPoller {
    readiness: Arc<Readiness>,
}

impl MemoryPoller {
    fn of(poller: &dyn Poller) -> io::Result<&MemoryPoller> {
        poller
            .as_any()
            .downcast_ref::<MemoryPoller>()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an in-memory connection can only be watched by the in-memory poller",
                )
            })
    }
}

impl Poller for MemoryPoller {
    fn wait(&self, ready: &mut Vec<u64>, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.readiness.state);
        while state.tokens.is_empty() && !state.woken {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            state = self
                .readiness
                .changed
                .wait_timeout(state, remaining)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        ready.append(&mut state.tokens);
        state.woken = false;
        Ok(())
    }

    fn wake(&self) -> io::Result<()> {
        lock(&self.readiness.state).woken = true;
        self.readiness.changed.notify_one();
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One end of a connection, shared by its clones; dropping the last clone closes it.
#[derive(Debug)]
struct End {
    incoming: Arc<Pipe>,
    outgoing: Arc<Pipe>,
    local: SocketAddr,
    peer: SocketAddr,
    host: Arc<HostState>,
    read_timeout: Mutex<Option<Duration>>,
}

impl End {
    fn new(
        incoming: &Arc<Pipe>,
        outgoing: &Arc<Pipe>,
        local: SocketAddr,
        peer: SocketAddr,
        host: &Arc<HostState>,
    ) -> Arc<End> {
        let end = Arc::new(End {
            incoming: Arc::clone(incoming),
            outgoing: Arc::clone(outgoing),
            local,
            peer,
            host: Arc::clone(host),
            read_timeout: Mutex::new(None),
        });
        host.register(&end);
        end
    }

    fn close(&self) {
        self.incoming.close_reader();
        self.outgoing.close_writer();
    }
}

impl Drop for End {
    fn drop(&mut self) {
        self.close();
    }
}

/// A connection on a [`MemoryNetwork`].
#[derive(Debug, Clone)]
struct MemoryStream(Arc<End>);

impl Read for MemoryStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let end = &self.0;
        end.host.wait_running()?;
        let deadline = lock(&end.read_timeout).map(|timeout| Instant::now() + timeout);
        let pipe = &end.incoming;
        let mut state = lock(&pipe.state);
        loop {
            if !state.bytes.is_empty() {
                return state.bytes.read(buf);
            }
            if state.writer_closed || state.reader_closed || buf.is_empty() {
                return Ok(0);
            }
            state = match deadline {
                None => pipe
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    if remaining.is_zero() {
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    pipe.changed
                        .wait_timeout(state, remaining)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

impl MemoryStream {
    /// Sends `buf` whole; the caller has checked that the host runs.
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let end = &self.0;
        let mut state = lock(&end.outgoing.state);
        if state.reader_closed || state.writer_closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        state.bytes.extend(buf);
        end.outgoing.tell_watcher(&state);
        drop(state);
        end.outgoing.changed.notify_all();
        Ok(buf.len())
    }
}

impl Write for MemoryStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.host.wait_running()?;
        self.send(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Connection for MemoryStream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(Box::new(self.clone()))
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match how {
            Shutdown::Read => self.0.incoming.close_reader(),
            Shutdown::Write => self.0.outgoing.close_writer(),
            Shutdown::Both => self.0.close(),
        }
        Ok(())
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        if timeout.is_some_and(|timeout| timeout.is_zero()) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        *lock(&self.0.read_timeout) = timeout;
        Ok(())
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        if timeout.is_some_and(|timeout| timeout.is_zero()) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        // Writes never wait for room here, so there is nothing to time out.
        Ok(())
    }

    fn set_nodelay(&self, _nodelay: bool) -> io::Result<()> {
        Ok(())
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.0.local)
    }

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.0.peer)
    }

    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let end = &self.0;
        end.host.running_now()?;
        let mut state = lock(&end.incoming.state);
        if state.bytes.is_empty() {
            return if state.writer_closed || state.reader_closed || buf.is_empty() {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        state.bytes.read(buf)
    }

    fn watch(&self, poller: &dyn Poller, token: u64) -> io::Result<()> {
        let readiness = Arc::clone(&MemoryPoller::of(poller)?.readiness);
        let pipe = &self.0.incoming;
        let mut state = lock(&pipe.state);
        state.watcher = Some((readiness, token));
        // Whatever came before the watch is reported too.
        pipe.tell_watcher(&state);
        Ok(())
    }

    fn unwatch(&self, poller: &dyn Poller) -> io::Result<()> {
        MemoryPoller::of(poller)?;
        lock(&self.0.incoming.state).watcher = None;
        Ok(())
    }

    fn write_unless_stopped(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.host.running_now()?;
        self.send(buf).map(drop)
    }
}

#[cfg(test)]
mod tests;
