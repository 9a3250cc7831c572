//! Localization: from measurements of node pairs (or a whole-group matrix) to the node
//! or link at fault, with the evidence and a reason a person can check.
//!
//! Pair checks (`_2`), in three steps the runner interleaves with
//! `crate::pairing::retest`:
//! 1. [`judge_pairs`] judges each distinct pair, with the rules of `crate::analysis`.
//!    First against the peers: each first measurement of the group (the
//!    [`Stage::Initial`] plan) against the median of the others, and a pair first met
//!    in a retest against the median of the first measurements that passed, since a
//!    retest round is small and made of suspects. Then against the known-good floor:
//!    the median of every measurement of the pairs that passed between good nodes,
//!    once it has three values besides the pair's own. In a group of four or five, a
//!    node whose every pair is low is screened first, and its pairs are judged against
//!    the pairs without it (`LowNodes`). A pair measured twice or more is judged on the
//!    mean of its measurements, and from three on its re-measures alone must agree. A
//!    pair measured once that fails is a suspect, and one that passes by less than half
//!    the threshold ([`SCREEN_SHARE`]) is borderline: both are re-measured.
//! 2. `crate::pairing::retest` plans the re-measures, the tests with known-good
//!    partners and the controls that the judged outcomes still need.
//! 3. [`localize`] names the culprits: a node that fails with good partners is the
//!    fault (`slow` or `faulty`, in the lane the caller gives); a failed pair whose
//!    members both pass elsewhere is a link or path suspect (`network`); a pair that
//!    cannot be split is reported as unresolved; and when no node passed at all, the
//!    verdict is group-wide.
//!
//! The loop a coordinator runs (measuring each round for real):
//!
//! ```
//! use gpuvet_model::analysis::JudgePolicy;
//! use gpuvet_model::catalog::CheckName;
//! use gpuvet_model::localize::{PairTest, judge_pairs, localize, outcomes};
//! use gpuvet_model::pairing::{Pair, Plan, retest, round_one};
//! use gpuvet_model::results::{Lane, Measurement};
//!
//! let spec = CheckName::AllReduce2.spec();
//! let policy = JudgePolicy { tolerance: 0.05, limit: None };
//! let nodes: Vec<String> = (0..6).map(|i| format!("n{i}")).collect();
//! // Stands in for running a round: n4 is 20 % slow.
//! let measure = |pair: &Pair| {
//!     let busbw = if pair.contains("n4") { 80.0 } else { 100.0 };
//!     Measurement::ok(pair.entity(), busbw, Vec::new())
//! };
//! let run = |plan: &Plan, tests: &mut Vec<PairTest>| {
//!     for pair in plan.pairs() {
//!         tests.push(PairTest::new(pair.clone(), plan.stage, measure(pair)));
//!     }
//! };
//!
//! let mut tests = Vec::new();
//! run(&round_one(&nodes), &mut tests);
//! let judged = loop {
//!     let judged = judge_pairs(spec, &tests, &policy);
//!     let next = retest(&nodes, &outcomes(&judged));
//!     if next.plan.is_empty() {
//!         break judged;
//!     }
//!     run(&next.plan, &mut tests);
//! };
//! let found = localize(spec, &nodes, &judged, Lane::Network);
//! let culprits: Vec<String> = found.culprits().map(|r| r.entity.to_string()).collect();
//! assert_eq!(culprits, ["n4"]);
//! ```
//!
//! Whole-group checks give a source × destination matrix instead: [`localize_matrix`]
//! applies C4D's rule, a bad row or column is a node and a lone bad cell is a link.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::analysis::{JudgePolicy, deficit, fmt_value, judge};
use crate::catalog::CheckSpec;
use crate::pairing::{
    LINK_MEASUREMENTS, NodeId, NodeStanding, NodeStatus, Pair, PairOutcome, PairState, RING_BELOW,
    Stage, standings,
};
use crate::results::{CheckStatus, Entity, EntityResult, Evidence, Lane, Measurement, Verdict};
use crate::stats::median;

mod matrix;

pub use matrix::{Matrix, MatrixLocalization, localize_matrix};

/// One measurement of a pair, as the runner collected it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairTest {
    pub pair: Pair,
    /// The kind of plan it came from ([`crate::pairing::Plan::stage`]).
    pub stage: Stage,
    pub measurement: Measurement,
}

