//! The agent's side of a group run: bind the data plane, then do what the coordinator
//! asks (a local check; a collective with other agents over the data plane, PyTorch's
//! Gloo or the backend's own transport; a reachability probe; a torch probe; a token
//! for the backend's transport) until it sends the group's verdict.
//!
//! Every piece of work is bounded by the budget the coordinator gives it, and is
//! cancelled as soon as the link to the coordinator ends, so an agent whose coordinator
//! died stops within the agent's own deadline.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use gpuvet_backend::{
    Across, AcrossRanks, Backend, BackendError, CancelToken, Sample, WorkSpec, slowest_rail,
    with_causes,
};
use gpuvet_control::auth::{SESSION_LEN, from_hex, to_hex};
use gpuvet_control::{Agent, ClusterError, CoordinatorScope, Received};
use gpuvet_dataplane::tcp::{
    CollectiveSpec, DataKey, GroupSpec, LinkStats, ProbeResponder, ProbeSpec, TcpGroup, Topology,
    multi_all_reduce, probe_connectivity,
};
use gpuvet_dataplane::torch_gloo::{self, GlooRank};
use gpuvet_model::analysis::{Limit, Tolerances};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::Attempt;
use gpuvet_model::history::OwnRecords;
use gpuvet_model::results::{CheckResult, RunReport};
use gpuvet_runner::{HANG_GRACE, RunPlan, WorkerLauncher, WorkerPool};

use crate::coordinator::FINDINGS_ONLY;
use crate::error::GroupError;
use crate::fabric::Fabric;
use crate::interfaces::{interface_with, ipv4_of};
use crate::wire::{
    CollectiveOrder, CollectiveReply, Directive, HostEngine, InterfaceProbe, LinkReply,
    NativeGroup, NodeInfo, ProbeReply, ProbeTarget, Reply, Stamped, parse_directive,
};
use gpuvet_model::time::unix_now_ms;

/// Where this node's data plane listens when `--data-addr` does not say: the address its
/// control connection to the coordinator comes from (`toward_coordinator`, the source
/// the kernel routes toward the coordinator), since that is the address the group
/// already reaches this node at.
///
/// Over loopback, the node shares the coordinator's host, and what it binds depends on
/// how the coordinator listens (`coordinator`, from its challenge):
/// - on loopback only (`--listen-addr 127.0.0.1`): every member is on this host, so
///   the data plane stays on loopback too (the route, a loopback address of the
///   coordinator's family). Nothing of the group then listens beyond the host.
/// - elsewhere (every interface, the default): other hosts may be in the group, and
///   this node cannot tell. It listens on every interface (the unspecified address of
///   the same family), and the coordinator tells the peers the address the other
///   nodes reached its host at (see `reachable_from_peers`).
///
/// Both conditions are needed: the coordinator's word alone is unauthenticated, and
/// only a process of this host can be listening at a loopback address this node dialed.
pub fn data_plane_ip(
    explicit: Option<IpAddr>,
    toward_coordinator: IpAddr,
    coordinator: CoordinatorScope,
) -> IpAddr {
    match explicit {
        Some(ip) => ip,
        None if toward_coordinator.is_loopback() && !coordinator.loopback_only => {
            match toward_coordinator {
                IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            }
        }
        None => toward_coordinator,
    }
}

/// This node's data plane: TCP listeners, or its place on a simulated network.
#[derive(Debug)]
pub struct DataPlane {
    ports: Ports,
}

#[derive(Debug)]
enum Ports {
    Tcp(TcpPorts),
    Simulated(SimulatedPort),
}

/// One listener for pair and group collectives, one per rail, and the reachability
/// responder.
#[derive(Debug)]
struct TcpPorts {
    main: TcpListener,
    rails: Vec<TcpListener>,
    probe: ProbeResponder,
    /// Per configured interface: its responder, or why there is none.
    interfaces: Vec<(String, Result<ProbeResponder, GroupError>)>,
}

/// A node on a [`Fabric`]: its address there, and how many rails it has.
#[derive(Debug)]
struct SimulatedPort {
    fabric: Arc<Fabric>,
    ip: IpAddr,
    rails: usize,
}

