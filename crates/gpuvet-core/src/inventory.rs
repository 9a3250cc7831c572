//! What each node has (GPUs, driver, CUDA, NCCL, NVLink), whether the nodes of a group
//! agree on it, and what a GPU's health readings say.
//!
//! A group whose nodes differ (one node with 7 GPUs, another driver, a degraded NVLink)
//! fails in confusing ways once the app runs. [`check_consistency`] names the odd node
//! against the majority of the group, or against the values the config expects; these
//! findings belong to the `platform` lane (scheduling and node setup, not a broken part).
//! [`health_findings`] turns one GPU's NVML readings (ECC, row remapping, throttling,
//! NVLink) into `host`-lane findings.
//!
//! Backends publish the facts as [`DeviceInfo::details`] under the names in [`keys`];
//! [`NodeInventory::from_devices`] and [`GpuHealth::from_details`] read them back.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::results::{DeviceInfo, Entity, Lane};

/// Names of the facts in [`DeviceInfo::details`].
pub mod keys {
    pub const UUID: &str = "uuid";
    pub const PCI_BUS_ID: &str = "pci_bus_id";
    pub const DRIVER_VERSION: &str = "driver_version";
    /// The CUDA version the driver supports, `major.minor`.
    pub const CUDA_VERSION: &str = "cuda_version";
    /// `major.minor.patch`, absent when NCCL could not be loaded.
    pub const NCCL_VERSION: &str = "nccl_version";
    pub const COMPUTE_CAPABILITY: &str = "compute_capability";
    pub const NVLINK_ACTIVE: &str = "nvlink_active_links";
    pub const NVLINK_TOTAL: &str = "nvlink_links";
    pub const TEMPERATURE_C: &str = "temperature_c";
    pub const POWER_W: &str = "power_w";
    pub const POWER_LIMIT_W: &str = "power_limit_w";
    pub const SM_CLOCK_MHZ: &str = "sm_clock_mhz";
    pub const SM_CLOCK_MAX_MHZ: &str = "sm_clock_max_mhz";
    /// `0x<bits> (<names>)`, see [`super::throttle`].
    pub const THROTTLE_REASONS: &str = "throttle_reasons";
    pub const ECC_UNCORRECTED: &str = "ecc_uncorrected_volatile";
    pub const ECC_CORRECTED: &str = "ecc_corrected_volatile";
    pub const ECC_UNCORRECTED_AGGREGATE: &str = "ecc_uncorrected_aggregate";
    pub const REMAPPED_CORRECTABLE: &str = "remapped_rows_correctable";
    pub const REMAPPED_UNCORRECTABLE: &str = "remapped_rows_uncorrectable";
    pub const REMAP_PENDING: &str = "remapped_rows_pending";
    pub const REMAP_FAILURE: &str = "remapped_rows_failure";
    pub const PCIE_REPLAYS: &str = "pcie_replays";
}

/// NVML's clock event ("throttle") reasons, `nvmlClocksEventReason*` in `nvml.h`.
pub mod throttle {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
    pub const DISPLAY_CLOCK_SETTING: u64 = 0x100;

    /// Reasons that mean the hardware or its cooling is in trouble, as gpu-fryer counts
    /// them (`HW_SLOWDOWN`, `HW_THERMAL`, `SW_THERMAL`), plus the power brake, which an
    /// external power supervisor asserts.
    pub const ABNORMAL: u64 =
        HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN;

    const TABLE: [(u64, &str, &str); 9] = [
        (GPU_IDLE, "gpu_idle", "idle"),
        (
            APPLICATIONS_CLOCKS_SETTING,
            "applications_clocks_setting",
            "application clocks set below maximum",
        ),
        (SW_POWER_CAP, "sw_power_cap", "at the power limit"),
        (
            HW_SLOWDOWN,
            "hw_slowdown",
            "hardware slowdown (power brake, overheating or a failing power supply)",
        ),
        (
            SYNC_BOOST,
            "sync_boost",
            "held to a sync-boost group's clock",
        ),
        (
            SW_THERMAL_SLOWDOWN,
            "sw_thermal_slowdown",
            "driver thermal limit (GPU or memory too hot)",
        ),
        (
            HW_THERMAL_SLOWDOWN,
            "hw_thermal_slowdown",
            "hardware thermal slowdown (too hot)",
        ),
        (
            HW_POWER_BRAKE_SLOWDOWN,
            "hw_power_brake_slowdown",
            "external power brake asserted",
        ),
        (
            DISPLAY_CLOCK_SETTING,
            "display_clock_setting",
            "display clock setting",
        ),
    ];

