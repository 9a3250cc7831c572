//! Judging measurements: which entities are ok, slow or faulty, and why.
//!
//! An entity is `faulty` when its work errored, did nothing, or gave a wrong result. It
//! is `slow` when it is worse than the median of its peers by more than the tolerance
//! plus the measured noise, or worse than the baseline limit. The runner re-measures
//! every slow suspect once and judges again before anything is reported.

use std::collections::BTreeMap;

use crate::catalog::{CheckName, CheckSpec, Direction};
use crate::results::{CheckStatus, EntityResult, Evidence, Measurement, Verdict};
use crate::stats::{coefficient_of_variation, medians_of_the_others};

/// How many standard errors of the mean the noise term allows.
pub const NOISE_SIGMAS: f64 = 3.0;

/// The `extra` key of the share, in percent, of a measurement's time that other work
/// on a shared host held the cores it ran on, where the backend can tell (the cpu
/// backend reads it from the kernel's schedstat).
pub const CONTENTION_EXTRA: &str = "contention_pct";

/// A slow measurement that other work held back for more than this share of its time
/// says more about the neighbours than about the device.
pub const CONTENDED_PCT: f64 = 10.0;

/// The worst acceptable value of a check's headline metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// For higher-is-better metrics: anything below is slow.
    Floor(f64),
    /// For lower-is-better metrics: anything above is slow.
    Ceiling(f64),
}

impl Limit {
    pub fn value(self) -> f64 {
        match self {
            Limit::Floor(v) | Limit::Ceiling(v) => v,
        }
    }

    fn is_violated_by(self, value: f64) -> bool {
        match self {
            Limit::Floor(floor) => value < floor,
            Limit::Ceiling(ceiling) => value > ceiling,
        }
    }
}

/// The allowed deficit against the peer median of every check, as a fraction.
#[derive(Debug, Clone, PartialEq)]
pub struct Tolerances(BTreeMap<CheckName, f64>);

impl Tolerances {
    /// The same tolerance for every check.
    pub fn uniform(tolerance: f64) -> Self {
        Tolerances::from_fn(|_| tolerance)
    }

    /// Each check's tolerance from `of`.
    pub fn from_fn(of: impl Fn(CheckName) -> f64) -> Self {
        Tolerances(
            CheckName::ALL
                .iter()
                .map(|&check| (check, of(check)))
                .collect(),
        )
    }

    pub fn of(&self, check: CheckName) -> f64 {
        self.0.get(&check).copied().unwrap_or(DEFAULT_TOLERANCE)
    }
}

/// SuperBench's 5 %, for a check a [`Tolerances`] does not name.
const DEFAULT_TOLERANCE: f64 = crate::config::DEFAULT_TOLERANCE_PCT / 100.0;

/// The thresholds one check is judged by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JudgePolicy {
    /// Allowed deficit against the peer median, as a fraction (0.05 = 5 %).
    pub tolerance: f64,
    pub limit: Option<Limit>,
}

/// The relative noise of one measurement: the standard error of its mean, times
/// `NOISE_SIGMAS`. Zero when there are too few samples to tell.
pub fn noise(measurement: &Measurement) -> f64 {
    let n = measurement.samples.len();
    coefficient_of_variation(&measurement.samples)
        .map(|cv| NOISE_SIGMAS * cv / (n as f64).sqrt())
        .unwrap_or(0.0)
}

/// How much worse than `reference` the value is, as a fraction; negative when better.
pub fn deficit(direction: Direction, value: f64, reference: f64) -> f64 {
    match direction {
        Direction::HigherIsBetter => (reference - value) / reference,
        Direction::LowerIsBetter => (value - reference) / reference,
    }
}

/// Judges every measurement of one check against its peers and its limit.
pub fn judge(
    spec: &CheckSpec,
    measurements: &[Measurement],
    policy: &JudgePolicy,
) -> Vec<EntityResult> {
    let usable: Vec<Option<f64>> = measurements.iter().map(|m| usable_value(spec, m)).collect();
    measurements
        .iter()
        .zip(medians_of_the_others(&usable))
        .map(|(measurement, peer_median)| judge_one(spec, measurement, peer_median, policy))
        .collect()
}

fn usable_value(spec: &CheckSpec, measurement: &Measurement) -> Option<f64> {
    match measurement.value {
        Some(v)
            if measurement.error.is_none()
                && measurement.wrong_result.is_none()
                && is_work(spec, v) =>
        {
            Some(v)
        }
        _ => None,
    }
}

