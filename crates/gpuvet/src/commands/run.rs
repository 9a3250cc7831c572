//! `gpuvet run -- CMD`: the entrypoint wrapper. Run the sanity checks, apply
//! `fail_action`, then start and supervise the app and return its exit code.

use std::io::IsTerminal;

use gpuvet_analysis::render;
use gpuvet_model::config::{Config, FailAction, RuntimeFailAction};
use gpuvet_model::events::{Attempt, EventKind, NewEvent};
use gpuvet_model::exit_codes;
use gpuvet_model::results::{Lane, Outcome, RunReport};
use gpuvet_model::slurm::SlurmNames;
use gpuvet_slurm::{Scontrol, Slurm};
use gpuvet_store::Store;
use serde_json::json;

use crate::cli::RunArgs;
use crate::cluster::Cluster;
use crate::failure::{Failure, note, warn};
use crate::output;
use crate::runtime::{Echo, KillSwitch, RuntimeWatch};
use crate::sanity::{self, group};
use crate::settings::Recording;
use crate::supervise::{HOOK_TIMEOUT, HookOutcome, SpawnError, Supervised, run_hook, shell_code};
use gpuvet_model::time::unix_now_ms;

pub fn run(args: RunArgs) -> Result<i32, Failure> {
    let mut recording = Recording::resolve(
        args.sanity.config.as_deref(),
        &args.sanity.identity,
        &args.sanity.store,
    )?;
    let config = &recording.config;
    // An `aimaster` block without `sanity_check` turns pre-start checks off, as in PAI.
    let sanity = sanity::sanity_settings(&args.sanity, config, false)?;
    // Pick the backend before anything is recorded: an unavailable backend is a usage
    // error that must not leave a half-started attempt behind.
    let backend = sanity
        .as_ref()
        .map(|_| sanity::backend(&args.sanity, config, &recording.identity.node))
        .transpose()?;
    // So are the group flags, needed only when there are checks to run.
    let mode = sanity
        .as_ref()
        .map(|_| group::mode(&args.sanity.group))
        .transpose()?;
    let (mut store, attempt) = recording.begin()?;
    // Sends on its own thread from now until this command returns, the attempt first:
    // a server shows this node while its checks run, and the app's start never waits
    // on the server.
    let _sending = recording.start_sending();
    let config = &recording.config;
    // In a Kubernetes pod (feature `k8s`), events also go to the cluster.
    let cluster = Cluster::detect(config, &attempt);
    // Under Slurm (`SLURM_JOB_ID`, and `gpuvet.slurm.enabled`), `rebuild` drains and
    // requeues.
    let slurm = recording
        .identity
        .slurm
        .as_ref()
        .filter(|_| config.settings.slurm.enabled);
    let mut recorder = Recorder {
        store: store.as_mut(),
        attempt: &attempt,
        cluster: cluster.as_deref(),
        slurm,
    };

    if let (Some(sanity), Some(backend), Some(mode)) = (sanity, backend, mode) {
        let mut report = sanity::execute(
            &args.sanity,
            mode,
            backend,
            config,
            &sanity,
            &attempt,
            std::io::stderr().is_terminal(),
            recorder.store.as_deref(),
        )?;
        sanity::flag_repeat_offender(
            recorder.store.as_deref(),
            &mut report,
            &config.settings.repeat_offender,
        )?;
        // The app owns stdout; gpuvet's report goes to stderr.
        output::stderr(&render::table(
            &report,
            output::width(std::io::stderr().is_terminal()),
            output::detail(&args.sanity),
        ));
        output::write_report_files(&args.sanity, &report)?;
        recorder.record_report(&report)?;
        let failed = report.outcome == Outcome::Failed;
        let kind = if failed {
            EventKind::SanityCheckFailed
        } else {
            EventKind::SanityCheckSucceeded
        };
        let summary = sanity::summary_line(&report);
        recorder.record(
            kind,
            report.first_lane(),
            summary.clone(),
            sanity_details(&report),
        )?;
        if let Some(cluster) = &cluster {
            let ready = !failed || sanity.fail_action == FailAction::Retain;
            cluster.set_verdict(&report, kind, &summary, ready);
        }
        if failed {
            match sanity.fail_action {
                FailAction::Fail => {
                    recorder.record(
                        EventKind::InstanceStartupFailed,
                        report.first_lane(),
                        "the app was not started: sanity checks failed and fail_action is `fail`"
                            .to_owned(),
                        json!({ "fail_action": "fail" }),
                    )?;
                    return Ok(exit_codes::CHECK_FAILED);
                }
                FailAction::Retain => {
                    warn(
                        "sanity checks failed; starting the app anyway because fail_action is `retain`",
                    );
                }
                FailAction::Rebuild => return request_rebuild(config, &report, &mut recorder),
            }
        }
    }

    // The runtime check records (`retain`, as in PAI); with the opt-in `kill` it also
    // stops the app on a fatal finding.
    let kill = config
        .runtime
        .as_ref()
        .filter(|runtime| runtime.fail_action == RuntimeFailAction::Kill)
        .map(|_| KillSwitch::default());
    let watch = config.runtime.as_ref().and_then(|_| {
        RuntimeWatch::start(
            &config.settings.watch,
            recording
                .store
                .as_deref()
                .map(|path| (path, recording.queue_pushes)),
            &attempt,
            Echo::Stderr,
            kill.clone(),
            cluster.clone(),
        )
    });
    let code = start_app(&args.command, &mut recorder, kill.as_ref());
    if let Some(watch) = watch {
        watch.stop();
    }
    code
}