    /// The short names of the set bits, in bit order; unknown bits as `0x...`.
    pub fn names(bits: u64) -> Vec<String> {
        let mut names: Vec<String> = TABLE
            .iter()
            .filter(|(bit, _, _)| bits & bit != 0)
            .map(|(_, name, _)| (*name).to_owned())
            .collect();
        let known = TABLE.iter().fold(0, |acc, (bit, _, _)| acc | bit);
        if bits & !known != 0 {
            names.push(format!("{:#x}", bits & !known));
        }
        names
    }

    /// Why the clocks are held down, for a person; `None` when nothing but idleness is.
    pub fn explain(bits: u64) -> Option<String> {
        let parts: Vec<&str> = TABLE
            .iter()
            .filter(|(bit, _, _)| bits & bit != 0 && *bit != GPU_IDLE)
            .map(|(_, _, text)| *text)
            .collect();
        (!parts.is_empty()).then(|| format!("clocks held down: {}", parts.join("; ")))
    }

    /// `0x<bits> (<names>)`, the form stored in device details.
    pub fn format(bits: u64) -> String {
        let names = names(bits);
        if names.is_empty() {
            format!("{bits:#x} (none)")
        } else {
            format!("{bits:#x} ({})", names.join(","))
        }
    }

    /// Reads [`format`]'s output (or a bare number) back.
    pub fn parse(text: &str) -> Option<u64> {
        let number = text.split_whitespace().next()?;
        match number.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => number.parse().ok(),
        }
    }
}

// ---- one node's inventory ----------------------------------------------------------

/// One GPU as the inventory records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInventory {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// What one node has. `None` means unknown (e.g. NVML or NCCL could not be loaded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInventory {
    pub node: String,
    pub gpus: Vec<GpuInventory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<String>,
    /// Active NVLink links per GPU, in device order, e.g. `18,18,18,18,18,18,18,18`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_layout: Option<String>,
}

impl NodeInventory {
    /// The inventory from a backend's devices, read from the details under [`keys`].
    /// Node-wide facts come from the first device that has them.
    pub fn from_devices(node: &str, devices: &[DeviceInfo]) -> NodeInventory {
        let detail = |device: &DeviceInfo, key: &str| {
            device
                .details
                .get(key)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let first = |key: &str| devices.iter().find_map(|d| detail(d, key));
        let gpus = devices
            .iter()
            .map(|d| GpuInventory {
                model: d.name.clone(),
                uuid: detail(d, keys::UUID),
                pci_bus_id: detail(d, keys::PCI_BUS_ID),
                memory_bytes: d.memory_bytes,
            })
            .collect();
        let links: Vec<Option<String>> = devices
            .iter()
            .map(|d| detail(d, keys::NVLINK_ACTIVE))
            .collect();
        let nvlink_layout = links.iter().any(Option::is_some).then(|| {
            links
                .iter()
                .map(|l| l.as_deref().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(",")
        });
        NodeInventory {
            node: node.to_owned(),
            gpus,
            driver_version: first(keys::DRIVER_VERSION),
            cuda_version: first(keys::CUDA_VERSION),
            nccl_version: first(keys::NCCL_VERSION),
            nvlink_layout,
        }
    }
}

/// Values the config says every node must have; unset fields are not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedInventory {
    #[serde(default)]
    pub gpu_count: Option<usize>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub driver_version: Option<String>,
    #[serde(default)]
    pub cuda_version: Option<String>,
    #[serde(default)]
    pub nccl_version: Option<String>,
    #[serde(default)]
    pub nvlink_layout: Option<String>,
}

impl ExpectedInventory {
    /// Whether the config expects nothing.
    pub fn is_empty(&self) -> bool {
        Attribute::ALL.iter().all(|a| a.expected(self).is_none())
    }
}

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

// ---- one GPU's health ----------------------------------------------------------------

/// One GPU's health readings, as NVML gives them. `None`: not readable on this GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    /// [`throttle`] bits.
    pub throttle_reasons: Option<u64>,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_corrected_volatile: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    pub remapped_rows_correctable: Option<u32>,
    pub remapped_rows_uncorrectable: Option<u32>,
    pub remap_pending: Option<bool>,
    pub remap_failure: Option<bool>,
    pub pcie_replays: Option<u64>,
    pub nvlink_active: Option<u32>,
    pub nvlink_total: Option<u32>,
}

