//! One model of a GPU's health, shared by the start-time inventory
//! ([`crate::inventory::health`]), the cuda backend, the NVML reader (`gpuvet-nvml`) and
//! the runtime watch (`gpuvet-watch`): the clock event reasons ([`throttle`]), what
//! NVML's counters read ([`EccCounts`], [`RemappedRows`], ...), the thresholds where
//! readings become findings ([`HealthThresholds`]) and how bad a finding is
//! ([`Severity`]).
//!
//! The numbers and their sources are in docs/reference.md, "Diagnosis thresholds".

pub mod throttle;

use std::fmt;

use serde::{Deserialize, Serialize};

/// How bad a health finding is, at start and in the watch. `Fail` mirrors DCGM's
/// `DCGM_HEALTH_RESULT_FAIL`: the GPU should not serve, the entity is faulty. `Warn`
/// its `WARN`: worth recording, and it may explain slowness, but it does not fail the
/// GPU alone. `Info` is recorded only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warn,
    Fail,
}

impl Severity {
    /// The severity an action implies; action types (the watch's XID `ActionClass`)
    /// say which through `From`.
    pub fn for_action(action: impl Into<Severity>) -> Severity {
        action.into()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Fail => "fail",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where health readings cross into findings. The start-time rules use the
/// temperature and remap limits; the watch uses them all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthThresholds {
    /// Above this the GPU is too hot: 85 °C (SuperBench `rule.yaml`).
    pub max_temperature_c: u32,
    /// NVLink CRC errors (flit + data, all links) per second: 100 (DCGM health watch).
    pub nvlink_crc_per_s: f64,
    /// PCIe replays per minute per lane: 1.92 (DCGM health watch, Gen5).
    pub pcie_replays_per_min_per_lane: f64,
    /// Lanes assumed when NVML does not say: 16.
    pub default_pcie_lanes: u32,
    /// Retired pages (single + double bit) that fail the GPU: 63 (DCGM).
    pub retired_pages_fail: u64,
    /// Uncorrectable row remaps that warn: 512 (DCGM).
    pub uncorrectable_remaps_warn: u64,
    /// A probe hung this long fails (reboot): 60 s; shorter hangs warn. gpuvet's
    /// choice: NVML answers in milliseconds, and a minute-long hang is a wedged driver.
    pub probe_hung_fail_ms: u64,
}

impl Default for HealthThresholds {
    fn default() -> Self {
        HealthThresholds {
            max_temperature_c: 85,
            nvlink_crc_per_s: 100.0,
            pcie_replays_per_min_per_lane: 1.92,
            default_pcie_lanes: 16,
            retired_pages_fail: 63,
            uncorrectable_remaps_warn: 512,
            probe_hung_fail_ms: 60_000,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_actions_decode() {
        assert_eq!(RecoveryAction::from_raw(0), RecoveryAction::None);
        assert_eq!(RecoveryAction::from_raw(4), RecoveryAction::DrainAndReset);
        assert_eq!(RecoveryAction::from_raw(9), RecoveryAction::Other(9));
    }

    #[test]
    fn severities_order_mildest_first_and_print_in_snake_case() {
        assert!(Severity::Info < Severity::Warn && Severity::Warn < Severity::Fail);
        assert_eq!(serde_json::to_string(&Severity::Fail).unwrap(), r#""fail""#);
        assert_eq!(Severity::Warn.to_string(), "warn");
    }
}
