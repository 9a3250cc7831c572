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
//!   ([`HealthThresholds`]).
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

use crate::policy::{GpuId, XidObservation};

pub use eval::{HealthEvaluator, HealthThresholds, evaluate_reading, evaluate_sample};
pub use fake::{FakeSource, FakeStep};
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
    NvmlInit(#[source] nvml_wrapper::error::NvmlError),
    /// An NVML call that the whole source depends on failed.
    #[error("NVML call {call} failed: {source}")]
    Nvml {
        call: &'static str,
        #[source]
        source: nvml_wrapper::error::NvmlError,
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
    Finding(crate::policy::RuntimeFinding),
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
    /// NVML clock-event (throttle) reasons, raw bits; see [`decode_clock_event_reasons`].
    pub clock_event_reasons: Option<u64>,
    pub pcie_replays: Option<u64>,
    pub pcie_link_width: Option<u32>,
    pub nvlink: NvLinkCounters,
    pub recovery_action: Option<RecoveryAction>,
}

/// ECC error counts (`nvmlDeviceGetTotalEccErrors`). Volatile counts reset with the
/// driver, aggregate ones last the GPU's life.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EccCounts {
    pub volatile_corrected: Option<u64>,
    pub volatile_uncorrected: Option<u64>,
    pub aggregate_corrected: Option<u64>,
    pub aggregate_uncorrected: Option<u64>,
}

/// `nvmlDeviceGetRemappedRows` (Ampere and newer).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u64,
    pub uncorrectable: u64,
    /// A remap waits for a GPU reset.
    pub pending: bool,
    /// A remap failed: the GPU is out of spare rows.
    pub failure: bool,
}

/// Retired pages (pre-Ampere page retirement).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredPages {
    pub single_bit: u64,
    pub double_bit: u64,
    /// A retirement waits for a reboot / driver reload.
    pub pending: bool,
}

/// NVLink state and error totals of one GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvLinkCounters {
    /// Per-link state; empty when not read in this poll (or no NVLink).
    pub links: Vec<NvLinkState>,
    pub crc_flit_total: Option<u64>,
    pub crc_data_total: Option<u64>,
    pub replay_total: Option<u64>,
    pub recovery_total: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvLinkState {
    pub link: u32,
    pub active: bool,
}

/// The driver's GPU recovery action (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`,
/// `DCGM_FI_DEV_GPU_RECOVERY_ACTION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    None,
    GpuReset,
    NodeReboot,
    DrainP2p,
    DrainAndReset,
    Other(u32),
}

impl RecoveryAction {
    /// From `nvmlDeviceGpuRecoveryAction_t`.
    pub fn from_raw(v: u32) -> Self {
        match v {
            0 => RecoveryAction::None,
            1 => RecoveryAction::GpuReset,
            2 => RecoveryAction::NodeReboot,
            3 => RecoveryAction::DrainP2p,
            4 => RecoveryAction::DrainAndReset,
            n => RecoveryAction::Other(n),
        }
    }
}

/// One NVML clock-event ("throttle") reason bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ClockEventReason {
    GpuIdle,
    ApplicationsClocksSetting,
    SwPowerCap,
    HwSlowdown,
    SyncBoost,
    SwThermalSlowdown,
    HwThermalSlowdown,
    HwPowerBrakeSlowdown,
    DisplayClockSetting,
    /// Bits this table does not know (newer drivers).
    Unknown(u64),
}

/// The known bits, from `nvml.h` (`nvmlClocksEventReason*`).
pub const CLOCK_EVENT_BITS: [(u64, ClockEventReason); 9] = [
    (0x1, ClockEventReason::GpuIdle),
    (0x2, ClockEventReason::ApplicationsClocksSetting),
    (0x4, ClockEventReason::SwPowerCap),
    (0x8, ClockEventReason::HwSlowdown),
    (0x10, ClockEventReason::SyncBoost),
    (0x20, ClockEventReason::SwThermalSlowdown),
    (0x40, ClockEventReason::HwThermalSlowdown),
    (0x80, ClockEventReason::HwPowerBrakeSlowdown),
    (0x100, ClockEventReason::DisplayClockSetting),
];

impl ClockEventReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ClockEventReason::GpuIdle => "GPU_IDLE",
            ClockEventReason::ApplicationsClocksSetting => "APPLICATIONS_CLOCKS_SETTING",
            ClockEventReason::SwPowerCap => "SW_POWER_CAP",
            ClockEventReason::HwSlowdown => "HW_SLOWDOWN",
            ClockEventReason::SyncBoost => "SYNC_BOOST",
            ClockEventReason::SwThermalSlowdown => "SW_THERMAL",
            ClockEventReason::HwThermalSlowdown => "HW_THERMAL",
            ClockEventReason::HwPowerBrakeSlowdown => "HW_POWER_BRAKE",
            ClockEventReason::DisplayClockSetting => "DISPLAY_CLOCK_SETTING",
            ClockEventReason::Unknown(_) => "UNKNOWN",
        }
    }

    /// gpu-fryer (`are_gpus_healthy`) counts HW_SLOWDOWN, HW_THERMAL and SW_THERMAL as
    /// faults; the others are normal operation (idle, power cap, boost, ...).
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            ClockEventReason::HwSlowdown
                | ClockEventReason::HwThermalSlowdown
                | ClockEventReason::SwThermalSlowdown
        )
    }
}

/// Every reason set in `bits`, in bit order; unknown bits come last as one
/// [`ClockEventReason::Unknown`]. A value with several bits set yields all of them.
pub fn decode_clock_event_reasons(bits: u64) -> Vec<ClockEventReason> {
    let mut out: Vec<ClockEventReason> = CLOCK_EVENT_BITS
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, r)| *r)
        .collect();
    let known = CLOCK_EVENT_BITS.iter().fold(0, |acc, (b, _)| acc | b);
    if bits & !known != 0 {
        out.push(ClockEventReason::Unknown(bits & !known));
    }
    out
}

/// `HW_SLOWDOWN | HW_THERMAL` style text for messages.
pub fn clock_event_reasons_text(bits: u64) -> String {
    let names: Vec<String> = decode_clock_event_reasons(bits)
        .into_iter()
        .map(|r| match r {
            ClockEventReason::Unknown(b) => format!("UNKNOWN(0x{b:x})"),
            r => r.as_str().to_owned(),
        })
        .collect();
    if names.is_empty() {
        "NONE".to_owned()
    } else {
        names.join(" | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_bits_decode_to_all_reasons() {
        let r = decode_clock_event_reasons(0x8 | 0x20 | 0x40 | 0x4);
        assert_eq!(
            r,
            vec![
                ClockEventReason::SwPowerCap,
                ClockEventReason::HwSlowdown,
                ClockEventReason::SwThermalSlowdown,
                ClockEventReason::HwThermalSlowdown,
            ]
        );
        assert_eq!(decode_clock_event_reasons(0), vec![]);
        assert_eq!(
            decode_clock_event_reasons(0x1 | 0x1000),
            vec![ClockEventReason::GpuIdle, ClockEventReason::Unknown(0x1000)]
        );
        assert_eq!(
            clock_event_reasons_text(0x88),
            "HW_SLOWDOWN | HW_POWER_BRAKE"
        );
        assert_eq!(clock_event_reasons_text(0), "NONE");
    }

    #[test]
    fn recovery_actions_decode() {
        assert_eq!(RecoveryAction::from_raw(0), RecoveryAction::None);
        assert_eq!(RecoveryAction::from_raw(4), RecoveryAction::DrainAndReset);
        assert_eq!(RecoveryAction::from_raw(9), RecoveryAction::Other(9));
    }
}
