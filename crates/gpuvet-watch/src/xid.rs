//! The XID catalog, as data: what each XID means, what to do about it, which team owns
//! it, and when repeats of it escalate.
//!
//! The table follows NVSentinel's `xiderrorsmapping.csv` (resolution and FATAL column),
//! DCGM's `BuildXidMappings` (the XIDs DCGM's health watch fails on), Azure's
//! `azure_gpu_xid.nhc` (the XIDs that fail a node) and NVIDIA's XID documentation; each
//! entry names the sources it rests on. An XID that is not in the table means "contact
//! support" (docs/reference.md, "XID → action").

use gpuvet_model::results::Lane;
use serde::Serialize;

pub use gpuvet_model::runtime::ActionClass;

/// One step of escalation: when one GPU sees `min_incidents` incidents of the XID within
/// `window_ms`, the finding is raised to `action` in `lane`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Escalation {
    pub min_incidents: u32,
    pub window_ms: u64,
    pub action: ActionClass,
    pub lane: Lane,
}

/// One catalogued XID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct XidInfo {
    pub xid: u32,
    /// The driver's name for it (NVSentinel's second column), or `"UNKNOWN"`.
    pub name: &'static str,
    /// What it means, in words.
    pub meaning: &'static str,
    pub action: ActionClass,
    pub lane: Lane,
    /// Needs a GPU reset or a node reboot (NVSentinel's `FATAL` column).
    pub fatal: bool,
    /// Escalation steps for repeats on one GPU, mildest first; empty: never escalate.
    pub escalations: &'static [Escalation],
    /// Where the mapping comes from.
    pub source: &'static str,
}

impl XidInfo {
    /// Whether this XID is in the catalog (an unknown XID is classified, not listed).
    pub fn is_known(&self) -> bool {
        lookup(self.xid).is_some()
    }
}

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// The window every escalation below uses: a fatal XID 5 or more times on one GPU in
/// 24 h means contact support (docs/reference.md, "XID rules").
pub const ESCALATION_WINDOW_MS: u64 = DAY_MS;

const fn esc(min_incidents: u32, action: ActionClass, lane: Lane) -> Escalation {
    Escalation {
        min_incidents,
        window_ms: ESCALATION_WINDOW_MS,
        action,
        lane,
    }
}

/// A fatal XID 5 times in 24 h on one GPU: contact support (docs/reference.md, "XID rules").
const FATAL_REPEATS: &[Escalation] = &[esc(5, ActionClass::ContactSupport, Lane::Host)];
/// Node-fatal or "reset, then replace" XIDs: a second incident on the same GPU (after
/// the reboot or reset that the first one asked for) means the hardware is bad.
const REPEAT_TWICE: &[Escalation] = &[esc(2, ActionClass::ContactSupport, Lane::Host)];
/// GSP timeout/error: "reset GPU, then reboot" (docs/reference.md, "XID → action"), then
/// the general rule.
const GSP_REPEATS: &[Escalation] = &[
    esc(2, ActionClass::RebootNode, Lane::Host),
    esc(5, ActionClass::ContactSupport, Lane::Host),
];
/// XID 31: "repeats on one GPU → run deeper diagnostics" (docs/reference.md, "XID →
/// action"). The threshold
/// reuses the general 5-in-24-h rule.
const MMU_REPEATS: &[Escalation] = &[esc(5, ActionClass::RunDiagnostics, Lane::Host)];
/// NVLink5 fabric errors repeat into the network lane.
const FABRIC_REPEATS: &[Escalation] = &[esc(5, ActionClass::ContactSupport, Lane::Network)];
const NEVER: &[Escalation] = &[];

const NVS: &str = "NVSentinel xiderrorsmapping.csv";

macro_rules! xid {
    ($xid:expr, $name:expr, $action:ident, $lane:ident, $fatal:expr, $esc:expr,
     $meaning:expr, $src:expr $(,)?) => {
        XidInfo {
            xid: $xid,
            name: $name,
            meaning: $meaning,
            action: ActionClass::$action,
            lane: Lane::$lane,
            fatal: $fatal,
            escalations: $esc,
            source: $src,
        }
    };
}

