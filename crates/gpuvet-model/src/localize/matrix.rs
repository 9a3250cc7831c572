//! The matrix view for whole-group checks: a source × destination matrix of latency,
//! bandwidth or success rate, read with C4D's rule: a bad row or column is a node, a
//! lone bad cell is a link.

use serde::{Deserialize, Serialize};

use super::{GroupWide, is_finding};
use crate::analysis::{JudgePolicy, Limit, deficit, fmt_value};
use crate::catalog::MetricSpec;
use crate::pairing::NodeId;
use crate::results::{Entity, EntityResult, Evidence, Lane, Measurement, Verdict};

/// A source × destination matrix of one metric between the nodes of a group: latency,
/// bandwidth, or success rate. Cells not measured are `None`; the diagonal is ignored.
/// A measured value that is not finite or not positive counts as a failure.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    nodes: Vec<NodeId>,
    cells: Vec<Option<f64>>,
}

impl Matrix {
    /// A matrix with nothing measured yet.
    pub fn new(nodes: Vec<NodeId>) -> Self {
        let n = nodes.len();
        Matrix {
            nodes,
            cells: vec![None; n * n],
        }
    }

    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// Records the value from `source` to `destination` (indices into `nodes`); out of
    /// range indices are ignored.
    pub fn set(&mut self, source: usize, destination: usize, value: f64) {
        let n = self.nodes.len();
        if source < n && destination < n {
            self.cells[source * n + destination] = Some(value);
        }
    }

    pub fn get(&self, source: usize, destination: usize) -> Option<f64> {
        let n = self.nodes.len();
        if source < n && destination < n && source != destination {
            self.cells[source * n + destination]
        } else {
            None
        }
    }
}

/// What a matrix says about each node and link.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MatrixLocalization {
    /// One result per node with a measured cell: `ok`, or `slow`/`faulty` when most of
    /// its row (as a source) or of its column (as a destination) is bad.
    pub nodes: Vec<EntityResult>,
    /// Bad cells between two nodes that are fine otherwise, on
    /// `Entity::NodePair { a: source, b: destination }`.
    pub links: Vec<EntityResult>,
    /// The median of all measured cells, which every cell is compared with.
    pub reference: Option<f64>,
    /// Set when more than half the nodes are bad: no node or link explains that.
    pub group_wide: Option<GroupWide>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cell {
    Missing,
    Failed,
    Value(f64),
}

/// C4D's rule on a matrix: a node whose row or column is mostly bad is the fault, and a
/// bad cell between two nodes that are otherwise fine is a link.
///
/// A cell is bad when it failed, breaks the policy's limit, or is worse than the median
/// of all cells by more than the tolerance. Noise is tolerated in two ways: a node needs
/// a majority of bad cells in its row or column (at least two measured), so a few noisy
/// cells never name a node; and a link measured in both directions is named only when
/// both are bad. A lone noisy cell can still be named: re-measure the links returned
/// before acting on them, as for any suspect.
pub fn localize_matrix(
    matrix: &Matrix,
    metric: &MetricSpec,
    policy: &JudgePolicy,
    node_lane: Lane,
) -> MatrixLocalization {
    let grid = Grid::new(matrix, metric, policy);
    let n = matrix.nodes.len();
    let mut flagged = vec![false; n];
    let nodes: Vec<EntityResult> = flagged
        .iter_mut()
        .enumerate()
        .filter_map(|(i, flag)| {
            let result = grid.node_result(i, node_lane)?;
            *flag = is_finding(result.verdict);
            Some(result)
        })
        .collect();

    let mut links = Vec::new();
    for s in 0..n {
        for d in s + 1..n {
            if flagged[s] || flagged[d] {
                continue; // a bad node explains its cells
            }
            let bad_cells: Vec<(usize, usize, Cell)> = match (grid.cell(s, d), grid.cell(d, s)) {
                (c, Cell::Missing) if grid.is_bad(c) => vec![(s, d, c)],
                (Cell::Missing, c) if grid.is_bad(c) => vec![(d, s, c)],
                (f, b) if grid.is_bad(f) && grid.is_bad(b) => vec![(s, d, f), (d, s, b)],
                _ => continue,
            };
            links.push(grid.link_result(&bad_cells));
        }
    }

    let bad_nodes = flagged.iter().filter(|&&f| f).count();
    let group_wide = (n >= 2 && 2 * bad_nodes > n).then(|| GroupWide {
        lane: Lane::Network,
        reason: format!(
            "{bad_nodes} of {n} nodes have mostly bad rows or columns: the fault is \
             group-wide, not one node or link"
        ),
    });
    MatrixLocalization {
        nodes,
        links,
        reference: grid.reference,
        group_wide,
    }
}

