//! Pairing plans for the `_2` checks, which measure two nodes at a time.
//!
//! - [`round_one`] pairs disjoint nodes so that every node is measured, all pairs in
//!   parallel. For an odd group the node left over is paired, in a second small round,
//!   with a node of the first round. Groups of four or five nodes are measured around a
//!   ring instead, so that every node has two partners.
//! - [`retest`] reads the judged outcomes so far and plans what is still needed: a
//!   re-measure of each pair that was slow once, a test of each member of a failed pair
//!   with a known-good node, a third partner for a node slow with two, and a third
//!   measurement of a slow link; in a small group, good nodes a round leaves idle
//!   measure a pair again as a control. The runner calls it again after each plan it
//!   runs, until the plan comes back empty (or [`MAX_RETEST_PLANS`]). With few bad
//!   nodes that takes three calls, whatever the group size.
//! - [`full_round_robin`] is the `pairing: full` option: every pair of nodes, by the
//!   circle method, in n−1 rounds (n for odd n).
//! - [`standings`] says where each node stands after the tests so far; both the retest
//!   planner and the localization (`crate::localize`) build on it, so they agree.
//!
//! Every function is deterministic: the same nodes and outcomes give the same plan.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::results::Entity;

/// A node's name, as the coordinator and every report call it.
pub type NodeId = String;

/// How the `_2` checks pair nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairingMode {
    /// Disjoint pairs, then retests of the bad pairs only: O(1) rounds.
    #[default]
    Adaptive,
    /// Every pair of nodes: n−1 rounds, so every link is measured.
    Full,
}

/// Two nodes measured together.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pair {
    pub a: NodeId,
    pub b: NodeId,
}

impl Pair {
    pub fn new(a: impl Into<NodeId>, b: impl Into<NodeId>) -> Self {
        Pair {
            a: a.into(),
            b: b.into(),
        }
    }

    pub fn contains(&self, node: &str) -> bool {
        self.a == node || self.b == node
    }

    /// The other node of the pair, when `node` is one of its members.
    pub fn partner_of(&self, node: &str) -> Option<&str> {
        if self.a == node {
            Some(&self.b)
        } else if self.b == node {
            Some(&self.a)
        } else {
            None
        }
    }

    /// Whether both pairs join the same two nodes, in either order.
    pub fn same_nodes(&self, other: &Pair) -> bool {
        (self.a == other.a && self.b == other.b) || (self.a == other.b && self.b == other.a)
    }

    /// The entity that results about this pair (or its link) are reported on.
    pub fn entity(&self) -> Entity {
        Entity::NodePair {
            a: self.a.clone(),
            b: self.b.clone(),
        }
    }
}

impl fmt::Display for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}<->{}", self.a, self.b)
    }
}

/// Which kind of plan a test came from; decides what its value is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The first measurement of the group ([`round_one`] or [`full_round_robin`]): these
    /// values form the peer reference.
    Initial,
    /// A re-measure or a test with a known-good partner ([`retest`]).
    Retest,
}

/// Pair tests that run at the same time: no node appears twice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    pub pairs: Vec<Pair>,
}

/// Rounds that run one after another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub stage: Stage,
    pub rounds: Vec<Round>,
}

impl Plan {
    fn empty(stage: Stage) -> Self {
        Plan {
            stage,
            rounds: Vec::new(),
        }
    }

    /// True when there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.rounds.iter().all(|round| round.pairs.is_empty())
    }

    /// Every pair of the plan, round by round.
    pub fn pairs(&self) -> impl Iterator<Item = &Pair> {
        self.rounds.iter().flat_map(|round| round.pairs.iter())
    }
}

/// The first plan of a `_2` check: disjoint pairs, so that every node is measured with
/// all pairs of a round running in parallel.
///
/// Nodes are paired in the order given: (0, 1), (2, 3), ... For an odd group the last
/// node is paired with node 0 in a second round of one pair. A second round rather than
/// a trio, because a three-node collective is a different measurement (other busbw
/// factor, other traffic pattern) that cannot be compared with the pairs, and a bad trio
/// would leave three suspects instead of two. The second round costs one pair's time,
/// and it makes node 0 the only node measured twice. Fewer than two nodes: an empty
/// plan (the check is skipped).
///
/// A group of four or five nodes (fewer than [`RING_BELOW`]) is measured around a ring
/// instead: (0, 1), (2, 3), ... then (1, 2), (3, 4), ..., (n−1, 0), in two rounds (three
/// when n is odd). Its first round has only two pairs, too few to judge each against
/// the other, and when one fails there is hardly a good node left to retest it with; on
/// the ring every node has two partners from the start, so a slow node fails twice and
/// a slow link once.
pub fn round_one(nodes: &[NodeId]) -> Plan {
    let n = nodes.len();
    if n < 2 {
        return Plan::empty(Stage::Initial);
    }
    let pair = |i: usize, j: usize| Pair::new(nodes[i].clone(), nodes[j].clone());
    let first = Round {
        pairs: (0..n / 2).map(|k| pair(2 * k, 2 * k + 1)).collect(),
    };
    let mut rounds = vec![first];
    if (4..RING_BELOW).contains(&n) {
        // The ring's other edges; with n odd, (n−1, 0) shares node n−1 with (n−2, n−1).
        let shifted = (0..(n - 1) / 2).map(|k| pair(2 * k + 1, 2 * k + 2));
        let mut second: Vec<Pair> = shifted.collect();
        if n.is_multiple_of(2) {
            second.push(pair(n - 1, 0));
            rounds.push(Round { pairs: second });
        } else {
            rounds.push(Round { pairs: second });
            rounds.push(Round {
                pairs: vec![pair(n - 1, 0)],
            });
        }
    } else if n % 2 == 1 {
        rounds.push(Round {
            pairs: vec![pair(n - 1, 0)],
        });
    }
    Plan {
        stage: Stage::Initial,
        rounds,
    }
}

/// Groups smaller than this (and of four nodes or more) start with the ring of
/// [`round_one`]. From six nodes, one round and the known-good reference its retests
/// build (`crate::localize::judge_pairs`, and the controls of [`retest`]) meet the accuracy targets
/// (`examples/localize_accuracy.rs`) without the ring's extra round.
pub const RING_BELOW: usize = 6;

/// Every pair of nodes, round by round, by the circle method: node 0 stays put and the
/// others rotate, so each round is a set of disjoint pairs and each pair meets once.
/// An odd group gets a phantom node; whoever meets it sits the round out (a bye).
///
/// Rounds are computed on demand: a 4,096-node group has 8.4 million pairs, which the
/// runner needs one round at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullRoundRobin {
    nodes: Vec<NodeId>,
}

/// The `pairing: full` plan; see [`FullRoundRobin`].
pub fn full_round_robin(nodes: &[NodeId]) -> FullRoundRobin {
    FullRoundRobin {
        nodes: nodes.to_vec(),
    }
}

