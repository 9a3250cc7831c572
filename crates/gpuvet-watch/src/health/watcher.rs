//! The watcher: polls every health source (about once a second), routes XID sightings
//! through the policy and samples through the health rules, and yields only new
//! findings. [`Watcher::step`] is synchronous and takes the time, for tests;
//! [`Watcher::spawn`] runs it on a thread until stopped, and
//! [`Watcher::spawn_with_state`] also hands over the policy's state whenever it
//! changed, for the caller to save with the findings it explains.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use gpuvet_model::results::Lane;

use super::{
    HealthError, HealthEvaluator, HealthReading, HealthSource, HealthThresholds, evaluate_reading,
};
use crate::finding::{CheckFamily, RuntimeCheck, RuntimeFinding, Severity};
use crate::metrics::Metrics;
use crate::policy::{PolicyConfig, PolicyState, Restored, XidPolicy};
use crate::xid::ActionClass;

/// The watcher's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct WatcherConfig {
    pub policy: PolicyConfig,
    pub thresholds: HealthThresholds,
    /// Boot id for findings and for sightings that carry none.
    pub boot_id: String,
    /// Time between steps in [`Watcher::spawn`] (1 s).
    pub interval: Duration,
}

impl Default for WatcherConfig {
    fn default() -> Self {
        WatcherConfig {
            policy: PolicyConfig::default(),
            thresholds: HealthThresholds::default(),
            boot_id: crate::kmsg::read_boot_id().unwrap_or_default(),
            interval: Duration::from_secs(1),
        }
    }
}

/// Polls health sources and turns what they see into deduplicated findings.
pub struct Watcher {
    sources: Vec<Box<dyn HealthSource>>,
    policy: XidPolicy,
    evaluator: HealthEvaluator,
    boot_id: String,
    interval: Duration,
    steps: u64,
    /// Updated on every step, reading and finding when set.
    metrics: Option<Arc<Metrics>>,
    /// The policy's revision when its state was last handed out (or restored).
    saved_revision: u64,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.sources.iter().map(|s| s.name()).collect();
        f.debug_struct("Watcher")
            .field("sources", &names)
            .field("steps", &self.steps)
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl Watcher {
    pub fn new(config: WatcherConfig) -> Self {
        Watcher {
            sources: Vec::new(),
            policy: XidPolicy::new(config.policy),
            evaluator: HealthEvaluator::new(config.thresholds),
            boot_id: config.boot_id,
            interval: config.interval,
            steps: 0,
            metrics: None,
            saved_revision: 0,
        }
    }

    /// Picks up the policy state saved before a restart (see
    /// [`XidPolicy::restore`]), judged against this watcher's boot id. Call it before
    /// the first step.
    pub fn restore(&mut self, state: PolicyState, now_ms: u64) -> Restored {
        let restored = self.policy.restore(state, now_ms, &self.boot_id);
        self.saved_revision = self.policy.revision();
        if let Some(m) = &self.metrics {
            m.observe_snapshot(&self.policy.snapshot());
        }
        restored
    }

    /// The policy's state if it changed since the last call (or the restore): what
    /// to save so that a restart picks up where this watcher is.
    pub fn changed_state(&mut self) -> Option<PolicyState> {
        let revision = self.policy.revision();
        if revision == self.saved_revision {
            return None;
        }
        self.saved_revision = revision;
        Some(self.policy.export())
    }

    /// Feeds `metrics` (the `/metrics` endpoint's state) from now on: every sample
    /// and error the sources report, every finding, and each step.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.set_metrics(metrics);
        self
    }

    pub fn set_metrics(&mut self, metrics: Arc<Metrics>) {
        self.metrics = Some(metrics);
    }

    pub fn add_source(&mut self, source: impl HealthSource + 'static) {
        self.sources.push(Box::new(source));
    }

    pub fn with_source(mut self, source: impl HealthSource + 'static) -> Self {
        self.add_source(source);
        self
    }

