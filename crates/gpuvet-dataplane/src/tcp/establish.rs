//! Setting up a group's connections, with a handshake that carries ranks and the round
//! id and proves on both sides that the peer holds the run's key (see `handshake`).
//!
//! Connections are one-way: a rank connects to every rank it sends to and accepts a
//! connection from every rank it receives from, so a pair that exchanges data both
//! ways holds two connections, as `iperf3 --bidir` does. The kernel holds a socket's
//! lock for the whole of each `read` or `write`, so one shared connection would make a
//! rank's sending and receiving take turns; two let them overlap.
//!
//! Connecting and accepting run at the same time (one thread per outgoing connection,
//! the caller's thread accepts), so a rank answers its peers promptly even while its
//! own calls are still waiting. A caller that is refused because
//! it is a round ahead retries until the deadline, since its peer may just be late;
//! every other refusal fails at once with the reason.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::handshake::{
    self, CHALLENGE_BYTES, Challenge, DataKey, HELLO_BYTES, Hello, NONCE_BYTES, REPLY_BYTES,
    Refusal, Reply,
};
use super::link::{Link, peer_name};
use crate::{BackendError, CancelToken, DataPlaneError};
use gpuvet_backend::with_causes;

/// How long an accepted connection may take to say who it is: a stray connection that
/// says nothing must not hold up the ranks behind it.
const HELLO_TIMEOUT: Duration = Duration::from_secs(1);
/// Each connect attempt's limit; a peer that is not listening yet is retried.
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(20);
const MAX_RETRY_DELAY: Duration = Duration::from_millis(500);
/// How often the accept loop looks for new connections.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

/// Who this rank is and whom it must reach.
#[derive(Debug)]
pub(super) struct Plan<'a> {
    pub(super) rank: usize,
    pub(super) round: u64,
    pub(super) peers: &'a [SocketAddr],
    /// The ranks this rank sends to: it opens one connection to each.
    pub(super) sends_to: &'a [usize],
    /// The ranks this rank receives from: each opens a connection to it.
    pub(super) receives_from: &'a [usize],
    /// The run's data-plane key: every hello and reply proves it.
    pub(super) key: &'a DataKey,
}

impl Plan<'_> {
    fn world(&self) -> usize {
        self.peers.len()
    }

    fn name(&self, rank: usize) -> String {
        peer_name(rank, self.peers[rank])
    }
}

/// What establishing produced: the links, indexed by peer rank, and the connections
/// that were turned away on the way (for the caller's log).
#[derive(Debug)]
pub(super) struct Established {
    /// This rank's connection to each peer it sends to.
    pub(super) outgoing: Vec<Option<Link>>,
    /// Each peer's connection to this rank, for receiving.
    pub(super) incoming: Vec<Option<Link>>,
    pub(super) refused: Vec<String>,
}

pub(super) fn establish(
    plan: &Plan<'_>,
    listener: &TcpListener,
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<Established, BackendError> {
    // Raised by whichever side fails first, so the other stops waiting at once.
    let failed = AtomicBool::new(false);

    let (outgoing, accepted) = thread::scope(|scope| {
        let connectors: Vec<_> = plan
            .sends_to
            .iter()
            .map(|&peer| {
                let failed = &failed;
                let spawned = thread::Builder::new()
                    .name(format!("gpuvet-connect-{peer}"))
                    .spawn_scoped(scope, move || {
                        let result = connect(plan, peer, deadline, cancel, failed);
                        if result.is_err() {
                            failed.store(true, Ordering::SeqCst);
                        }
                        result
                    });
                (peer, spawned)
            })
            .collect();
        let accepted = accept(plan, listener, deadline, cancel, &failed);
        if accepted.is_err() {
            failed.store(true, Ordering::SeqCst);
        }
        let outgoing: Vec<(usize, Result<TcpStream, Failure>)> = connectors
            .into_iter()
            .map(|(peer, spawned)| {
                let result = match spawned {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        Err(Failure::Real(BackendError::Failed(format!(
                            "the thread connecting to {} panicked",
                            plan.name(peer)
                        ))))
                    }),
                    Err(error) => Err(Failure::Real(BackendError::io(
                        format!("could not start a thread to connect to {}", plan.name(peer)),
                        error,
                    ))),
                };
                (peer, result)
            })
            .collect();
        (outgoing, accepted)
    });
    if cancel.is_cancelled() {
        return Err(BackendError::Cancelled);
    }

    // Every real cause, in the order: peers that never called, then peers that could
    // not be reached; a part that only stopped because another failed adds nothing.
    let mut causes = Vec::new();
    let mut established = Established {
        outgoing: (0..plan.world()).map(|_| None).collect(),
        incoming: (0..plan.world()).map(|_| None).collect(),
        refused: Vec::new(),
    };
    match accepted {
        Ok(accepted) => {
            established.refused = accepted.refused;
            for (peer, stream) in accepted.streams {
                established.incoming[peer] = Some(tune(plan, peer, stream)?);
            }
        }
        Err(Failure::Real(error)) => causes.push(with_causes(&error)),
        Err(Failure::Echo) => {}
    }
    for (peer, result) in outgoing {
        match result {
            Ok(stream) => established.outgoing[peer] = Some(tune(plan, peer, stream)?),
            Err(Failure::Real(error)) => causes.push(with_causes(&error)),
            Err(Failure::Echo) => {}
        }
    }
    if causes.is_empty() {
        Ok(established)
    } else {
        Err(BackendError::Failed(causes.join("; ")))
    }
}