impl PairTest {
    pub fn new(pair: Pair, stage: Stage, measurement: Measurement) -> Self {
        PairTest {
            pair,
            stage,
            measurement,
        }
    }
}

/// The verdict on one distinct pair, over all of its measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairJudgement {
    pub pair: Pair,
    /// How many measurements were combined.
    pub measurements: usize,
    /// The verdict with its evidence, on [`Entity::NodePair`].
    pub result: EntityResult,
    pub state: PairState,
}

impl PairJudgement {
    pub fn outcome(&self) -> PairOutcome {
        PairOutcome {
            pair: self.pair.clone(),
            state: self.state,
            measurements: self.measurements,
        }
    }
}

/// The outcomes `crate::pairing::retest` plans from.
pub fn outcomes(judgements: &[PairJudgement]) -> Vec<PairOutcome> {
    judgements.iter().map(PairJudgement::outcome).collect()
}

/// Judges every distinct pair in `tests` (in either order of its nodes), in the order
/// pairs first appear. See the module documentation for what each is compared with.
pub fn judge_pairs(
    spec: &CheckSpec,
    tests: &[PairTest],
    policy: &JudgePolicy,
) -> Vec<PairJudgement> {
    let mut group_of: HashMap<(&str, &str), usize> = HashMap::with_capacity(tests.len());
    let mut groups: Vec<Vec<&PairTest>> = Vec::new();
    for test in tests {
        let (a, b) = (test.pair.a.as_str(), test.pair.b.as_str());
        let key = if a <= b { (a, b) } else { (b, a) };
        let group = *group_of.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[group].push(test);
    }
    let judge_all = |reference: &dyn Fn(usize) -> Option<f64>| -> Vec<PairJudgement> {
        groups
            .iter()
            .enumerate()
            .map(|(g, tests)| judge_pair(spec, tests, reference(g), policy))
            .collect()
    };

    // First the peers: each pair's first initial measurement against the others', and
    // a pair first met in a retest against the initial pairs that passed, since the
    // ones that failed (in a small group, a large share) drag the median down.
    let first_value = |tests: &[&PairTest]| {
        let first = tests.iter().find(|t| t.stage == Stage::Initial)?;
        usable_value(&first.measurement)
    };
    let initial = Pool::new(
        groups.len(),
        groups
            .iter()
            .enumerate()
            .filter_map(|(g, tests)| Some((first_value(tests)?, g))),
    );
    let is_initial: Vec<bool> = groups.iter().map(|t| first_value(t).is_some()).collect();
    let mut judged = judge_all(&|g| initial.median_without(g));
    // One pool of values, none left out: no retest-only pair is in it.
    let passed = Pool::new(
        1,
        groups
            .iter()
            .zip(&judged)
            .filter(|(_, j)| !j.state.is_bad())
            .filter_map(|(tests, _)| first_value(tests))
            .map(|v| (v, 0)),
    );
    let peers = |g: usize| {
        if is_initial[g] {
            initial.median_without(g)
        } else {
            passed.median().or(initial.median())
        }
    };
    for g in (0..groups.len()).filter(|&g| !is_initial[g]) {
        judged[g] = judge_pair(spec, &groups[g], peers(g), policy);
    }

    // Then the known-good floor: every measurement of the pairs that passed between
    // two good nodes, re-measures and retests included. It leaves out the slow node's
    // and the slow link's pairs, and each retest round adds to it.
    let floor = Pool::new(
        groups.len(),
        known_good_pairs(&groups, &judged)
            .into_iter()
            .flat_map(|g| groups[g].iter().map(move |t| (t, g)))
            .filter_map(|(t, g)| Some((usable_value(&t.measurement)?, g))),
    );
    // In a small group, a node screened low has its pairs judged against the pairs
    // without it (see `LowNodes`).
    let low = LowNodes::screen(spec, &groups, policy);
    judge_all(&|g| {
        if let Some(reference) = low.reference(&groups[g][0].pair) {
            return Some(reference);
        }
        if floor.len_without(g) >= FLOOR_MIN {
            floor.median_without(g)
        } else {
            peers(g)
        }
    })
}

