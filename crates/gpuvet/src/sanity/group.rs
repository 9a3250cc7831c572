//! `check` and `run` across a group of nodes: pick the mode from the group flags and
//! the launcher's environment, then join as a member (rank 0 also coordinates), or
//! spawn `--local-nodes` agents on loopback and coordinate them.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuvet_backend::child::{die_with_parent, when_closed};
use gpuvet_backend::{Backend, WorkSpec, with_causes};
use gpuvet_control::{
    Agent, AgentIdentity, AgentOptions, ClusterError, Coordinator, CoordinatorOptions,
    CoordinatorScope, Endpoint, Identify, MemberState, Rendezvous, RendezvousFlags, Token,
    rendezvous::process_env,
};
use gpuvet_model::analysis::{Limit, Tolerances};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::config::Config;
use gpuvet_model::events::Attempt;
use gpuvet_model::exit_codes;
use gpuvet_model::history::OwnRecords;
use gpuvet_model::results::{CheckResult, CheckStatus, GroupSummary, Outcome, RunReport};
use gpuvet_multinode::fabric::Fabric;
use gpuvet_multinode::in_process::{SimulatedGroup, node_ips, run_simulated};
use gpuvet_multinode::{
    DataPlane, GroupError, GroupEvent, GroupPlan, NodeSetup, data_plane_ip, run_group, serve,
    wait_for_goodbyes,
};
use gpuvet_runner::{RunnerEvent, WorkerLauncher};

use super::local_gpus;
use crate::cli::{GroupArgs, SanityArgs};
use crate::failure::{Failure, note, warn};
use crate::output::Progress;
use gpuvet_model::time::unix_now_ms;

/// How this invocation takes part.
#[derive(Debug)]
pub enum Mode {
    /// No group: the checks run on this node alone.
    Single,
    /// One node of a group; rank 0 also runs the coordinator.
    Member(Box<Rendezvous>),
    /// Spawn this many agents on loopback and coordinate them.
    LocalNodes(u32),
    /// Run this many sim nodes as threads of this process.
    InProcess(u32),
}

/// The most `--local-nodes` agents: each is a process with its own data plane.
const MAX_LOCAL_NODES: u32 = 64;
/// How long after the verdict the coordinator waits for agents to say goodbye, and
/// `--local-nodes` for its agents to exit; then the ones left (stopped, hung) are
/// killed, never waited on. The command acts within this of its verdict.
const AFTER_VERDICT_WAIT: Duration = Duration::from_secs(1);
/// Set in the environment of the agents `--local-nodes` spawns.
const LOCAL_AGENT_ENV: &str = "GPUVET_LOCAL_AGENT";
/// The longest `--local-nodes` waits for its agents to join.
const LOCAL_RENDEZVOUS: Duration = Duration::from_secs(30);
/// The most `--sim-nodes`: 4,096 nodes of 8 GPUs, the size the scale benchmark runs
/// (above about 3,000 the kernel's memory-map limit must be raised first).
const MAX_SIM_NODES: u32 = 4096;

/// How this invocation takes part, from the group flags and the environment; every
/// group flag is validated here, before anything starts or is recorded.
pub fn mode(args: &GroupArgs) -> Result<Mode, Failure> {
    rendezvous_timeout(args)?;
    if let Some(n) = args.sim_nodes {
        if !(2..=MAX_SIM_NODES).contains(&n) {
            return Err(Failure::usage(format!(
                "`--sim-nodes {n}` is out of range; expected 2 to {MAX_SIM_NODES}"
            ))
            .with_hint("a group compares its nodes with each other, so it has two at least"));
        }
        return Ok(Mode::InProcess(n));
    }
    if let Some(n) = args.local_nodes {
        if !(2..=MAX_LOCAL_NODES).contains(&n) {
            return Err(Failure::usage(format!(
                "`--local-nodes {n}` is out of range; expected 2 to {MAX_LOCAL_NODES}"
            )));
        }
        return Ok(Mode::LocalNodes(n));
    }
    let flags = RendezvousFlags {
        master_addr: args.master_addr.clone(),
        gpuvet_port: args.gpuvet_port,
        node_rank: args.node_rank,
        nnodes: args.nnodes,
        token: args.token.clone(),
        // A join-only rank 0 runs no coordinator: its agent calls the one elsewhere.
        listen_addr: args.listen_addr.filter(|_| !args.join_only),
    };
    let rendezvous = Rendezvous::resolve(&flags, &process_env())
        .map_err(|err| Failure::new(exit_codes::USAGE, err))?;
    Ok(if rendezvous.nnodes <= 1 {
        Mode::Single
    } else {
        Mode::Member(Box::new(rendezvous))
    })
}

