//! A whole group in one process: the coordinator and every agent as threads, over an
//! in-memory network, each node's data plane on a simulated [`Fabric`].
//!
//! The coordinator ([`run_group`]), the agents ([`serve`]) and the judging are the code
//! a real group runs, handshake, heartbeats and liveness included; only the transport
//! (`gpuvet_control::transport::MemoryNetwork`) and the data plane's network are
//! swapped. Whole-node faults are played on the network: a hung node is frozen (it
//! goes silent, as a stopped process does), a crashed one is cut (its connections
//! close without a word). Drills and the scale benchmark run groups this way.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use gpuvet_control::transport::MemoryNetwork;
use gpuvet_control::{
    Agent, AgentIdentity, AgentLinks, AgentOptions, Body, Coordinator, CoordinatorOptions,
    Endpoint, Token,
};
use gpuvet_core::config::{NodeFault, NodeFaultKind};
use gpuvet_core::results::RunReport;

use crate::agent::{DataPlane, NodeSetup, Turns, serve};
use crate::conversation::GroupEvent;
use crate::coordinator::{GroupPlan, run_group, wait_for_goodbyes};
use crate::error::GroupError;
use crate::fabric::Fabric;

/// The port the coordinator listens on, on rank 0's address.
const COORDINATOR_PORT: u16 = 29_400;
/// How long after the verdict the coordinator waits for goodbyes, as `--local-nodes`
/// does.
const AFTER_VERDICT_WAIT: Duration = Duration::from_secs(1);
/// How long agents get to finish once the coordinator has shut down; one still busy
/// then (in a scripted device hang) is left behind, as a hung process would be.
const AGENT_EXIT_WAIT: Duration = Duration::from_secs(5);
/// Each agent thread's stack: the agent's own work is shallow.
const AGENT_STACK_BYTES: usize = 512 << 10;
/// Nodes running a local check at once. A sim check mostly waits (its scripted work
/// takes 2 ms a device), so this keeps two cores busy while the threads alive stay in
/// the hundreds, not one per device of every node (32,768 at 4,096 nodes, past the
/// kernel's default limit on memory maps).
const LOCAL_CHECKS_AT_ONCE: usize = 64;

/// A group to run in this process.
#[derive(Debug)]
pub struct SimulatedGroup {
    pub plan: GroupPlan,
    /// Every node's setup, in rank order; `attempt.node` names the node.
    pub nodes: Vec<NodeSetup>,
    /// The network between them.
    pub fabric: Arc<Fabric>,
    /// Whole-node faults, by node name.
    pub node_faults: BTreeMap<String, NodeFault>,
    /// Rails per node on the simulated network.
    pub rails: usize,
}

/// What a group in one process did.
#[derive(Debug)]
pub struct SimulatedRun {
    /// The coordinator's report: the group's verdict.
    pub report: RunReport,
    /// The node faults that were played, by node name, in the order they struck.
    pub played: Vec<(String, NodeFault)>,
    /// Agents that got the verdict.
    pub verdicts: usize,
    /// Agents still running when the run gave up waiting on them.
    pub left_behind: usize,
}

/// The address of rank `rank` on the in-memory network: 10.0.0.1 onwards.
pub fn node_ip(rank: usize) -> IpAddr {
    let n = rank as u32 + 1;
    IpAddr::V4(Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8))
}

/// The node names of `nodes`, with their addresses, for [`Fabric::new`].
pub fn node_ips(nodes: &[NodeSetup]) -> BTreeMap<String, IpAddr> {
    nodes
        .iter()
        .enumerate()
        .map(|(rank, node)| (node.attempt.node.clone(), node_ip(rank)))
        .collect()
}

/// Memory maps one node of a group in one process takes: its agent's thread maps a
/// stack and a signal stack, each with a guard page; and a margin for its share of
/// the reused check threads and of the handshakes in flight. (One thread reads every
/// member and one keeps every agent's link.) Measured at 4,096 nodes: about 18,000
/// maps in all.
const MAPS_PER_NODE: u64 = 8;
/// The maps the rest of the process takes (libraries, heap, the local checks' turns).
const MAPS_BESIDE_NODES: u64 = 4096;

