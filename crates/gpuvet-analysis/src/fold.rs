//! Findings that say the same thing, said once: the eight GPUs of a slow node are one
//! line with a range (`gemm_flops: local-2/dev[0-7] slow: 420 TFLOPS, 40 % below the
//! peer median 700 TFLOPS (threshold 5 %)`), and a node that fails most of the checks
//! that judged it is summed up once (`local-2: slow in 10 of 13 checks, all 8 GPUs and
//! every link`) instead of once per check. The terminal, the HTML report, the pages,
//! the bundle's README and events fold with this one function, so the line count does
//! not grow with the number of GPUs; `--verbose` and `--json` keep every entity.

use std::collections::{BTreeMap, BTreeSet};

use gpuvet_model::catalog::{CheckName, Direction, Scope};
use gpuvet_model::diagnosis::quantity_number;
use gpuvet_model::node_list::fold_node_names;
use gpuvet_model::results::{
    CheckResult, CheckStatus, Entity, EntityResult, Lane, RunReport, Verdict,
};

/// The most entities one folded line lists before it counts the rest.
const MAX_ENTITY_PARTS: usize = 6;

/// Findings of one check with the same verdict on one node (or one pair of nodes).
#[derive(Debug, Clone, PartialEq)]
pub struct FoldedFinding {
    pub check: CheckName,
    pub verdict: Verdict,
    pub lane: Lane,
    /// The node the entities share (a pair's text for a pair).
    pub node: String,
    /// The entities folded: `local-2/dev[0-7]`, `local-2`, `local-1<->local-2`.
    pub entities: String,
    pub count: usize,
    /// What was measured, said once: `420 TFLOPS, 40 % below the peer median 700
    /// TFLOPS (threshold 5 %)`, with ranges where the entities differ.
    pub what: String,
}

impl FoldedFinding {
    /// `gemm_flops: local-2/dev[0-7] slow: 420 TFLOPS, 40 % below …`
    pub fn line(&self) -> String {
        format!(
            "{}: {} {}: {}",
            self.check,
            self.entities,
            verdict_word(self.verdict),
            self.what
        )
    }

    /// `local-2/dev[0-7] is slow in gemm_flops`
    pub fn headline(&self) -> String {
        format!(
            "{} {} {} in {}",
            self.entities,
            if self.count > 1 { "are" } else { "is" },
            verdict_word(self.verdict),
            self.check
        )
    }
}

/// A node that failed most of the checks that judged it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSummary {
    pub node: String,
    /// `faulty` when any of its findings is, else `slow`.
    pub verdict: Verdict,
    /// The lane of its first finding, in check order.
    pub lane: Lane,
    /// The first check it failed.
    pub first_check: CheckName,
    pub failed_checks: usize,
    /// Checks that ran and measured something of this node.
    pub judged_checks: usize,
    /// Its devices that a device check found slow or faulty, of those measured.
    pub bad_devices: usize,
    pub devices: usize,
    /// `every link` when a check between nodes found the node itself at fault
    /// (slow with every partner), else `k of m links` from its pairs' findings.
    pub links: Option<String>,
    /// What the report calls a device: `GPUs`, or `devices` on the cpu backend.
    pub device_word: &'static str,
}

impl NodeSummary {
    /// `slow in 10 of 13 checks, all 8 GPUs and every link`
    pub fn sentence(&self) -> String {
        let mut parts = Vec::new();
        if self.devices > 0 && self.bad_devices > 0 {
            parts.push(if self.bad_devices == self.devices {
                format!("all {} {}", self.devices, self.device_word)
            } else {
                format!(
                    "{} of {} {}",
                    self.bad_devices, self.devices, self.device_word
                )
            });
        }
        if let Some(links) = &self.links {
            parts.push(links.clone());
        }
        let mut text = format!(
            "{} in {} of {} checks",
            verdict_word(self.verdict),
            self.failed_checks,
            self.judged_checks
        );
        if !parts.is_empty() {
            text.push_str(", ");
            text.push_str(&parts.join(" and "));
        }
        text
    }

    /// `local-2: slow in 10 of 13 checks, all 8 GPUs and every link`
    pub fn line(&self) -> String {
        format!("{}: {}", self.node, self.sentence())
    }
}

/// A report's findings folded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Folded {
    /// Nodes summed up once, in the order of their first finding.
    pub nodes: Vec<NodeSummary>,
    /// The findings no node summary covers, in check order.
    pub findings: Vec<FoldedFinding>,
}

impl Folded {
    /// One line per summed-up node, then one per folded finding.
    pub fn lines(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(NodeSummary::line)
            .chain(self.findings.iter().map(FoldedFinding::line))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.findings.is_empty()
    }

