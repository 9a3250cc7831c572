//! Every way a connection is refused, each with its reason, while the coordinator keeps
//! serving the others; and an agent that will not obey a coordinator without the token.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use gpuvet_control::auth::to_hex;
use gpuvet_control::protocol::{Message, read_message, write_message};
use gpuvet_control::{
    Agent, AgentIdentity, AgentOptions, ClockOffset, ClusterError, Coordinator, CoordinatorEvent,
    CoordinatorOptions, Endpoint, MemberEventKind, Refusal, Token,
};

use crate::{
    ANTI_HANG, JOB, coordinator, identity, in_, is_member_event, join, join_all, raw_join, token,
    wait_for_event,
};

fn connect_as(
    coordinator: &Coordinator,
    identity: AgentIdentity,
    token: &Token,
) -> Result<Agent, ClusterError> {
    let endpoint = Endpoint::from(coordinator.local_addr());
    Agent::connect(
        &endpoint,
        identity,
        token,
        AgentOptions::default(),
        in_(ANTI_HANG),
    )
}

fn next_refusal(coordinator: &Coordinator) -> gpuvet_control::RefusedPeer {
    let (event, _) = wait_for_event(coordinator, |e| matches!(e, CoordinatorEvent::Refused(_)));
    let CoordinatorEvent::Refused(refused) = event else {
        unreachable!()
    };
    refused
}

/// Reads what the coordinator says to a client that misbehaved: its refusal.
fn refusal_sent_to(stream: &mut TcpStream) -> String {
    loop {
        match read_message(stream, Some(in_(ANTI_HANG))).unwrap() {
            Message::Refused { reason } => return reason,
            Message::Challenge { .. } => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn a_wrong_token_is_refused_while_the_others_join() {
    let coordinator = coordinator(3, CoordinatorOptions::default());
    let stray = std::thread::spawn({
        let endpoint = Endpoint::from(coordinator.local_addr());
        move || {
            let wrong = Token::new("not the group's secret").unwrap();
            Agent::connect(
                &endpoint,
                identity(1, 3),
                &wrong,
                AgentOptions::default(),
                in_(ANTI_HANG),
            )
        }
    });
    let _agents = join_all(&coordinator, 0..3);
    let err = stray.join().unwrap().unwrap_err();
    // Refused at once rather than retried until the deadline.
    let ClusterError::Refused { reason } = &err else {
        panic!("{err}")
    };
    assert!(
        reason.contains("authentication failed") && reason.contains("`GPUVET_TOKEN`"),
        "{reason}"
    );
    assert!(coordinator.wait_for_members(in_(ANTI_HANG)).is_complete());

    let refused = next_refusal(&coordinator);
    assert_eq!(refused.refusal, Refusal::BadToken);
    // It claimed rank 1 (node-1), but without the token that proves nothing: it is
    // named by its address, and the real rank 1 is not blamed.
    assert_eq!((refused.rank, refused.node.as_deref()), (None, None));
    let line = refused.describe();
    assert!(line.starts_with("refused 127.0.0.1:"), "{line}");
    assert!(
        !line.contains("rank 1") && !line.contains("node-1"),
        "{line}"
    );
}

#[test]
fn a_wrong_job_is_refused_naming_both_jobs() {
    let coordinator = coordinator(1, CoordinatorOptions::default());
    let other_job = AgentIdentity {
        job_id: "job-7".to_owned(),
        ..identity(0, 1)
    };
    let err = connect_as(&coordinator, other_job, &token())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "the coordinator refused this agent: wrong job: the agent belongs to job `job-7`, this coordinator runs job `job-42`"
    );
    assert_eq!(
        next_refusal(&coordinator).refusal,
        Refusal::WrongJob {
            expected: JOB.to_owned(),
            got: "job-7".to_owned()
        }
    );
    let _agent = join(&coordinator, 0);
    assert!(coordinator.wait_for_members(in_(ANTI_HANG)).is_complete());
}

#[test]
fn a_second_agent_with_the_same_rank_is_refused() {
    let coordinator = coordinator(2, CoordinatorOptions::default());
    let _first = join(&coordinator, 0);
    let impostor = AgentIdentity {
        node: "node-x".to_owned(),
        ..identity(0, 2)
    };
    let err = connect_as(&coordinator, impostor, &token())
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("rank `0` is already taken by node `node-0`; every node needs its own rank"),
        "{err}"
    );
    let refused = next_refusal(&coordinator);
    assert_eq!(
        refused.refusal,
        Refusal::DuplicateRank {
            rank: 0,
            holder: "node-0".to_owned()
        }
    );
    assert_eq!(refused.node.as_deref(), Some("node-x"));
    let _second = join(&coordinator, 1);
    assert!(coordinator.wait_for_members(in_(ANTI_HANG)).is_complete());
}

#[test]
fn an_out_of_range_rank_and_a_different_group_size_are_refused() {
    let coordinator = coordinator(2, CoordinatorOptions::default());
    let err = connect_as(&coordinator, identity(5, 2), &token())
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("rank `5` is out of range for a group of `2` node(s); ranks run from 0 to 1"),
        "{err}"
    );
    assert_eq!(
        next_refusal(&coordinator).refusal,
        Refusal::RankOutOfRange { rank: 5, nnodes: 2 }
    );

    let err = connect_as(&coordinator, identity(1, 3), &token())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "group size mismatch: the agent was told `3` node(s), the coordinator expects `2`"
        ),
        "{err}"
    );
    assert_eq!(
        next_refusal(&coordinator).refusal,
        Refusal::GroupSizeMismatch { theirs: 3, ours: 2 }
    );
}

