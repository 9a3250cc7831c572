//! The validated configuration: what every other crate reads. Fields hold only values
//! that passed validation (`validate`), so readers never check them again.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::analysis::Limit;
use crate::catalog::CheckName;
use crate::inventory::ExpectedInventory;
use crate::pairing::PairingMode;

use super::raw::RawList;
use super::validate::parse_checks;
use super::{ConfigError, MAX_TIMEOUT_MINUTES};

/// What happens when a sanity check fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailAction {
    /// Do not start the instance (PAI's default).
    Fail,
    /// Record the event and start anyway (PAI's `retain`; `ignore` is an alias).
    Retain,
    /// Record, run the rebuild hook, and exit so the instance is rebuilt elsewhere.
    Rebuild,
}

impl FailAction {
    pub fn as_str(self) -> &'static str {
        match self {
            FailAction::Fail => "fail",
            FailAction::Retain => "retain",
            FailAction::Rebuild => "rebuild",
        }
    }
}

/// Which backend runs the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// The best backend this machine has.
    Auto,
    Cuda,
    Cpu,
    Sim,
}

impl BackendChoice {
    pub const NAMES: [&'static str; 4] = ["auto", "cuda", "cpu", "sim"];

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "auto" => Some(BackendChoice::Auto),
            "cuda" => Some(BackendChoice::Cuda),
            "cpu" => Some(BackendChoice::Cpu),
            "sim" => Some(BackendChoice::Sim),
            _ => None,
        }
    }
}

/// GEMM element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// bf16 on GPUs, fp32 where the backend has no bf16 GEMM.
    Auto,
    Bf16,
    Fp16,
    Tf32,
    Fp32,
    Fp8,
}

impl Dtype {
    pub const NAMES: [&'static str; 6] = ["auto", "bf16", "fp16", "tf32", "fp32", "fp8"];

    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "auto" => Dtype::Auto,
            "bf16" => Dtype::Bf16,
            "fp16" => Dtype::Fp16,
            "tf32" => Dtype::Tf32,
            "fp32" => Dtype::Fp32,
            "fp8" => Dtype::Fp8,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// The validated sanity-check list: at least one check, none twice, in the given order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckList(pub(super) Vec<CheckName>);

impl CheckList {
    /// Parses a comma-separated list as PAI writes it (e.g. from a `--checks` flag);
    /// errors name `path`.
    pub fn parse(text: &str, path: &str) -> Result<CheckList, ConfigError> {
        parse_checks(RawList::Text(text.to_owned()), path)
    }

    pub fn as_slice(&self) -> &[CheckName] {
        &self.0
    }
}

/// A validated overall timeout: positive and at most a day.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeout(pub(super) Duration);

impl Timeout {
    /// Validates a timeout in minutes; errors name `path`.
    pub fn from_minutes(minutes: f64, path: &str) -> Result<Timeout, ConfigError> {
        if !minutes.is_finite() || minutes <= 0.0 || minutes > MAX_TIMEOUT_MINUTES {
            return Err(ConfigError::invalid(
                path,
                format!("`{minutes}` is not a usable timeout; expected minutes greater than 0 and at most {MAX_TIMEOUT_MINUTES}"),
            )
            .with_hint("the timeout covers all sanity checks together, in minutes; PAI's default is 5"));
        }
        Ok(Timeout(Duration::from_secs_f64(minutes * 60.0)))
    }

    pub fn duration(self) -> Duration {
        self.0
    }
}

/// `aimaster.sanity_check`.
#[derive(Debug, Clone, PartialEq)]
pub struct SanityConfig {
    pub checks: CheckList,
    pub fail_action: FailAction,
    pub timeout: Timeout,
}

/// `aimaster.runtime_check`. PAI offers `c4d` with `retain` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    pub check: &'static str,
    pub fail_action: RuntimeFailAction,
}

/// What happens when the runtime check finds a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeFailAction {
    /// Record the event only (PAI's only choice; `ignore` is an alias).
    Retain,
    /// Beyond PAI, opt-in: on a fatal finding (one that needs a GPU reset, a reboot or
    /// support), stop the app with SIGTERM so the orchestrator restarts it elsewhere.
    Kill,
}

/// A scripted fault for the sim backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SimFault {
    /// The work never returns.
    Hang,
    /// The work returns an error.
    Error,
    /// The work returns a wrong result.
    WrongResult,
    /// The work does nothing.
    Zero,
}

impl SimFault {
    pub const NAMES: [&'static str; 4] = ["hang", "error", "wrong_result", "zero"];
}

/// What happens to a whole node of a group in one process when a check starts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeFaultKind {
    /// The node goes silent, as a stopped process does.
    Hang,
    /// The node's connections close without a word, as when its process dies.
    Crash,
}

