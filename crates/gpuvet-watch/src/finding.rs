//! The words the watch's findings are written in: which GPU ([`GpuId`]), one XID
//! sighting ([`XidObservation`]), how bad a finding is ([`Severity`]) and the finding
//! itself ([`RuntimeFinding`]). All but the sighting are the model's
//! (`gpuvet_model::runtime`), since the analysis reads them back from the store.
//!
//! Every source (NVML, the kernel log, NCCL RAS), the health rules, the XID policy
//! and the metrics speak them; the policy ([`crate::policy`]) decides when a
//! finding is due.

pub use gpuvet_model::gpu_health::Severity;
pub use gpuvet_model::runtime::{
    CheckFamily, GpuId, RuntimeCheck, RuntimeFinding, normalize_pci_bus_id,
};
use serde::{Deserialize, Serialize};

/// One XID sighting, from NVML's event set or a kernel-log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidObservation {
    pub gpu: GpuId,
    pub xid: u32,
    /// Unix time in milliseconds.
    pub time_ms: u64,
    /// `/proc/sys/kernel/random/boot_id`; empty when unknown.
    #[serde(default)]
    pub boot_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The driver's text after the XID number, when there is one.
    #[serde(default)]
    pub text: String,
    /// `"kmsg"`, `"nvml"`, ...: observations from different sources pair up.
    pub source: String,
}
