//! One GPU's health readings as the inventory records them, and the start-time rules
//! that turn them into findings.
//!
//! The backends write [`GpuHealth`] into [`crate::results::DeviceInfo::details`] under
//! [`keys`] and read it back; [`health_findings`] judges one GPU's snapshot (ECC, row
//! remapping, throttling, NVLink) with the limits in [`HealthThresholds`], as
//! `host`-lane findings. The runtime watch applies the same limits to its samples.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::keys;
use crate::gpu_health::{HealthThresholds, Severity, throttle};
use crate::results::Lane;

/// One GPU's health readings, as NVML gives them. `None`: not readable on this GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    /// [`throttle`] bits.
    pub throttle_reasons: Option<u64>,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_corrected_volatile: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    pub remapped_rows_correctable: Option<u32>,
    pub remapped_rows_uncorrectable: Option<u32>,
    pub remap_pending: Option<bool>,
    pub remap_failure: Option<bool>,
    pub pcie_replays: Option<u64>,
    pub nvlink_active: Option<u32>,
    pub nvlink_total: Option<u32>,
}

impl GpuHealth {
    /// The readings as device details, under [`keys`].
    pub fn to_details(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                out.insert(key.to_owned(), value);
            }
        };
        put(
            keys::TEMPERATURE_C,
            self.temperature_c.map(|v| v.to_string()),
        );
        put(keys::POWER_W, self.power_w.map(|v| format!("{v:.1}")));
        put(
            keys::POWER_LIMIT_W,
            self.power_limit_w.map(|v| format!("{v:.1}")),
        );
        put(keys::SM_CLOCK_MHZ, self.sm_clock_mhz.map(|v| v.to_string()));
        put(
            keys::SM_CLOCK_MAX_MHZ,
            self.sm_clock_max_mhz.map(|v| v.to_string()),
        );
        put(
            keys::THROTTLE_REASONS,
            self.throttle_reasons.map(throttle::format),
        );
        put(
            keys::ECC_UNCORRECTED,
            self.ecc_uncorrected_volatile.map(|v| v.to_string()),
        );
        put(
            keys::ECC_CORRECTED,
            self.ecc_corrected_volatile.map(|v| v.to_string()),
        );
        put(
            keys::ECC_UNCORRECTED_AGGREGATE,
            self.ecc_uncorrected_aggregate.map(|v| v.to_string()),
        );
        put(
            keys::REMAPPED_CORRECTABLE,
            self.remapped_rows_correctable.map(|v| v.to_string()),
        );
        put(
            keys::REMAPPED_UNCORRECTABLE,
            self.remapped_rows_uncorrectable.map(|v| v.to_string()),
        );
        put(
            keys::REMAP_PENDING,
            self.remap_pending.map(|v| v.to_string()),
        );
        put(
            keys::REMAP_FAILURE,
            self.remap_failure.map(|v| v.to_string()),
        );
        put(keys::PCIE_REPLAYS, self.pcie_replays.map(|v| v.to_string()));
        put(
            keys::NVLINK_ACTIVE,
            self.nvlink_active.map(|v| v.to_string()),
        );
        put(keys::NVLINK_TOTAL, self.nvlink_total.map(|v| v.to_string()));
        out
    }

    /// Reads [`GpuHealth::to_details`]'s output back; unreadable values are `None`.
    pub fn from_details(details: &BTreeMap<String, String>) -> GpuHealth {
        fn get<T: std::str::FromStr>(details: &BTreeMap<String, String>, key: &str) -> Option<T> {
            details.get(key).and_then(|v| v.trim().parse().ok())
        }
        GpuHealth {
            temperature_c: get(details, keys::TEMPERATURE_C),
            power_w: get(details, keys::POWER_W),
            power_limit_w: get(details, keys::POWER_LIMIT_W),
            sm_clock_mhz: get(details, keys::SM_CLOCK_MHZ),
            sm_clock_max_mhz: get(details, keys::SM_CLOCK_MAX_MHZ),
            throttle_reasons: details
                .get(keys::THROTTLE_REASONS)
                .and_then(|v| throttle::parse(v)),
            ecc_uncorrected_volatile: get(details, keys::ECC_UNCORRECTED),
            ecc_corrected_volatile: get(details, keys::ECC_CORRECTED),
            ecc_uncorrected_aggregate: get(details, keys::ECC_UNCORRECTED_AGGREGATE),
            remapped_rows_correctable: get(details, keys::REMAPPED_CORRECTABLE),
            remapped_rows_uncorrectable: get(details, keys::REMAPPED_UNCORRECTABLE),
            remap_pending: get(details, keys::REMAP_PENDING),
            remap_failure: get(details, keys::REMAP_FAILURE),
            pcie_replays: get(details, keys::PCIE_REPLAYS),
            nvlink_active: get(details, keys::NVLINK_ACTIVE),
            nvlink_total: get(details, keys::NVLINK_TOTAL),
        }
    }
}

/// A problem one GPU's readings show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthFinding {
    pub index: u32,
    pub severity: Severity,
    pub lane: Lane,
    pub reason: String,
}