/// The ports a node on a simulated network claims: nothing listens on them.
const SIMULATED_DATA_PORT: u16 = 1;
const SIMULATED_PROBE_PORT: u16 = 2;
const SIMULATED_FIRST_RAIL_PORT: u16 = 100;

impl DataPlane {
    /// A node at `ip` on a simulated network, with `rails` rails.
    pub fn simulated(fabric: Arc<Fabric>, ip: IpAddr, rails: usize) -> DataPlane {
        DataPlane {
            ports: Ports::Simulated(SimulatedPort {
                fabric,
                ip,
                rails: rails.max(1),
            }),
        }
    }

    /// Binds every listener on `ip` (see [`data_plane_ip`]; `0.0.0.0` for any interface)
    /// on free ports, and a reachability responder on each of `interfaces` on that
    /// interface's own IPv4 address (an interface without one is reported to the
    /// coordinator, not an error here).
    pub fn bind(ip: IpAddr, rails: usize, interfaces: &[String]) -> Result<DataPlane, GroupError> {
        let listen = |what: &str| {
            TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|source| GroupError::Bind {
                what: what.to_owned(),
                ip,
                source,
            })
        };
        let main = listen("the data plane")?;
        let rails = (0..rails.max(1))
            .map(|rail| listen(&format!("rail {rail}")))
            .collect::<Result<Vec<_>, _>>()?;
        let probe =
            ProbeResponder::spawn(listen("the reachability responder")?).map_err(|source| {
                GroupError::Bind {
                    what: "the reachability responder".to_owned(),
                    ip,
                    source,
                }
            })?;
        let interfaces = interfaces
            .iter()
            .map(|name| {
                let responder = ipv4_of(name).and_then(|ip| {
                    TcpListener::bind((ip, 0))
                        .and_then(ProbeResponder::spawn)
                        .map_err(|source| GroupError::InterfaceListen {
                            name: name.clone(),
                            ip,
                            source,
                        })
                });
                (name.clone(), responder)
            })
            .collect();
        Ok(DataPlane {
            ports: Ports::Tcp(TcpPorts {
                main,
                rails,
                probe,
                interfaces,
            }),
        })
    }

    /// Where the main listener is, for the hello's `data_addr`.
    pub fn addr(&self) -> Result<SocketAddr, GroupError> {
        match &self.ports {
            Ports::Tcp(tcp) => local_addr(&tcp.main),
            Ports::Simulated(port) => Ok(SocketAddr::new(port.ip, SIMULATED_DATA_PORT)),
        }
    }

    /// Where every listener is: the main one, each rail's, the reachability
    /// responder's, and each interface responder's (by interface name).
    pub fn listen_addrs(&self) -> Result<Vec<(String, SocketAddr)>, GroupError> {
        let mut addrs = vec![("data".to_owned(), self.addr()?)];
        for (rail, port) in self.rail_ports()?.into_iter().enumerate() {
            addrs.push((
                format!("rail {rail}"),
                SocketAddr::new(self.addr()?.ip(), port),
            ));
        }
        addrs.push((
            "probe".to_owned(),
            SocketAddr::new(self.addr()?.ip(), self.probe_port()),
        ));
        if let Ports::Tcp(tcp) = &self.ports {
            for (name, responder) in &tcp.interfaces {
                if let Ok(responder) = responder {
                    addrs.push((format!("interface {name}"), responder.local_addr()));
                }
            }
        }
        Ok(addrs)
    }

    fn rail_ports(&self) -> Result<Vec<u16>, GroupError> {
        match &self.ports {
            Ports::Tcp(tcp) => tcp
                .rails
                .iter()
                .map(|rail| local_addr(rail).map(|addr| addr.port()))
                .collect(),
            Ports::Simulated(port) => Ok((0..port.rails)
                .map(|rail| SIMULATED_FIRST_RAIL_PORT.saturating_add(rail as u16))
                .collect()),
        }
    }

    fn probe_port(&self) -> u16 {
        match &self.ports {
            Ports::Tcp(tcp) => tcp.probe.local_addr().port(),
            Ports::Simulated(_) => SIMULATED_PROBE_PORT,
        }
    }

    fn simulated_port(&self) -> Option<&SimulatedPort> {
        match &self.ports {
            Ports::Tcp(_) => None,
            Ports::Simulated(port) => Some(port),
        }
    }

    /// What the coordinator needs to know about this node.
    pub fn node_info(
        &self,
        backend: &dyn Backend,
        host_id: String,
    ) -> Result<NodeInfo, GroupError> {
        Ok(NodeInfo {
            backend: backend.name().to_owned(),
            devices: backend.devices().to_vec(),
            host_id,
            rail_ports: self.rail_ports()?,
            probe_port: self.probe_port(),
            every_interface: self.addr()?.ip().is_unspecified(),
            interfaces: match &self.ports {
                Ports::Tcp(tcp) => tcp
                    .interfaces
                    .iter()
                    .map(|(name, responder)| InterfaceProbe {
                        name: name.clone(),
                        addr: responder.as_ref().ok().map(ProbeResponder::local_addr),
                        // Text in the hello, with its causes.
                        error: responder.as_ref().err().map(|error| with_causes(error)),
                    })
                    .collect(),
                Ports::Simulated(_) => Vec::new(),
            },
            spans_nodes: backend.spans_nodes(),
        })
    }
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, GroupError> {
    listener.local_addr().map_err(|source| GroupError::Io {
        what: "cannot read a data-plane listener's address".to_owned(),
        source,
    })
}

