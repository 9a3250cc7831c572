//! Each GPU judged against its own past (`gpuvet.history`): a GPU that its peers and
//! the model's baseline pass, but that runs below its own record, is `degraded`.
//!
//! A GPU's record, per check and workload, is the headline values of its last `runs`
//! results that were `ok` (the store keeps them, by UUID where the backend reads one,
//! else by node and index: [`gpu_key`]; the workload is what decides the figure, such as
//! a GEMM's precision and shape: [`work_of`], so a bf16 run is never held to fp8's
//! record). Its summary is robust: the median, and the spread as the
//! median absolute deviation scaled to a standard deviation (× 1.4826) relative to the
//! median, so one odd run moves neither. A value is `degraded` when it is worse than
//! the median by more than the larger of the tolerance and [`SPREAD_SIGMAS`] spreads
//! (widened by √(1 + 1/n) for the median's own error): a GPU whose results scatter
//! widely is held to what its scatter allows, and a steady one to the tolerance.
//! `docs/benchmarks.md` ("A GPU against its own record") measures the false alarms
//! this gives.
//!
//! Off for a GPU with fewer than `min_runs` results in its record. A degraded GPU
//! fails its check only when the config says so (`fail_on_degraded`); otherwise the
//! verdict informs and the start goes ahead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::{deficit, fmt_value};
use crate::catalog::{CheckName, Scope};
use crate::inventory::keys;
use crate::results::{
    CheckResult, CheckStatus, DeviceInfo, Entity, EntityResult, Outcome, RunReport, Verdict,
};

/// How many spreads below its median a GPU may fall before it is degraded.
pub const SPREAD_SIGMAS: f64 = 4.0;
/// MAD × this estimates a normal distribution's standard deviation.
const MAD_TO_SIGMA: f64 = 1.4826;

/// `gpuvet.history`, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistoryPolicy {
    /// Judge against the record at all (`enabled`, default true).
    pub enabled: bool,
    /// How many of a GPU's last `ok` results its record holds (`runs`, default 20).
    pub runs: usize,
    /// The fewest results a record needs before it judges (`min_runs`, default 10).
    pub min_runs: usize,
    /// The smallest deficit that counts, as a fraction (`tolerance_pct`, default 8 %).
    pub tolerance: f64,
    /// Whether a degraded GPU fails its check (`fail_on_degraded`, default false).
    pub fail_on_degraded: bool,
}

pub const DEFAULT_RUNS: usize = 20;
pub const DEFAULT_MIN_RUNS: usize = 10;
pub const DEFAULT_TOLERANCE_PCT: f64 = 8.0;

impl Default for HistoryPolicy {
    fn default() -> Self {
        HistoryPolicy {
            enabled: true,
            runs: DEFAULT_RUNS,
            min_runs: DEFAULT_MIN_RUNS,
            tolerance: DEFAULT_TOLERANCE_PCT / 100.0,
            fail_on_degraded: false,
        }
    }
}

/// One GPU's record for one check, as the store reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRecord {
    /// Headline values of its last `ok` results, newest first.
    pub values: Vec<f64>,
    /// When the first of the results it holds was measured (Unix ms).
    pub first_at_ms: u64,
    /// When the earliest result of its current run of `degraded` verdicts was measured:
    /// the results since its last `ok` one. `None` when its last result was `ok`.
    pub degraded_since_ms: Option<u64>,
}

/// What a verdict against the record rests on, kept in the entity's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryEvidence {
    /// How many of its own `ok` results the record holds.
    pub runs: u32,
    /// Their median.
    pub median: f64,
    /// Their robust spread (1.4826 × MAD), in percent of the median.
    pub spread_pct: f64,
    /// How far from the median counts as degraded, in percent.
    pub threshold_pct: f64,
    /// How far from the median this value is, in percent (positive is worse).
    pub deficit_pct: f64,
    /// Unix ms of the record's first result.
    pub since_ms: u64,
    /// Unix ms of the first result of this degradation, when degraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_since_ms: Option<u64>,
    /// True when this degradation fails the check (`gpuvet.history.fail_on_degraded`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fails: bool,
}

/// A record's robust summary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub runs: usize,
    pub median: f64,
    /// 1.4826 × MAD / median: a relative standard deviation that outliers barely move.
    pub spread: f64,
}

/// The median and relative robust spread of finite `values`; `None` when there are
/// none or their median is not above zero.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let median = crate::stats::median(&finite)?;
    if median <= 0.0 {
        return None;
    }
    let deviations: Vec<f64> = finite.iter().map(|v| (v - median).abs()).collect();
    let mad = crate::stats::median(&deviations)?;
    Some(Summary {
        runs: finite.len(),
        median,
        spread: MAD_TO_SIGMA * mad / median,
    })
}

/// How far below the median (a fraction) a value may be before it is degraded.
pub fn threshold(summary: &Summary, tolerance: f64) -> f64 {
    let n = summary.runs as f64;
    tolerance.max(SPREAD_SIGMAS * summary.spread * (1.0 + 1.0 / n).sqrt())
}