impl FullRoundRobin {
    /// Slots in the circle: the nodes, plus the phantom for an odd group.
    fn slots(&self) -> usize {
        self.nodes.len() + self.nodes.len() % 2
    }

    /// How many rounds: n−1 for even n, n for odd n, none below two nodes.
    pub fn rounds(&self) -> usize {
        if self.nodes.len() < 2 {
            0
        } else {
            self.slots() - 1
        }
    }

    /// Round `r` (0-based); empty past the last round.
    pub fn round(&self, r: usize) -> Round {
        if r >= self.rounds() {
            return Round::default();
        }
        let slots = self.slots();
        let rotating = slots - 1;
        // Slot 0 holds node 0; slot k ≥ 1 holds node ((k − 1 + r) mod (slots − 1)) + 1.
        let at = |slot: usize| {
            if slot == 0 {
                0
            } else {
                (slot - 1 + r) % rotating + 1
            }
        };
        let pairs = (0..slots / 2)
            .map(|i| (at(i), at(slots - 1 - i)))
            .filter(|&(x, y)| x < self.nodes.len() && y < self.nodes.len())
            .map(|(x, y)| Pair::new(self.nodes[x].clone(), self.nodes[y].clone()))
            .collect();
        Round { pairs }
    }

    /// Every round, in order.
    pub fn iter(&self) -> impl Iterator<Item = Round> + '_ {
        (0..self.rounds()).map(|r| self.round(r))
    }

    /// The whole plan at once; for small groups.
    pub fn to_plan(&self) -> Plan {
        Plan {
            stage: Stage::Initial,
            rounds: self.iter().collect(),
        }
    }
}

/// How a pair stands after its measurements were judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairState {
    Passed,
    /// Passed its only measurement by a margin that noise can fake: re-measured before
    /// it counts, and until then neither a pass nor a failure.
    Borderline,
    /// Slow in its only measurement: re-measured before it counts as failed, unless a
    /// member also failed with another partner (which is itself a second measurement of
    /// that node).
    Suspect,
    /// Slow on the mean of two measurements or more. Between two good nodes that is a
    /// slow link, named only on the mean of [`LINK_MEASUREMENTS`].
    Failed,
    /// An error, no work done, or a wrong result: a re-measure does not excuse it, so it
    /// counts at once.
    Faulty,
}

/// How many measurements a pair between two good nodes needs before it is named as a
/// slow link. The mean of two healthy measurements with 2 % noise is 5 % slow about
/// once in 5,000 pairs, too often for `pairing: full`, which tests thousands; the mean
/// of three, about once in 200,000. A slow node needs no third: it fails with several
/// partners.
pub const LINK_MEASUREMENTS: usize = 3;

impl PairState {
    /// Failed or suspect: not a pass.
    pub fn is_bad(self) -> bool {
        matches!(
            self,
            PairState::Suspect | PairState::Failed | PairState::Faulty
        )
    }
}

/// One pair's judged state; `crate::localize::judge_pairs` gives one per distinct pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairOutcome {
    pub pair: Pair,
    pub state: PairState,
    /// How many measurements the state is judged on.
    pub measurements: usize,
}

/// What the tests so far say about a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// In no test yet.
    Untested,
    /// Passed with a partner, and failed no more often than it passed.
    Good,
    /// Failed with at least two partners, more often than it passed, and at least one
    /// of those partners is good: the node is the fault.
    Culprit,
    /// Never shown good, but each of its failures was with a culprit.
    Explained,
    /// Failed, and not yet tested with a good partner that could tell why.
    Undetermined,
}

/// A node's standing and the outcomes (indices into the slice given) behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStanding {
    pub node: NodeId,
    pub status: NodeStatus,
    /// Outcomes this node passed.
    pub passed: Vec<usize>,
    /// Outcomes this node was in that did not pass (failed or suspect).
    pub bad: Vec<usize>,
    /// Borderline outcomes this node was in, waiting for their re-measure.
    pub pending: Vec<usize>,
}

/// Where each node of `nodes` stands after `outcomes` (one per distinct pair), in the
/// order of `nodes`. Outcomes that name a node outside `nodes` are ignored.
///
/// The rules, which [`retest`] relies on to know what is still unknown:
/// - a node that passed with someone and failed no more often than it passed is good;
/// - a node that failed with two or more partners, more often than it passed, is a
///   culprit once it failed with two good partners (a pair whose members both pass
///   elsewhere is a link suspect instead). A partner counts as good if it would be once
///   this node's failures are excused. The failures count when they are firm (an
///   error, or slow on the mean of [`LINK_MEASUREMENTS`]), or when the node failed with
///   three good partners or more: then single measurements do;
/// - failures with a culprit do not count against its partner. Culprits and good nodes
///   depend on each other, so the rules are applied until nothing changes.
pub fn standings(nodes: &[NodeId], outcomes: &[PairOutcome]) -> Vec<NodeStanding> {
    let graph = Graph::new(nodes, outcomes);
    let status = graph.statuses();
    graph
        .passed
        .into_iter()
        .zip(graph.bad)
        .zip(graph.pending)
        .enumerate()
        .map(|(i, ((passed, bad), pending))| NodeStanding {
            node: nodes[i].clone(),
            status: status[i],
            passed,
            bad,
            pending,
        })
        .collect()
}

/// The next tests to run, from the outcomes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retest {
    /// Empty when nothing more can be learned by testing.
    pub plan: Plan,
    /// No node has passed any test, so no partner is known to be good: the fault is
    /// group-wide (network or platform), or more nodes are bad than good, or the group
    /// is too small to tell (two nodes).
    pub no_good_node: bool,
}

