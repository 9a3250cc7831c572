//! The rebuild action in a cluster: quarantine the culprit nodes with a taint, behind
//! a circuit breaker, as pure decisions and patch bodies.
//!
//! - The culprits and the breaker's rule are `gpuvet_model::quarantine`'s, which the
//!   Slurm drain shares: only nodes a host- or network-lane finding names, never the
//!   whole group.
//! - The circuit breaker's state is the cluster itself, so it holds across the
//!   separate gpuvet of every pod: each quarantined node carries gpuvet's taint and the
//!   time it was set (annotation `gpuvet.io/quarantined-at`). Before tainting, gpuvet
//!   lists the nodes and counts those quarantined within the window (a gpuvet taint
//!   without a readable time counts as recent). A node is tainted only while the
//!   quarantined ones, with it, stay within `max_share` of all nodes (rounded down).
//!   The default, 50 % in 5 minutes, lets two of four nodes go and refuses the third.
//! - A culprit flagged as a repeat offender carries the flag on its quarantine
//!   (annotation `gpuvet.io/repeat-offender`), so that `gpuvet untaint` holds it until
//!   it passes twice in a row.
//! - `gpuvet untaint` lifts a quarantine only when the node's runs prove it healthy
//!   since ([`gpuvet_model::offenders::untaint_proof`]), or when forced.

use gpuvet_model::config::QuarantinePolicy;
use gpuvet_model::offenders::RepeatOffender;
use gpuvet_model::quarantine::{self, ClusterNode};
use gpuvet_model::results::Lane;
use k8s_openapi::api::core::v1::{Node, Taint};
use serde::Serialize;
use serde_json::json;

use crate::time::{parse_ms, rfc3339};

/// The taint's key; its value is the lane, its effect `NoSchedule`.
pub const TAINT_KEY: &str = "gpuvet.io/unhealthy";
pub const TAINT_EFFECT: &str = "NoSchedule";
/// Annotation on a quarantined node: the finding that put it there (JSON).
pub const FINDING_ANNOTATION: &str = "gpuvet.io/quarantine";
/// Annotation on a quarantined node: when (RFC 3339); the circuit breaker's clock.
pub const QUARANTINED_AT_ANNOTATION: &str = "gpuvet.io/quarantined-at";
/// Annotation on a quarantined repeat offender: its flag (JSON, `{"failed":3,"of_last":5}`).
pub const REPEAT_OFFENDER_ANNOTATION: &str = "gpuvet.io/repeat-offender";

pub use gpuvet_model::quarantine::{Culprit, Culprits, culprits};

/// What the breaker decided for one culprit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", content = "reason", rename_all = "snake_case")]
pub enum Decision {
    Taint,
    /// gpuvet's taint is on it already.
    AlreadyTainted,
    /// The cluster has no node of that name (the group's node names are not the
    /// cluster's, e.g. set with `--node`): nothing to taint, and no reason to hold the
    /// rebuild back.
    NotInCluster,
    /// The breaker refused, and why.
    Refused(String),
}