impl NodeFaultKind {
    pub const NAMES: [&'static str; 2] = ["hang", "crash"];
}

/// A node fault and the check whose start sets it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NodeFault {
    pub check: CheckName,
    pub fault: NodeFaultKind,
}

/// The sim backend's script: every device's speed and faults, deterministic by seed.
#[derive(Debug, Clone, PartialEq)]
pub struct SimScript {
    pub seed: u64,
    pub devices: u32,
    /// Relative noise of each sample, as a fraction.
    pub noise: f64,
    /// Speed factor per device index (1.0 is nominal, 0.9 is 10 % slow).
    pub speed: BTreeMap<u32, f64>,
    /// Speed factor of every device of the node with this name, on top of `speed`: a
    /// slow node in a group whose nodes share one config (`--local-nodes`, drills).
    pub node_speed: BTreeMap<String, f64>,
    /// Speed factor of one device of one node: a slow GPU in a group that shares one
    /// config.
    pub node_device_speed: BTreeMap<String, BTreeMap<u32, f64>>,
    /// How many devices one node has, instead of `devices`: an inventory mismatch.
    pub node_devices: BTreeMap<String, u32>,
    /// Speed factor of the link between two nodes (the names in order): a slow cable
    /// or switch port. Played by a group in one process, whose data plane is simulated.
    pub link_speed: BTreeMap<(String, String), f64>,
    /// Speed factor of one rail (NIC) of one node. Played by a group in one process.
    pub node_rail_speed: BTreeMap<String, BTreeMap<u32, f64>>,
    /// A whole node that hangs or crashes. Played by a group in one process.
    pub node_faults: BTreeMap<String, NodeFault>,
    pub faults: Vec<(CheckName, u32, SimFault)>,
}

impl SimScript {
    /// The parts of the script only a group in one process can play: the simulated
    /// network's links and rails, and whole-node faults, by their config keys.
    pub fn group_only_keys(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if !self.link_speed.is_empty() {
            keys.push("link_speed");
        }
        if !self.node_rail_speed.is_empty() {
            keys.push("node_rail_speed");
        }
        if !self.node_faults.is_empty() {
            keys.push("node_faults");
        }
        keys
    }

    /// The script as node `node` plays it: its device count, and its `node_speed` and
    /// `node_device_speed` folded into each device's speed.
    pub fn for_node(mut self, node: &str) -> SimScript {
        if let Some(devices) = self.node_devices.get(node).copied() {
            self.devices = devices;
            self.speed.retain(|device, _| *device < devices);
        }
        if let Some(factor) = self.node_speed.get(node).copied() {
            for device in 0..self.devices {
                let speed = self.speed.entry(device).or_insert(1.0);
                *speed *= factor;
            }
        }
        if let Some(devices) = self.node_device_speed.get(node) {
            for (&device, &factor) in devices {
                if device < self.devices {
                    *self.speed.entry(device).or_insert(1.0) *= factor;
                }
            }
        }
        self
    }
}

impl Default for SimScript {
    fn default() -> Self {
        SimScript {
            seed: 0,
            devices: 8,
            noise: 0.0,
            speed: BTreeMap::new(),
            node_speed: BTreeMap::new(),
            node_device_speed: BTreeMap::new(),
            node_devices: BTreeMap::new(),
            link_speed: BTreeMap::new(),
            node_rail_speed: BTreeMap::new(),
            node_faults: BTreeMap::new(),
            faults: Vec::new(),
        }
    }
}