#[test]
fn garbage_and_oversized_frames_are_refused_and_serving_goes_on() {
    let coordinator = coordinator(1, CoordinatorOptions::default());

    let mut http = TcpStream::connect(coordinator.local_addr()).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let reason = refusal_sent_to(&mut http);
    assert!(
        reason.contains("the first bytes `GET ` look like text: not a gpuvet agent?"),
        "{reason}"
    );
    assert!(matches!(
        next_refusal(&coordinator).refusal,
        Refusal::BadFrame { .. }
    ));

    let mut oversized = TcpStream::connect(coordinator.local_addr()).unwrap();
    oversized.write_all(&(20u32 << 20).to_be_bytes()).unwrap();
    let reason = refusal_sent_to(&mut oversized);
    assert!(
        reason.contains("frame of 20971520 bytes exceeds the 65536-byte limit"),
        "{reason}"
    );
    let _ = next_refusal(&coordinator);

    let mut junk = TcpStream::connect(coordinator.local_addr()).unwrap();
    junk.write_all(&5u32.to_be_bytes()).unwrap();
    junk.write_all(b"hello").unwrap();
    let reason = refusal_sent_to(&mut junk);
    assert!(
        reason.starts_with("bad frame: not a gpuvet message:"),
        "{reason}"
    );
    let _ = next_refusal(&coordinator);

    let mut deep = TcpStream::connect(coordinator.local_addr()).unwrap();
    let nested = "[".repeat(60_000);
    write_frame_bytes(&mut deep, nested.as_bytes());
    assert!(refusal_sent_to(&mut deep).starts_with("bad frame:"));
    let _ = next_refusal(&coordinator);

    let mut wrong_message = TcpStream::connect(coordinator.local_addr()).unwrap();
    write_message(
        &mut wrong_message,
        &Message::Bye {
            reason: "hi".into(),
        },
    )
    .unwrap();
    assert_eq!(
        refusal_sent_to(&mut wrong_message),
        "bad frame: expected a `hello`, got `bye`"
    );
    let _ = next_refusal(&coordinator);

    let _agent = join(&coordinator, 0);
    assert!(coordinator.wait_for_members(in_(ANTI_HANG)).is_complete());
}