/// How much surer than a verdict the low-node screen is: a node's best pair must be
/// worse than the pairs without it by this many tolerances. Measured with
/// `examples/localize_accuracy.rs` at four nodes (20,000 runs each): 1.0 screens
/// healthy nodes that two noisy pairs make look low (false culprits 12 → 34 in healthy
/// runs, slow-link recall 99.56 → 99.41 %); 1.4 misses slow nodes whose best pair
/// passed by noise (recall 99.22 %); 1.2 finds 99.58 % and keeps the healthy and
/// slow-link figures within a few runs of what they were.
pub const LOW_NODE_MARGIN: f64 = 1.2;

/// The nodes of a small group whose every pair is low.
///
/// A group that starts with the ring (four nodes to fewer than
/// [`crate::pairing::RING_BELOW`]) has a slow node in half of the pairs measured,
/// and its pairs are re-measured more than the others: the medians a pair is judged
/// against (the peers, the known-good floor) are then made mostly of that node's own
/// pairs, which pass against them, and the node counts as good. At four nodes that
/// lost about 1 slow node in 200 (recall 99.01 %). So each node of such a group is
/// screened: when even its best pair (the mean of its measurements) is worse than the
/// median of the pairs without the node by [`LOW_NODE_MARGIN`] tolerances, the node
/// is low, and a pair of it is judged against the pairs without it. A node at one end
/// of a slow link has a good pair besides, so it is not low; nor is a node with one
/// pair. A pair of two low nodes is judged as before.
struct LowNodes<'a> {
    /// Each low node with the median of the pairs without it.
    low: HashMap<&'a str, f64>,
}

impl<'a> LowNodes<'a> {
    fn screen(spec: &CheckSpec, groups: &[Vec<&'a PairTest>], policy: &JudgePolicy) -> Self {
        let mut nodes: Vec<&str> = Vec::new();
        for tests in groups {
            for node in [tests[0].pair.a.as_str(), tests[0].pair.b.as_str()] {
                if !nodes.contains(&node) {
                    nodes.push(node);
                }
            }
        }
        // The groups that start with the ring, where this was measured.
        if !(4..RING_BELOW).contains(&nodes.len()) {
            return LowNodes {
                low: HashMap::new(),
            };
        }
        let means: Vec<(&Pair, f64)> = groups
            .iter()
            .filter_map(|tests| {
                let values: Vec<f64> = tests
                    .iter()
                    .filter_map(|t| usable_value(&t.measurement))
                    .collect();
                if values.is_empty() {
                    return None;
                }
                Some((
                    &tests[0].pair,
                    values.iter().sum::<f64>() / values.len() as f64,
                ))
            })
            .collect();
        let worse = |value: f64, reference: f64| deficit(spec.metric.direction, value, reference);
        let low = nodes
            .into_iter()
            .filter_map(|node| {
                let (own, rest): (Vec<_>, Vec<_>) =
                    means.iter().partition(|(pair, _)| pair.contains(node));
                let mut rest: Vec<f64> = rest.iter().map(|(_, mean)| *mean).collect();
                rest.sort_by(f64::total_cmp);
                let reference = median_of_sorted_skipping(&rest, &[])?;
                // The pair of this node least worse than the rest.
                let best = own
                    .iter()
                    .map(|(_, mean)| worse(*mean, reference))
                    .reduce(f64::min)?;
                (own.len() >= 2 && best > policy.tolerance * LOW_NODE_MARGIN)
                    .then_some((node, reference))
            })
            .collect();
        LowNodes { low }
    }

    /// What `pair` is judged against when exactly one of its nodes is low.
    fn reference(&self, pair: &Pair) -> Option<f64> {
        match (self.low.get(pair.a.as_str()), self.low.get(pair.b.as_str())) {
            (Some(&reference), None) | (None, Some(&reference)) => Some(reference),
            _ => None,
        }
    }
}

/// The known-good values a pair needs besides its own before the floor is its
/// reference. The median of two is as noisy as a single re-measured pair: in a group
/// of four with a slow node, the three pairs left would name each other as links.
const FLOOR_MIN: usize = 3;

/// The pairs that passed (or passed narrowly) between two good nodes.
fn known_good_pairs(groups: &[Vec<&PairTest>], judged: &[PairJudgement]) -> Vec<usize> {
    let mut seen = HashSet::new();
    let nodes: Vec<NodeId> = groups
        .iter()
        .flat_map(|tests| [&tests[0].pair.a, &tests[0].pair.b])
        .filter(|node| seen.insert(node.as_str()))
        .cloned()
        .collect();
    let good: HashSet<&str> = standings(&nodes, &outcomes(judged))
        .iter()
        .zip(&nodes)
        .filter(|(s, _)| s.status == NodeStatus::Good)
        .map(|(_, node)| node.as_str())
        .collect();
    judged
        .iter()
        .enumerate()
        .filter(|(_, j)| {
            !j.state.is_bad()
                && good.contains(j.pair.a.as_str())
                && good.contains(j.pair.b.as_str())
        })
        .map(|(g, _)| g)
        .collect()
}

/// Values with the pair each came from, sorted, for medians that leave a pair's own
/// values out: a pair is not its own peer. One sort, then each median costs only the
/// pair's own values, which keeps judging 4,096 nodes linear.
struct Pool {
    sorted: Vec<f64>,
    /// Where each pair's values are in `sorted`, ascending.
    positions: Vec<Vec<usize>>,
}

impl Pool {
    fn new(pairs: usize, values: impl Iterator<Item = (f64, usize)>) -> Self {
        let mut values: Vec<(f64, usize)> = values.collect();
        values.sort_by(|x, y| x.0.total_cmp(&y.0));
        let mut positions = vec![Vec::new(); pairs];
        for (k, &(_, g)) in values.iter().enumerate() {
            positions[g].push(k);
        }
        Pool {
            sorted: values.into_iter().map(|(v, _)| v).collect(),
            positions,
        }
    }