/// Whether `value` shows work done: finite, and above zero unless zero is a valid
/// result of the metric (a slowdown of 0 %).
fn is_work(spec: &CheckSpec, value: f64) -> bool {
    value.is_finite()
        && if spec.metric.zero_means_no_work {
            value > 0.0
        } else {
            value >= 0.0
        }
}

fn judge_one(
    spec: &CheckSpec,
    measurement: &Measurement,
    peer_median: Option<f64>,
    policy: &JudgePolicy,
) -> EntityResult {
    let unit = spec.metric.unit;
    let mut evidence = Evidence {
        value: measurement.value,
        peer_median,
        baseline: policy.limit.map(Limit::value),
        ..Evidence::default()
    };
    let verdict_with = |verdict, reason: String, evidence| EntityResult {
        entity: measurement.entity.clone(),
        verdict,
        lane: spec.lane,
        reason,
        evidence,
        measurement: measurement.clone(),
    };

    if let Some(error) = &measurement.error {
        return verdict_with(Verdict::Faulty, format!("error: {error}"), evidence);
    }
    if let Some(wrong) = &measurement.wrong_result {
        return verdict_with(Verdict::Faulty, format!("wrong result: {wrong}"), evidence);
    }
    let value = match measurement.value {
        Some(v) if is_work(spec, v) => v,
        Some(v) => {
            return verdict_with(
                Verdict::Faulty,
                format!("no work done: measured {v} {unit}"),
                evidence,
            );
        }
        None => {
            return verdict_with(
                Verdict::Faulty,
                "no measurement was returned".to_owned(),
                evidence,
            );
        }
    };

    if let Some(limit) = policy.limit
        && limit.is_violated_by(value)
    {
        let side = match limit {
            Limit::Floor(_) => "below the baseline floor",
            Limit::Ceiling(_) => "above the baseline ceiling",
        };
        let reason = format!(
            "{} {unit} is {side} of {} {unit}",
            fmt_value(value),
            fmt_value(limit.value())
        );
        return verdict_with(Verdict::Slow, reason, evidence);
    }

    let Some(reference) = peer_median else {
        return verdict_with(
            Verdict::Ok,
            "no peers to compare with; within the baseline".to_owned(),
            evidence,
        );
    };
    // A share of zero cannot be exceeded by a fraction of itself: only the limit applies.
    if reference <= 0.0 {
        return verdict_with(
            Verdict::Ok,
            format!("the peer median is 0 {unit}; within the baseline"),
            evidence,
        );
    }
    let noise = noise(measurement);
    let threshold = policy.tolerance + noise;
    let deficit = deficit(spec.metric.direction, value, reference);
    evidence.noise_pct = Some(round2(noise * 100.0));
    evidence.threshold_pct = Some(round2(threshold * 100.0));
    evidence.deficit_pct = Some(round2(deficit * 100.0));
    let worse = match spec.metric.direction {
        Direction::HigherIsBetter => "below",
        Direction::LowerIsBetter => "above",
    };
    if deficit > threshold {
        let reason = format!(
            "{} {unit} is {:.1}% {worse} the peer median {} {unit} (threshold {:.1}%)",
            fmt_value(value),
            deficit * 100.0,
            fmt_value(reference),
            threshold * 100.0
        );
        verdict_with(Verdict::Slow, reason, evidence)
    } else {
        let reason = format!(
            "within {:.1}% of the peer median (threshold {:.1}%)",
            deficit.max(0.0) * 100.0,
            threshold * 100.0
        );
        verdict_with(Verdict::Ok, reason, evidence)
    }
}

