//! The hardware behind the checks.
//!
//! A [`Backend`] runs one unit of work of a check (a GEMM on one device, a burst of
//! launches, an all-reduce across the node's devices) and returns what it measured. It
//! knows nothing of verdicts, deadlines or reports: the runner schedules the work,
//! enforces the timeout and hands the samples to the analysis in `gpuvet-model`.
//!
//! Implementations: [`cpu::CpuBackend`] measures real work on host cores,
//! [`cuda::CudaBackend`] runs cuBLAS GEMMs and NCCL collectives on NVIDIA GPUs (loaded at
//! run time, so the binary builds and runs without CUDA), and [`sim::SimBackend`] plays
//! a scripted machine (speeds, noise, hangs, errors) for tests, drills and benchmarks.
//! [`child`] holds what every child process gpuvet spawns needs: it dies with its parent.

pub mod child;
pub mod cpu;
pub mod cuda;
mod error;
pub mod sim;

pub use error::{BackendError, IoCause, with_causes};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gpuvet_model::catalog::CheckName;
use gpuvet_model::config::{BackendChoice, Dtype, Settings};
use gpuvet_model::results::DeviceInfo;

/// Set by the runner when the overall timeout expires; long-running work polls it and
/// stops early. Work that truly hangs never sees it, which the runner also handles.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `Err(Cancelled)` once cancelled, for use with `?` inside work loops.
    pub fn check(&self) -> Result<(), BackendError> {
        if self.is_cancelled() {
            Err(BackendError::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// How much work to do; `None` lets the backend pick a size that reaches steady state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkSpec {
    pub gemm_dtype: Dtype,
    pub gemm_size: Option<u32>,
    pub collective_bytes: Option<u64>,
}

impl WorkSpec {
    pub fn from_settings(settings: &Settings) -> Self {
        WorkSpec {
            gemm_dtype: settings.gemm_dtype,
            gemm_size: settings.gemm_size,
            collective_bytes: settings.collective_bytes,
        }
    }
}

impl Default for WorkSpec {
    fn default() -> Self {
        WorkSpec {
            gemm_dtype: Dtype::Auto,
            gemm_size: None,
            collective_bytes: None,
        }
    }
}

/// `extra` keys for what a measurement waited for before it could run, that no earlier
/// measurement of the process reported: the backend's probe, the slowest device's
/// context, and a run-time compile of device code. A run's checks share one worker
/// process, so the first check pays them and the later ones report 0.
pub mod setup_extra {
    pub const PROBE_MS: &str = "setup_probe_ms";
    pub const CONTEXT_MS: &str = "setup_context_ms";
    pub const NVRTC_MS: &str = "setup_nvrtc_ms";
}

/// What one unit of work measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// The check's headline metric (TFLOPS, µs per launch, busbw GB/s).
    pub value: f64,
    /// The headline metric of each timed iteration, for the noise estimate.
    pub samples: Vec<f64>,
    /// Set when the result was checked and found wrong.
    pub wrong_result: Option<String>,
    /// Secondary metrics (e.g. `algbw`, `event_us`).
    pub extra: BTreeMap<String, f64>,
    /// Parameters of the work as run (e.g. `dtype=fp32`, `size=1024`).
    pub params: BTreeMap<String, String>,
}

/// Whether a backend can run a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    Supported,
    /// The backend cannot run it yet; reported `not_implemented` with this reason.
    NotImplemented(String),
}