/// gpuvet's taint on a node, if it has one.
pub fn gpuvet_taint(node: &Node) -> Option<&Taint> {
    node.spec
        .as_ref()?
        .taints
        .as_ref()?
        .iter()
        .find(|t| t.key == TAINT_KEY)
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// When gpuvet quarantined `node` (Unix milliseconds), if it carries gpuvet's taint
/// and a readable time.
pub fn quarantined_at_ms(node: &Node) -> Option<u64> {
    gpuvet_taint(node)?;
    parse_ms(annotation(node, QUARANTINED_AT_ANNOTATION)?)
}

/// The repeat-offender flag its quarantine carries, if any.
pub fn repeat_offender_flag(node: &Node) -> Option<RepeatOffender> {
    gpuvet_taint(node)?;
    serde_json::from_str(annotation(node, REPEAT_OFFENDER_ANNOTATION)?).ok()
}

/// When gpuvet quarantined `node`: `None` without gpuvet's taint, `Some(None)` with it
/// but without a readable time.
fn quarantined_at(node: &Node) -> Option<Option<u64>> {
    gpuvet_taint(node)?;
    Some(quarantined_at_ms(node))
}

/// The breaker's decision for each culprit, in order, given every node of the cluster.
pub fn decide(
    nodes: &[Node],
    culprits: &[Culprit],
    policy: &QuarantinePolicy,
    now_ms: u64,
) -> Vec<(Culprit, Decision)> {
    let standing: Vec<ClusterNode> = nodes
        .iter()
        .filter_map(|n| {
            Some(ClusterNode {
                name: n.metadata.name.clone()?,
                quarantined_at_ms: quarantined_at(n),
            })
        })
        .collect();
    quarantine::decide(
        &standing,
        culprits,
        policy,
        "gpuvet.kubernetes.quarantine",
        now_ms,
    )
    .into_iter()
    .map(|(culprit, decision)| {
        let decision = match decision {
            quarantine::Decision::Quarantine => Decision::Taint,
            quarantine::Decision::AlreadyQuarantined => Decision::AlreadyTainted,
            quarantine::Decision::NotInCluster => Decision::NotInCluster,
            quarantine::Decision::Refused(why) => Decision::Refused(why),
        };
        (culprit, decision)
    })
    .collect()
}

/// gpuvet's taint for a lane.
pub fn taint(lane: Lane) -> Taint {
    Taint {
        key: TAINT_KEY.to_owned(),
        value: Some(lane.as_str().to_owned()),
        effect: TAINT_EFFECT.to_owned(),
        time_added: None,
    }
}

/// The node's taints without gpuvet's.
fn other_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != TAINT_KEY)
        .collect()
}

/// The merge patch that quarantines `node`: its other taints and gpuvet's (the list is
/// replaced whole), the finding and the time in annotations, and the node's
/// `resourceVersion`, so a concurrent change fails with 409 instead of being lost.
pub fn taint_patch(node: &Node, culprit: &Culprit, now_ms: u64) -> serde_json::Value {
    let mut taints = other_taints(node);
    taints.push(taint(culprit.lane));
    json!({
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "annotations": {
                FINDING_ANNOTATION: culprit.finding.to_string(),
                QUARANTINED_AT_ANNOTATION: rfc3339(now_ms),
                // `null` removes a flag left from an earlier quarantine.
                REPEAT_OFFENDER_ANNOTATION: culprit.repeat_offender
                    .map(|flag| serde_json::to_string(&flag).expect("a flag serializes")),
            }
        },
        "spec": { "taints": taints }
    })
}