    fn median(&self) -> Option<f64> {
        median_of_sorted_skipping(&self.sorted, &[])
    }

    /// How many values are not pair `g`'s.
    fn len_without(&self, g: usize) -> usize {
        self.sorted.len() - self.positions[g].len()
    }

    /// The median of the values of every pair but `g`; `None` when none is left.
    fn median_without(&self, g: usize) -> Option<f64> {
        median_of_sorted_skipping(&self.sorted, &self.positions[g])
    }
}

fn judge_pair(
    spec: &CheckSpec,
    tests: &[&PairTest],
    reference: Option<f64>,
    policy: &JudgePolicy,
) -> PairJudgement {
    let pair = tests[0].pair.clone();
    let (combined, averaged) = combine(&pair, tests);
    let mut result = judge_against(spec, &combined, reference, policy);
    if averaged {
        result
            .reason
            .push_str(&format!(" (mean of {} measurements)", tests.len()));
    }
    if tests.len() >= LINK_MEASUREMENTS && result.verdict == Verdict::Slow {
        // The first measurement is what made the pair a suspect, so it leans slow;
        // the re-measures alone must agree before the pair counts as slow.
        let (again, _) = combine(&pair, &tests[1..]);
        let check = judge_against(spec, &again, reference, policy);
        if check.verdict == Verdict::Ok {
            result = check;
            result.reason.push_str(&format!(
                " (mean of the {} re-measures; the first measurement, {}, made it a suspect)",
                tests.len() - 1,
                fmt_value(tests[0].measurement.value.unwrap_or_default()),
            ));
        }
    }
    result.evidence.remeasured = tests.len() > 1;
    let once = tests.len() == 1;
    let state = match result.verdict {
        Verdict::Ok if once && is_borderline(&result.evidence) => PairState::Borderline,
        // Pairs have no record of their own: never degraded, counted as passed.
        Verdict::Ok | Verdict::Skipped | Verdict::Degraded => PairState::Passed,
        Verdict::Slow if once => PairState::Suspect,
        Verdict::Slow => PairState::Failed,
        Verdict::Faulty => PairState::Faulty,
    };
    PairJudgement {
        pair,
        measurements: tests.len(),
        result,
        state,
    }
}

/// The share of the threshold past which a single passing measurement is re-measured.
///
/// With 2 % noise and a 5 % tolerance, one measurement of a pair 10 % slow passes
/// about one time in 300, and one of a healthy pair fails about one time in 160. A
/// second measurement of every pair worse than half the threshold, judged on the mean
/// at the full threshold, makes both errors rarer than one in 3,000, at the cost of a
/// re-measure round that most large groups run anyway.
pub const SCREEN_SHARE: f64 = 0.5;

/// Passed, but by a margin that one noisy measurement can fake.
fn is_borderline(evidence: &Evidence) -> bool {
    match (evidence.deficit_pct, evidence.threshold_pct) {
        (Some(deficit), Some(threshold)) => deficit > SCREEN_SHARE * threshold,
        _ => false,
    }
}

/// One measurement standing for all of a pair's: the first failed one, since a
/// re-measure does not excuse an error or a wrong result, else the mean of the values.
/// Returns whether it is a mean of several.
fn combine(pair: &Pair, tests: &[&PairTest]) -> (Measurement, bool) {
    let failed = tests
        .iter()
        .find(|t| usable_value(&t.measurement).is_none());
    if let Some(test) = failed.or(if tests.len() == 1 {
        tests.first()
    } else {
        None
    }) {
        let mut measurement = test.measurement.clone();
        measurement.entity = pair.entity();
        return (measurement, false);
    }
    let values: Vec<f64> = tests.iter().filter_map(|t| t.measurement.value).collect();
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let samples = tests
        .iter()
        .flat_map(|t| t.measurement.samples.iter().copied())
        .collect();
    let mut extra = tests[0].measurement.extra.clone();
    extra.insert("measurements".to_owned(), tests.len() as f64);
    let measurement = Measurement {
        entity: pair.entity(),
        value: Some(mean),
        samples,
        error: None,
        wrong_result: None,
        extra,
    };
    (measurement, true)
}

/// `analysis::judge` compares each entity with the median of the others. A stand-in
/// peer whose value is the reference makes that median exactly the reference, so a pair
/// is judged by the same rules, evidence and wording as every other check.
fn judge_against(
    spec: &CheckSpec,
    measurement: &Measurement,
    reference: Option<f64>,
    policy: &JudgePolicy,
) -> EntityResult {
    let mut peers = vec![measurement.clone()];
    if let Some(reference) = reference {
        peers.push(Measurement::ok(
            measurement.entity.clone(),
            reference,
            Vec::new(),
        ));
    }
    judge(spec, &peers, policy).swap_remove(0)
}

/// The value `analysis::judge` would compare, or `None` for a failed measurement.
fn usable_value(measurement: &Measurement) -> Option<f64> {
    match measurement.value {
        Some(v)
            if measurement.error.is_none()
                && measurement.wrong_result.is_none()
                && v.is_finite()
                && v > 0.0 =>
        {
            Some(v)
        }
        _ => None,
    }
}

/// The median of `sorted` without the elements at `skip` (ascending positions).
fn median_of_sorted_skipping(sorted: &[f64], skip: &[usize]) -> Option<f64> {
    let n = sorted.len().checked_sub(skip.len())?;
    // The r-th element left: step over each skipped position at or before it.
    let at = |r: usize| {
        let mut i = r;
        for &s in skip {
            if s <= i {
                i += 1;
            }
        }
        sorted[i]
    };
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(at(n / 2)),
        _ => Some((at(n / 2 - 1) + at(n / 2)) / 2.0),
    }
}

