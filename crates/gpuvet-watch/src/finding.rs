//! The words the watch's findings are written in: which GPU ([`GpuId`]), one XID
//! sighting ([`XidObservation`]), how bad a finding is ([`Severity`], gpuvet-model's,
//! with what an XID action class implies) and the finding itself ([`RuntimeFinding`]).
//!
//! Every source (NVML, the kernel log, NCCL RAS), the health rules, the XID policy
//! and the metrics speak them; the policy ([`crate::policy`]) decides when a
//! finding is due.

use std::fmt;

pub use gpuvet_model::gpu_health::Severity;
use gpuvet_model::results::Lane;
use serde::{Deserialize, Serialize};

use crate::xid::ActionClass;

/// The severity an XID's action implies: anything that needs a reset, a reboot or
/// support fails; app errors warn; record-only is informational.
impl From<ActionClass> for Severity {
    fn from(action: ActionClass) -> Severity {
        match action {
            ActionClass::RecordOnly => Severity::Info,
            ActionClass::AppError | ActionClass::RestartApp | ActionClass::RunDiagnostics => {
                Severity::Warn
            }
            ActionClass::ResetGpu | ActionClass::RebootNode | ActionClass::ContactSupport => {
                Severity::Fail
            }
        }
    }
}

/// Which GPU: its NVML index, its PCI bus id, or both. The kernel log names GPUs by
/// PCI id only, NVML by both; [`crate::policy::XidPolicy::register_gpus`] teaches the
/// policy the mapping so both sources land on one record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GpuId {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// Normalized as `dddd:bb:dd` (see [`normalize_pci_bus_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
}

impl GpuId {
    pub fn new(index: Option<u32>, pci_bus_id: Option<&str>) -> Self {
        GpuId {
            index,
            pci_bus_id: pci_bus_id.map(normalize_or_lowercase),
        }
    }

    pub fn index(index: u32) -> Self {
        GpuId {
            index: Some(index),
            pci_bus_id: None,
        }
    }

    pub fn pci(pci_bus_id: &str) -> Self {
        GpuId {
            index: None,
            pci_bus_id: Some(normalize_or_lowercase(pci_bus_id)),
        }
    }

    /// The dedup key: the PCI id when known (stable across sources and driver
    /// reloads), else the index.
    pub fn key(&self) -> String {
        match (&self.pci_bus_id, self.index) {
            (Some(pci), _) => pci.clone(),
            (None, Some(i)) => format!("index:{i}"),
            (None, None) => "unknown".to_owned(),
        }
    }
}

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.index, &self.pci_bus_id) {
            (Some(i), Some(p)) => write!(f, "gpu{i} ({p})"),
            (Some(i), None) => write!(f, "gpu{i}"),
            (None, Some(p)) => write!(f, "gpu {p}"),
            (None, None) => f.write_str("unknown gpu"),
        }
    }
}

fn normalize_or_lowercase(s: &str) -> String {
    normalize_pci_bus_id(s).unwrap_or_else(|| s.trim().to_ascii_lowercase())
}

/// Normalizes a PCI bus id to the kernel log's `dddd:bb:dd` form: NVML writes
/// `00000000:3B:00.0` (8-digit domain, upper case, function), the driver's XID lines
/// `0000:3b:00`. Accepts an optional `PCI:` prefix and a missing domain. Domains wider
/// than 16 bits keep their low 4 hex digits, as the kernel prints them.
pub fn normalize_pci_bus_id(s: &str) -> Option<String> {
    let s = s.trim();
    let s = s
        .strip_prefix("PCI:")
        .or_else(|| s.strip_prefix("pci:"))
        .unwrap_or(s);
    let parts: Vec<&str> = s.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [bus, devfn] => ("0", *bus, *devfn),
        [domain, bus, devfn] => (*domain, *bus, *devfn),
        _ => return None,
    };
    let (dev, func) = match devfn.split_once('.') {
        Some((d, f)) => (d, Some(f)),
        None => (devfn, None),
    };
    let hex = |t: &str, max_len: usize| -> Option<u32> {
        if t.is_empty() || t.len() > max_len || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(t, 16).ok()
    };
    let domain = hex(domain, 8)? & 0xffff;
    let bus = hex(bus, 2)?;
    let dev = hex(dev, 2)?;
    if dev > 0x1f {
        return None;
    }
    if let Some(f) = func {
        hex(f, 1)?;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}"))
}

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

/// What the watcher reports: the lead stores each as a `RuntimeCheckFailed` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeFinding {
    /// Where it was seen: `kmsg`, `nvml`, `kmsg+nvml`, `watchdog`, ...
    pub source: String,
    /// A stable name of the condition (`xid`, `xid.node_wide`, `ecc.volatile_uncorrected`,
    /// `throttle.hw_slowdown`, `probe.hung`, ...): the dedup key with the GPU and boot.
    pub check: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuId>,
    /// For node-wide findings: every GPU involved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    pub lane: Lane,
    pub action: ActionClass,
    pub severity: Severity,
    /// Unix ms of the first sighting.
    pub first_ms: u64,
    /// Unix ms of the last sighting folded in so far.
    pub last_ms: u64,
    /// Lines (XIDs) or polls (conditions) folded into this finding so far.
    pub count: u64,
    pub message: String,
    /// Set when repeats raised the action beyond the catalog's.
    pub escalated: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot_id: String,
    /// The measured value behind a health finding (temperature, rate, count, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The threshold the value was held against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

impl RuntimeFinding {
    /// A finding about a health condition seen once at `time_ms`; severity follows
    /// from `action` unless set with [`RuntimeFinding::with_severity`].
    pub fn condition(
        source: &str,
        check: &str,
        gpu: Option<GpuId>,
        lane: Lane,
        action: ActionClass,
        time_ms: u64,
        message: String,
    ) -> Self {
        RuntimeFinding {
            source: source.to_owned(),
            check: check.to_owned(),
            gpu,
            gpus: Vec::new(),
            xid: None,
            lane,
            action,
            severity: Severity::from(action),
            first_ms: time_ms,
            last_ms: time_ms,
            count: 1,
            message,
            escalated: false,
            boot_id: String::new(),
            value: None,
            threshold: None,
        }
    }

    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    pub fn with_value(mut self, value: f64, threshold: Option<f64>) -> Self {
        self.value = Some(value);
        self.threshold = threshold;
        self
    }

    pub fn with_boot_id(mut self, boot_id: &str) -> Self {
        self.boot_id = boot_id.to_owned();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_ids_normalize_to_the_kernel_form() {
        assert_eq!(
            normalize_pci_bus_id("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00")
        );
        assert_eq!(
            normalize_pci_bus_id("0000:3b:00").as_deref(),
            Some("0000:3b:00")
        );
        assert_eq!(
            normalize_pci_bus_id("PCI:0000:CB:00").as_deref(),
            Some("0000:cb:00")
        );
        assert_eq!(
            normalize_pci_bus_id("3b:00.0").as_deref(),
            Some("0000:3b:00")
        );
        assert_eq!(
            normalize_pci_bus_id("00000001:00:00.0").as_deref(),
            Some("0001:00:00")
        );
        for bad in [
            "",
            "xyz",
            "0000:3g:00",
            "0000:3b:40",
            "1:2:3:4",
            "0000:3b:00.zz",
        ] {
            assert_eq!(normalize_pci_bus_id(bad), None, "{bad}");
        }
    }
}