/// Records events for one attempt: in the store (none with `--no-store`), and in the
/// cluster when there is one.
struct Recorder<'a> {
    store: Option<&'a mut Store>,
    attempt: &'a Attempt,
    cluster: Option<&'a Cluster>,
    /// The Slurm job this run is part of, when gpuvet acts on Slurm.
    slurm: Option<&'a SlurmNames>,
}

impl Recorder<'_> {
    fn record_report(&mut self, report: &RunReport) -> Result<(), Failure> {
        if let Some(store) = self.store.as_mut() {
            store.record_report(self.attempt, report)?;
        }
        Ok(())
    }

    fn record(
        &mut self,
        kind: EventKind,
        lane: Option<Lane>,
        message: String,
        details: serde_json::Value,
    ) -> Result<(), Failure> {
        let event = NewEvent {
            event_id: gpuvet_model::ids::new_id(),
            time_ms: unix_now_ms(),
            kind,
            lane,
            message,
            details: crate::identity::with_slurm_names(details),
        };
        if let Some(store) = self.store.as_mut() {
            store.record_event(self.attempt, &event)?;
        }
        if let Some(cluster) = self.cluster {
            cluster.publish(event.kind, event.lane, &event.message, "");
        }
        Ok(())
    }
}

fn sanity_details(report: &RunReport) -> serde_json::Value {
    let mut details = json!({
        "outcome": report.outcome,
        "summary": report.summary(),
        "backend": report.backend,
        "checks": report.checks.iter().map(|c| json!({"name": c.name, "status": c.status})).collect::<Vec<_>>(),
        "findings": sanity::findings_json(report),
        "degraded": report
            .degraded()
            .map(|(check, e)| json!({"check": check.name, "entity": e.entity.to_string(), "reason": e.reason, "history": e.evidence.history}))
            .collect::<Vec<_>>(),
    });
    if let Some(flag) = &report.repeat_offender {
        details["repeat_offender"] = json!(flag);
    }
    details
}

