//! A whole group in one process: the coordinator and every agent on a few threads, over an
//! in-memory network, each node's data plane on a simulated [`Fabric`].
//!
//! The coordinator ([`run_group`]), the agents (`answer`, the step of [`crate::serve`]) and
//! the judging are the code a real group runs, handshake, heartbeats and liveness
//! included; only the transport (`gpuvet_control::transport::MemoryNetwork`) and the
//! data plane's network are swapped. Where a real agent waits for its next message
//! on a thread of its own, here a few workers serve every agent as its messages come
//! ([`gpuvet_control::OnInbound`]): thousands of threads that each sleep between
//! messages cost more in wake-ups, stacks, starts and exits than the agents' work.
//!
//! Whole-node faults are played on the network: a hung node is frozen (it
//! goes silent, as a stopped process does), a crashed one is cut (its connections
//! close without a word). Drills and the scale benchmark run groups this way.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use gpuvet_control::transport::MemoryNetwork;
use gpuvet_control::{
    Agent, AgentIdentity, AgentLinks, AgentOptions, Body, Coordinator, CoordinatorOptions,
    Endpoint, OnInbound, Token,
};
use gpuvet_model::config::{NodeFault, NodeFaultKind};
use gpuvet_model::results::RunReport;

use crate::agent::{DataPlane, NodeSetup, answer};
use crate::conversation::GroupEvent;
use crate::coordinator::{GroupPlan, run_group, wait_for_goodbyes};
use crate::error::GroupError;
use crate::fabric::Fabric;
use turn::Turn;

/// The port the coordinator listens on, on rank 0's address.
const COORDINATOR_PORT: u16 = 29_400;
/// How long after the verdict the coordinator waits for goodbyes, as `--local-nodes`
/// does.
const AFTER_VERDICT_WAIT: Duration = Duration::from_secs(1);
/// How long agents get to finish once the coordinator has shut down; one still busy
/// then (in a scripted device hang) is left behind, as a hung process would be.
const AGENT_EXIT_WAIT: Duration = Duration::from_secs(5);
/// Threads that serve every agent of the group, a message at a time. One is taken for
/// the whole of a join (the handshake's round trips) or of a local check (a sim check
/// mostly waits: its scripted work takes 2 ms a device), so this many run at once:
/// enough to keep two cores busy, while the threads alive stay in the hundreds, not
/// one per node, nor one per device of every node (32,768 at 4,096 nodes, past the
/// kernel's default limit on memory maps).
const WORKERS: usize = 64;

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

