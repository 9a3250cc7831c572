//! The part `check` and `run` share: apply flags over the config, pick the backend, run
//! the checks with progress, and summarise the outcome for events. Across nodes,
//! [`group`] joins or coordinates the group instead.

pub mod group;
mod local_gpus;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use gpuvet_backend::{Backend, WorkSpec};
use gpuvet_model::analysis::{Limit, Tolerances};
use gpuvet_model::baselines::{self, DEFAULT_FRACTION, Workload};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::config::{BackendChoice, BaselineFrom, CheckList, Config, SanityConfig, Timeout};
use gpuvet_model::events::Attempt;
use gpuvet_model::fleet::{self, BaselineSource, FleetBaseline};
use gpuvet_model::history::{self, HistoryPolicy, OwnRecords};
use gpuvet_model::ids::new_id;
use gpuvet_model::redact;
use gpuvet_model::results::{Outcome, RunContext, RunReport, Verdict};
use gpuvet_push::fetch::ServerReader;
use gpuvet_runner::{HANG_GRACE, RunPlan, WorkerLauncher};
use gpuvet_store::Store;

use crate::cli::SanityArgs;
use crate::failure::{Failure, note, warn};
use crate::identity::known_secrets;
use crate::output::Progress;
use gpuvet_model::time::unix_now_ms;

/// The sanity settings after `--checks` and `--timeout`; `None` when the config turns
/// pre-start checks off and no flag turns them on.
pub fn sanity_settings(
    args: &SanityArgs,
    config: &Config,
    default_when_absent: bool,
) -> Result<Option<SanityConfig>, Failure> {
    let mut sanity = match (&config.sanity, default_when_absent || args.checks.is_some()) {
        (Some(sanity), _) => sanity.clone(),
        (None, true) => config.sanity_or_default(),
        (None, false) => return Ok(None),
    };
    if let Some(list) = &args.checks {
        sanity.checks = CheckList::parse(list, "--checks")?;
    }
    if let Some(minutes) = args.timeout {
        sanity.timeout = Timeout::from_minutes(minutes, "--timeout")?;
    }
    Ok(Some(sanity))
}

/// The backend the flags and config ask for, on the node named `node`.
pub fn backend(
    args: &SanityArgs,
    config: &Config,
    node: &str,
) -> Result<Arc<dyn Backend>, Failure> {
    let choice = match &args.backend {
        Some(arg) => BackendChoice::from(*arg),
        None => config.settings.backend,
    };
    build_backend(choice, config, args.cpu_devices, node)
}

/// The backend `choice` names, built from the config with `--cpu-devices` over it; a
/// note says why `auto` fell back to the cpu.
pub fn build_backend(
    choice: BackendChoice,
    config: &Config,
    cpu_devices: Option<u32>,
    node: &str,
) -> Result<Arc<dyn Backend>, Failure> {
    let mut settings = config.settings.clone();
    settings.sim = settings.sim.map(|sim| sim.for_node(node));
    if let Some(devices) = cpu_devices {
        if devices == 0 || devices > 1024 {
            return Err(Failure::usage(format!(
                "`--cpu-devices {devices}` is out of range; expected 1 to 1024"
            )));
        }
        settings.cpu_devices = Some(devices);
    }
    let selected = gpuvet_backend::select(choice, &settings)?;
    if let Some(reason) = selected.fallback_reason {
        note(format!(
            "no usable GPU, so the checks run on the cpu backend: {reason}"
        ));
    }
    Ok(Arc::from(selected.backend))
}

/// How the runner starts this binary as a check's worker process (`gpuvet worker`)
/// that builds the same backend: the one resolved here, never `auto` again, from the
/// same config file and the same number of cpu devices.
pub fn worker_launcher(
    args: &SanityArgs,
    backend: &dyn Backend,
    node: &str,
) -> Result<WorkerLauncher, Failure> {
    let program = own_executable()?;
    let mut worker_args: Vec<OsString> =
        vec!["worker".into(), "--backend".into(), backend.name().into()];
    if let Some(config) = &args.config {
        // The worker starts in this directory, but an absolute path says what it reads.
        let config = std::path::absolute(config).unwrap_or_else(|_| config.clone());
        worker_args.extend(["--config".into(), config.into_os_string()]);
    }
    if backend.name() == "sim" {
        // The node's share of the script (`gpuvet.sim.node_speed`) depends on its name.
        worker_args.extend(["--node".into(), node.into()]);
    }
    if backend.name() == "cpu" {
        worker_args.extend([
            "--cpu-devices".into(),
            backend.devices().len().to_string().into(),
        ]);
    }
    Ok(WorkerLauncher {
        program,
        args: worker_args,
    })
}

