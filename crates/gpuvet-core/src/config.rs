//! The configuration file: PAI-EAS's `aimaster` JSON, accepted verbatim, plus gpuvet's
//! own settings under a `gpuvet` key.
//!
//! Parsing happens in two steps. Serde reads the file into raw structs that mirror the
//! JSON; `validate` then turns them into [`Config`], whose fields cannot hold a bad
//! value. Every error names the JSON path and says what would be accepted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Deserialize;

use crate::analysis::Limit;
use crate::catalog::{CheckName, DEFAULT_CHECKS, Direction, RUNTIME_CHECK_C4D, closest};
use crate::inventory::ExpectedInventory;
use crate::pairing::PairingMode;

/// The defaults, written out as a config file. `Config::default()` is this file parsed.
pub const DEFAULT_CONFIG_JSON: &str = r#"{
  "aimaster": {
    "sanity_check": {
      "fail_action": "fail",
      "micro_benchmarks": "gemm_flops,all_reduce_1,all_reduce_2",
      "timeout": 5
    }
  },
  "gpuvet": {
    "backend": "auto"
  }
}"#;

/// Default overall timeout for the sanity checks, in minutes (PAI's default).
pub const DEFAULT_TIMEOUT_MINUTES: f64 = 5.0;
/// Longest accepted overall timeout, in minutes: one day.
pub const MAX_TIMEOUT_MINUTES: f64 = 24.0 * 60.0;
/// Allowed deficit against the peer median, in percent, for GPUs (SuperBench's rule).
/// Backends whose devices are noisier by nature (shared host cores) propose their own;
/// `gpuvet.tolerance_pct` overrides both.
pub const DEFAULT_TOLERANCE_PCT: f64 = 5.0;

/// The largest config accepted, checked before parsing (and by the binary before
/// reading): PAI's file is a few hundred bytes, a full `gpuvet` section a few KiB.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// A configuration error, with where it is and what would be accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("the config is not valid JSON: {message} (line {line}, column {column})")]
    Syntax {
        message: String,
        line: usize,
        column: usize,
    },
    #[error("the config has more than `{limit}` bytes")]
    TooLarge { limit: usize },
    #[error("invalid config at `{path}`: {message}")]
    Invalid {
        path: String,
        message: String,
        hint: Option<String>,
    },
}

impl ConfigError {
    fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            path: path.into(),
            message: message.into(),
            hint: None,
        }
    }

    fn with_hint(self, hint: impl Into<String>) -> Self {
        match self {
            ConfigError::Invalid { path, message, .. } => ConfigError::Invalid {
                path,
                message,
                hint: Some(hint.into()),
            },
            other => other,
        }
    }

    /// What the user could do next, when there is something specific to say.
    pub fn hint(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { hint, .. } => hint.as_deref(),
            ConfigError::Syntax { .. } => None,
            ConfigError::TooLarge { .. } => Some(
                "a PAI config with its `gpuvet` section is a few KiB; check that the file is the config",
            ),
        }
    }
}

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
pub struct CheckList(Vec<CheckName>);

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
pub struct Timeout(Duration);

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

/// The sim backend's script: every device's speed and faults, deterministic by seed.
#[derive(Debug, Clone, PartialEq)]
pub struct SimScript {
    pub seed: u64,
    pub devices: u32,
    /// Relative noise of each sample, as a fraction.
    pub noise: f64,
    /// Speed factor per device index (1.0 is nominal, 0.9 is 10 % slow).
    pub speed: BTreeMap<u32, f64>,
    pub faults: Vec<(CheckName, u32, SimFault)>,
}