fn tune(plan: &Plan<'_>, peer: usize, stream: TcpStream) -> Result<Link, BackendError> {
    Link::new(peer, plan.peers[peer], stream).map_err(|error| {
        BackendError::io(
            format!("could not configure the connection to {}", plan.name(peer)),
            error,
        )
    })
}

/// Calls `peer` until it accepts this rank, refuses it for good, or the deadline
/// passes.
fn connect(
    plan: &Plan<'_>,
    peer: usize,
    deadline: Instant,
    cancel: &CancelToken,
    failed: &AtomicBool,
) -> Result<TcpStream, Failure> {
    let real = |message: String| Failure::Real(BackendError::Failed(message));
    let addr = plan.peers[peer];
    let name = plan.name(peer);
    let hello = Hello::new(plan.round, plan.world(), plan.rank, peer);
    let mut retry_delay = FIRST_RETRY_DELAY;
    let mut last_problem = "no attempt finished".to_owned();
    loop {
        cancel.check().map_err(Failure::Real)?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(real(format!(
                "could not reach {name} before the deadline: {last_problem}"
            )));
        }
        if failed.load(Ordering::SeqCst) {
            // Another part of the setup failed and reports why; this one just stops.
            return Err(Failure::Echo);
        }
        let attempt =
            match TcpStream::connect_timeout(&addr, remaining.min(CONNECT_ATTEMPT_TIMEOUT)) {
                Ok(stream) => handshake_as_caller(&stream, &hello, plan, deadline, cancel, failed)
                    .map(|reply| (stream, reply)),
                Err(error) => Err(Attempt::Retry(error.to_string())),
            };
        match attempt {
            Ok((stream, reply)) => match reply.refusal {
                None if reply.rank as usize == peer => return Ok(stream),
                None => {
                    return Err(real(format!(
                        "the process at `{addr}` is rank {} of the group, not rank {peer}",
                        reply.rank
                    )));
                }
                Some(Refusal::Round) => {
                    // The peer may still be finishing an earlier round: try again.
                    last_problem = format!(
                        "it is in round `{}` and this rank in round `{}`",
                        reply.round, plan.round
                    );
                }
                Some(refusal) => {
                    return Err(real(format!(
                        "{name} refused the connection from rank {}: {}",
                        plan.rank,
                        explain_refusal(refusal, &reply, plan)
                    )));
                }
            },
            Err(Attempt::Retry(problem)) => last_problem = problem,
            Err(Attempt::Fail(problem)) => return Err(real(format!("{name} {problem}"))),
            Err(Attempt::Stop(failure)) => return Err(failure),
        }
        let pause = retry_delay.min(deadline.saturating_duration_since(Instant::now()));
        thread::sleep(pause);
        retry_delay = (retry_delay * 2).min(MAX_RETRY_DELAY);
    }
}

/// How one connect attempt went wrong.
#[derive(Debug)]
enum Attempt {
    /// Worth another try (the peer is not listening yet, or closed on us).
    Retry(String),
    /// Never going to work; the text follows the peer's name.
    Fail(String),
    /// Cancelled, or another part of the setup failed.
    Stop(Failure),
}

