//! Whether the nodes of a group agree on their inventory.
//!
//! A group whose nodes differ (one node with 7 GPUs, another driver, a degraded NVLink)
//! fails in confusing ways once the app runs. [`check_consistency`] names the odd node
//! against the majority of the group, or against the values the config expects; these
//! findings belong to the `platform` lane (scheduling and node setup, not a broken part).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ExpectedInventory, NodeInventory};
use crate::results::{Entity, Lane};

/// A fact compared across nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attribute {
    GpuCount,
    Model,
    DriverVersion,
    CudaVersion,
    NcclVersion,
    NvlinkLayout,
}

impl Attribute {
    pub const ALL: [Attribute; 6] = [
        Attribute::GpuCount,
        Attribute::Model,
        Attribute::DriverVersion,
        Attribute::CudaVersion,
        Attribute::NcclVersion,
        Attribute::NvlinkLayout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Attribute::GpuCount => "gpu_count",
            Attribute::Model => "model",
            Attribute::DriverVersion => "driver_version",
            Attribute::CudaVersion => "cuda_version",
            Attribute::NcclVersion => "nccl_version",
            Attribute::NvlinkLayout => "nvlink_layout",
        }
    }

    /// How a person calls it in a sentence.
    pub fn label(self) -> &'static str {
        match self {
            Attribute::GpuCount => "GPU count",
            Attribute::Model => "GPU model",
            Attribute::DriverVersion => "driver version",
            Attribute::CudaVersion => "CUDA version",
            Attribute::NcclVersion => "NCCL version",
            Attribute::NvlinkLayout => "NVLink layout (active links per GPU)",
        }
    }

    /// The node's value; `None` when unknown.
    pub(crate) fn value_of(self, node: &NodeInventory) -> Option<String> {
        match self {
            Attribute::GpuCount => Some(node.gpus.len().to_string()),
            Attribute::Model => {
                let mut models: Vec<&str> = node.gpus.iter().map(|g| g.model.trim()).collect();
                models.sort_unstable();
                models.dedup();
                (!models.is_empty()).then(|| models.join(", "))
            }
            Attribute::DriverVersion => clean(&node.driver_version),
            Attribute::CudaVersion => clean(&node.cuda_version),
            Attribute::NcclVersion => clean(&node.nccl_version),
            Attribute::NvlinkLayout => clean(&node.nvlink_layout),
        }
    }

    pub(crate) fn expected(self, expected: &ExpectedInventory) -> Option<String> {
        match self {
            Attribute::GpuCount => expected.gpu_count.map(|n| n.to_string()),
            Attribute::Model => clean(&expected.model),
            Attribute::DriverVersion => clean(&expected.driver_version),
            Attribute::CudaVersion => clean(&expected.cuda_version),
            Attribute::NcclVersion => clean(&expected.nccl_version),
            Attribute::NvlinkLayout => clean(&expected.nvlink_layout),
        }
    }

    fn same(self, a: &str, b: &str) -> bool {
        match self {
            // `NVIDIA H200` and `nvidia h200` are the same model.
            Attribute::Model => a.eq_ignore_ascii_case(b),
            _ => a == b,
        }
    }
}

impl fmt::Display for Attribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn clean(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// What a node's value was compared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Basis {
    /// The config's expected value.
    Config,
    /// The value most nodes have: `agreeing` of `total` nodes.
    Majority { agreeing: usize, total: usize },
    /// The nodes disagree and no value has a majority, so no node can be blamed.
    NoMajority,
}

/// A node (or the group) whose inventory does not match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryFinding {
    pub attribute: Attribute,
    /// The odd node; `None` when the group disagrees without a majority.
    pub node: Option<String>,
    /// The node's value (`unknown` when it could not be read).
    pub value: Option<String>,
    /// The value it should have had.
    pub expected: Option<String>,
    pub basis: Basis,
    /// Every value seen, with the nodes that have it.
    pub values: BTreeMap<String, Vec<String>>,
    pub lane: Lane,
    pub reason: String,
}

impl InventoryFinding {
    /// The entity to report it under: the odd node, or `None` for the whole group.
    pub fn entity(&self) -> Option<Entity> {
        self.node
            .as_ref()
            .map(|node| Entity::Node { node: node.clone() })
    }
}

const UNKNOWN: &str = "unknown";