/// A matrix with its reference, judging cells.
struct Grid<'a> {
    matrix: &'a Matrix,
    metric: &'a MetricSpec,
    policy: &'a JudgePolicy,
    reference: Option<f64>,
}

impl<'a> Grid<'a> {
    fn new(matrix: &'a Matrix, metric: &'a MetricSpec, policy: &'a JudgePolicy) -> Self {
        let mut grid = Grid {
            matrix,
            metric,
            policy,
            reference: None,
        };
        let n = matrix.nodes.len();
        let mut usable: Vec<f64> = (0..n)
            .flat_map(|s| (0..n).map(move |d| (s, d)))
            .filter_map(|(s, d)| value_of(grid.cell(s, d)))
            .collect();
        grid.reference = select_median(&mut usable);
        grid
    }

    fn cell(&self, source: usize, destination: usize) -> Cell {
        match self.matrix.get(source, destination) {
            None => Cell::Missing,
            Some(v) if v.is_finite() && v > 0.0 => Cell::Value(v),
            Some(_) => Cell::Failed,
        }
    }

    /// How much worse than the reference; infinite for a failure.
    fn deficit(&self, cell: Cell) -> Option<f64> {
        match (cell, self.reference) {
            (Cell::Value(v), Some(r)) => Some(deficit(self.metric.direction, v, r)),
            (Cell::Failed, _) => Some(f64::INFINITY),
            _ => None,
        }
    }

    fn is_bad(&self, cell: Cell) -> bool {
        match cell {
            Cell::Missing => false,
            Cell::Failed => true,
            Cell::Value(v) => {
                breaks_limit(self.policy.limit, v)
                    || self
                        .deficit(cell)
                        .is_some_and(|d| d > self.policy.tolerance)
            }
        }
    }

    fn evidence(&self, value: Option<f64>, deficit: Option<f64>) -> Evidence {
        Evidence {
            value,
            peer_median: self.reference,
            baseline: self.policy.limit.map(Limit::value),
            threshold_pct: Some(self.policy.tolerance * 100.0),
            noise_pct: None,
            deficit_pct: deficit
                .filter(|d| d.is_finite())
                .map(|d| (d * 10_000.0).round() / 100.0),
            remeasured: false,
            history: None,
            baseline_source: None,
        }
    }