/// The catalog, sorted by XID (a test checks the order, `lookup` relies on it).
#[rustfmt::skip]
pub static XID_CATALOG: &[XidInfo] = &[
    // xid, driver name, action, lane, fatal, escalations,
    //     meaning,
    //     source
    xid!(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", RestartApp, App, false, NEVER,
        "GPU stopped processing (channel idle timeout)",
        NVS),
    xid!(13, "ROBUST_CHANNEL_GR_EXCEPTION", AppError, App, false, NEVER,
        "graphics engine exception (e.g. an illegal address or instruction in a kernel)",
        "NVSentinel xiderrorsmapping.csv (RESTART_APP, NONFATAL); NVIDIA XID docs (user app error)"),
    xid!(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", AppError, App, false, MMU_REPEATS,
        "GPU memory page fault (MMU fault), usually an invalid access by the app",
        "NVSentinel xiderrorsmapping.csv (RESTART_APP, NONFATAL); DCGM BuildXidMappings (memory); docs/reference.md (repeats → diagnostics)"),
    xid!(32, "ROBUST_CHANNEL_PBDMA_ERROR", RestartApp, App, false, NEVER,
        "invalid or corrupted push buffer stream (PBDMA error)",
        NVS),
    xid!(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", RecordOnly, App, false, NEVER,
        "GPU stopped the app's channel (channel reset after an app fault)",
        "NVSentinel xiderrorsmapping.csv (IGNORE, NONFATAL); DCGM BuildXidMappings (memory)"),
    xid!(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", RecordOnly, App, false, NEVER,
        "preemptive cleanup after a previous error or the app's end; never escalated (NVSentinel#1710)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_XID_45, NONFATAL); NVSentinel#1710"),
    xid!(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", ResetGpu, Host, true, FATAL_REPEATS,
        "GPU stopped responding (GPU timeout)",
        NVS),
    xid!(48, "ROBUST_CHANNEL_GPU_ECC_DBE", ResetGpu, Host, true, FATAL_REPEATS,
        "double-bit (uncorrectable) ECC error",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_XID_48, FATAL); DCGM BuildXidMappings; Azure azure_gpu_xid.nhc"),
    xid!(61, "PMU_BREAKPOINT", ContactSupport, Host, true, NEVER,
        "internal micro-controller breakpoint or warning",
        NVS),
    xid!(62, "PMU_HALT_ERROR", ResetGpu, Host, true, FATAL_REPEATS,
        "internal micro-controller halted",
        "NVSentinel xiderrorsmapping.csv (RESET_GPU, FATAL); Azure azure_gpu_xid.nhc"),
    xid!(63, "INFOROM_DRAM_RETIREMENT_EVENT", RecordOnly, Host, false, NEVER,
        "ECC page retirement or row remapping recorded",
        "NVSentinel xiderrorsmapping.csv (IGNORE, NONFATAL); DCGM BuildXidMappings (memory); Azure azure_gpu_xid.nhc"),
    xid!(64, "INFOROM_DRAM_RETIREMENT_FAILURE", ResetGpu, Host, true, REPEAT_TWICE,
        "ECC page retirement or row remapping failed; reset the GPU, then replace it",
        "NVSentinel xiderrorsmapping.csv (RESET_GPU, FATAL); DCGM BuildXidMappings (memory); Azure azure_gpu_xid.nhc"),
    xid!(74, "NVLINK_ERROR", ResetGpu, Host, true, FATAL_REPEATS,
        "NVLink error (link down, uncorrectable or excessive link errors)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_NVLINK_ERR, FATAL); DCGM BuildXidMappings; Azure azure_gpu_xid.nhc"),
    xid!(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", RebootNode, Host, true, REPEAT_TWICE,
        "GPU has fallen off the bus",
        "NVSentinel xiderrorsmapping.csv (RESTART_BM, FATAL); DCGM BuildXidMappings; Azure azure_gpu_xid.nhc"),
    xid!(92, "EXCESSIVE_SBE_INTERRUPTS", RecordOnly, Host, false, NEVER,
        "high single-bit (corrected) ECC error rate",
        "NVSentinel xiderrorsmapping.csv (IGNORE, NONFATAL); Azure azure_gpu_xid.nhc"),
    xid!(94, "ROBUST_CHANNEL_CONTAINED_ERROR", RestartApp, Host, false, NEVER,
        "contained ECC error: the affected app must restart, the GPU keeps running",
        "NVSentinel xiderrorsmapping.csv (RESTART_APP, NONFATAL); DCGM BuildXidMappings"),
    xid!(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", ResetGpu, Host, true, FATAL_REPEATS,
        "uncontained ECC error: every app on the GPU is affected",
        "NVSentinel xiderrorsmapping.csv (RESET_GPU, FATAL); DCGM BuildXidMappings"),
    xid!(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", ResetGpu, Host, true, FATAL_REPEATS,
        "context switch timeout",
        NVS),
    xid!(110, "SEC_FAULT_ERROR", ResetGpu, Host, true, FATAL_REPEATS,
        "security fault",
        NVS),
    xid!(119, "GSP_RPC_TIMEOUT", ResetGpu, Host, true, GSP_REPEATS,
        "GSP (GPU System Processor) RPC timeout; reset the GPU, then reboot",
        "NVSentinel xiderrorsmapping.csv (RESET_GPU, FATAL); DCGM BuildXidMappings; Azure azure_gpu_xid.nhc"),
    xid!(120, "GSP_ERROR", ResetGpu, Host, true, GSP_REPEATS,
        "GSP (GPU System Processor) error; reset the GPU, then reboot",
        "NVSentinel xiderrorsmapping.csv (RESET_GPU, FATAL); DCGM BuildXidMappings; Azure azure_gpu_xid.nhc"),
    xid!(121, "C2C_ERROR", RecordOnly, Host, false, NEVER,
        "chip-to-chip (C2C) link error, corrected",
        NVS),
    xid!(136, "ALI_TRAINING_FAIL", ResetGpu, Host, true, FATAL_REPEATS,
        "NVLink link training failed",
        NVS),
    xid!(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", ResetGpu, Host, true, FATAL_REPEATS,
        "unrecovered ECC error",
        "NVSentinel xiderrorsmapping.csv (RESET_GPU, FATAL); DCGM BuildXidMappings"),
    xid!(143, "GPU_INIT_ERROR", ResetGpu, Host, true, FATAL_REPEATS,
        "GPU initialization failed",
        NVS),
    xid!(144, "NVLINK_SAW_ERROR", ResetGpu, Network, true, FABRIC_REPEATS,
        "NVLink5 SAW error (NVLink fabric)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_NVLINK5_ERR, FATAL)"),
    xid!(145, "NVLINK_RLW_ERROR", ResetGpu, Network, true, FABRIC_REPEATS,
        "NVLink5 RLW error (NVLink fabric)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_NVLINK5_ERR, FATAL)"),
    xid!(146, "NVLINK_TLW_ERROR", ResetGpu, Network, true, FABRIC_REPEATS,
        "NVLink5 TLW error (NVLink fabric)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_NVLINK5_ERR, FATAL)"),
    xid!(147, "NVLINK_TREX_ERROR", ResetGpu, Network, true, FABRIC_REPEATS,
        "NVLink5 TREX error (NVLink fabric)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_NVLINK5_ERR, FATAL)"),
    xid!(148, "NVLINK_NVLPW_CTRL_ERROR", ResetGpu, Network, true, FABRIC_REPEATS,
        "NVLink5 NVLPW control error (NVLink fabric)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_NVLINK5_ERR, FATAL)"),
    xid!(149, "NVLINK_NETIR_ERROR", ResetGpu, Network, true, FABRIC_REPEATS,
        "NVLink5 NETIR error (NVLink fabric)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_NVLINK5_ERR, FATAL)"),
    xid!(150, "NVLINK_MSE_ERROR", ResetGpu, Network, true, FABRIC_REPEATS,
        "NVLink5 MSE error (NVLink fabric)",
        "NVSentinel xiderrorsmapping.csv (WORKFLOW_NVLINK5_ERR, FATAL)"),
    xid!(154, "GPU_RECOVERY_ACTION_CHANGED", RecordOnly, Host, false, NEVER,
        "the driver changed the GPU recovery action; follow the action NVML reports",
        "NVSentinel xiderrorsmapping.csv; NVIDIA XID docs"),
    xid!(155, "NVLINK_SW_DEFINED_ERROR", ResetGpu, Host, true, FATAL_REPEATS,
        "NVLink software-defined error",
        NVS),
    xid!(156, "RESOURCE_RETIREMENT_EVENT", ResetGpu, Host, true, FATAL_REPEATS,
        "resource retirement event",
        NVS),
    xid!(158, "GPU_FATAL_TIMEOUT", ResetGpu, Host, true, FATAL_REPEATS,
        "GPU fatal timeout",
        NVS),
];

