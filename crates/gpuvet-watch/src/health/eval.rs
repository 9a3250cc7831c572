//! Readings → findings: pure rules with thresholds from docs/reference.md, "Diagnosis
//! thresholds" (DCGM health watches, SuperBench's rule file, gpu-fryer).
//!
//! Each rule yields at most one finding per (check, GPU) per sample; the policy's
//! [`crate::policy::XidPolicy::observe_condition`] keeps it to one per boot.

use std::collections::BTreeMap;

use gpuvet_model::gpu_health::throttle::{self, ClockEventReason};
use gpuvet_model::results::Lane;

use super::{GpuSample, HealthReading, HealthThresholds, RecoveryAction};
use crate::finding::{CheckFamily, RuntimeCheck, RuntimeFinding, Severity};
use crate::xid::ActionClass;

/// Findings from one GPU sample, given the previous sample of the same GPU (for rates
/// and transitions). Pure.
pub fn evaluate_sample(
    prev: Option<&GpuSample>,
    cur: &GpuSample,
    th: &HealthThresholds,
) -> Vec<RuntimeFinding> {
    let mut out = Vec::new();
    let gpu = &cur.gpu;
    let t = cur.time_ms;
    let finding =
        |check: RuntimeCheck, action: ActionClass, severity: Severity, message: String| {
            RuntimeFinding::condition(
                "nvml",
                check,
                Some(gpu.clone()),
                Lane::Host,
                action,
                t,
                message,
            )
            .with_severity(severity)
        };

    if let Some(c) = cur.temperature_c.filter(|&c| c > th.max_temperature_c) {
        out.push(
            finding(
                RuntimeCheck::new(CheckFamily::Temperature, ""),
                ActionClass::ContactSupport,
                Severity::Warn,
                format!(
                    "{gpu} at {c} °C, above {} °C: check cooling",
                    th.max_temperature_c
                ),
            )
            .with_value(c as f64, Some(th.max_temperature_c as f64)),
        );
    }

    ecc_findings(prev, cur, &finding, &mut out);
    memory_findings(cur, th, &finding, &mut out);
    throttle_findings(cur, &finding, &mut out);
    nvlink_findings(prev, cur, th, &finding, &mut out);
    if let Some(f) = pcie_replay_finding(prev, cur, th) {
        out.push(f);
    }
    if let Some(f) = recovery_finding(cur, &finding) {
        out.push(f);
    }
    out
}

/// What a finding of one kind on this GPU looks like, given its check, action,
/// severity and message.
type Finding<'a> = &'a dyn Fn(RuntimeCheck, ActionClass, Severity, String) -> RuntimeFinding;

/// Uncorrectable ECC errors: any since the driver loaded, or a rise in the lifetime count.
fn ecc_findings(
    prev: Option<&GpuSample>,
    cur: &GpuSample,
    finding: Finding<'_>,
    out: &mut Vec<RuntimeFinding>,
) {
    let gpu = &cur.gpu;
    // Any uncorrectable ECC error fails (DCGM, SuperBench); corrected ones are what ECC
    // is for, and XID 92 reports an excessive rate of them.
    if let Some(n) = cur.ecc.volatile_uncorrected.filter(|&n| n > 0) {
        out.push(
            finding(
                RuntimeCheck::new(CheckFamily::Ecc, "volatile_uncorrected"),
                ActionClass::ResetGpu,
                Severity::Fail,
                format!("{gpu}: {n} uncorrectable ECC errors since the driver loaded"),
            )
            .with_value(n as f64, Some(0.0)),
        );
    }
    if let (Some(p), Some(c)) = (
        prev.and_then(|p| p.ecc.aggregate_uncorrected),
        cur.ecc.aggregate_uncorrected,
    ) && c > p
    {
        out.push(
            finding(
                RuntimeCheck::new(CheckFamily::Ecc, "aggregate_uncorrected_increase"),
                ActionClass::ResetGpu,
                Severity::Fail,
                format!("{gpu}: lifetime uncorrectable ECC errors rose from {p} to {c}"),
            )
            .with_value((c - p) as f64, Some(0.0)),
        );
    }
}

