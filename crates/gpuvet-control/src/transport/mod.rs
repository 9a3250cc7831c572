//! How the control plane's bytes travel: over TCP between hosts ([`Tcp`], the default),
//! or over an in-memory network ([`MemoryNetwork`]) that runs a whole group inside one
//! process for drills and scale benchmarks.
//!
//! The coordinator and the agent see only these traits, so the handshake, heartbeats,
//! clock pings and liveness judged over memory are the same code judged over TCP: the
//! transport is the only thing swapped.
//!
//! A [`Poller`] lets one thread wait on many connections at once (epoll over TCP), so
//! a coordinator reads every member's frames on one thread instead of one each.

mod epoll;
mod memory;

use std::any::Any;
use std::fmt::Debug;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

pub use memory::{MemoryHost, MemoryNetwork};

/// One end of a connection. Clones share the connection, its timeouts and its
/// shutdown, as clones of a `TcpStream` share the socket.
pub trait Connection: Read + Write + Send + Sync + Debug {
    fn try_clone(&self) -> io::Result<Stream>;
    fn shutdown(&self, how: Shutdown) -> io::Result<()>;
    /// `None` waits for good; a read that times out fails with `WouldBlock` or
    /// `TimedOut`.
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_nodelay(&self, nodelay: bool) -> io::Result<()>;
    fn local_addr(&self) -> io::Result<SocketAddr>;
    fn peer_addr(&self) -> io::Result<SocketAddr>;
    /// Reads what has arrived without waiting for more: `WouldBlock` when nothing has,
    /// 0 at the end. Blocking reads and writes on clones are not affected.
    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Makes `poller` report `token` whenever this connection has bytes or its end to
    /// read, until [`unwatch`](Connection::unwatch). `poller` must be this transport's.
    fn watch(&self, poller: &dyn Poller, token: u64) -> io::Result<()>;
    fn unwatch(&self, poller: &dyn Poller) -> io::Result<()>;
    /// Writes all of `buf` as `write_all` does, except where this end's host is
    /// stopped (only an in-memory host can be frozen): then it fails at once with
    /// `WouldBlock` instead of waiting, since a thread that serves many hosts must not
    /// stop with one of them.
    fn write_unless_stopped(&mut self, buf: &[u8]) -> io::Result<()>;
}

/// Waits on many connections at once, for one thread that serves them all.
pub trait Poller: Send + Sync + Debug {
    /// Waits until a watched connection may have something to read, a
    /// [`wake`](Poller::wake) or `timeout`; appends the tokens of the connections to look at
    /// (a token may come twice, or with nothing to read after all).
    fn wait(&self, ready: &mut Vec<u64>, timeout: Duration) -> io::Result<()>;
    /// Ends a `wait` now, from any thread.
    fn wake(&self) -> io::Result<()>;
    fn as_any(&self) -> &dyn Any;
}

/// A connection, whichever transport carries it.
pub type Stream = Box<dyn Connection>;

/// A bound address that accepts connections.
pub trait Listener: Send + Sync + Debug {
    fn accept(&self) -> io::Result<(Stream, SocketAddr)>;
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// Binds listeners and opens connections.
pub trait Transport: Send + Sync + Debug {
    /// Listens on `addr`; port 0 picks a free one.
    fn bind(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>>;
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<Stream>;
    /// A poller for this transport's connections.
    fn poller(&self) -> io::Result<Arc<dyn Poller>>;
    /// Whether this host is gone for good, as a process that died: only an in-memory
    /// host that was cut is. An agent stops trying to join then, where a real one
    /// would have died with its process.
    fn is_gone(&self) -> bool {
        false
    }
}

/// The transport of a real group: TCP sockets.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tcp;

/// The default transport, shared.
pub fn tcp() -> Arc<dyn Transport> {
    Arc::new(Tcp)
}

impl Transport for Tcp {
    fn bind(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>> {
        Ok(Box::new(TcpListener::bind(addr)?))
    }

    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<Stream> {
        Ok(Box::new(TcpStream::connect_timeout(&addr, timeout)?))
    }

    fn poller(&self) -> io::Result<Arc<dyn Poller>> {
        Ok(Arc::new(epoll::Epoll::new()?))
    }
}

impl Listener for TcpListener {
    fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        let (stream, peer) = TcpListener::accept(self)?;
        Ok((Box::new(stream), peer))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}

impl Connection for TcpStream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(Box::new(TcpStream::try_clone(self)?))
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        TcpStream::shutdown(self, how)
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, timeout)
    }

    fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        TcpStream::set_nodelay(self, nodelay)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::local_addr(self)
    }

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::peer_addr(self)
    }

    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        epoll::read_without_waiting(self, buf)
    }

    fn watch(&self, poller: &dyn Poller, token: u64) -> io::Result<()> {
        epoll::Epoll::of(poller)?.watch(self, token)
    }

    fn unwatch(&self, poller: &dyn Poller) -> io::Result<()> {
        epoll::Epoll::of(poller)?.unwatch(self)
    }

    fn write_unless_stopped(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf)
    }
}
