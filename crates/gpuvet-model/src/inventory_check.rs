//! The `inventory_consistency` check's result: every node's inventory judged by
//! [`check_consistency`] against the others and the config, as one check result that
//! names each odd node in the `platform` lane.
//!
//! A group whose nodes differ (one node with 7 GPUs, an older driver) starts and then
//! fails in ways that look like the app's fault; this check names the node before the
//! app starts. It runs wherever the runner or the coordinator knows the nodes' devices;
//! a single node is compared with the config only.

use std::collections::BTreeMap;

use crate::catalog::CheckName;
use crate::inventory::{
    Attribute, Basis, ExpectedInventory, InventoryFinding, NodeInventory, check_consistency,
};
use crate::results::{
    CheckResult, CheckStatus, Entity, EntityResult, Evidence, Lane, Measurement, Verdict,
};

const NAME: CheckName = CheckName::InventoryConsistency;

/// Judges the nodes' inventories: one entity per node, whose value is the number of
/// facts that do not match, and a check-wide reason when the nodes disagree with no
/// majority to tell which are wrong.
pub fn judge_inventories(nodes: &[NodeInventory], expected: &ExpectedInventory) -> CheckResult {
    if nodes.len() < 2 && expected.is_empty() {
        return CheckResult::without_work(
            NAME,
            CheckStatus::Skipped,
            "one node and no `gpuvet.expected_inventory` in the config: nothing to compare it with",
        );
    }
    let findings = check_consistency(nodes, expected);
    let entities: Vec<EntityResult> = nodes
        .iter()
        .map(|node| node_result(node, &findings, expected))
        .collect();
    let group_wide: Vec<&str> = findings
        .iter()
        .filter(|f| f.node.is_none())
        .map(|f| f.reason.as_str())
        .collect();
    let status = if findings.is_empty() {
        CheckStatus::Passed
    } else {
        CheckStatus::Failed
    };
    let mut result = CheckResult::judged(NAME, status, entities);
    if !group_wide.is_empty() {
        result.reason = Some(group_wide.join("; "));
    }
    result.params = params(nodes, expected);
    result
}

fn node_result(
    node: &NodeInventory,
    findings: &[InventoryFinding],
    expected: &ExpectedInventory,
) -> EntityResult {
    let entity = Entity::Node {
        node: node.node.clone(),
    };
    let own: Vec<&InventoryFinding> = findings
        .iter()
        .filter(|f| f.node.as_deref() == Some(node.node.as_str()))
        .collect();
    let mismatches = own.len() as f64;
    let (verdict, reason) = if own.is_empty() {
        let against = if expected.is_empty() {
            "the group"
        } else {
            "the group and the config"
        };
        (Verdict::Ok, format!("matches {against}"))
    } else {
        let reasons: Vec<&str> = own.iter().map(|f| f.reason.as_str()).collect();
        (Verdict::Faulty, reasons.join("; "))
    };
    let baseline = own.iter().any(|f| f.basis == Basis::Config).then_some(0.0);
    EntityResult {
        entity: entity.clone(),
        verdict,
        lane: Lane::Platform,
        reason,
        evidence: Evidence {
            value: Some(mismatches),
            baseline,
            ..Evidence::default()
        },
        measurement: Measurement::ok(entity, mismatches, Vec::new()),
    }
}