impl Default for SimScript {
    fn default() -> Self {
        SimScript {
            seed: 0,
            devices: 8,
            noise: 0.0,
            speed: BTreeMap::new(),
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

impl Default for Config {
    fn default() -> Self {
        Config::from_json(DEFAULT_CONFIG_JSON).expect("the default config is valid")
    }
}

impl Config {
    /// Parses and validates a config file's text.
    /// Text over [`MAX_CONFIG_BYTES`] is refused unparsed.
    pub fn from_json(text: &str) -> Result<Config, ConfigError> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                limit: MAX_CONFIG_BYTES,
            });
        }
        let deserializer = &mut serde_json::Deserializer::from_str(text);
        let raw: RawFile = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            if inner.is_syntax() || inner.is_eof() || path == "." {
                let message = inner.to_string();
                let message = message
                    .split(" at line ")
                    .next()
                    .unwrap_or(&message)
                    .to_owned();
                ConfigError::Syntax {
                    message,
                    line: inner.line(),
                    column: inner.column(),
                }
            } else {
                let message = inner.to_string();
                let message = message
                    .split(" at line ")
                    .next()
                    .unwrap_or(&message)
                    .to_owned();
                ConfigError::invalid(path, message)
            }
        })?;
        validate(raw)
    }

    /// The sanity settings to use when checks are run by hand: the configured ones, or
    /// PAI's defaults.
    pub fn sanity_or_default(&self) -> SanityConfig {
        self.sanity.clone().unwrap_or_else(default_sanity)
    }
}

fn default_sanity() -> SanityConfig {
    SanityConfig {
        checks: CheckList(DEFAULT_CHECKS.to_vec()),
        fail_action: FailAction::Fail,
        timeout: Timeout(Duration::from_secs_f64(DEFAULT_TIMEOUT_MINUTES * 60.0)),
    }
}

