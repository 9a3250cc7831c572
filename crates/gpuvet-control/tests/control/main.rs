//! The control plane over real sockets on loopback, and real processes where a crash
//! or a stop must be real. One test binary, so the suite links once.
//!
//! Every wait has a generous upper bound that only guards against hangs; nothing here
//! asserts how fast anything is.

mod handshake;
mod liveness;
mod membership;
mod processes;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub use gpuvet_testkit::free_port;

use gpuvet_control::auth::{agent_proof, from_hex, random_nonce, to_hex};
use gpuvet_control::protocol::{Hello, Message, read_message, write_message};
use gpuvet_control::{
    Agent, AgentIdentity, AgentOptions, Body, Coordinator, CoordinatorEvent, CoordinatorOptions,
    Endpoint, MemberEventKind, Token,
};

pub const JOB: &str = "job-42";
pub const SECRET: &str = "correct horse battery staple";

/// Far enough out that only a hang reaches it.
pub const ANTI_HANG: Duration = Duration::from_secs(20);

pub fn token() -> Token {
    Token::new(SECRET).unwrap()
}

pub fn in_(duration: Duration) -> Instant {
    Instant::now() + duration
}

/// Quick heartbeats and a short deadline, for tests that wait for a node to be named.
pub fn quick_options() -> CoordinatorOptions {
    CoordinatorOptions {
        handshake_timeout: Duration::from_secs(5),
        heartbeat_interval: Duration::from_millis(100),
        heartbeat_deadline: Duration::from_millis(1_500),
        ..CoordinatorOptions::default()
    }
}

pub fn coordinator(nnodes: u32, options: CoordinatorOptions) -> Coordinator {
    Coordinator::bind("127.0.0.1:0", nnodes, JOB, token(), options).unwrap()
}

pub fn identity(rank: u32, nnodes: u32) -> AgentIdentity {
    AgentIdentity {
        job_id: JOB.to_owned(),
        rank,
        nnodes,
        node: format!("node-{rank}"),
        data_addr: Some(SocketAddr::from((
            [0, 0, 0, 0],
            40_000 + u16::try_from(rank).unwrap(),
        ))),
        info: Body::to(&serde_json::json!({ "backend": "cpu", "devices": 1 })).unwrap(),
    }
}

pub fn join(coordinator: &Coordinator, rank: u32) -> Agent {
    let endpoint = Endpoint::from(coordinator.local_addr());
    Agent::connect(
        &endpoint,
        identity(rank, coordinator.expected_nodes()),
        &token(),
        AgentOptions::default(),
        in_(ANTI_HANG),
    )
    .unwrap()
}

/// Joins `ranks` at once, each from its own thread.
pub fn join_all(coordinator: &Coordinator, ranks: impl IntoIterator<Item = u32>) -> Vec<Agent> {
    let endpoint = Endpoint::from(coordinator.local_addr());
    let nnodes = coordinator.expected_nodes();
    let threads: Vec<_> = ranks
        .into_iter()
        .map(|rank| {
            let endpoint = endpoint.clone();
            std::thread::spawn(move || {
                Agent::connect(
                    &endpoint,
                    identity(rank, nnodes),
                    &token(),
                    AgentOptions::default(),
                    in_(ANTI_HANG),
                )
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|thread| thread.join().unwrap().unwrap())
        .collect()
}

/// Reads events until one matches; returns it with every event seen before it.
pub fn wait_for_event(
    coordinator: &Coordinator,
    mut matches: impl FnMut(&CoordinatorEvent) -> bool,
) -> (CoordinatorEvent, Vec<CoordinatorEvent>) {
    let deadline = in_(ANTI_HANG);
    let mut seen = Vec::new();
    while let Some(event) = coordinator.recv_event(deadline) {
        if matches(&event) {
            return (event, seen);
        }
        seen.push(event);
    }
    panic!("no matching event within {ANTI_HANG:?}; saw {seen:#?}");
}

pub fn is_member_event(
    event: &CoordinatorEvent,
    rank: u32,
    kind: fn(&MemberEventKind) -> bool,
) -> bool {
    matches!(event, CoordinatorEvent::Member(member) if member.rank == rank && kind(&member.kind))
}

/// A hand-made client that speaks the protocol by itself, to misbehave after joining.
pub fn raw_join(addr: SocketAddr, rank: u32, nnodes: u32) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    let deadline = Some(in_(ANTI_HANG));
    let Message::Challenge { nonce, .. } = read_message(&mut stream, deadline).unwrap() else {
        panic!("no challenge")
    };
    let nonce = from_hex(&nonce).unwrap();
    let hello = Hello {
        protocol_version: gpuvet_control::PROTOCOL_VERSION,
        job_id: JOB.to_owned(),
        rank,
        nnodes,
        node: format!("raw-{rank}"),
        data_addr: None,
        gpuvet_version: "test".to_owned(),
        info: Body::null(),
        agent_nonce: to_hex(&random_nonce().unwrap()),
        proof: to_hex(&agent_proof(&token(), &nonce, JOB, rank)),
    };
    write_message(&mut stream, &Message::Hello(hello)).unwrap();
    loop {
        match read_message(&mut stream, deadline).unwrap() {
            Message::Ping { seq, t0_ns } => {
                write_message(
                    &mut stream,
                    &Message::Pong {
                        seq,
                        t0_ns,
                        t1_ns: t0_ns,
                        t2_ns: t0_ns,
                    },
                )
                .unwrap();
            }
            Message::Welcome(_) => return stream,
            other => panic!("unexpected {other:?}"),
        }
    }
}