/// Reads the acceptor's challenge, sends the hello with its proof, and reads and checks
/// the reply's proof.
fn handshake_as_caller(
    stream: &TcpStream,
    hello: &Hello,
    plan: &Plan<'_>,
    deadline: Instant,
    cancel: &CancelToken,
    failed: &AtomicBool,
) -> Result<Reply, Attempt> {
    let io_problem = |error: std::io::Error| Attempt::Retry(format!("handshake failed: {error}"));
    stream
        .set_write_timeout(Some(super::link::POLL))
        .map_err(io_problem)?;
    stream
        .set_read_timeout(Some(super::link::POLL))
        .map_err(io_problem)?;
    let mut bytes = [0u8; CHALLENGE_BYTES];
    read_polling(stream, &mut bytes, deadline, cancel, failed)?;
    let challenge = Challenge::decode(&bytes).ok_or_else(|| {
        Attempt::Fail(
            "answered with something that is not a gpuvet data-plane challenge".to_owned(),
        )
    })?;
    if challenge.version != handshake::PROTOCOL_VERSION {
        return Err(Attempt::Fail(format!(
            "speaks data-plane protocol `{}` and this rank `{}`; run the same gpuvet version on every node",
            challenge.version,
            handshake::PROTOCOL_VERSION
        )));
    }
    let sent = hello.encode(plan.key, &challenge.nonce);
    // 72 bytes always fit an empty socket buffer, so one write does it.
    (&*stream).write_all(&sent).map_err(io_problem)?;
    let mut bytes = [0u8; REPLY_BYTES];
    read_polling(stream, &mut bytes, deadline, cancel, failed)?;
    let reply = Reply::decode(&bytes).ok_or_else(|| {
        Attempt::Fail("answered with something that is not a gpuvet data-plane reply".to_owned())
    })?;
    // A stranger's refusal carries no proof; the refusal of this rank's own proof is
    // the only one taken without it, and it only makes this rank give up.
    if reply.refusal != Some(Refusal::Proof) && !handshake::verify_reply(plan.key, &sent, &bytes) {
        return Err(Attempt::Fail(
            "answered without proving this run's data-plane key: the process there is not a member of this run (a different `GPUVET_TOKEN`, or not gpuvet)".to_owned(),
        ));
    }
    Ok(reply)
}

/// Fills `bytes` from the caller's side of a connection, in poll slices, watching the
/// deadline, the token and the other parts of the setup.
fn read_polling(
    stream: &TcpStream,
    bytes: &mut [u8],
    deadline: Instant,
    cancel: &CancelToken,
    failed: &AtomicBool,
) -> Result<(), Attempt> {
    let io_problem = |error: std::io::Error| Attempt::Retry(format!("handshake failed: {error}"));
    let mut filled = 0;
    while filled < bytes.len() {
        match (&*stream).read(&mut bytes[filled..]) {
            Ok(0) => {
                return Err(Attempt::Retry(
                    "closed the connection during the handshake".to_owned(),
                ));
            }
            Ok(count) => filled += count,
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                cancel
                    .check()
                    .map_err(|error| Attempt::Stop(Failure::Real(error)))?;
                if Instant::now() >= deadline {
                    // Its kernel accepted the connection, but the process never
                    // answered: it is stopped, overloaded, or not gpuvet.
                    return Err(Attempt::Fail(
                        "accepted the connection but did not answer the handshake before the deadline".to_owned(),
                    ));
                }
                if failed.load(Ordering::SeqCst) {
                    return Err(Attempt::Stop(Failure::Echo));
                }
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(io_problem(error)),
        }
    }
    Ok(())
}

fn explain_refusal(refusal: Refusal, reply: &Reply, plan: &Plan<'_>) -> String {
    match refusal {
        Refusal::Version => format!(
            "it speaks data-plane protocol `{}` and this rank `{}`",
            reply.version,
            handshake::PROTOCOL_VERSION
        ),
        Refusal::World => format!(
            "its group has {} ranks and this rank's {}",
            reply.world,
            plan.world()
        ),
        Refusal::Duplicate => format!(
            "it already has a connection from rank {} (two processes with the same rank?)",
            plan.rank
        ),
        Refusal::Proof => "this rank's hello did not prove the run's data-plane key to it: the two hold different keys (a different `GPUVET_TOKEN` or job id, or ranks of different runs)".to_owned(),
        other => format!("it saw {other}"),
    }
}

#[derive(Debug)]
enum Failure {
    Real(BackendError),
    /// Stopped because another part of the setup failed; that part reports why.
    Echo,
}

#[derive(Debug)]
struct Accepted {
    streams: BTreeMap<usize, TcpStream>,
    refused: Vec<String>,
}

/// Accepts the ranks this rank receives from, turning away anything else.
fn accept(
    plan: &Plan<'_>,
    listener: &TcpListener,
    deadline: Instant,
    cancel: &CancelToken,
    failed: &AtomicBool,
) -> Result<Accepted, Failure> {
    let mut accepted = Accepted {
        streams: BTreeMap::new(),
        refused: Vec::new(),
    };
    if plan.receives_from.is_empty() {
        return Ok(accepted);
    }
    // Polling keeps the loop responsive to the deadline and the token; the caller's
    // listener is put back to blocking mode afterwards.
    listener.set_nonblocking(true).map_err(|error| {
        Failure::Real(BackendError::io(
            "could not poll the data-plane listener",
            error,
        ))
    })?;
    let result = accept_loop(plan, listener, deadline, cancel, failed, &mut accepted);
    let _ = listener.set_nonblocking(false);
    result.map(|()| accepted)
}