// ---- raw JSON shapes ---------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    aimaster: Option<RawAimaster>,
    gpuvet: Option<RawSettings>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAimaster {
    runtime_check: Option<RawRuntime>,
    sanity_check: Option<RawSanity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSanity {
    fail_action: Option<String>,
    micro_benchmarks: Option<RawList>,
    timeout: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRuntime {
    fail_action: Option<String>,
    micro_benchmarks: Option<RawList>,
}

/// PAI writes a comma-separated string; a JSON array is accepted too.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawList {
    Text(String),
    Items(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    backend: Option<String>,
    tolerance_pct: Option<f64>,
    baselines: Option<BTreeMap<String, RawLimit>>,
    store: Option<String>,
    rebuild_hook: Option<RawCommand>,
    cpu_devices: Option<u32>,
    gemm: Option<RawGemm>,
    collective_bytes: Option<u64>,
    pairing: Option<String>,
    interfaces: Option<Vec<String>>,
    expected_inventory: Option<ExpectedInventory>,
    sim: Option<RawSim>,
    watch: Option<RawWatch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatch {
    kmsg: Option<String>,
    nvml: Option<bool>,
    interval_ms: Option<u64>,
    metrics_addr: Option<String>,
    nccl_ras: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    floor: Option<f64>,
    ceiling: Option<f64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawCommand {
    Shell(String),
    Argv(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGemm {
    dtype: Option<String>,
    size: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSim {
    seed: Option<u64>,
    devices: Option<u32>,
    noise_pct: Option<f64>,
    speed: Option<BTreeMap<String, f64>>,
    faults: Option<Vec<RawFault>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    check: String,
    device: u32,
    fault: String,
}

// ---- validation --------------------------------------------------------------------

fn validate(raw: RawFile) -> Result<Config, ConfigError> {
    let (sanity, runtime) = match raw.aimaster {
        None => (Some(default_sanity()), None),
        Some(aimaster) => {
            let sanity = aimaster.sanity_check.map(validate_sanity).transpose()?;
            let runtime = aimaster.runtime_check.map(validate_runtime).transpose()?;
            (sanity, runtime)
        }
    };
    let settings = validate_settings(raw.gpuvet)?;
    Ok(Config {
        sanity,
        runtime,
        settings,
    })
}

fn validate_sanity(raw: RawSanity) -> Result<SanityConfig, ConfigError> {
    const PATH: &str = "aimaster.sanity_check";
    let fail_action = match raw.fail_action.as_deref() {
        None => FailAction::Fail,
        Some(text) => parse_fail_action(text, &format!("{PATH}.fail_action"))?,
    };
    let checks = match raw.micro_benchmarks {
        None => CheckList(DEFAULT_CHECKS.to_vec()),
        Some(list) => parse_checks(list, &format!("{PATH}.micro_benchmarks"))?,
    };
    let timeout = Timeout::from_minutes(
        raw.timeout.unwrap_or(DEFAULT_TIMEOUT_MINUTES),
        &format!("{PATH}.timeout"),
    )?;
    Ok(SanityConfig {
        checks,
        fail_action,
        timeout,
    })
}

fn parse_fail_action(text: &str, path: &str) -> Result<FailAction, ConfigError> {
    const ACCEPTED: [(&str, FailAction); 4] = [
        ("fail", FailAction::Fail),
        ("retain", FailAction::Retain),
        ("ignore", FailAction::Retain),
        ("rebuild", FailAction::Rebuild),
    ];
    if let Some((_, action)) = ACCEPTED.iter().find(|(name, _)| *name == text) {
        return Ok(*action);
    }
    Err(unknown_value(
        path,
        text,
        &["fail", "retain", "ignore", "rebuild"],
    ))
}

fn unknown_value(path: &str, value: &str, accepted: &[&'static str]) -> ConfigError {
    let list = accepted
        .iter()
        .map(|a| format!("`{a}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let error = ConfigError::invalid(
        path,
        format!("unknown value `{value}`; expected one of {list}"),
    );
    match closest(value, accepted.iter().map(|a| (*a, *a))) {
        Some(suggestion) => error.with_hint(format!("did you mean `{suggestion}`?")),
        None => error,
    }
}

fn list_items(list: RawList) -> Vec<String> {
    match list {
        RawList::Text(text) => text.split(',').map(|item| item.trim().to_owned()).collect(),
        RawList::Items(items) => items
            .into_iter()
            .map(|item| item.trim().to_owned())
            .collect(),
    }
}

fn parse_checks(list: RawList, path: &str) -> Result<CheckList, ConfigError> {
    let items = list_items(list);
    if items.iter().all(String::is_empty) {
        return Err(ConfigError::invalid(path, "the list of checks is empty")
            .with_hint("name at least one check, e.g. `gemm_flops,all_reduce_1,all_reduce_2`, or leave the key out for PAI's default set"));
    }
    let mut checks = Vec::with_capacity(items.len());
    let mut seen = BTreeSet::new();
    for (position, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{position}]");
        if item.is_empty() {
            return Err(ConfigError::invalid(
                item_path,
                "empty check name (a stray comma?)",
            ));
        }
        let name: CheckName = item.parse().map_err(|err: crate::catalog::UnknownCheck| {
            let error = ConfigError::invalid(&item_path, format!("unknown check `{}`", err.name));
            match err.suggestion {
                Some(suggestion) => error.with_hint(format!("did you mean `{suggestion}`?")),
                None => error.with_hint(format!(
                    "the checks are: {}",
                    CheckName::ALL
                        .iter()
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        })?;
        if !seen.insert(name) {
            return Err(
                ConfigError::invalid(item_path, format!("check `{name}` is listed twice"))
                    .with_hint("each check runs once; remove the repeat"),
            );
        }
        checks.push(name);
    }
    Ok(CheckList(checks))
}

fn validate_runtime(raw: RawRuntime) -> Result<RuntimeConfig, ConfigError> {
    const PATH: &str = "aimaster.runtime_check";
    let fail_action = match raw.fail_action.as_deref() {
        None | Some("retain") | Some("ignore") => RuntimeFailAction::Retain,
        Some("kill") => RuntimeFailAction::Kill,
        Some(text) => {
            return Err(unknown_value(&format!("{PATH}.fail_action"), text, &["retain", "ignore", "kill"])
                .with_hint("PAI's runtime check only records events (`retain`); `kill` also stops the app on a fatal finding"));
        }
    };
    let path = format!("{PATH}.micro_benchmarks");
    let items = raw
        .micro_benchmarks
        .map(list_items)
        .unwrap_or_else(|| vec![RUNTIME_CHECK_C4D.to_owned()]);
    match items.as_slice() {
        [only] if only.eq_ignore_ascii_case(RUNTIME_CHECK_C4D) => Ok(RuntimeConfig {
            check: RUNTIME_CHECK_C4D,
            fail_action,
        }),
        [] => Err(
            ConfigError::invalid(path, "the list of runtime checks is empty")
                .with_hint("use `c4d`"),
        ),
        [only] => {
            let hint = if CheckName::ALL.iter().any(|n| n.as_str() == only) {
                format!(
                    "`{only}` is a sanity check; put it in `aimaster.sanity_check.micro_benchmarks`"
                )
            } else {
                "the only runtime check is `c4d`".to_owned()
            };
            Err(ConfigError::invalid(
                path,
                format!("unknown runtime check `{only}`; expected `c4d`"),
            )
            .with_hint(hint))
        }
        _ => Err(ConfigError::invalid(
            path,
            format!(
                "expected the single runtime check `c4d`, got `{}`",
                items.join(",")
            ),
        )),
    }
}

fn validate_settings(raw: Option<RawSettings>) -> Result<Settings, ConfigError> {
    let raw = raw.unwrap_or(RawSettings {
        backend: None,
        tolerance_pct: None,
        baselines: None,
        store: None,
        rebuild_hook: None,
        cpu_devices: None,
        gemm: None,
        collective_bytes: None,
        pairing: None,
        interfaces: None,
        expected_inventory: None,
        sim: None,
        watch: None,
    });
    let backend = match raw.backend.as_deref() {
        None => BackendChoice::Auto,
        Some(text) => BackendChoice::parse(text)
            .ok_or_else(|| unknown_value("gpuvet.backend", text, &BackendChoice::NAMES))?,
    };
    if let Some(tolerance_pct) = raw.tolerance_pct
        && !(tolerance_pct.is_finite() && tolerance_pct > 0.0 && tolerance_pct < 100.0)
    {
        return Err(ConfigError::invalid(
            "gpuvet.tolerance_pct",
            format!(
                "`{tolerance_pct}` is out of range; expected a percentage greater than 0 and below 100"
            ),
        ));
    }
    let mut baselines = BTreeMap::new();
    for (name, limit) in raw.baselines.unwrap_or_default() {
        let path = format!("gpuvet.baselines.{name}");
        let check: CheckName = name.parse().map_err(|err: crate::catalog::UnknownCheck| {
            let error = ConfigError::invalid(&path, format!("unknown check `{name}`"));
            match err.suggestion {
                Some(s) => error.with_hint(format!("did you mean `{s}`?")),
                None => error,
            }
        })?;
        baselines.insert(check, validate_limit(check, limit, &path)?);
    }
    let store = match raw.store {
        Some(path) if path.trim().is_empty() => {
            return Err(ConfigError::invalid(
                "gpuvet.store",
                "the store path is empty",
            ));
        }
        other => other,
    };
    let rebuild_hook = match raw.rebuild_hook {
        None => None,
        Some(RawCommand::Shell(line)) if line.trim().is_empty() => {
            return Err(ConfigError::invalid(
                "gpuvet.rebuild_hook",
                "the rebuild hook command is empty",
            ));
        }
        Some(RawCommand::Shell(line)) => Some(vec!["/bin/sh".to_owned(), "-c".to_owned(), line]),
        Some(RawCommand::Argv(argv))
            if argv.first().is_none_or(|program| program.trim().is_empty()) =>
        {
            return Err(ConfigError::invalid("gpuvet.rebuild_hook", "the rebuild hook needs a program as its first element")
                .with_hint("give a shell command line as a string, or an argument list like [\"kubectl\", \"delete\", \"pod\", \"...\"]"));
        }
        Some(RawCommand::Argv(argv)) => Some(argv),
    };
    let cpu_devices = raw
        .cpu_devices
        .map(|n| in_range("gpuvet.cpu_devices", n, 1, 1024))
        .transpose()?;
    let (gemm_dtype, gemm_size) = match raw.gemm {
        None => (Dtype::Auto, None),
        Some(gemm) => {
            let dtype = match gemm.dtype.as_deref() {
                None => Dtype::Auto,
                Some(text) => Dtype::parse(text)
                    .ok_or_else(|| unknown_value("gpuvet.gemm.dtype", text, &Dtype::NAMES))?,
            };
            let size = gemm
                .size
                .map(|n| in_range("gpuvet.gemm.size", n, 16, 65536))
                .transpose()?;
            (dtype, size)
        }
    };
    let collective_bytes = raw
        .collective_bytes
        .map(|n| in_range("gpuvet.collective_bytes", n, 1024, 16 << 30))
        .transpose()?;
    let pairing = match raw.pairing.as_deref() {
        None | Some("adaptive") => PairingMode::Adaptive,
        Some("full") => PairingMode::Full,
        Some(text) => return Err(unknown_value("gpuvet.pairing", text, &["adaptive", "full"])),
    };
    let interfaces = validate_interfaces(raw.interfaces.unwrap_or_default())?;
    let expected_inventory = raw
        .expected_inventory
        .map(validate_expected_inventory)
        .transpose()?
        .unwrap_or_default();
    let sim = raw.sim.map(validate_sim).transpose()?;
    let watch = raw
        .watch
        .map(validate_watch)
        .transpose()?
        .unwrap_or_default();
    Ok(Settings {
        backend,
        tolerance: raw.tolerance_pct.map(|pct| pct / 100.0),
        baselines,
        store,
        rebuild_hook,
        cpu_devices,
        gemm_dtype,
        gemm_size,
        collective_bytes,
        pairing,
        interfaces,
        expected_inventory,
        sim,
        watch,
    })
}

/// A GPU count a node can have, and no empty text (which would expect nothing
/// while looking like it expects something).
fn validate_expected_inventory(
    expected: ExpectedInventory,
) -> Result<ExpectedInventory, ConfigError> {
    if let Some(count) = expected.gpu_count {
        in_range("gpuvet.expected_inventory.gpu_count", count, 1, 4096)?;
    }
    let texts = [
        ("model", &expected.model),
        ("driver_version", &expected.driver_version),
        ("cuda_version", &expected.cuda_version),
        ("nccl_version", &expected.nccl_version),
        ("nvlink_layout", &expected.nvlink_layout),
    ];
    for (key, value) in texts {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(ConfigError::invalid(
                format!("gpuvet.expected_inventory.{key}"),
                "the expected value is empty",
            )
            .with_hint(format!(
                "give the value every node must have, or leave `{key}` out to not check it"
            )));
        }
    }
    Ok(expected)
}

/// Interface names as the kernel takes them: 1 to 15 bytes, no `/`, no whitespace,
/// each once.
fn validate_interfaces(names: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, name) in names.iter().enumerate() {
        let path = format!("gpuvet.interfaces[{i}]");
        let valid = !name.is_empty()
            && name.len() <= 15
            && !name.contains('/')
            && !name.chars().any(char::is_whitespace);
        if !valid {
            return Err(ConfigError::invalid(
                path,
                format!("`{name}` is not a network interface name"),
            )
            .with_hint("give names as `ip link` shows them, e.g. [\"eth0\", \"ib0\"]"));
        }
        if !seen.insert(name.as_str()) {
            return Err(ConfigError::invalid(
                path,
                format!("`{name}` is listed twice"),
            ));
        }
    }
    Ok(names)
}

fn validate_watch(raw: RawWatch) -> Result<WatchSettings, ConfigError> {
    let defaults = WatchSettings::default();
    let kmsg = match raw.kmsg {
        None => defaults.kmsg,
        Some(path) if path == "off" => None,
        Some(path) if path.trim().is_empty() => {
            return Err(
                ConfigError::invalid("gpuvet.watch.kmsg", "the kernel log path is empty")
                    .with_hint("give a path such as `/dev/kmsg`, or `off` to read no kernel log"),
            );
        }
        Some(path) => Some(path),
    };
    let interval_ms = in_range(
        "gpuvet.watch.interval_ms",
        raw.interval_ms.unwrap_or(1000),
        100,
        60_000,
    )?;
    let metrics_addr = raw
        .metrics_addr
        .map(|addr| {
            addr.parse::<std::net::SocketAddr>().map_err(|_| {
                ConfigError::invalid(
                    "gpuvet.watch.metrics_addr",
                    format!("`{addr}` is not an address; expected IP:PORT"),
                )
                .with_hint("e.g. `127.0.0.1:9401`; `0.0.0.0:9401` serves other hosts too")
            })
        })
        .transpose()?;
    Ok(WatchSettings {
        kmsg,
        nvml: raw.nvml.unwrap_or(defaults.nvml),
        interval: Duration::from_millis(interval_ms),
        metrics_addr,
        nccl_ras: match raw.nccl_ras.as_deref() {
            None | Some("auto") => NcclRas::Auto,
            Some("off") => NcclRas::Off,
            Some(addr) if addr.contains(':') && !addr.trim().is_empty() => {
                NcclRas::At(addr.to_owned())
            }
            Some(other) => {
                return Err(ConfigError::invalid(
                    "gpuvet.watch.nccl_ras",
                    format!("`{other}` is not usable; expected `auto`, `off` or `host:port`"),
                ));
            }
        },
    })
}

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    path: &str,
    value: T,
    min: T,
    max: T,
) -> Result<T, ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::invalid(
            path,
            format!("`{value}` is out of range; expected {min} to {max}"),
        ));
    }
    Ok(value)
}

fn validate_limit(check: CheckName, raw: RawLimit, path: &str) -> Result<Limit, ConfigError> {
    let metric = check.spec().metric;
    let (key, wrong_key, limit) = match metric.direction {
        Direction::HigherIsBetter => (
            "floor",
            ("ceiling", raw.ceiling),
            raw.floor.map(Limit::Floor),
        ),
        Direction::LowerIsBetter => (
            "ceiling",
            ("floor", raw.floor),
            raw.ceiling.map(Limit::Ceiling),
        ),
    };
    if wrong_key.1.is_some() {
        let better = match metric.direction {
            Direction::HigherIsBetter => "higher",
            Direction::LowerIsBetter => "lower",
        };
        return Err(ConfigError::invalid(
            format!("{path}.{}", wrong_key.0),
            format!(
                "`{check}` measures {} in {}, where {better} is better, so it takes a `{key}`, not a `{}`",
                metric.name, metric.unit, wrong_key.0
            ),
        ));
    }
    let Some(limit) = limit else {
        return Err(ConfigError::invalid(
            path,
            format!("expected `{{\"{key}\": <{}>}}`", metric.unit),
        ));
    };
    let value = limit.value();
    if !(value.is_finite() && value > 0.0) {
        return Err(ConfigError::invalid(
            format!("{path}.{key}"),
            format!(
                "`{value}` is not a usable limit; expected a positive number of {}",
                metric.unit
            ),
        ));
    }
    Ok(limit)
}

fn validate_sim(raw: RawSim) -> Result<SimScript, ConfigError> {
    let devices = in_range("gpuvet.sim.devices", raw.devices.unwrap_or(8), 1, 1024)?;
    let noise_pct = raw.noise_pct.unwrap_or(0.0);
    if !(noise_pct.is_finite() && (0.0..50.0).contains(&noise_pct)) {
        return Err(ConfigError::invalid(
            "gpuvet.sim.noise_pct",
            format!("`{noise_pct}` is out of range; expected 0 to below 50"),
        ));
    }
    let mut speed = BTreeMap::new();
    for (key, factor) in raw.speed.unwrap_or_default() {
        let path = format!("gpuvet.sim.speed.{key}");
        let index: u32 = key
            .parse()
            .ok()
            .filter(|index| *index < devices)
            .ok_or_else(|| {
                ConfigError::invalid(
                    &path,
                    format!(
                        "`{key}` is not a device index; expected 0 to {}",
                        devices - 1
                    ),
                )
            })?;
        if !(factor.is_finite() && factor > 0.0 && factor <= 10.0) {
            return Err(ConfigError::invalid(
                path,
                format!(
                    "`{factor}` is out of range; expected a speed factor above 0 and at most 10"
                ),
            ));
        }
        speed.insert(index, factor);
    }
    let mut faults = Vec::new();
    for (i, fault) in raw.faults.unwrap_or_default().into_iter().enumerate() {
        let path = format!("gpuvet.sim.faults[{i}]");
        let check: CheckName = fault.check.parse().map_err(|_| {
            ConfigError::invalid(
                format!("{path}.check"),
                format!("unknown check `{}`", fault.check),
            )
        })?;
        if fault.device >= devices {
            return Err(ConfigError::invalid(
                format!("{path}.device"),
                format!(
                    "`{}` is not a device index; expected 0 to {}",
                    fault.device,
                    devices - 1
                ),
            ));
        }
        let kind = match fault.fault.as_str() {
            "hang" => SimFault::Hang,
            "error" => SimFault::Error,
            "wrong_result" => SimFault::WrongResult,
            "zero" => SimFault::Zero,
            other => {
                return Err(unknown_value(
                    &format!("{path}.fault"),
                    other,
                    &SimFault::NAMES,
                ));
            }
        };
        faults.push((check, fault.device, kind));
    }
    Ok(SimScript {
        seed: raw.seed.unwrap_or(0),
        devices,
        noise: noise_pct / 100.0,
        speed,
        faults,
    })
}

#[cfg(test)]
mod tests;