    /// The policy, for its snapshot (metrics, the final record).
    pub fn policy(&self) -> &XidPolicy {
        &self.policy
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Polls every source once at `now_ms` and returns the findings that are new.
    /// A source that fails is a finding too; the watcher carries on.
    pub fn step(&mut self, now_ms: u64) -> Vec<RuntimeFinding> {
        self.steps += 1;
        let mut out = Vec::new();
        let mut saw_xid = false;
        for i in 0..self.sources.len() {
            match self.sources[i].poll(now_ms) {
                Ok(readings) => {
                    for r in readings {
                        saw_xid |= matches!(r, HealthReading::Xid(_));
                        if let Some(m) = &self.metrics {
                            m.observe_reading(&r);
                        }
                        self.ingest(r, &mut out);
                    }
                }
                Err(e) => {
                    let name = self.sources[i].name().to_owned();
                    if let Some(m) = &self.metrics {
                        m.observe_source_error(&name);
                    }
                    let f = RuntimeFinding::condition(
                        &name,
                        RuntimeCheck::new(CheckFamily::Source, &format!("error.{name}")),
                        None,
                        Lane::Host,
                        ActionClass::RecordOnly,
                        now_ms,
                        e.to_string(),
                    )
                    .with_severity(Severity::Warn)
                    .with_boot_id(&self.boot_id);
                    out.extend(self.policy.observe_condition(f));
                }
            }
        }
        out.extend(self.policy.tick(now_ms));
        if let Some(m) = &self.metrics {
            m.observe_poll(now_ms);
            self.update_metrics(m, &out, saw_xid);
        }
        out
    }

    /// Decides every XID incident still held (call at shutdown).
    pub fn flush(&mut self) -> Vec<RuntimeFinding> {
        let out = self.policy.flush();
        if let Some(m) = &self.metrics {
            self.update_metrics(m, &out, false);
        }
        out
    }

    /// Counts the findings; the XID line counters come from the policy's snapshot,
    /// taken only when they can have changed (a sighting, or an XID finding).
    fn update_metrics(&self, m: &Metrics, findings: &[RuntimeFinding], saw_xid: bool) {
        m.observe_findings(findings);
        if saw_xid || findings.iter().any(|f| f.xid.is_some()) {
            m.observe_snapshot(&self.policy.snapshot());
        }
    }

    fn ingest(&mut self, reading: HealthReading, out: &mut Vec<RuntimeFinding>) {
        match reading {
            HealthReading::Inventory { gpus } => self.policy.register_gpus(&gpus),
            HealthReading::Xid(mut obs) => {
                if obs.boot_id.is_empty() {
                    obs.boot_id = self.boot_id.clone();
                }
                self.policy.observe(&obs);
            }
            HealthReading::Gpu(sample) => {
                for f in self.evaluator.evaluate(&sample) {
                    out.extend(self.policy.observe_condition(f.with_boot_id(&self.boot_id)));
                }
            }
            HealthReading::Finding(f) => {
                out.extend(self.policy.observe_condition(f.with_boot_id(&self.boot_id)));
            }
            other => {
                if let Some(f) = evaluate_reading(&other, self.evaluator.thresholds()) {
                    out.extend(self.policy.observe_condition(f.with_boot_id(&self.boot_id)));
                }
            }
        }
    }

    /// Runs the watcher on its own thread, one step per interval, handing each new
    /// finding to `on_finding`. Stop it with [`WatcherHandle::stop`].
    pub fn spawn<F>(self, mut on_finding: F) -> Result<WatcherHandle, HealthError>
    where
        F: FnMut(RuntimeFinding) + Send + 'static,
    {
        self.run(false, move |out: StepOutput| {
            out.findings.into_iter().for_each(&mut on_finding);
        })
    }

    /// Like [`Watcher::spawn`], but hands over each step's findings together with the
    /// policy's state when it changed, so the caller saves both at once: a crash
    /// between two steps then loses nothing and repeats nothing. Steps with neither
    /// are not handed over; the last one, after the flush at the stop, always
    /// carries the state (with the counts that changed no decision).
    pub fn spawn_with_state<F>(self, on_step: F) -> Result<WatcherHandle, HealthError>
    where
        F: FnMut(StepOutput) + Send + 'static,
    {
        self.run(true, on_step)
    }

    /// The watcher's thread; exports the policy's state only `with_state`.
    fn run<F>(self, with_state: bool, mut on_step: F) -> Result<WatcherHandle, HealthError>
    where
        F: FnMut(StepOutput) + Send + 'static,
    {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let mut watcher = self;
        let thread = thread::Builder::new()
            .name("gpuvet-watch".to_owned())
            .spawn(move || {
                if let Some(m) = &watcher.metrics {
                    m.set_up(true);
                }
                loop {
                    let findings = watcher.step(gpuvet_model::time::unix_now_ms());
                    let state = if with_state {
                        watcher.changed_state()
                    } else {
                        None
                    };
                    if !findings.is_empty() || state.is_some() {
                        on_step(StepOutput { findings, state });
                    }
                    match stop_rx.recv_timeout(watcher.interval) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                let findings = watcher.flush();
                let state = with_state.then(|| {
                    watcher.saved_revision = watcher.policy.revision();
                    watcher.policy.export()
                });
                on_step(StepOutput { findings, state });
                if let Some(m) = &watcher.metrics {
                    m.set_up(false);
                }
                watcher
            })
            .map_err(HealthError::Spawn)?;
        Ok(WatcherHandle {
            stop: stop_tx,
            thread,
        })
    }
}

/// One step of a spawned watcher (see [`Watcher::spawn_with_state`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutput {
    /// The findings that are new.
    pub findings: Vec<RuntimeFinding>,
    /// The policy's state, when it changed since the last step that carried one.
    pub state: Option<PolicyState>,
}

/// A running watcher.
#[derive(Debug)]
pub struct WatcherHandle {
    stop: Sender<()>,
    thread: JoinHandle<Watcher>,
}

impl WatcherHandle {
    /// Stops after the current step, flushes held incidents, and returns the watcher
    /// (for its snapshot). Blocks for at most one step: sources that can hang must be
    /// behind a [`super::Watchdog`]. `None` if the watcher thread panicked.
    pub fn stop(self) -> Option<Watcher> {
        let _ = self.stop.send(());
        self.thread.join().ok()
    }
}