fn accept_loop(
    plan: &Plan<'_>,
    listener: &TcpListener,
    deadline: Instant,
    cancel: &CancelToken,
    failed: &AtomicBool,
    accepted: &mut Accepted,
) -> Result<(), Failure> {
    while accepted.streams.len() < plan.receives_from.len() {
        cancel.check().map_err(Failure::Real)?;
        // At the deadline this side's own cause counts even if another part failed
        // too: both end up in the error.
        if Instant::now() >= deadline {
            let missing: Vec<String> = plan
                .receives_from
                .iter()
                .filter(|peer| !accepted.streams.contains_key(peer))
                .map(|&peer| plan.name(peer))
                .collect();
            let mut message = format!(
                "{} did not connect to rank {} before the deadline",
                missing.join(", "),
                plan.rank
            );
            if !accepted.refused.is_empty() {
                message.push_str(&format!(
                    "; refused meanwhile: {}",
                    accepted.refused.join("; ")
                ));
            }
            return Err(Failure::Real(BackendError::Failed(message)));
        }
        if failed.load(Ordering::SeqCst) {
            return Err(Failure::Echo);
        }
        // Turned-away connections are kept as text, for the log and the deadline's error.
        match listener.accept() {
            Ok((stream, from)) => {
                if let Err(reason) = greet(plan, stream, from, deadline, accepted) {
                    accepted.refused.push(with_causes(&reason));
                }
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            // A connection reset before it was accepted, or a full file table: neither
            // stops the group, and the deadline bounds the retries.
            Err(error) => {
                let reason = DataPlaneError::Accept(error.into());
                accepted.refused.push(with_causes(&reason));
                thread::sleep(ACCEPT_POLL);
            }
        }
    }
    Ok(())
}

/// Reads an accepted connection's hello and accepts or refuses it; `Err` says why it
/// was turned away.
fn greet(
    plan: &Plan<'_>,
    stream: TcpStream,
    from: SocketAddr,
    deadline: Instant,
    accepted: &mut Accepted,
) -> Result<(), DataPlaneError> {
    let io_problem = |error: std::io::Error| DataPlaneError::Handshake {
        from,
        source: error.into(),
    };
    stream.set_nonblocking(false).map_err(io_problem)?;
    let wait = HELLO_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()));
    if wait.is_zero() {
        return Err(DataPlaneError::AtDeadline { from });
    }
    let hello_deadline = Instant::now() + wait;
    stream.set_read_timeout(Some(wait)).map_err(io_problem)?;
    stream.set_write_timeout(Some(wait)).map_err(io_problem)?;
    let mut nonce = [0u8; NONCE_BYTES];
    handshake::fill_random(&mut nonce)
        .map_err(|source| DataPlaneError::NoNonce { from, source })?;
    // 40 bytes always fit an empty socket buffer: a caller that never reads cannot
    // block this write.
    (&stream)
        .write_all(&Challenge::new(nonce).encode())
        .map_err(io_problem)?;
    let mut bytes = [0u8; HELLO_BYTES];
    let mut filled = 0;
    while filled < HELLO_BYTES {
        match (&stream).read(&mut bytes[filled..]) {
            Ok(0) => return Err(DataPlaneError::ClosedBeforeHello { from }),
            Ok(count) => filled += count,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(DataPlaneError::Silent { from, wait });
            }
            Err(error) => return Err(io_problem(error)),
        }
        // A peer that dribbles bytes must not stretch the wait either.
        if Instant::now() >= hello_deadline && filled < HELLO_BYTES {
            return Err(DataPlaneError::Silent { from, wait });
        }
    }
    let Some((hello, hello_mac)) = Hello::decode(&bytes) else {
        return Err(DataPlaneError::NotAHello { from });
    };
    if !handshake::verify_hello(plan.key, &nonce, &bytes) {
        // Whatever it claims is unproven: it is named by its address only, and it
        // never takes a rank's place.
        let reply = Reply::new(Some(Refusal::Proof), plan.round, plan.world(), plan.rank);
        (&stream)
            .write_all(&reply.encode(plan.key, None))
            .map_err(io_problem)?;
        return Err(DataPlaneError::Unproven { from });
    }
    let refusal = handshake::judge(
        &hello,
        plan.round,
        plan.world(),
        plan.rank,
        |peer| plan.receives_from.contains(&peer),
        |peer| accepted.streams.contains_key(&peer),
    );
    let reply = Reply::new(refusal, plan.round, plan.world(), plan.rank);
    (&stream)
        .write_all(&reply.encode(plan.key, Some(&hello_mac)))
        .map_err(io_problem)?;
    match refusal {
        None => {
            accepted.streams.insert(hello.from_rank as usize, stream);
            Ok(())
        }
        Some(refusal) => Err(DataPlaneError::Refused {
            from,
            rank: hello.from_rank,
            round: hello.round,
            refusal,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Greets one connection made by `call` on a fresh listener, as rank 1 of two.
    fn greet_one(
        deadline: Instant,
        call: impl FnOnce(TcpStream) + Send + 'static,
    ) -> (SocketAddr, Result<(), DataPlaneError>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let caller = thread::spawn(move || call(TcpStream::connect(addr).unwrap()));
        let (stream, from) = listener.accept().unwrap();
        let key = DataKey::from_bytes([7; 32]);
        let peers = [addr, addr];
        let plan = Plan {
            rank: 1,
            round: 1,
            peers: &peers,
            sends_to: &[0],
            receives_from: &[0],
            key: &key,
        };
        let mut accepted = Accepted {
            streams: BTreeMap::new(),
            refused: Vec::new(),
        };
        let result = greet(&plan, stream, from, deadline, &mut accepted);
        caller.join().unwrap();
        (from, result)
    }

    /// Reads the challenge, so the acceptor's write does not fail first.
    fn read_challenge(stream: &mut TcpStream) {
        let mut challenge = [0u8; CHALLENGE_BYTES];
        stream.read_exact(&mut challenge).unwrap();
    }

    #[test]
    fn a_caller_that_hangs_up_or_says_nothing_is_turned_away_with_why() {
        let soon = || Instant::now() + Duration::from_secs(30);
        let (from, closed) = greet_one(soon(), |mut stream| read_challenge(&mut stream));
        assert_eq!(closed, Err(DataPlaneError::ClosedBeforeHello { from }));
        assert_eq!(
            with_causes(&closed.unwrap_err()),
            format!("`{from}` closed the connection before saying who it is")
        );

        let (from, silent) = greet_one(Instant::now() + Duration::from_millis(200), {
            |mut stream| {
                read_challenge(&mut stream);
                // Holds the connection open, silent, past the acceptor's wait.
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = stream.read(&mut [0u8; 1]);
            }
        });
        let Err(DataPlaneError::Silent { from: who, wait }) = silent else {
            panic!("{silent:?}");
        };
        assert_eq!(who, from);
        assert!(wait <= Duration::from_millis(200), "{wait:?}");
        assert!(
            DataPlaneError::Silent { from, wait }
                .to_string()
                .starts_with(&format!("`{from}` did not say who it is within 0.")),
        );

        let (from, late) = greet_one(Instant::now(), |_| {});
        assert_eq!(late, Err(DataPlaneError::AtDeadline { from }));
        assert_eq!(
            late.unwrap_err().to_string(),
            format!("`{from}` arrived at the deadline")
        );

        let (from, garbage) = greet_one(soon(), |mut stream| {
            read_challenge(&mut stream);
            stream.write_all(&[0xff; HELLO_BYTES]).unwrap();
        });
        assert_eq!(garbage, Err(DataPlaneError::NotAHello { from }));
    }

    #[test]
    fn an_io_failure_in_the_handshake_keeps_its_cause() {
        let from: SocketAddr = "192.0.2.1:7".parse().unwrap();
        let error = DataPlaneError::Handshake {
            from,
            source: std::io::Error::from(ErrorKind::ConnectionReset).into(),
        };
        assert_eq!(error.to_string(), "`192.0.2.1:7`: handshake failed");
        assert_eq!(
            with_causes(&error),
            format!(
                "`192.0.2.1:7`: handshake failed: {}",
                std::io::Error::from(ErrorKind::ConnectionReset)
            )
        );
        let accept = DataPlaneError::Accept(std::io::Error::from(ErrorKind::OutOfMemory).into());
        assert!(with_causes(&accept).starts_with("accept failed: "));
        let no_nonce = DataPlaneError::NoNonce {
            from,
            source: BackendError::Failed("cannot read the system's random source".to_owned()),
        };
        assert_eq!(
            with_causes(&no_nonce),
            "`192.0.2.1:7`: cannot read the system's random source"
        );
    }
}