/// Above this GPU temperature a reading is a warning (SuperBench's rule: 85 °C).
pub const MAX_TEMPERATURE_C: u32 = 85;
/// Uncorrectable row remaps at which DCGM warns that the GPU is running out of spare rows.
pub const REMAPPED_UNCORRECTABLE_WARN: u32 = 512;

impl GpuHealth {
    /// The readings as device details, under [`keys`].
    pub fn to_details(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                out.insert(key.to_owned(), value);
            }
        };
        put(
            keys::TEMPERATURE_C,
            self.temperature_c.map(|v| v.to_string()),
        );
        put(keys::POWER_W, self.power_w.map(|v| format!("{v:.1}")));
        put(
            keys::POWER_LIMIT_W,
            self.power_limit_w.map(|v| format!("{v:.1}")),
        );
        put(keys::SM_CLOCK_MHZ, self.sm_clock_mhz.map(|v| v.to_string()));
        put(
            keys::SM_CLOCK_MAX_MHZ,
            self.sm_clock_max_mhz.map(|v| v.to_string()),
        );
        put(
            keys::THROTTLE_REASONS,
            self.throttle_reasons.map(throttle::format),
        );
        put(
            keys::ECC_UNCORRECTED,
            self.ecc_uncorrected_volatile.map(|v| v.to_string()),
        );
        put(
            keys::ECC_CORRECTED,
            self.ecc_corrected_volatile.map(|v| v.to_string()),
        );
        put(
            keys::ECC_UNCORRECTED_AGGREGATE,
            self.ecc_uncorrected_aggregate.map(|v| v.to_string()),
        );
        put(
            keys::REMAPPED_CORRECTABLE,
            self.remapped_rows_correctable.map(|v| v.to_string()),
        );
        put(
            keys::REMAPPED_UNCORRECTABLE,
            self.remapped_rows_uncorrectable.map(|v| v.to_string()),
        );
        put(
            keys::REMAP_PENDING,
            self.remap_pending.map(|v| v.to_string()),
        );
        put(
            keys::REMAP_FAILURE,
            self.remap_failure.map(|v| v.to_string()),
        );
        put(keys::PCIE_REPLAYS, self.pcie_replays.map(|v| v.to_string()));
        put(
            keys::NVLINK_ACTIVE,
            self.nvlink_active.map(|v| v.to_string()),
        );
        put(keys::NVLINK_TOTAL, self.nvlink_total.map(|v| v.to_string()));
        out
    }

    /// Reads [`GpuHealth::to_details`]'s output back; unreadable values are `None`.
    pub fn from_details(details: &BTreeMap<String, String>) -> GpuHealth {
        fn get<T: std::str::FromStr>(details: &BTreeMap<String, String>, key: &str) -> Option<T> {
            details.get(key).and_then(|v| v.trim().parse().ok())
        }
        GpuHealth {
            temperature_c: get(details, keys::TEMPERATURE_C),
            power_w: get(details, keys::POWER_W),
            power_limit_w: get(details, keys::POWER_LIMIT_W),
            sm_clock_mhz: get(details, keys::SM_CLOCK_MHZ),
            sm_clock_max_mhz: get(details, keys::SM_CLOCK_MAX_MHZ),
            throttle_reasons: details
                .get(keys::THROTTLE_REASONS)
                .and_then(|v| throttle::parse(v)),
            ecc_uncorrected_volatile: get(details, keys::ECC_UNCORRECTED),
            ecc_corrected_volatile: get(details, keys::ECC_CORRECTED),
            ecc_uncorrected_aggregate: get(details, keys::ECC_UNCORRECTED_AGGREGATE),
            remapped_rows_correctable: get(details, keys::REMAPPED_CORRECTABLE),
            remapped_rows_uncorrectable: get(details, keys::REMAPPED_UNCORRECTABLE),
            remap_pending: get(details, keys::REMAP_PENDING),
            remap_failure: get(details, keys::REMAP_FAILURE),
            pcie_replays: get(details, keys::PCIE_REPLAYS),
            nvlink_active: get(details, keys::NVLINK_ACTIVE),
            nvlink_total: get(details, keys::NVLINK_TOTAL),
        }
    }
}

