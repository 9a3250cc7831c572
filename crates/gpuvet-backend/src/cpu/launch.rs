//! Launch latency on the cpu backend: the round trip of an empty task to a worker
//! thread and back, the host's analogue of launching an empty kernel and waiting for it.
//!
//! The worker blocks on a channel, as a thread pool's workers do, so the figure covers
//! what a real hand-off costs: the queue, the wake-up of a sleeping thread, and the
//! wake-up of the waiting launcher. Spinning would measure less, but would starve the
//! other devices' threads on a host with few cores.
//!
//! Launcher and worker run on the device's own core (device i on the i-th core this
//! process may use), as a GPU's launches stay on that GPU. Left to the scheduler, the
//! pair sometimes shared a core (about 3.5 µs) and sometimes woke each other across
//! cores (about 15 µs): two devices of one node measured 4× apart on a 2-core VM.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use gpuvet_model::stats::median;

use gpuvet_model::analysis::CONTENTION_EXTRA;

use super::contention::{core_idle_ns, on_core_ns, others_share_pct};
use crate::{BackendError, CancelToken, Sample};

/// A warm-up batch brings the worker and the channel to steady state first.
const WARMUP_LAUNCHES: usize = 200;
const BATCHES: usize = 20;
const LAUNCHES_PER_BATCH: usize = 200;

/// The empty task. It carries only its send time, so the worker can tell how long the
/// hand-off took, the way a CUDA event tells when a kernel started.
#[derive(Debug)]
struct EmptyTask {
    sent_at: Instant,
}

/// Per-launch means of one batch, in µs.
#[derive(Debug, Clone, Copy)]
struct BatchLatency {
    round_trip_us: f64,
    handoff_us: f64,
}

pub(super) fn run(device: u32, cancel: &CancelToken) -> Result<Sample, BackendError> {
    cancel.check()?;
    let core = core_of(device);
    // A scoped worker is joined before `run` returns on every path: when the task
    // sender drops, the worker's receive loop ends.
    thread::scope(|scope| {
        let (task_sender, task_receiver) = mpsc::channel();
        let (done_sender, done_receiver) = mpsc::channel();
        let worker = thread::Builder::new()
            .name(format!("gpuvet-launch-{device}"))
            .spawn_scoped(scope, move || {
                if let Some(core) = core {
                    pin_this_thread(core);
                }
                let ran_before = on_core_ns();
                run_worker(&task_receiver, &done_sender);
                Some(on_core_ns()?.saturating_sub(ran_before?))
            })
            .map_err(|error| BackendError::io("could not start the launch worker", error))?;

        // The launcher is a thread of its own for this one measurement, so pinning it
        // affects nothing else.
        let pinned = core.filter(|&core| pin_this_thread(core));
        let started = Instant::now();
        let launcher_ran_before = on_core_ns();
        let idle_before = pinned.and_then(core_idle_ns);
        launch_batch(&task_sender, &done_receiver, WARMUP_LAUNCHES)?;
        let mut batches = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            cancel.check()?;
            batches.push(launch_batch(
                &task_sender,
                &done_receiver,
                LAUNCHES_PER_BATCH,
            )?);
        }
        let mut sample = summarize(&batches);
        // Per device, so in `extra` (the check's params are shared by all devices).
        if let Some(core) = pinned {
            sample.extra.insert("core".to_owned(), core as f64);
        }
        // What of the core's time was neither the pair's nor idle, other work took.
        let launcher_ran = on_core_ns()
            .zip(launcher_ran_before)
            .map(|(a, b)| a - b.min(a));
        let idle = pinned.and_then(core_idle_ns).zip(idle_before);
        let wall_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        drop(task_sender);
        let worker_ran = worker.join().unwrap_or(None);
        if let (Some(launcher), Some(worker), Some((idle_after, idle_before))) =
            (launcher_ran, worker_ran, idle)
            && let Some(share) = others_share_pct(
                wall_ns,
                launcher + worker,
                idle_after.saturating_sub(idle_before),
            )
        {
            sample.extra.insert(CONTENTION_EXTRA.to_owned(), share);
        }
        Ok(sample)
    })
}