/// What this node runs local checks with.
#[derive(Debug, Clone)]
pub struct NodeSetup {
    pub backend: Arc<dyn Backend>,
    pub attempt: Attempt,
    pub nnodes: usize,
    pub tolerance: Tolerances,
    pub baselines: BTreeMap<CheckName, Limit>,
    pub work: WorkSpec,
    /// The Python that runs `pytorch_gloo_2` with torch, when it can import torch.
    pub python: PathBuf,
    /// How local checks start their worker process (every agent starts its own, which
    /// [`serve`] keeps for the session); `None` runs them on threads of this process.
    pub worker: Option<WorkerLauncher>,
    /// This node's GPUs' records (`gpuvet.history`): its local results are judged
    /// against them before they are sent, so the group's verdict holds each node's
    /// judgment of its own GPUs. `None` where the node keeps no records.
    pub history: Option<Arc<OwnRecords>>,
}

/// Serves the coordinator until it sends the verdict (returned), the link ends, or
/// `deadline` passes (both errors: the caller applies its fail action).
pub fn serve(
    agent: &Agent,
    setup: &NodeSetup,
    plane: &DataPlane,
    deadline: Instant,
) -> Result<RunReport, GroupError> {
    // The local checks of the session share one worker, so the backend starts once
    // per session rather than once per directive; it ends with the session.
    let pool = setup
        .worker
        .as_ref()
        .map(|launcher| WorkerPool::new(launcher.clone(), &*setup.backend));
    let mut own = Vec::new();
    let served = (|| loop {
        let received = agent
            .recv(deadline)
            .map_err(|source| GroupError::CoordinatorLost { source })?;
        let Some(received) = received else {
            return Err(GroupError::NoVerdict);
        };
        if let Some(verdict) = answer(agent, setup, pool.as_ref(), plane, received, Some(&mut own))?
        {
            return Ok(with_own_entities(verdict, &own));
        }
    })();
    if let Some(pool) = &pool {
        pool.close();
    }
    served
}

/// The group's verdict with this node's own entities put back where a large group's
/// verdict left them out (its findings only: `coordinator::for_members`). Those passed
/// the group, or they would be findings; put back, this node's store keeps their
/// results, and its GPUs' records grow, as in a small group.
pub(crate) fn with_own_entities(mut verdict: RunReport, own: &[CheckResult]) -> RunReport {
    for check in &mut verdict.checks {
        if !check.params.contains_key(FINDINGS_ONLY) {
            continue;
        }
        let Some(mine) = own.iter().find(|result| result.name == check.name) else {
            continue;
        };
        let mut put_back = 0;
        for entity in &mine.entities {
            if !check.entities.iter().any(|e| e.entity == entity.entity) {
                check.entities.push(entity.clone());
                put_back += 1;
            }
        }
        if put_back > 0
            && let Some(note) = check.params.get_mut(FINDINGS_ONLY)
        {
            note.push_str(&format!("; this node's own {put_back} added"));
        }
    }
    verdict
}