fn request_rebuild(
    config: &Config,
    report: &RunReport,
    recorder: &mut Recorder<'_>,
) -> Result<i32, Failure> {
    if let Some(cluster) = recorder.cluster {
        return rebuild_in_cluster(cluster, config, report, recorder);
    }
    if let Some(slurm) = recorder.slurm {
        return rebuild_in_slurm(&Scontrol::default(), slurm, config, report, recorder);
    }
    let hook = config.settings.rebuild_hook.as_deref();
    // A report file that cannot be written does not hold the rebuild back: the hook
    // runs without it, the warning and the event say why, and the exit code still asks
    // for the rebuild (75), which is what the failed checks call for.
    let mut report_file_error = None;
    let outcome = match hook {
        Some(argv) => {
            let report_file = match write_report_for_hook(report) {
                Ok(file) => Some(file),
                Err(err) => {
                    let why = gpuvet_backend::with_causes(err.as_ref());
                    warn(format!(
                        "the rebuild hook runs without `GPUVET_REPORT_FILE`: {why}"
                    ));
                    report_file_error = Some(why);
                    None
                }
            };
            let mut env = vec![
                ("GPUVET_JOB_ID".to_owned(), recorder.attempt.job_id.clone()),
                (
                    "GPUVET_ATTEMPT".to_owned(),
                    recorder.attempt.attempt.to_string(),
                ),
                ("GPUVET_NODE".to_owned(), recorder.attempt.node.clone()),
                (
                    "GPUVET_INSTANCE".to_owned(),
                    recorder.attempt.instance.clone(),
                ),
                (
                    "GPUVET_OUTCOME".to_owned(),
                    report.outcome.as_str().to_owned(),
                ),
                (
                    "GPUVET_LANE".to_owned(),
                    report
                        .first_lane()
                        .map(|l| l.as_str())
                        .unwrap_or("")
                        .to_owned(),
                ),
                (
                    "GPUVET_FINDINGS".to_owned(),
                    sanity::findings_json(report).to_string(),
                ),
            ];
            if let Some(file) = &report_file {
                env.push((
                    "GPUVET_REPORT_FILE".to_owned(),
                    file.path().display().to_string(),
                ));
            }
            let outcome = run_hook(argv, &env, HOOK_TIMEOUT);
            drop(report_file);
            Some(outcome)
        }
        None => None,
    };
    let mut hook_details = match &outcome {
        None => {
            warn(
                "fail_action is `rebuild` but no `gpuvet.rebuild_hook` is configured; only the exit code asks for the rebuild",
            );
            json!({ "ran": false })
        }
        Some(HookOutcome::Exited(0)) => json!({ "ran": true, "exit_code": 0 }),
        Some(HookOutcome::Exited(code)) => {
            warn(format!("the rebuild hook exited with code {code}"));
            json!({ "ran": true, "exit_code": code })
        }
        Some(HookOutcome::TimedOut) => {
            warn(format!(
                "the rebuild hook did not finish within {}s and was killed",
                HOOK_TIMEOUT.as_secs()
            ));
            json!({ "ran": true, "timed_out": true })
        }
        Some(HookOutcome::NotStarted(reason)) => {
            warn(format!("the rebuild hook did not run: {reason}"));
            json!({ "ran": false, "error": reason })
        }
    };
    if let Some(why) = report_file_error {
        hook_details["report_file_error"] = json!(why);
    }
    recorder.record(
        EventKind::InstanceRebuildRequested,
        report.first_lane(),
        format!("rebuild requested for instance `{}` on node `{}`", recorder.attempt.instance, recorder.attempt.node),
        json!({ "fail_action": "rebuild", "hook": hook_details, "findings": sanity::findings_json(report) }),
    )?;
    Ok(exit_codes::REBUILD_REQUESTED)
}

/// The rebuild in a Kubernetes pod, instead of the hook: quarantine the culprit nodes
/// and delete the pod (see `gpuvet_kube::quarantine`).
fn rebuild_in_cluster(
    cluster: &Cluster,
    config: &Config,
    report: &RunReport,
    recorder: &mut Recorder<'_>,
) -> Result<i32, Failure> {
    if config.settings.rebuild_hook.is_some() {
        note(
            "in a Kubernetes pod the rebuild quarantines the culprit nodes and deletes the pod; `gpuvet.rebuild_hook` is not run",
        );
    }
    cluster.rebuild(report, |rebuilt| {
        let mut details = json!({
            "fail_action": "rebuild",
            "hook": { "ran": false },
            "findings": sanity::findings_json(report),
        });
        details["kubernetes"] = rebuilt.details["kubernetes"].clone();
        recorder.record(
            EventKind::InstanceRebuildRequested,
            report.first_lane(),
            rebuilt.summary.clone(),
            details,
        )
    })?;
    Ok(exit_codes::REBUILD_REQUESTED)
}