/// A fault that no single node or link explains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupWide {
    pub lane: Lane,
    pub reason: String,
}

/// What the pair tests of one check say about each node and link.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Localization {
    /// One result per node that could be judged: `ok`, or a culprit's `slow`/`faulty`.
    pub nodes: Vec<EntityResult>,
    /// Failed pairs whose members both passed with other nodes: the link or the path
    /// between them is suspect.
    pub links: Vec<EntityResult>,
    /// Failed pairs that neither a node nor the link could be blamed for.
    pub unresolved: Vec<EntityResult>,
    /// Nodes that were in no test.
    pub untested: Vec<NodeId>,
    /// Set when no node passed any test.
    pub group_wide: Option<GroupWide>,
}

impl Localization {
    /// The nodes named as the fault.
    pub fn culprits(&self) -> impl Iterator<Item = &EntityResult> {
        self.nodes.iter().filter(|r| is_finding(r.verdict))
    }

    /// Every result, for `CheckResult::entities`: nodes, then links, then unresolved.
    pub fn entity_results(&self) -> Vec<EntityResult> {
        self.nodes
            .iter()
            .chain(&self.links)
            .chain(&self.unresolved)
            .cloned()
            .collect()
    }

    pub fn status(&self) -> CheckStatus {
        let any_finding = self.culprits().next().is_some()
            || !self.links.is_empty()
            || !self.unresolved.is_empty()
            || self.group_wide.is_some();
        if any_finding {
            CheckStatus::Failed
        } else {
            CheckStatus::Passed
        }
    }
}

fn is_finding(verdict: Verdict) -> bool {
    matches!(verdict, Verdict::Slow | Verdict::Faulty)
}

