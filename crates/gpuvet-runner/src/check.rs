//! One check's work on a check thread: measure every entity, judge, re-measure the
//! suspects once, judge again. The device work itself runs on threads of this process
//! or in a worker process ([`Executor`]).

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpuvet_backend::{Backend, BackendError, CancelToken, Sample, with_causes};
use gpuvet_model::analysis::{JudgePolicy, check_status, clear_contended_slow, judge, suspects};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{CheckResult, CheckStatus, Entity, EntityResult, Measurement, Verdict};

use crate::worker::{CheckWorker, Event};
use crate::{RunPlan, RunnerError};

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

/// Where a check's units run.
#[derive(Debug, Clone)]
pub(crate) enum Executor {
    /// On threads of this process: a unit that hangs is abandoned.
    InProcess,
    /// In a worker process: a unit that hangs is killed with it.
    Worker(CheckWorker),
}

/// Why a round of units ended without every unit's result.
enum Stop {
    /// The deadline passed: the runner reports the timeout itself.
    Deadline,
    /// The worker could not do the check, before blaming any device.
    Broken(String),
}

pub(crate) fn run_check(
    backend: Arc<dyn Backend>,
    executor: &Executor,
    plan: &RunPlan,
    name: CheckName,
    deadline: Instant,
    cancel: &CancelToken,
    progress: &mpsc::Sender<Progress>,
) {
    let measured = measure_and_judge(&backend, executor, plan, name, deadline, cancel, progress);
    // Done: the worker, if still alive, is idle and serves the next check. At the
    // deadline the runner kills it.
    // `None`: the deadline passed first, and the runner reports the timeout itself.
    if let Some(result) = measured {
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
    executor: &Executor,
    plan: &RunPlan,
    name: CheckName,
    deadline: Instant,
    cancel: &CancelToken,
    progress: &mpsc::Sender<Progress>,
) -> Option<CheckResult> {
    let units = units(&**backend, plan, name);
    let samples = match measure(backend, executor, plan, name, &units, deadline, cancel) {
        Ok(samples) => samples,
        Err(stop) => return stopped(name, stop),
    };
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
    let measurements: Vec<Measurement> = units
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
        let _ = progress.send(Progress::Remeasuring(
            suspect_indices
                .iter()
                .map(|&i| units[i].entity.clone())
                .collect(),
        ));
        // The suspects are measured again together with their peers, so the second
        // verdict compares values taken under the same load, not a suspect measured
        // now with peers measured before a load spike came or went.
        let again = match measure(backend, executor, plan, name, &units, deadline, cancel) {
            Ok(again) => again,
            Err(stop) => return stopped(name, stop),
        };
        let measurements_again: Vec<Measurement> = units
            .iter()
            .zip(again)
            .map(|(unit, sample)| to_measurement(unit.entity.clone(), sample))
            .collect();
        entities = agreed(
            entities,
            judge(spec, &measurements_again, &policy),
            &suspect_indices,
        );
        for &i in &suspect_indices {
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

/// The verdicts after a second round: a suspect takes its second verdict, so it stays
/// slow only when the second round agrees; any other entity keeps its first, unless
/// its work failed outright the second time (a failure is never noise).
fn agreed(
    first: Vec<EntityResult>,
    second: Vec<EntityResult>,
    suspects: &[usize],
) -> Vec<EntityResult> {
    first
        .into_iter()
        .zip(second)
        .enumerate()
        .map(|(i, (first, mut second))| {
            if suspects.contains(&i) {
                second.evidence.remeasured = true;
                second
            } else if second.verdict == Verdict::Faulty {
                second
            } else {
                first
            }
        })
        .collect()
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
        Err(error) => Measurement::failed(entity, with_causes(&error)),
    }
}

fn stopped(name: CheckName, stop: Stop) -> Option<CheckResult> {
    match stop {
        Stop::Deadline => None,
        Stop::Broken(reason) => Some(CheckResult::without_work(name, CheckStatus::Failed, reason)),
    }
}

/// Starts one round: every unit at once, each on its own detached thread here or all
/// in the worker process.
fn start(
    backend: &Arc<dyn Backend>,
    executor: &Executor,
    plan: &RunPlan,
    name: CheckName,
    units: &[Unit],
    cancel: &CancelToken,
) -> Result<mpsc::Receiver<Event>, RunnerError> {
    if let Executor::Worker(workers) = executor {
        let devices = units.iter().map(|unit| unit.devices.clone()).collect();
        return workers.round(name, &plan.work, devices);
    }
    let (tx, rx) = mpsc::channel();
    for (slot, unit) in units.iter().enumerate() {
        let backend = Arc::clone(backend);
        let devices = unit.devices.clone();
        let work = plan.work;
        let cancel = cancel.clone();
        let tx = tx.clone();
        gpuvet_threads::spawn_detached(format!("{name}-{slot}"), move || {
            let result = crate::work::run_unit(&*backend, name, &devices, &work, &cancel);
            let _ = tx.send(Event::Unit { slot, result });
        })
        .map_err(|source| RunnerError::StartThread { source })?;
    }
    Ok(rx)
}

/// Runs every unit concurrently and collects what came back. A unit that is still
/// running `HANG_FACTOR` times longer than the slowest finished one (and at least the
/// plan's hang grace) is reported hung, and its worker process killed. `Stop::Deadline`
/// when the deadline passes first.
fn measure(
    backend: &Arc<dyn Backend>,
    executor: &Executor,
    plan: &RunPlan,
    name: CheckName,
    units: &[Unit],
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<Vec<Result<Sample, BackendError>>, Stop> {
    let started = Instant::now();
    let rx = start(backend, executor, plan, name, units, cancel)
        .map_err(|error| Stop::Broken(with_causes(&error)))?;
    let kill = || match executor {
        Executor::InProcess => None,
        Executor::Worker(workers) => workers.kill(),
    };

    let mut results: Vec<Option<Result<Sample, BackendError>>> =
        (0..units.len()).map(|_| None).collect();
    let mut slowest_finished: Option<Duration> = None;
    let mut pending = units.len();
    // Why the units still running will never answer, when that is known.
    let mut lost: Option<String> = None;
    while pending > 0 {
        let hang_at =
            slowest_finished.map(|slowest| started + (slowest * HANG_FACTOR).max(plan.hang_grace));
        let wait_until = hang_at.map_or(deadline, |at| at.min(deadline));
        match rx.recv_timeout(wait_until.saturating_duration_since(Instant::now())) {
            Ok(Event::Unit { slot, result }) => {
                if results.get(slot).is_none_or(Option::is_some) {
                    let message = format!(
                        "the check's worker process answered unit {slot} of {} twice or out of \
                         range (a bug in gpuvet)",
                        units.len()
                    );
                    // As for a broken worker: say how it ended only when it was killed.
                    lost = Some(match kill() {
                        Some(end) => format!("{message}; it {end}"),
                        None => message,
                    });
                    break;
                }
                results[slot] = Some(result);
                let took = started.elapsed();
                slowest_finished = Some(slowest_finished.map_or(took, |s| s.max(took)));
                pending -= 1;
            }
            Ok(Event::Broken {
                message,
                blame_units,
            }) => {
                let message = match kill() {
                    Some(end) => format!("{message}; it {end}"),
                    None => message,
                };
                if !blame_units {
                    return Err(Stop::Broken(message));
                }
                lost = Some(message);
                break;
            }
            Ok(Event::Ended { ready }) => {
                let how = match executor {
                    Executor::Worker(workers) => workers.reap(),
                    Executor::InProcess => None,
                }
                .unwrap_or_else(|| "ended".to_owned());
                if !ready {
                    return Err(Stop::Broken(format!(
                        "the check's worker process {how} before it was ready"
                    )));
                }
                lost = Some(format!(
                    "the check's worker process {how} before this unit finished"
                ));
                break;
            }
            Err(mpsc::RecvTimeoutError::Timeout)
                if hang_at.is_some_and(|at| Instant::now() < deadline && Instant::now() >= at) =>
            {
                break;
            }
            // Every unit's sender is gone while one has not answered: that unit's
            // thread died, which `run_unit` does not let happen.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                lost =
                    Some("the unit's thread stopped without a result (a bug in gpuvet)".to_owned());
                break;
            }
            // The runner kills the worker at the deadline, and says so in its report.
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(Stop::Deadline),
        }
    }
    let hung = match (&lost, pending) {
        (None, 1..) => Some(kill()),
        _ => None,
    };
    let waited = started.elapsed();
    let slowest = slowest_finished.unwrap_or_default();
    let results = results
        .into_iter()
        .map(|result| {
            result.unwrap_or_else(|| {
                Err(BackendError::Failed(match (&lost, &hung) {
                    (Some(lost), _) => lost.clone(),
                    (None, killed) => {
                        let mut message = format!(
                            "hung: no result after {:.1}s while its peers finished within {:.1}s",
                            waited.as_secs_f64(),
                            slowest.as_secs_f64()
                        );
                        if let Some(Some(end)) = killed {
                            message.push_str(&format!("; its worker process {end}"));
                        }
                        message
                    }
                }))
            })
        })
        .collect();
    Ok(results)
}
