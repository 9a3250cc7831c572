//! Which nodes a failed run blames, and the circuit breaker that limits how many a
//! cluster loses: the one rule behind the Kubernetes taint (`gpuvet-kube`) and the
//! Slurm drain (`gpuvet-slurm`), as pure functions.
//!
//! - Only culprits are quarantined: nodes a finding of the host or network lane names
//!   (a GPU's node, or a node), and the node of the group's first error when its lane
//!   is one of those. A pair of nodes is a link suspect, not a node's fault, and is
//!   never quarantined; nor is a platform- or app-lane finding.
//! - Never the whole group: when every node of a group of two or more is named, the
//!   cause is something they share, and nothing is quarantined.
//! - The breaker's state is the cluster itself (a taint and its time, a drain and its
//!   reason's time), so it holds across the separate gpuvet of every node. A node is
//!   quarantined only while the ones quarantined within the window, with it, stay within
//!   `max_share` of all nodes (rounded down). A quarantine without a readable time
//!   counts as recent. The default, 50 % in 5 minutes, lets two of four nodes go and
//!   refuses the third. A refusal says when the breaker closes again: when enough of
//!   the quarantines it counts leave the window (never by itself while one without a
//!   time is counted).
//! - A culprit whose own report flags it as a repeat offender carries the flag, so
//!   that its quarantine holds it until it passes twice in a row.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use crate::config::QuarantinePolicy;
use crate::offenders::RepeatOffender;
use crate::results::{Entity, Lane, RunReport};
use crate::time::format_utc_ms;

/// A node to quarantine, with the finding that names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprit {
    pub node: String,
    pub lane: Lane,
    /// What named it: check, entity, verdict, reason.
    pub finding: serde_json::Value,
    /// Set when the node's own report flags it as a repeat offender.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat_offender: Option<RepeatOffender>,
}

/// The culprits of a report, or why there are none to quarantine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprits {
    pub nodes: Vec<Culprit>,
    /// Set when the report named every node of its group: nothing is quarantined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_group: Option<String>,
}

/// The nodes a report blames, one entry per node (its first finding).
pub fn culprits(report: &RunReport) -> Culprits {
    let mut nodes: Vec<Culprit> = Vec::new();
    let mut add = |node: &str, lane: Lane, finding: serde_json::Value| {
        if matches!(lane, Lane::Host | Lane::Network)
            && !node.is_empty()
            && !nodes.iter().any(|c| c.node == node)
        {
            nodes.push(Culprit {
                node: node.to_owned(),
                lane,
                finding,
                // Only a node's own store knows its history across jobs.
                repeat_offender: report.repeat_offender.filter(|_| node == report.node),
            });
        }
    };
    for (check, finding) in report.findings() {
        let node = match &finding.entity {
            Entity::Device { node, .. } | Entity::Node { node } => node,
            Entity::NodePair { .. } => continue,
        };
        add(
            node,
            finding.lane,
            json!({
                "check": check.name,
                "entity": finding.entity.to_string(),
                "verdict": finding.verdict,
                "reason": finding.reason,
            }),
        );
    }
    let group = report.group.as_ref();
    if let Some(first) = group.and_then(|g| g.first_error.as_ref()) {
        // A rank that never joined has no node name to quarantine.
        if group.is_some_and(|g| g.nodes.contains(&first.node)) {
            add(
                &first.node,
                first.lane,
                json!({ "first_error": first.kind, "reason": first.detail }),
            );
        }
    }
    let members = group.map_or(0, |g| g.nodes.len());
    if members >= 2 && nodes.len() >= members {
        let whole_group = format!(
            "every node of the group ({members}) is named, which points at something they \
             share (the network, the platform, the config) rather than at one node; none is \
             quarantined"
        );
        return Culprits {
            nodes: Vec::new(),
            whole_group: Some(whole_group),
        };
    }
    Culprits {
        nodes,
        whole_group: None,
    }
}

/// One node of the cluster as the breaker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub name: String,
    /// `None`: gpuvet has not quarantined it. `Some(None)`: it has, at a time that
    /// cannot be read (counts as recent).
    pub quarantined_at_ms: Option<Option<u64>>,
}

/// What the breaker decided for one culprit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Quarantine,
    /// gpuvet's quarantine is on it already.
    AlreadyQuarantined,
    /// The cluster has no node of that name (the group's node names are not the
    /// cluster's): nothing to quarantine, and no reason to hold the rebuild back.
    NotInCluster,
    /// The breaker refused, and why.
    Refused(String),
}