/// Row remapping and page retirement: failed or pending repairs, and too many of them.
fn memory_findings(
    cur: &GpuSample,
    th: &HealthThresholds,
    finding: Finding<'_>,
    out: &mut Vec<RuntimeFinding>,
) {
    let gpu = &cur.gpu;
    if let Some(r) = &cur.remapped_rows {
        if r.failure {
            out.push(finding(
                RuntimeCheck::new(CheckFamily::Remap, "failure"),
                ActionClass::ContactSupport,
                Severity::Fail,
                format!("{gpu}: row remapping failed (no spare rows left): replace the GPU"),
            ));
        }
        if r.pending {
            out.push(finding(
                RuntimeCheck::new(CheckFamily::Remap, "pending"),
                ActionClass::ResetGpu,
                Severity::Warn,
                format!("{gpu}: a row remap is pending: reset the GPU to apply it"),
            ));
        }
        if r.uncorrectable >= th.uncorrectable_remaps_warn {
            out.push(
                finding(
                    RuntimeCheck::new(CheckFamily::Remap, "uncorrectable"),
                    ActionClass::ContactSupport,
                    Severity::Warn,
                    format!(
                        "{gpu}: {} rows remapped for uncorrectable errors (warning at {})",
                        r.uncorrectable, th.uncorrectable_remaps_warn
                    ),
                )
                .with_value(
                    r.uncorrectable as f64,
                    Some(th.uncorrectable_remaps_warn as f64),
                ),
            );
        }
    }

    if let Some(p) = &cur.retired_pages {
        let total = p.single_bit + p.double_bit;
        if total >= th.retired_pages_fail {
            out.push(
                finding(
                    RuntimeCheck::new(CheckFamily::RetiredPages, ""),
                    ActionClass::ContactSupport,
                    Severity::Fail,
                    format!(
                        "{gpu}: {total} retired pages ({} single-bit, {} double-bit), limit {}",
                        p.single_bit, p.double_bit, th.retired_pages_fail
                    ),
                )
                .with_value(total as f64, Some(th.retired_pages_fail as f64)),
            );
        }
        if p.pending {
            out.push(finding(
                RuntimeCheck::new(CheckFamily::RetiredPages, "pending"),
                ActionClass::ResetGpu,
                Severity::Warn,
                format!("{gpu}: a page retirement is pending: reset the GPU to apply it"),
            ));
        }
    }
}

/// Clock event reasons that are faults (and the power brake, a warning).
fn throttle_findings(cur: &GpuSample, finding: Finding<'_>, out: &mut Vec<RuntimeFinding>) {
    let gpu = &cur.gpu;
    if let Some(bits) = cur.clock_event_reasons {
        let text = throttle::labels_text(bits);
        for r in throttle::decode(bits) {
            let severity = if r.is_fault() {
                Severity::Fail
            } else if r == ClockEventReason::HwPowerBrakeSlowdown {
                // The external power-brake signal: the node's power supply, not the GPU.
                Severity::Warn
            } else {
                continue;
            };
            out.push(
                finding(
                    RuntimeCheck::new(CheckFamily::Throttle, &r.as_str().to_ascii_lowercase()),
                    ActionClass::ContactSupport,
                    severity,
                    format!(
                        "{gpu} clocks held back: 0x{bits:x} = {text}; {} is a fault",
                        r.as_str()
                    ),
                )
                .with_value(bits as f64, None),
            );
        }
    }
}

/// The driver's recovery action, when it asks for one.
fn recovery_finding(cur: &GpuSample, finding: Finding<'_>) -> Option<RuntimeFinding> {
    let gpu = &cur.gpu;
    match cur.recovery_action {
        None | Some(RecoveryAction::None) => None,
        Some(a) => {
            let (action, severity, what) = match a {
                RecoveryAction::GpuReset => (ActionClass::ResetGpu, Severity::Fail, "GPU_RESET"),
                RecoveryAction::NodeReboot => {
                    (ActionClass::RebootNode, Severity::Fail, "NODE_REBOOT")
                }
                RecoveryAction::DrainAndReset => {
                    (ActionClass::ResetGpu, Severity::Fail, "DRAIN_AND_RESET")
                }
                RecoveryAction::DrainP2p => (ActionClass::ResetGpu, Severity::Warn, "DRAIN_P2P"),
                RecoveryAction::Other(_) | RecoveryAction::None => (
                    ActionClass::ContactSupport,
                    Severity::Warn,
                    "an unknown action",
                ),
            };
            Some(finding(
                RuntimeCheck::new(CheckFamily::RecoveryAction, ""),
                action,
                severity,
                format!("{gpu}: the driver asks for {what} ({})", action.describe()),
            ))
        }
    }
}