/// Names the culprit nodes and suspect links from the judged pairs of one check.
/// `node_lane` is the lane of a culprit node: `network` for the communication checks,
/// `host` when the pair test is a compute one.
pub fn localize(
    spec: &CheckSpec,
    nodes: &[NodeId],
    judgements: &[PairJudgement],
    node_lane: Lane,
) -> Localization {
    let outcomes = outcomes(judgements);
    let standings = standings(nodes, &outcomes);
    let status: HashMap<&str, NodeStatus> = standings
        .iter()
        .map(|s| (s.node.as_str(), s.status))
        .collect();
    let status_of = |node: &str| status.get(node).copied();
    let context = Context {
        unit: spec.metric.unit,
        judgements,
        status_of: &status_of,
    };

    let mut localization = Localization::default();
    for standing in &standings {
        let result = match standing.status {
            NodeStatus::Good => context.good_node(standing),
            NodeStatus::Culprit => context.culprit(standing, node_lane),
            NodeStatus::Explained => context.explained_node(standing),
            NodeStatus::Undetermined => continue,
            NodeStatus::Untested => {
                localization.untested.push(standing.node.clone());
                continue;
            }
        };
        localization.nodes.push(result);
    }

    // A borderline pass that was never re-measured is not a finding.
    let failed: Vec<&PairJudgement> = judgements
        .iter()
        .filter(|j| j.state != PairState::Passed && is_finding(j.result.verdict))
        .collect();
    for judgement in failed.iter().copied() {
        let (a, b) = (&judgement.pair.a, &judgement.pair.b);
        let (status_a, status_b) = (status_of(a), status_of(b));
        if status_a == Some(NodeStatus::Culprit) || status_b == Some(NodeStatus::Culprit) {
            continue; // the culprit's own result carries this pair as evidence
        }
        let mut result = judgement.result.clone();
        if status_a == Some(NodeStatus::Good) && status_b == Some(NodeStatus::Good) {
            // Fewer measurements than a link needs only when the retests were cut short.
            let once = match judgement.measurements {
                1 => " (measured once)",
                2 if judgement.state == PairState::Failed => " (measured twice)",
                _ => "",
            };
            result.reason = format!(
                "{}; {a} and {b} both passed with other nodes, so the link or path between \
                 them is suspect{once}",
                result.reason
            );
            result.lane = Lane::Network;
            localization.links.push(result);
        } else {
            let unknown: Vec<&str> = [a, b]
                .into_iter()
                .filter(|n| status_of(n) != Some(NodeStatus::Good))
                .map(String::as_str)
                .collect();
            result.reason = format!(
                "{}; {} could not be tested with a known-good node, so a bad node cannot be \
                 told from a bad link",
                result.reason,
                join_and(&unknown)
            );
            localization.unresolved.push(result);
        }
    }

    let any_good = standings.iter().any(|s| s.status == NodeStatus::Good);
    let any_culprit = standings.iter().any(|s| s.status == NodeStatus::Culprit);
    if !any_good && !any_culprit && !failed.is_empty() {
        localization.group_wide = Some(group_wide(spec, &failed, judgements.len()));
    }
    localization
}

fn group_wide(spec: &CheckSpec, failed: &[&PairJudgement], pairs: usize) -> GroupWide {
    // Errors everywhere point at the set-up (rendezvous, configuration, libraries);
    // slowness everywhere at the shared network.
    let all_errors = failed.iter().all(|j| j.result.verdict == Verdict::Faulty);
    let lane = if all_errors {
        Lane::Platform
    } else {
        spec.lane
    };
    let reason = if pairs == 1 {
        format!(
            "the only pair, {}, failed; with two nodes there is no third to tell a bad node \
             from a bad link",
            failed[0].pair
        )
    } else {
        format!(
            "no pair passed ({} of {pairs} failed): the fault is group-wide, or more nodes \
             are bad than good",
            failed.len()
        )
    };
    GroupWide { lane, reason }
}

/// What the node results are built from.
struct Context<'a> {
    unit: &'a str,
    judgements: &'a [PairJudgement],
    status_of: &'a dyn Fn(&str) -> Option<NodeStatus>,
}