/// Clears a slow verdict that a neighbour's load explains. Other work that held the
/// measurement's cores for a share `s` of the time (above [`CONTENDED_PCT`]) leaves it
/// `1 − s` of them: throughput scales by that, time by its inverse. When the value so
/// corrected passes the same limit and peer comparison, the deficit is the neighbour's,
/// not the device's; a deficit larger than the load explains stays slow. A load spike
/// on a shared machine is not a device fault, and a device that is slow on its own is
/// still found. Returns whether the verdict was cleared.
pub fn clear_contended_slow(
    result: &mut EntityResult,
    spec: &CheckSpec,
    policy: &JudgePolicy,
) -> bool {
    let Some(&share) = result.measurement.extra.get(CONTENTION_EXTRA) else {
        return false;
    };
    let contended = share > CONTENDED_PCT; // false for NaN: an unknown share excuses nothing
    let Some(value) = result.measurement.value else {
        return false;
    };
    if result.verdict != Verdict::Slow || !contended {
        return false;
    }
    // Never more than a tenfold correction, however busy the cores were.
    let free = (1.0 - share / 100.0).clamp(0.1, 1.0);
    let correct = |v: f64| match spec.metric.direction {
        Direction::HigherIsBetter => v / free,
        Direction::LowerIsBetter => v * free,
    };
    let mut corrected = result.measurement.clone();
    corrected.value = Some(correct(value));
    corrected.samples = corrected.samples.iter().map(|&v| correct(v)).collect();
    let rejudged = judge_one(spec, &corrected, result.evidence.peer_median, policy);
    if rejudged.verdict != Verdict::Ok {
        return false;
    }
    let unit = spec.metric.unit;
    result.verdict = Verdict::Ok;
    result.reason = format!(
        "not judged slow: other work held its cores {share:.0}% of the time it was measured, \
         which explains the deficit ({} {unit} measured, {} {unit} with the cores to itself): {}",
        fmt_value(value),
        fmt_value(correct(value)),
        result.reason
    );
    true
}

/// Indices of the entities to re-measure before their verdict stands.
pub fn suspects(results: &[EntityResult]) -> Vec<usize> {
    results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.verdict == Verdict::Slow)
        .map(|(i, _)| i)
        .collect()
}

/// The status of a check that ran, from its entities' verdicts.
pub fn check_status(results: &[EntityResult]) -> CheckStatus {
    if results.iter().any(EntityResult::fails) {
        CheckStatus::Failed
    } else {
        CheckStatus::Passed
    }
}

/// A value with three significant digits, for messages.
pub fn fmt_value(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let digits = (2 - value.abs().log10().floor() as i32).max(0) as usize;
    format!("{value:.digits$}")
}

fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Entity;

    #[test]
    fn tolerances_are_per_check() {
        let tolerances = Tolerances::from_fn(|check| match check {
            CheckName::KernelLaunch => 0.5,
            _ => 0.25,
        });
        assert_eq!(tolerances.of(CheckName::KernelLaunch), 0.5);
        assert_eq!(tolerances.of(CheckName::GemmFlops), 0.25);
        assert_eq!(Tolerances::uniform(0.05).of(CheckName::AllReduce2), 0.05);
    }

    fn device(index: u32) -> Entity {
        Entity::Device {
            node: "n0".into(),
            index,
        }
    }

    fn steady(index: u32, value: f64) -> Measurement {
        Measurement::ok(device(index), value, vec![value; 8])
    }

    const LOOSE: JudgePolicy = JudgePolicy {
        tolerance: 0.05,
        limit: None,
    };

    fn verdicts(results: &[EntityResult]) -> Vec<Verdict> {
        results.iter().map(|r| r.verdict).collect()
    }

    #[test]
    fn a_device_ten_percent_slow_is_flagged_with_evidence() {
        let spec = CheckName::GemmFlops.spec();
        let ms = [
            steady(0, 100.0),
            steady(1, 100.0),
            steady(2, 90.0),
            steady(3, 101.0),
        ];
        let results = judge(spec, &ms, &LOOSE);
        assert_eq!(
            verdicts(&results),
            [Verdict::Ok, Verdict::Ok, Verdict::Slow, Verdict::Ok]
        );
        let slow = &results[2];
        assert_eq!(slow.evidence.peer_median, Some(100.0));
        assert_eq!(slow.evidence.deficit_pct, Some(10.0));
        assert_eq!(slow.lane, crate::results::Lane::Host);
        assert!(
            slow.reason
                .contains("10.0% below the peer median 100 TFLOPS"),
            "{}",
            slow.reason
        );
        assert_eq!(suspects(&results), [2]);
        assert_eq!(check_status(&results), CheckStatus::Failed);
    }

    #[test]
    fn lower_is_better_metrics_flag_the_high_value() {
        let spec = CheckName::KernelLaunch.spec();
        let ms = [steady(0, 5.0), steady(1, 5.1), steady(2, 7.0)];
        let results = judge(spec, &ms, &LOOSE);
        assert_eq!(
            verdicts(&results),
            [Verdict::Ok, Verdict::Ok, Verdict::Slow]
        );
        assert!(
            results[2].reason.contains("above the peer median"),
            "{}",
            results[2].reason
        );
    }

    #[test]
    fn two_devices_compare_with_each_other_and_only_the_worse_is_slow() {
        let spec = CheckName::GemmFlops.spec();
        let results = judge(spec, &[steady(0, 80.0), steady(1, 100.0)], &LOOSE);
        assert_eq!(verdicts(&results), [Verdict::Slow, Verdict::Ok]);
    }

    #[test]
    fn noise_widens_the_threshold() {
        let spec = CheckName::GemmFlops.spec();
        let noisy = Measurement::ok(device(1), 92.0, vec![70.0, 110.0, 80.0, 108.0]);
        let results = judge(spec, &[steady(0, 100.0), noisy, steady(2, 100.0)], &LOOSE);
        assert_eq!(results[1].verdict, Verdict::Ok, "{}", results[1].reason);
        assert!(results[1].evidence.noise_pct.unwrap() > 3.0);
    }

    #[test]
    fn errors_wrong_results_and_zero_work_are_faulty() {
        let spec = CheckName::GemmFlops.spec();
        let mut wrong = steady(1, 100.0);
        wrong.wrong_result = Some("c[3,4] = 7 but the reference is 8".into());
        let ms = [
            Measurement::failed(device(0), "device lost"),
            wrong,
            steady(2, 0.0),
            Measurement {
                value: None,
                ..steady(3, 1.0)
            },
            steady(4, 100.0),
        ];
        let results = judge(spec, &ms, &LOOSE);
        assert_eq!(
            verdicts(&results),
            [
                Verdict::Faulty,
                Verdict::Faulty,
                Verdict::Faulty,
                Verdict::Faulty,
                Verdict::Ok
            ]
        );
        assert_eq!(results[0].reason, "error: device lost");
        assert!(results[1].reason.starts_with("wrong result"));
        assert!(results[2].reason.starts_with("no work done"));
        // Faulty entities are not suspects: re-measuring does not excuse a wrong result.
        assert!(suspects(&results).is_empty());
    }

    #[test]
    fn a_slowdown_of_zero_is_the_best_result_not_zero_work() {
        // Compute and communication overlapped fully, or a load spike slowed the run
        // alone: either way work was done.
        let spec = CheckName::CompCommOverlap.spec();
        let node = |name: &str, value: f64| {
            Measurement::ok(Entity::Node { node: name.into() }, value, vec![value; 4])
        };
        let results = judge(spec, &[node("a", 0.0)], &LOOSE);
        assert_eq!(results[0].verdict, Verdict::Ok, "{}", results[0].reason);
        // Against peers at 0 %, a node at 0 % or 3 % is compared with the limit only.
        let results = judge(
            spec,
            &[node("a", 0.0), node("b", 0.0), node("c", 3.0)],
            &LOOSE,
        );
        assert_eq!(verdicts(&results), [Verdict::Ok; 3]);
        // A ceiling still catches a real slowdown.
        let ceiling = JudgePolicy {
            tolerance: 0.05,
            limit: Some(Limit::Ceiling(50.0)),
        };
        assert_eq!(
            judge(spec, &[node("a", 80.0)], &ceiling)[0].verdict,
            Verdict::Slow
        );
        // Nonsense is still faulty.
        assert_eq!(
            judge(spec, &[node("a", f64::NAN)], &LOOSE)[0].verdict,
            Verdict::Faulty
        );
        assert_eq!(
            judge(spec, &[node("a", -1.0)], &LOOSE)[0].verdict,
            Verdict::Faulty
        );
    }

    #[test]
    fn a_slow_verdict_under_a_neighbour_s_load_is_cleared_and_says_why() {
        let spec = CheckName::KernelLaunch.spec();
        let contended = |index: u32, value: f64, share: f64| {
            let mut m = steady(index, value);
            m.extra.insert(CONTENTION_EXTRA.to_owned(), share);
            m
        };
        let ms = [
            contended(0, 10.0, 0.5),
            contended(1, 30.0, 45.0),
            contended(2, 30.0, 2.0),
            steady(3, 10.0),
        ];
        let mut results = judge(spec, &ms, &LOOSE);
        assert_eq!(
            verdicts(&results),
            [Verdict::Ok, Verdict::Slow, Verdict::Slow, Verdict::Ok]
        );
        let cleared: Vec<bool> = results
            .iter_mut()
            .map(|r| clear_contended_slow(r, spec, &LOOSE))
            .collect();
        // 30 µs with its core held 45 % of the time would be 16.5 µs alone: still
        // slow against 10 µs. At 70 % it would be 9 µs: the neighbour explains it.
        assert_eq!(cleared, [false, false, false, false]);
        let ms = [
            contended(0, 10.0, 0.5),
            contended(1, 30.0, 70.0),
            contended(2, 30.0, 2.0),
            steady(3, 10.0),
        ];
        let mut results = judge(spec, &ms, &LOOSE);
        let cleared: Vec<bool> = results
            .iter_mut()
            .map(|r| clear_contended_slow(r, spec, &LOOSE))
            .collect();
        // Only the slow one whose cores were held by other work is cleared; one that
        // ran on a quiet core stays slow, and nothing else changes.
        assert_eq!(cleared, [false, true, false, false]);
        assert_eq!(
            verdicts(&results),
            [Verdict::Ok, Verdict::Ok, Verdict::Slow, Verdict::Ok]
        );
        assert!(
            results[1].reason.starts_with(
                "not judged slow: other work held its cores 70% of the time it was measured, \
                 which explains the deficit (30.0 us measured, 9.00 us with the cores to itself)"
            ),
            "{}",
            results[1].reason
        );
        // A baseline floor far above what the load explains still fails.
        let gemm = CheckName::GemmFlops.spec();
        let floor = JudgePolicy {
            tolerance: 0.05,
            limit: Some(Limit::Floor(1000.0)),
        };
        let mut m = steady(0, 1.0);
        m.extra.insert(CONTENTION_EXTRA.to_owned(), 50.0);
        let mut below = judge(gemm, &[m], &floor);
        assert!(!clear_contended_slow(&mut below[0], gemm, &floor));
        assert_eq!(below[0].verdict, Verdict::Slow);
        // Faulty stays faulty whatever the load.
        let mut faulty = judge(spec, &[Measurement::failed(device(0), "lost")], &LOOSE);
        assert!(!clear_contended_slow(&mut faulty[0], spec, &LOOSE));
        assert_eq!(faulty[0].verdict, Verdict::Faulty);
    }

    #[test]
    fn a_baseline_floor_or_ceiling_fails_even_a_lone_device() {
        let gemm = CheckName::GemmFlops.spec();
        let floor = JudgePolicy {
            tolerance: 0.05,
            limit: Some(Limit::Floor(200.0)),
        };
        let results = judge(gemm, &[steady(0, 100.0)], &floor);
        assert_eq!(results[0].verdict, Verdict::Slow);
        assert_eq!(
            results[0].reason,
            "100 TFLOPS is below the baseline floor of 200 TFLOPS"
        );
        assert_eq!(results[0].evidence.baseline, Some(200.0));

        let launch = CheckName::KernelLaunch.spec();
        let ceiling = JudgePolicy {
            tolerance: 0.05,
            limit: Some(Limit::Ceiling(10.0)),
        };
        assert_eq!(
            judge(launch, &[steady(0, 12.0)], &ceiling)[0].verdict,
            Verdict::Slow
        );
        assert_eq!(
            judge(launch, &[steady(0, 8.0)], &ceiling)[0].verdict,
            Verdict::Ok
        );
    }

    #[test]
    fn a_lone_device_without_baseline_is_ok() {
        let results = judge(CheckName::GemmFlops.spec(), &[steady(0, 1.0)], &LOOSE);
        assert_eq!(results[0].verdict, Verdict::Ok);
        assert_eq!(check_status(&results), CheckStatus::Passed);
    }

    #[test]
    fn faulty_peers_do_not_drag_the_median() {
        let spec = CheckName::GemmFlops.spec();
        let ms = [
            Measurement::failed(device(0), "x"),
            steady(1, 100.0),
            steady(2, 100.0),
        ];
        let results = judge(spec, &ms, &LOOSE);
        assert_eq!(results[1].evidence.peer_median, Some(100.0));
        assert_eq!(results[1].verdict, Verdict::Ok);
    }

    #[test]
    fn fmt_value_keeps_three_significant_digits() {
        assert_eq!(fmt_value(0.123456), "0.123");
        assert_eq!(fmt_value(12.3456), "12.3");
        assert_eq!(fmt_value(789.6), "790");
        assert_eq!(fmt_value(0.0), "0");
    }
}
