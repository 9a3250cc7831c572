//! Runtime findings, the words the runtime check `c4d` and a flight-recorder analysis
//! report in, and the analysis reads back: which GPU ([`GpuId`]), what should happen
//! ([`ActionClass`]), the finding ([`RuntimeFinding`]), what it is about
//! ([`RuntimeCheck`], its family typed), and what every `RuntimeCheckFailed` event's
//! details say ([`RuntimeEventDetails`]). The watch produces them; the analysis
//! matches on them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::gpu_health::Severity;
use crate::record::FLIGHT_RECORDER_SOURCE;
use crate::results::Lane;

/// What should happen after an XID (or any runtime finding). Ordered from the mildest
/// to the most drastic, so `max` picks the stronger of two actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    /// Informational: keep the record, do nothing (NVSentinel `IGNORE`).
    RecordOnly,
    /// The workload's own error; fix or restart the app, the GPU is fine.
    AppError,
    /// Restart the app; the driver contained the error (NVSentinel `RESTART_APP`).
    RestartApp,
    /// The GPU should be taken out for deeper diagnostics (e.g. repeated MMU faults on
    /// one GPU only).
    RunDiagnostics,
    /// Reset the GPU before it is used again (NVSentinel `RESET_GPU`).
    ResetGpu,
    /// Reboot the node (NVSentinel `RESTART_BM`): a GPU reset is not enough.
    RebootNode,
    /// Hand the GPU or node to the vendor / hardware team (NVSentinel
    /// `UNEXPECTED_ERR_REPORT_ISSUE`; also where repeated fatal XIDs escalate to).
    ContactSupport,
}

impl ActionClass {
    pub const ALL: [ActionClass; 7] = [
        ActionClass::RecordOnly,
        ActionClass::AppError,
        ActionClass::RestartApp,
        ActionClass::RunDiagnostics,
        ActionClass::ResetGpu,
        ActionClass::RebootNode,
        ActionClass::ContactSupport,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionClass::RecordOnly => "record_only",
            ActionClass::AppError => "app_error",
            ActionClass::RestartApp => "restart_app",
            ActionClass::RunDiagnostics => "run_diagnostics",
            ActionClass::ResetGpu => "reset_gpu",
            ActionClass::RebootNode => "reboot_node",
            ActionClass::ContactSupport => "contact_support",
        }
    }

    /// A human phrase for messages ("reset the GPU").
    pub fn describe(self) -> &'static str {
        match self {
            ActionClass::RecordOnly => "record only",
            ActionClass::AppError => "app error: fix or restart the app",
            ActionClass::RestartApp => "restart the app",
            ActionClass::RunDiagnostics => "run deeper diagnostics on the GPU",
            ActionClass::ResetGpu => "reset the GPU",
            ActionClass::RebootNode => "reboot the node",
            ActionClass::ContactSupport => "contact support",
        }
    }

    /// Whether the GPU or node needs a reset, reboot or repair before it is trusted
    /// again.
    pub fn needs_hardware_action(self) -> bool {
        matches!(
            self,
            ActionClass::ResetGpu | ActionClass::RebootNode | ActionClass::ContactSupport
        )
    }
}

impl fmt::Display for ActionClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The severity an action implies: anything that needs a reset, a reboot or
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
/// PCI id only, NVML by both; the watch's `XidPolicy::register_gpus` teaches the
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

