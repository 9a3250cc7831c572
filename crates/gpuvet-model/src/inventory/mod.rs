//! What each node has (GPUs, driver, CUDA, NCCL, NVLink), as the backends publish it.
//!
//! Backends publish each GPU's facts typed, as [`DeviceFacts`] (its identity, the
//! software around it, its [`GpuHealth`]); a report stores them in the device's
//! `details` under the names in [`keys`], and reading the report types them again
//! ([`DeviceFacts::take_from`]). [`NodeInventory::from_devices`] reads a node's
//! inventory from them.
//!
//! - [`consistency`]: whether the nodes of a group agree on these facts
//!   ([`check_consistency`]), findings in the `platform` lane.
//! - [`health`]: one GPU's NVML readings as device details ([`GpuHealth`]) and the
//!   start-time rules that turn them into `host`-lane findings ([`health_findings`]).

pub mod consistency;
pub mod health;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::results::DeviceInfo;

/// The clock event reasons, as [`keys::THROTTLE_REASONS`] writes them.
pub use crate::gpu_health::throttle;
pub use consistency::{Attribute, Basis, InventoryFinding, check_consistency};
pub use health::{GpuHealth, HealthFinding, health_findings};

/// Names of the facts in [`DeviceInfo::details`].
pub mod keys {
    pub const UUID: &str = "uuid";
    /// The node a device is on, in a list of a whole group's devices (the group
    /// coordinator's report), where the same index appears once per node.
    pub const NODE: &str = "node";
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

/// What a backend knows of one GPU beyond its name, typed: who it is, the software
/// around it, and its health readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceFacts {
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, `major.minor`.
    pub cuda_version: Option<String>,
    /// `major.minor.patch`; `None` when NCCL could not be loaded.
    pub nccl_version: Option<String>,
    pub compute_capability: Option<String>,
    pub health: GpuHealth,
}

impl DeviceFacts {
    /// The facts as a report stores them: device details under [`keys`].
    pub fn to_details(&self) -> BTreeMap<String, String> {
        let mut out = self.health.to_details();
        for (key, value) in self.texts() {
            if let Some(value) = value {
                out.insert(key.to_owned(), value.clone());
            }
        }
        out
    }

    /// Takes the facts out of a stored report's `details`: every value that writing
    /// the facts again would reproduce exactly. A value that would not (a number
    /// written another way, a reading gpuvet does not parse) stays in `details` as it
    /// is, so nothing a report holds is lost or changed by being read and written.
    pub fn take_from(details: &mut BTreeMap<String, String>) -> DeviceFacts {
        let candidate = GpuHealth::from_details(details);
        let exact: BTreeMap<String, String> = candidate
            .to_details()
            .into_iter()
            .filter(|(key, value)| details.get(key) == Some(value))
            .collect();
        for key in exact.keys() {
            details.remove(key);
        }
        let mut text = |key: &str| details.remove(key);
        DeviceFacts {
            uuid: text(keys::UUID),
            pci_bus_id: text(keys::PCI_BUS_ID),
            driver_version: text(keys::DRIVER_VERSION),
            cuda_version: text(keys::CUDA_VERSION),
            nccl_version: text(keys::NCCL_VERSION),
            compute_capability: text(keys::COMPUTE_CAPABILITY),
            health: GpuHealth::from_details(&exact),
        }
    }

    fn texts(&self) -> [(&'static str, &Option<String>); 6] {
        [
            (keys::UUID, &self.uuid),
            (keys::PCI_BUS_ID, &self.pci_bus_id),
            (keys::DRIVER_VERSION, &self.driver_version),
            (keys::CUDA_VERSION, &self.cuda_version),
            (keys::NCCL_VERSION, &self.nccl_version),
            (keys::COMPUTE_CAPABILITY, &self.compute_capability),
        ]
    }
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
    /// The inventory from a backend's devices' facts. Node-wide facts come from the
    /// first device that has them.
    pub fn from_devices(node: &str, devices: &[DeviceInfo]) -> NodeInventory {
        let text = |value: &Option<String>| {
            value
                .as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let first = |of: fn(&DeviceFacts) -> &Option<String>| {
            devices.iter().find_map(|d| text(of(&d.facts)))
        };
        let gpus = devices
            .iter()
            .map(|d| GpuInventory {
                model: d.name.clone(),
                uuid: text(&d.facts.uuid),
                pci_bus_id: text(&d.facts.pci_bus_id),
                memory_bytes: d.memory_bytes,
            })
            .collect();
        let links: Vec<Option<String>> = devices
            .iter()
            .map(|d| d.facts.health.nvlink_active.map(|n| n.to_string()))
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
            driver_version: first(|f| &f.driver_version),
            cuda_version: first(|f| &f.cuda_version),
            nccl_version: first(|f| &f.nccl_version),
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
    use super::*;

    #[test]
    fn inventory_is_read_from_device_facts() {
        let devices: Vec<DeviceInfo> = (0..2)
            .map(|i| DeviceInfo {
                index: i,
                name: "NVIDIA H200".to_owned(),
                memory_bytes: Some(1),
                facts: DeviceFacts {
                    uuid: Some(format!("GPU-{i}")),
                    pci_bus_id: Some(format!("00000000:{i:02X}:00.0")),
                    driver_version: Some("580.82.07".to_owned()),
                    cuda_version: Some("13.0".to_owned()),
                    health: GpuHealth {
                        nvlink_active: (i == 0).then_some(18),
                        ..GpuHealth::default()
                    },
                    ..DeviceFacts::default()
                },
                details: BTreeMap::new(),
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
    fn facts_stored_as_details_read_back_whole_and_leave_odd_values_as_they_are() {
        let facts = DeviceFacts {
            uuid: Some("GPU-1".to_owned()),
            pci_bus_id: Some("00000000:3B:00.0".to_owned()),
            nccl_version: Some("2.27.7".to_owned()),
            health: GpuHealth {
                temperature_c: Some(65),
                power_w: Some(412.5),
                throttle_reasons: Some(throttle::SW_POWER_CAP),
                remap_pending: Some(false),
                nvlink_active: Some(18),
                ..GpuHealth::default()
            },
            ..DeviceFacts::default()
        };
        let mut details = facts.to_details();
        details.insert("threads".to_owned(), "8".to_owned());
        let stored = details.clone();
        assert_eq!(DeviceFacts::take_from(&mut details), facts);
        assert_eq!(
            details,
            BTreeMap::from([("threads".to_owned(), "8".to_owned())])
        );
        // Written another way than gpuvet writes it: kept as text, and written back
        // unchanged.
        let mut odd = stored.clone();
        odd.insert(keys::POWER_W.to_owned(), "412.50".to_owned());
        odd.insert(keys::TEMPERATURE_C.to_owned(), "n/a".to_owned());
        let mut rest = odd.clone();
        let read = DeviceFacts::take_from(&mut rest);
        assert_eq!(read.health.power_w, None);
        assert_eq!(read.health.temperature_c, None);
        assert_eq!(rest[keys::POWER_W], "412.50");
        let mut again = read.to_details();
        again.extend(rest);
        assert_eq!(again, odd);
    }
}
