//! The runtime check `c4d` as the binary runs it: build the watcher from the config's
//! sources, record each finding as a `RuntimeCheckFailed` event, and stop cleanly.
//! `gpuvet watch` runs it in the foreground; `gpuvet run` in the background of the app.
//!
//! The XID policy's memory (incidents toward escalation, what was already reported)
//! lives in the store, one row per job and node: restored at the start, and saved with
//! the events of every step that changed it, in one transaction. So a watcher
//! restarted by its supervisor (or a `gpuvet run` restarted with its app) neither
//! forgets an XID storm nor reports it again. With `--no-store` findings are only shown
//! (and published to the cluster), and a restart starts its memory afresh.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use gpuvet_analysis::diagnose::diagnose_runtime;
use gpuvet_model::config::{NcclRas, WatchSettings};
use gpuvet_model::diagnosis::TERMINAL_WIDTH;
use gpuvet_model::event_fold::runtime_subject;
use gpuvet_model::events::{Attempt, EventKind, NewEvent};
use gpuvet_store::Store;
use gpuvet_watch::finding::{RuntimeFinding, Severity};
use gpuvet_watch::health::{
    NvmlOptions, NvmlSource, StepOutput, Watchdog, Watcher, WatcherConfig, WatcherHandle,
};
use gpuvet_watch::kmsg::{KmsgOptions, KmsgSource};
use gpuvet_watch::metrics::{Metrics, MetricsServer};
use gpuvet_watch::policy::PolicyState;
use gpuvet_watch::ras::{RasClient, RasSource};

use crate::cluster::Cluster;
use crate::failure::{note, warn};
use crate::output;
use gpuvet_model::time::unix_now_ms;

/// How long one NVML poll may take before the probe counts as hung.
const NVML_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// NCCL RAS is asked every this many polls: it collects from every process of the job.
const RAS_EVERY_POLLS: u64 = 5;
/// A RAS query longer than this counts as a hung probe (the client's own deadline is
/// 15 s; RAS waits up to 5 s for peers before it answers).
const RAS_PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// Unix ms of the boot a kernel-log file comes from: places its timestamps on the wall
/// clock as `/dev/kmsg`'s are (a replayed saved log; the restart tests). Unset, a
/// file's lines get the time they are read.
const KMSG_BOOT_TIME_ENV: &str = "GPUVET_KMSG_BOOT_TIME_MS";

/// Where each finding is shown besides the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Echo {
    /// One line of text on stderr (the app owns stdout).
    Stderr,
    /// One JSON object per line on stdout (`gpuvet watch --json`).
    JsonLines,
    /// One line of text on stdout (`gpuvet watch`).
    Stdout,
}

/// The opt-in runtime `kill` action: the first fatal finding stops the app with
/// SIGTERM, so the orchestrator restarts it elsewhere.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    /// The app's pid; 0 until it has started.
    pid: Arc<AtomicU32>,
    fired: Arc<Mutex<Option<RuntimeFinding>>>,
}

impl KillSwitch {
    /// Names the app to stop; stops it at once if a fatal finding came first.
    pub fn arm(&self, pid: u32) {
        self.pid.store(pid, Ordering::SeqCst);
        if self.fired().is_some() {
            terminate(pid);
        }
    }

    /// The finding that stopped the app, if one did.
    pub fn fired(&self) -> Option<RuntimeFinding> {
        self.fired.lock().map(|f| f.clone()).unwrap_or(None)
    }

    fn fire(&self, finding: &RuntimeFinding) {
        let Ok(mut fired) = self.fired.lock() else {
            return;
        };
        if fired.is_some() {
            return;
        }
        *fired = Some(finding.clone());
        drop(fired);
        // The finding itself was shown just before, in the verdict's words.
        warn("c4d: stopping the app (runtime fail_action `kill`) for the finding above");
        match self.pid.load(Ordering::SeqCst) {
            0 => {}
            pid => terminate(pid),
        }
    }
}

fn terminate(pid: u32) {
    // SAFETY: kill(2) on the app we spawned, with a valid signal.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
}

/// A running watcher and the thread that records what it finds.
#[derive(Debug)]
pub struct RuntimeWatch {
    watcher: WatcherHandle,
    recorder: JoinHandle<u64>,
    metrics: Option<MetricsServer>,
}