/// What was compared: each fact as the nodes have it (`8` when all agree, else every
/// value with its nodes), and the config's expected values.
fn params(nodes: &[NodeInventory], expected: &ExpectedInventory) -> BTreeMap<String, String> {
    let mut params = BTreeMap::new();
    params.insert("nodes".to_owned(), nodes.len().to_string());
    for attribute in Attribute::ALL {
        let mut by_value: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for node in nodes {
            if let Some(value) = attribute.value_of(node) {
                by_value.entry(value).or_default().push(&node.node);
            }
        }
        let shown = match by_value.len() {
            0 => continue,
            1 => by_value.into_keys().next().unwrap_or_default(),
            _ => by_value
                .iter()
                .map(|(value, nodes)| format!("{value} on {}", nodes.join(", ")))
                .collect::<Vec<_>>()
                .join("; "),
        };
        params.insert(attribute.as_str().to_owned(), shown);
        if let Some(want) = attribute.expected(expected) {
            params.insert(format!("expected.{attribute}"), want);
        }
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::GpuInventory;

    fn node(name: &str, gpus: usize, driver: &str) -> NodeInventory {
        NodeInventory {
            node: name.to_owned(),
            gpus: vec![
                GpuInventory {
                    model: "NVIDIA H200".to_owned(),
                    uuid: None,
                    pci_bus_id: None,
                    memory_bytes: None,
                };
                gpus
            ],
            driver_version: Some(driver.to_owned()),
            cuda_version: None,
            nccl_version: None,
            nvlink_layout: None,
        }
    }

    #[test]
    fn a_node_with_fewer_gpus_is_named_faulty_in_the_platform_lane() {
        let nodes = [
            node("n0", 8, "580.1"),
            node("n1", 7, "580.1"),
            node("n2", 8, "580.1"),
        ];
        let result = judge_inventories(&nodes, &ExpectedInventory::default());
        assert_eq!(result.status, CheckStatus::Failed);
        let odd: Vec<&EntityResult> = result.findings().collect();
        assert_eq!(odd.len(), 1);
        assert_eq!(odd[0].entity, Entity::Node { node: "n1".into() });
        assert_eq!(odd[0].verdict, Verdict::Faulty);
        assert_eq!(odd[0].lane, Lane::Platform);
        assert_eq!(odd[0].measurement.value, Some(1.0));
        assert!(odd[0].reason.contains("GPU count `7`"), "{}", odd[0].reason);
        assert_eq!(result.params["gpu_count"], "7 on n1; 8 on n0, n2");
        assert_eq!(result.params["driver_version"], "580.1");
        assert_eq!(result.reason, None);
    }

    #[test]
    fn agreeing_nodes_pass_and_show_what_they_agree_on() {
        let nodes = [node("n0", 8, "580.1"), node("n1", 8, "580.1")];
        let result = judge_inventories(&nodes, &ExpectedInventory::default());
        assert_eq!(result.status, CheckStatus::Passed);
        assert!(result.entities.iter().all(|e| e.verdict == Verdict::Ok));
        assert_eq!(result.entities[0].reason, "matches the group");
        assert_eq!(result.params["gpu_count"], "8");
        assert_eq!(result.params["model"], "NVIDIA H200");
        assert!(!result.params.contains_key("cuda_version"));
    }

    #[test]
    fn one_node_is_compared_with_the_config() {
        let expected = ExpectedInventory {
            driver_version: Some("580.2".to_owned()),
            ..ExpectedInventory::default()
        };
        let result = judge_inventories(&[node("n0", 8, "580.1")], &expected);
        assert_eq!(result.status, CheckStatus::Failed);
        let entity = &result.entities[0];
        assert_eq!(entity.verdict, Verdict::Faulty);
        assert_eq!(entity.evidence.baseline, Some(0.0));
        assert!(
            entity.reason.contains("config expects `580.2`"),
            "{}",
            entity.reason
        );
        assert_eq!(result.params["expected.driver_version"], "580.2");
    }

    #[test]
    fn one_node_without_expectations_is_skipped() {
        let result = judge_inventories(&[node("n0", 8, "580.1")], &ExpectedInventory::default());
        assert_eq!(result.status, CheckStatus::Skipped);
        assert!(result.reason.unwrap().contains("nothing to compare"));
    }

    #[test]
    fn two_nodes_that_differ_fail_the_check_without_blaming_either() {
        let nodes = [node("n0", 8, "580.1"), node("n1", 8, "575.0")];
        let result = judge_inventories(&nodes, &ExpectedInventory::default());
        assert_eq!(result.status, CheckStatus::Failed);
        assert_eq!(result.findings().count(), 0);
        let reason = result.reason.unwrap();
        assert!(reason.contains("no value has a majority"), "{reason}");
    }
}