/// A machine that can run the checks' work.
///
/// Every method may block for as long as the work takes; the runner calls them on
/// worker threads and stops waiting when its deadline passes.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// `cpu`, `sim` or `cuda`: named in every report.
    fn name(&self) -> &'static str;

    /// The devices this backend drives on this node.
    fn devices(&self) -> &[DeviceInfo];

    fn supports(&self, check: CheckName) -> Support;

    /// How far below its peers a device may fall in `check` before it is slow, as a
    /// fraction, unless the config says otherwise. GPUs hold SuperBench's 5 %.
    fn default_tolerance(&self, _check: CheckName) -> f64 {
        gpuvet_model::config::DEFAULT_TOLERANCE_PCT / 100.0
    }

    /// Dense GEMM on one device: TFLOPS, with a correctness sample.
    fn gemm(
        &self,
        device: u32,
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError>;

    /// Launch latency of an empty unit of work on one device, in µs per launch.
    fn kernel_launch(
        &self,
        device: u32,
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError>;

    /// All-reduce across the given devices of this node: busbw in GB/s, as nccl-tests
    /// defines it, with the result checked.
    fn all_reduce_local(
        &self,
        devices: &[u32],
        work: &WorkSpec,
        cancel: &CancelToken,
    ) -> Result<Sample, BackendError>;

    /// All-gather across the given devices of this node: busbw in GB/s, as nccl-tests
    /// defines it, with the result checked. What `all_gather` measures when the group
    /// is this one node.
    fn all_gather_local(
        &self,
        _devices: &[u32],
        _work: &WorkSpec,
        _cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        Err(BackendError::Unsupported(format!(
            "the `{}` backend has no all-gather among a node's devices",
            self.name()
        )))
    }

    /// Whether this backend has its own transport between nodes (NCCL): then
    /// [`Backend::group_token`] and [`Backend::collective_across`] work, and the
    /// coordinator runs cross-node collectives through them instead of gpuvet's TCP
    /// data plane.
    fn spans_nodes(&self) -> bool {
        false
    }

    /// A new token for one collective spanning nodes (NCCL's unique id), made on the
    /// group's first node; the coordinator hands it to every member.
    fn group_token(&self) -> Result<Vec<u8>, BackendError> {
        Err(BackendError::Unsupported(format!(
            "the `{}` backend has no transport between nodes",
            self.name()
        )))
    }

    /// The collective of `across.check` across nodes, with this node's devices placed
    /// as `across.ranks` says: all of them as consecutive ranks of one collective (an
    /// all-reduce, all-gather or all-to-all), or device i in rail i's all-reduce, every
    /// rail at once (`multi_all_reduce`). busbw as nccl-tests defines it (the slowest
    /// rail's, with each rail's in `extra` as `rail{i}`), with the result checked.
    /// Every member must run the same work: the iteration count is fixed, not
    /// measured, so no member waits on a collective another never enqueues.
    fn collective_across(
        &self,
        _across: &Across,
        _work: &WorkSpec,
        _cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        Err(BackendError::Unsupported(format!(
            "the `{}` backend has no transport between nodes",
            self.name()
        )))
    }
}

/// This node's place in a collective that spans nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Across {
    /// The check it is measured for, which says the collective (`all_gather_2`: an
    /// all-gather).
    pub check: CheckName,
    pub ranks: AcrossRanks,
}

/// Which ranks this node's devices are, in the collectives of an [`Across`]. Tokens
/// come from [`Backend::group_token`] on the group's first node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcrossRanks {
    /// One collective over every device of every member: this node's devices are
    /// ranks `first_rank..` of `world`, in device order.
    Devices {
        token: Vec<u8>,
        world: usize,
        first_rank: usize,
    },
    /// One all-reduce per rail, all at once: device i of every member joins rail i,
    /// whose token is `tokens[i]`, as rank `node` of `nodes`. Devices beyond the
    /// rails sit out.
    Rails {
        tokens: Vec<Vec<u8>>,
        nodes: usize,
        node: usize,
    },
}

impl AcrossRanks {
    /// Ranks in each collective.
    pub fn world(&self) -> usize {
        match self {
            AcrossRanks::Devices { world, .. } => *world,
            AcrossRanks::Rails { nodes, .. } => *nodes,
        }
    }

    /// Every token, one per collective.
    pub fn tokens(&self) -> Vec<&[u8]> {
        match self {
            AcrossRanks::Devices { token, .. } => vec![token.as_slice()],
            AcrossRanks::Rails { tokens, .. } => tokens.iter().map(Vec::as_slice).collect(),
        }
    }
}

/// The backend `select` picked, and why `auto` fell back from a better one.
#[derive(Debug)]
pub struct Selected {
    pub backend: Box<dyn Backend>,
    /// Set when `auto` could not use the cuda backend: the reason, for the user.
    pub fallback_reason: Option<String>,
}

/// Picks the backend: flags and config say which, `auto` takes the best one present
/// (cuda when libcuda loads and a device answers, else the host's cores).
pub fn select(choice: BackendChoice, settings: &Settings) -> Result<Selected, BackendError> {
    let cpu = || {
        let devices = settings
            .cpu_devices
            .unwrap_or_else(cpu::default_device_count);
        Box::new(cpu::CpuBackend::new(devices)) as Box<dyn Backend>
    };
    let plain = |backend| {
        Ok(Selected {
            backend,
            fallback_reason: None,
        })
    };
    match choice {
        BackendChoice::Cpu => plain(cpu()),
        BackendChoice::Cuda => plain(Box::new(cuda::probe()?)),
        BackendChoice::Sim => plain(Box::new(sim::SimBackend::new(
            settings.sim.clone().unwrap_or_default(),
        ))),
        BackendChoice::Auto => match cuda::probe() {
            Ok(gpu) => plain(Box::new(gpu)),
            Err(BackendError::Unavailable { reason, .. }) => Ok(Selected {
                backend: cpu(),
                fallback_reason: Some(reason),
            }),
            Err(other) => Err(other),
        },
    }
}