impl RuntimeWatch {
    /// Starts watching with every source the config names and this machine has,
    /// recording in the store at `store` (with whether to queue pushes) when there is
    /// one. `None` when there is nothing to watch (said on stderr).
    pub fn start(
        settings: &WatchSettings,
        store: Option<(&Path, bool)>,
        attempt: &Attempt,
        echo: Echo,
        kill: Option<KillSwitch>,
        cluster: Option<Arc<Cluster>>,
    ) -> Option<RuntimeWatch> {
        let mut watcher = Watcher::new(WatcherConfig {
            interval: settings.interval,
            ..WatcherConfig::default()
        });
        // Served before the sources start, so a scrape sees `gpuvet_watch_up` go to 1.
        let metrics = settings.metrics_addr.and_then(|addr| {
            let state = Arc::new(Metrics::new().with_hostname(&attempt.node));
            watcher.set_metrics(Arc::clone(&state));
            match MetricsServer::bind(addr, state) {
                Ok(server) => {
                    note(format!(
                        "c4d: serving Prometheus metrics at http://{}/metrics",
                        server.local_addr()
                    ));
                    Some(server)
                }
                Err(err) => {
                    warn(format!("c4d: cannot serve metrics at `{addr}`: {err}"));
                    None
                }
            }
        });
        let mut sources = 0;
        if settings.nvml {
            match NvmlSource::new(NvmlOptions::default())
                .and_then(|nvml| Watchdog::new(nvml, NVML_PROBE_TIMEOUT))
            {
                Ok(source) => {
                    watcher.add_source(source);
                    sources += 1;
                }
                // Off a GPU machine the whole chain says little more than that.
                Err(err) if err.is_no_driver() => note(
                    "c4d: watching without NVML: no NVIDIA driver here (libnvidia-ml.so.1 \
                     does not load)",
                ),
                Err(err) => note(format!(
                    "c4d: NVML is not available ({err}); watching without it"
                )),
            }
        }
        let ras_client = match &settings.nccl_ras {
            NcclRas::Off => None,
            NcclRas::At(addr) => Some(RasClient::new(addr.clone())),
            NcclRas::Auto => match RasClient::from_env() {
                Ok(client) => Some(client),
                Err(err) => {
                    warn(format!("c4d: not watching NCCL RAS: {err}"));
                    None
                }
            },
        };
        if let Some(client) = ras_client {
            // Quiet while no NCCL job listens; a query that hangs is the watchdog's.
            match Watchdog::new(RasSource::new(client, RAS_EVERY_POLLS), RAS_PROBE_TIMEOUT) {
                Ok(source) => {
                    watcher.add_source(source);
                    sources += 1;
                }
                Err(err) => warn(format!("c4d: cannot watch NCCL RAS: {err}")),
            }
        }
        if let Some(path) = &settings.kmsg {
            let options = KmsgOptions {
                boot_time_ms: kmsg_boot_time(),
                ..KmsgOptions::default()
            };
            match KmsgSource::open(Path::new(path), options) {
                Ok(source) => {
                    watcher.add_source(source);
                    sources += 1;
                }
                Err(err) => warn(format!("c4d: cannot read the kernel log: {err}")),
            }
        }
        if sources == 0 {
            warn("c4d: no health source is available, so nothing is watched");
            return None;
        }
        if let Some((path, _)) = store {
            restore_state(&mut watcher, path, attempt);
        }
        let (tx, rx) = mpsc::channel::<StepOutput>();
        let recorder = spawn_recorder(
            store.map(|(path, queue)| (path.to_owned(), queue)),
            attempt.clone(),
            rx,
            echo,
            kill,
            cluster,
        );
        let watcher = match watcher.spawn_with_state(move |step| {
            let _ = tx.send(step);
        }) {
            Ok(handle) => handle,
            Err(err) => {
                warn(format!("c4d: cannot start the watcher: {err}"));
                return None;
            }
        };
        Some(RuntimeWatch {
            watcher,
            recorder,
            metrics,
        })
    }

    /// Stops the watcher, records what it still held, and returns how many findings
    /// were recorded in all.
    pub fn stop(self) -> u64 {
        // Stopping drops the watcher's sender, which ends the recorder.
        drop(self.watcher.stop());
        if let Some(server) = self.metrics {
            server.stop();
        }
        self.recorder.join().unwrap_or(0)
    }
}

/// Picks up the policy state an earlier run saved for this job and node. A store that
/// cannot be read, or a state that does not decode, is said on stderr and the watch
/// starts without it: watching matters more than remembering.
fn restore_state(watcher: &mut Watcher, store: &Path, attempt: &Attempt) {
    let loaded = Store::open(store)
        .and_then(|store| store.watch_state::<PolicyState>(&attempt.job_id, &attempt.node));
    let state = match loaded {
        Ok(Some((_, state))) => state,
        Ok(None) => return,
        Err(err) => {
            warn(format!(
                "c4d: cannot restore the escalation history of job `{}` on `{}`; starting \
                 without it: {err}",
                attempt.job_id, attempt.node
            ));
            return;
        }
    };
    let restored = watcher.restore(state, unix_now_ms());
    if let Some(format) = restored.unknown_format {
        warn(format!(
            "c4d: the saved escalation history is in format `{format}`, which this gpuvet \
             does not read; starting without it"
        ));
    } else if restored.incidents + restored.records + restored.node_wide + restored.conditions > 0 {
        note(format!(
            "c4d: restored the escalation history: {} incidents, {} XID records, {} node-wide \
             bursts, {} conditions ({} expired)",
            restored.incidents,
            restored.records,
            restored.node_wide,
            restored.conditions,
            restored.expired
        ));
    }
}