/// What one GPU's readings say. Rules, with their sources:
/// - uncorrected ECC errors since the driver loaded: fail (SuperBench flags any);
/// - a row-remapping failure: fail; a pending remap (needs a GPU reset) and
///   [`HealthThresholds::uncorrectable_remaps_warn`] uncorrectable remaps: warn (DCGM);
/// - fewer active NVLink links than the GPU has: fail;
/// - temperature above [`HealthThresholds::max_temperature_c`]: warn (SuperBench);
/// - hardware slowdown or thermal throttling: warn (gpu-fryer treats them as faults
///   under load; a snapshot alone only explains slowness).
pub fn health_findings(index: u32, health: &GpuHealth) -> Vec<HealthFinding> {
    let limits = HealthThresholds::default();
    let (max_temperature_c, remaps_warn) =
        (limits.max_temperature_c, limits.uncorrectable_remaps_warn);
    let mut out = Vec::new();
    let mut add = |severity, reason: String| {
        out.push(HealthFinding {
            index,
            severity,
            lane: Lane::Host,
            reason,
        })
    };
    if let Some(n) = health.ecc_uncorrected_volatile.filter(|n| *n > 0) {
        add(
            Severity::Fail,
            format!("`{n}` uncorrected ECC errors since the driver loaded"),
        );
    }
    if health.remap_failure == Some(true) {
        add(
            Severity::Fail,
            "row remapping failed: the GPU has no spare rows left for a bad row".to_owned(),
        );
    }
    if health.remap_pending == Some(true) {
        add(
            Severity::Warn,
            "a row remap is pending: reset the GPU to apply it".to_owned(),
        );
    }
    if let Some(n) = health
        .remapped_rows_uncorrectable
        .filter(|n| u64::from(*n) >= remaps_warn)
    {
        add(
            Severity::Warn,
            format!("`{n}` rows remapped for uncorrectable errors (warning at `{remaps_warn}`)"),
        );
    }
    if let (Some(active), Some(total)) = (health.nvlink_active, health.nvlink_total)
        && total > 0
        && active < total
    {
        add(
            Severity::Fail,
            format!("only `{active}` of `{total}` NVLink links are active"),
        );
    }
    if let Some(t) = health.temperature_c.filter(|t| *t > max_temperature_c) {
        add(
            Severity::Warn,
            format!("temperature `{t}` °C is above `{max_temperature_c}` °C"),
        );
    }
    if let Some(bits) = health
        .throttle_reasons
        .filter(|b| b & throttle::ABNORMAL != 0)
    {
        let names = throttle::names(bits & throttle::ABNORMAL).join(", ");
        add(Severity::Warn, format!("clocks throttled by `{names}`"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_readings_have_no_finding() {
        let healthy = GpuHealth {
            temperature_c: Some(45),
            power_w: Some(120.0),
            power_limit_w: Some(700.0),
            sm_clock_mhz: Some(1980),
            sm_clock_max_mhz: Some(1980),
            throttle_reasons: Some(throttle::GPU_IDLE),
            ecc_uncorrected_volatile: Some(0),
            ecc_corrected_volatile: Some(3),
            remapped_rows_uncorrectable: Some(0),
            remap_pending: Some(false),
            remap_failure: Some(false),
            nvlink_active: Some(18),
            nvlink_total: Some(18),
            ..GpuHealth::default()
        };
        assert!(health_findings(0, &healthy).is_empty());
        // A GPU without NVLink (L40S) reads 0 of 0 links: nothing to report.
        let pcie = GpuHealth {
            nvlink_active: Some(0),
            nvlink_total: Some(0),
            ..healthy.clone()
        };
        assert!(health_findings(0, &pcie).is_empty());
        assert!(health_findings(0, &GpuHealth::default()).is_empty());
    }

    #[test]
    fn nvml_readings_translate_into_findings() {
        let sick = GpuHealth {
            temperature_c: Some(91),
            throttle_reasons: Some(throttle::SW_POWER_CAP | throttle::HW_THERMAL_SLOWDOWN),
            ecc_uncorrected_volatile: Some(2),
            remap_pending: Some(true),
            remap_failure: Some(true),
            remapped_rows_uncorrectable: Some(600),
            nvlink_active: Some(12),
            nvlink_total: Some(18),
            ..GpuHealth::default()
        };
        let findings = health_findings(3, &sick);
        let fails: Vec<&str> = findings
            .iter()
            .filter(|f| f.severity == Severity::Fail)
            .map(|f| f.reason.as_str())
            .collect();
        let warns: Vec<&str> = findings
            .iter()
            .filter(|f| f.severity == Severity::Warn)
            .map(|f| f.reason.as_str())
            .collect();
        assert_eq!(
            fails,
            [
                "`2` uncorrected ECC errors since the driver loaded",
                "row remapping failed: the GPU has no spare rows left for a bad row",
                "only `12` of `18` NVLink links are active",
            ]
        );
        assert_eq!(warns.len(), 4, "{warns:?}");
        assert!(warns.iter().any(|w| w.contains("`91` °C")));
        // The power cap is normal under load; only the thermal slowdown is named.
        assert!(
            warns.contains(&"clocks throttled by `hw_thermal_slowdown`"),
            "{warns:?}"
        );
        assert!(
            findings
                .iter()
                .all(|f| f.index == 3 && f.lane == Lane::Host)
        );
    }

    #[test]
    fn health_round_trips_through_device_details() {
        let health = GpuHealth {
            temperature_c: Some(50),
            power_w: Some(650.5),
            throttle_reasons: Some(throttle::SW_POWER_CAP),
            remap_pending: Some(false),
            nvlink_active: Some(18),
            nvlink_total: Some(18),
            pcie_replays: Some(0),
            ..GpuHealth::default()
        };
        let details = health.to_details();
        assert_eq!(details[keys::THROTTLE_REASONS], "0x4 (sw_power_cap)");
        assert_eq!(GpuHealth::from_details(&details), health);
    }
}