/// Refuses a group this kernel cannot give the threads of: past `vm.max_map_count`,
/// a thread's start aborts the whole process.
fn check_map_limit(nodes: usize) -> Result<(), GroupError> {
    let allowed = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    let needed = nodes as u64 * MAPS_PER_NODE + MAPS_BESIDE_NODES;
    match allowed {
        Some(allowed) if needed > allowed => Err(GroupError::TooManyMaps {
            nodes,
            needed,
            allowed,
        }),
        _ => Ok(()),
    }
}

/// `prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS, ...)`, Linux 6.16 on.
const PR_FUTEX_HASH: libc::c_int = 78;
const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
/// Buckets for this process's futexes: several per thread of a 4,096-node group.
const FUTEX_HASH_SLOTS: libc::c_ulong = 1 << 16;

/// A group in one process blocks some five threads per node on futexes. Linux (6.16
/// on) gives a process a private futex hash sized by its CPUs (16 buckets on a 2-core
/// machine), so every wake-up walked a chain of thousands of waiters: at 1,024 nodes
/// `futex_wake` was a third of all CPU. This asks for 65,536 buckets, once per
/// process; a kernel without the call keeps its hash, only slower.
fn widen_futex_hash() {
    static WIDENED: std::sync::Once = std::sync::Once::new();
    WIDENED.call_once(|| {
        // SAFETY: prctl(2) with integer arguments only; failure changes nothing.
        let _ = unsafe {
            libc::prctl(
                PR_FUTEX_HASH,
                PR_FUTEX_HASH_SET_SLOTS,
                FUTEX_HASH_SLOTS,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
    });
}

/// Runs the group: rank 0's host runs the coordinator, every node an agent thread.
/// Returns once the coordinator has its verdict and every agent has ended (or was
/// left behind after [`AGENT_EXIT_WAIT`]).
pub fn run_simulated(
    group: &SimulatedGroup,
    observe: &mut dyn FnMut(GroupEvent<'_>),
) -> Result<SimulatedRun, GroupError> {
    let n = group.nodes.len();
    check_map_limit(n)?;
    widen_futex_hash();
    let network = MemoryNetwork::new();
    let token = Token::random().map_err(|source| GroupError::Coordinator { source })?;
    let coordinator_ip = node_ip(0);
    let coordinator = Coordinator::bind(
        SocketAddr::new(coordinator_ip, COORDINATOR_PORT),
        u32::try_from(n).unwrap_or(u32::MAX),
        &group.plan.attempt.job_id,
        token.clone(),
        CoordinatorOptions {
            transport: Arc::new(network.host(coordinator_ip)),
            ..CoordinatorOptions::default()
        },
    )
    .map_err(|source| GroupError::Coordinator { source })?;
    let endpoint = Endpoint {
        host: coordinator_ip.to_string(),
        port: COORDINATOR_PORT,
    };
    let deadline =
        Instant::now() + group.plan.rendezvous_timeout + group.plan.timeout + AGENT_EXIT_WAIT * 6;

    // One thread keeps every agent's link, as one reads every member on the
    // coordinator's side.
    let links =
        AgentLinks::start(&network.host(coordinator_ip)).map_err(|source| GroupError::Io {
            what: "cannot start the agents' link thread".to_owned(),
            source,
        })?;
    let (finished_tx, finished) = mpsc::channel::<bool>();
    let turns = Arc::new(Turns::new(LOCAL_CHECKS_AT_ONCE));
    for (rank, setup) in group.nodes.iter().enumerate() {
        let member = Member {
            rank,
            nnodes: n,
            setup: NodeSetup {
                turns: Some(Arc::clone(&turns)),
                ..setup.clone()
            },
            plane: DataPlane::simulated(Arc::clone(&group.fabric), node_ip(rank), group.rails),
            network: network.clone(),
            links: links.clone(),
            endpoint: endpoint.clone(),
            token: token.clone(),
            deadline,
        };
        let finished = finished_tx.clone();
        std::thread::Builder::new()
            .name(format!("sim-agent-{rank}"))
            .stack_size(AGENT_STACK_BYTES)
            .spawn(move || {
                let _ = finished.send(member.join_and_serve());
            })
            .map_err(|source| GroupError::Io {
                what: format!("cannot start the agent thread of rank {rank}"),
                source,
            })?;
    }
    drop(finished_tx);

    let ranks: BTreeMap<&str, usize> = group
        .nodes
        .iter()
        .enumerate()
        .map(|(rank, node)| (node.attempt.node.as_str(), rank))
        .collect();
    let mut played = Vec::new();
    let mut frozen = Vec::new();
    let report = run_group(&coordinator, &group.plan, &mut |event| {
        if let GroupEvent::CheckStarted { name, .. } = event {
            for (node, fault) in &group.node_faults {
                let Some(&rank) = ranks.get(node.as_str()) else {
                    continue;
                };
                if fault.check != name {
                    continue;
                }
                match fault.fault {
                    NodeFaultKind::Hang => {
                        network.freeze(node_ip(rank));
                        frozen.push(rank);
                    }
                    NodeFaultKind::Crash => network.cut(node_ip(rank)),
                }
                played.push((node.clone(), *fault));
            }
        }
        observe(event);
    });
    wait_for_goodbyes(&coordinator, Instant::now() + AFTER_VERDICT_WAIT);
    // A frozen node is then gone for good, as the stopped agent `--local-nodes` kills.
    for rank in frozen {
        network.cut(node_ip(rank));
    }
    coordinator.shutdown("the run is over");

    let (mut verdicts, mut ended) = (0, 0);
    let wait_until = Instant::now() + AGENT_EXIT_WAIT;
    while ended < n {
        match finished.recv_timeout(wait_until.saturating_duration_since(Instant::now())) {
            Ok(got_verdict) => {
                ended += 1;
                verdicts += usize::from(got_verdict);
            }
            Err(_) => break,
        }
    }
    Ok(SimulatedRun {
        report,
        played,
        verdicts,
        left_behind: n - ended,
    })
}

/// One node's agent, on its own thread.
struct Member {
    rank: usize,
    nnodes: usize,
    setup: NodeSetup,
    plane: DataPlane,
    network: MemoryNetwork,
    links: AgentLinks,
    endpoint: Endpoint,
    token: Token,
    deadline: Instant,
}

impl Member {
    /// Joins, serves until the verdict, leaves; says whether the verdict came.
    fn join_and_serve(self) -> bool {
        let ip = node_ip(self.rank);
        let info = match self
            .plane
            .node_info(&*self.setup.backend, format!("simulated-host-{ip}"))
        {
            Ok(info) => info,
            Err(_) => return false,
        };
        let identity = AgentIdentity {
            job_id: self.setup.attempt.job_id.clone(),
            rank: u32::try_from(self.rank).unwrap_or(u32::MAX),
            nnodes: u32::try_from(self.nnodes).unwrap_or(u32::MAX),
            node: self.setup.attempt.node.clone(),
            data_addr: self.plane.addr().ok(),
            info: Body::to(&info).unwrap_or_default(),
        };
        let options = AgentOptions {
            transport: Arc::new(self.network.host(ip)),
            links: Some(self.links),
            ..AgentOptions::default()
        };
        let Ok(agent) = Agent::connect(
            &self.endpoint,
            identity,
            &self.token,
            options,
            self.deadline,
        ) else {
            return false;
        };
        let verdict = serve(&agent, &self.setup, &self.plane, self.deadline);
        agent.leave("the run is over");
        verdict.is_ok()
    }
}

#[cfg(test)]
mod tests;
