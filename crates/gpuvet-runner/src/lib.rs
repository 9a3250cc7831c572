//! Runs the sanity checks of one node on a backend, one after another, under one
//! overall deadline.
//!
//! The runner owns time: it decides which checks can exist in this group, runs their
//! device work in a worker process that the checks share one after another (or,
//! without a [`WorkerLauncher`], on threads of this one), names a device that hangs
//! while its peers finish, re-measures suspects once, and stops waiting when the
//! deadline passes — so a hang in a backend can never hang gpuvet, and a hung worker
//! is killed, not left holding its devices.
//! It reports through typed [`RunnerEvent`]s; the binary turns those into progress
//! bars and reports.
//!
//! A single node is the group of one that this crate handles on its own. Across nodes,
//! `gpuvet-multinode`'s agent uses [`RunPlan`] and the per-device work of this crate for
//! its share of the node-scope checks, while the coordinator plans and judges.

mod check;
mod error;
mod overlap;
mod plan;
mod protocol;
mod serve;
mod work;
mod worker;

pub use check::{HANG_FACTOR, HANG_GRACE};
pub use error::RunnerError;
pub use plan::{RunPlan, runs_among_local_devices, scope_skip_reason};
pub use serve::{protocol_output, serve_worker};
pub use work::unit_work;
pub use worker::WorkerLauncher;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpuvet_backend::{Backend, CancelToken, Support};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::inventory::NodeInventory;
use gpuvet_model::inventory_check::judge_inventories;
use gpuvet_model::results::{CheckResult, CheckStatus, Entity, Outcome, RunReport};

/// What the runner tells its observers, in order.
#[derive(Debug)]
pub enum RunnerEvent<'a> {
    RunStarted {
        plan: &'a RunPlan,
        backend: &'a str,
        devices: usize,
    },
    CheckStarted {
        index: usize,
        total: usize,
        name: CheckName,
    },
    /// These entities looked slow and are being measured a second time.
    Remeasuring {
        name: CheckName,
        entities: &'a [Entity],
    },
    CheckFinished {
        index: usize,
        total: usize,
        result: &'a CheckResult,
    },
    RunFinished {
        report: &'a RunReport,
    },
}