/// `GPUVET_KMSG_BOOT_TIME_MS`, when set and a number.
fn kmsg_boot_time() -> Option<u64> {
    let value = std::env::var(KMSG_BOOT_TIME_ENV).ok()?;
    match value.trim().parse() {
        Ok(ms) => Some(ms),
        Err(_) => {
            warn(format!(
                "c4d: ignoring `{KMSG_BOOT_TIME_ENV}={value}`: expected Unix milliseconds"
            ));
            None
        }
    }
}

/// Records each step's findings as events, with the policy state when it changed, in
/// one transaction. A store that refuses the write keeps both pending and retries with
/// the next step; whatever is still pending at the end goes to stderr, so nothing is
/// lost silently. Without a store (`--no-store`) findings are only shown.
fn spawn_recorder(
    store: Option<(PathBuf, bool)>,
    attempt: Attempt,
    steps: mpsc::Receiver<StepOutput>,
    echo: Echo,
    kill: Option<KillSwitch>,
    cluster: Option<Arc<Cluster>>,
) -> JoinHandle<u64> {
    std::thread::Builder::new()
        .name("gpuvet-c4d-recorder".into())
        .spawn(move || {
            let open = |(path, queue): &(PathBuf, bool)| crate::push::open_store(path, *queue);
            let mut handle = store.as_ref().map(open);
            let mut pending: Vec<NewEvent> = Vec::new();
            let mut unsaved: Option<PolicyState> = None;
            let mut recorded = 0;
            for step in steps {
                // Kept for the store until it takes them; nothing to keep without one.
                if store.is_some() {
                    pending.extend(step.findings.iter().map(event_of));
                    if step.state.is_some() {
                        unsaved = step.state;
                    }
                }
                if let Some((Err(err), location)) = handle.as_ref().zip(store.as_ref()) {
                    warn(format!("c4d: the store is not available ({err}); retrying"));
                    handle = Some(open(location));
                }
                if let Some(Ok(store)) = handle.as_mut() {
                    match store.record_runtime(&attempt, &pending, unsaved.as_ref(), unix_now_ms())
                    {
                        Ok(events) => {
                            recorded += events.len() as u64;
                            pending.clear();
                            unsaved = None;
                        }
                        Err(err) => warn(format!(
                            "c4d: cannot record in the store yet ({err}); will retry"
                        )),
                    }
                }
                // Shown once written: a finding on screen is one a restart won't repeat.
                for finding in &step.findings {
                    show(finding, &attempt.node, echo);
                }
                // After recording, so the event that explains the stop comes first.
                if let Some(kill) = &kill {
                    for finding in &step.findings {
                        if finding.severity == Severity::Fail {
                            kill.fire(finding);
                        }
                    }
                }
                // In a Kubernetes pod, each finding is also an Event (after the kill,
                // which must not wait on the API); a repeat of the same condition on the
                // same GPU adds to that Event's series.
                if let Some(cluster) = &cluster {
                    for finding in &step.findings {
                        let key = runtime_subject(&finding.check, finding.gpu.as_ref());
                        cluster.publish(
                            EventKind::RuntimeCheckFailed,
                            Some(finding.lane),
                            &finding.message,
                            &key,
                        );
                    }
                }
            }
            for event in pending {
                warn(format!(
                    "c4d: event not recorded: {}",
                    serde_json::to_string(&event).unwrap_or_else(|_| event.message.clone())
                ));
            }
            if unsaved.is_some() {
                warn(
                    "c4d: the escalation history was not saved; a restarted watcher may report \
                     this run's findings again",
                );
            }
            recorded
        })
        .expect("spawning the c4d recorder")
}

fn event_of(finding: &RuntimeFinding) -> NewEvent {
    NewEvent {
        event_id: gpuvet_model::ids::new_id(),
        time_ms: unix_now_ms(),
        kind: EventKind::RuntimeCheckFailed,
        lane: Some(finding.lane),
        message: finding.message.clone(),
        details: crate::identity::with_slurm_names(
            serde_json::to_value(finding).unwrap_or(serde_json::Value::Null),
        ),
    }
}

fn show(finding: &RuntimeFinding, node: &str, echo: Echo) {
    // The verdict block's words, led by the runtime check's name.
    let text = || {
        let diagnosis = diagnose_runtime(node, finding);
        let mut text = String::new();
        for line in diagnosis.lines(TERMINAL_WIDTH) {
            let line = line.strip_prefix("verdict: ").map_or(line.clone(), |rest| {
                format!("{}{rest}", lead(finding.severity))
            });
            text.push_str(&line);
            text.push('\n');
        }
        text
    };
    match echo {
        Echo::Stderr => output::stderr(&text()),
        Echo::Stdout => {
            let _ = output::stdout(&text());
        }
        Echo::JsonLines => {
            let line = serde_json::to_string(finding).unwrap_or_default();
            let _ = output::stdout(&format!("{line}\n"));
        }
    }
}

/// What a runtime finding's lines start with: `c4d: ` for a failure, which the app's
/// stderr readers look for, and its severity for the rest.
fn lead(severity: Severity) -> &'static str {
    match severity {
        Severity::Fail => "c4d: ",
        Severity::Warn => "c4d warning: ",
        Severity::Info => "c4d note: ",
    }
}