fn nvlink_findings(
    prev: Option<&GpuSample>,
    cur: &GpuSample,
    th: &HealthThresholds,
    finding: Finding<'_>,
    out: &mut Vec<RuntimeFinding>,
) {
    let gpu = &cur.gpu;
    let links = &cur.nvlink.links;
    match prev.filter(|p| !p.nvlink.links.is_empty()) {
        Some(p) if !links.is_empty() => {
            let was_up: BTreeMap<u32, bool> =
                p.nvlink.links.iter().map(|l| (l.link, l.active)).collect();
            let down: Vec<String> = links
                .iter()
                .filter(|l| !l.active && was_up.get(&l.link) == Some(&true))
                .map(|l| l.link.to_string())
                .collect();
            if !down.is_empty() {
                out.push(finding(
                    RuntimeCheck::new(CheckFamily::Nvlink, "down"),
                    ActionClass::ResetGpu,
                    Severity::Fail,
                    format!("{gpu}: NVLink link(s) {} went down", down.join(", ")),
                ));
            }
        }
        _ => {
            // First look: links that are down while their siblings are up.
            let up = links.iter().filter(|l| l.active).count();
            let down: Vec<String> = links
                .iter()
                .filter(|l| !l.active)
                .map(|l| l.link.to_string())
                .collect();
            if up > 0 && !down.is_empty() {
                out.push(finding(
                    RuntimeCheck::new(CheckFamily::Nvlink, "inactive"),
                    ActionClass::ContactSupport,
                    Severity::Warn,
                    format!(
                        "{gpu}: NVLink link(s) {} inactive while {up} are active",
                        down.join(", ")
                    ),
                ));
            }
        }
    }

    let Some(p) = prev else { return };
    let dt_ms = cur.time_ms.saturating_sub(p.time_ms);
    if dt_ms == 0 {
        return;
    }
    let delta = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    };
    let flit = delta(p.nvlink.crc_flit_total, cur.nvlink.crc_flit_total);
    let data = delta(p.nvlink.crc_data_total, cur.nvlink.crc_data_total);
    if flit.is_some() || data.is_some() {
        let per_s = (flit.unwrap_or(0) + data.unwrap_or(0)) as f64 * 1000.0 / dt_ms as f64;
        if per_s > th.nvlink_crc_per_s {
            out.push(
                finding(
                    RuntimeCheck::new(CheckFamily::Nvlink, "crc_rate"),
                    ActionClass::ContactSupport,
                    Severity::Warn,
                    format!(
                        "{gpu}: {per_s:.0} NVLink CRC errors/s, above {}",
                        th.nvlink_crc_per_s
                    ),
                )
                .with_value(per_s, Some(th.nvlink_crc_per_s)),
            );
        }
    }
}

/// DCGM's PCIe health watch: replays per minute per lane above the limit.
fn pcie_replay_finding(
    prev: Option<&GpuSample>,
    cur: &GpuSample,
    th: &HealthThresholds,
) -> Option<RuntimeFinding> {
    let p = prev?;
    let dt_ms = cur.time_ms.checked_sub(p.time_ms).filter(|&d| d > 0)?;
    let (a, b) = (p.pcie_replays?, cur.pcie_replays?);
    // A counter that went down was reset: no rate this time.
    let delta = b.checked_sub(a)?;
    let lanes = cur
        .pcie_link_width
        .filter(|&w| w > 0)
        .unwrap_or(th.default_pcie_lanes);
    let per_min = delta as f64 * 60_000.0 / dt_ms as f64;
    let limit = th.pcie_replays_per_min_per_lane * lanes as f64;
    if per_min <= limit {
        return None;
    }
    let gpu = &cur.gpu;
    Some(
        RuntimeFinding::condition(
            "nvml",
            RuntimeCheck::new(CheckFamily::Pcie, "replay_rate"),
            Some(gpu.clone()),
            Lane::Host,
            ActionClass::ContactSupport,
            cur.time_ms,
            format!(
                "{gpu}: {per_min:.1} PCIe replays/min on x{lanes}, above {limit:.1} ({} per lane)",
                th.pcie_replays_per_min_per_lane
            ),
        )
        .with_severity(Severity::Warn)
        .with_value(per_min, Some(limit)),
    )
}