/// Does what one message from the coordinator asks and sends the reply: the one step
/// of [`serve`], for callers that take messages as they come
/// ([`Agent::try_recv`]). `Some` is the group's verdict, the last message; an error
/// ends the session as in [`serve`]. Local checks run in `pool`'s worker when given,
/// and their results are also kept in `own` when given.
pub(crate) fn answer(
    agent: &Agent,
    setup: &NodeSetup,
    pool: Option<&WorkerPool>,
    plane: &DataPlane,
    received: Received,
    own: Option<&mut Vec<CheckResult>>,
) -> Result<Option<RunReport>, GroupError> {
    let command = match received {
        Received::Roster(_) => return Ok(None),
        Received::Closed { reason } => return Err(GroupError::Closed { reason }),
        Received::Command(command) => command,
    };
    // Read without serde's buffering of tagged enums; an error reads as before.
    let directive = match parse_directive(command.body.get()).map_err(ClusterError::from) {
        Ok(directive) => directive,
        Err(err) => {
            let reply = Reply::Refused {
                reason: format!("cannot read the directive: {}", with_causes(&err)),
            };
            send(agent, command.seq, &reply)?;
            return Ok(None);
        }
    };
    let began_ms = unix_now_ms();
    let reply = match directive {
        Directive::Finish { report } => return Ok(Some(*report)),
        Directive::Local { check, budget_ms } => {
            agent.set_phase(format!("{check} on this node"));
            let mut result =
                cancel_on_link_end(agent, |_| run_local(setup, pool, check, budget_ms));
            if let Some(history) = &setup.history {
                history.judge(&mut result, unix_now_ms());
            }
            if let Some(own) = own {
                own.push(result.clone());
            }
            Reply::Local {
                result: Box::new(result),
            }
        }
        Directive::Collective(order) => {
            agent.set_phase(match &order.native {
                // A native order names no peers: the backends find each other.
                Some(_) => format!(
                    "{} round {} on the {} backend's own transport",
                    order.check,
                    order.round,
                    setup.backend.name()
                ),
                None => format!(
                    "{} round {} as rank {} of {}",
                    order.check,
                    order.round,
                    order.rank,
                    order.peers.len()
                ),
            });
            Reply::Collective(match data_key(agent, &order) {
                Ok(key) => cancel_on_link_end(agent, |cancel| {
                    run_collective(setup, plane, &order, &key, cancel)
                }),
                Err(error) => CollectiveReply {
                    error: Some(with_causes(&error)),
                    failed_at_ms: Some(unix_now_ms()),
                    ..CollectiveReply::default()
                },
            })
        }
        Directive::ProbeTorch { .. } if plane.simulated_port().is_some() => Reply::Torch {
            python: setup.python.display().to_string(),
            version: None,
            error: Some("a node on a simulated network runs no Python".to_owned()),
        },
        Directive::ProbeTorch { budget_ms } => {
            agent.set_phase("probing torch");
            let deadline = Instant::now() + Duration::from_millis(budget_ms);
            let probed = cancel_on_link_end(agent, |cancel| {
                torch_gloo::probe(&setup.python, deadline, cancel)
            });
            // Replies carry errors as text, with their causes.
            Reply::Torch {
                python: setup.python.display().to_string(),
                version: probed.as_ref().ok().cloned(),
                error: probed.err().map(|error| with_causes(&error)),
            }
        }
        Directive::GroupToken { count } => {
            let tokens: Result<Vec<String>, _> = (0..count)
                .map(|_| setup.backend.group_token().map(|token| to_hex(&token)))
                .collect();
            match tokens {
                Ok(tokens) => Reply::GroupToken {
                    tokens,
                    error: None,
                },
                Err(error) => Reply::GroupToken {
                    tokens: Vec::new(),
                    error: Some(with_causes(&error)),
                },
            }
        }
        Directive::Probe { targets, budget_ms } => {
            agent.set_phase(format!("probing {} peers", targets.len()));
            Reply::Probe {
                results: match plane.simulated_port() {
                    Some(port) => port.fabric.probe(port.ip, &targets),
                    None => {
                        cancel_on_link_end(agent, |cancel| run_probe(&targets, budget_ms, cancel))
                    }
                },
            }
        }
    };
    agent.set_phase("idle");
    let stamped = Stamped {
        began_ms: Some(began_ms),
        ended_ms: Some(unix_now_ms()),
        reply,
    };
    send(agent, command.seq, &stamped)?;
    Ok(None)
}

