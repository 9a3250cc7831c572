//! Heartbeats in one process: a node that stops heartbeating is named unresponsive and
//! the first error, recovers when it resumes; aborts and shutdowns reach every agent.

use std::time::Duration;

use gpuvet_control::{
    ClusterError, CoordinatorEvent, CoordinatorOptions, Diagnosis, Incident, IncidentKind,
    MemberEventKind, MemberState, Received, clock::unix_now_ms, diagnose,
};
use gpuvet_model::results::Lane;

use crate::{
    ANTI_HANG, coordinator, in_, is_member_event, join_all, quick_options, wait_for_event,
};

#[test]
fn an_agent_that_stops_heartbeating_is_named_first_and_its_waiting_peers_secondary() {
    let coordinator = coordinator(3, quick_options());
    let agents = join_all(&coordinator, 0..3);
    agents[1].set_phase("all_reduce_2 round 1 step 3");
    wait_for_event(
        &coordinator,
        |e| matches!(e, CoordinatorEvent::Phase { rank: 1, phase, .. } if phase.contains("step 3")),
    );

    // What SIGSTOP does to heartbeats, without stopping the test process.
    agents[1].suspend_heartbeats(true);
    let (event, _) = wait_for_event(&coordinator, |e| {
        is_member_event(e, 1, |k| matches!(k, MemberEventKind::Unresponsive { .. }))
    });
    let CoordinatorEvent::Member(hung) = event else {
        unreachable!()
    };
    let MemberEventKind::Unresponsive {
        last_seen_ms,
        silent_for_ms,
        last_phase,
    } = &hung.kind
    else {
        unreachable!()
    };
    assert_eq!(last_phase, "all_reduce_2 round 1 step 3");
    assert!(
        *silent_for_ms >= 1_500,
        "declared before the deadline: {hung:?}"
    );
    assert!(*last_seen_ms <= hung.time_ms);
    assert_eq!(
        coordinator.member(1).unwrap().state,
        MemberState::Unresponsive
    );
    assert!(
        hung.describe()
            .starts_with("rank 1 (node-1) is unresponsive: silent for"),
        "{}",
        hung.describe()
    );

    // Its peers gave up on the collective afterwards and reported timeouts.
    let now = unix_now_ms();
    let mut incidents: Vec<Incident> = vec![Incident::from_member_event(&hung).unwrap()];
    for rank in [0, 2] {
        incidents.push(Incident {
            rank,
            node: Some(format!("node-{rank}")),
            time_ms: now,
            kind: IncidentKind::TimedOut {
                waiting_on: Some(1),
            },
            detail: "all_reduce_2 timed out".to_owned(),
        });
    }
    let Diagnosis::FirstError {
        first,
        secondary,
        other_failures,
    } = diagnose(&incidents)
    else {
        panic!()
    };
    assert_eq!(
        (first.rank, first.kind.clone(), first.lane()),
        (1, IncidentKind::Unresponsive, Lane::Host)
    );
    assert_eq!(
        secondary.iter().map(|i| i.rank).collect::<Vec<_>>(),
        vec![0, 2]
    );
    assert!(other_failures.is_empty());

    agents[1].suspend_heartbeats(false);
    wait_for_event(&coordinator, |e| {
        is_member_event(e, 1, |k| matches!(k, MemberEventKind::Recovered { .. }))
    });
    assert_eq!(coordinator.member(1).unwrap().state, MemberState::Alive);
    // The agent never gave up on the coordinator meanwhile.
    assert!(agents[1].link_status().is_ok());
}

#[test]
fn an_abort_reaches_every_agent_after_the_commands_before_it() {
    let coordinator = coordinator(2, CoordinatorOptions::default());
    let agents = join_all(&coordinator, 0..2);
    let seq = coordinator.send(0, "first").unwrap();
    let abort = coordinator.abort("rank 1 crashed in all_reduce_2");
    assert_eq!(abort.sent_to, vec![0, 1]);
    let Some(Received::Command(command)) = agents[0].recv(in_(ANTI_HANG)).unwrap() else {
        panic!()
    };
    assert_eq!(command.seq, seq);
    for agent in &agents {
        let err = agent.recv(in_(ANTI_HANG)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the coordinator aborted the run: rank 1 crashed in all_reduce_2"
        );
        // And it stays that way.
        assert!(matches!(
            agent.recv(in_(ANTI_HANG)),
            Err(ClusterError::Aborted { .. })
        ));
        assert!(agent.report(None, "late").is_err());
    }
}

