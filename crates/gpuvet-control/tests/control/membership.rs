//! Joining, rosters, commands and reports, phases, leaving, and the rendezvous deadline.

use std::net::SocketAddr;
use std::time::Duration;

use gpuvet_control::{
    Agent, AgentOptions, ClusterError, Coordinator, CoordinatorEvent, CoordinatorOptions,
    Diagnosis, Endpoint, Incident, MemberEventKind, MemberState, Received, diagnose,
};
use gpuvet_model::results::Lane;
use serde_json::json;

use crate::{
    ANTI_HANG, JOB, coordinator, free_port, identity, in_, is_member_event, join, join_all, token,
    wait_for_event,
};

fn next_received(agent: &Agent) -> Received {
    agent
        .recv(in_(ANTI_HANG))
        .unwrap()
        .expect("a message before the anti-hang deadline")
}

#[test]
fn four_agents_join_exchange_commands_and_reports_and_leave_cleanly() {
    let coordinator = coordinator(4, CoordinatorOptions::default());
    let agents = join_all(&coordinator, 0..4);
    let membership = coordinator.wait_for_members(in_(ANTI_HANG));
    assert!(membership.is_complete(), "{membership:?}");
    assert_eq!(
        membership.joined.iter().map(|m| m.rank).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );

    for (agent, member) in agents.iter().zip(&membership.joined) {
        assert_eq!(agent.rank(), member.rank);
        assert_eq!(agent.nnodes(), 4);
        assert_eq!(member.node, format!("node-{}", member.rank));
        assert_eq!(
            member.info.parse::<serde_json::Value>().unwrap()["backend"],
            "cpu"
        );
        // An unspecified data-plane IP is replaced by the IP the agent connects from.
        let port = 40_000 + u16::try_from(member.rank).unwrap();
        assert_eq!(
            member.data_addr,
            Some(SocketAddr::from(([127, 0, 0, 1], port)))
        );
        // Same machine, same clock: the offset is the measurement's noise. The bound
        // only rules out nonsense such as a unit error.
        assert_eq!(agent.clock_offset(), member.clock);
        assert!(
            member.clock.offset_ns.abs() < 1_000_000_000,
            "{:?}",
            member.clock
        );
        assert_eq!(member.clock.samples, 4);
        assert!(member.clock.round_trip_ns >= 0);
        assert_eq!(coordinator.clock_offset(member.rank), Some(member.clock));
    }

    let roster = coordinator.send_roster();
    assert_eq!(roster.sent_to, vec![0, 1, 2, 3]);
    for agent in &agents {
        let Received::Roster(entries) = next_received(agent) else {
            panic!("expected a roster")
        };
        assert_eq!(entries.len(), 4);
        assert_eq!(
            entries[3].data_addr,
            Some(SocketAddr::from(([127, 0, 0, 1], 40_003)))
        );
    }

    let seq = coordinator
        .send(2, &json!({ "run_check": "gemm_flops", "round": 1 }))
        .unwrap();
    let Received::Command(command) = next_received(&agents[2]) else {
        panic!("expected a command")
    };
    assert_eq!(command.seq, seq);
    assert_eq!(
        command.parse::<serde_json::Value>().unwrap()["run_check"],
        "gemm_flops"
    );
    agents[2]
        .report(Some(seq), &json!({ "status": "passed", "tflops": 1.5 }))
        .unwrap();
    let (report, _) = wait_for_event(&coordinator, |e| {
        matches!(e, CoordinatorEvent::Report { .. })
    });
    let CoordinatorEvent::Report {
        rank,
        node,
        in_reply_to,
        body,
        ..
    } = report
    else {
        unreachable!()
    };
    assert_eq!((rank, node.as_str(), in_reply_to), (2, "node-2", Some(seq)));
    assert_eq!(
        body.parse::<serde_json::Value>().unwrap()["status"],
        "passed"
    );

    let broadcast = coordinator.broadcast("start").unwrap();
    assert_eq!(broadcast.sent_to, vec![0, 1, 2, 3]);
    assert!(broadcast.failed.is_empty());
    for agent in &agents {
        let Received::Command(command) = next_received(agent) else {
            panic!("expected a command")
        };
        assert_eq!(
            (command.seq, command.parse::<String>().unwrap()),
            (broadcast.seq, "start".to_owned())
        );
    }

    drop(agents);
    let mut left = Vec::new();
    while left.len() < 4 {
        let (event, before) =
            wait_for_event(&coordinator, |e| matches!(e, CoordinatorEvent::Member(_)));
        assert!(
            before
                .iter()
                .all(|e| matches!(e, CoordinatorEvent::Phase { .. })),
            "{before:#?}"
        );
        let CoordinatorEvent::Member(member) = event else {
            unreachable!()
        };
        assert!(
            matches!(member.kind, MemberEventKind::Left { .. }),
            "{member:?}"
        );
        left.push(member.rank);
    }
    left.sort_unstable();
    assert_eq!(left, vec![0, 1, 2, 3]);
    assert!(
        coordinator
            .members()
            .iter()
            .all(|m| m.state == MemberState::Left)
    );
    let err = coordinator.send(1, "late").unwrap_err();
    assert!(
        matches!(
            err,
            ClusterError::MemberGone {
                rank: 1,
                state: MemberState::Left
            }
        ),
        "{err}"
    );
    assert!(matches!(
        coordinator.send(9, "x").unwrap_err(),
        ClusterError::NoSuchMember { rank: 9 }
    ));
}