/// What every node of the group runs with, resolved from flags and config.
pub struct Setup<'a> {
    pub args: &'a SanityArgs,
    pub config: &'a Config,
    pub backend: Arc<dyn Backend>,
    pub attempt: &'a Attempt,
    pub checks: Vec<CheckName>,
    pub timeout: Duration,
    pub tolerance: Tolerances,
    pub baselines: BTreeMap<CheckName, Limit>,
    /// How this node's local checks start their worker processes.
    pub worker: WorkerLauncher,
    pub show_progress: bool,
    /// This node's GPUs' records, for a member of a group to judge its own results
    /// against before it sends them (`None` without a store, or off).
    pub history: Option<Arc<OwnRecords>>,
}

fn rendezvous_timeout(args: &GroupArgs) -> Result<Duration, Failure> {
    let secs = args.rendezvous_timeout;
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(Failure::usage(format!(
            "`--rendezvous-timeout {secs}` is out of range; expected seconds above 0, at most a day"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl Setup<'_> {
    fn plan(&self) -> Result<GroupPlan, Failure> {
        Ok(GroupPlan {
            attempt: self.attempt.clone(),
            checks: self.checks.clone(),
            timeout: self.timeout,
            rendezvous_timeout: rendezvous_timeout(&self.args.group)?,
            tolerance: self.tolerance.clone(),
            baselines: self.baselines.clone(),
            expected_inventory: self.config.settings.expected_inventory.clone(),
            pairing: self.config.settings.pairing,
            collective_bytes: self.config.settings.collective_bytes,
            started_at_ms: unix_now_ms(),
        })
    }

    fn node_setup(&self, nnodes: u32) -> NodeSetup {
        NodeSetup {
            backend: Arc::clone(&self.backend),
            attempt: self.attempt.clone(),
            nnodes: nnodes as usize,
            tolerance: self.tolerance.clone(),
            baselines: self.baselines.clone(),
            work: WorkSpec::from_settings(&self.config.settings),
            python: self.args.group.python.clone(),
            worker: Some(self.worker.clone()),
            history: self.history.clone(),
        }
    }
}

/// Runs this node's part of the group; rank 0 returns the group's report, the others
/// the verdict the coordinator sent, or a failed report saying why none came.
pub fn as_member(rendezvous: &Rendezvous, setup: &Setup<'_>) -> Result<RunReport, Failure> {
    // Where the rank, size and coordinator came from, before anything can time out on
    // them: a group read from the wrong variables shows here, not as a hung rendezvous.
    // Two lines, each within 100 columns. A `--local-nodes` agent's place is its
    // parent's choice, and four agents saying it would be a wall of lines.
    if std::env::var_os(LOCAL_AGENT_ENV).is_none() {
        note(format!("group: {}", rendezvous.describe_rank()));
        note(format!("group: {}", rendezvous.describe_coordinator()));
    }
    let token = match &rendezvous.token {
        Some(token) => token.clone(),
        None => Token::random().map_err(|err| Failure::new(exit_codes::INTERNAL, err))?,
    };
    let plan = setup.plan()?;
    let runs_coordinator = rendezvous.is_coordinator() && !setup.args.group.join_only;
    let rails = rails(&*setup.backend);
    let interfaces = setup.config.settings.interfaces.as_slice();
    let bind = |ip| {
        DataPlane::bind(ip, rails, interfaces).map_err(|err| Failure::new(exit_codes::USAGE, err))
    };
    let bound: DataPlane;
    let plane = match setup.args.group.data_addr {
        Some(ip) => {
            bound = bind(ip)?;
            Plane::Bound(&bound)
        }
        None => {
            match route_toward_coordinator(rendezvous, Instant::now() + plan.rendezvous_timeout) {
                // Off loopback, how the coordinator listens changes nothing; and a
                // process that runs the coordinator knows how it listens.
                Ok(route) if runs_coordinator || !route.is_loopback() => {
                    let coordinator = CoordinatorScope {
                        loopback_only: runs_coordinator
                            && rendezvous.bind_addr().ip().is_loopback(),
                    };
                    bound = bind(data_plane_ip(None, route, coordinator))?;
                    Plane::Bound(&bound)
                }
                // Bound once the coordinator's challenge says whether loopback is enough.
                Ok(route) => Plane::OnLoopback {
                    route,
                    rails,
                    interfaces,
                },
                Err(why) => {
                    let why = with_causes(&why);
                    warn(format!("this node has no group verdict: {why}"));
                    return Ok(no_verdict(setup, &why));
                }
            }
        }
    };
    let member = Member {
        rendezvous,
        token: &token,
        plane,
        node: setup.node_setup(rendezvous.nnodes),
        rendezvous_timeout: plan.rendezvous_timeout,
        run_timeout: plan.timeout,
    };
    if !runs_coordinator {
        return Ok(match member.join_and_serve() {
            Ok(verdict) => as_this_node(verdict, setup.attempt, &*setup.backend),
            Err(why) => {
                let why = with_causes(&why);
                // A `--local-nodes` agent's parent is the coordinator and reports the
                // group's end once; every agent repeating it would say it n times.
                if std::env::var_os(LOCAL_AGENT_ENV).is_none() {
                    warn(format!("this node has no group verdict: {why}"));
                }
                no_verdict(setup, &why)
            }
        });
    }
    let coordinator = Coordinator::bind(
        rendezvous.bind_addr(),
        rendezvous.nnodes,
        &setup.attempt.job_id,
        token.clone(),
        CoordinatorOptions::default(),
    )
    .map_err(|err| {
        Failure::usage_from("cannot start the coordinator", err).with_hint(format!(
            "another process may hold port `{}`; set `GPUVET_PORT` or `--gpuvet-port` to a free one on every node",
            rendezvous.port
        ))
    })?;
    let report = std::thread::scope(|scope| {
        // This node's own agent; the coordinator's report is the verdict here, so
        // what the agent ends with needs no second telling.
        let own_agent = scope.spawn(|| member.join_and_serve());
        let (report, _) = coordinate(&coordinator, &plan, setup.show_progress);
        coordinator.shutdown("the run is over");
        let _ = own_agent.join();
        report
    });
    Ok(report)
}

/// Why this node could not choose its data plane's address.
#[derive(Debug, thiserror::Error)]
#[error("cannot choose the data plane's address (set `--data-addr` to say)")]
struct NoRoute(#[source] ClusterError);

/// The local IP this node's control connection to the coordinator comes from, as soon
/// as the coordinator's name resolves (a Kubernetes service may resolve only once its
/// pod is ready), before `deadline`.
fn route_toward_coordinator(rendezvous: &Rendezvous, deadline: Instant) -> Result<IpAddr, NoRoute> {
    let endpoint = rendezvous.coordinator_endpoint();
    let mut pause = Duration::from_millis(100);
    loop {
        match endpoint.local_ip_toward() {
            Ok(ip) => return Ok(ip),
            Err(err) if Instant::now() + pause >= deadline => return Err(NoRoute(err)),
            Err(_) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Spawns `n` agents on loopback and coordinates them; their output is the group's.
pub fn with_local_nodes(n: u32, setup: &Setup<'_>) -> Result<RunReport, Failure> {
    if let Some(keys) = group_only_script(setup.config) {
        return Err(Failure::usage(format!(
            "`gpuvet.sim.{keys}` {} played only by a group in one process",
            if keys.contains(',') { "are" } else { "is" }
        ))
        .with_hint("run it with `--sim-nodes N` instead of `--local-nodes N`"));
    }
    let mut plan = setup.plan()?;
    // Local agents start in milliseconds; one that has not joined by then never will.
    plan.rendezvous_timeout = plan.rendezvous_timeout.min(LOCAL_RENDEZVOUS);
    let token = Token::random().map_err(|err| Failure::new(exit_codes::INTERNAL, err))?;
    let coordinator = Coordinator::bind(
        (Ipv4Addr::LOCALHOST, 0),
        n,
        &setup.attempt.job_id,
        token.clone(),
        CoordinatorOptions::default(),
    )
    .map_err(|err| Failure::bug_from("cannot start the local coordinator", err))?;
    let port = coordinator.local_addr().port();
    let exe = super::own_executable()?;
    let gpus = match local_gpus::split(setup.backend.name(), setup.backend.devices(), n as usize) {
        Ok(gpus) => {
            for (rank, visible) in gpus.iter().enumerate() {
                note(format!("local-{rank} drives GPUs `{visible}`"));
            }
            gpus
        }
        Err(why) => {
            if setup.backend.name() == "cuda" {
                note(format!("local agents share the GPUs: {why}"));
            }
            Vec::new()
        }
    };
    let mut children = Vec::with_capacity(n as usize);
    for rank in 0..n {
        let visible = gpus.get(rank as usize).map(String::as_str);
        match spawn_local_agent(&exe, setup, rank, n, port, &token, visible) {
            Ok(child) => children.push(child),
            Err(err) => {
                kill_all(&mut children);
                // Only a machine out of processes or memory refuses one.
                return Err(Failure::bug_from(
                    format!("cannot start local agent {rank}"),
                    err,
                ));
            }
        }
    }
    let (report, stop_by) = coordinate(&coordinator, &plan, setup.show_progress);
    // An agent that stopped answering (stopped, hung) is killed at once.
    for member in coordinator.members() {
        if member.state == MemberState::Unresponsive
            && let Some(child) = children.get_mut(member.info.rank as usize)
        {
            let _ = child.kill();
        }
    }
    coordinator.shutdown("the run is over");
    for child in &mut children {
        while Instant::now() < stop_by && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    kill_all(&mut children);
    Ok(report)
}

/// The `gpuvet.sim` keys only a group in one process plays, joined, if the config
/// has any.
fn group_only_script(config: &Config) -> Option<String> {
    let keys = config.settings.sim.as_ref()?.group_only_keys();
    (!keys.is_empty()).then(|| keys.join("`, `gpuvet.sim."))
}

/// Runs a group of `n` sim nodes, `local-0` to `local-N-1`, as threads of this process
/// (`--sim-nodes`); the report is the coordinator's, as with `--local-nodes`.
pub fn in_process(n: u32, setup: &Setup<'_>) -> Result<RunReport, Failure> {
    if setup.backend.name() != "sim" {
        return Err(Failure::usage(format!(
            "`--sim-nodes` runs sim nodes, and the backend is `{}`",
            setup.backend.name()
        ))
        .with_hint("add `--backend sim`, or run real agents with `--local-nodes N`"));
    }
    let mut plan = setup.plan()?;
    plan.rendezvous_timeout = plan.rendezvous_timeout.min(LOCAL_RENDEZVOUS);
    let script = setup.config.settings.sim.clone().unwrap_or_default();
    let nodes: Vec<NodeSetup> = (0..n)
        .map(|rank| {
            let node = format!("local-{rank}");
            let backend = super::build_backend(
                gpuvet_model::config::BackendChoice::Sim,
                setup.config,
                None,
                &node,
            )?;
            let attempt = Attempt {
                node: node.clone(),
                instance: node,
                ..setup.attempt.clone()
            };
            Ok(NodeSetup {
                backend,
                attempt,
                // Every node's checks on threads of this process.
                worker: None,
                // One store for the group, which judges the group's report after.
                history: None,
                ..setup.node_setup(n)
            })
        })
        .collect::<Result<_, Failure>>()?;
    let fabric = Arc::new(Fabric::new(&script, &node_ips(&nodes)));
    let group = SimulatedGroup {
        plan,
        nodes,
        fabric,
        node_faults: script.node_faults.clone(),
        rails: rails(&*setup.backend),
    };
    let mut progress = Progress::new(setup.show_progress);
    let run = run_simulated(&group, &mut |event| {
        observe_group(&mut progress, event);
    })
    .map_err(|err| Failure::bug_from("cannot run the group in this process", err))?;
    for (node, fault) in &run.played {
        note(format!(
            "{node}: scripted {} at the start of `{}`",
            match fault.fault {
                gpuvet_model::config::NodeFaultKind::Hang => "hang",
                gpuvet_model::config::NodeFaultKind::Crash => "crash",
            },
            fault.check
        ));
    }
    progress.observe(RunnerEvent::RunFinished {
        report: &run.report,
    });
    Ok(run.report)
}

fn spawn_local_agent(
    exe: &PathBuf,
    setup: &Setup<'_>,
    rank: u32,
    n: u32,
    port: u16,
    token: &Token,
    visible_gpus: Option<&str>,
) -> std::io::Result<Child> {
    let args = setup.args;
    let mut command = Command::new(exe);
    if let Some(visible) = visible_gpus {
        command.env("CUDA_VISIBLE_DEVICES", visible);
    }
    command.args(["check", "--no-store", "--json", "--join-only"]);
    if let Some(config) = &args.config {
        command.arg("--config").arg(config);
    }
    // The backend this process settled on, not the flag: agents then neither choose
    // differently nor repeat why `auto` fell back (the note is shown once, here).
    command.args(["--backend", setup.backend.name()]);
    if let Some(devices) = args.cpu_devices {
        command.args(["--cpu-devices", &devices.to_string()]);
    }
    if let Some(checks) = &args.checks {
        command.args(["--checks", checks]);
    }
    if let Some(timeout) = args.timeout {
        command.args(["--timeout", &timeout.to_string()]);
    }
    command
        .args(["--node-rank", &rank.to_string(), "--nnodes", &n.to_string()])
        .args([
            "--master-addr",
            "127.0.0.1",
            "--gpuvet-port",
            &port.to_string(),
        ])
        .args(["--data-addr", "127.0.0.1"])
        .arg("--python")
        .arg(&args.group.python)
        .args([
            "--rendezvous-timeout",
            &args.group.rendezvous_timeout.to_string(),
        ])
        .env("GPUVET_TOKEN", token.reveal())
        .env("GPUVET_JOB_ID", &setup.attempt.job_id)
        .env("GPUVET_NODE", format!("local-{rank}"))
        .env(LOCAL_AGENT_ENV, "1")
        .env_remove("GPUVET_DATA_ADDR")
        .env_remove("GPUVET_LISTEN_ADDR")
        // Only this process holds the pipe's write end: the agent exits when it
        // closes, and the kernel kills the agent when this (main) thread ends.
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    die_with_parent(&mut command);
    command.spawn()
}

/// In an agent that `--local-nodes` spawned: exit as soon as the parent is gone, so
/// no agent waits out its rendezvous timeout alone. The parent-death signal does the
/// same; the pipe also covers a parent that died before the signal was armed.
pub fn exit_with_local_parent() {
    if std::env::var_os(LOCAL_AGENT_ENV).is_none() {
        return;
    }
    let watching = when_closed(std::io::stdin(), || {
        warn("the `--local-nodes` gpuvet that started this agent is gone; the agent exits");
        std::process::exit(exit_codes::CHECK_FAILED);
    });
    if let Err(err) = watching {
        warn(format!("cannot watch the parent gpuvet's pipe: {err}"));
    }
}

fn kill_all(children: &mut [Child]) {
    for child in children {
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

/// Runs the group on this coordinator with progress on stderr, then waits briefly for
/// the agents to say goodbye so none misses the verdict. Returns the report and when
/// waiting on agents must end.
fn coordinate(
    coordinator: &Coordinator,
    plan: &GroupPlan,
    show_progress: bool,
) -> (RunReport, Instant) {
    let mut progress = Progress::new(show_progress);
    let report = run_group(coordinator, plan, &mut |event| {
        observe_group(&mut progress, event);
    });
    let stop_by = Instant::now() + AFTER_VERDICT_WAIT;
    progress.observe(RunnerEvent::RunFinished { report: &report });
    wait_for_goodbyes(coordinator, stop_by);
    (report, stop_by)
}

/// The group's progress on stderr.
fn observe_group(progress: &mut Progress, event: GroupEvent<'_>) {
    match event {
        GroupEvent::Rendezvous { joined, expected } => {
            note(format!("group: {joined} of {expected} nodes joined"));
        }
        GroupEvent::Refused(peer) => warn(peer.describe()),
        // The detail names its rank already (`rank 3 (local-3) is unresponsive: …`).
        GroupEvent::Incident(incident) => {
            let rank = format!("rank {}", incident.rank);
            if incident.detail.starts_with(&rank) {
                warn(&incident.detail);
            } else {
                warn(format!(
                    "{rank} ({}): {}",
                    incident.node.as_deref().unwrap_or("?"),
                    incident.detail
                ));
            }
        }
        GroupEvent::CheckStarted { index, total, name } => {
            progress.observe(RunnerEvent::CheckStarted { index, total, name });
        }
        GroupEvent::CheckFinished {
            index,
            total,
            result,
        } => progress.observe(RunnerEvent::CheckFinished {
            index,
            total,
            result,
        }),
    }
}

/// One rail per device, as many as NICs a GPU node usually pairs with its GPUs.
fn rails(backend: &dyn Backend) -> usize {
    backend.devices().len().clamp(1, 8)
}

/// A node's part: join the coordinator, serve it, and leave.
struct Member<'a> {
    rendezvous: &'a Rendezvous,
    token: &'a Token,
    plane: Plane<'a>,
    node: NodeSetup,
    rendezvous_timeout: Duration,
    run_timeout: Duration,
}

/// A member's data plane: bound already, or to be bound once the coordinator, reached
/// over loopback from `route`, has said whether it listens on loopback only (see
/// `data_plane_ip`).
enum Plane<'a> {
    Bound(&'a DataPlane),
    OnLoopback {
        route: IpAddr,
        rails: usize,
        interfaces: &'a [String],
    },
}

/// Why a member has no verdict from its group; it goes into the member's report as
/// text, with its causes.
#[derive(Debug, thiserror::Error)]
enum Unjoined {
    #[error(transparent)]
    Group(#[from] GroupError),
    #[error(transparent)]
    NodeInfo(#[from] serde_json::Error),
    #[error("cannot join the group at `{endpoint}`")]
    Join {
        endpoint: Endpoint,
        #[source]
        source: ClusterError,
    },
}

impl Member<'_> {
    fn join_and_serve(&self) -> Result<RunReport, Unjoined> {
        let started = Instant::now();
        let mut bound_now: Option<DataPlane> = None;
        let endpoint: Endpoint = self.rendezvous.coordinator_endpoint();
        let identify: Identify<'_> = Box::new(|coordinator| {
            let plane = match &self.plane {
                Plane::Bound(plane) => *plane,
                Plane::OnLoopback {
                    route,
                    rails,
                    interfaces,
                } => &*bound_now.insert(DataPlane::bind(
                    data_plane_ip(None, *route, coordinator),
                    *rails,
                    interfaces,
                )?),
            };
            Ok(self.identity(plane)?)
        });
        let agent = Agent::connect_with(
            &endpoint,
            identify,
            self.token,
            AgentOptions::default(),
            started + self.rendezvous_timeout,
        )
        .map_err(|source| Unjoined::Join {
            endpoint: endpoint.clone(),
            source,
        })?;
        let plane = match &self.plane {
            Plane::Bound(plane) => *plane,
            // `connect_with` joins only with the identity `identify` made.
            Plane::OnLoopback { .. } => bound_now
                .as_ref()
                .expect("the data plane is bound before the agent joins"),
        };
        // The verdict comes after the rendezvous and every check; the margin covers the
        // coordinator's own waits.
        let deadline =
            started + self.rendezvous_timeout + self.run_timeout + Duration::from_secs(30);
        let result = serve(&agent, &self.node, plane, deadline);
        agent.leave("the run is over");
        Ok(result?)
    }

    /// How this member introduces itself, with the data plane it listens on.
    fn identity(&self, plane: &DataPlane) -> Result<AgentIdentity, Unjoined> {
        let info = plane.node_info(&*self.node.backend, host_id())?;
        Ok(AgentIdentity {
            job_id: self.node.attempt.job_id.clone(),
            rank: self.rendezvous.rank,
            nnodes: self.rendezvous.nnodes,
            node: self.node.attempt.node.clone(),
            data_addr: Some(plane.addr()?),
            info: gpuvet_control::Body::to(&info)?,
        })
    }
}

/// The group's verdict as this node records it: the same checks and group, under this
/// node's own attempt, with this node's devices.
fn as_this_node(mut report: RunReport, attempt: &Attempt, backend: &dyn Backend) -> RunReport {
    report.devices = backend.devices().to_vec();
    report.job_id.clone_from(&attempt.job_id);
    report.attempt = attempt.attempt;
    report.node.clone_from(&attempt.node);
    report.instance.clone_from(&attempt.instance);
    report
}

/// The report of a node that got no verdict: every check `not_run`, saying why.
fn no_verdict(setup: &Setup<'_>, why: &str) -> RunReport {
    let reason = format!("the group did not finish: {why}");
    let checks: Vec<CheckResult> = setup
        .checks
        .iter()
        .map(|&name| CheckResult::without_work(name, CheckStatus::NotRun, reason.clone()))
        .collect();
    RunReport {
        report_id: String::new(),
        gpuvet_version: env!("CARGO_PKG_VERSION").to_owned(),
        job_id: setup.attempt.job_id.clone(),
        attempt: setup.attempt.attempt,
        node: setup.attempt.node.clone(),
        instance: setup.attempt.instance.clone(),
        backend: setup.backend.name().to_owned(),
        devices: setup.backend.devices().to_vec(),
        started_at_ms: unix_now_ms(),
        duration_secs: 0.0,
        timeout_secs: setup.timeout.as_secs_f64(),
        outcome: Outcome::Failed,
        checks,
        group: Some(GroupSummary {
            size: None,
            nodes: Vec::new(),
            first_error: None,
            secondary: Vec::new(),
            other_failures: Vec::new(),
            timeline: None,
        }),
        context: None,
        diagnosis: None,
        repeat_offender: None,
    }
}

/// The machine's boot id: agents that share it share the machine (namespaces and
/// containers included).
fn host_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broken_pipe() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::EPIPE)
    }

    /// A member without a verdict writes why into its report: the causes are sources
    /// now, and the text with them is what the report said when they were part of
    /// each message.
    #[test]
    fn why_a_member_has_no_verdict_reads_as_before_with_every_cause() {
        let lost = Unjoined::Group(GroupError::CoordinatorLost {
            source: ClusterError::Io {
                context: "cannot send a `reply` message".to_owned(),
                source: broken_pipe(),
            },
        });
        assert_eq!(
            with_causes(&lost),
            format!(
                "lost the coordinator before the group's verdict: cannot send a `reply` \
                 message: {}",
                broken_pipe()
            )
        );
        let endpoint = Endpoint {
            host: "10.0.0.1".to_owned(),
            port: 29400,
        };
        let unjoined = Unjoined::Join {
            endpoint,
            source: ClusterError::Refused {
                reason: "rank `1` is taken".to_owned(),
            },
        };
        assert_eq!(
            with_causes(&unjoined),
            "cannot join the group at `10.0.0.1:29400`: the coordinator refused this agent: \
             rank `1` is taken"
        );
        let no_route = NoRoute(ClusterError::Io {
            context: "cannot find the route to the coordinator at `c:1`".to_owned(),
            source: broken_pipe(),
        });
        assert_eq!(
            with_causes(&no_route),
            format!(
                "cannot choose the data plane's address (set `--data-addr` to say): cannot \
                 find the route to the coordinator at `c:1`: {}",
                broken_pipe()
            )
        );
    }
}