/// Compares the nodes' inventories with each other and with the expected values.
///
/// Where the config expects a value, every node that differs is named. Otherwise the
/// value held by more than half of the nodes is the reference and every other node is
/// named; without such a majority (two nodes that differ, or three different values)
/// one finding for the group lists the values and names no culprit.
pub fn check_consistency(
    nodes: &[NodeInventory],
    expected: &ExpectedInventory,
) -> Vec<InventoryFinding> {
    let mut findings = Vec::new();
    for attribute in Attribute::ALL {
        let known: Vec<(String, Option<String>)> = nodes
            .iter()
            .map(|n| (n.node.clone(), attribute.value_of(n)))
            .collect();
        if known.iter().all(|(_, v)| v.is_none()) && attribute.expected(expected).is_none() {
            continue;
        }
        let values: Vec<(String, String)> = known
            .into_iter()
            .map(|(node, v)| (node, v.unwrap_or_else(|| UNKNOWN.to_owned())))
            .collect();
        let groups = group_values(attribute, &values);

        if let Some(want) = attribute.expected(expected) {
            for (node, value) in &values {
                if !attribute.same(value, &want) {
                    findings.push(InventoryFinding {
                        attribute,
                        node: Some(node.clone()),
                        value: Some(value.clone()),
                        expected: Some(want.clone()),
                        basis: Basis::Config,
                        values: groups.clone(),
                        lane: Lane::Platform,
                        reason: format!(
                            "node `{node}` has {} `{value}` but the config expects `{want}`",
                            attribute.label()
                        ),
                    });
                }
            }
            continue;
        }

        if groups.len() < 2 {
            continue;
        }
        let total = values.len();
        let (top_value, top_nodes) = groups
            .iter()
            .max_by_key(|(_, nodes)| nodes.len())
            .expect("two groups");
        if top_nodes.len() * 2 > total {
            for (node, value) in &values {
                if !attribute.same(value, top_value) {
                    findings.push(InventoryFinding {
                        attribute,
                        node: Some(node.clone()),
                        value: Some(value.clone()),
                        expected: Some(top_value.clone()),
                        basis: Basis::Majority { agreeing: top_nodes.len(), total },
                        values: groups.clone(),
                        lane: Lane::Platform,
                        reason: format!(
                            "node `{node}` has {} `{value}`; {} of {total} nodes have `{top_value}`",
                            attribute.label(),
                            top_nodes.len()
                        ),
                    });
                }
            }
        } else {
            let listed: Vec<String> = groups
                .iter()
                .map(|(value, nodes)| {
                    let nodes: Vec<String> = nodes.iter().map(|n| format!("`{n}`")).collect();
                    format!("`{value}` on {}", nodes.join(", "))
                })
                .collect();
            findings.push(InventoryFinding {
                attribute,
                node: None,
                value: None,
                expected: None,
                basis: Basis::NoMajority,
                values: groups.clone(),
                lane: Lane::Platform,
                reason: format!(
                    "the nodes disagree on the {} and no value has a majority ({}); set the expected value in \
                     the config to tell which nodes are wrong",
                    attribute.label(),
                    listed.join("; ")
                ),
            });
        }
    }
    findings
}

