//! GPU health sources behind one trait, and the rules that turn their readings into
//! findings.
//!
//! - [`HealthSource`]: anything polled about once a second for [`HealthReading`]s: the
//!   NVML source ([`NvmlSource`]), the kernel log ([`crate::kmsg::KmsgSource`]), and a
//!   scripted [`FakeSource`] for tests.
//! - [`Watchdog`]: runs a source's polls on a worker thread under a timeout; a hung
//!   probe becomes a [`HealthReading::ProbeHung`] reading, not a hung watcher.
//! - [`evaluate_sample`] / [`evaluate_reading`]: pure functions from readings to
//!   findings, with thresholds from DCGM, SuperBench and gpu-fryer
//!   ([`HealthThresholds`], gpuvet-model's, as are the reading types).
//! - [`Watcher`]: polls the sources, feeds the XID policy and yields new findings.
//!
//! [`HealthError`] is this part of the crate's error type.

mod eval;
mod fake;
mod nvml;
mod watchdog;
mod watcher;

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::finding::{GpuId, XidObservation};

pub use eval::{HealthEvaluator, evaluate_reading, evaluate_sample};
// The readings and thresholds are gpuvet-model's, shared with the start-time inventory.
pub use fake::{FakeSource, FakeStep};
pub use gpuvet_model::gpu_health::{
    EccCounts, HealthThresholds, NvLinkCounters, NvLinkState, RecoveryAction, RemappedRows,
    RetiredPages,
};
pub use nvml::{NvmlOptions, NvmlSource};
pub use watchdog::{Watchdog, WatchdogStats};
pub use watcher::{StepOutput, Watcher, WatcherConfig, WatcherHandle};

/// Errors of the health sources and the watcher.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// NVML could not start: no driver, no `libnvidia-ml.so.1`, or no permission.
    #[error(
        "cannot initialize NVML (is the NVIDIA driver installed and libnvidia-ml.so.1 \
         loadable?): {0}"
    )]
    NvmlInit(#[source] gpuvet_nvml::NvmlError),
    /// An NVML call that the whole source depends on failed.
    #[error("NVML call {call} failed: {source}")]
    Nvml {
        call: &'static str,
        #[source]
        source: gpuvet_nvml::NvmlError,
    },
    #[error("cannot read kernel log {}: {source}", path.display())]
    Kmsg {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A source's poll failed as a whole (fakes and other sources report this way).
    #[error("health source {source_name} failed: {message}")]
    Probe {
        source_name: String,
        message: String,
    },
    /// The source's worker thread is gone (it ended or panicked).
    #[error("health source {0} stopped")]
    SourceStopped(String),
    /// A probe panicked; the watchdog caught it.
    #[error("health source {0} panicked during a probe")]
    Panicked(String),
    #[error("cannot start a watcher thread: {0}")]
    Spawn(#[source] io::Error),
}

impl HealthError {
    /// Whether NVML is missing because this machine has no NVIDIA driver: its library
    /// does not load, or the driver is not loaded (the usual case off a GPU machine).
    pub fn is_no_driver(&self) -> bool {
        matches!(
            self,
            HealthError::NvmlInit(
                gpuvet_nvml::NvmlError::LibloadingError(_)
                    | gpuvet_nvml::NvmlError::DriverNotLoaded
            )
        )
    }
}

/// Something polled for GPU health. `poll` must not block for long: wrap sources that
/// can hang (NVML) in a [`Watchdog`].
pub trait HealthSource: Send {
    fn name(&self) -> &str;
    /// Readings since the last poll; `now_ms` is Unix ms, for sources that stamp
    /// readings with the poll time.
    fn poll(&mut self, now_ms: u64) -> Result<Vec<HealthReading>, HealthError>;
}

impl<S: HealthSource + ?Sized> HealthSource for Box<S> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn poll(&mut self, now_ms: u64) -> Result<Vec<HealthReading>, HealthError> {
        (**self).poll(now_ms)
    }
}

/// One thing a source saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HealthReading {
    /// The GPUs the source knows (index and PCI id): lets the policy match kernel-log
    /// PCI ids to NVML indexes, and know the node's GPU count.
    Inventory {
        gpus: Vec<GpuId>,
    },
    Xid(XidObservation),
    Gpu(GpuSample),
    /// A call about one GPU failed. `lost` for NVML's GPU_IS_LOST (the GPU fell off
    /// the bus); other errors are recorded, the watcher goes on.
    GpuError {
        gpu: GpuId,
        time_ms: u64,
        call: String,
        error: String,
        lost: bool,
    },
    /// A probe did not return within the watchdog's timeout.
    ProbeHung {
        source: String,
        time_ms: u64,
        hung_ms: u64,
        skipped_polls: u64,
    },
    /// A source that judges for itself (the NCCL RAS analyzer) hands over a finding;
    /// the policy deduplicates it like any other condition.
    Finding(crate::finding::RuntimeFinding),
}

/// One poll's counters and state of one GPU. `None`: not supported or not read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSample {
    pub gpu: GpuId,
    pub time_ms: u64,
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    pub ecc: EccCounts,
    pub remapped_rows: Option<RemappedRows>,
    pub retired_pages: Option<RetiredPages>,
    /// NVML clock-event (throttle) reasons, raw bits; see
    /// [`gpuvet_model::gpu_health::throttle`].
    pub clock_event_reasons: Option<u64>,
    pub pcie_replays: Option<u64>,
    pub pcie_link_width: Option<u32>,
    pub nvlink: NvLinkCounters,
    pub recovery_action: Option<RecoveryAction>,
}
