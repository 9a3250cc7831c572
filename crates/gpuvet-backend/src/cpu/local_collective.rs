//! All-reduce and all-gather among a node's logical devices through shared memory.
//!
//! One thread per device (a rank). Each all-reduce iteration is a reduce-scatter, where
//! rank r sums chunk r of every input into chunk r of its own result, then an
//! all-gather, where every rank copies the other ranks' reduced chunks into its result.
//! An all-gather iteration is the same without the sums: rank r copies chunk r of its
//! own input into its result, then gathers. Barriers separate the phases, so no lock is
//! ever contended: the locks only prove to the compiler that the phases do not overlap.
//!
//! A coordinating thread (the caller) decides before each iteration whether the ranks
//! go on or stop, and publishes the decision before the start barrier, so every rank
//! sees the same decision and none is left waiting at a barrier when the run is
//! cancelled.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Barrier, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::Instant;

use gpuvet_model::stats::median;

use super::{IterationBudget, try_filled};
use crate::chunk_ranges;
use crate::{BackendError, CancelToken, Sample, WorkSpec};

/// Bytes per rank when the work spec leaves it open: well past the last-level cache,
/// so the figure is memory bandwidth, yet 8 ranks need only 512 MiB in all.
const DEFAULT_BYTES_PER_RANK: u64 = 32 << 20;
const BUDGET: IterationBudget = IterationBudget {
    min_iterations: 5,
    max_iterations: 100,
    min_seconds: 0.3,
};
const ELEMENT_BYTES: usize = size_of::<f32>();

/// What the rank threads share for the whole run.
#[derive(Debug)]
struct Shared<'a> {
    collective: Collective,
    inputs: &'a [Vec<f32>],
    /// `outputs[rank][chunk]`: each rank's result, split the way ranks reduce it.
    outputs: &'a [Vec<RwLock<Vec<f32>>>],
    chunks: &'a [Range<usize>],
    start: Barrier,
    middle: Barrier,
    end: Barrier,
    /// The coordinator's decision for the iteration about to start.
    stop: AtomicBool,
}

/// Which collective the ranks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Collective {
    AllReduce,
    AllGather,
}

impl Collective {
    fn label(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::AllGather => "all-gather",
        }
    }

    /// busbw as nccl-tests defines it for this collective.
    fn busbw(self, algbw: f64, ranks: usize) -> f64 {
        match self {
            Collective::AllReduce => crate::all_reduce_busbw(algbw, ranks),
            Collective::AllGather => crate::all_gather_busbw(algbw, ranks),
        }
    }

    /// What element `index` of every rank's result must hold; `owner` is the rank whose
    /// chunk holds it.
    fn expected(self, ranks: usize, owner: usize, index: usize) -> f32 {
        match self {
            Collective::AllReduce => expected_sum(ranks, index),
            Collective::AllGather => input_value(owner, index),
        }
    }
}