/// Value → nodes, merging values that are the same for this attribute.
fn group_values(
    attribute: Attribute,
    values: &[(String, String)],
) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (node, value) in values {
        let key = groups
            .keys()
            .find(|k| attribute.same(k, value))
            .cloned()
            .unwrap_or_else(|| value.clone());
        groups.entry(key).or_default().push(node.clone());
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::GpuInventory;

    fn node(name: &str, gpus: usize, driver: &str) -> NodeInventory {
        NodeInventory {
            node: name.to_owned(),
            gpus: (0..gpus)
                .map(|i| GpuInventory {
                    model: "NVIDIA H200".to_owned(),
                    uuid: Some(format!("GPU-{name}-{i}")),
                    pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + i)),
                    memory_bytes: Some(150_754_820_096),
                })
                .collect(),
            driver_version: Some(driver.to_owned()),
            cuda_version: Some("13.0".to_owned()),
            nccl_version: Some("2.27.7".to_owned()),
            nvlink_layout: Some(vec!["18"; gpus].join(",")),
        }
    }

    fn group(n: usize) -> Vec<NodeInventory> {
        (0..n)
            .map(|i| node(&format!("n{i}"), 8, "580.82.07"))
            .collect()
    }

    #[test]
    fn identical_nodes_have_no_finding() {
        assert!(check_consistency(&group(4), &ExpectedInventory::default()).is_empty());
        assert!(check_consistency(&group(1), &ExpectedInventory::default()).is_empty());
        assert!(check_consistency(&[], &ExpectedInventory::default()).is_empty());
    }

    #[test]
    fn a_node_with_seven_gpus_is_named() {
        let mut nodes = group(4);
        nodes[2] = node("n2", 7, "580.82.07");
        let findings = check_consistency(&nodes, &ExpectedInventory::default());
        let count: Vec<_> = findings
            .iter()
            .filter(|f| f.attribute == Attribute::GpuCount)
            .collect();
        assert_eq!(count.len(), 1, "{findings:#?}");
        let f = count[0];
        assert_eq!(f.node.as_deref(), Some("n2"));
        assert_eq!(f.value.as_deref(), Some("7"));
        assert_eq!(f.expected.as_deref(), Some("8"));
        assert_eq!(
            f.basis,
            Basis::Majority {
                agreeing: 3,
                total: 4
            }
        );
        assert_eq!(f.lane, Lane::Platform);
        assert_eq!(
            f.reason,
            "node `n2` has GPU count `7`; 3 of 4 nodes have `8`"
        );
        assert_eq!(f.entity(), Some(Entity::Node { node: "n2".into() }));
        // Its NVLink layout differs too (seven entries), and only that node is named.
        let layout: Vec<_> = findings
            .iter()
            .filter(|f| f.attribute == Attribute::NvlinkLayout)
            .collect();
        assert_eq!(layout.len(), 1);
        assert_eq!(layout[0].node.as_deref(), Some("n2"));
        assert!(
            findings.iter().all(|f| f.node.as_deref() == Some("n2")),
            "{findings:#?}"
        );
    }

    #[test]
    fn a_driver_mismatch_names_the_odd_node() {
        let mut nodes = group(3);
        nodes[0].driver_version = Some("575.57.08".to_owned());
        let findings = check_consistency(&nodes, &ExpectedInventory::default());
        assert_eq!(findings.len(), 1, "{findings:#?}");
        assert_eq!(findings[0].attribute, Attribute::DriverVersion);
        assert_eq!(findings[0].node.as_deref(), Some("n0"));
        assert_eq!(
            findings[0].reason,
            "node `n0` has driver version `575.57.08`; 2 of 3 nodes have `580.82.07`"
        );
        assert_eq!(findings[0].values.len(), 2);
    }

    #[test]
    fn expected_values_from_config_name_every_node_that_differs() {
        let nodes = group(2);
        let expected = ExpectedInventory {
            nccl_version: Some("2.28.3".to_owned()),
            gpu_count: Some(8),
            model: Some("nvidia h200".to_owned()),
            ..ExpectedInventory::default()
        };
        let findings = check_consistency(&nodes, &expected);
        assert_eq!(findings.len(), 2, "{findings:#?}");
        for (f, name) in findings.iter().zip(["n0", "n1"]) {
            assert_eq!(f.attribute, Attribute::NcclVersion);
            assert_eq!(f.basis, Basis::Config);
            assert_eq!(f.node.as_deref(), Some(name));
            assert_eq!(
                f.reason,
                format!("node `{name}` has NCCL version `2.27.7` but the config expects `2.28.3`")
            );
        }
    }

    #[test]
    fn a_two_node_tie_blames_nobody() {
        let mut nodes = group(2);
        nodes[1].cuda_version = Some("12.8".to_owned());
        let findings = check_consistency(&nodes, &ExpectedInventory::default());
        assert_eq!(findings.len(), 1, "{findings:#?}");
        let f = &findings[0];
        assert_eq!(f.attribute, Attribute::CudaVersion);
        assert_eq!(f.node, None);
        assert_eq!(f.entity(), None);
        assert_eq!(f.basis, Basis::NoMajority);
        assert!(
            f.reason.contains("`12.8` on `n1`") && f.reason.contains("`13.0` on `n0`"),
            "{}",
            f.reason
        );
        assert!(f.reason.contains("no value has a majority"), "{}", f.reason);
        // Half against half in a larger group is no majority either.
        let mut four = group(4);
        four[0].cuda_version = Some("12.8".to_owned());
        four[1].cuda_version = Some("12.8".to_owned());
        let findings = check_consistency(&four, &ExpectedInventory::default());
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].basis, Basis::NoMajority);
    }

    #[test]
    fn an_unknown_value_is_odd_when_others_know_it() {
        let mut nodes = group(3);
        nodes[1].nccl_version = None;
        let findings = check_consistency(&nodes, &ExpectedInventory::default());
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].node.as_deref(), Some("n1"));
        assert_eq!(findings[0].value.as_deref(), Some("unknown"));
        // Unknown everywhere is not a mismatch.
        for n in &mut nodes {
            n.nvlink_layout = None;
            n.nccl_version = None;
        }
        assert!(check_consistency(&nodes, &ExpectedInventory::default()).is_empty());
    }

    #[test]
    fn a_node_with_mixed_models_stands_out() {
        let mut nodes = group(3);
        nodes[2].gpus[5].model = "NVIDIA H100 80GB HBM3".to_owned();
        let findings = check_consistency(&nodes, &ExpectedInventory::default());
        assert_eq!(findings.len(), 1, "{findings:#?}");
        assert_eq!(
            findings[0].value.as_deref(),
            Some("NVIDIA H100 80GB HBM3, NVIDIA H200")
        );
    }

    #[test]
    fn inventories_round_trip_through_json_and_reject_unknown_expected_keys() {
        let inv = node("n0", 2, "580.82.07");
        let json = serde_json::to_string(&inv).unwrap();
        assert_eq!(serde_json::from_str::<NodeInventory>(&json).unwrap(), inv);
        let expected: ExpectedInventory = serde_json::from_str(r#"{"gpu_count": 8}"#).unwrap();
        assert_eq!(expected.gpu_count, Some(8));
        assert!(serde_json::from_str::<ExpectedInventory>(r#"{"gpus": 8}"#).is_err());
    }
}