#[test]
fn phases_reach_the_coordinator_with_their_start_time() {
    let coordinator = coordinator(1, crate::quick_options());
    let agent = join(&coordinator, 0);
    let phases = agent.phase_handle();
    std::thread::spawn(move || phases.set("all_reduce_2 round 1 step 3"))
        .join()
        .unwrap();
    assert_eq!(agent.phase_handle().get(), "all_reduce_2 round 1 step 3");
    let (event, _) = wait_for_event(
        &coordinator,
        |e| matches!(e, CoordinatorEvent::Phase { phase, .. } if phase == "all_reduce_2 round 1 step 3"),
    );
    let CoordinatorEvent::Phase {
        rank,
        node,
        since_ms,
        ..
    } = event
    else {
        unreachable!()
    };
    assert_eq!((rank, node.as_str()), (0, "node-0"));
    let member = coordinator.member(0).unwrap();
    assert_eq!(member.phase, "all_reduce_2 round 1 step 3");
    assert_eq!(member.phase_since_ms, since_ms);
    assert!(since_ms <= member.last_seen_ms + 1_000, "{member:?}");
}

#[test]
fn a_node_that_never_joins_is_named_the_platforms_first_error_and_refused_later() {
    let coordinator = coordinator(3, CoordinatorOptions::default());
    let _agents = join_all(&coordinator, [0, 2]);
    let membership = coordinator.wait_for_members(in_(Duration::from_millis(300)));
    assert_eq!(membership.missing, vec![1]);
    assert!(!membership.is_complete());

    let (event, _) = wait_for_event(&coordinator, |e| {
        is_member_event(e, 1, |k| matches!(k, MemberEventKind::NeverJoined { .. }))
    });
    let CoordinatorEvent::Member(never) = event else {
        unreachable!()
    };
    assert_eq!(
        never.describe().split(" (waited").next(),
        Some("rank 1 never joined")
    );
    let incidents: Vec<Incident> = Incident::from_member_event(&never).into_iter().collect();
    let Diagnosis::FirstError { first, .. } = diagnose(&incidents) else {
        panic!()
    };
    assert_eq!((first.rank, first.lane()), (1, Lane::Platform));

    let endpoint = Endpoint::from(coordinator.local_addr());
    let late = Agent::connect(
        &endpoint,
        identity(1, 3),
        &token(),
        AgentOptions::default(),
        in_(ANTI_HANG),
    )
    .unwrap_err();
    assert!(
        late.to_string()
            .contains("rank `1` arrived after the rendezvous deadline"),
        "{late}"
    );
    // Asking again names the same missing rank without a second event.
    assert_eq!(
        coordinator.wait_for_members(in_(Duration::ZERO)).missing,
        vec![1]
    );
}

#[test]
fn an_agent_started_before_its_coordinator_keeps_trying_until_it_is_up() {
    let port = free_port();
    let endpoint = Endpoint {
        host: "localhost".to_owned(),
        port,
    };
    let agent = std::thread::spawn(move || {
        Agent::connect(
            &endpoint,
            identity(0, 1),
            &token(),
            AgentOptions::default(),
            in_(ANTI_HANG),
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let coordinator = Coordinator::bind(
        ("127.0.0.1", port),
        1,
        JOB,
        token(),
        CoordinatorOptions::default(),
    )
    .unwrap();
    let agent = agent.join().unwrap().unwrap();
    assert!(coordinator.wait_for_members(in_(ANTI_HANG)).is_complete());
    assert_eq!(agent.coordinator_addr().port(), port);
}

#[test]
fn nobody_listening_until_the_deadline_is_an_error_naming_the_endpoint() {
    let endpoint = Endpoint {
        host: "127.0.0.1".to_owned(),
        port: free_port(),
    };
    let options = AgentOptions {
        retry_delay: Duration::from_millis(20),
        ..AgentOptions::default()
    };
    let err = Agent::connect(
        &endpoint,
        identity(0, 1),
        &token(),
        options,
        in_(Duration::from_millis(300)),
    )
    .unwrap_err();
    let ClusterError::Unreachable { attempts, .. } = &err else {
        panic!("{err}")
    };
    assert!(*attempts >= 1);
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "could not join the coordinator at `{endpoint}` within"
        )),
        "{text}"
    );
    assert!(
        text.contains("connection refused") || text.contains("Connection refused"),
        "{text}"
    );
}
