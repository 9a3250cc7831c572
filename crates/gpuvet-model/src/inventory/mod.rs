//! What each node has (GPUs, driver, CUDA, NCCL, NVLink), as the backends publish it.
//!
//! Backends publish the facts as [`DeviceInfo::details`] under the names in [`keys`];
//! [`NodeInventory::from_devices`] reads a node's inventory back from them, and
//! [`GpuHealth::from_details`] one GPU's health readings.
//!
//! - [`consistency`]: whether the nodes of a group agree on these facts
//!   ([`check_consistency`]), findings in the `platform` lane.
//! - [`health`]: one GPU's NVML readings as device details ([`GpuHealth`]) and the
//!   start-time rules that turn them into `host`-lane findings ([`health_findings`]).

pub mod consistency;
pub mod health;

use serde::{Deserialize, Serialize};

use crate::results::DeviceInfo;

/// The clock event reasons, as [`keys::THROTTLE_REASONS`] writes them.
pub use crate::gpu_health::throttle;
pub use consistency::{Attribute, Basis, InventoryFinding, check_consistency};
pub use health::{GpuHealth, HealthFinding, health_findings};

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

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
}
