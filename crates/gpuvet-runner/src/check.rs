//! One check's work on a worker thread: measure every entity, judge, re-measure the
//! suspects once, judge again.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpuvet_backend::{Backend, BackendError, CancelToken, Sample};
use gpuvet_core::analysis::{JudgePolicy, check_status, clear_contended_slow, judge, suspects};
use gpuvet_core::catalog::CheckName;
use gpuvet_core::results::{CheckResult, CheckStatus, Entity, Measurement};

use crate::RunPlan;

/// A device that has not answered this many times longer than its slowest peer is
/// named hung, so one stuck GPU does not cost the whole timeout.
pub const HANG_FACTOR: u32 = 5;
/// ...but never sooner than this after the work started (the default of
/// [`RunPlan::hang_grace`](crate::RunPlan)).
pub const HANG_GRACE: Duration = Duration::from_secs(10);

/// What the check thread sends back to the runner.
pub(crate) enum Progress {
    Remeasuring(Vec<Entity>),
    Done(CheckResult),
}

/// One unit of work and the entity it measures.
#[derive(Clone)]
struct Unit {
    entity: Entity,
    devices: Vec<u32>,
}

pub(crate) fn run_check(
    backend: Arc<dyn Backend>,
    plan: &RunPlan,
    name: CheckName,
    deadline: Instant,
    cancel: &CancelToken,
    progress: &mpsc::Sender<Progress>,
) {
    // `None`: the deadline passed first, and the runner reports the timeout itself.
    if let Some(result) = measure_and_judge(&backend, plan, name, deadline, cancel, progress) {
        // The runner may have stopped listening (timeout); nothing to do then.
        let _ = progress.send(Progress::Done(result));
    }
}

fn units(backend: &dyn Backend, plan: &RunPlan, name: CheckName) -> Vec<Unit> {
    let node = &plan.attempt.node;
    let indices: Vec<u32> = backend.devices().iter().map(|d| d.index).collect();
    match name {
        // `all_reduce` and `all_gather` come here only when this node is the group.
        CheckName::AllReduce1
        | CheckName::CompCommOverlap
        | CheckName::AllReduce
        | CheckName::AllGather => vec![Unit {
            entity: Entity::Node { node: node.clone() },
            devices: indices,
        }],
        _ => indices
            .into_iter()
            .map(|index| Unit {
                entity: Entity::Device {
                    node: node.clone(),
                    index,
                },
                devices: vec![index],
            })
            .collect(),
    }
}

fn measure_and_judge(
    backend: &Arc<dyn Backend>,
    plan: &RunPlan,
    name: CheckName,
    deadline: Instant,
    cancel: &CancelToken,
    progress: &mpsc::Sender<Progress>,
) -> Option<CheckResult> {
    let units = units(&**backend, plan, name);
    let samples = measure(backend, plan, name, &units, deadline, cancel)?;
    if let Some(reason) = samples.iter().find_map(|s| match s {
        Err(BackendError::Unsupported(reason)) => Some(reason.clone()),
        _ => None,
    }) {
        return Some(CheckResult::without_work(
            name,
            CheckStatus::Skipped,
            reason,
        ));
    }
    let mut params = samples
        .iter()
        .find_map(|s| s.as_ref().ok())
        .map(|s| s.params.clone())
        .unwrap_or_default();
    let mut measurements: Vec<Measurement> = units
        .iter()
        .zip(samples)
        .map(|(unit, sample)| to_measurement(unit.entity.clone(), sample))
        .collect();

    let policy = JudgePolicy {
        tolerance: plan.tolerance.of(name),
        limit: plan.baselines.get(&name).copied(),
    };
    let spec = name.spec();
    let mut entities = judge(spec, &measurements, &policy);
    let suspect_indices = suspects(&entities);
    if !suspect_indices.is_empty() && !cancel.is_cancelled() {
        let suspect_units: Vec<Unit> = suspect_indices.iter().map(|&i| units[i].clone()).collect();
        let _ = progress.send(Progress::Remeasuring(
            suspect_units.iter().map(|u| u.entity.clone()).collect(),
        ));
        let again = measure(backend, plan, name, &suspect_units, deadline, cancel)?;
        for (&i, sample) in suspect_indices.iter().zip(again) {
            measurements[i] = to_measurement(units[i].entity.clone(), sample);
        }
        entities = judge(spec, &measurements, &policy);
        for &i in &suspect_indices {
            entities[i].evidence.remeasured = true;
            // A slow verdict stands only on a re-measurement that other work did not
            // hold back.
            clear_contended_slow(&mut entities[i], spec, &policy);
        }
    }
    if !suspect_indices.is_empty() {
        params.insert("remeasured".to_owned(), suspect_indices.len().to_string());
    }
    if crate::runs_among_local_devices(name, plan.nodes) {
        params.insert(
            "group".to_owned(),
            "this node's devices (a group of 1 node)".to_owned(),
        );
    }
    Some(CheckResult {
        params,
        ..CheckResult::judged(name, check_status(&entities), entities)
    })
}