/// Runs every check of the plan and returns the report. Never blocks past the plan's
/// deadline by more than the time it takes to build the report.
pub fn run(
    backend: Arc<dyn Backend>,
    plan: &RunPlan,
    observe: &mut dyn FnMut(RunnerEvent<'_>),
) -> RunReport {
    let started = Instant::now();
    let deadline = started + plan.timeout;
    observe(RunnerEvent::RunStarted {
        plan,
        backend: backend.name(),
        devices: backend.devices().len(),
    });

    // One worker serves the checks one after another, so the backend's start is paid
    // once per run, not per check: on cuda the driver, NVML, the libraries and a
    // context per GPU, 280–380 ms on an H200 (docs/benchmarks.md, "GPU"). A check that
    // hangs or breaks its worker has it killed, and the next check starts a new one.
    let pool = WorkerPool::for_plan(plan, &*backend);
    let total = plan.checks.len();
    let mut results: Vec<CheckResult> = Vec::with_capacity(total);
    let mut out_of_time = false;
    for (index, &name) in plan.checks.iter().enumerate() {
        observe(RunnerEvent::CheckStarted { index, total, name });
        let result = if out_of_time {
            CheckResult::without_work(
                name,
                CheckStatus::NotRun,
                "the overall timeout expired before this check started",
            )
        } else {
            let workers = pool.as_ref().map(|pool| &pool.0);
            let result = check_result(&backend, plan, name, deadline, workers, observe);
            out_of_time = result.status == CheckStatus::TimedOut;
            result
        };
        observe(RunnerEvent::CheckFinished {
            index,
            total,
            result: &result,
        });
        results.push(result);
    }
    // No worker outlives the run: what starts next needs the devices' memory.
    if let Some(pool) = &pool {
        pool.close();
    }

    let report = RunReport {
        report_id: String::new(),
        gpuvet_version: env!("CARGO_PKG_VERSION").to_owned(),
        job_id: plan.attempt.job_id.clone(),
        attempt: plan.attempt.attempt,
        node: plan.attempt.node.clone(),
        instance: plan.attempt.instance.clone(),
        backend: backend.name().to_owned(),
        devices: backend.devices().to_vec(),
        started_at_ms: plan.started_at_ms,
        duration_secs: started.elapsed().as_secs_f64(),
        timeout_secs: plan.timeout.as_secs_f64(),
        outcome: Outcome::of(&results),
        checks: results,
        group: None,
        context: None,
        diagnosis: None,
        repeat_offender: None,
    };
    observe(RunnerEvent::RunFinished { report: &report });
    report
}

/// Runs check `name` alone under the plan's timeout, as [`run`] runs each of its
/// checks, and returns its result without a report around it: for an agent of a
/// group, which runs one node-scope check per directive. Its device work runs in
/// `pool`'s worker when given (so a series of checks starts the backend once), else in
/// a worker of its own when the plan has a launcher, else on threads of this process.
pub fn run_check(
    backend: &Arc<dyn Backend>,
    plan: &RunPlan,
    name: CheckName,
    pool: Option<&WorkerPool>,
) -> CheckResult {
    let deadline = Instant::now() + plan.timeout;
    let own = match pool {
        Some(_) => None,
        None => WorkerPool::for_plan(plan, &**backend),
    };
    let workers = pool.or(own.as_ref()).map(|pool| &pool.0);
    let result = check_result(backend, plan, name, deadline, workers, &mut |_| {});
    if let Some(own) = &own {
        own.close();
    }
    result
}

/// A worker process that checks run in one after another, for a caller that runs them
/// one at a time with [`run_check`]. A check that hangs or breaks it has it killed,
/// and the next check starts another. [`WorkerPool::close`] ends it; dropping the
/// pool kills it.
#[derive(Debug)]
pub struct WorkerPool(Arc<worker::Workers>);

impl WorkerPool {
    /// A pool whose workers `launcher` starts, which must build the same backend, with
    /// the same devices, as `backend`. Starts nothing until the first check needs it.
    pub fn new(launcher: WorkerLauncher, backend: &dyn Backend) -> Self {
        WorkerPool(Arc::new(worker::Workers::new(launcher, backend)))
    }

    /// A pool for `plan`'s launcher; `None` when its checks run on threads of this
    /// process.
    fn for_plan(plan: &RunPlan, backend: &dyn Backend) -> Option<Self> {
        let launcher = plan.worker.as_ref()?;
        Some(WorkerPool::new(launcher.clone(), backend))
    }

    /// Ends the worker, if one is live: its input is closed, and it is killed if it
    /// has not exited within 2 s. Later checks are refused a worker.
    pub fn close(&self) {
        self.0.stop(true);
    }
}

/// One check's result: skipped or not implemented here, the inventory's facts, or
/// its work.
fn check_result(
    backend: &Arc<dyn Backend>,
    plan: &RunPlan,
    name: CheckName,
    deadline: Instant,
    workers: Option<&Arc<worker::Workers>>,
    observe: &mut dyn FnMut(RunnerEvent<'_>),
) -> CheckResult {
    if let Some(reason) = scope_skip_reason(name, plan.nodes, backend.devices().len()) {
        CheckResult::without_work(name, CheckStatus::Skipped, reason)
    } else if let Support::NotImplemented(reason) = backend.supports(name)
        && !runs_among_local_devices(name, plan.nodes)
    {
        CheckResult::without_work(name, CheckStatus::NotImplemented, reason)
    } else if name == CheckName::InventoryConsistency {
        // Facts the backend already read, not work: nothing to time or cancel.
        let node = NodeInventory::from_devices(&plan.attempt.node, backend.devices());
        judge_inventories(&[node], &plan.expected_inventory)
    } else {
        run_one(backend, plan, name, deadline, workers, observe)
    }
}

/// Runs one check (its device work in `workers`' process, else on threads of this
/// process) and waits for it until the deadline. A worker that answered everything is
/// left for the next check; one the check may still be using is killed.
fn run_one(
    backend: &Arc<dyn Backend>,
    plan: &RunPlan,
    name: CheckName,
    deadline: Instant,
    workers: Option<&Arc<worker::Workers>>,
    observe: &mut dyn FnMut(RunnerEvent<'_>),
) -> CheckResult {
    let started = Instant::now();
    let cancel = CancelToken::new();
    let (progress_tx, progress_rx) = mpsc::channel::<check::Progress>();
    let worker = workers.map(worker::Workers::for_check);
    // The check thread died: kill and reap its worker; the next check starts another.
    let kill_worker = || worker.as_ref().and_then(worker::CheckWorker::kill);
    // The deadline passed while the check thread may still send rounds: kill the
    // worker and refuse this check anything more; `Some`: how it ended.
    let abandon_worker = || worker.as_ref().and_then(worker::CheckWorker::abandon);
    match &worker {
        // In process, every wait of the check ends by the deadline (its device work
        // runs on threads of its own, which a hang abandons), so it runs right here:
        // one hand-off fewer per check, which thousands of nodes in one process pay.
        // What it reported is read below, as from the thread.
        None => {
            // A panic in it reads as a check that died, as it did on a thread.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                check::run_check(
                    Arc::clone(backend),
                    &check::Executor::InProcess,
                    plan,
                    name,
                    deadline,
                    &cancel,
                    &progress_tx,
                );
            }));
            drop(progress_tx);
        }
        Some(worker) => {
            let backend = Arc::clone(backend);
            let plan = plan.clone();
            let cancel = cancel.clone();
            let executor = check::Executor::Worker(worker.clone());
            // Detached on purpose: whatever the check waits on, the wait below ends at
            // the deadline and the run goes on without this thread.
            gpuvet_threads::spawn_detached(format!("check-{name}"), move || {
                check::run_check(
                    backend,
                    &executor,
                    &plan,
                    name,
                    deadline,
                    &cancel,
                    &progress_tx,
                );
            })
            .expect("spawning a check thread");
        }
    }
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match progress_rx.recv_timeout(remaining) {
            Ok(check::Progress::Remeasuring(entities)) => observe(RunnerEvent::Remeasuring {
                name,
                entities: &entities,
            }),
            // Every round was answered (or its worker killed), so a live worker is idle.
            Ok(check::Progress::Done(mut result)) => {
                result.duration_secs = started.elapsed().as_secs_f64();
                return result;
            }
            // The check gives up without a result only once the deadline has passed,
            // so a disconnect before it means it died.
            Err(mpsc::RecvTimeoutError::Disconnected) if Instant::now() < deadline => {
                kill_worker();
                let mut result = CheckResult::without_work(
                    name,
                    CheckStatus::Failed,
                    "the check's worker stopped without a result (a bug in gpuvet or its backend)",
                );
                result.duration_secs = started.elapsed().as_secs_f64();
                return result;
            }
            Err(_) => {
                cancel.cancel();
                let mut reason = format!(
                    "the overall timeout of {} expired {} into this check",
                    human_duration(plan.timeout),
                    human_duration(started.elapsed())
                );
                if let Some(end) = abandon_worker() {
                    reason.push_str(&format!("; its worker process {end}"));
                }
                let mut result = CheckResult::without_work(name, CheckStatus::TimedOut, reason);
                result.duration_secs = started.elapsed().as_secs_f64();
                return result;
            }
        }
    }
}

/// `90s`, `5m`, `1m30s`: for messages.
pub fn human_duration(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 60.0 {
        return if secs < 10.0 {
            format!("{secs:.1}s")
        } else {
            format!("{secs:.0}s")
        };
    }
    let whole = duration.as_secs();
    match (whole / 60, whole % 60) {
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests;