/// The key a GPU's record is kept under: `uuid:UUID` where the report's devices give
/// this entity's UUID (on cuda: its own node's GPUs, and every node's in the group
/// coordinator's report), else `node/devN`. `None` for a GPU whose UUID this report
/// does not know although its backend names GPUs by UUID (another node's GPU in a
/// member's copy of the group's verdict): keyed by node and index it would be a
/// second record of the same GPU, beside the one its own node's report keeps.
pub fn gpu_key(report: &RunReport, entity: &Entity) -> Option<String> {
    gpu_key_among(&report.node, &report.devices, entity)
}

/// [`gpu_key`] with the report's node and device list given apart: what a node knows
/// of its own GPUs before it has a report.
pub fn gpu_key_among(own_node: &str, devices: &[DeviceInfo], entity: &Entity) -> Option<String> {
    let Entity::Device { node, index } = entity else {
        return None;
    };
    let uuid = device_among(own_node, devices, node, *index)
        .and_then(|d| d.facts.uuid.as_deref())
        .filter(|uuid| !uuid.is_empty());
    match uuid {
        Some(uuid) => Some(format!("uuid:{uuid}")),
        None if names_gpus_by_uuid(devices) => None,
        None => Some(entity.to_string()),
    }
}

/// The device `index` of `node` in the report's device list: a device that says which
/// node it is on (the coordinator's list of the group's devices), or this report's
/// own node's.
pub fn device_of<'r>(report: &'r RunReport, node: &str, index: u32) -> Option<&'r DeviceInfo> {
    device_among(&report.node, &report.devices, node, index)
}

fn device_among<'d>(
    own_node: &str,
    devices: &'d [DeviceInfo],
    node: &str,
    index: u32,
) -> Option<&'d DeviceInfo> {
    devices.iter().find(|device| {
        device.index == index
            && device
                .details
                .get(keys::NODE)
                .map_or(node == own_node, |on| on == node)
    })
}

/// Whether the backend names its GPUs by UUID: some device of it has one.
fn names_gpus_by_uuid(devices: &[DeviceInfo]) -> bool {
    devices
        .iter()
        .any(|d| d.facts.uuid.as_deref().is_some_and(|uuid| !uuid.is_empty()))
}

/// What one record is of: a GPU, a check, and the workload that decides its figure.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    /// [`gpu_key`]'s key.
    pub gpu: String,
    pub check: CheckName,
    /// [`work_of`]'s signature; empty for a check whose figure no parameter decides.
    pub work: String,
}

/// The parameters of a check's work that decide its figure: a GEMM's precision and
/// shape. Others (the iteration count, the library, notes) do not.
const WORK_PARAMS: &[(CheckName, &[&str])] = &[(CheckName::GemmFlops, &["dtype", "m", "n", "k"])];

/// The workload of a check's results as one string (`dtype=bf16 k=8192 m=8192 n=8192`,
/// its parameters in name order), from the parameters the check ran with; empty for a
/// check whose figure no parameter decides (`kernel_launch`).
pub fn work_of(check: &CheckResult) -> String {
    let Some((_, names)) = WORK_PARAMS.iter().find(|(name, _)| *name == check.name) else {
        return String::new();
    };
    check
        .params
        .iter()
        .filter(|(name, _)| names.contains(&name.as_str()))
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a check's results are judged against records: one value per GPU.
pub fn has_records(check: CheckName) -> bool {
    check.spec().scope == Scope::EachDevice
}

/// The records a report needs: one for every GPU measured by a check that has them,
/// with the check and its workload.
pub fn wanted(report: &RunReport) -> Vec<RecordKey> {
    report
        .checks
        .iter()
        .filter(|check| has_records(check.name))
        .flat_map(|check| {
            let work = work_of(check);
            check
                .entities
                .iter()
                .filter_map(|e| gpu_key(report, &e.entity))
                .map(move |gpu| RecordKey {
                    gpu,
                    check: check.name,
                    work: work.clone(),
                })
        })
        .collect()
}

/// Judges every GPU the peers and baseline passed against its record, where it has
/// enough of one: `ok` becomes `degraded` below the threshold, and the evidence keeps
/// the record either way. With `fail_on_degraded`, a degraded GPU fails its check and
/// the outcome follows. Returns how many GPUs it found degraded.
pub fn judge_report(
    report: &mut RunReport,
    records: &BTreeMap<RecordKey, GpuRecord>,
    policy: &HistoryPolicy,
    now_ms: u64,
) -> usize {
    if !policy.enabled {
        return 0;
    }
    let keys: Vec<Vec<Option<String>>> = report
        .checks
        .iter()
        .map(|check| {
            check
                .entities
                .iter()
                .map(|e| gpu_key(report, &e.entity))
                .collect()
        })
        .collect();
    let degraded = report
        .checks
        .iter_mut()
        .zip(keys)
        .map(|(check, keys)| judge_check(check, &keys, records, policy, now_ms))
        .sum();
    report.outcome = Outcome::of(&report.checks);
    degraded
}

/// Judges one check's GPUs against their records, `keys` giving each entity's
/// [`gpu_key`]; returns how many it found degraded.
fn judge_check(
    check: &mut CheckResult,
    keys: &[Option<String>],
    records: &BTreeMap<RecordKey, GpuRecord>,
    policy: &HistoryPolicy,
    now_ms: u64,
) -> usize {
    if !has_records(check.name) {
        return 0;
    }
    let mut degraded = 0;
    let work = work_of(check);
    for (result, gpu) in check.entities.iter_mut().zip(keys) {
        let Some(record) = gpu.as_ref().and_then(|gpu| {
            records.get(&RecordKey {
                gpu: gpu.clone(),
                check: check.name,
                work: work.clone(),
            })
        }) else {
            continue;
        };
        if judge_entity(check.name, result, record, policy, now_ms) {
            degraded += 1;
        }
    }
    fail_if_degraded(check);
    degraded
}

/// A node's own GPUs and their records, read before its checks run, so that in a
/// group each node judges its own GPUs before its results go to the coordinator.
/// A node's store holds the records of its own GPUs (on cuda, of no other node's), so
/// a node judging the group's report after the verdict would judge a different set of
/// GPUs than its peers, and with `fail_on_degraded` one node could refuse the start
/// that the others go ahead with. Judged before they are sent, the degradations are in
/// the group's verdict, which every node applies.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnRecords {
    /// This node's name, as its results name it.
    pub node: String,
    /// This node's devices, as its backend lists them.
    pub devices: Vec<DeviceInfo>,
    pub records: BTreeMap<RecordKey, GpuRecord>,
    pub policy: HistoryPolicy,
}