impl Context<'_> {
    fn good_node(&self, standing: &NodeStanding) -> EntityResult {
        let node = standing.node.as_str();
        let passed: Vec<&PairJudgement> = standing
            .passed
            .iter()
            .map(|&i| &self.judgements[i])
            .collect();
        let partners: Vec<&str> = passed
            .iter()
            .filter_map(|j| j.pair.partner_of(node))
            .collect();
        let mut reason = format!("passed with {}", list_some(&partners, 3));
        let failures: Vec<String> = standing
            .bad
            .iter()
            .filter_map(|&i| {
                let partner = self.judgements[i].pair.partner_of(node)?;
                let why = match (self.status_of)(partner) {
                    Some(NodeStatus::Culprit) => "the culprit",
                    Some(NodeStatus::Good) => "a link suspect",
                    _ => "unresolved",
                };
                Some(format!("{partner} ({why})"))
            })
            .collect();
        if !failures.is_empty() {
            let failures: Vec<&str> = failures.iter().map(String::as_str).collect();
            reason.push_str(&format!("; failed with {}", list_some(&failures, 3)));
        }
        node_result(node, Verdict::Ok, Lane::Network, reason, &passed)
    }

    fn culprit(&self, standing: &NodeStanding, lane: Lane) -> EntityResult {
        let node = standing.node.as_str();
        let mut bad: Vec<&PairJudgement> =
            standing.bad.iter().map(|&i| &self.judgements[i]).collect();
        let is_good = |j: &&PairJudgement| {
            j.pair
                .partner_of(node)
                .is_some_and(|p| (self.status_of)(p) == Some(NodeStatus::Good))
        };
        // The failures with good partners are the evidence: list them first.
        bad.sort_by_key(|j| !is_good(j));
        let good_partners = bad.iter().filter(|j| is_good(j)).count();
        let verdict = if bad.iter().any(|j| j.result.verdict == Verdict::Faulty) {
            Verdict::Faulty
        } else {
            Verdict::Slow
        };
        let details: Vec<String> = bad.iter().map(|j| self.brief(j)).collect();
        let details: Vec<&str> = details.iter().map(String::as_str).collect();
        let total = standing.bad.len() + standing.passed.len();
        let mut reason = format!(
            "failed with {} of {total} partners, {good_partners} of which passed with other \
             nodes: {}",
            bad.len(),
            first_few(&details, 3, "; ")
        );
        if let Some(j) = bad.iter().find(|j| j.result.evidence.peer_median.is_some()) {
            let evidence = &j.result.evidence;
            reason.push_str(&format!(
                " (peer median {} {}, threshold {:.1}%)",
                fmt_value(evidence.peer_median.unwrap_or_default()),
                self.unit,
                evidence.threshold_pct.unwrap_or_default()
            ));
        }
        let mut result = node_result(node, verdict, lane, reason, &bad);
        let threshold = result.evidence.threshold_pct.unwrap_or(5.0);
        if let Some(note) = rail_note(&result.measurement.extra, threshold, self.unit) {
            result.reason.push_str(&format!("; {note}"));
        }
        result.evidence.remeasured = bad.len() > 1;
        result.measurement.error = bad.iter().find_map(|j| j.result.measurement.error.clone());
        result.measurement.wrong_result = bad
            .iter()
            .find_map(|j| j.result.measurement.wrong_result.clone());
        result
            .measurement
            .extra
            .insert("pairs_failed".to_owned(), bad.len() as f64);
        result
            .measurement
            .extra
            .insert("pairs_passed".to_owned(), standing.passed.len() as f64);
        result
    }

    fn explained_node(&self, standing: &NodeStanding) -> EntityResult {
        let node = standing.node.as_str();
        let partners: Vec<&str> = standing
            .bad
            .iter()
            .filter_map(|&i| self.judgements[i].pair.partner_of(node))
            .collect();
        let reason = format!(
            "failed only with the culprit {}; not tested with a known-good node",
            join_and(&partners)
        );
        node_result(node, Verdict::Ok, Lane::Network, reason, &[])
    }

    /// "n3<->n7 79.9 GB/s, 20.1% worse" or "n3<->n7: error: connection reset".
    fn brief(&self, judgement: &PairJudgement) -> String {
        let result = &judgement.result;
        match (
            result.verdict,
            result.evidence.value,
            result.evidence.deficit_pct,
        ) {
            (Verdict::Faulty, _, _) | (_, None, _) => {
                format!("{}: {}", judgement.pair, result.reason)
            }
            (_, Some(value), Some(deficit)) => {
                format!(
                    "{} {} {}, {deficit:.1}% worse",
                    judgement.pair,
                    fmt_value(value),
                    self.unit
                )
            }
            (_, Some(value), None) => {
                format!("{} {} {}", judgement.pair, fmt_value(value), self.unit)
            }
        }
    }
}