    /// Node `i`'s verdict from its row (as a source) and column (as a destination);
    /// `None` when nothing from or to it was measured.
    fn node_result(&self, i: usize, node_lane: Lane) -> Option<EntityResult> {
        let n = self.matrix.nodes.len();
        let row: Vec<Cell> = (0..n)
            .filter(|&j| j != i)
            .map(|j| self.cell(i, j))
            .collect();
        let column: Vec<Cell> = (0..n)
            .filter(|&j| j != i)
            .map(|j| self.cell(j, i))
            .collect();
        let tally = |cells: &[Cell]| {
            let measured = cells.iter().filter(|&&c| c != Cell::Missing).count();
            let bad = cells.iter().filter(|&&c| self.is_bad(c)).count();
            (measured, bad)
        };
        let (row_measured, row_bad) = tally(&row);
        let (column_measured, column_bad) = tally(&column);
        if row_measured + column_measured == 0 {
            return None;
        }
        let mostly_bad = |measured: usize, bad: usize| measured >= 2 && 2 * bad > measured;
        let as_source = mostly_bad(row_measured, row_bad);
        let as_destination = mostly_bad(column_measured, column_bad);

        let cells: Vec<Cell> = row.iter().chain(&column).copied().collect();
        let mut values: Vec<f64> = cells.iter().filter_map(|&c| value_of(c)).collect();
        let mut deficits: Vec<f64> = cells.iter().filter_map(|&c| self.deficit(c)).collect();
        let value = select_median(&mut values);
        let median_deficit = select_median(&mut deficits);
        let failures = cells.iter().filter(|&&c| c == Cell::Failed).count();

        let (verdict, lane, reason) = if as_source || as_destination {
            let side = match (as_source, as_destination) {
                (true, true) => "as a source and as a destination",
                (true, false) => "as a source",
                _ => "as a destination",
            };
            let bad_cells =
                row_bad * usize::from(as_source) + column_bad * usize::from(as_destination);
            let verdict = if 2 * failures > bad_cells {
                Verdict::Faulty
            } else {
                Verdict::Slow
            };
            let mut reason = format!(
                "bad {side}: {row_bad} of {row_measured} cells from it and {column_bad} of \
                 {column_measured} to it failed or are worse than the median"
            );
            if let Some(r) = self.reference {
                reason.push_str(&format!(
                    " {} {} by more than {:.1}%",
                    fmt_value(r),
                    self.metric.unit,
                    self.policy.tolerance * 100.0
                ));
            }
            if let Some(d) = median_deficit.filter(|d| d.is_finite()) {
                reason.push_str(&format!(" (median {:.1}% worse)", d * 100.0));
            }
            (verdict, node_lane, reason)
        } else {
            let reason = format!(
                "{} of {} cells from or to it are bad",
                row_bad + column_bad,
                row_measured + column_measured
            );
            (Verdict::Ok, Lane::Network, reason)
        };
        let entity = Entity::Node {
            node: self.matrix.nodes[i].clone(),
        };
        let mut measurement = Measurement::ok(entity.clone(), 0.0, Vec::new());
        measurement.value = value;
        measurement.extra = [
            ("cells_bad", row_bad + column_bad),
            ("cells_measured", row_measured + column_measured),
        ]
        .into_iter()
        .map(|(key, count)| (key.to_owned(), count as f64))
        .collect();
        Some(EntityResult {
            entity,
            verdict,
            lane,
            reason,
            evidence: self.evidence(value, median_deficit),
            measurement,
        })
    }

    /// A suspect link from its bad cells: one direction, or both.
    fn link_result(&self, bad_cells: &[(usize, usize, Cell)]) -> EntityResult {
        let (s, d, _) = bad_cells[0];
        let (source, destination) = (&self.matrix.nodes[s], &self.matrix.nodes[d]);
        let entity = Entity::NodePair {
            a: source.clone(),
            b: destination.clone(),
        };
        let values: Vec<f64> = bad_cells
            .iter()
            .filter_map(|&(_, _, c)| value_of(c))
            .collect();
        let failed = values.len() < bad_cells.len();
        let value = (!failed).then(|| values.iter().sum::<f64>() / values.len() as f64);
        let evidence = self.evidence(value, value.and_then(|v| self.deficit(Cell::Value(v))));
        let direction = if bad_cells.len() == 2 {
            "in both directions".to_owned()
        } else {
            format!("from {source} to {destination}")
        };
        let unit = self.metric.unit;
        let what = match (value, self.reference) {
            (None, _) => "failed".to_owned(),
            (Some(v), Some(r)) => format!(
                "{} {unit}, {:.1}% worse than the median {} {unit}",
                fmt_value(v),
                evidence.deficit_pct.unwrap_or_default(),
                fmt_value(r)
            ),
            (Some(v), None) => format!("{} {unit}", fmt_value(v)),
        };
        let reason = format!(
            "{what} {direction}, while both nodes are fine with the others: the link or path \
             between them is suspect (threshold {:.1}%)",
            self.policy.tolerance * 100.0
        );
        let measurement = match value {
            Some(v) => Measurement::ok(entity.clone(), v, values),
            None => Measurement::failed(entity.clone(), "no usable measurement"),
        };
        EntityResult {
            entity,
            verdict: if failed {
                Verdict::Faulty
            } else {
                Verdict::Slow
            },
            lane: Lane::Network,
            reason,
            evidence,
            measurement,
        }
    }
}