/// Plans what the outcomes so far leave open (`outcomes`: one per distinct pair, as
/// `crate::localize::judge_pairs` gives).
///
/// - Each borderline pair is re-measured as it is, unless a member is already a
///   culprit.
/// - Each pair that was slow once is re-measured as it is, unless one of its members
///   already failed with another partner too (then that node is retested instead).
///   Most such pairs are noise and pass. A pair slow once with a good partner is
///   re-measured, unless its other node is slow with three good partners or more (it
///   is convicted), or can still meet a good node it has not met (see below).
/// - A pair slow on the mean of two between good nodes, a link suspect, is measured a
///   third time ([`LINK_MEASUREMENTS`]). So is the failure with a good partner of a
///   node that failed with two and has met every good node.
/// - Each node that failed and is not yet explained is tested with a known-good node it
///   has not met: a node slow with two partners meets a third before its pairs are
///   re-measured. Good nodes that never failed are used first; each good node serves at
///   most one retest per round, and successive retests rotate through the good nodes,
///   so a good node is reused only when there are more suspects than good nodes (then
///   the plan has more rounds).
/// - When no node is good: if every failure involves one node (the odd-group partner,
///   or one of three nodes), the other nodes are paired with each other to find a good
///   one; otherwise `no_good_node` is set and the plan is empty.
/// - While the known-good pairs are few, the rounds planned also carry controls
///   (`add_controls`).
///
/// Each call tests only new combinations or measures a pair again (three times at most
/// in all), so calling it until the plan is empty ends. With a few bad nodes among many
/// good ones, whatever the group size, that is three more rounds in most runs:
/// re-measure, retest, and a third partner (a slow node) or a third measurement (a
/// slow link).
pub fn retest(nodes: &[NodeId], outcomes: &[PairOutcome]) -> Retest {
    let graph = Graph::new(nodes, outcomes);
    let status = graph.statuses();
    let mut good: Vec<usize> = (0..nodes.len())
        .filter(|&m| status[m] == NodeStatus::Good)
        .collect();
    // The cleanest partners first: a retest is only as good as its partner.
    good.sort_by_key(|&g| (graph.bad[g].len(), g));
    // A node slow with two partners meets a third before its pairs are re-measured: a
    // third failure makes a pattern, which convicts it at once, and a pass clears it of
    // a slow link and one noisy pair.
    let new_partner: Vec<bool> = (0..nodes.len())
        .map(|m| {
            status[m] == NodeStatus::Undetermined
                && graph.is_candidate(m)
                && good.iter().any(|&g| !graph.met(m, g))
        })
        .collect();
    let context = Context {
        graph: &graph,
        status: &status,
        new_partner: &new_partner,
    };
    let mut rounds = RoundsBuilder::new(nodes.len());

    let mut remeasuring = vec![false; nodes.len()];
    for (i, outcome) in outcomes.iter().enumerate() {
        let Some((a, b)) = graph.ends[i] else {
            continue;
        };
        let remeasure = match outcome.state {
            PairState::Borderline => !graph.either_culprit(&status, a, b),
            PairState::Suspect => context.needs_remeasure(a, b),
            PairState::Failed => {
                outcome.measurements < LINK_MEASUREMENTS && context.needs_confirming(a, b)
            }
            PairState::Passed | PairState::Faulty => false,
        };
        if remeasure {
            rounds.place_anywhere(a, b);
            remeasuring[a] = true;
            remeasuring[b] = true;
        }
    }

    let needing: Vec<usize> = (0..nodes.len())
        .filter(|&m| status[m] == NodeStatus::Undetermined && !remeasuring[m])
        .collect();

    let mut no_good_node = false;
    if !needing.is_empty() {
        if !good.is_empty() {
            assign_good_partners(&graph, &needing, &good, &mut rounds);
        } else if rounds.is_empty() {
            match graph.hub() {
                Some(hub) => pair_among_themselves(&graph, hub, &mut rounds),
                None => no_good_node = true,
            }
            no_good_node |= rounds.is_empty();
        }
    }
    add_controls(&graph, &good, &mut rounds);
    Retest {
        plan: rounds.into_plan(nodes),
        no_good_node,
    }
}

/// How many plans [`retest`] is called for at most after the first plan of a check.
/// Each plan measures only new combinations, or a pair again (three times at most in
/// all), so the loop ends anyway: this is a guard, not a budget. One slow node or link
/// needs three (re-measure, retests, a third partner or measurement); noise around it,
/// rarely, a few more.
pub const MAX_RETEST_PLANS: usize = 10;

/// What the re-measures of one retest plan are decided from.
struct Context<'a> {
    graph: &'a Graph,
    status: &'a [NodeStatus],
    /// Candidates that can still meet a good node they have not met.
    new_partner: &'a [bool],
}

impl Context<'_> {
    fn either(&self, a: usize, b: usize, f: impl Fn(usize) -> bool) -> bool {
        f(a) || f(b)
    }

    fn is_good(&self, m: usize) -> bool {
        self.status[m] == NodeStatus::Good
    }

    /// Whether a pair that was slow once is measured again before it counts.
    fn needs_remeasure(&self, a: usize, b: usize) -> bool {
        let graph = self.graph;
        // Already explained, or one slow pair more changes nothing, or a new partner
        // says more about that node.
        let settled = |m| graph.is_pattern(m, self.status) || self.new_partner[m];
        if graph.either_culprit(self.status, a, b) || self.either(a, b, settled) {
            false
        } else if self.either(a, b, |m| self.is_good(m)) {
            true // a retest with a good partner decides a node's fate: confirm it
        } else {
            // Slow with two partners is itself a second measurement of that node.
            !self.either(a, b, |m| graph.is_candidate(m))
        }
    }

    /// Whether a pair slow on the mean of fewer than [`LINK_MEASUREMENTS`] is measured
    /// again: a link between two good nodes, or the failure with a good partner of a
    /// node that has met every good node and is not yet convicted.
    fn needs_confirming(&self, a: usize, b: usize) -> bool {
        let stuck = |m: usize| {
            self.status[m] == NodeStatus::Undetermined
                && self.graph.is_candidate(m)
                && !self.new_partner[m]
        };
        (self.is_good(a) && self.is_good(b))
            || (self.is_good(a) && stuck(b))
            || (self.is_good(b) && stuck(a))
    }
}

/// Each node in `needing` meets a good node it has not met yet. Rotating through the
/// good nodes spreads the retests; a node that has met every good node stays
/// undetermined.
fn assign_good_partners(
    graph: &Graph,
    needing: &[usize],
    good: &[usize],
    rounds: &mut RoundsBuilder,
) {
    let is_good: HashSet<usize> = good.iter().copied().collect();
    let mut cursor = 0;
    for &m in needing {
        let mut good_met: Vec<usize> = graph.passed[m]
            .iter()
            .chain(&graph.bad[m])
            .chain(&graph.pending[m])
            .map(|&o| graph.partner(o, m))
            .filter(|p| is_good.contains(p))
            .collect();
        good_met.sort_unstable();
        good_met.dedup();
        if good_met.len() >= good.len() {
            continue;
        }
        for r in 0.. {
            let found = (0..good.len())
                .map(|step| (cursor + step) % good.len())
                .find(|&k| rounds.is_free(r, good[k]) && !graph.met(m, good[k]));
            if let Some(k) = found {
                rounds.place(r, m, good[k]);
                cursor = (k + 1) % good.len();
                break;
            }
            if rounds.is_unused(r) {
                break; // every good node is free here, so none is left to meet
            }
        }
    }
}