/// How serious a health finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The GPU should not serve: the entity is faulty.
    Fail,
    /// Worth recording, and it explains slowness, but it does not fail the GPU alone.
    Warn,
}

/// A problem one GPU's readings show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthFinding {
    pub index: u32,
    pub severity: Severity,
    pub lane: Lane,
    pub reason: String,
}

/// What one GPU's readings say. Rules, with their sources:
/// - uncorrected ECC errors since the driver loaded: fail (SuperBench flags any);
/// - a row-remapping failure: fail; a pending remap (needs a GPU reset) and ≥ 512
///   uncorrectable remaps: warn (DCGM);
/// - fewer active NVLink links than the GPU has: fail;
/// - temperature above 85 °C: warn (SuperBench);
/// - hardware slowdown or thermal throttling: warn (gpu-fryer treats them as faults
///   under load; a snapshot alone only explains slowness).
pub fn health_findings(index: u32, health: &GpuHealth) -> Vec<HealthFinding> {
    let mut out = Vec::new();
    let mut add = |severity, reason: String| {
        out.push(HealthFinding {
            index,
            severity,
            lane: Lane::Host,
            reason,
        })
    };
    if let Some(n) = health.ecc_uncorrected_volatile.filter(|n| *n > 0) {
        add(
            Severity::Fail,
            format!("`{n}` uncorrected ECC errors since the driver loaded"),
        );
    }
    if health.remap_failure == Some(true) {
        add(
            Severity::Fail,
            "row remapping failed: the GPU has no spare rows left for a bad row".to_owned(),
        );
    }
    if health.remap_pending == Some(true) {
        add(
            Severity::Warn,
            "a row remap is pending: reset the GPU to apply it".to_owned(),
        );
    }
    if let Some(n) = health
        .remapped_rows_uncorrectable
        .filter(|n| *n >= REMAPPED_UNCORRECTABLE_WARN)
    {
        add(
            Severity::Warn,
            format!(
                "`{n}` rows remapped for uncorrectable errors (warning at `{REMAPPED_UNCORRECTABLE_WARN}`)"
            ),
        );
    }
    if let (Some(active), Some(total)) = (health.nvlink_active, health.nvlink_total)
        && total > 0
        && active < total
    {
        add(
            Severity::Fail,
            format!("only `{active}` of `{total}` NVLink links are active"),
        );
    }
    if let Some(t) = health.temperature_c.filter(|t| *t > MAX_TEMPERATURE_C) {
        add(
            Severity::Warn,
            format!("temperature `{t}` °C is above `{MAX_TEMPERATURE_C}` °C"),
        );
    }
    if let Some(bits) = health
        .throttle_reasons
        .filter(|b| b & throttle::ABNORMAL != 0)
    {
        let names = throttle::names(bits & throttle::ABNORMAL).join(", ");
        add(Severity::Warn, format!("clocks throttled by `{names}`"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn inventory_is_read_from_device_details() {
        let devices: Vec<DeviceInfo> = (0..2)
            .map(|i| {
                let mut details = BTreeMap::new();
                details.insert(keys::UUID.to_owned(), format!("GPU-{i}"));
                details.insert(
                    keys::PCI_BUS_ID.to_owned(),
                    format!("00000000:{i:02X}:00.0"),
                );
                details.insert(keys::DRIVER_VERSION.to_owned(), "580.82.07".to_owned());
                details.insert(keys::CUDA_VERSION.to_owned(), "13.0".to_owned());
                if i == 0 {
                    details.insert(keys::NVLINK_ACTIVE.to_owned(), "18".to_owned());
                }
                DeviceInfo {
                    index: i,
                    name: "NVIDIA H200".to_owned(),
                    memory_bytes: Some(1),
                    details,
                }
            })
            .collect();
        let inv = NodeInventory::from_devices("n0", &devices);
        assert_eq!(inv.gpus.len(), 2);
        assert_eq!(inv.gpus[1].uuid.as_deref(), Some("GPU-1"));
        assert_eq!(inv.driver_version.as_deref(), Some("580.82.07"));
        assert_eq!(inv.nccl_version, None);
        assert_eq!(inv.nvlink_layout.as_deref(), Some("18,?"));
    }

    #[test]
    fn throttle_bits_have_names_and_explanations() {
        assert_eq!(throttle::names(0), Vec::<String>::new());
        assert_eq!(
            throttle::names(throttle::SW_POWER_CAP | throttle::HW_SLOWDOWN),
            ["sw_power_cap", "hw_slowdown"]
        );
        assert_eq!(throttle::names(0x1000), ["0x1000"]);
        assert_eq!(throttle::explain(throttle::GPU_IDLE), None);
        let text = throttle::explain(throttle::HW_THERMAL_SLOWDOWN).unwrap();
        assert!(text.contains("too hot"), "{text}");
        for bits in [0, 0x4, 0x28, 0x1004] {
            assert_eq!(throttle::parse(&throttle::format(bits)), Some(bits));
        }
        assert_eq!(
            throttle::format(0x24),
            "0x24 (sw_power_cap,sw_thermal_slowdown)"
        );
        assert_eq!(throttle::parse("12"), Some(12));
        assert_eq!(throttle::parse("bogus"), None);
    }

    #[test]
    fn healthy_readings_have_no_finding() {
        let healthy = GpuHealth {
            temperature_c: Some(45),
            power_w: Some(120.0),
            power_limit_w: Some(700.0),
            sm_clock_mhz: Some(1980),
            sm_clock_max_mhz: Some(1980),
            throttle_reasons: Some(throttle::GPU_IDLE),
            ecc_uncorrected_volatile: Some(0),
            ecc_corrected_volatile: Some(3),
            remapped_rows_uncorrectable: Some(0),
            remap_pending: Some(false),
            remap_failure: Some(false),
            nvlink_active: Some(18),
            nvlink_total: Some(18),
            ..GpuHealth::default()
        };
        assert!(health_findings(0, &healthy).is_empty());
        // A GPU without NVLink (L40S) reads 0 of 0 links: nothing to report.
        let pcie = GpuHealth {
            nvlink_active: Some(0),
            nvlink_total: Some(0),
            ..healthy.clone()
        };
        assert!(health_findings(0, &pcie).is_empty());
        assert!(health_findings(0, &GpuHealth::default()).is_empty());
    }

    #[test]
    fn nvml_readings_translate_into_findings() {
        let sick = GpuHealth {
            temperature_c: Some(91),
            throttle_reasons: Some(throttle::SW_POWER_CAP | throttle::HW_THERMAL_SLOWDOWN),
            ecc_uncorrected_volatile: Some(2),
            remap_pending: Some(true),
            remap_failure: Some(true),
            remapped_rows_uncorrectable: Some(600),
            nvlink_active: Some(12),
            nvlink_total: Some(18),
            ..GpuHealth::default()
        };
        let findings = health_findings(3, &sick);
        let fails: Vec<&str> = findings
            .iter()
            .filter(|f| f.severity == Severity::Fail)
            .map(|f| f.reason.as_str())
            .collect();
        let warns: Vec<&str> = findings
            .iter()
            .filter(|f| f.severity == Severity::Warn)
            .map(|f| f.reason.as_str())
            .collect();
        assert_eq!(
            fails,
            [
                "`2` uncorrected ECC errors since the driver loaded",
                "row remapping failed: the GPU has no spare rows left for a bad row",
                "only `12` of `18` NVLink links are active",
            ]
        );
        assert_eq!(warns.len(), 4, "{warns:?}");
        assert!(warns.iter().any(|w| w.contains("`91` °C")));
        // The power cap is normal under load; only the thermal slowdown is named.
        assert!(
            warns.contains(&"clocks throttled by `hw_thermal_slowdown`"),
            "{warns:?}"
        );
        assert!(
            findings
                .iter()
                .all(|f| f.index == 3 && f.lane == Lane::Host)
        );
    }

    #[test]
    fn health_round_trips_through_device_details() {
        let health = GpuHealth {
            temperature_c: Some(50),
            power_w: Some(650.5),
            throttle_reasons: Some(throttle::SW_POWER_CAP),
            remap_pending: Some(false),
            nvlink_active: Some(18),
            nvlink_total: Some(18),
            pcie_replays: Some(0),
            ..GpuHealth::default()
        };
        let details = health.to_details();
        assert_eq!(details[keys::THROTTLE_REASONS], "0x4 (sw_power_cap)");
        assert_eq!(GpuHealth::from_details(&details), health);
    }
}