fn value_of(cell: Cell) -> Option<f64> {
    match cell {
        Cell::Value(v) => Some(v),
        _ => None,
    }
}

fn breaks_limit(limit: Option<Limit>, value: f64) -> bool {
    match limit {
        Some(Limit::Floor(floor)) => value < floor,
        Some(Limit::Ceiling(ceiling)) => value > ceiling,
        None => false,
    }
}

/// The median in linear time (the order of `values` changes); `None` when empty. A
/// 4,096-node matrix has 16.8 million cells, too many to sort per node.
fn select_median(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let (_, &mut upper, _) = values.select_nth_unstable_by(n / 2, f64::total_cmp);
    if n % 2 == 1 {
        return Some(upper);
    }
    let lower = values[..n / 2].iter().copied().max_by(f64::total_cmp)?;
    Some((lower + upper) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::CheckName;

    const POLICY: JudgePolicy = JudgePolicy {
        tolerance: 0.05,
        limit: None,
    };

    fn nodes(n: usize) -> Vec<NodeId> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    fn named(results: &[EntityResult]) -> Vec<String> {
        results
            .iter()
            .filter(|r| is_finding(r.verdict))
            .map(|r| r.entity.to_string())
            .collect()
    }

    #[test]
    fn select_median_of_odd_even_and_empty() {
        assert_eq!(select_median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(select_median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(select_median(&mut []), None);
    }

    fn bw() -> &'static MetricSpec {
        &CheckName::AllReduce.spec().metric
    }

    /// A symmetric matrix: `value(i, j)` for every ordered pair.
    fn matrix(n: usize, value: impl Fn(usize, usize) -> f64) -> Matrix {
        let mut matrix = Matrix::new(nodes(n));
        for s in 0..n {
            for d in 0..n {
                if s != d {
                    matrix.set(s, d, value(s, d));
                }
            }
        }
        matrix
    }

    /// Deterministic ±3 % jitter, below the 5 % tolerance.
    fn jitter(s: usize, d: usize) -> f64 {
        1.0 + 0.03 * (((s * 7 + d * 13) % 11) as f64 / 5.0 - 1.0)
    }

    #[test]
    fn a_slow_row_and_column_is_a_node() {
        let m = matrix(6, |s, d| {
            100.0 * jitter(s, d) * if s == 2 || d == 2 { 0.85 } else { 1.0 }
        });
        let found = localize_matrix(&m, bw(), &POLICY, Lane::Network);
        assert_eq!(named(&found.nodes), ["n2"]);
        assert!(found.links.is_empty(), "{:?}", found.links);
        let node = found
            .nodes
            .iter()
            .find(|r| r.entity.node() == "n2")
            .unwrap();
        assert_eq!(node.verdict, Verdict::Slow);
        assert!(
            node.reason
                .starts_with("bad as a source and as a destination: 5 of 5"),
            "{}",
            node.reason
        );
        assert!(found.group_wide.is_none());
    }

    #[test]
    fn a_slow_column_alone_is_a_node_too() {
        let m = matrix(5, |_, d| if d == 4 { 70.0 } else { 100.0 });
        let found = localize_matrix(&m, bw(), &POLICY, Lane::Host);
        assert_eq!(named(&found.nodes), ["n4"]);
        let node = &found.nodes[4];
        assert_eq!(node.lane, Lane::Host);
        assert!(
            node.reason.starts_with("bad as a destination"),
            "{}",
            node.reason
        );
    }

    #[test]
    fn a_single_slow_cell_is_a_link() {
        let slow = |s: usize, d: usize| (s, d) == (1, 3) || (s, d) == (3, 1);
        let m = matrix(6, |s, d| {
            100.0 * jitter(s, d) * if slow(s, d) { 0.8 } else { 1.0 }
        });
        let found = localize_matrix(&m, bw(), &POLICY, Lane::Network);
        assert!(named(&found.nodes).is_empty());
        assert_eq!(named(&found.links), ["n1<->n3"]);
        assert!(
            found.links[0].reason.contains("in both directions"),
            "{}",
            found.links[0].reason
        );
    }

    #[test]
    fn a_lone_bad_direction_of_a_link_measured_both_ways_is_noise() {
        let m = matrix(6, |s, d| if (s, d) == (1, 3) { 80.0 } else { 100.0 });
        let found = localize_matrix(&m, bw(), &POLICY, Lane::Network);
        assert!(found.links.is_empty());
        assert!(named(&found.nodes).is_empty());
    }

    #[test]
    fn a_cell_measured_one_way_is_named_from_source_to_destination() {
        let mut m = Matrix::new(nodes(4));
        for s in 0..4 {
            for d in s + 1..4 {
                m.set(d, s, if (d, s) == (3, 0) { 60.0 } else { 100.0 });
            }
        }
        let found = localize_matrix(&m, bw(), &POLICY, Lane::Network);
        assert_eq!(named(&found.links), ["n3<->n0"]);
        assert!(
            found.links[0].reason.contains("from n3 to n0"),
            "{}",
            found.links[0].reason
        );
    }

    #[test]
    fn latency_matrices_flag_the_high_values() {
        let rtt = &CheckName::KernelLaunch.spec().metric; // any lower-is-better metric
        let m = matrix(5, |s, d| if s == 0 || d == 0 { 150.0 } else { 100.0 });
        let found = localize_matrix(&m, rtt, &POLICY, Lane::Network);
        assert_eq!(named(&found.nodes), ["n0"]);
    }

    #[test]
    fn an_unreachable_node_is_faulty_and_two_nodes_only_name_the_link() {
        let m = matrix(4, |s, d| if s == 1 || d == 1 { 0.0 } else { 100.0 });
        let found = localize_matrix(&m, bw(), &POLICY, Lane::Network);
        assert_eq!(named(&found.nodes), ["n1"]);
        assert_eq!(found.nodes[1].verdict, Verdict::Faulty);

        let two = localize_matrix(&matrix(2, |_, _| 0.0), bw(), &POLICY, Lane::Network);
        assert!(
            named(&two.nodes).is_empty(),
            "one cell per row cannot name a node"
        );
        assert_eq!(named(&two.links), ["n0<->n1"]);
        assert_eq!(two.links[0].verdict, Verdict::Faulty);
    }

    #[test]
    fn most_nodes_bad_is_group_wide() {
        let m = matrix(4, |s, d| {
            if s.min(d) == 0 && s.max(d) == 1 {
                100.0
            } else {
                0.0
            }
        });
        let found = localize_matrix(&m, bw(), &POLICY, Lane::Network);
        assert!(found.group_wide.is_some(), "{:?}", named(&found.nodes));
    }

    #[test]
    fn matrix_accessors_ignore_out_of_range_cells() {
        let mut m = Matrix::new(nodes(2));
        m.set(0, 5, 1.0);
        m.set(0, 1, 2.0);
        m.set(1, 1, 3.0);
        assert_eq!(m.get(0, 1), Some(2.0));
        assert_eq!(m.get(1, 1), None, "the diagonal is ignored");
        assert_eq!(m.get(7, 0), None);
        assert_eq!(m.nodes().len(), 2);
    }
}