/// The merge patch that lifts gpuvet's taint and its annotations; `None` when the node
/// has no gpuvet taint.
pub fn untaint_patch(node: &Node) -> Option<serde_json::Value> {
    gpuvet_taint(node)?;
    Some(json!({
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "annotations": {
                FINDING_ANNOTATION: null,
                QUARANTINED_AT_ANNOTATION: null,
                REPEAT_OFFENDER_ANNOTATION: null,
            }
        },
        "spec": { "taints": other_taints(node) }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::catalog::CheckName;
    use gpuvet_model::results::{
        CheckResult, CheckStatus, Entity, GroupIncident, GroupSummary, RunReport,
    };
    use std::time::Duration;

    pub(crate) fn node(name: &str, quarantined_at: Option<&str>) -> Node {
        let mut value = json!({
            "metadata": { "name": name, "resourceVersion": "7" },
            "spec": { "taints": [{ "key": "nvidia.com/gpu", "effect": "NoSchedule" }] }
        });
        if let Some(at) = quarantined_at {
            value["spec"]["taints"]
                .as_array_mut()
                .unwrap()
                .push(json!({ "key": TAINT_KEY, "value": "host", "effect": "NoSchedule" }));
            if !at.is_empty() {
                value["metadata"]["annotations"] = json!({ QUARANTINED_AT_ANNOTATION: at });
            }
        }
        serde_json::from_value(value).unwrap()
    }

    fn culprit(node: &str) -> Culprit {
        Culprit {
            node: node.into(),
            lane: Lane::Host,
            finding: json!({ "check": "gemm_flops" }),
            repeat_offender: None,
        }
    }

    const NOW: u64 = 1_764_673_200_000; // 2025-12-02T11:00:00Z

    #[test]
    fn the_breaker_refuses_the_third_node_of_four() {
        let nodes = [
            node("n1", Some("2025-12-02T10:58:00Z")),
            node("n2", Some("2025-12-02T10:59:00Z")),
            node("n3", None),
            node("n4", None),
        ];
        let decisions = decide(&nodes, &[culprit("n3")], &QuarantinePolicy::default(), NOW);
        let Decision::Refused(why) = &decisions[0].1 else {
            panic!("{decisions:?}");
        };
        assert_eq!(
            why,
            "circuit breaker: quarantining `n3` would make 3 of 4 nodes quarantined within \
             5 min, over the limit of 50 % (2 node(s)); it closes again at \
             `2025-12-02T11:03:00.000Z`; see `gpuvet.kubernetes.quarantine`"
        );
    }

    #[test]
    fn the_breaker_says_when_it_closes_again() {
        let policy = QuarantinePolicy::default();
        let refusal = |nodes: &[Node], culprits: &[Culprit]| -> String {
            match decide(nodes, culprits, &policy, NOW).pop().unwrap().1 {
                Decision::Refused(why) => why,
                other => panic!("{other:?}"),
            }
        };
        // Two of four may go: n1 (10:59) and n2 (10:57) are in the window, and a third
        // waits for the older to leave it: 10:57 + 5 min.
        let four = [
            node("n1", Some("2025-12-02T10:59:00Z")),
            node("n2", Some("2025-12-02T10:57:00Z")),
            node("n3", None),
            node("n4", None),
        ];
        let why = refusal(&four, &[culprit("n3")]);
        assert!(
            why.contains("it closes again at `2025-12-02T11:02:00.000Z`"),
            "{why}"
        );
        // Tainted in this same decision, at `NOW`: counted with its time.
        let fresh = [
            node("n3", None),
            node("n4", None),
            node("n5", None),
            node("n6", None),
        ];
        let why = refusal(&fresh, &[culprit("n3"), culprit("n4"), culprit("n5")]);
        assert!(
            why.contains("it closes again at `2025-12-02T11:05:00.000Z`"),
            "{why}"
        );
        // A quarantine without a time never leaves the window by itself.
        let untimed = [
            node("n1", Some("")),
            node("n2", Some("")),
            node("n3", None),
            node("n4", None),
        ];
        let why = refusal(&untimed, &[culprit("n3")]);
        assert!(
            why.contains(
                "it stays open until a quarantine without a readable time is lifted \
                 (`gpuvet untaint`, `gpuvet undrain`)"
            ),
            "{why}"
        );
        // A one-node cluster at 50 % admits none, ever.
        let why = refusal(&[node("n1", None)], &[culprit("n1")]);
        assert!(
            why.contains("it never admits one in a cluster of 1 node(s)"),
            "{why}"
        );
    }

    #[test]
    fn a_quarantine_keeps_its_time_and_repeat_offender_flag() {
        let flag = RepeatOffender {
            failed: 3,
            of_last: 5,
        };
        let flagged = Culprit {
            repeat_offender: Some(flag),
            ..culprit("n3")
        };
        let patch = taint_patch(&node("n3", None), &flagged, NOW);
        assert_eq!(
            patch["metadata"]["annotations"]["gpuvet.io/repeat-offender"],
            "{\"failed\":3,\"of_last\":5}"
        );
        // Read back from a node that carries the patch's annotations and the taint.
        let mut tainted = node("n3", Some("2025-12-02T11:00:00Z"));
        tainted.metadata.annotations.as_mut().unwrap().insert(
            REPEAT_OFFENDER_ANNOTATION.to_owned(),
            patch["metadata"]["annotations"]["gpuvet.io/repeat-offender"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        assert_eq!(quarantined_at_ms(&tainted), Some(NOW));
        assert_eq!(repeat_offender_flag(&tainted), Some(flag));
        // Without gpuvet's taint, the annotations mean nothing.
        tainted
            .spec
            .as_mut()
            .unwrap()
            .taints
            .as_mut()
            .unwrap()
            .pop();
        assert_eq!(quarantined_at_ms(&tainted), None);
        assert_eq!(repeat_offender_flag(&tainted), None);
        assert_eq!(quarantined_at_ms(&node("n4", Some(""))), None);
    }

    #[test]
    fn the_breaker_counts_within_the_window_only() {
        let policy = QuarantinePolicy::default();
        // n1 was quarantined 10 minutes ago: outside the window, so not counted.
        let nodes = [
            node("n1", Some("2025-12-02T10:50:00Z")),
            node("n2", Some("2025-12-02T10:59:00Z")),
            node("n3", None),
            node("n4", None),
        ];
        let decisions = decide(&nodes, &[culprit("n3"), culprit("n4")], &policy, NOW);
        assert_eq!(decisions[0].1, Decision::Taint);
        assert!(matches!(decisions[1].1, Decision::Refused(_)));
        // A gpuvet taint without a readable time counts as recent.
        let nodes = [
            node("n1", Some("")),
            node("n2", Some("")),
            node("n3", None),
            node("n4", None),
        ];
        assert!(matches!(
            decide(&nodes, &[culprit("n3")], &policy, NOW)[0].1,
            Decision::Refused(_)
        ));
        // A tainted culprit is not tainted again, and a node the cluster lacks is not
        // counted against the limit.
        let nodes = [
            node("n1", Some("")),
            node("n2", None),
            node("n3", None),
            node("n4", None),
        ];
        let decisions = decide(
            &nodes,
            &[culprit("n1"), culprit("gone"), culprit("n2")],
            &policy,
            NOW,
        );
        assert_eq!(decisions[0].1, Decision::AlreadyTainted);
        assert_eq!(decisions[1].1, Decision::NotInCluster);
        assert_eq!(decisions[2].1, Decision::Taint);
        // A one-node cluster never quarantines its only node at 50 %.
        let wider = QuarantinePolicy {
            max_share: 1.0,
            window: Duration::from_secs(60),
        };
        assert_eq!(
            decide(&[node("n1", None)], &[culprit("n1")], &wider, NOW)[0].1,
            Decision::Taint
        );
        assert!(matches!(
            decide(&[node("n1", None)], &[culprit("n1")], &policy, NOW)[0].1,
            Decision::Refused(_)
        ));
    }

    #[test]
    fn taint_and_untaint_keep_other_taints() {
        let patch = taint_patch(&node("n3", None), &culprit("n3"), NOW);
        assert_eq!(
            patch,
            json!({
                "metadata": {
                    "resourceVersion": "7",
                    "annotations": {
                        "gpuvet.io/quarantine": "{\"check\":\"gemm_flops\"}",
                        "gpuvet.io/quarantined-at": "2025-12-02T11:00:00Z",
                        "gpuvet.io/repeat-offender": null,
                    }
                },
                "spec": { "taints": [
                    { "key": "nvidia.com/gpu", "effect": "NoSchedule" },
                    { "key": "gpuvet.io/unhealthy", "value": "host", "effect": "NoSchedule" },
                ]}
            })
        );
        // Tainting again replaces gpuvet's taint rather than adding a second one.
        let again = taint_patch(
            &node("n3", Some("")),
            &Culprit {
                lane: Lane::Network,
                ..culprit("n3")
            },
            NOW,
        );
        assert_eq!(again["spec"]["taints"].as_array().unwrap().len(), 2);
        assert_eq!(again["spec"]["taints"][1]["value"], "network");
        let lifted = untaint_patch(&node("n3", Some(""))).unwrap();
        assert_eq!(
            lifted["spec"]["taints"],
            json!([{ "key": "nvidia.com/gpu", "effect": "NoSchedule" }])
        );
        assert!(lifted["metadata"]["annotations"]["gpuvet.io/quarantine"].is_null());
        assert!(lifted["metadata"]["annotations"]["gpuvet.io/repeat-offender"].is_null());
        assert_eq!(untaint_patch(&node("n3", None)), None);
    }

    fn report(findings: &[(Entity, Lane)], group: Option<GroupSummary>) -> RunReport {
        let entities = findings
            .iter()
            .map(|(entity, lane)| {
                let mut result: gpuvet_model::results::EntityResult =
                    serde_json::from_value(json!({
                        "entity": entity,
                        "verdict": "slow",
                        "lane": lane,
                        "reason": "20% below its peers",
                        "evidence": {},
                        "measurement": { "entity": entity, "value": 1.0 },
                    }))
                    .unwrap();
                result.lane = *lane;
                result
            })
            .collect();
        let check = CheckResult::judged(CheckName::GemmFlops, CheckStatus::Failed, entities);
        let mut report: RunReport = serde_json::from_value(json!({
            "gpuvet_version": "0", "job_id": "j", "attempt": 1, "node": "n1",
            "instance": "p", "backend": "sim", "devices": [], "started_at_ms": 0,
            "duration_secs": 1.0, "timeout_secs": 1.0, "outcome": "failed", "checks": [],
        }))
        .unwrap();
        report.checks = vec![check];
        report.group = group;
        report
    }

    fn group(nodes: &[&str]) -> GroupSummary {
        GroupSummary {
            size: None,
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            ..GroupSummary::default()
        }
    }

    #[test]
    fn culprits_are_the_nodes_of_host_and_network_findings() {
        let dev = |node: &str| Entity::Device {
            node: node.into(),
            index: 3,
        };
        let found = culprits(&report(
            &[
                (dev("n2"), Lane::Host),
                (
                    Entity::Device {
                        node: "n2".into(),
                        index: 5,
                    },
                    Lane::Host,
                ),
                (
                    Entity::NodePair {
                        a: "n1".into(),
                        b: "n3".into(),
                    },
                    Lane::Network,
                ),
                (Entity::Node { node: "n4".into() }, Lane::Platform),
                (Entity::Node { node: "n3".into() }, Lane::Network),
            ],
            Some(group(&["n1", "n2", "n3", "n4"])),
        ));
        let names: Vec<(&str, Lane)> = found
            .nodes
            .iter()
            .map(|c| (c.node.as_str(), c.lane))
            .collect();
        assert_eq!(names, [("n2", Lane::Host), ("n3", Lane::Network)]);
        assert_eq!(found.nodes[0].finding["entity"], "n2/dev3");
        assert_eq!(found.whole_group, None);
    }

    #[test]
    fn the_first_error_counts_and_the_whole_group_never_does() {
        let mut summary = group(&["n1", "n2", "n3"]);
        summary.first_error = Some(GroupIncident {
            rank: 1,
            node: "n2".into(),
            kind: gpuvet_model::results::IncidentKind::Crashed,
            lane: Lane::Host,
            time_ms: 0,
            detail: "agent exited".into(),
        });
        let found = culprits(&report(&[], Some(summary.clone())));
        assert_eq!(found.nodes.len(), 1);
        assert_eq!(found.nodes[0].finding["first_error"], "crashed");
        // A rank that never joined has no node to taint.
        summary.first_error.as_mut().unwrap().node = "rank 1".into();
        assert!(culprits(&report(&[], Some(summary))).nodes.is_empty());
        let whole = culprits(&report(
            &[
                (Entity::Node { node: "n1".into() }, Lane::Host),
                (Entity::Node { node: "n2".into() }, Lane::Host),
            ],
            Some(group(&["n1", "n2"])),
        ));
        assert!(whole.nodes.is_empty());
        assert!(
            whole
                .whole_group
                .unwrap()
                .contains("every node of the group (2)")
        );
        // One node alone is not a group: its own bad GPU is its fault.
        let alone = culprits(&report(
            &[(
                Entity::Device {
                    node: "n1".into(),
                    index: 0,
                },
                Lane::Host,
            )],
            None,
        ));
        assert_eq!(alone.nodes.len(), 1);
    }
}