impl OwnRecords {
    /// The record keys of the node's GPUs ([`gpu_key`]), to read their records by.
    pub fn gpus(node: &str, devices: &[DeviceInfo]) -> Vec<String> {
        devices
            .iter()
            .filter_map(|device| {
                gpu_key_among(
                    node,
                    devices,
                    &Entity::Device {
                        node: node.to_owned(),
                        index: device.index,
                    },
                )
            })
            .collect()
    }

    /// Judges this node's GPUs among `check`'s results against their records, as
    /// [`judge_report`] does; other nodes' entities are left alone. Returns how many
    /// it found degraded.
    pub fn judge(&self, check: &mut CheckResult, now_ms: u64) -> usize {
        if !self.policy.enabled {
            return 0;
        }
        let keys: Vec<Option<String>> = check
            .entities
            .iter()
            .map(|e| match &e.entity {
                Entity::Device { node, .. } if *node == self.node => {
                    gpu_key_among(&self.node, &self.devices, &e.entity)
                }
                _ => None,
            })
            .collect();
        judge_check(check, &keys, &self.records, &self.policy, now_ms)
    }
}

/// A check that passed fails when one of its GPUs' degradation fails it.
fn fail_if_degraded(check: &mut CheckResult) {
    if check.status == CheckStatus::Passed && check.entities.iter().any(EntityResult::fails) {
        check.status = CheckStatus::Failed;
    }
}

/// Judges one entity against its record; returns whether it is now degraded.
pub fn judge_entity(
    check: CheckName,
    result: &mut EntityResult,
    record: &GpuRecord,
    policy: &HistoryPolicy,
    now_ms: u64,
) -> bool {
    let Some(value) = result.measurement.value else {
        return false;
    };
    let taken = record.values.len().min(policy.runs);
    if result.verdict != Verdict::Ok || taken < policy.min_runs {
        return false;
    }
    let Some(summary) = summarize(&record.values[..taken]) else {
        return false;
    };
    let spec = check.spec();
    let threshold = threshold(&summary, policy.tolerance);
    let deficit = deficit(spec.metric.direction, value, summary.median);
    let is_degraded = deficit > threshold;
    let degraded_since_ms = is_degraded.then(|| record.degraded_since_ms.unwrap_or(now_ms));
    result.evidence.history = Some(HistoryEvidence {
        runs: summary.runs as u32,
        median: summary.median,
        spread_pct: round2(summary.spread * 100.0),
        threshold_pct: round2(threshold * 100.0),
        deficit_pct: round2(deficit * 100.0),
        since_ms: record.first_at_ms,
        degraded_since_ms,
        fails: is_degraded && policy.fail_on_degraded,
    });
    if !is_degraded {
        return false;
    }
    let unit = spec.metric.unit;
    let worse = match spec.metric.direction {
        crate::catalog::Direction::HigherIsBetter => "below",
        crate::catalog::Direction::LowerIsBetter => "above",
    };
    let since = degraded_since_ms.unwrap_or(now_ms);
    let since_text = if since >= now_ms {
        "since this run".to_owned()
    } else {
        format!("since {}", crate::time::format_utc_ms(since))
    };
    result.verdict = Verdict::Degraded;
    result.reason = format!(
        "{} {unit} is {:.1}% {worse} its own median {} {unit} over its last {} ok runs \
         (threshold {:.1}%), {since_text}; against its peers and baseline: {}",
        fmt_value(value),
        deficit * 100.0,
        fmt_value(summary.median),
        summary.runs,
        threshold * 100.0,
        result.reason
    );
    true
}

fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests;
