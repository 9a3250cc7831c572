//! Fleet baselines learned, not typed (`gpuvet.baseline_from: server`): per GPU model
//! and check, the distribution of the fleet's `ok` results, which a fleet server
//! derives from what its nodes pushed and a node may judge by instead of the built-in
//! table (`baselines`). The built-in table stays the fallback, and a report says
//! which baseline judged each figure ([`BaselineSource`]).
//!
//! Per workload too (`history::work_of`: a GEMM's precision and shape), so an fp8
//! fleet's figures never judge a bf16 run; a node uses a check's fleet baseline only
//! when the fleet has one workload of it ([`fleet_limits`]).
//!
//! The limit is the fleet's median less (for higher-is-better metrics; plus, for
//! lower-is-better) the larger of [`FLEET_MARGIN`] and four robust spreads, the rule a
//! GPU's own record uses (`history`), so a model whose GPUs scatter widely gets a
//! looser limit than a steady one. None before [`MIN_FLEET_RESULTS`] results.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::Limit;
use crate::catalog::{CheckName, Direction};
use crate::history::{SPREAD_SIGMAS, summarize};
use crate::results::RunReport;

/// The fewest `ok` results of a model and check the fleet learns a baseline from.
pub const MIN_FLEET_RESULTS: usize = 20;
/// The smallest margin below (or above) the fleet's median that a limit allows.
pub const FLEET_MARGIN: f64 = 0.10;

/// The fleet's baseline of one GPU model and check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FleetBaseline {
    /// The device name the nodes report (`NVIDIA H200`).
    pub model: String,
    pub check: CheckName,
    /// The workload its results ran (`history::work_of`: a GEMM's precision and
    /// shape); empty for a check whose figure no parameter decides, and from servers
    /// that did not tell workloads apart.
    #[serde(default)]
    pub work: String,
    /// How many `ok` results it is learned from.
    pub results: u32,
    pub median: f64,
    /// The robust spread (1.4826 × MAD) in percent of the median.
    pub spread_pct: f64,
    /// The worst acceptable value: a floor for higher-is-better checks, a ceiling for
    /// lower-is-better ones.
    pub limit: f64,
}

impl FleetBaseline {
    /// Learns the baseline of `model` and `check` from the fleet's `ok` values; `None`
    /// with fewer than [`MIN_FLEET_RESULTS`] of them or no positive median.
    pub fn learn(model: &str, check: CheckName, values: &[f64]) -> Option<FleetBaseline> {
        let summary = summarize(values)?;
        if summary.runs < MIN_FLEET_RESULTS {
            return None;
        }
        let margin = FLEET_MARGIN.max(SPREAD_SIGMAS * summary.spread);
        let limit = match check.spec().metric.direction {
            Direction::HigherIsBetter => summary.median * (1.0 - margin).max(0.0),
            Direction::LowerIsBetter => summary.median * (1.0 + margin),
        };
        Some(FleetBaseline {
            model: model.to_owned(),
            check,
            work: String::new(),
            results: summary.runs as u32,
            median: summary.median,
            spread_pct: (summary.spread * 10_000.0).round() / 100.0,
            limit,
        })
    }

    pub fn as_limit(&self) -> Limit {
        match self.check.spec().metric.direction {
            Direction::HigherIsBetter => Limit::Floor(self.limit),
            Direction::LowerIsBetter => Limit::Ceiling(self.limit),
        }
    }
}

/// Which baseline judged a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum BaselineSource {
    /// `gpuvet.baselines` in the config.
    Config,
    /// The fleet's, learned by the server (`gpuvet.baseline_from: server`).
    Fleet,
    /// The built-in table of published figures (`baselines`).
    Builtin,
}

/// The fleet's limit of each check for a node whose GPUs are all `model`. A check
/// whose fleet baselines cover several workloads (a bf16 and an fp8 GEMM) has none
/// here: which one this node will run is known only once it has run
/// ([`ambiguous_checks`] names them).
pub fn fleet_limits(fleet: &[FleetBaseline], model: Option<&str>) -> BTreeMap<CheckName, Limit> {
    let ambiguous = ambiguous_checks(fleet, model);
    let Some(model) = model else {
        return BTreeMap::new();
    };
    fleet
        .iter()
        .filter(|b| b.model == model && !ambiguous.contains(&b.check))
        .map(|b| (b.check, b.as_limit()))
        .collect()
}

/// The checks whose fleet baselines for `model` cover more than one workload.
pub fn ambiguous_checks(fleet: &[FleetBaseline], model: Option<&str>) -> Vec<CheckName> {
    let Some(model) = model else {
        return Vec::new();
    };
    let mut works: BTreeMap<CheckName, Vec<&str>> = BTreeMap::new();
    for baseline in fleet.iter().filter(|b| b.model == model) {
        let seen = works.entry(baseline.check).or_default();
        if !seen.contains(&baseline.work.as_str()) {
            seen.push(&baseline.work);
        }
    }
    works
        .into_iter()
        .filter(|(_, works)| works.len() > 1)
        .map(|(check, _)| check)
        .collect()
}