fn send(agent: &Agent, seq: u64, reply: &impl serde::Serialize) -> Result<(), GroupError> {
    agent
        .report(Some(seq), reply)
        .map_err(|source| GroupError::CoordinatorLost { source })
}

/// Runs `work` with a token the agent cancels the moment the coordinator is gone.
fn cancel_on_link_end<T>(agent: &Agent, work: impl FnOnce(&CancelToken) -> T) -> T {
    let cancel = CancelToken::new();
    let _cancel_on_end = agent.on_link_end({
        let cancel = cancel.clone();
        move || cancel.cancel()
    });
    work(&cancel)
}

fn run_local(
    setup: &NodeSetup,
    pool: Option<&WorkerPool>,
    check: CheckName,
    budget_ms: u64,
) -> CheckResult {
    let plan = RunPlan {
        attempt: setup.attempt.clone(),
        nodes: setup.nnodes,
        checks: vec![check],
        timeout: Duration::from_millis(budget_ms),
        tolerance: setup.tolerance.clone(),
        baselines: setup.baselines.clone(),
        expected_inventory: Default::default(),
        work: setup.work,
        started_at_ms: unix_now_ms(),
        hang_grace: HANG_GRACE,
        worker: setup.worker.clone(),
    };
    gpuvet_runner::run_check(&setup.backend, &plan, check, pool)
}

/// The run's data-plane key, from the session id in the order and the token.
fn data_key(agent: &Agent, order: &CollectiveOrder) -> Result<DataKey, GroupError> {
    let session = data_session(&order.session)?;
    Ok(DataKey::from_bytes(agent.data_plane_key(&session)))
}

/// The session id of an order, from its hex.
fn data_session(hex: &str) -> Result<Vec<u8>, GroupError> {
    from_hex(hex)
        .filter(|session| session.len() == SESSION_LEN)
        .ok_or_else(|| GroupError::BadSession {
            session: hex.to_owned(),
            digits: SESSION_LEN * 2,
        })
}

fn run_collective(
    setup: &NodeSetup,
    plane: &DataPlane,
    order: &CollectiveOrder,
    key: &DataKey,
    cancel: &CancelToken,
) -> CollectiveReply {
    let deadline = Instant::now() + Duration::from_millis(order.budget_ms);
    let spec = CollectiveSpec {
        bytes: order.bytes,
        ..CollectiveSpec::default()
    };
    let result = match (&order.native, order.check, &plane.ports) {
        (Some(native), check, ports) => {
            across(setup, check, native, deadline, cancel).map(|(sample, links)| match ports {
                Ports::Simulated(port) => (port.fabric.pace_native(port.ip, order, sample), links),
                Ports::Tcp(_) => (sample, links),
            })
        }
        (None, _, Ports::Simulated(port)) => Ok((port.fabric.host_collective(order), Vec::new())),
        (None, CheckName::MultiAllReduce | CheckName::MultiAllReduce2, Ports::Tcp(tcp)) => {
            rails(tcp, order, key, &spec, deadline, cancel)
        }
        (None, _, Ports::Tcp(tcp)) => single(setup, tcp, order, key, &spec, deadline, cancel),
    };
    match result {
        Ok((sample, links)) => CollectiveReply {
            value: Some(sample.value),
            samples: sample.samples,
            wrong_result: sample.wrong_result,
            extra: sample.extra,
            params: sample.params,
            links: links.iter().map(link_reply).collect(),
            ..CollectiveReply::default()
        },
        Err(error) => CollectiveReply {
            error: Some(with_causes(&error)),
            failed_at_ms: Some(unix_now_ms()),
            ..CollectiveReply::default()
        },
    }
}