/// Runs the group: rank 0's host runs the coordinator, and 64 threads serve every
/// node's agent. Returns once the coordinator has its verdict and every agent has
/// ended (or was left behind, 5 s after the coordinator shut down).
pub fn run_simulated(
    group: &SimulatedGroup,
    observe: &mut dyn FnMut(GroupEvent<'_>),
) -> Result<SimulatedRun, GroupError> {
    let n = group.nodes.len();
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
    let nodes = group
        .nodes
        .iter()
        .enumerate()
        .map(|(rank, setup)| NodeSlot {
            turn: Turn::taken(),
            node: Mutex::new(Node {
                setup: setup.clone(),
                plane: DataPlane::simulated(Arc::clone(&group.fabric), node_ip(rank), group.rails),
                agent: None,
            }),
        })
        .collect();
    let agents = Arc::new(Agents {
        nodes,
        jobs: Mutex::new(Jobs {
            queue: (0..n).map(Job::Join).collect(),
            stopping: false,
        }),
        job_added: Condvar::new(),
        network: network.clone(),
        links,
        endpoint: Endpoint {
            host: coordinator_ip.to_string(),
            port: COORDINATOR_PORT,
        },
        token,
        deadline,
        finished: finished_tx,
    });
    for worker in 0..WORKERS.min(n) {
        let agents = Arc::clone(&agents);
        std::thread::Builder::new()
            .name(format!("sim-agents-{worker}"))
            .spawn(move || agents.work())
            .map_err(|source| GroupError::Io {
                what: "cannot start a thread to serve the agents".to_owned(),
                source,
            })?;
    }

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
    // A worker still in a local check (a scripted device hang) is left behind, as the
    // hung process would be; the others stop now.
    agents.stop();
    Ok(SimulatedRun {
        report,
        played,
        verdicts,
        left_behind: n - ended,
    })
}

/// Every agent of the group, and the jobs the workers share.
struct Agents {
    /// By rank.
    nodes: Vec<NodeSlot>,
    jobs: Mutex<Jobs>,
    job_added: Condvar,
    network: MemoryNetwork,
    links: AgentLinks,
    endpoint: Endpoint,
    token: Token,
    deadline: Instant,
    /// Whether each agent that ended got the verdict.
    finished: mpsc::Sender<bool>,
}

struct NodeSlot {
    /// Whether a worker serves this node or is to.
    turn: Turn,
    node: Mutex<Node>,
}

/// One node: what it runs its checks with, and its agent from when it joined until
/// it ended.
struct Node {
    setup: NodeSetup,
    plane: DataPlane,
    agent: Option<Agent>,
}

struct Jobs {
    queue: VecDeque<Job>,
    stopping: bool,
}

#[derive(Debug, Clone, Copy)]
enum Job {
    /// Join the coordinator as this rank.
    Join(usize),
    /// Answer what came for this rank.
    Serve(usize),
}

impl Agents {
    /// A worker: takes jobs until [`Agents::stop`].
    fn work(self: Arc<Self>) {
        loop {
            let job = {
                let mut jobs = lock(&self.jobs);
                loop {
                    if jobs.stopping {
                        return;
                    }
                    if let Some(job) = jobs.queue.pop_front() {
                        break job;
                    }
                    jobs = self
                        .job_added
                        .wait(jobs)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            match job {
                Job::Join(rank) => self.join(rank),
                Job::Serve(rank) => self.serve(rank),
            }
        }
    }

    fn stop(&self) {
        lock(&self.jobs).stopping = true;
        self.job_added.notify_all();
    }

    /// Something came for rank `rank`: queues it to be answered, unless that is
    /// under way.
    fn wake(&self, rank: usize) {
        if self.nodes[rank].turn.something_came() {
            lock(&self.jobs).queue.push_back(Job::Serve(rank));
            self.job_added.notify_one();
        }
    }

    /// Answers what came for rank `rank` until nothing more has.
    fn take_turn(&self, rank: usize) {
        loop {
            self.answer_all(&mut lock(&self.nodes[rank].node));
            if self.nodes[rank].turn.end() {
                return;
            }
        }
    }

    /// Joins as rank `rank`, then answers whatever came meanwhile.
    fn join(self: &Arc<Self>, rank: usize) {
        self.connect(rank);
        self.take_turn(rank);
    }

    fn connect(self: &Arc<Self>, rank: usize) {
        let mut node = lock(&self.nodes[rank].node);
        let ip = node_ip(rank);
        let info = match node
            .plane
            .node_info(&*node.setup.backend, format!("simulated-host-{ip}"))
        {
            Ok(info) => info,
            Err(_) => return self.ended(false),
        };
        let identity = AgentIdentity {
            job_id: node.setup.attempt.job_id.clone(),
            rank: u32::try_from(rank).unwrap_or(u32::MAX),
            nnodes: u32::try_from(self.nodes.len()).unwrap_or(u32::MAX),
            node: node.setup.attempt.node.clone(),
            data_addr: node.plane.addr().ok(),
            info: Body::to(&info).unwrap_or_default(),
        };
        // Weak, so that the hook the agent keeps does not keep every agent alive.
        let agents = Arc::downgrade(self);
        let options = AgentOptions {
            transport: Arc::new(self.network.host(ip)),
            links: Some(self.links.clone()),
            on_inbound: Some(OnInbound::new(move || {
                if let Some(agents) = agents.upgrade() {
                    agents.wake(rank);
                }
            })),
            ..AgentOptions::default()
        };
        match Agent::connect(
            &self.endpoint,
            identity,
            &self.token,
            options,
            self.deadline,
        ) {
            Ok(agent) => node.agent = Some(agent),
            Err(_) => self.ended(false),
        }
    }

    /// Answers what came for rank `rank`, queued by [`Agents::wake`].
    fn serve(&self, rank: usize) {
        self.nodes[rank].turn.take_queued();
        self.take_turn(rank);
    }

    /// Answers every message that has come for `node`, in order, with the agent's own
    /// [`answer`]; at the verdict or the link's end, leaves.
    fn answer_all(&self, node: &mut Node) {
        let outcome = loop {
            let Some(agent) = &node.agent else {
                return;
            };
            let received = match agent.try_recv() {
                Ok(Some(received)) => received,
                Ok(None) => return,
                Err(_) => break false,
            };
            match answer(agent, &node.setup, None, &node.plane, received, None) {
                Ok(None) => {}
                Ok(Some(_verdict)) => break true,
                Err(_) => break false,
            }
        };
        if let Some(agent) = node.agent.take() {
            agent.leave("the run is over");
        }
        self.ended(outcome);
    }

    fn ended(&self, got_verdict: bool) {
        let _ = self.finished.send(got_verdict);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

mod turn;

#[cfg(test)]
mod tests;