fn write_frame_bytes(stream: &mut TcpStream, payload: &[u8]) {
    stream
        .write_all(&u32::try_from(payload.len()).unwrap().to_be_bytes())
        .unwrap();
    stream.write_all(payload).unwrap();
}

#[test]
fn a_member_that_sends_an_oversized_frame_after_joining_is_dropped_as_crashed() {
    let coordinator = coordinator(2, CoordinatorOptions::default());
    let mut raw = raw_join(coordinator.local_addr(), 1, 2);
    raw.write_all(&(64u32 << 20).to_be_bytes()).unwrap();
    let (event, _) = wait_for_event(&coordinator, |e| {
        is_member_event(e, 1, |k| matches!(k, MemberEventKind::Crashed { .. }))
    });
    let CoordinatorEvent::Member(crashed) = event else {
        unreachable!()
    };
    let MemberEventKind::Crashed { detail, .. } = &crashed.kind else {
        unreachable!()
    };
    assert!(
        detail.contains("frame of 67108864 bytes exceeds the 16777216-byte limit"),
        "{detail}"
    );
    let _agent = join(&coordinator, 0);
}

#[test]
fn a_client_that_says_nothing_times_out_of_the_handshake_without_blocking_others() {
    let options = CoordinatorOptions {
        handshake_timeout: Duration::from_secs(1),
        ..CoordinatorOptions::default()
    };
    let coordinator = coordinator(1, options);
    let mut silent = TcpStream::connect(coordinator.local_addr()).unwrap();
    // Joins while the silent client still holds its handshake open.
    let _agent = join(&coordinator, 0);
    let refused = next_refusal(&coordinator);
    assert_eq!(
        refused.refusal,
        Refusal::HandshakeTimeout { waited_ms: 1_000 }
    );
    assert_eq!(
        refused.refusal.to_string(),
        "handshake timed out: the client said nothing valid within 1.0s"
    );
    assert!(refusal_sent_to(&mut silent).starts_with("handshake timed out"));
}

#[test]
fn a_different_protocol_version_is_refused_with_both_versions() {
    let coordinator = coordinator(1, CoordinatorOptions::default());
    let mut client = TcpStream::connect(coordinator.local_addr()).unwrap();
    let Message::Challenge {
        protocol_version, ..
    } = read_message(&mut client, Some(in_(ANTI_HANG))).unwrap()
    else {
        panic!("no challenge")
    };
    assert_eq!(protocol_version, gpuvet_control::PROTOCOL_VERSION);
    // A future hello may look different; only its type and version must be readable.
    let future_hello = br#"{"type":"hello","protocol_version":99,"shape":"unknown"}"#;
    write_frame_bytes(&mut client, future_hello);
    let reason = refusal_sent_to(&mut client);
    assert!(
        reason.starts_with(&format!(
            "protocol version mismatch: the coordinator speaks `{}`, the agent `99`",
            gpuvet_control::PROTOCOL_VERSION
        )),
        "{reason}"
    );
    assert_eq!(
        next_refusal(&coordinator).refusal,
        Refusal::VersionMismatch {
            ours: gpuvet_control::PROTOCOL_VERSION,
            theirs: 99
        }
    );
}

/// A fake coordinator that challenges with `version`, then answers the hello with
/// `reply`.
fn fake_coordinator(version: u32, reply: Message) -> Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = Endpoint::from(listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let challenge = Message::Challenge {
            protocol_version: version,
            nonce: to_hex(&[3u8; 32]),
            loopback_only: false,
        };
        write_message(&mut stream, &challenge).unwrap();
        let _hello = read_message(&mut stream, Some(in_(ANTI_HANG))).unwrap();
        write_message(&mut stream, &reply).unwrap();
        // Hold the connection until the agent has read the reply and hung up.
        let _ = read_message(&mut stream, Some(in_(ANTI_HANG)));
    });
    endpoint
}

