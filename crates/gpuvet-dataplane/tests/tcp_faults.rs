//! Faults on the data plane: peers that never come, never answer, stop mid-way, strays
//! with the wrong round, cancels. Each must end in an error that names the peer, well
//! before the deadline or a hang; the time bounds are generous anti-hang bounds.

mod tcp_support;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use gpuvet_backend::{BackendError, CancelToken, with_causes};
use gpuvet_dataplane::DataPlaneError;
use gpuvet_dataplane::tcp::{
    CollectiveSpec, DataKey, GroupSpec, ProbeResponder, ProbeSpec, TcpGroup, Topology,
    probe_connectivity,
};
use tcp_support::{DEADLINE, closed_port, listeners, message, small_spec, spec_for};

const SHORT: Duration = Duration::from_secs(1);
/// What a deadline may be overrun by: a poll slice and a connect attempt, with room.
const SLACK: Duration = Duration::from_secs(3);

/// Establishes ranks `0..ranks` except those in `absent`, each in its own thread,
/// returning each present rank's result and how long it took.
fn establish_without(
    ranks: usize,
    absent: &[usize],
    addrs_override: impl Fn(usize) -> Option<std::net::SocketAddr>,
    deadline: Duration,
) -> Vec<(usize, Result<TcpGroup, BackendError>, Duration)> {
    let (listeners, mut addrs) = listeners(ranks);
    for (rank, addr) in addrs.iter_mut().enumerate() {
        if let Some(other) = addrs_override(rank) {
            *addr = other;
        }
    }
    let started = Instant::now();
    let cancel = CancelToken::new();
    thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .filter(|rank| !absent.contains(rank))
            .map(|rank| {
                let (listeners, addrs, cancel) = (&listeners, &addrs, &cancel);
                scope.spawn(move || {
                    let spec = spec_for(rank, addrs, 1, Topology::Ring);
                    let result =
                        TcpGroup::establish(&spec, &listeners[rank], started + deadline, cancel);
                    (rank, result, started.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn a_peer_that_never_listens_is_named_before_the_deadline() {
    let nowhere = closed_port();
    let results = establish_without(3, &[2], |rank| (rank == 2).then_some(nowhere), SHORT);
    for (rank, result, took) in results {
        let text = message(result);
        // Rank 1 sends to rank 2 and cannot reach it; rank 0 receives from rank 2 and
        // waits in vain for its call.
        let expected = if rank == 1 {
            format!("could not reach rank 2 (`{nowhere}`) before the deadline")
        } else {
            format!("rank 2 (`{nowhere}`) did not connect to rank 0 before the deadline")
        };
        assert!(text.contains(&expected), "rank {rank}: {text}");
        assert!(took < SHORT + SLACK, "rank {rank} took {took:?}");
    }
}

#[test]
fn a_peer_that_never_starts_is_named_by_its_neighbours() {
    // Rank 0 never starts: rank 1 waits for its call, rank 2 cannot reach it.
    let results = establish_without(3, &[0], |_| None, SHORT);
    for (rank, result, took) in results {
        let text = message(result);
        assert!(text.contains("rank 0 (`127.0.0.1:"), "rank {rank}: {text}");
        assert!(took < SHORT + SLACK, "rank {rank} took {took:?}");
    }
}

#[test]
fn a_peer_whose_kernel_accepts_but_which_never_answers_is_named() {
    // The listener exists (the kernel completes TCP handshakes) but nobody reads:
    // what a SIGSTOPped rank looks like while the group is being set up.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let results = establish_without(2, &[1], |rank| (rank == 1).then_some(silent_addr), SHORT);
    let (_, result, took) = results.into_iter().next().unwrap();
    let text = message(result);
    assert!(
        text.contains(&format!(
            "rank 1 (`{silent_addr}`) accepted the connection but did not answer"
        )),
        "{text}"
    );
    assert!(took < SHORT + SLACK, "took {took:?}");
    drop(silent);
}

#[test]
fn strays_with_the_wrong_round_or_garbage_are_refused_and_the_group_still_forms() {
    let (listeners, addrs) = listeners(2);
    let cancel = CancelToken::new();
    let deadline = Instant::now() + DEADLINE;
    thread::scope(|scope| {
        let rank1 = scope.spawn(|| {
            let spec = spec_for(1, &addrs, 7, Topology::Ring);
            TcpGroup::establish(&spec, &listeners[1], deadline, &cancel)
        });
        // Garbage first, then a rank 0 from round 6: both must be turned away.
        let mut garbage = TcpStream::connect(addrs[1]).unwrap();
        garbage.write_all(&[0xAB; 72]).unwrap();
        let stray = scope.spawn(|| {
            let spec = spec_for(0, &addrs, 6, Topology::Ring);
            let own = TcpListener::bind("127.0.0.1:0").unwrap();
            TcpGroup::establish(
                &spec,
                &own,
                Instant::now() + Duration::from_millis(600),
                &cancel,
            )
        });
        let stray_text = message(stray.join().unwrap());
        assert!(stray_text.contains("rank 1 (`"), "{stray_text}");
        assert!(
            stray_text.contains("in round `7` and this rank in round `6`"),
            "{stray_text}"
        );
        // Now the real rank 0 of round 7.
        let spec = spec_for(0, &addrs, 7, Topology::Ring);
        let mut rank0 = TcpGroup::establish(&spec, &listeners[0], deadline, &cancel).unwrap();
        let mut rank1 = rank1.join().unwrap().unwrap();
        let refused = rank1.refused_connections().join("\n");
        assert!(
            refused.contains("not a gpuvet data-plane hello"),
            "{refused}"
        );
        assert!(refused.contains("round `6` was refused"), "{refused}");
        // The group works despite the strays.
        let reducing =
            scope.spawn(move || rank0.all_reduce(&small_spec(4096), deadline, &CancelToken::new()));
        assert!(
            rank1
                .all_reduce(&small_spec(4096), deadline, &cancel)
                .is_ok()
        );
        assert!(reducing.join().unwrap().is_ok());
        drop(garbage);
    });
}

/// A hello as a stranger without the key would write it: every field right for rank 0
/// calling rank 1 in `round`, and a MAC it can only guess (zeros).
fn unproven_hello(round: u64, world: u32) -> Vec<u8> {
    let mut hello = Vec::with_capacity(72);
    hello.extend_from_slice(b"GVDP");
    hello.extend_from_slice(&2u16.to_le_bytes());
    hello.extend_from_slice(&[0, 0]);
    hello.extend_from_slice(&round.to_le_bytes());
    hello.extend_from_slice(&world.to_le_bytes());
    hello.extend_from_slice(&0u32.to_le_bytes());
    hello.extend_from_slice(&1u32.to_le_bytes());
    hello.extend_from_slice(&1.0f32.to_ne_bytes());
    hello.extend_from_slice(&[0; 8]);
    hello.extend_from_slice(&[0; 32]);
    hello
}

/// The refusal code of a 56-byte reply.
fn refusal_code(reply: &[u8]) -> u16 {
    u16::from_le_bytes([reply[6], reply[7]])
}

#[test]
fn strangers_without_the_key_are_refused_and_the_real_ranks_still_reduce() {
    let (listeners, addrs) = listeners(2);
    let cancel = CancelToken::new();
    let deadline = Instant::now() + DEADLINE;
    thread::scope(|scope| {
        let rank1 = scope.spawn(|| {
            let spec = spec_for(1, &addrs, 7, Topology::Ring);
            TcpGroup::establish(&spec, &listeners[1], deadline, &cancel)
        });
        // A stranger without the token: it reads the challenge, then claims to be rank 0
        // with every field right but no proof.
        let mut stranger = TcpStream::connect(addrs[1]).unwrap();
        stranger.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut challenge = [0u8; 40];
        std::io::Read::read_exact(&mut stranger, &mut challenge).unwrap();
        assert_eq!(&challenge[..4], b"GVDC");
        stranger.write_all(&unproven_hello(7, 2)).unwrap();
        let mut reply = [0u8; 56];
        std::io::Read::read_exact(&mut stranger, &mut reply).unwrap();
        assert_eq!(refusal_code(&reply), 8, "refused for its proof");
        assert!(reply[24..].iter().all(|&b| b == 0), "no MAC for a stranger");

        // A stranger with a wrong token runs the real protocol under another key.
        let impostor = scope.spawn(|| {
            let spec = GroupSpec {
                key: DataKey::from_bytes([0x77; 32]),
                ..spec_for(0, &addrs, 7, Topology::Ring)
            };
            let own = TcpListener::bind("127.0.0.1:0").unwrap();
            TcpGroup::establish(&spec, &own, Instant::now() + SHORT, &cancel)
        });
        let impostor_text = message(impostor.join().unwrap());
        assert!(
            impostor_text.contains("refused the connection from rank 0")
                && impostor_text.contains("did not prove the run's data-plane key"),
            "{impostor_text}"
        );

        // Now the real rank 0: the strangers took nothing from it.
        let spec = spec_for(0, &addrs, 7, Topology::Ring);
        let mut rank0 = TcpGroup::establish(&spec, &listeners[0], deadline, &cancel).unwrap();
        let mut rank1 = rank1.join().unwrap().unwrap();
        let refused = rank1.refused_connections().join("\n");
        assert_eq!(
            refused
                .matches("does not prove this run's data-plane key")
                .count(),
            2,
            "{refused}"
        );
        // Named by their addresses, never by the rank they claimed.
        assert!(!refused.contains("rank 0"), "{refused}");
        let reducing =
            scope.spawn(move || rank0.all_reduce(&small_spec(4096), deadline, &CancelToken::new()));
        assert!(
            rank1
                .all_reduce(&small_spec(4096), deadline, &cancel)
                .is_ok()
        );
        assert!(reducing.join().unwrap().is_ok());
        drop(stranger);
    });
}

#[test]
fn a_listener_without_the_key_is_not_taken_for_the_peer() {
    // Rank 1's address is held by something that speaks the protocol and accepts every
    // caller, but cannot prove the key: rank 0 must not take it for rank 1.
    let (listeners, addrs) = listeners(2);
    let cancel = CancelToken::new();
    thread::scope(|scope| {
        let squatter = scope.spawn(|| {
            let (mut stream, _) = listeners[1].accept().unwrap();
            let mut challenge = Vec::from(*b"GVDC");
            challenge.extend_from_slice(&2u16.to_le_bytes());
            challenge.extend_from_slice(&[0; 34]);
            stream.write_all(&challenge).unwrap();
            let mut hello = [0u8; 72];
            std::io::Read::read_exact(&mut stream, &mut hello).unwrap();
            // "Welcome, I am rank 1 of round 1", with a made-up proof.
            let mut reply = Vec::from(*b"GVDP");
            reply.extend_from_slice(&2u16.to_le_bytes());
            reply.extend_from_slice(&0u16.to_le_bytes());
            reply.extend_from_slice(&1u64.to_le_bytes());
            reply.extend_from_slice(&2u32.to_le_bytes());
            reply.extend_from_slice(&1u32.to_le_bytes());
            reply.extend_from_slice(&[0x42; 32]);
            stream.write_all(&reply).unwrap();
            stream
        });
        let spec = spec_for(0, &addrs, 1, Topology::Ring);
        let text = message(TcpGroup::establish(
            &spec,
            &listeners[0],
            Instant::now() + DEADLINE,
            &cancel,
        ));
        assert!(
            text.contains(&format!(
                "rank 1 (`{}`) answered without proving this run's data-plane key",
                addrs[1]
            )),
            "{text}"
        );
        drop(squatter.join().unwrap());
    });
}

#[test]
fn a_peer_that_never_enters_the_collective_is_named_at_the_deadline() {
    let (listeners, addrs) = listeners(2);
    let cancel = CancelToken::new();
    let setup_deadline = Instant::now() + DEADLINE;
    let (release, released) = std::sync::mpsc::channel::<()>();
    thread::scope(|scope| {
        let (addrs, listeners, cancel) = (&addrs, &listeners, &cancel);
        let idle = scope.spawn(move || {
            let spec = spec_for(1, addrs, 1, Topology::Ring);
            let group = TcpGroup::establish(&spec, &listeners[1], setup_deadline, cancel).unwrap();
            // Holds its connections open, but never runs the collective.
            let _ = released.recv_timeout(DEADLINE);
            drop(group);
        });
        let spec = spec_for(0, addrs, 1, Topology::Ring);
        let mut group = TcpGroup::establish(&spec, &listeners[0], setup_deadline, cancel).unwrap();
        let started = Instant::now();
        let text = message(group.all_reduce(&small_spec(1 << 20), started + SHORT, cancel));
        assert!(
            text.contains(&format!(
                "rank 1 (`{}`) sent nothing before the deadline of the all-reduce",
                addrs[1]
            )),
            "{text}"
        );
        assert!(
            started.elapsed() < SHORT + SLACK,
            "took {:?}",
            started.elapsed()
        );
        // The group is spent after a failure, and says so.
        let again = message(group.all_reduce(&small_spec(1024), Instant::now() + SHORT, cancel));
        assert!(again.contains("failed earlier"), "{again}");
        release.send(()).unwrap();
        idle.join().unwrap();
    });
}

#[test]
fn a_peer_that_dies_mid_collective_is_named_at_once() {
    let (listeners, addrs) = listeners(3);
    let deadline = Instant::now() + DEADLINE;
    let started = Instant::now();
    let results: Vec<_> = thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|rank| {
                let (listeners, addrs) = (&listeners, &addrs);
                scope.spawn(move || {
                    let cancel = CancelToken::new();
                    let spec = spec_for(rank, addrs, 1, Topology::Ring);
                    let mut group =
                        TcpGroup::establish(&spec, &listeners[rank], deadline, &cancel)?;
                    if rank == 2 {
                        // Rank 2 gives up after 300 ms: its connections close.
                        let quitter = cancel.clone();
                        thread::spawn(move || {
                            thread::sleep(Duration::from_millis(300));
                            quitter.cancel();
                        });
                    }
                    let long = CollectiveSpec {
                        min_seconds: 60.0,
                        max_iterations: 1_000_000,
                        ..small_spec(4 << 20)
                    };
                    group.all_reduce(&long, deadline, &cancel)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut results = results.into_iter();
    let rank0 = message(results.next().unwrap());
    let rank1 = message(results.next().unwrap());
    assert_eq!(
        results.next().unwrap().unwrap_err(),
        BackendError::Cancelled
    );
    // Rank 2's ring neighbours see it go (rank 1 sends to it, rank 0 receives from
    // it). Whichever notices first names rank 2; the other may see that one close in
    // turn, a secondary error the coordinator sorts out by time.
    let rank2 = format!("rank 2 (`{}`)", addrs[2]);
    assert!(
        rank0.contains(&rank2) || rank1.contains(&rank2),
        "{rank0}\n{rank1}"
    );
    for text in [&rank0, &rank1] {
        assert!(
            text.contains("closed the connection") || text.contains("failed during"),
            "{text}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn cancel_stops_a_running_collective_promptly() {
    let (listeners, addrs) = listeners(2);
    let cancel = CancelToken::new();
    let deadline = Instant::now() + DEADLINE;
    let canceller = cancel.clone();
    let cancelled_at = thread::spawn(move || {
        thread::sleep(Duration::from_millis(500));
        canceller.cancel();
        Instant::now()
    });
    let results: Vec<_> = thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let (listeners, addrs, cancel) = (&listeners, &addrs, &cancel);
                scope.spawn(move || {
                    let spec = spec_for(rank, addrs, 1, Topology::Ring);
                    let mut group = TcpGroup::establish(&spec, &listeners[rank], deadline, cancel)?;
                    let long = CollectiveSpec {
                        min_seconds: 60.0,
                        max_iterations: 1_000_000,
                        ..small_spec(8 << 20)
                    };
                    let result = group.all_reduce(&long, deadline, cancel);
                    Ok::<_, BackendError>((result, Instant::now()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let cancelled_at = cancelled_at.join().unwrap();
    for result in results {
        let (result, returned_at) = result.unwrap();
        assert_eq!(result.unwrap_err(), BackendError::Cancelled);
        let lag = returned_at.saturating_duration_since(cancelled_at);
        assert!(
            lag < Duration::from_secs(2),
            "returned {lag:?} after the cancel"
        );
    }
}

#[test]
fn cancel_stops_establishing_promptly() {
    let (listeners, addrs) = listeners(2);
    let cancel = CancelToken::new();
    let canceller = cancel.clone();
    thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        canceller.cancel();
    });
    let started = Instant::now();
    // Rank 1 never comes; only the cancel can end this before the 30 s deadline.
    let spec = spec_for(0, &addrs, 1, Topology::Ring);
    let result = TcpGroup::establish(&spec, &listeners[0], started + DEADLINE, &cancel);
    assert_eq!(result.unwrap_err(), BackendError::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_group_needs_two_ranks_and_a_rank_inside_it() {
    let (listeners, addrs) = listeners(1);
    let deadline = Instant::now() + SHORT;
    let alone = spec_for(0, &addrs, 1, Topology::Ring);
    assert!(matches!(
        TcpGroup::establish(&alone, &listeners[0], deadline, &CancelToken::new()),
        Err(BackendError::Unsupported(_))
    ));
    let outside = spec_for(5, &[addrs[0], addrs[0]], 1, Topology::Ring);
    let text = message(TcpGroup::establish(
        &outside,
        &listeners[0],
        deadline,
        &CancelToken::new(),
    ));
    assert!(
        text.contains("rank 5 is outside the group of 2 ranks"),
        "{text}"
    );
}

#[test]
fn connectivity_probe_tells_open_from_closed() {
    let responder = ProbeResponder::spawn(TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = closed_port();
    let targets = [responder.local_addr(), closed, plain.local_addr().unwrap()];
    let spec = ProbeSpec {
        count: 4,
        interval: Duration::from_millis(10),
        echo: true,
        ..ProbeSpec::default()
    };
    let results = probe_connectivity(&targets, &spec, &CancelToken::new()).unwrap();
    let [open, shut, no_responder] = results.try_into().unwrap();

    assert_eq!(
        (open.target, open.attempts, open.successes),
        (targets[0], 4, 4)
    );
    assert_eq!(open.success_rate(), 1.0);
    let connect = open.connect_rtt.unwrap();
    let echo = open.echo_rtt.unwrap();
    assert!(connect.min <= connect.avg && connect.avg <= connect.max);
    assert!(
        echo.min > Duration::ZERO && echo.max < Duration::from_secs(1),
        "{echo:?}"
    );
    assert_eq!(open.last_error, None);

    assert_eq!(
        (shut.attempts, shut.successes, shut.success_rate()),
        (4, 0, 0.0)
    );
    assert_eq!(shut.connect_rtt, None);
    let refused = shut.last_error.unwrap();
    assert!(matches!(refused, DataPlaneError::Connect(_)), "{refused:?}");
    assert!(with_causes(&refused).starts_with("connect: "));

    // A port that accepts but does not answer pings: reachable, but the echo fails
    // within the per-attempt timeout.
    assert_eq!(no_responder.successes, 0);
    let silent = no_responder.last_error.unwrap();
    assert!(with_causes(&silent).starts_with("echo: "), "{silent:?}");

    // tcping's own measure (connect only) counts that port as reachable.
    let connect_only = ProbeSpec {
        echo: false,
        ..spec
    };
    let results = probe_connectivity(&targets[2..], &connect_only, &CancelToken::new()).unwrap();
    assert_eq!(results[0].success_rate(), 1.0);
    assert_eq!(results[0].echo_rtt, None);
}

#[test]
fn a_cancelled_probe_is_an_error() {
    let cancel = CancelToken::new();
    cancel.cancel();
    let result = probe_connectivity(&[closed_port()], &ProbeSpec::default(), &cancel);
    assert_eq!(result.unwrap_err(), BackendError::Cancelled);
}