/// A collective the backends run among themselves (NCCL). It runs on a thread of its
/// own, since NCCL can block for good (a member that never joins, a network that drops
/// its traffic) and ignores the cancel token while it does: at the deadline the thread
/// is abandoned and the hang reported.
fn across(
    setup: &NodeSetup,
    check: CheckName,
    native: &NativeGroup,
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<(Sample, Vec<LinkStats>), BackendError> {
    let token = |hex: &str| {
        from_hex(hex).ok_or_else(|| {
            BackendError::Failed("a group token from the coordinator is not hex".to_owned())
        })
    };
    let ranks = match native {
        NativeGroup::Devices {
            token: hex,
            world,
            first_rank,
        } => AcrossRanks::Devices {
            token: token(hex)?,
            world: *world,
            first_rank: *first_rank,
        },
        NativeGroup::Rails {
            tokens,
            nodes,
            node,
        } => AcrossRanks::Rails {
            tokens: tokens
                .iter()
                .map(|hex| token(hex))
                .collect::<Result<_, _>>()?,
            nodes: *nodes,
            node: *node,
        },
    };
    let what = match &ranks {
        AcrossRanks::Devices { world, .. } => format!("`{check}` across {world} ranks"),
        AcrossRanks::Rails { tokens, nodes, .. } => {
            format!("`{check}` on {} rails across {nodes} nodes", tokens.len())
        }
    };
    let work = CollectiveWork {
        across: Across { check, ranks },
        backend: Arc::clone(&setup.backend),
        work: setup.work,
        cancel: cancel.clone(),
    };
    let (sender, result) = mpsc::channel();
    gpuvet_threads::spawn_detached(format!("{check}-across"), move || {
        let sample = work
            .backend
            .collective_across(&work.across, &work.work, &work.cancel);
        let _ = sender.send(sample);
    })
    .map_err(|err| BackendError::io("cannot start the collective", err))?;
    loop {
        match result.recv_timeout(Duration::from_millis(100)) {
            Ok(sample) => return sample.map(|sample| (sample, Vec::new())),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(BackendError::Failed(
                    "the collective's thread ended without a result (a bug in gpuvet)".to_owned(),
                ));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        cancel.check()?;
        if Instant::now() >= deadline {
            return Err(BackendError::Failed(format!(
                "the {} backend's {what} did not finish before the deadline: a member never \
                 joined it, or the network between the nodes drops its traffic",
                setup.backend.name(),
            )));
        }
    }
}

/// What the collective's own thread owns.
struct CollectiveWork {
    across: Across,
    backend: Arc<dyn Backend>,
    work: WorkSpec,
    cancel: CancelToken,
}

fn link_reply(link: &LinkStats) -> LinkReply {
    LinkReply {
        rank: link.rank,
        bytes_sent: link.bytes_sent,
        send_blocked_s: link.send_blocked.as_secs_f64(),
        receive_blocked_s: link.receive_blocked.as_secs_f64(),
    }
}

fn group_spec(
    order: &CollectiveOrder,
    key: &DataKey,
    peers: &[SocketAddr],
    topology: Topology,
) -> GroupSpec {
    GroupSpec {
        rank: order.rank,
        peers: peers.to_vec(),
        round: order.round,
        topology,
        key: key.clone(),
    }
}

fn single(
    setup: &NodeSetup,
    plane: &TcpPorts,
    order: &CollectiveOrder,
    key: &DataKey,
    spec: &CollectiveSpec,
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<(Sample, Vec<LinkStats>), BackendError> {
    let check = order.check;
    let topology = match check {
        CheckName::AllToAll2 => Topology::FullMesh,
        _ => Topology::Ring,
    };
    let group_spec = group_spec(order, key, &order.peers, topology);
    let mut group = TcpGroup::establish(&group_spec, &plane.main, deadline, cancel)?;
    let sample = match check {
        CheckName::AllReduce2 | CheckName::AllReduce => group.all_reduce(spec, deadline, cancel),
        CheckName::AllGather2 | CheckName::AllGather => group.all_gather(spec, deadline, cancel),
        CheckName::AllToAll2 => group.all_to_all(spec, deadline, cancel),
        CheckName::PytorchGloo2 => match order.engine {
            HostEngine::GpuvetTcp => group.host_network_collective(spec, deadline, cancel),
            HostEngine::TorchGloo => {
                let own_ip = order.peers[order.rank].ip();
                let rank = GlooRank {
                    python: &setup.python,
                    store_ip: order.peers[0].ip(),
                    interface: interface_with(own_ip),
                };
                torch_gloo::all_reduce(&mut group, &rank, spec, deadline, cancel)
            }
        },
        other => Err(BackendError::Failed(format!(
            "`{other}` is not a collective between nodes (a bug in gpuvet)"
        ))),
    }?;
    Ok((sample, group.last_link_stats().to_vec()))
}

/// One all-reduce per rail at the same time; the value is the slowest rail's busbw and
/// `extra` holds each rail's.
fn rails(
    plane: &TcpPorts,
    order: &CollectiveOrder,
    key: &DataKey,
    spec: &CollectiveSpec,
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<(Sample, Vec<LinkStats>), BackendError> {
    if order.rails.is_empty() || order.rails.len() > plane.rails.len() {
        return Err(BackendError::Failed(format!(
            "asked for {} rails, and this node listens on {}",
            order.rails.len(),
            plane.rails.len()
        )));
    }
    let mut groups = Vec::with_capacity(order.rails.len());
    for (rail, peers) in order.rails.iter().enumerate() {
        let group_spec = group_spec(order, key, peers, Topology::Ring);
        let group = TcpGroup::establish(&group_spec, &plane.rails[rail], deadline, cancel)
            .map_err(|error| BackendError::Rail {
                rail,
                source: Box::new(error),
            })?;
        groups.push(group);
    }
    let sample = slowest_rail(multi_all_reduce(&mut groups, spec, deadline, cancel))?;
    let links = groups
        .iter()
        .flat_map(|group| group.last_link_stats().iter().cloned())
        .collect();
    Ok((sample, links))
}

fn run_probe(targets: &[ProbeTarget], budget_ms: u64, cancel: &CancelToken) -> Vec<ProbeReply> {
    // Five tries each, all targets at once; a dead peer costs `count × timeout`.
    let budget = Duration::from_millis(budget_ms);
    let spec = ProbeSpec {
        count: 5,
        timeout: Duration::from_secs(1).min(budget / 6),
        interval: Duration::from_millis(50),
        echo: true,
    };
    let addrs: Vec<SocketAddr> = targets.iter().map(|t| t.addr).collect();
    match probe_connectivity(&addrs, &spec, cancel) {
        Ok(results) => targets
            .iter()
            .zip(results)
            .map(|(target, result)| ProbeReply {
                rank: target.rank,
                network: target.network.clone(),
                attempts: result.attempts,
                successes: result.successes,
                rtt_us: result
                    .echo_rtt
                    .or(result.connect_rtt)
                    .map(|rtt| rtt.avg.as_secs_f64() * 1e6),
                error: result.last_error.map(|error| with_causes(&error)),
            })
            .collect(),
        Err(error) => targets
            .iter()
            .map(|target| ProbeReply {
                rank: target.rank,
                network: target.network.clone(),
                attempts: 0,
                successes: 0,
                rtt_us: None,
                error: Some(with_causes(&error)),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn a_session_that_is_not_the_coordinator_s_hex_is_refused() {
        let good = "ab".repeat(SESSION_LEN);
        assert_eq!(data_session(&good).unwrap().len(), SESSION_LEN);
        for bad in ["zz", "abcd", ""] {
            let err = data_session(bad).unwrap_err();
            assert!(
                matches!(&err, GroupError::BadSession { session, .. } if session == bad),
                "{err:?}"
            );
        }
        assert_eq!(
            data_session("abcd").unwrap_err().to_string(),
            format!(
                "the coordinator's data-plane session `abcd` is not {} hex digits (a bug in \
                 gpuvet)",
                SESSION_LEN * 2
            )
        );
    }

    #[test]
    fn an_interface_that_cannot_be_probed_is_reported_in_the_hello() {
        let plane = DataPlane::bind(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            1,
            &["lo".to_owned(), "nosuchif0".to_owned()],
        )
        .unwrap();
        let Ports::Tcp(tcp) = &plane.ports else {
            unreachable!()
        };
        assert!(tcp.interfaces[0].1.is_ok());
        assert!(matches!(
            tcp.interfaces[1].1,
            Err(GroupError::NoSuchInterface { .. })
        ));
        let backend = gpuvet_backend::sim::SimBackend::new(Default::default());
        let info = plane.node_info(&backend, String::new()).unwrap();
        assert_eq!(
            info.interfaces[1].error.as_deref(),
            Some("this node has no interface `nosuchif0`")
        );
        assert!(info.interfaces[0].addr.is_some());
    }

    #[test]
    fn the_data_plane_listens_where_the_control_connection_comes_from() {
        let everywhere = CoordinatorScope::default();
        let loopback_only = CoordinatorScope {
            loopback_only: true,
        };
        let route: IpAddr = "10.0.0.7".parse().unwrap();
        for coordinator in [everywhere, loopback_only] {
            assert_eq!(data_plane_ip(None, route, coordinator), route);
        }
        let explicit: IpAddr = "192.168.1.5".parse().unwrap();
        let v4_loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let v6_loopback: IpAddr = "::1".parse().unwrap();
        // `--data-addr` wins, whatever the coordinator says.
        for (route, coordinator) in [
            (route, everywhere),
            (v4_loopback, everywhere),
            (v4_loopback, loopback_only),
        ] {
            assert_eq!(data_plane_ip(Some(explicit), route, coordinator), explicit);
        }
        // On the host of a coordinator that listens everywhere, over loopback: every
        // interface of that family, since other hosts may be in the group.
        assert_eq!(
            data_plane_ip(None, v4_loopback, everywhere),
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        );
        assert_eq!(
            data_plane_ip(None, v6_loopback, everywhere),
            "::".parse::<IpAddr>().unwrap()
        );
        // A coordinator on loopback only: loopback means loopback, of its family.
        assert_eq!(data_plane_ip(None, v4_loopback, loopback_only), v4_loopback);
        assert_eq!(data_plane_ip(None, v6_loopback, loopback_only), v6_loopback);
        let other_loopback: IpAddr = "127.0.1.1".parse().unwrap();
        assert_eq!(
            data_plane_ip(None, other_loopback, loopback_only),
            other_loopback
        );
    }

    #[test]
    fn every_listener_binds_the_chosen_ip_and_says_whether_it_is_every_interface() {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let plane = DataPlane::bind(ip, 2, &[]).unwrap();
        let addrs = plane.listen_addrs().unwrap();
        let names: Vec<&str> = addrs.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["data", "rail 0", "rail 1", "probe"]);
        assert!(addrs.iter().all(|(_, addr)| addr.ip() == ip), "{addrs:?}");
        let backend = gpuvet_backend::cpu::CpuBackend::new(1);
        let info = plane.node_info(&backend, String::new()).unwrap();
        assert!(!info.every_interface);

        let any = data_plane_ip(None, ip, CoordinatorScope::default());
        let plane = DataPlane::bind(any, 1, &[]).unwrap();
        let addrs = plane.listen_addrs().unwrap();
        assert!(addrs.iter().all(|(_, addr)| addr.ip() == any), "{addrs:?}");
        assert!(
            plane
                .node_info(&backend, String::new())
                .unwrap()
                .every_interface
        );
    }
}