/// While fewer than [`CONTROL_BELOW`] pairs have passed between good nodes, good nodes
/// that a retest round leaves idle measure again, as a control, a pair that passed once
/// between them. Controls cost no round, and their values join the known-good
/// reference the retests are judged against (`crate::localize::judge_pairs`), which in
/// a small group is otherwise a handful of pairs. Only pairs measured once: a control
/// measured a third time would be judged like a link against a reference made mostly
/// of other pairs, and a new pair could fail by noise and start retests of its own.
fn add_controls(graph: &Graph, good: &[usize], rounds: &mut RoundsBuilder) {
    let is_good = {
        let mut is_good = vec![false; graph.passed.len()];
        good.iter().for_each(|&g| is_good[g] = true);
        is_good
    };
    let clean = |o: usize| {
        graph.ends[o].is_some_and(|(a, b)| is_good[a] && is_good[b])
            && matches!(graph.states[o], PairState::Passed | PairState::Borderline)
    };
    if (0..graph.states.len()).filter(|&o| clean(o)).count() >= CONTROL_BELOW {
        return;
    }
    for r in 0..rounds.rounds.len() {
        let mut idle: Vec<usize> = good
            .iter()
            .copied()
            .filter(|&g| !rounds.busy[r][g])
            .collect();
        idle.sort_unstable();
        while let Some(x) = idle.first().copied() {
            let again = graph.passed[x]
                .iter()
                .filter(|&&o| graph.measurements[o] == 1)
                .map(|&o| graph.partner(o, x))
                .find(|y| idle.contains(y));
            idle.retain(|&m| m != x);
            if let Some(y) = again {
                rounds.place(r, x, y);
                idle.retain(|&m| m != y);
            }
        }
    }
}

/// Good pairs enough for the median of their values to be a steady reference; below
/// that, retest rounds add controls.
pub const CONTROL_BELOW: usize = 12;

/// With no good node but one node in every failure, the others are paired with each
/// other (pairs not yet tested) so that a good node can emerge.
fn pair_among_themselves(graph: &Graph, hub: usize, rounds: &mut RoundsBuilder) {
    let others: Vec<usize> = (0..graph.passed.len())
        .filter(|&m| m != hub && !graph.bad[m].is_empty())
        .collect();
    let mut taken = vec![false; graph.passed.len()];
    for (i, &x) in others.iter().enumerate() {
        if taken[x] {
            continue;
        }
        if let Some(&y) = others[i + 1..]
            .iter()
            .find(|&&y| !taken[y] && !graph.met(x, y))
        {
            taken[x] = true;
            taken[y] = true;
            rounds.place(0, x, y);
        }
    }
}

/// Slow with this many partners is a pattern, not noise: no single one of those pairs
/// needs a re-measure.
const PATTERN: usize = 3;

/// The outcomes as a graph over node indices.
struct Graph {
    /// The two node indices of each outcome; `None` when a node is not in the group.
    ends: Vec<Option<(usize, usize)>>,
    states: Vec<PairState>,
    /// How many measurements each outcome is judged on.
    measurements: Vec<usize>,
    passed: Vec<Vec<usize>>,
    bad: Vec<Vec<usize>>,
    pending: Vec<Vec<usize>>,
    met: HashSet<(usize, usize)>,
}

impl Graph {
    fn new(nodes: &[NodeId], outcomes: &[PairOutcome]) -> Self {
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (node.as_str(), i))
            .collect();
        let mut graph = Graph {
            ends: Vec::with_capacity(outcomes.len()),
            states: outcomes.iter().map(|o| o.state).collect(),
            measurements: outcomes.iter().map(|o| o.measurements).collect(),
            passed: vec![Vec::new(); nodes.len()],
            bad: vec![Vec::new(); nodes.len()],
            pending: vec![Vec::new(); nodes.len()],
            met: HashSet::with_capacity(outcomes.len()),
        };
        for (i, outcome) in outcomes.iter().enumerate() {
            let ends = index
                .get(outcome.pair.a.as_str())
                .zip(index.get(outcome.pair.b.as_str()))
                .map(|(&a, &b)| (a, b))
                .filter(|(a, b)| a != b);
            graph.ends.push(ends);
            let Some((a, b)) = ends else {
                continue;
            };
            let list = match outcome.state {
                PairState::Passed => &mut graph.passed,
                PairState::Borderline => &mut graph.pending,
                PairState::Suspect | PairState::Failed | PairState::Faulty => &mut graph.bad,
            };
            list[a].push(i);
            list[b].push(i);
            graph.met.insert((a.min(b), a.max(b)));
        }
        graph
    }

    fn either_culprit(&self, status: &[NodeStatus], a: usize, b: usize) -> bool {
        status[a] == NodeStatus::Culprit || status[b] == NodeStatus::Culprit
    }

    fn met(&self, x: usize, y: usize) -> bool {
        self.met.contains(&(x.min(y), x.max(y)))
    }

    fn partner(&self, outcome: usize, node: usize) -> usize {
        match self.ends[outcome] {
            Some((a, b)) if a == node => b,
            Some((a, _)) => a,
            None => node,
        }
    }

    /// Failed with two or more partners, more often than it passed: bad unless the
    /// partners are all bad too. Outcomes are distinct pairs, so `bad` counts partners.
    fn is_candidate(&self, node: usize) -> bool {
        let bad = self.bad[node].len();
        bad >= 2 && bad > self.passed[node].len()
    }

    /// A candidate slow with `PATTERN` good partners or more: one slow pair more or
    /// less changes nothing.
    fn is_pattern(&self, node: usize, status: &[NodeStatus]) -> bool {
        self.is_candidate(node)
            && self.bad[node]
                .iter()
                .filter(|&&o| status[self.partner(o, node)] == NodeStatus::Good)
                .count()
                >= PATTERN
    }

    fn statuses(&self) -> Vec<NodeStatus> {
        let n = self.passed.len();
        let mut culprit = vec![false; n];
        let mut good = vec![false; n];
        // Culprits excuse their partners' failures and good nodes convict their bad
        // partners, so apply both until stable. Neither set ever loses a member (a
        // culprit is never good, and more culprits only make more nodes good), so this
        // ends, in two or three passes in practice.
        loop {
            let next_good: Vec<bool> = (0..n)
                .map(|m| !culprit[m] && self.is_good_given(m, &culprit, None))
                .collect();
            let next_culprit: Vec<bool> = (0..n)
                .map(|m| {
                    culprit[m] || (!next_good[m] && self.is_convicted(m, &next_good, &culprit))
                })
                .collect();
            let stable = next_good == good && next_culprit == culprit;
            good = next_good;
            culprit = next_culprit;
            if stable {
                break;
            }
        }
        (0..n)
            .map(|m| {
                if culprit[m] {
                    NodeStatus::Culprit
                } else if good[m] {
                    NodeStatus::Good
                } else if self.passed[m].is_empty()
                    && self.bad[m].is_empty()
                    && self.pending[m].is_empty()
                {
                    NodeStatus::Untested
                } else if !self.bad[m].is_empty()
                    && self.bad[m].iter().all(|&o| culprit[self.partner(o, m)])
                {
                    NodeStatus::Explained
                } else {
                    NodeStatus::Undetermined
                }
            })
            .collect()
    }

    /// A candidate that failed with two good partners or more, counting only failures
    /// that are firm: an error, slow on the mean of [`LINK_MEASUREMENTS`], or any
    /// failure when it failed with `PATTERN` good partners or more. A partner counts as
    /// good when it is, or would be once this node's failures are excused (its only
    /// other failure may be noise, and in a small group every partner of a slow node
    /// has met it). A failure with any other partner does not count: that partner may
    /// be the culprit. Otherwise one noisy pair next to a slow link, or next to a slow
    /// node, would convict a healthy node.
    fn is_convicted(&self, node: usize, good: &[bool], culprit: &[bool]) -> bool {
        if !self.is_candidate(node) {
            return false;
        }
        let good_partner =
            |p: usize| good[p] || (!culprit[p] && self.is_good_given(p, culprit, Some(node)));
        let with_good: Vec<usize> = self.bad[node]
            .iter()
            .copied()
            .filter(|&o| good_partner(self.partner(o, node)))
            .collect();
        let pattern = with_good.len() >= PATTERN;
        with_good
            .into_iter()
            .filter(|&o| pattern || self.is_firm(o))
            .count()
            >= 2
    }

    /// An error, or slow on the mean of as many measurements as a link needs.
    fn is_firm(&self, outcome: usize) -> bool {
        match self.states[outcome] {
            PairState::Faulty => true,
            PairState::Failed => self.measurements[outcome] >= LINK_MEASUREMENTS,
            _ => false,
        }
    }

    /// Passed with someone, and its failures with non-culprits (other than `excused`)
    /// do not outweigh that.
    fn is_good_given(&self, node: usize, culprit: &[bool], excused: Option<usize>) -> bool {
        let passed = self.passed[node].len();
        if passed == 0 {
            return false;
        }
        let bad = self.bad[node]
            .iter()
            .map(|&o| self.partner(o, node))
            .filter(|&p| !culprit[p] && Some(p) != excused)
            .count();
        !(bad >= 2 && bad > passed)
    }

    /// The one node in every outcome, when nothing passed and at least two outcomes
    /// failed.
    fn hub(&self) -> Option<usize> {
        if self.passed.iter().any(|p| !p.is_empty()) {
            return None;
        }
        let bad: Vec<(usize, usize)> = self
            .ends
            .iter()
            .zip(&self.states)
            .filter(|(_, state)| state.is_bad())
            .filter_map(|(ends, _)| *ends)
            .collect();
        let &(x, y) = bad.first()?;
        if bad.len() < 2 {
            return None;
        }
        [x, y]
            .into_iter()
            .find(|&h| bad.iter().all(|&(a, b)| a == h || b == h))
    }
}