#[test]
fn an_agent_refuses_a_coordinator_that_cannot_prove_the_token() {
    let welcome = Message::Welcome(gpuvet_control::protocol::Welcome {
        nnodes: 1,
        heartbeat_interval_ms: 100,
        clock: ClockOffset::ZERO,
        proof: to_hex(&[0u8; 32]),
    });
    let endpoint = fake_coordinator(gpuvet_control::PROTOCOL_VERSION, welcome);
    let err = Agent::connect(
        &endpoint,
        identity(0, 1),
        &token(),
        AgentOptions::default(),
        in_(ANTI_HANG),
    )
    .unwrap_err();
    assert!(
        matches!(err, ClusterError::CoordinatorAuthFailed { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("could not prove that it holds the token"),
        "{err}"
    );
}

#[test]
fn an_agent_names_a_coordinator_of_another_protocol_version() {
    let endpoint = fake_coordinator(
        99,
        Message::Refused {
            reason: "protocol version mismatch".into(),
        },
    );
    let err = Agent::connect(
        &endpoint,
        identity(0, 1),
        &token(),
        AgentOptions::default(),
        in_(ANTI_HANG),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "protocol version mismatch: this agent speaks `{}`, the coordinator `99`; run the same gpuvet version on every node",
            gpuvet_control::PROTOCOL_VERSION
        )
    );
}

/// Joins as rank 0 of 1 with `connect_with`: what the coordinator said, and the agent.
fn join_hearing_scope(endpoint: &Endpoint) -> (gpuvet_control::CoordinatorScope, Agent) {
    let heard = std::sync::Mutex::new(None);
    let agent = Agent::connect_with(
        endpoint,
        Box::new(|scope| {
            *heard.lock().unwrap() = Some(scope);
            Ok(identity(0, 1))
        }),
        &token(),
        AgentOptions::default(),
        in_(ANTI_HANG),
    )
    .unwrap();
    let scope = heard.lock().unwrap().expect("identify was called");
    (scope, agent)
}

#[test]
fn a_coordinator_on_loopback_only_says_so_before_the_agent_introduces_itself() {
    let loopback = coordinator(1, CoordinatorOptions::default());
    let (scope, agent) = join_hearing_scope(&Endpoint::from(loopback.local_addr()));
    assert!(scope.loopback_only);
    assert_eq!(agent.rank(), 0);
    drop(agent);

    // On every interface, other hosts' agents may join: reached over loopback or not,
    // it does not say so.
    let everywhere = Coordinator::bind(
        ("0.0.0.0", 0),
        1,
        JOB,
        token(),
        CoordinatorOptions::default(),
    )
    .unwrap();
    let port = everywhere.local_addr().port();
    let (scope, agent) = join_hearing_scope(&Endpoint::from(std::net::SocketAddr::from((
        [127, 0, 0, 1],
        port,
    ))));
    assert!(!scope.loopback_only);
    drop(agent);
}

#[test]
fn an_agent_that_cannot_say_who_it_is_gives_up_at_once_with_the_cause() {
    let coordinator = coordinator(1, CoordinatorOptions::default());
    let endpoint = Endpoint::from(coordinator.local_addr());
    let calls = std::sync::atomic::AtomicU32::new(0);
    let err = Agent::connect_with(
        &endpoint,
        Box::new(|_| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err("cannot listen for the data plane on `127.0.0.1`".into())
        }),
        &token(),
        AgentOptions::default(),
        in_(ANTI_HANG),
    )
    .unwrap_err();
    assert!(matches!(err, ClusterError::Identity { .. }), "{err:?}");
    assert_eq!(
        gpuvet_model::diagnostics::with_causes(&err),
        "cannot introduce this agent to the coordinator: cannot listen for the data plane on `127.0.0.1`"
    );
    // Given up at once: a retry would have ended, at the deadline, as `Unreachable`.
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}