    /// The summary of `node`, when it has one.
    pub fn node(&self, node: &str) -> Option<&NodeSummary> {
        self.nodes.iter().find(|n| n.node == node)
    }
}

/// `slow` or `faulty`.
pub fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Faulty => "faulty",
        Verdict::Slow => "slow",
        Verdict::Ok => "ok",
        Verdict::Skipped => "skipped",
        Verdict::Degraded => "degraded",
    }
}

/// The node (or pair text) a finding's entity is folded under.
fn fold_key(entity: &Entity) -> String {
    match entity {
        Entity::Device { node, .. } | Entity::Node { node } => node.clone(),
        Entity::NodePair { .. } => entity.to_string(),
    }
}

/// Whether `entity` measured something of `node` (its, or a pair it is in).
pub fn touches(entity: &Entity, node: &str) -> bool {
    match entity {
        Entity::Device { node: n, .. } | Entity::Node { node: n } => n == node,
        Entity::NodePair { a, b } => a == node || b == node,
    }
}

/// Folds every finding of `report`.
pub fn fold(report: &RunReport) -> Folded {
    let findings = fold_findings(&report.checks);
    let device_word = if report.backend == "cpu" {
        "devices"
    } else {
        "GPUs"
    };
    let mut culprits: Vec<&str> = Vec::new();
    for (_, finding) in report.findings() {
        for node in nodes_of(&finding.entity) {
            if !culprits.contains(&node) {
                culprits.push(node);
            }
        }
    }
    let nodes: Vec<NodeSummary> = culprits
        .into_iter()
        .filter_map(|node| summarize(report, node, device_word))
        .collect();
    let covered = |f: &FoldedFinding| {
        nodes.iter().any(|n| n.node == f.node)
            || nodes
                .iter()
                .any(|n| f.node.split("<->").any(|side| side == n.node))
    };
    let findings = findings.into_iter().filter(|f| !covered(f)).collect();
    Folded { nodes, findings }
}

fn nodes_of(entity: &Entity) -> Vec<&str> {
    match entity {
        Entity::Device { node, .. } | Entity::Node { node } => vec![node.as_str()],
        Entity::NodePair { a, b } => vec![a.as_str(), b.as_str()],
    }
}

/// Whether a check's findings on `node` blame the node itself: a finding on it or on
/// its GPUs, or slow links to two partners or more. One slow link blames the link.
fn implicates(mine: &[&EntityResult], node: &str) -> bool {
    let mut partners = BTreeSet::new();
    for finding in mine {
        match &finding.entity {
            Entity::NodePair { a, b } => {
                partners.insert(if a == node { b } else { a });
            }
            _ => return true,
        }
    }
    partners.len() >= 2
}

/// The summary of `node` when it failed at least two checks and more than half of
/// those that judged it.
fn summarize(report: &RunReport, node: &str, device_word: &'static str) -> Option<NodeSummary> {
    let judged: Vec<&CheckResult> = report
        .checks
        .iter()
        .filter(|c| matches!(c.status, CheckStatus::Passed | CheckStatus::Failed))
        .filter(|c| c.entities.iter().any(|e| touches(&e.entity, node)))
        .collect();
    let failed: Vec<(&CheckResult, Vec<&EntityResult>)> = judged
        .iter()
        .map(|c| {
            let mine: Vec<&EntityResult> =
                c.findings().filter(|f| touches(&f.entity, node)).collect();
            (*c, mine)
        })
        .filter(|(_, mine)| implicates(mine, node))
        .collect();
    if failed.len() < 2 || failed.len() * 2 <= judged.len() {
        return None;
    }
    let (first_check, first_findings) = &failed[0];
    let all_findings = failed.iter().flat_map(|(_, mine)| mine.iter());
    let verdict = if all_findings.clone().any(|f| f.verdict == Verdict::Faulty) {
        Verdict::Faulty
    } else {
        Verdict::Slow
    };
    let mut devices = BTreeSet::new();
    let mut bad_devices = BTreeSet::new();
    let mut partners = BTreeSet::new();
    let mut bad_partners = BTreeSet::new();
    let mut every_link = false;
    let mut node_findings = false;
    for check in &judged {
        let between_nodes = matches!(
            check.name.spec().scope,
            Scope::NodePairs | Scope::AllNodePairs | Scope::WholeGroup
        );
        for result in check.entities.iter().filter(|e| touches(&e.entity, node)) {
            let bad = matches!(result.verdict, Verdict::Slow | Verdict::Faulty);
            match &result.entity {
                Entity::Device { index, .. } => {
                    devices.insert(*index);
                    if bad {
                        bad_devices.insert(*index);
                    }
                }
                Entity::Node { .. } => {
                    every_link |= bad && between_nodes;
                    node_findings |= bad;
                }
                Entity::NodePair { a, b } => {
                    let partner = if a == node { b } else { a };
                    partners.insert(partner.clone());
                    if bad {
                        bad_partners.insert(partner.clone());
                    }
                }
            }
        }
    }
    // A few bad GPUs are theirs, not their node's: the node as a whole is blamed when
    // most of its GPUs are, or a check of the node itself or of its links is.
    let node_wide = every_link || !bad_partners.is_empty() || node_findings;
    if !node_wide && bad_devices.len() * 2 <= devices.len() {
        return None;
    }
    let links = if every_link {
        Some("every link".to_owned())
    } else if !bad_partners.is_empty() {
        Some(format!(
            "{} of {} links",
            bad_partners.len(),
            partners.len()
        ))
    } else {
        None
    };
    Some(NodeSummary {
        node: node.to_owned(),
        verdict,
        lane: first_findings[0].lane,
        first_check: first_check.name,
        failed_checks: failed.len(),
        judged_checks: judged.len(),
        bad_devices: bad_devices.len(),
        devices: devices.len(),
        links,
        device_word,
    })
}