/// What the runtime watch reports; each is stored as a `RuntimeCheckFailed` event whose
/// details are this finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeFinding {
    /// Where it was seen: `kmsg`, `nvml`, `kmsg+nvml`, `watchdog`, ...
    pub source: String,
    /// The condition (`xid`, `xid.node_wide`, `ecc.volatile_uncorrected`,
    /// `throttle.hw_slowdown`, `probe.hung`, ...): the dedup key with the GPU and boot.
    pub check: RuntimeCheck,
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
        check: RuntimeCheck,
        gpu: Option<GpuId>,
        lane: Lane,
        action: ActionClass,
        time_ms: u64,
        message: String,
    ) -> Self {
        RuntimeFinding {
            source: source.to_owned(),
            check,
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

/// The family of conditions a runtime finding belongs to: what the analysis decides
/// by. A finding's check is stored and shown by its name, the family's word then what
/// within it (`ecc.volatile_uncorrected`); the family is read from that word once, here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CheckFamily {
    /// An XID the driver logged (`xid`, `xid.node_wide`).
    Xid,
    /// ECC errors (`ecc.volatile_uncorrected`, ...).
    Ecc,
    /// Row remapping (`remap.pending`, ...).
    Remap,
    /// Retired pages (`retired_pages.pending`).
    RetiredPages,
    /// Clock event reasons (`throttle.hw_slowdown`, ...).
    Throttle,
    /// A GPU too hot (`temperature`).
    Temperature,
    /// The recovery action the driver asks for (`recovery_action`).
    RecoveryAction,
    /// NVLink (`nvlink.down`, `nvlink.crc_rate`, ...).
    Nvlink,
    /// PCIe (`pcie.replay_rate`).
    Pcie,
    /// NVML itself (`nvml.gpu_lost`, `nvml.error.CALL`).
    Nvml,
    /// A health probe that stopped answering (`probe.hung`).
    Probe,
    /// A health source that failed (`source.error.NAME`).
    Source,
    /// NCCL's RAS (`nccl.dead....`).
    Nccl,
    /// A PyTorch flight-recorder analysis (`fr.not_completed`, ...).
    FlightRecorder,
    /// A name this gpuvet does not know (a newer producer's); kept as it is.
    Other,
}

impl CheckFamily {
    /// Every family with its word, in the order names are matched.
    const WORDS: [(CheckFamily, &'static str); 14] = [
        (CheckFamily::Xid, "xid"),
        (CheckFamily::Ecc, "ecc"),
        (CheckFamily::Remap, "remap"),
        (CheckFamily::RetiredPages, "retired_pages"),
        (CheckFamily::Throttle, "throttle"),
        (CheckFamily::Temperature, "temperature"),
        (CheckFamily::RecoveryAction, "recovery_action"),
        (CheckFamily::Nvlink, "nvlink"),
        (CheckFamily::Pcie, "pcie"),
        (CheckFamily::Nvml, "nvml"),
        (CheckFamily::Probe, "probe"),
        (CheckFamily::Source, "source"),
        (CheckFamily::Nccl, "nccl"),
        (CheckFamily::FlightRecorder, "fr"),
    ];

    /// The word a check's name starts with; `None` for [`CheckFamily::Other`].
    pub fn word(self) -> Option<&'static str> {
        Self::WORDS
            .iter()
            .find(|(family, _)| *family == self)
            .map(|(_, word)| *word)
    }

    /// Whether the condition is a GPU's own: an XID or a memory (ECC, remapping,
    /// retired pages) error.
    pub fn is_gpu_fault(self) -> bool {
        matches!(
            self,
            CheckFamily::Xid | CheckFamily::Ecc | CheckFamily::Remap | CheckFamily::RetiredPages
        )
    }
}

/// What a runtime finding is about: its family, typed, and its full name as stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuntimeCheck {
    family: CheckFamily,
    name: String,
}

impl RuntimeCheck {
    /// The check `detail` of `family`: `ecc` and `volatile_uncorrected` make
    /// `ecc.volatile_uncorrected`; an empty detail is the family's word alone.
    pub fn new(family: CheckFamily, detail: &str) -> RuntimeCheck {
        let word = family.word().unwrap_or_default();
        let name = match (word, detail) {
            (word, "") => word.to_owned(),
            ("", detail) => detail.to_owned(),
            (word, detail) => format!("{word}.{detail}"),
        };
        RuntimeCheck { family, name }
    }

    /// An XID on one GPU.
    pub fn xid() -> RuntimeCheck {
        RuntimeCheck::new(CheckFamily::Xid, "")
    }

    /// A flight-recorder finding of `kind`.
    pub fn flight_recorder(kind: FrFindingKind) -> RuntimeCheck {
        RuntimeCheck::new(CheckFamily::FlightRecorder, kind.as_str())
    }