/// `Err` unless `device` is one of the `count` devices of `backend`.
pub(crate) fn check_device(backend: &str, device: u32, count: u32) -> Result<(), BackendError> {
    if device < count {
        Ok(())
    } else {
        Err(BackendError::Failed(format!(
            "no device {device}; the {backend} backend has {count} devices"
        )))
    }
}

/// `Err` unless `devices` is a valid group for a node-local collective: at least two
/// devices, each known, none twice.
pub(crate) fn check_local_group(
    backend: &str,
    devices: &[u32],
    count: u32,
) -> Result<(), BackendError> {
    if devices.len() < 2 {
        return Err(BackendError::Unsupported(
            "a collective among a node's devices needs at least 2 of them".to_owned(),
        ));
    }
    for (position, &device) in devices.iter().enumerate() {
        check_device(backend, device, count)?;
        if devices[..position].contains(&device) {
            return Err(BackendError::Failed(format!(
                "device {device} is listed twice for the collective"
            )));
        }
    }
    Ok(())
}

/// One figure from per-rail all-reduces run at once: the slowest rail's sample, with
/// every rail's busbw in `extra` as `rail{i}` and their count in `params`. The first
/// rail that failed fails it.
pub fn slowest_rail(results: Vec<Result<Sample, BackendError>>) -> Result<Sample, BackendError> {
    let per_rail = per_rail_busbw(&results);
    let rails = results.len();
    let mut slowest: Option<Sample> = None;
    for result in results {
        let sample = result?;
        if slowest.as_ref().is_none_or(|s| sample.value < s.value) {
            slowest = Some(sample);
        }
    }
    let mut sample = slowest.ok_or_else(|| BackendError::Failed("no rail ran".to_owned()))?;
    sample.extra.extend(per_rail);
    sample.params.insert("rails".to_owned(), rails.to_string());
    Ok(sample)
}

/// Per-rail busbw of all-reduces run one per rail at once, keyed `rail{i}`, for a sample's `extra`.
pub fn per_rail_busbw(results: &[Result<Sample, BackendError>]) -> BTreeMap<String, f64> {
    results
        .iter()
        .enumerate()
        .filter_map(|(rail, result)| {
            result
                .as_ref()
                .ok()
                .map(|sample| (format!("rail{rail}"), sample.value))
        })
        .collect()
}

/// busbw of an all-reduce, as nccl-tests defines it: algbw × 2(n−1)/n.
pub fn all_reduce_busbw(algbw: f64, ranks: usize) -> f64 {
    if ranks == 0 {
        return 0.0;
    }
    let n = ranks as f64;
    algbw * 2.0 * (n - 1.0) / n
}

/// Splits `elements` into `ranks` contiguous chunks whose sizes differ by at most one:
/// how every collective here divides its buffer among ranks.
pub fn chunk_ranges(elements: usize, ranks: usize) -> Vec<std::ops::Range<usize>> {
    let (base, remainder) = (elements / ranks, elements % ranks);
    let mut start = 0;
    (0..ranks)
        .map(|rank| {
            let len = base + usize::from(rank < remainder);
            let range = start..start + len;
            start += len;
            range
        })
        .collect()
}

/// busbw of an all-gather or all-to-all, as nccl-tests defines it: algbw × (n−1)/n.
pub fn all_gather_busbw(algbw: f64, ranks: usize) -> f64 {
    if ranks == 0 {
        return 0.0;
    }
    let n = ranks as f64;
    algbw * (n - 1.0) / n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_everything_once() {
        assert_eq!(chunk_ranges(10, 3), vec![0..4, 4..7, 7..10]);
        assert_eq!(chunk_ranges(2, 3), vec![0..1, 1..2, 2..2]);
        assert_eq!(chunk_ranges(8, 2), vec![0..4, 4..8]);
    }

    #[test]
    fn busbw_follows_nccl_tests() {
        assert_eq!(all_reduce_busbw(10.0, 2), 10.0);
        assert_eq!(all_reduce_busbw(10.0, 8), 17.5);
        assert_eq!(all_reduce_busbw(10.0, 1), 0.0);
        assert_eq!(all_gather_busbw(10.0, 4), 7.5);
        assert_eq!(all_gather_busbw(10.0, 0), 0.0);
    }

    #[test]
    fn cancel_token_is_shared_between_clones() {
        let token = CancelToken::new();
        let clone = token.clone();
        assert!(clone.check().is_ok());
        token.cancel();
        assert_eq!(clone.check(), Err(BackendError::Cancelled));
    }
}