/// The core device `device` runs on: the (device mod n)-th of the n cores this process
/// may use; `None` when that cannot be read.
fn core_of(device: u32) -> Option<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let allowed: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    };
    if allowed.is_empty() {
        return None;
    }
    allowed.get(device as usize % allowed.len()).copied()
}

/// Pins the calling thread to `core`; false when the kernel refuses.
fn pin_this_thread(core: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Runs empty tasks until the launcher hangs up, reporting each one's hand-off time.
fn run_worker(tasks: &Receiver<EmptyTask>, done: &Sender<Duration>) {
    for task in tasks {
        let handoff = task.sent_at.elapsed();
        if done.send(handoff).is_err() {
            return;
        }
    }
}

/// Launches `launches` empty tasks one after another, each waited for.
fn launch_batch(
    tasks: &Sender<EmptyTask>,
    done: &Receiver<Duration>,
    launches: usize,
) -> Result<BatchLatency, BackendError> {
    let worker_gone = || BackendError::Failed("the launch worker stopped".to_owned());
    let mut handoff_total = Duration::ZERO;
    let started = Instant::now();
    for _ in 0..launches {
        tasks
            .send(EmptyTask {
                sent_at: Instant::now(),
            })
            .map_err(|_| worker_gone())?;
        handoff_total += done.recv().map_err(|_| worker_gone())?;
    }
    let elapsed = started.elapsed();
    let per_launch_us = |total: Duration| total.as_secs_f64() * 1e6 / launches as f64;
    Ok(BatchLatency {
        round_trip_us: per_launch_us(elapsed),
        handoff_us: per_launch_us(handoff_total),
    })
}

fn summarize(batches: &[BatchLatency]) -> Sample {
    let samples: Vec<f64> = batches.iter().map(|batch| batch.round_trip_us).collect();
    let handoffs: Vec<f64> = batches.iter().map(|batch| batch.handoff_us).collect();
    Sample {
        value: median(&samples).unwrap_or(0.0),
        extra: BTreeMap::from([("handoff_us".to_owned(), median(&handoffs).unwrap_or(0.0))]),
        params: BTreeMap::from([
            (
                "mechanism".to_owned(),
                "channel round trip to a worker thread".to_owned(),
            ),
            ("batches".to_owned(), batches.len().to_string()),
            (
                "launches_per_batch".to_owned(),
                LAUNCHES_PER_BATCH.to_string(),
            ),
        ]),
        samples,
        wrong_result: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_latency_is_positive_and_the_handoff_is_part_of_it() {
        let sample = run(0, &CancelToken::new()).unwrap();
        assert!(sample.value > 0.0 && sample.value.is_finite(), "{sample:?}");
        assert_eq!(sample.samples.len(), BATCHES);
        let handoff = sample.extra["handoff_us"];
        assert!(handoff > 0.0, "{sample:?}");
        // Per batch, one way cannot take longer than the round trip it is part of.
        assert!(handoff <= sample.value, "{sample:?}");
    }

    #[test]
    fn a_cancelled_token_stops_before_any_launch() {
        let cancel = CancelToken::new();
        cancel.cancel();
        assert_eq!(run(0, &cancel), Err(BackendError::Cancelled));
    }

    #[test]
    fn summary_takes_the_median_batch() {
        let batch = |round_trip_us, handoff_us| BatchLatency {
            round_trip_us,
            handoff_us,
        };
        let sample = summarize(&[batch(10.0, 4.0), batch(30.0, 9.0), batch(20.0, 5.0)]);
        assert_eq!(sample.value, 20.0);
        assert_eq!(sample.samples, vec![10.0, 30.0, 20.0]);
        assert_eq!(sample.extra["handoff_us"], 5.0);
    }

    #[test]
    fn a_worker_whose_launcher_hangs_up_returns() {
        let (task_sender, task_receiver) = mpsc::channel();
        let (done_sender, done_receiver) = mpsc::channel();
        let worker = thread::spawn(move || run_worker(&task_receiver, &done_sender));
        task_sender
            .send(EmptyTask {
                sent_at: Instant::now(),
            })
            .unwrap();
        assert!(done_receiver.recv().is_ok());
        drop(task_sender);
        worker.join().unwrap();
    }
}