/// This program's own path, to start copies of it (workers, local agents, a drill's
/// group). The kernel says it through `/proc/self/exe`: a failure is the machine's
/// (no `/proc`), so exit 73, never "a bug".
pub fn own_executable() -> Result<std::path::PathBuf, Failure> {
    std::env::current_exe().map_err(|err| {
        Failure::io("cannot find gpuvet's own executable", err).with_hint(
            "gpuvet starts copies of itself and finds its path in `/proc/self/exe`; check that `/proc` is mounted",
        )
    })
}

/// Runs the checks, on this node or across its group as the group flags and the
/// launcher's environment say, with progress on stderr when `show_progress`, then
/// judges each GPU against its own record in `store` (`gpuvet.history`). The report
/// gets its id here: it is this node's report from now on, in the store, the JSON and
/// the files, whichever way the run went.
#[allow(clippy::too_many_arguments)]
pub fn execute(
    args: &SanityArgs,
    mode: group::Mode,
    backend: Arc<dyn Backend>,
    config: &Config,
    sanity: &SanityConfig,
    attempt: &Attempt,
    show_progress: bool,
    store: Option<&Store>,
) -> Result<RunReport, Failure> {
    // A member of a group judges its own GPUs before it sends their results, and takes
    // the group's verdict as it comes: judged again here against this node's records
    // alone, a group could split on `fail_on_degraded` (see `OwnRecords`).
    let member = matches!(mode, group::Mode::Member(_));
    let history = match store {
        Some(store) if member => own_records(store, &config.settings.history, &*backend, attempt),
        _ => None,
    };
    let mut report = run_checks(
        args,
        mode,
        backend,
        config,
        sanity,
        attempt,
        show_progress,
        history,
    )?;
    if let Some(store) = store
        && !member
    {
        judge_against_records(&mut report, store, &config.settings.history);
    }
    report.report_id = new_id();
    report.context = Some(run_context(args));
    if report.outcome != Outcome::Passed {
        report.diagnosis = gpuvet_analysis::diagnose::diagnose_report(&report);
    }
    Ok(report)
}

/// Judges each GPU of the report against its own record in the store. A record that
/// cannot be read is a warning, never a failed start: the verdicts of the peers and the
/// baseline stand without it.
fn judge_against_records(report: &mut RunReport, store: &Store, policy: &HistoryPolicy) {
    if !policy.enabled {
        return;
    }
    let wanted = history::wanted(report);
    if wanted.is_empty() {
        return;
    }
    match store.gpu_records(&wanted, policy.runs) {
        Ok(records) => {
            history::judge_report(report, &records, policy, unix_now_ms());
        }
        Err(err) => records_unread(&err),
    }
}

/// This node's GPUs' records, read before a group run, for its agent to judge its own
/// results against. A record that cannot be read is a warning, as above.
fn own_records(
    store: &Store,
    policy: &HistoryPolicy,
    backend: &dyn Backend,
    attempt: &Attempt,
) -> Option<Arc<OwnRecords>> {
    if !policy.enabled {
        return None;
    }
    let devices = backend.devices().to_vec();
    let gpus = OwnRecords::gpus(&attempt.node, &devices);
    match store.gpu_records_of(&gpus, policy.runs) {
        Ok(records) => Some(Arc::new(OwnRecords {
            node: attempt.node.clone(),
            devices,
            records,
            policy: *policy,
        })),
        Err(err) => {
            records_unread(&err);
            None
        }
    }
}

fn records_unread(err: &gpuvet_store::StoreError) {
    warn(format!(
        "the GPUs were not judged against their own records: {}",
        gpuvet_backend::with_causes(err)
    ));
}

/// What this run was started with, for the team a fault is handed to: the config file
/// as written and the launcher's environment, with every secret this process knows
/// (and anything that looks like one) removed before the report is kept anywhere.
fn run_context(args: &SanityArgs) -> RunContext {
    let mut secrets = known_secrets();
    secrets.extend(args.group.token.iter().cloned());
    let known: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let mut config = args
        .config
        .as_deref()
        .and_then(|path| read_bounded(path).ok())
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(serde_json::Value::Null);
    redact::redact_json(&mut config, &known);
    // `vars_os`: a variable that is not UTF-8 is left out, where `vars` would panic.
    let environment = redact::launcher_environment(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    );
    RunContext {
        config_file: args
            .config
            .as_deref()
            .map(|path| redact::scrub(&path.display().to_string(), &known).into_owned()),
        config,
        environment: redact::redact_environment(&environment, &known),
        slurm: gpuvet_model::slurm::SlurmNames::from_env(|name| std::env::var(name).ok()),
    }
}