/// The breaker's decision for each culprit, in order, given every node of the cluster;
/// `policy_path` names the setting a refusal points at (`gpuvet.slurm.quarantine`).
pub fn decide(
    nodes: &[ClusterNode],
    culprits: &[Culprit],
    policy: &QuarantinePolicy,
    policy_path: &str,
    now_ms: u64,
) -> Vec<(Culprit, Decision)> {
    let window_ms = u64::try_from(policy.window.as_millis()).unwrap_or(u64::MAX);
    let total = nodes.len();
    let limit = (policy.max_share * total as f64).floor() as usize;
    // The time of each quarantine the window counts (`None`: one without a time).
    let mut recent: Vec<Option<u64>> = nodes
        .iter()
        .filter_map(|node| match node.quarantined_at_ms {
            Some(Some(at)) if now_ms.saturating_sub(at) >= window_ms => None,
            other => other,
        })
        .collect();
    let by_name: BTreeMap<&str, &ClusterNode> =
        nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    culprits
        .iter()
        .map(|culprit| {
            let decision = match by_name.get(culprit.node.as_str()) {
                None => Decision::NotInCluster,
                Some(node) if node.quarantined_at_ms.is_some() => Decision::AlreadyQuarantined,
                Some(_) if recent.len() + 1 > limit => {
                    let excess = recent.len() + 1 - limit;
                    let closes = match closes_at_ms(&recent, excess, window_ms, limit) {
                        Some(at) => format!("it closes again at `{}`", format_utc_ms(at)),
                        None if limit == 0 => format!(
                            "it never admits one in a cluster of {total} node(s) at this share"
                        ),
                        None => "it stays open until a quarantine without a readable time is \
                                 lifted (`gpuvet untaint`, `gpuvet undrain`)"
                            .to_owned(),
                    };
                    Decision::Refused(format!(
                        "circuit breaker: quarantining `{}` would make {} of {total} nodes \
                         quarantined within {}, over the limit of {} % ({limit} node(s)); \
                         {closes}; see `{policy_path}`",
                        culprit.node,
                        recent.len() + 1,
                        minutes(policy),
                        policy.max_share * 100.0,
                    ))
                }
                Some(_) => {
                    recent.push(Some(now_ms));
                    Decision::Quarantine
                }
            };
            (culprit.clone(), decision)
        })
        .collect()
}

/// When the breaker admits one more quarantine: once `excess` of the counted ones
/// (`times`, `None` for those without a time) have left the window. `None`: never by
/// itself.
fn closes_at_ms(times: &[Option<u64>], excess: usize, window_ms: u64, limit: usize) -> Option<u64> {
    if limit == 0 || excess == 0 {
        return None;
    }
    let mut known: Vec<u64> = times.iter().flatten().copied().collect();
    known.sort_unstable();
    known.get(excess - 1).map(|at| at.saturating_add(window_ms))
}

fn minutes(policy: &QuarantinePolicy) -> String {
    let minutes = policy.window.as_secs_f64() / 60.0;
    format!("{minutes} min")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn node(name: &str, at: Option<Option<u64>>) -> ClusterNode {
        ClusterNode {
            name: name.into(),
            quarantined_at_ms: at,
        }
    }

    fn culprit(node: &str) -> Culprit {
        Culprit {
            node: node.into(),
            lane: Lane::Host,
            finding: json!({ "check": "gemm_flops" }),
            repeat_offender: None,
        }
    }

    const NOW: u64 = 1_764_673_200_000;
    const MINUTE: u64 = 60_000;

    #[test]
    fn the_breaker_refuses_the_third_node_of_four_and_names_the_setting() {
        let nodes = [
            node("n1", Some(Some(NOW - 2 * MINUTE))),
            node("n2", Some(Some(NOW - MINUTE))),
            node("n3", None),
            node("n4", None),
        ];
        let policy = QuarantinePolicy::default();
        let decisions = decide(
            &nodes,
            &[culprit("n3")],
            &policy,
            "gpuvet.slurm.quarantine",
            NOW,
        );
        assert_eq!(
            decisions[0].1,
            Decision::Refused(
                "circuit breaker: quarantining `n3` would make 3 of 4 nodes quarantined \
                 within 5 min, over the limit of 50 % (2 node(s)); it closes again at \
                 `2025-12-02T11:03:00.000Z`; see `gpuvet.slurm.quarantine`"
                    .into()
            )
        );
    }

    #[test]
    fn the_breaker_counts_within_the_window_and_unknown_times_as_recent() {
        let policy = QuarantinePolicy {
            max_share: 0.5,
            window: Duration::from_secs(300),
        };
        let old = node("n1", Some(Some(NOW - 10 * MINUTE)));
        let nodes = [
            old,
            node("n2", Some(Some(NOW))),
            node("n3", None),
            node("n4", None),
        ];
        let decisions = decide(&nodes, &[culprit("n3"), culprit("n4")], &policy, "p", NOW);
        assert_eq!(decisions[0].1, Decision::Quarantine);
        assert!(matches!(decisions[1].1, Decision::Refused(_)));
        let nodes = [
            node("n1", Some(None)),
            node("n2", Some(None)),
            node("n3", None),
            node("n4", None),
        ];
        let decisions = decide(&nodes, &[culprit("n3")], &policy, "p", NOW);
        assert!(matches!(decisions[0].1, Decision::Refused(_)));
    }

    #[test]
    fn quarantined_and_unknown_nodes_are_said_so_and_not_counted_again() {
        let nodes = [
            node("n1", Some(Some(NOW))),
            node("n2", None),
            node("n3", None),
        ];
        let policy = QuarantinePolicy {
            max_share: 1.0,
            window: Duration::from_secs(300),
        };
        let decisions = decide(
            &nodes,
            &[culprit("n1"), culprit("elsewhere"), culprit("n2")],
            &policy,
            "p",
            NOW,
        );
        let got: Vec<&Decision> = decisions.iter().map(|(_, d)| d).collect();
        assert_eq!(
            got,
            [
                &Decision::AlreadyQuarantined,
                &Decision::NotInCluster,
                &Decision::Quarantine
            ]
        );
    }
}