/// Findings from readings that are not samples: NVML errors and hung probes. XID
/// observations and inventories go to the policy, not here (`None`).
pub fn evaluate_reading(reading: &HealthReading, th: &HealthThresholds) -> Option<RuntimeFinding> {
    match reading {
        HealthReading::GpuError {
            gpu,
            time_ms,
            call,
            error,
            lost,
        } => Some(if *lost {
            RuntimeFinding::condition(
                "nvml",
                RuntimeCheck::new(CheckFamily::Nvml, "gpu_lost"),
                Some(gpu.clone()),
                Lane::Host,
                ActionClass::RebootNode,
                *time_ms,
                format!("{gpu} is lost to NVML ({call}: {error}): it fell off the bus or hung"),
            )
        } else {
            RuntimeFinding::condition(
                "nvml",
                RuntimeCheck::new(CheckFamily::Nvml, &format!("error.{call}")),
                Some(gpu.clone()),
                Lane::Host,
                ActionClass::RecordOnly,
                *time_ms,
                format!("NVML {call} on {gpu} failed: {error}"),
            )
            .with_severity(Severity::Warn)
        }),
        HealthReading::ProbeHung {
            source,
            time_ms,
            hung_ms,
            skipped_polls,
        } => {
            let fail = *hung_ms >= th.probe_hung_fail_ms;
            let (action, severity) = if fail {
                (ActionClass::RebootNode, Severity::Fail)
            } else {
                (ActionClass::ContactSupport, Severity::Warn)
            };
            let secs = *hung_ms as f64 / 1000.0;
            Some(
                RuntimeFinding::condition(
                    "watchdog",
                    RuntimeCheck::new(CheckFamily::Probe, "hung"),
                    None,
                    Lane::Host,
                    action,
                    *time_ms,
                    format!(
                        "{source} probe hung for {secs:.0} s ({skipped_polls} polls skipped): \
                         the driver or a GPU is not answering"
                    ),
                )
                .with_severity(severity)
                .with_value(secs, Some(th.probe_hung_fail_ms as f64 / 1000.0)),
            )
        }
        HealthReading::Finding(finding) => Some(finding.clone()),
        HealthReading::Inventory { .. } | HealthReading::Xid(_) | HealthReading::Gpu(_) => None,
    }
}

/// [`evaluate_sample`] with memory: keeps the last sample per GPU for rates and
/// transitions. Link states not read in a poll are carried over from the last one.
#[derive(Debug, Default)]
pub struct HealthEvaluator {
    thresholds: HealthThresholds,
    last: BTreeMap<String, GpuSample>,
}

impl HealthEvaluator {
    pub fn new(thresholds: HealthThresholds) -> Self {
        HealthEvaluator {
            thresholds,
            last: BTreeMap::new(),
        }
    }

    pub fn thresholds(&self) -> &HealthThresholds {
        &self.thresholds
    }

    pub fn evaluate(&mut self, sample: &GpuSample) -> Vec<RuntimeFinding> {
        let key = sample.gpu.key();
        let prev = self.last.get(&key);
        let out = evaluate_sample(prev, sample, &self.thresholds);
        let mut keep = sample.clone();
        if keep.nvlink.links.is_empty()
            && let Some(p) = prev
        {
            keep.nvlink.links = p.nvlink.links.clone();
        }
        self.last.insert(key, keep);
        out
    }
}