/// A node's result from the pairs that decided it: the median value, peer median and
/// deficit of those pairs.
fn node_result(
    node: &str,
    verdict: Verdict,
    lane: Lane,
    reason: String,
    pairs: &[&PairJudgement],
) -> EntityResult {
    let values: Vec<f64> = pairs
        .iter()
        .filter_map(|j| usable_value(&j.result.measurement))
        .collect();
    let of = |field: fn(&Evidence) -> Option<f64>| {
        let values: Vec<f64> = pairs
            .iter()
            .filter_map(|j| field(&j.result.evidence))
            .collect();
        median(&values)
    };
    let evidence = Evidence {
        value: median(&values),
        peer_median: of(|e| e.peer_median),
        baseline: pairs.iter().find_map(|j| j.result.evidence.baseline),
        threshold_pct: of(|e| e.threshold_pct),
        noise_pct: None,
        deficit_pct: of(|e| e.deficit_pct),
        remeasured: false,
        history: None,
        baseline_source: None,
    };
    let entity = Entity::Node {
        node: node.to_owned(),
    };
    let measurement = Measurement {
        entity: entity.clone(),
        value: evidence.value,
        samples: values,
        error: None,
        wrong_result: None,
        extra: median_extras(pairs),
    };
    EntityResult {
        entity,
        verdict,
        lane,
        reason,
        evidence,
        measurement,
    }
}

/// For a check with rails (`multi_all_reduce_2`: `rail0`, `rail1`, … in `extra`),
/// whether one rail is behind the culprit's slowness or all of them are: the slowest
/// rail when it is more than `threshold_pct` below the median of the others, else that
/// the rails are alike. `None` without two rails.
pub fn rail_note(extra: &BTreeMap<String, f64>, threshold_pct: f64, unit: &str) -> Option<String> {
    let mut rails: Vec<(u32, f64)> = extra
        .iter()
        .filter_map(|(key, &value)| Some((key.strip_prefix("rail")?.parse().ok()?, value)))
        .filter(|(_, value)| value.is_finite())
        .collect();
    if rails.len() < 2 {
        return None;
    }
    rails.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (slowest, value) = rails[0];
    let others: Vec<f64> = rails[1..].iter().map(|&(_, v)| v).collect();
    let others_median = median(&others)?;
    if value < others_median * (1.0 - threshold_pct / 100.0) {
        return Some(format!(
            "its slowest rail is `rail{slowest}` at {} {unit}, against {} {unit} on its other \
             rails",
            fmt_value(value),
            fmt_value(others_median)
        ));
    }
    let all: Vec<f64> = rails.iter().map(|&(_, v)| v).collect();
    Some(format!(
        "its {} rails are alike ({} {unit} median), so the node is slow, not one rail",
        rails.len(),
        fmt_value(median(&all)?)
    ))
}

/// Each secondary metric of the pairs (algbw, `pytorch_gloo_2`'s latency), as the
/// median over the pairs that have it. Per-link figures (`recv_wait_s.rank1`) are left
/// out: `rank1` is a different node in each pair.
fn median_extras(pairs: &[&PairJudgement]) -> BTreeMap<String, f64> {
    let mut by_key: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for pair in pairs {
        for (key, &value) in &pair.result.measurement.extra {
            if !key.contains(".rank") {
                by_key.entry(key).or_default().push(value);
            }
        }
    }
    by_key
        .into_iter()
        .filter_map(|(key, values)| Some((key.to_owned(), median(&values)?)))
        .collect()
}

/// "a", "a and b", "a, b and c".
fn join_and(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// At most `max` items, then "and k more".
fn list_some(items: &[&str], max: usize) -> String {
    if items.len() <= max {
        join_and(items)
    } else {
        first_few(items, max, ", ")
    }
}

/// The first `max` items joined by `separator`, then "and k more".
fn first_few(items: &[&str], max: usize, separator: &str) -> String {
    let shown = items[..items.len().min(max)].join(separator);
    match items.len().saturating_sub(max) {
        0 => shown,
        more => format!("{shown}{separator}and {more} more"),
    }
}

#[cfg(test)]
mod tests;