/// Fills rounds with disjoint pairs of node indices.
struct RoundsBuilder {
    n: usize,
    rounds: Vec<Vec<(usize, usize)>>,
    busy: Vec<Vec<bool>>,
}

impl RoundsBuilder {
    fn new(n: usize) -> Self {
        RoundsBuilder {
            n,
            rounds: Vec::new(),
            busy: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.rounds.is_empty()
    }

    fn ensure(&mut self, r: usize) {
        while self.rounds.len() <= r {
            self.rounds.push(Vec::new());
            self.busy.push(vec![false; self.n]);
        }
    }

    fn is_free(&mut self, r: usize, node: usize) -> bool {
        self.ensure(r);
        !self.busy[r][node]
    }

    fn is_unused(&self, r: usize) -> bool {
        self.rounds.get(r).is_none_or(Vec::is_empty)
    }

    fn place(&mut self, r: usize, a: usize, b: usize) {
        self.ensure(r);
        self.busy[r][a] = true;
        self.busy[r][b] = true;
        self.rounds[r].push((a, b));
    }

    /// Into the first round where both nodes are free.
    fn place_anywhere(&mut self, a: usize, b: usize) {
        let mut r = 0;
        while !(self.is_free(r, a) && self.is_free(r, b)) {
            r += 1;
        }
        self.place(r, a, b);
    }

    fn into_plan(self, nodes: &[NodeId]) -> Plan {
        let rounds = self
            .rounds
            .into_iter()
            .filter(|pairs| !pairs.is_empty())
            .map(|pairs| Round {
                pairs: pairs
                    .into_iter()
                    .map(|(a, b)| Pair::new(nodes[a].clone(), nodes[b].clone()))
                    .collect(),
            })
            .collect();
        Plan {
            stage: Stage::Retest,
            rounds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<NodeId> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    /// A pair judged on as many measurements as its state takes: one, two when slow on
    /// a mean, and a link's full count when failed.
    fn outcome(a: &str, b: &str, state: PairState) -> PairOutcome {
        let measurements = match state {
            PairState::Failed => LINK_MEASUREMENTS,
            _ => 1,
        };
        PairOutcome {
            pair: Pair::new(a, b),
            state,
            measurements,
        }
    }

    fn assert_disjoint(round: &Round) {
        let mut seen = HashSet::new();
        for pair in &round.pairs {
            assert_ne!(pair.a, pair.b, "a node paired with itself: {pair}");
            assert!(seen.insert(pair.a.clone()), "{} twice in {round:?}", pair.a);
            assert!(seen.insert(pair.b.clone()), "{} twice in {round:?}", pair.b);
        }
    }

    fn unordered(pair: &Pair) -> (String, String) {
        (
            pair.a.clone().min(pair.b.clone()),
            pair.a.clone().max(pair.b.clone()),
        )
    }

    #[test]
    fn round_one_tests_every_node_in_disjoint_pairs() {
        for (n, rounds) in [(2, 1), (3, 2), (4, 2), (5, 3), (6, 1), (8, 1), (4097, 2)] {
            let group = nodes(n);
            let plan = round_one(&group);
            assert_eq!(plan.stage, Stage::Initial);
            plan.rounds.iter().for_each(assert_disjoint);
            let tested: HashSet<&str> = plan
                .pairs()
                .flat_map(|p| [p.a.as_str(), p.b.as_str()])
                .collect();
            assert_eq!(tested.len(), n, "n = {n}");
            assert_eq!(plan.rounds[0].pairs.len(), n / 2, "n = {n}");
            assert_eq!(plan.rounds.len(), rounds, "n = {n}");
            let distinct: HashSet<(String, String)> = plan.pairs().map(unordered).collect();
            assert_eq!(
                distinct.len(),
                plan.pairs().count(),
                "n = {n}: a pair twice"
            );
        }
    }

    #[test]
    fn a_group_of_four_or_five_starts_around_a_ring() {
        let rounds = |n: usize| -> Vec<Vec<Pair>> {
            round_one(&nodes(n))
                .rounds
                .into_iter()
                .map(|r| r.pairs)
                .collect()
        };
        assert_eq!(
            rounds(4),
            [
                vec![Pair::new("n0", "n1"), Pair::new("n2", "n3")],
                vec![Pair::new("n1", "n2"), Pair::new("n3", "n0")],
            ]
        );
        assert_eq!(
            rounds(5),
            [
                vec![Pair::new("n0", "n1"), Pair::new("n2", "n3")],
                vec![Pair::new("n1", "n2"), Pair::new("n3", "n4")],
                vec![Pair::new("n4", "n0")],
            ]
        );
        for n in [4, 5] {
            let plan = round_one(&nodes(n));
            for node in nodes(n) {
                let partners = plan.pairs().filter(|p| p.contains(&node)).count();
                assert_eq!(partners, 2, "{node} of {n}");
            }
        }
    }

    #[test]
    fn an_odd_group_pairs_the_leftover_with_a_first_round_node() {
        let plan = round_one(&nodes(7));
        assert_eq!(
            plan.rounds[0].pairs,
            [
                Pair::new("n0", "n1"),
                Pair::new("n2", "n3"),
                Pair::new("n4", "n5")
            ]
        );
        assert_eq!(plan.rounds[1].pairs, [Pair::new("n6", "n0")]);
        assert_eq!(
            round_one(&nodes(3)).rounds[1].pairs,
            [Pair::new("n2", "n0")]
        );
    }

    #[test]
    fn one_node_or_none_has_nothing_to_pair() {
        assert!(round_one(&nodes(1)).is_empty());
        assert!(round_one(&nodes(0)).is_empty());
        assert_eq!(full_round_robin(&nodes(1)).rounds(), 0);
        assert!(full_round_robin(&nodes(1)).to_plan().is_empty());
    }

    #[test]
    fn full_round_robin_meets_every_pair_exactly_once() {
        for n in (2..=9).chain([64, 65]) {
            let plan = full_round_robin(&nodes(n)).to_plan();
            assert_eq!(
                plan.rounds.len(),
                if n % 2 == 0 { n - 1 } else { n },
                "n = {n}"
            );
            let mut seen = HashSet::new();
            for round in &plan.rounds {
                assert_disjoint(round);
                assert_eq!(
                    round.pairs.len(),
                    n / 2,
                    "n = {n}: one bye per round when odd"
                );
                for pair in &round.pairs {
                    assert!(seen.insert(unordered(pair)), "n = {n}: {pair} twice");
                }
            }
            assert_eq!(seen.len(), n * (n - 1) / 2, "n = {n}");
        }
    }

    #[test]
    fn full_round_robin_rounds_are_computed_on_demand() {
        let plan = full_round_robin(&nodes(4096));
        assert_eq!(plan.rounds(), 4095);
        let last = plan.round(4094);
        assert_eq!(last.pairs.len(), 2048);
        assert_disjoint(&last);
        assert!(plan.round(4095).pairs.is_empty());
        assert_eq!(
            plan.round(0),
            full_round_robin(&nodes(4096)).round(0),
            "deterministic"
        );
    }

    #[test]
    fn nothing_to_retest_when_every_pair_passed() {
        let group = nodes(4);
        let outcomes = [
            outcome("n0", "n1", PairState::Passed),
            outcome("n2", "n3", PairState::Passed),
        ];
        let retest = retest(&group, &outcomes);
        assert!(retest.plan.is_empty());
        assert!(!retest.no_good_node);
    }

    #[test]
    fn a_pair_slow_once_is_re_measured_as_it_is() {
        let group = nodes(6);
        let outcomes = [
            outcome("n0", "n1", PairState::Passed),
            outcome("n2", "n3", PairState::Suspect),
            outcome("n4", "n5", PairState::Passed),
        ];
        let retest = retest(&group, &outcomes);
        assert_eq!(retest.plan.stage, Stage::Retest);
        assert_eq!(retest.plan.rounds.len(), 1);
        // The good nodes the round leaves idle are measured again, as controls.
        assert_eq!(
            retest.plan.rounds[0].pairs,
            [
                Pair::new("n2", "n3"),
                Pair::new("n0", "n1"),
                Pair::new("n4", "n5")
            ]
        );
    }

    #[test]
    fn each_member_of_a_failed_pair_meets_a_different_good_node() {
        let group = nodes(8);
        let outcomes = [
            outcome("n0", "n1", PairState::Passed),
            outcome("n2", "n3", PairState::Failed),
            outcome("n4", "n5", PairState::Passed),
            outcome("n6", "n7", PairState::Passed),
        ];
        let plan = retest(&group, &outcomes).plan;
        assert_eq!(plan.rounds.len(), 1, "one round when good nodes are plenty");
        assert_disjoint(&plan.rounds[0]);
        assert_eq!(
            plan.rounds[0].pairs[..2],
            [Pair::new("n2", "n0"), Pair::new("n3", "n1")]
        );
    }

    #[test]
    fn good_nodes_that_never_failed_are_preferred_partners() {
        let group = nodes(7);
        let outcomes = [
            // n0 passed but was also in a failed pair: a weaker partner.
            outcome("n0", "n1", PairState::Passed),
            outcome("n0", "n6", PairState::Failed),
            outcome("n2", "n3", PairState::Failed),
            outcome("n4", "n5", PairState::Passed),
        ];
        let plan = retest(&group, &outcomes).plan;
        let partners: Vec<&str> = plan.pairs().map(|p| p.b.as_str()).collect();
        assert_eq!(
            plan.pairs().map(|p| p.a.as_str()).collect::<Vec<_>>(),
            ["n2", "n3", "n6"]
        );
        assert_eq!(partners, ["n1", "n4", "n5"]);
    }

    #[test]
    fn more_suspects_than_good_nodes_take_more_rounds() {
        let group = nodes(8);
        let outcomes = [
            outcome("n0", "n1", PairState::Passed),
            outcome("n2", "n3", PairState::Failed),
            outcome("n4", "n5", PairState::Failed),
            outcome("n6", "n7", PairState::Failed),
        ];
        let plan = retest(&group, &outcomes).plan;
        assert_eq!(plan.rounds.len(), 3, "six suspects, two good nodes");
        let mut uses: HashMap<&str, usize> = HashMap::new();
        for round in &plan.rounds {
            assert_disjoint(round);
            for pair in &round.pairs {
                assert!(["n0", "n1"].contains(&pair.b.as_str()), "{pair}");
                *uses.entry(pair.b.as_str()).or_default() += 1;
            }
        }
        assert_eq!(plan.pairs().count(), 6);
        assert_eq!(uses["n0"], 3, "the load is spread: {uses:?}");
    }

    #[test]
    fn no_good_node_is_said_and_nothing_planned() {
        let two = retest(&nodes(2), &[outcome("n0", "n1", PairState::Failed)]);
        assert!(two.no_good_node);
        assert!(two.plan.is_empty());

        let four = [
            outcome("n0", "n1", PairState::Failed),
            outcome("n2", "n3", PairState::Failed),
        ];
        let retest = retest(&nodes(4), &four);
        assert!(retest.no_good_node);
        assert!(retest.plan.is_empty());
    }

    #[test]
    fn a_borderline_pair_is_re_measured_and_counts_for_nothing_until_then() {
        let group = nodes(8);
        let outcomes = [
            outcome("n0", "n1", PairState::Passed),
            outcome("n2", "n3", PairState::Borderline),
            outcome("n4", "n5", PairState::Borderline),
            outcome("n6", "n7", PairState::Passed),
        ];
        let plan = retest(&group, &outcomes).plan;
        assert_eq!(
            plan.rounds[0].pairs[..2],
            [Pair::new("n2", "n3"), Pair::new("n4", "n5")]
        );
        let standing = &standings(&group, &outcomes)[2];
        assert_eq!(standing.status, NodeStatus::Undetermined);
        assert!(standing.passed.is_empty() && standing.bad.is_empty());
        assert_eq!(standing.pending, [1]);
    }

    #[test]
    fn two_nodes_slow_once_are_re_measured_before_giving_up() {
        let retest = retest(&nodes(2), &[outcome("n0", "n1", PairState::Suspect)]);
        assert!(!retest.no_good_node);
        assert_eq!(retest.plan.rounds[0].pairs, [Pair::new("n0", "n1")]);
    }

    #[test]
    fn when_one_node_is_in_every_failure_the_others_meet_each_other() {
        let group = nodes(3);
        let outcomes = [
            outcome("n0", "n1", PairState::Failed),
            outcome("n2", "n0", PairState::Failed),
        ];
        let first = retest(&group, &outcomes);
        assert!(!first.no_good_node);
        assert_eq!(first.plan.rounds[0].pairs, [Pair::new("n1", "n2")]);

        let mut after = outcomes.to_vec();
        after.push(outcome("n1", "n2", PairState::Passed));
        let statuses: Vec<NodeStatus> =
            standings(&group, &after).iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            [NodeStatus::Culprit, NodeStatus::Good, NodeStatus::Good]
        );
        assert!(retest(&group, &after).plan.is_empty());
    }

    #[test]
    fn a_node_in_two_slow_pairs_is_not_re_measured_but_retested() {
        // The odd-group partner n0 was slow with both n1 and n4: two partners already.
        let group = nodes(5);
        let outcomes = [
            outcome("n0", "n1", PairState::Suspect),
            outcome("n2", "n3", PairState::Passed),
            outcome("n4", "n0", PairState::Suspect),
        ];
        let plan = retest(&group, &outcomes).plan;
        let mut retested: Vec<&str> = plan.pairs().map(|p| p.a.as_str()).collect();
        retested.sort_unstable();
        assert_eq!(retested, ["n0", "n1", "n4"]);
        for round in &plan.rounds {
            assert_disjoint(round);
        }
        assert!(plan.pairs().all(|p| ["n2", "n3"].contains(&p.b.as_str())));
    }

    #[test]
    fn standings_name_a_culprit_a_link_and_excuse_partners() {
        let group = nodes(8);
        let outcomes = [
            outcome("n0", "n1", PairState::Failed), // n0 is bad
            outcome("n2", "n3", PairState::Failed), // the n2-n3 link is bad
            outcome("n4", "n5", PairState::Passed),
            outcome("n6", "n7", PairState::Passed),
            outcome("n0", "n4", PairState::Failed),
            outcome("n1", "n5", PairState::Passed),
            outcome("n2", "n6", PairState::Passed),
            outcome("n3", "n7", PairState::Passed),
        ];
        let status: Vec<NodeStatus> = standings(&group, &outcomes)
            .iter()
            .map(|s| s.status)
            .collect();
        use NodeStatus::*;
        assert_eq!(status, [Culprit, Good, Good, Good, Good, Good, Good, Good]);
        assert!(retest(&group, &outcomes).plan.is_empty());
    }

    #[test]
    fn a_partner_whose_only_failure_is_with_a_culprit_is_explained() {
        let group = nodes(6);
        let outcomes = [
            outcome("n0", "n1", PairState::Failed),
            outcome("n2", "n3", PairState::Passed),
            outcome("n0", "n2", PairState::Failed),
            outcome("n4", "n5", PairState::Passed),
            outcome("n0", "n4", PairState::Failed),
        ];
        let status: Vec<NodeStatus> = standings(&group, &outcomes)
            .iter()
            .map(|s| s.status)
            .collect();
        assert_eq!(status[0], NodeStatus::Culprit);
        assert_eq!(status[1], NodeStatus::Explained);
    }

    #[test]
    fn a_node_that_met_every_good_node_is_left_undetermined() {
        // n0 is the only good node; n1 and n2 have met it, n3 and n4 have not.
        let group = nodes(5);
        let outcomes = [
            outcome("n0", "n1", PairState::Passed),
            outcome("n1", "n3", PairState::Failed),
            outcome("n1", "n4", PairState::Failed),
            outcome("n2", "n0", PairState::Failed),
        ];
        let statuses: Vec<NodeStatus> = standings(&group, &outcomes)
            .iter()
            .map(|s| s.status)
            .collect();
        assert_eq!(statuses[0], NodeStatus::Good);
        assert!(statuses[1..].iter().all(|s| *s == NodeStatus::Undetermined));
        let plan = retest(&group, &outcomes).plan;
        let rounds: Vec<Vec<Pair>> = plan.rounds.into_iter().map(|r| r.pairs).collect();
        assert_eq!(
            rounds,
            [vec![Pair::new("n3", "n0")], vec![Pair::new("n4", "n0")]]
        );
    }

    #[test]
    fn outcomes_naming_unknown_nodes_are_ignored() {
        let group = nodes(2);
        let outcomes = [
            outcome("n0", "stranger", PairState::Failed),
            outcome("n0", "n1", PairState::Passed),
        ];
        let status: Vec<NodeStatus> = standings(&group, &outcomes)
            .iter()
            .map(|s| s.status)
            .collect();
        assert_eq!(status, [NodeStatus::Good, NodeStatus::Good]);
        assert!(retest(&group, &outcomes).plan.is_empty());
    }

    fn measured(a: &str, b: &str, state: PairState, measurements: usize) -> PairOutcome {
        PairOutcome {
            measurements,
            ..outcome(a, b, state)
        }
    }

    fn statuses(group: &[NodeId], outcomes: &[PairOutcome]) -> Vec<NodeStatus> {
        standings(group, outcomes)
            .iter()
            .map(|s| s.status)
            .collect()
    }

    #[test]
    fn a_link_between_good_nodes_is_measured_until_it_has_three() {
        let group = nodes(4);
        let mut outcomes = vec![
            outcome("n0", "n1", PairState::Passed),
            measured("n2", "n3", PairState::Failed, 2),
            outcome("n1", "n2", PairState::Passed),
            outcome("n3", "n0", PairState::Passed),
        ];
        assert!(
            statuses(&group, &outcomes)
                .iter()
                .all(|s| *s == NodeStatus::Good)
        );
        let plan = retest(&group, &outcomes).plan;
        assert_eq!(plan.rounds.len(), 1);
        assert_eq!(plan.rounds[0].pairs[0], Pair::new("n2", "n3"));
        outcomes[1].measurements = LINK_MEASUREMENTS;
        assert!(retest(&group, &outcomes).plan.is_empty());
        // An error is not measured again: a re-measure does not excuse it.
        outcomes[1] = outcome("n2", "n3", PairState::Faulty);
        assert!(retest(&group, &outcomes).plan.is_empty());
    }

    #[test]
    fn a_node_slow_with_two_partners_meets_a_third_before_any_re_measure() {
        let group = nodes(8);
        let mut outcomes = vec![
            outcome("n0", "n1", PairState::Suspect),
            outcome("n2", "n3", PairState::Passed),
            outcome("n4", "n5", PairState::Passed),
            outcome("n6", "n7", PairState::Passed),
            outcome("n0", "n2", PairState::Suspect),
            outcome("n1", "n3", PairState::Passed),
        ];
        let plan = retest(&group, &outcomes).plan;
        assert_eq!(plan.rounds.len(), 1);
        let with_n0: Vec<&Pair> = plan.pairs().filter(|p| p.contains("n0")).collect();
        assert_eq!(with_n0, [&Pair::new("n0", "n3")], "{plan:?}");
        // A third failure with a good partner is a pattern: convicted on single
        // measurements.
        outcomes.push(outcome("n0", "n3", PairState::Suspect));
        assert_eq!(statuses(&group, &outcomes)[0], NodeStatus::Culprit);
        // A pass instead leaves two failures, which need the mean of three each.
        outcomes.pop();
        outcomes.push(outcome("n0", "n3", PairState::Passed));
        assert_eq!(statuses(&group, &outcomes)[0], NodeStatus::Undetermined);
    }

    #[test]
    fn a_node_that_met_every_good_node_has_its_failures_confirmed() {
        let group = nodes(4);
        let mut outcomes = vec![
            measured("n0", "n1", PairState::Failed, 2),
            outcome("n2", "n3", PairState::Passed),
            outcome("n1", "n2", PairState::Passed),
            measured("n3", "n0", PairState::Failed, 2),
            outcome("n0", "n2", PairState::Passed),
        ];
        assert_eq!(statuses(&group, &outcomes)[0], NodeStatus::Undetermined);
        let plan = retest(&group, &outcomes).plan;
        let with_n0: Vec<&Pair> = plan.pairs().filter(|p| p.contains("n0")).collect();
        assert_eq!(
            with_n0,
            [&Pair::new("n0", "n1"), &Pair::new("n3", "n0")],
            "{plan:?}"
        );
        outcomes[0].measurements = LINK_MEASUREMENTS;
        outcomes[3].measurements = LINK_MEASUREMENTS;
        assert_eq!(statuses(&group, &outcomes)[0], NodeStatus::Culprit);
    }

    #[test]
    fn a_partner_counts_as_good_once_the_slow_node_is_excused() {
        // Four nodes, every pair: n0 is slow, and n1-n3 was slow once by noise, so
        // neither n1 nor n3 has more passes than failures until n0 is the culprit.
        let group = nodes(4);
        let outcomes = [
            outcome("n0", "n1", PairState::Suspect),
            outcome("n0", "n2", PairState::Suspect),
            outcome("n0", "n3", PairState::Suspect),
            outcome("n1", "n2", PairState::Passed),
            outcome("n2", "n3", PairState::Passed),
            outcome("n1", "n3", PairState::Suspect),
        ];
        use NodeStatus::*;
        assert_eq!(statuses(&group, &outcomes), [Culprit, Good, Good, Good]);
        // n1-n3 is now a link suspect between good nodes: re-measured.
        let plan = retest(&group, &outcomes).plan;
        assert_eq!(plan.rounds[0].pairs, [Pair::new("n1", "n3")]);
    }

    #[test]
    fn a_failure_with_the_culprit_does_not_make_a_pattern() {
        // n0 is slow with everyone; n4 also failed, by noise, with n1 and n3.
        let group = nodes(6);
        let mut outcomes: Vec<PairOutcome> = (1..6)
            .map(|i| outcome("n0", &format!("n{i}"), PairState::Suspect))
            .collect();
        for (a, b) in [("n1", "n2"), ("n2", "n3"), ("n3", "n5"), ("n1", "n5")] {
            outcomes.push(outcome(a, b, PairState::Passed));
        }
        for (a, b, state) in [
            ("n4", "n1", PairState::Suspect),
            ("n4", "n3", PairState::Suspect),
            ("n4", "n2", PairState::Passed),
            ("n4", "n5", PairState::Passed),
        ] {
            outcomes.push(outcome(a, b, state));
        }
        let status = statuses(&group, &outcomes);
        assert_eq!(status[0], NodeStatus::Culprit);
        assert_eq!(status[4], NodeStatus::Good, "{status:?}");
    }

    #[test]
    fn controls_stop_once_the_reference_is_steady() {
        // Twelve pairs passed between good nodes: no controls beside the re-measure.
        let group = nodes(26);
        let mut outcomes: Vec<PairOutcome> = (0..13)
            .map(|k| {
                outcome(
                    &format!("n{}", 2 * k),
                    &format!("n{}", 2 * k + 1),
                    PairState::Passed,
                )
            })
            .collect();
        outcomes[12].state = PairState::Suspect;
        let plan = retest(&group, &outcomes).plan;
        assert_eq!(plan.rounds[0].pairs, [Pair::new("n24", "n25")]);
        // Eleven: the idle good nodes are measured again.
        outcomes[11].state = PairState::Borderline;
        outcomes[10].state = PairState::Suspect;
        let plan = retest(&group, &outcomes).plan;
        assert_eq!(plan.pairs().count(), 13, "{plan:?}");
    }

    #[test]
    fn pair_helpers() {
        let pair = Pair::new("n0", "n1");
        assert!(pair.contains("n1") && !pair.contains("n2"));
        assert_eq!(pair.partner_of("n0"), Some("n1"));
        assert_eq!(pair.partner_of("n2"), None);
        assert!(pair.same_nodes(&Pair::new("n1", "n0")));
        assert_eq!(pair.to_string(), "n0<->n1");
        assert_eq!(pair.entity().to_string(), "n0<->n1");
    }
}