/// Marks every figure of the report that a baseline judged with where that baseline
/// came from.
pub fn mark_sources(report: &mut RunReport, sources: &BTreeMap<CheckName, BaselineSource>) {
    for check in &mut report.checks {
        let Some(&source) = sources.get(&check.name) else {
            continue;
        };
        for entity in &mut check.entities {
            if entity.evidence.baseline.is_some() {
                entity.evidence.baseline_source = Some(source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A learned baseline of `check` for `model` at `work`, its limit `limit`.
    fn baseline(model: &str, check: CheckName, work: &str, limit: f64) -> FleetBaseline {
        FleetBaseline {
            model: model.to_owned(),
            check,
            work: work.to_owned(),
            results: 20,
            median: limit / 0.9,
            spread_pct: 1.0,
            limit,
        }
    }

    #[test]
    fn a_check_whose_fleet_ran_several_workloads_has_no_fleet_limit() {
        let fleet = [
            baseline("H200", CheckName::GemmFlops, "dtype=bf16", 600.0),
            baseline("H200", CheckName::GemmFlops, "dtype=fp8", 1200.0),
            baseline("H200", CheckName::KernelLaunch, "", 4.0),
            baseline("H100", CheckName::GemmFlops, "dtype=bf16", 500.0),
        ];
        assert_eq!(
            ambiguous_checks(&fleet, Some("H200")),
            [CheckName::GemmFlops]
        );
        let limits = fleet_limits(&fleet, Some("H200"));
        assert_eq!(
            limits.keys().copied().collect::<Vec<_>>(),
            [CheckName::KernelLaunch]
        );
        // One workload: its limit.
        let limits = fleet_limits(&fleet, Some("H100"));
        assert_eq!(limits[&CheckName::GemmFlops], Limit::Floor(500.0));
        assert!(ambiguous_checks(&fleet, None).is_empty());
        assert!(fleet_limits(&fleet, None).is_empty());
    }

    #[test]
    fn a_baseline_is_learned_from_enough_results_with_a_margin_its_spread_widens() {
        let steady: Vec<f64> = (0..20).map(|i| 700.0 + (i % 3) as f64).collect();
        let learned = FleetBaseline::learn("NVIDIA H200", CheckName::GemmFlops, &steady).unwrap();
        assert_eq!(learned.results, 20);
        assert_eq!(learned.median, 701.0);
        assert!((learned.limit - 701.0 * 0.9).abs() < 1e-9, "{learned:?}");
        assert_eq!(learned.as_limit(), Limit::Floor(learned.limit));
        assert_eq!(
            FleetBaseline::learn("NVIDIA H200", CheckName::GemmFlops, &steady[..19]),
            None
        );
        // A model whose GPUs scatter 5 % gets 4 spreads, 20 %.
        let scattered: Vec<f64> = (0..40)
            .map(|i| {
                if i % 2 == 0 {
                    100.0 * (1.0 + 0.05 / 1.4826)
                } else {
                    100.0 * (1.0 - 0.05 / 1.4826)
                }
            })
            .collect();
        let learned = FleetBaseline::learn("X", CheckName::GemmFlops, &scattered).unwrap();
        assert!((learned.limit - 80.0).abs() < 1e-6, "{learned:?}");
        // Lower is better: a ceiling above the median.
        let launch: Vec<f64> = vec![10.0; 25];
        let learned = FleetBaseline::learn("X", CheckName::KernelLaunch, &launch).unwrap();
        assert_eq!(learned.as_limit(), Limit::Ceiling(11.0));
    }

    #[test]
    fn a_node_gets_its_own_models_limits_only() {
        let values = vec![100.0; 30];
        let fleet = vec![
            FleetBaseline::learn("A", CheckName::GemmFlops, &values).unwrap(),
            FleetBaseline::learn("B", CheckName::GemmFlops, &[50.0; 30]).unwrap(),
        ];
        assert_eq!(
            fleet_limits(&fleet, Some("A")),
            BTreeMap::from([(CheckName::GemmFlops, Limit::Floor(90.0))])
        );
        assert!(fleet_limits(&fleet, Some("C")).is_empty());
        assert!(fleet_limits(&fleet, None).is_empty());
    }

    #[test]
    fn sources_are_said_only_where_a_baseline_judged() {
        let json = serde_json::to_string(&BaselineSource::Builtin).unwrap();
        assert_eq!(json, "\"builtin\"");
        let mut report: RunReport = serde_json::from_value(serde_json::json!({
            "gpuvet_version": "0", "job_id": "j", "attempt": 1, "node": "n", "instance": "i",
            "backend": "sim", "devices": [], "started_at_ms": 0, "duration_secs": 0.0,
            "timeout_secs": 0.0, "outcome": "passed",
            "checks": [{"name": "gemm_flops", "status": "passed", "duration_secs": 0.0,
                "metric": {"name": "tflops", "unit": "TFLOPS", "direction": "higher_is_better"},
                "entities": [
                    {"entity": {"kind": "device", "node": "n", "index": 0}, "verdict": "ok",
                     "lane": "host", "reason": "", "evidence": {"baseline": 90.0},
                     "measurement": {"entity": {"kind": "device", "node": "n", "index": 0}, "value": 100.0}},
                    {"entity": {"kind": "device", "node": "n", "index": 1}, "verdict": "ok",
                     "lane": "host", "reason": "", "evidence": {},
                     "measurement": {"entity": {"kind": "device", "node": "n", "index": 1}, "value": 100.0}}
                ]}]
        }))
        .unwrap();
        mark_sources(
            &mut report,
            &BTreeMap::from([(CheckName::GemmFlops, BaselineSource::Fleet)]),
        );
        let entities = &report.checks[0].entities;
        assert_eq!(
            entities[0].evidence.baseline_source,
            Some(BaselineSource::Fleet)
        );
        assert_eq!(entities[1].evidence.baseline_source, None);
    }
}