/// gpuvet's own settings (`gpuvet` key).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub backend: BackendChoice,
    /// Allowed deficit against the peer median, as a fraction; `None`: the backend's
    /// default.
    pub tolerance: Option<f64>,
    pub baselines: BTreeMap<CheckName, Limit>,
    pub store: Option<String>,
    /// The base addresses of the `gpuvet serve` replicas that reports and events are
    /// pushed to (`gpuvet.report_to`, one address or a list), each without a trailing
    /// slash, in the order given, none twice; empty: nothing is pushed.
    pub report_to: Vec<String>,
    /// The CA that signs the server's certificate, when `report_to` is `https://`
    /// (`gpuvet.report_ca`, a PEM file); `None`: the system's CAs.
    pub report_ca: Option<std::path::PathBuf>,
    /// How many days a fleet server keeps attempts, reports and events
    /// (`gpuvet.keep_days`); `None`: forever. Read by `gpuvet serve` only.
    pub keep_days: Option<u32>,
    /// The command run when `fail_action` is `rebuild`; never empty.
    pub rebuild_hook: Option<Vec<String>>,
    pub cpu_devices: Option<u32>,
    pub gemm_dtype: Dtype,
    pub gemm_size: Option<u32>,
    pub collective_bytes: Option<u64>,
    /// How the `_2` checks pair nodes (`gpuvet.pairing`: `adaptive` or `full`).
    pub pairing: PairingMode,
    /// Network interfaces `network_connectivity` also probes every pair on (e.g. the
    /// front-end and back-end networks), beside the data plane's own address.
    pub interfaces: Vec<String>,
    /// What every node must have, for `inventory_consistency` (`gpuvet.expected_inventory`).
    pub expected_inventory: ExpectedInventory,
    pub sim: Option<SimScript>,
    pub watch: WatchSettings,
    /// What gpuvet does in a Kubernetes cluster (`gpuvet.kubernetes`), with the binary's
    /// feature `k8s`.
    pub kubernetes: KubernetesSettings,
    /// What gpuvet does under Slurm (`gpuvet.slurm`): drain and requeue on `rebuild`.
    pub slurm: SlurmSettings,
    /// When a node is a repeat offender (`gpuvet.repeat_offender`): flagged in its
    /// report and events, and held in quarantine until it passes twice in a row.
    pub repeat_offender: crate::offenders::RepeatOffenderPolicy,
    /// How each GPU is judged against its own record (`gpuvet.history`).
    pub history: crate::history::HistoryPolicy,
    /// Where the baselines not in `baselines` come from (`gpuvet.baseline_from`).
    pub baseline_from: BaselineFrom,
}

/// `gpuvet.baseline_from`: the built-in table of published figures (`builtin`, the
/// default), or the fleet's, learned by the server of `report_to` (`server`), with the
/// built-in table where the fleet has none or the server cannot be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BaselineFrom {
    #[default]
    Builtin,
    Server,
}

/// `gpuvet.slurm`: whether gpuvet acts on the Slurm cluster it runs in (when
/// `SLURM_JOB_ID` is set), and the circuit breaker of its drains, with the same keys
/// and defaults as `gpuvet.kubernetes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlurmSettings {
    /// `enabled`: `"auto"` (default: inside a Slurm job) or `"off"`.
    pub enabled: bool,
    pub quarantine: QuarantinePolicy,
}

impl Default for SlurmSettings {
    fn default() -> Self {
        SlurmSettings {
            enabled: true,
            quarantine: QuarantinePolicy::default(),
        }
    }
}

/// `gpuvet.kubernetes`: whether a gpuvet built with the feature `k8s` acts on the
/// cluster it runs in, and the circuit breaker of its node quarantine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KubernetesSettings {
    /// `enabled`: `"auto"` (default: when the pod's service account and environment
    /// are there) or `"off"`.
    pub enabled: bool,
    pub quarantine: QuarantinePolicy,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        KubernetesSettings {
            enabled: true,
            quarantine: QuarantinePolicy::default(),
        }
    }
}

/// `gpuvet.kubernetes.quarantine`: at most `max_share` of the cluster's nodes may be
/// quarantined (tainted by gpuvet) within `window`; past that, the rebuild action
/// refuses to taint another and says why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuarantinePolicy {
    /// A fraction in (0, 1]: `max_share_pct` / 100. Default 0.5.
    pub max_share: f64,
    /// Default 5 minutes.
    pub window: Duration,
}

impl Default for QuarantinePolicy {
    fn default() -> Self {
        QuarantinePolicy {
            max_share: 0.5,
            window: Duration::from_secs(5 * 60),
        }
    }
}

/// Where the runtime check `c4d` looks (`gpuvet.watch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSettings {
    /// The kernel log to read `NVRM: Xid` lines from; `None` when turned off (`"off"`).
    pub kmsg: Option<String>,
    /// Whether to poll NVML (used only where the driver's library loads).
    pub nvml: bool,
    /// Time between polls.
    pub interval: Duration,
    /// Where to serve Prometheus `/metrics`; `None`: not served.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Where to ask NCCL's RAS port about ranks that stopped.
    pub nccl_ras: NcclRas,
}

/// `gpuvet.watch.nccl_ras`: `"auto"` (default: `NCCL_RAS_ADDR`, else
/// `localhost:28028`), `"off"`, or a `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NcclRas {
    Auto,
    Off,
    At(String),
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            kmsg: Some("/dev/kmsg".to_owned()),
            nvml: true,
            interval: Duration::from_secs(1),
            metrics_addr: None,
            nccl_ras: NcclRas::Auto,
        }
    }
}

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `None` when the file has an `aimaster` block without `sanity_check`: PAI then
    /// runs no pre-start check.
    pub sanity: Option<SanityConfig>,
    pub runtime: Option<RuntimeConfig>,
    pub settings: Settings,
}
