//! The TCP transport's [`Poller`]: Linux epoll, level-triggered, with an eventfd to
//! wake it; and reads that do not wait (`MSG_DONTWAIT`), which leave the socket in
//! blocking mode, since its clones (the writer) share that mode.

use std::any::Any;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::Poller;

/// The token of the eventfd that [`Poller::wake`] writes to; never a caller's.
const WAKE_TOKEN: u64 = u64::MAX;
/// Events taken from the kernel per `epoll_wait`.
const EVENTS_PER_WAIT: usize = 1024;

pub(super) struct Epoll {
    epoll: OwnedFd,
    wake: OwnedFd,
    /// What the kernel reports into, kept between waits: one thread waits, often.
    events: Mutex<Vec<libc::epoll_event>>,
}

impl std::fmt::Debug for Epoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoll")
            .field("epoll", &self.epoll)
            .field("wake", &self.wake)
            .finish_non_exhaustive()
    }
}

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

impl Epoll {
    pub(super) fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 and eventfd take flags only and return new fds, which
        // OwnedFd then owns.
        let epoll =
            unsafe { OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        // SAFETY: as above.
        let wake = unsafe {
            OwnedFd::from_raw_fd(check(libc::eventfd(
                0,
                libc::EFD_CLOEXEC | libc::EFD_NONBLOCK,
            ))?)
        };
        let poller = Epoll {
            epoll,
            wake,
            events: Mutex::new(vec![
                libc::epoll_event { events: 0, u64: 0 };
                EVENTS_PER_WAIT
            ]),
        };
        poller.control(libc::EPOLL_CTL_ADD, poller.wake.as_raw_fd(), WAKE_TOKEN)?;
        Ok(poller)
    }

    /// The epoll behind `poller`, which must be the TCP transport's.
    pub(super) fn of(poller: &dyn Poller) -> io::Result<&Epoll> {
        poller.as_any().downcast_ref::<Epoll>().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a TCP connection can only be watched by the TCP transport's poller",
            )
        })
    }

    pub(super) fn watch(&self, stream: &TcpStream, token: u64) -> io::Result<()> {
        if token == WAKE_TOKEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "token `u64::MAX` is the poller's own",
            ));
        }
        self.control(libc::EPOLL_CTL_ADD, stream.as_raw_fd(), token)
    }

    pub(super) fn unwatch(&self, stream: &TcpStream) -> io::Result<()> {
        self.control(libc::EPOLL_CTL_DEL, stream.as_raw_fd(), 0)
    }

    fn control(&self, op: libc::c_int, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: token,
        };
        // SAFETY: both fds are open for the call; the kernel copies `event`.
        check(unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) })?;
        Ok(())
    }
}

impl Poller for Epoll {
    fn wait(&self, ready: &mut Vec<u64>, timeout: Duration) -> io::Result<()> {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let timeout_ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `events` has room for EVENTS_PER_WAIT entries, which bounds what the
        // kernel writes.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                EVENTS_PER_WAIT as libc::c_int,
                timeout_ms,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::Interrupted => Ok(()),
                _ => Err(err),
            };
        }
        for event in &events[..n as usize] {
            let token = event.u64;
            if token == WAKE_TOKEN {
                let mut count = [0u8; 8];
                // SAFETY: reads at most 8 bytes into `count`; a nonblocking eventfd
                // that was already reset fails with EAGAIN, which is fine.
                let _ = unsafe {
                    libc::read(
                        self.wake.as_raw_fd(),
                        count.as_mut_ptr().cast(),
                        count.len(),
                    )
                };
            } else {
                ready.push(token);
            }
        }
        Ok(())
    }

    fn wake(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes the 8 bytes of `one` to the eventfd.
        let written = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        if written < 0 {
            let err = io::Error::last_os_error();
            // A counter already at its maximum still wakes the poller.
            if err.kind() != io::ErrorKind::WouldBlock {
                return Err(err);
            }
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One `recv` with `MSG_DONTWAIT`.
pub(super) fn read_without_waiting(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{Shutdown, TcpListener};

    use super::super::{Connection, Tcp, Transport};
    use super::*;

    fn ready(poller: &dyn Poller) -> Vec<u64> {
        let mut tokens = Vec::new();
        poller
            .wait(&mut tokens, Duration::from_millis(200))
            .unwrap();
        tokens.sort_unstable();
        tokens.dedup();
        tokens
    }

    #[test]
    fn epoll_reports_sockets_with_bytes_or_an_end_and_reads_do_not_wait() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let poller = Tcp.poller().unwrap();
        server.watch(&*poller, 3).unwrap();
        assert!(ready(&*poller).is_empty());
        let mut buf = [0u8; 16];
        assert_eq!(
            server.read_ready(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );

        client.write_all(b"hello").unwrap();
        assert_eq!(ready(&*poller), [3]);
        assert_eq!(server.read_ready(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        // Reading without waiting left the socket blocking for its other users.
        let clone = server.try_clone().unwrap();
        assert!(!is_nonblocking(&clone));

        client.shutdown(Shutdown::Write).unwrap();
        assert_eq!(ready(&*poller), [3]);
        assert_eq!(server.read_ready(&mut buf).unwrap(), 0);
        server.unwatch(&*poller).unwrap();
        assert!(ready(&*poller).is_empty());
    }

    #[test]
    fn a_wake_ends_a_wait_and_the_wake_token_is_refused() {
        let poller = Tcp.poller().unwrap();
        poller.wake().unwrap();
        let mut tokens = Vec::new();
        let started = std::time::Instant::now();
        poller.wait(&mut tokens, Duration::from_secs(30)).unwrap();
        assert!(tokens.is_empty());
        assert!(started.elapsed() < Duration::from_secs(30));

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let err = stream.watch(&*poller, u64::MAX).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    fn is_nonblocking(stream: &TcpStream) -> bool {
        // SAFETY: F_GETFL on an open fd.
        let flags = unsafe { libc::fcntl(stream.as_raw_fd(), libc::F_GETFL) };
        flags & libc::O_NONBLOCK != 0
    }
}