/// The rebuild under Slurm, instead of the hook: drain the culprit nodes the circuit
/// breaker allows and, from the group's rank 0, requeue the job so that it starts again
/// elsewhere (see `gpuvet_slurm::drain`). What Slurm refused is a warning and part of
/// the event; the exit code asks for the rebuild either way.
fn rebuild_in_slurm(
    slurm: &dyn Slurm,
    names: &SlurmNames,
    config: &Config,
    report: &RunReport,
    recorder: &mut Recorder<'_>,
) -> Result<i32, Failure> {
    if config.settings.rebuild_hook.is_some() {
        note(
            "under Slurm the rebuild drains the culprit nodes and requeues the job; \
             `gpuvet.rebuild_hook` is not run",
        );
    }
    // The group's nodes are in rank order: rank 0 requeues, once for the group.
    let requeues = report
        .group
        .as_ref()
        .and_then(|group| group.nodes.first())
        .is_none_or(|first| *first == recorder.attempt.node);
    let outcome = gpuvet_slurm::drain(
        slurm,
        report,
        &names.job_id,
        requeues,
        &config.settings.slurm.quarantine,
        unix_now_ms(),
    );
    for (node, why) in outcome.refused.iter().chain(&outcome.failed) {
        warn(format!("slurm: node `{node}` not drained: {why}"));
    }
    for node in &outcome.not_in_cluster {
        warn(format!(
            "slurm: culprit `{node}` is not a node of this cluster; leave `--node` unset \
             under Slurm (it defaults to `SLURMD_NODENAME`) so gpuvet's node names are Slurm's"
        ));
    }
    for why in outcome.whole_group.iter().chain(&outcome.error) {
        warn(format!("slurm: {why}"));
    }
    let summary = outcome.summary(&names.job_id);
    note(format!("slurm: {summary}"));
    recorder.record(
        EventKind::InstanceRebuildRequested,
        report.first_lane(),
        summary,
        json!({
            "fail_action": "rebuild",
            "hook": { "ran": false },
            "findings": sanity::findings_json(report),
            "slurm_rebuild": outcome,
        }),
    )?;
    // Last: Slurm ends this step as it requeues the job.
    if let Err(err) = outcome.requeue_with(slurm) {
        let mut text = format!("slurm: the job was not requeued: {}", err.with_causes());
        if let Some(hint) = err.hint() {
            text.push_str(&format!("\nhint: {hint}"));
        }
        warn(text);
    }
    Ok(exit_codes::REBUILD_REQUESTED)
}

/// The full report as a temporary JSON file the hook can read; removed when dropped.
fn write_report_for_hook(report: &RunReport) -> anyhow::Result<tempfile::NamedTempFile> {
    use anyhow::Context as _;
    let dir = std::env::temp_dir();
    let context = || {
        format!(
            "cannot write the report for the rebuild hook in `{}`",
            dir.display()
        )
    };
    let mut file = tempfile::Builder::new()
        .prefix("gpuvet-report-")
        .suffix(".json")
        .tempfile_in(&dir)
        .with_context(context)?;
    serde_json::to_writer_pretty(&mut file, report).with_context(context)?;
    Ok(file)
}

fn start_app(
    command: &[std::ffi::OsString],
    recorder: &mut Recorder<'_>,
    kill: Option<&KillSwitch>,
) -> Result<i32, Failure> {
    // The command line is stored, pushed and packed into bundles: its credentials
    // (`curl -u user:PASSWORD`, `mysql -pPASSWORD`) are cut first, by its grammar.
    let secrets = crate::identity::known_secrets();
    let known: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let printable = gpuvet_model::redact::redact_command(
        &command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>(),
        &known,
    );
    let app = match Supervised::start(command) {
        Ok(app) => app,
        Err(err) => {
            let code = err.code();
            recorder.record(
                EventKind::InstanceStartupFailed,
                Some(Lane::App),
                gpuvet_backend::with_causes(&err),
                json!({ "command": printable, "exit_code": code }),
            )?;
            let failure = match err {
                SpawnError::Program { .. } => Failure::new(code, err).with_hint(
                    "check the command after `--`: it must be a program on PATH or a path to one",
                ),
                SpawnError::Signals(_) => Failure::new(code, err),
            };
            return Err(failure);
        }
    };
    let pid = app.pid();
    if let Some(kill) = kill {
        kill.arm(pid);
    }
    recorder.record(
        EventKind::InstanceStarted,
        None,
        format!("started `{}` (pid {pid})", printable.join(" ")),
        json!({ "command": printable, "pid": pid }),
    )?;
    let status = app
        .wait()
        .map_err(|err| Failure::bug_from("cannot wait for the app", err))?;
    let code = shell_code(status);
    if let Some(finding) = kill.and_then(KillSwitch::fired) {
        recorder.record(
            EventKind::InstanceExited,
            Some(finding.lane),
            format!(
                "gpuvet stopped the app after a fatal runtime finding: {}",
                finding.message
            ),
            json!({ "exit_code": code, "pid": pid, "killed_by": finding }),
        )?;
        return Ok(exit_codes::RUNTIME_FAULT);
    }
    let lane = (code != 0).then_some(Lane::App);
    recorder.record(
        EventKind::InstanceExited,
        lane,
        format!("the app exited with code {code}"),
        json!({ "exit_code": code, "pid": pid }),
    )?;
    Ok(code)
}