fn to_measurement(entity: Entity, sample: Result<Sample, BackendError>) -> Measurement {
    match sample {
        Ok(sample) => Measurement {
            entity,
            value: Some(sample.value),
            samples: sample.samples,
            error: None,
            wrong_result: sample.wrong_result,
            extra: sample.extra,
        },
        Err(error) => Measurement::failed(entity, error.to_string()),
    }
}

/// Runs every unit concurrently, each on its own detached thread, and collects what
/// came back. A unit that is still running `HANG_FACTOR` times longer than the slowest
/// finished one (and at least the plan's hang grace) is reported hung. `None` when the
/// deadline passes first: the runner then reports the check timed out.
fn measure(
    backend: &Arc<dyn Backend>,
    plan: &RunPlan,
    name: CheckName,
    units: &[Unit],
    deadline: Instant,
    cancel: &CancelToken,
) -> Option<Vec<Result<Sample, BackendError>>> {
    let started = Instant::now();
    let (tx, rx) = mpsc::channel();
    for (slot, unit) in units.iter().enumerate() {
        let backend = Arc::clone(backend);
        let devices = unit.devices.clone();
        let work = plan.work;
        let cancel = cancel.clone();
        let tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("{name}-{slot}"))
            .spawn(move || {
                let work = || match name {
                    CheckName::GemmFlops => backend.gemm(devices[0], &work, &cancel),
                    CheckName::KernelLaunch => backend.kernel_launch(devices[0], &work, &cancel),
                    CheckName::AllReduce1 | CheckName::AllReduce => {
                        backend.all_reduce_local(&devices, &work, &cancel)
                    }
                    CheckName::AllGather => backend.all_gather_local(&devices, &work, &cancel),
                    CheckName::CompCommOverlap => {
                        crate::overlap::comp_comm_overlap(&*backend, &devices, &work, &cancel)
                    }
                    other => Err(BackendError::Failed(format!(
                        "the runner has no work for `{other}` (a bug in gpuvet)"
                    ))),
                };
                // A panicking backend is a faulty measurement, not a lost one.
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                    .unwrap_or_else(|panic| {
                        let message = panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown panic".to_owned());
                        Err(BackendError::Failed(format!(
                            "the backend panicked: {message}"
                        )))
                    });
                let _ = tx.send((slot, result, started.elapsed()));
            })
            .expect("spawning a work thread");
    }
    drop(tx);

    let mut results: Vec<Option<Result<Sample, BackendError>>> =
        (0..units.len()).map(|_| None).collect();
    let mut slowest_finished: Option<Duration> = None;
    let mut pending = units.len();
    while pending > 0 {
        let hang_at =
            slowest_finished.map(|slowest| started + (slowest * HANG_FACTOR).max(plan.hang_grace));
        let wait_until = hang_at.map_or(deadline, |at| at.min(deadline));
        match rx.recv_timeout(wait_until.saturating_duration_since(Instant::now())) {
            Ok((slot, result, took)) => {
                results[slot] = Some(result);
                slowest_finished = Some(slowest_finished.map_or(took, |s| s.max(took)));
                pending -= 1;
            }
            Err(mpsc::RecvTimeoutError::Timeout)
                if hang_at.is_some_and(|at| Instant::now() < deadline && Instant::now() >= at) =>
            {
                break;
            }
            // Every sender is gone only if every unit answered, so this is the deadline.
            Err(_) => return None,
        }
    }
    let waited = started.elapsed();
    let slowest = slowest_finished.unwrap_or_default();
    let results = results
        .into_iter()
        .map(|result| {
            result.unwrap_or_else(|| {
                Err(BackendError::Failed(format!(
                    "hung: no result after {:.1}s while its peers finished within {:.1}s",
                    waited.as_secs_f64(),
                    slowest.as_secs_f64()
                )))
            })
        })
        .collect();
    Some(results)
}