/// A config file already validated; read again with the same bound.
fn read_bounded(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(gpuvet_model::config::MAX_CONFIG_BYTES as u64)
        .read_to_string(&mut text)?;
    Ok(text)
}

#[allow(clippy::too_many_arguments)]
fn run_checks(
    args: &SanityArgs,
    mode: group::Mode,
    backend: Arc<dyn Backend>,
    config: &Config,
    sanity: &SanityConfig,
    attempt: &Attempt,
    show_progress: bool,
    history: Option<Arc<OwnRecords>>,
) -> Result<RunReport, Failure> {
    let tolerance = Tolerances::from_fn(|check| {
        config
            .settings
            .tolerance
            .unwrap_or_else(|| backend.default_tolerance(check))
    });
    let (baselines, sources) = limits(&*backend, config, sanity);
    let worker = worker_launcher(args, &*backend, &attempt.node)?;
    let setup = group::Setup {
        args,
        config,
        backend: Arc::clone(&backend),
        attempt,
        checks: sanity.checks.as_slice().to_vec(),
        timeout: sanity.timeout.duration(),
        tolerance,
        baselines,
        worker,
        show_progress,
        history,
    };
    let mut report = match mode {
        group::Mode::Member(rendezvous) => group::as_member(&rendezvous, &setup)?,
        group::Mode::LocalNodes(n) => group::with_local_nodes(n, &setup)?,
        group::Mode::InProcess(n) => group::in_process(n, &setup)?,
        group::Mode::Single => run_on_this_node(backend, attempt, config, &setup)?,
    };
    fleet::mark_sources(&mut report, &sources);
    Ok(report)
}

/// Runs the checks on this node alone.
fn run_on_this_node(
    backend: Arc<dyn Backend>,
    attempt: &Attempt,
    config: &Config,
    setup: &group::Setup<'_>,
) -> Result<RunReport, Failure> {
    let plan = RunPlan {
        attempt: attempt.clone(),
        nodes: 1,
        checks: setup.checks.clone(),
        timeout: setup.timeout,
        tolerance: setup.tolerance.clone(),
        baselines: setup.baselines.clone(),
        expected_inventory: config.settings.expected_inventory.clone(),
        work: WorkSpec::from_settings(&config.settings),
        started_at_ms: unix_now_ms(),
        hang_grace: HANG_GRACE,
        worker: Some(setup.worker.clone()),
    };
    let mut progress = Progress::new(setup.show_progress);
    Ok(gpuvet_runner::run(backend, &plan, &mut |event| {
        progress.observe(event)
    }))
}

/// The limit each check is judged by, and where it came from: the configured one,
/// else the fleet's for this node's GPU model (`gpuvet.baseline_from: server`), else
/// the model's published baseline at `DEFAULT_FRACTION` of it, else none.
fn limits(
    backend: &dyn Backend,
    config: &Config,
    sanity: &SanityConfig,
) -> (
    BTreeMap<CheckName, Limit>,
    BTreeMap<CheckName, BaselineSource>,
) {
    let names: Vec<&str> = backend.devices().iter().map(|d| d.name.as_str()).collect();
    let model = baselines::model_of(names.iter().copied());
    let device_model = names
        .first()
        .filter(|first| names.iter().all(|name| name == *first))
        .copied();
    let fleet = match config.settings.baseline_from {
        BaselineFrom::Builtin => BTreeMap::new(),
        BaselineFrom::Server => {
            let baselines = fetch_fleet_baselines(config);
            for check in fleet::ambiguous_checks(&baselines, device_model) {
                warn(format!(
                    "the fleet's baselines of `{check}` for these GPUs cover several workloads; \
                     `{check}` is judged by the built-in table"
                ));
            }
            fleet::fleet_limits(&baselines, device_model)
        }
    };
    let workload = Workload {
        gemm_dtype: config.settings.gemm_dtype,
        gemm_size: config.settings.gemm_size,
        gpus_per_node: backend.devices().len(),
    };
    let mut limits = BTreeMap::new();
    let mut sources = BTreeMap::new();
    for &check in sanity.checks.as_slice() {
        let chosen = if let Some(&limit) = config.settings.baselines.get(&check) {
            Some((limit, BaselineSource::Config))
        } else if let Some(&limit) = fleet.get(&check) {
            Some((limit, BaselineSource::Fleet))
        } else {
            baselines::effective_limit(check, &BTreeMap::new(), model, &workload, DEFAULT_FRACTION)
                .map(|limit| (limit, BaselineSource::Builtin))
        };
        if let Some((limit, source)) = chosen {
            limits.insert(check, limit);
            sources.insert(check, source);
        }
    }
    (limits, sources)
}