/// Each check's findings folded by verdict and node, in check order, then in the order
/// each node's first finding came.
pub fn fold_findings(checks: &[CheckResult]) -> Vec<FoldedFinding> {
    let mut out = Vec::new();
    for check in checks {
        let mut groups: Vec<((Verdict, String), Vec<&EntityResult>)> = Vec::new();
        for finding in check.findings() {
            let key = (finding.verdict, fold_key(&finding.entity));
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(finding),
                None => groups.push((key, vec![finding])),
            }
        }
        for ((verdict, node), members) in groups {
            let names: Vec<String> = members.iter().map(|f| f.entity.to_string()).collect();
            out.push(FoldedFinding {
                check: check.name,
                verdict,
                lane: members[0].lane,
                node,
                entities: fold_node_names(&names, MAX_ENTITY_PARTS),
                count: members.len(),
                what: what_was_measured(check, &members),
            });
        }
    }
    out
}

/// The measurement said once for all `members`: from their evidence when they were
/// compared with peers or a baseline, else their reason (said once when they share it).
fn what_was_measured(check: &CheckResult, members: &[&EntityResult]) -> String {
    let unit = check.metric.unit.as_str();
    let worse = match check.metric.direction {
        Direction::HigherIsBetter => "below",
        Direction::LowerIsBetter => "above",
    };
    let evidence: Option<Vec<(f64, f64, f64, f64)>> = members
        .iter()
        .map(|m| {
            let e = &m.evidence;
            Some((e.value?, e.deficit_pct?, e.peer_median?, e.threshold_pct?))
        })
        .collect();
    if let Some(evidence) = evidence.filter(|_| members.iter().all(|m| m.verdict == Verdict::Slow))
    {
        let values = Span::of(evidence.iter().map(|e| e.0));
        let deficits = Span::of(evidence.iter().map(|e| e.1));
        let medians = Span::of(evidence.iter().map(|e| e.2));
        let thresholds = Span::of(evidence.iter().map(|e| e.3));
        return format!(
            "{}, {} {worse} the peer median {} (threshold {})",
            values.show(unit),
            deficits.show("%"),
            medians.show(unit),
            thresholds.show("%"),
        );
    }
    let reasons: BTreeMap<&str, usize> = members.iter().fold(BTreeMap::new(), |mut seen, m| {
        *seen.entry(m.reason.as_str()).or_default() += 1;
        seen
    });
    let first = members[0].reason.as_str();
    if reasons.len() == 1 {
        first.to_owned()
    } else {
        format!("{first} (and {} other reasons)", reasons.len() - 1)
    }
}

/// The lowest and highest of some numbers.
struct Span {
    low: f64,
    high: f64,
}

impl Span {
    fn of(values: impl Iterator<Item = f64>) -> Span {
        values.fold(
            Span {
                low: f64::INFINITY,
                high: f64::NEG_INFINITY,
            },
            |span, v| Span {
                low: span.low.min(v),
                high: span.high.max(v),
            },
        )
    }

    /// `420 TFLOPS`, or `412–420 TFLOPS` when the ends differ as people read them.
    fn show(&self, unit: &str) -> String {
        let (low, high) = (
            quantity_number(self.low, unit),
            quantity_number(self.high, unit),
        );
        let numbers = if low == high {
            low
        } else {
            format!("{low}–{high}")
        };
        if unit.is_empty() {
            numbers
        } else {
            format!("{numbers} {unit}")
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