pub(super) fn run(
    collective: Collective,
    devices: &[u32],
    work: &WorkSpec,
    cancel: &CancelToken,
) -> Result<Sample, BackendError> {
    cancel.check()?;
    let ranks = devices.len();
    let requested_bytes = work.collective_bytes.unwrap_or(DEFAULT_BYTES_PER_RANK);
    let elements = usize::try_from(requested_bytes)
        .unwrap_or(usize::MAX)
        .div_ceil(ELEMENT_BYTES)
        .max(1);
    let chunks = chunk_ranges(elements, ranks);
    let inputs = (0..ranks)
        .map(|rank| {
            try_filled(elements, "a collective's input", |index| {
                input_value(rank, index)
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = (0..ranks)
        .map(|_| {
            chunks
                .iter()
                .map(|chunk| {
                    try_filled(chunk.len(), "a collective's result", |_| 0.0).map(RwLock::new)
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    cancel.check()?;

    let shared = Shared {
        collective,
        inputs: &inputs,
        outputs: &outputs,
        chunks: &chunks,
        start: Barrier::new(ranks + 1),
        middle: Barrier::new(ranks),
        end: Barrier::new(ranks + 1),
        stop: AtomicBool::new(false),
    };
    let iteration_seconds = coordinate(devices, &shared, cancel)?;

    let results: Vec<Vec<Vec<f32>>> = outputs
        .into_iter()
        .map(|rank_chunks| {
            rank_chunks
                .into_iter()
                .map(|chunk| chunk.into_inner().unwrap_or_else(PoisonError::into_inner))
                .collect()
        })
        .collect();
    let bytes = elements * ELEMENT_BYTES;
    let algbw: Vec<f64> = iteration_seconds
        .iter()
        .map(|seconds| bytes as f64 / seconds / 1e9)
        .collect();
    let samples: Vec<f64> = algbw
        .iter()
        .map(|&algbw| collective.busbw(algbw, ranks))
        .collect();
    let algorithm = match collective {
        Collective::AllReduce => "reduce-scatter + all-gather in shared memory",
        Collective::AllGather => "all-gather in shared memory",
    };
    Ok(Sample {
        value: median(&samples).unwrap_or(0.0),
        wrong_result: first_wrong_element(collective, devices, &results, &chunks),
        extra: BTreeMap::from([("algbw".to_owned(), median(&algbw).unwrap_or(0.0))]),
        params: BTreeMap::from([
            ("bytes".to_owned(), bytes.to_string()),
            ("ranks".to_owned(), ranks.to_string()),
            ("iterations".to_owned(), samples.len().to_string()),
            ("algorithm".to_owned(), algorithm.to_owned()),
        ]),
        samples,
    })
}

/// Runs one thread per rank and paces them: a warm-up iteration, then timed ones until
/// the budget is spent or the token is cancelled. Returns each timed iteration's
/// seconds, start barrier to end barrier.
fn coordinate(
    devices: &[u32],
    shared: &Shared<'_>,
    cancel: &CancelToken,
) -> Result<Vec<f64>, BackendError> {
    thread::scope(|scope| {
        // Ranks wait at a gate until every rank exists: a rank that failed to start
        // would leave the others at the first barrier forever. Dropping the gates
        // instead sends the started ranks home.
        let mut gates = Vec::with_capacity(devices.len());
        for (rank, device) in devices.iter().enumerate() {
            let (gate, gate_receiver) = mpsc::channel::<()>();
            thread::Builder::new()
                .name(format!("gpuvet-{}-{device}", shared.collective.label()))
                .spawn_scoped(scope, move || {
                    if gate_receiver.recv().is_ok() {
                        run_rank(rank, shared);
                    }
                })
                .map_err(|error| {
                    BackendError::io(
                        format!(
                            "could not start the {} thread of device {device}",
                            shared.collective.label()
                        ),
                        error,
                    )
                })?;
            gates.push(gate);
        }
        for gate in &gates {
            // A rank's receiver lives until it has read this, so the send cannot fail.
            let _ = gate.send(());
        }

        let mut timed_seconds = Vec::new();
        let mut timed_since: Option<Instant> = None;
        loop {
            let cancelled = cancel.is_cancelled();
            let budget_spent = timed_since.is_some_and(|since| {
                !BUDGET.wants_more(timed_seconds.len(), since.elapsed().as_secs_f64())
            });
            let stop = cancelled || budget_spent;
            shared.stop.store(stop, Ordering::SeqCst);
            shared.start.wait();
            if stop {
                return if cancelled {
                    Err(BackendError::Cancelled)
                } else {
                    Ok(timed_seconds)
                };
            }
            let iteration_start = Instant::now();
            shared.end.wait();
            let seconds = iteration_start.elapsed().as_secs_f64().max(1e-9);
            // The first iteration is the warm-up: pages touched, threads woken.
            match timed_since {
                None => timed_since = Some(Instant::now()),
                Some(_) => timed_seconds.push(seconds),
            }
        }
    })
}

/// One rank's loop: wait for the go, reduce (or contribute) its chunk, gather the
/// others.
fn run_rank(rank: usize, shared: &Shared<'_>) {
    loop {
        shared.start.wait();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        match shared.collective {
            Collective::AllReduce => reduce_scatter(rank, shared),
            Collective::AllGather => contribute(rank, shared),
        }
        shared.middle.wait();
        all_gather(rank, shared);
        shared.end.wait();
    }
}

/// Sums chunk `rank` of every input into chunk `rank` of this rank's result.
fn reduce_scatter(rank: usize, shared: &Shared<'_>) {
    let range = shared.chunks[rank].clone();
    let mut reduced = write(&shared.outputs[rank][rank]);
    let (first, others) = shared
        .inputs
        .split_first()
        .expect("an all-reduce has at least 2 ranks");
    reduced.copy_from_slice(&first[range.clone()]);
    for input in others {
        for (sum, &value) in reduced.iter_mut().zip(&input[range.clone()]) {
            *sum += value;
        }
    }
}

/// Copies chunk `rank` of this rank's input into its result: its share of an all-gather.
fn contribute(rank: usize, shared: &Shared<'_>) {
    let range = shared.chunks[rank].clone();
    write(&shared.outputs[rank][rank]).copy_from_slice(&shared.inputs[rank][range]);
}

/// Copies every other rank's reduced chunk into this rank's result, starting with the
/// next rank, as a ring would, so ranks do not all read the same chunk at once.
fn all_gather(rank: usize, shared: &Shared<'_>) {
    let ranks = shared.chunks.len();
    for step in 1..ranks {
        let chunk = (rank + step) % ranks;
        let source = read(&shared.outputs[chunk][chunk]);
        write(&shared.outputs[rank][chunk]).copy_from_slice(&source);
    }
}

// A poisoned lock means a rank panicked mid-copy; the final check reports the damage,
// so the data is still worth reading.
fn read(lock: &RwLock<Vec<f32>>) -> RwLockReadGuard<'_, Vec<f32>> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write(lock: &RwLock<Vec<f32>>) -> RwLockWriteGuard<'_, Vec<f32>> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Rank r's element i: small integers, so every sum is exact in f32 whatever the order.
fn input_value(rank: usize, index: usize) -> f32 {
    (rank + 1 + index % 7) as f32
}

/// The all-reduced element i: the sum of `input_value` over all ranks.
fn expected_sum(ranks: usize, index: usize) -> f32 {
    (ranks * (ranks + 1) / 2 + ranks * (index % 7)) as f32
}

/// The first element of any rank's result that is not what the collective must give,
/// as a message.
fn first_wrong_element(
    collective: Collective,
    devices: &[u32],
    results: &[Vec<Vec<f32>>],
    chunks: &[Range<usize>],
) -> Option<String> {
    let ranks = results.len();
    devices.iter().zip(results).find_map(|(device, result)| {
        chunks
            .iter()
            .zip(result)
            .enumerate()
            .find_map(|(owner, (range, values))| {
                range.clone().zip(values).find_map(|(index, &value)| {
                    let expected = collective.expected(ranks, owner, index);
                    (value != expected).then(|| match collective {
                        Collective::AllReduce => format!(
                            "device {device} holds {value} at element {index} but the sum over \
                         {ranks} ranks is {expected}"
                        ),
                        Collective::AllGather => format!(
                            "device {device} holds {value} at element {index} but rank {owner} \
                         sent {expected}"
                        ),
                    })
                })
            })
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SMALL: WorkSpec = WorkSpec {
        gemm_dtype: gpuvet_model::config::Dtype::Auto,
        gemm_size: None,
        collective_bytes: Some(64 << 10),
    };

    #[test]
    fn two_ranks_reduce_correctly() {
        let sample = run(Collective::AllReduce, &[0, 1], &SMALL, &CancelToken::new()).unwrap();
        assert_eq!(sample.wrong_result, None);
        assert!(sample.value > 0.0 && sample.value.is_finite(), "{sample:?}");
        assert!(sample.samples.len() >= BUDGET.min_iterations);
        // With 2 ranks busbw equals algbw.
        assert_eq!(sample.params["ranks"], "2");
        assert_eq!(sample.params["bytes"], (64 << 10).to_string());
        assert!(sample.extra["algbw"] > 0.0);
    }

    #[test]
    fn three_ranks_reduce_correctly_with_uneven_chunks() {
        // 64 KiB is 16384 elements, which 3 ranks cannot split evenly.
        let sample = run(
            Collective::AllReduce,
            &[4, 1, 2],
            &SMALL,
            &CancelToken::new(),
        )
        .unwrap();
        assert_eq!(sample.wrong_result, None);
        assert!(sample.value > 0.0, "{sample:?}");
        assert!(sample.extra["algbw"] > 0.0);
    }

    #[test]
    fn fewer_elements_than_ranks_still_works() {
        let tiny = WorkSpec {
            collective_bytes: Some(1),
            ..SMALL
        };
        let sample = run(
            Collective::AllReduce,
            &[0, 1, 2],
            &tiny,
            &CancelToken::new(),
        )
        .unwrap();
        assert_eq!(sample.wrong_result, None);
        assert_eq!(sample.params["bytes"], "4");
    }

    #[test]
    fn a_cancelled_token_stops_before_any_work() {
        let cancel = CancelToken::new();
        cancel.cancel();
        assert_eq!(
            run(
                Collective::AllReduce,
                &[0, 1],
                &WorkSpec::default(),
                &cancel
            ),
            Err(BackendError::Cancelled)
        );
    }

    #[test]
    fn cancelling_mid_run_stops_every_rank() {
        let cancel = CancelToken::new();
        let canceller = cancel.clone();
        // The run needs its allocation plus at least 0.3 s of timed iterations, so a
        // cancel after 1 ms always lands inside it.
        let cancelling = thread::spawn(move || {
            thread::sleep(Duration::from_millis(1));
            canceller.cancel();
        });
        // Returning at all shows that no rank was left at a barrier.
        assert_eq!(
            run(
                Collective::AllReduce,
                &[0, 1, 2],
                &WorkSpec::default(),
                &cancel
            ),
            Err(BackendError::Cancelled)
        );
        cancelling.join().unwrap();
    }

    #[test]
    fn ranks_gather_every_chunk_in_order() {
        for devices in [&[0, 1][..], &[4, 1, 2][..]] {
            let sample = run(Collective::AllGather, devices, &SMALL, &CancelToken::new()).unwrap();
            assert_eq!(sample.wrong_result, None);
            assert!(sample.value > 0.0 && sample.value.is_finite(), "{sample:?}");
            assert_eq!(sample.params["algorithm"], "all-gather in shared memory");
            // busbw is algbw × (n−1)/n for an all-gather.
            let n = devices.len() as f64;
            let algbw = sample.extra["algbw"];
            let busbw_of_median_algbw = algbw * (n - 1.0) / n;
            assert!((sample.value - busbw_of_median_algbw).abs() <= 1e-9 * algbw.max(1.0));
        }
    }

    #[test]
    fn a_gathered_chunk_from_the_wrong_rank_is_caught() {
        let chunks = chunk_ranges(10, 2);
        let correct: Vec<Vec<f32>> = chunks
            .iter()
            .enumerate()
            .map(|(owner, range)| range.clone().map(|i| input_value(owner, i)).collect())
            .collect();
        let mut results = vec![correct.clone(), correct];
        assert_eq!(
            first_wrong_element(Collective::AllGather, &[0, 1], &results, &chunks),
            None
        );
        // Device 0 kept its own data where rank 1's chunk belongs.
        results[0][1] = chunks[1].clone().map(|i| input_value(0, i)).collect();
        assert_eq!(
            first_wrong_element(Collective::AllGather, &[0, 1], &results, &chunks).as_deref(),
            Some("device 0 holds 6 at element 5 but rank 1 sent 7")
        );
    }

    #[test]
    fn expected_sums_match_the_inputs() {
        for ranks in 2..=8 {
            for index in 0..20 {
                let sum: f32 = (0..ranks).map(|rank| input_value(rank, index)).sum();
                assert_eq!(sum, expected_sum(ranks, index));
            }
        }
    }

    #[test]
    fn a_corrupted_result_is_caught_and_named() {
        let chunks = chunk_ranges(10, 2);
        let correct: Vec<Vec<f32>> = chunks
            .iter()
            .map(|range| range.clone().map(|index| expected_sum(2, index)).collect())
            .collect();
        let mut results = vec![correct.clone(), correct];
        assert_eq!(
            first_wrong_element(Collective::AllReduce, &[3, 5], &results, &chunks),
            None
        );
        results[1][1][2] += 1.0; // element 7 of device 5's result
        assert_eq!(
            first_wrong_element(Collective::AllReduce, &[3, 5], &results, &chunks).as_deref(),
            Some("device 5 holds 4 at element 7 but the sum over 2 ranks is 3")
        );
    }
}