/// How long a node waits for the fleet's baselines before it judges by the built-in
/// table: the checks wait on it.
const FLEET_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The fleet's baselines from the first server of `gpuvet.report_to`; none, with a
/// warning, when it cannot be read: the built-in table judges then.
fn fetch_fleet_baselines(config: &Config) -> Vec<FleetBaseline> {
    let Some(url) = config.settings.report_to.first() else {
        return Vec::new();
    };
    let token = std::env::var(gpuvet_model::env_vars::READ_TOKEN).ok();
    let fetched = ServerReader::new(url, token.as_deref())
        .with_timeout(FLEET_FETCH_TIMEOUT)
        .with_trust(&crate::push::trust(config))
        .and_then(|reader| reader.fleet_baselines());
    fetched.unwrap_or_else(|err| {
        warn(format!(
            "the fleet's baselines could not be read from `{url}`, so the built-in table judges: {}",
            gpuvet_backend::with_causes(&err)
        ));
        Vec::new()
    })
}

/// The findings of a report as JSON, for event details and the rebuild hook.
pub fn findings_json(report: &RunReport) -> serde_json::Value {
    let mut findings: Vec<serde_json::Value> = report
        .findings()
        .map(|(check, finding)| {
            serde_json::json!({
                "check": check.name,
                "entity": finding.entity.to_string(),
                "verdict": finding.verdict,
                "lane": finding.lane,
                "reason": finding.reason,
                "evidence": finding.evidence,
            })
        })
        .collect();
    // Checks that failed without an entity to blame (a timeout) are findings too.
    findings.extend(
        report
            .checks
            .iter()
            .filter(|c| c.status.is_failure() && c.findings().next().is_none())
            .map(|c| {
                serde_json::json!({
                    "check": c.name,
                    "entity": report.node,
                    "verdict": Verdict::Faulty,
                    "lane": c.name.spec().lane,
                    "reason": format!("{}: {}", c.status, c.reason.as_deref().unwrap_or("")),
                })
            }),
    );
    serde_json::Value::Array(findings)
}

/// A one-line account of the run, for event messages.
pub fn summary_line(report: &RunReport) -> String {
    let mut line = plain_summary(report);
    if let Some(flag) = &report.repeat_offender {
        line.push_str(&format!("; `{}` is a {flag}", report.node));
    }
    line
}

/// Flags `report` when its node, with this run, failed `K` of its last `M` runs
/// (`gpuvet.repeat_offender`), as its store tells: the runs of every job on this node,
/// each a failure only when it failed because of this node (in a group, when its
/// findings or first error name it).
/// Without a store nothing is known of the node's past, and nothing is flagged.
pub fn flag_repeat_offender(
    store: Option<&Store>,
    report: &mut RunReport,
    policy: &gpuvet_model::offenders::RepeatOffenderPolicy,
) -> Result<(), Failure> {
    let Some(store) = store else {
        return Ok(());
    };
    let earlier = store.runs(&gpuvet_store::RunFilter {
        node: Some(report.node.clone()),
        limit: Some(policy.of_last.saturating_sub(1) as usize),
        ..gpuvet_store::RunFilter::default()
    })?;
    let failures = std::iter::once(gpuvet_model::offenders::fails_its_node(report))
        .chain(earlier.iter().map(|r| r.run.node_failed));
    report.repeat_offender = gpuvet_model::offenders::repeat_offender(failures, policy);
    if let Some(flag) = &report.repeat_offender {
        note(format!("node `{}` is a {flag}", report.node));
    }
    Ok(())
}

fn plain_summary(report: &RunReport) -> String {
    if let Some(diagnosis) = &report.diagnosis {
        return diagnosis.message();
    }
    let mut line = format!(
        "sanity checks {} on `{}`: {}",
        report.outcome.as_str(),
        report.node,
        report.summary()
    );
    if let Some((check, finding)) = report.findings().next() {
        line.push_str(&format!(
            "; first finding: {} on {} ({})",
            check.name, finding.entity, finding.reason
        ));
    } else if let Some(check) = report.checks.iter().find(|c| c.status.is_failure()) {
        line.push_str(&format!("; {} {}", check.name, check.status));
    }
    let degraded: Vec<String> = report
        .degraded()
        .map(|(check, e)| format!("{} on {}", check.name, e.entity))
        .collect();
    if let Some(first) = degraded.first() {
        line.push_str(&format!(
            "; {} degraded against their own record (first: {first})",
            degraded.len()
        ));
    }
    line
}