    pub fn family(&self) -> CheckFamily {
        self.family
    }

    /// The name, as stored and shown.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The flight-recorder finding this is, when it is one this gpuvet knows.
    pub fn flight_recorder_kind(&self) -> Option<FrFindingKind> {
        if self.family != CheckFamily::FlightRecorder {
            return None;
        }
        let detail = self.name.split_once('.').map(|(_, d)| d)?;
        FrFindingKind::ALL
            .into_iter()
            .find(|k| k.as_str() == detail)
    }
}

impl From<&str> for RuntimeCheck {
    /// Reads a stored name: its first word, before a `.`, names the family.
    fn from(name: &str) -> RuntimeCheck {
        let word = name.split('.').next().unwrap_or(name);
        let family = CheckFamily::WORDS
            .iter()
            .find(|(_, w)| *w == word)
            .map_or(CheckFamily::Other, |(family, _)| *family);
        RuntimeCheck {
            family,
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for RuntimeCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl PartialEq<str> for RuntimeCheck {
    fn eq(&self, other: &str) -> bool {
        self.name == other
    }
}

impl PartialEq<&str> for RuntimeCheck {
    fn eq(&self, other: &&str) -> bool {
        self.name == *other
    }
}

impl Serialize for RuntimeCheck {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for RuntimeCheck {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(RuntimeCheck::from(name.as_str()))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for RuntimeCheck {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        String::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for RuntimeCheck {}

/// What every `RuntimeCheckFailed` event's details say, whichever source made them (a
/// runtime watch's [`RuntimeFinding`], a flight-recorder analysis): the condition,
/// where it was seen, the XID when it is one, and a flight recorder's collectives.
/// The rest of the details is the source's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeEventDetails {
    /// `kmsg`, `nvml`, `watchdog`, [`FLIGHT_RECORDER_SOURCE`], ...; `c4d` when the
    /// details do not say.
    #[serde(default = "c4d")]
    pub source: String,
    #[serde(default = "c4d_check")]
    pub check: RuntimeCheck,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    /// A flight recorder's collectives, each read on its own: one this gpuvet cannot
    /// read leaves the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<serde_json::Value>,
}

fn c4d() -> String {
    "c4d".to_owned()
}

fn c4d_check() -> RuntimeCheck {
    RuntimeCheck::from("c4d")
}

impl RuntimeEventDetails {
    /// The details of a `RuntimeCheckFailed` event as this gpuvet reads them; `None`
    /// when they are not an object.
    pub fn read(details: &serde_json::Value) -> Option<RuntimeEventDetails> {
        if !details.is_object() {
            return None;
        }
        // Field by field, so that one unreadable field does not lose the others.
        let text = |key: &str| details.get(key).and_then(|v| v.as_str());
        Some(RuntimeEventDetails {
            source: text("source").map_or_else(c4d, str::to_owned),
            check: text("check").map_or_else(c4d_check, RuntimeCheck::from),
            xid: details
                .get("xid")
                .and_then(|v| v.as_u64())
                .and_then(|x| u32::try_from(x).ok()),
            collectives: details
                .get("collectives")
                .and_then(|v| v.as_array())
                .cloned()
                .unwrap_or_default(),
        })
    }

    /// Whether a flight-recorder analysis made them.
    pub fn is_flight_recorder(&self) -> bool {
        self.source == FLIGHT_RECORDER_SOURCE
    }
}
/// What kind of problem a finding describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrFindingKind {
    /// Ranks never entered a collective that their peers entered (`app`: the rank's
    /// host code was elsewhere).
    NeverEntered,
    /// Ranks issued a different collective than their peers at the same sequence id.
    OpMismatch,
    /// Ranks passed tensors of other sizes than their peers.
    SizeMismatch,
    /// Ranks passed tensors of other dtypes than their peers.
    DtypeMismatch,
    /// Ranks entered a collective that their peers completed, and did not complete it
    /// (`host`: the GPU did not finish the kernel).
    NotCompleted,
    /// Every rank entered the collective and none completed it; no rank is to blame
    /// from the dumps alone (`network`).
    Stalled,
    /// A member rank wrote no dump (`platform`: the process or node is gone).
    MissingDump,
}

impl FrFindingKind {
    pub const ALL: [FrFindingKind; 7] = [
        Self::NeverEntered,
        Self::OpMismatch,
        Self::SizeMismatch,
        Self::DtypeMismatch,
        Self::NotCompleted,
        Self::Stalled,
        Self::MissingDump,
    ];

    /// The team that owns this kind of problem.
    pub fn lane(self) -> Lane {
        match self {
            Self::NeverEntered | Self::OpMismatch | Self::SizeMismatch | Self::DtypeMismatch => {
                Lane::App
            }
            Self::NotCompleted => Lane::Host,
            Self::Stalled => Lane::Network,
            Self::MissingDump => Lane::Platform,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NeverEntered => "never_entered",
            Self::OpMismatch => "op_mismatch",
            Self::SizeMismatch => "size_mismatch",
            Self::DtypeMismatch => "dtype_mismatch",
            Self::NotCompleted => "not_completed",
            Self::Stalled => "stalled",
            Self::MissingDump => "missing_dump",
        }
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

    #[test]
    fn a_checks_name_reads_back_as_the_same_family_and_name() {
        for family in CheckFamily::WORDS.map(|(family, _)| family) {
            for detail in ["", "volatile_uncorrected", "error.nvmlDeviceGetTemperature"] {
                let check = RuntimeCheck::new(family, detail);
                let back = RuntimeCheck::from(check.as_str());
                assert_eq!(back, check, "{check}");
                let json = serde_json::to_string(&check).unwrap();
                assert_eq!(serde_json::from_str::<RuntimeCheck>(&json).unwrap(), check);
            }
        }
        assert_eq!(
            RuntimeCheck::new(CheckFamily::Ecc, "volatile_uncorrected").as_str(),
            "ecc.volatile_uncorrected"
        );
        assert_eq!(RuntimeCheck::xid().as_str(), "xid");
        let unknown = RuntimeCheck::from("gsp.timeout");
        assert_eq!(unknown.family(), CheckFamily::Other);
        assert_eq!(unknown.as_str(), "gsp.timeout");
        // A word is whole: `xidx` is not an XID.
        assert_eq!(RuntimeCheck::from("xidx").family(), CheckFamily::Other);
    }

    #[test]
    fn flight_recorder_kinds_are_typed_from_their_names() {
        for kind in FrFindingKind::ALL {
            let check = RuntimeCheck::flight_recorder(kind);
            assert_eq!(check.as_str(), format!("fr.{}", kind.as_str()));
            assert_eq!(
                RuntimeCheck::from(check.as_str()).flight_recorder_kind(),
                Some(kind)
            );
        }
        assert_eq!(
            RuntimeCheck::from("fr.new_kind").flight_recorder_kind(),
            None
        );
        assert_eq!(RuntimeCheck::xid().flight_recorder_kind(), None);
    }

    #[test]
    fn event_details_are_read_field_by_field() {
        let details =
            serde_json::json!({"source": "kmsg", "check": "xid", "xid": 79, "lane": "host"});
        let read = RuntimeEventDetails::read(&details).unwrap();
        assert_eq!(read.check.family(), CheckFamily::Xid);
        assert_eq!(read.xid, Some(79));
        assert!(!read.is_flight_recorder());
        // A field of the wrong type loses only itself.
        let odd = serde_json::json!({"source": 7, "check": "ecc.x", "xid": "79", "collectives": [1, {"a": 2}]});
        let read = RuntimeEventDetails::read(&odd).unwrap();
        assert_eq!(read.source, "c4d");
        assert_eq!(read.check.family(), CheckFamily::Ecc);
        assert_eq!(read.xid, None);
        assert_eq!(read.collectives.len(), 2);
        assert_eq!(RuntimeEventDetails::read(&serde_json::json!(null)), None);
        let defaults = RuntimeEventDetails::read(&serde_json::json!({})).unwrap();
        assert_eq!(
            (defaults.source.as_str(), defaults.check.as_str()),
            ("c4d", "c4d")
        );
    }
}