/// The catalogued entry for `xid`, if any.
pub fn lookup(xid: u32) -> Option<&'static XidInfo> {
    XID_CATALOG
        .binary_search_by_key(&xid, |e| e.xid)
        .ok()
        .map(|i| &XID_CATALOG[i])
}

/// The entry for `xid`; an unknown XID means "contact support" in the host lane
/// (docs/reference.md, "XID → action"), never escalated further (it is already the
/// strongest action).
pub fn classify(xid: u32) -> XidInfo {
    lookup(xid).copied().unwrap_or(XidInfo {
        xid,
        name: "UNKNOWN",
        meaning: "XID not in gpuvet's catalog",
        action: ActionClass::ContactSupport,
        lane: Lane::Host,
        fatal: false,
        escalations: NEVER,
        source: "gpuvet: unknown XIDs mean contact support (docs/reference.md)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_sorted_and_unique() {
        for pair in XID_CATALOG.windows(2) {
            assert!(
                pair[0].xid < pair[1].xid,
                "{} before {}",
                pair[0].xid,
                pair[1].xid
            );
        }
    }

    #[test]
    fn escalation_steps_grow() {
        for e in XID_CATALOG {
            for pair in e.escalations.windows(2) {
                assert!(
                    pair[0].min_incidents < pair[1].min_incidents,
                    "xid {}",
                    e.xid
                );
                assert!(pair[0].action < pair[1].action, "xid {}", e.xid);
            }
            for step in e.escalations {
                assert!(step.min_incidents >= 2, "xid {}", e.xid);
                assert!(
                    step.action > e.action,
                    "xid {} escalates to a milder action",
                    e.xid
                );
            }
            assert!(!e.source.is_empty() && !e.meaning.is_empty());
        }
    }

    #[test]
    fn action_names_round_trip() {
        for a in ActionClass::ALL {
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{a}\""));
        }
    }
}