#[test]
fn a_coordinator_that_shuts_down_says_goodbye_and_agents_end_cleanly() {
    let coordinator = coordinator(2, CoordinatorOptions::default());
    let agents = join_all(&coordinator, 0..2);
    assert!(coordinator.wait_for_members(in_(ANTI_HANG)).is_complete());
    coordinator.shutdown("the run is over");
    for agent in &agents {
        assert_eq!(
            agent.recv(in_(ANTI_HANG)).unwrap(),
            Some(Received::Closed {
                reason: "the run is over".to_owned()
            })
        );
        let err = agent.recv(in_(ANTI_HANG)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the coordinator ended the session: the run is over"
        );
    }
    assert!(matches!(
        coordinator.send(0, "x"),
        Err(ClusterError::ShutDown)
    ));
    // Closing connections after a shutdown are no crash.
    std::thread::sleep(Duration::from_millis(100));
    while let Some(event) = coordinator.try_recv_event() {
        assert!(
            !matches!(event, CoordinatorEvent::Member(ref m) if matches!(m.kind, MemberEventKind::Crashed { .. })),
            "{event:?}"
        );
    }
}

#[test]
fn recv_without_messages_returns_none_at_its_deadline() {
    let coordinator = coordinator(1, CoordinatorOptions::default());
    let agents = join_all(&coordinator, [0]);
    assert_eq!(
        agents[0].recv(in_(Duration::from_millis(50))).unwrap(),
        None
    );
    assert!(agents[0].link_status().is_ok());
}

#[test]
fn heartbeats_bring_more_clock_samples_after_the_handshake() {
    let options = quick_options();
    let handshake_samples = options.clock_samples;
    let coordinator = coordinator(2, options);
    let agents = join_all(&coordinator, 0..2);
    assert_eq!(
        coordinator.clock_offset(1).unwrap().samples,
        handshake_samples
    );
    // A ping goes out with every tenth acknowledgement; wait for two of them.
    let until = in_(ANTI_HANG);
    let mut clock = coordinator.clock_offset(1).unwrap();
    while clock.samples < handshake_samples + 2 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        clock = coordinator.clock_offset(1).unwrap();
    }
    assert!(clock.samples >= handshake_samples + 2, "{clock:?}");
    // Same machine, same clock: the offset stays the measurement's noise.
    assert!(clock.offset_ns.abs() < 1_000_000_000, "{clock:?}");
    assert!(clock.round_trip_ns >= 0, "{clock:?}");
    drop(agents);
}

/// An agent built with `on_inbound` is told when each message, and the link's end,
/// arrives, and takes them with `try_recv`, in order, without waiting.
#[test]
fn on_inbound_tells_of_each_arrival_and_try_recv_takes_it_without_waiting() {
    use std::sync::mpsc;

    use gpuvet_control::{Agent, AgentOptions, Endpoint, OnInbound};

    use crate::{identity, token};

    let coordinator = coordinator(1, CoordinatorOptions::default());
    let (told, arrivals) = mpsc::channel();
    let agent = Agent::connect(
        &Endpoint::from(coordinator.local_addr()),
        identity(0, 1),
        &token(),
        AgentOptions {
            on_inbound: Some(OnInbound::new(move || {
                let _ = told.send(());
            })),
            ..AgentOptions::default()
        },
        in_(ANTI_HANG),
    )
    .unwrap();
    assert_eq!(agent.try_recv().unwrap(), None, "nothing came yet");

    let first = coordinator.send(0, "first").unwrap();
    let second = coordinator.send(0, "second").unwrap();
    let mut seqs = Vec::new();
    while seqs.len() < 2 {
        arrivals
            .recv_timeout(ANTI_HANG)
            .expect("told of an arrival");
        while let Some(received) = agent.try_recv().unwrap() {
            let Received::Command(command) = received else {
                panic!("{received:?}")
            };
            seqs.push(command.seq);
        }
    }
    assert_eq!(seqs, [first, second]);
    assert_eq!(agent.try_recv().unwrap(), None);

    coordinator.shutdown("the run is over");
    arrivals
        .recv_timeout(ANTI_HANG)
        .expect("told of the goodbye");
    let closed = loop {
        if let Some(received) = agent.try_recv().unwrap() {
            break received;
        }
        arrivals
            .recv_timeout(ANTI_HANG)
            .expect("told of the goodbye");
    };
    assert_eq!(
        closed,
        Received::Closed {
            reason: "the run is over".to_owned()
        }
    );
    // After the goodbye, every call says the session ended.
    assert!(matches!(
        agent.try_recv(),
        Err(ClusterError::SessionClosed { .. })
    ));
}
