//! The config file's JSON shapes as serde reads them, before validation. Unknown keys
//! are refused here, so a typo never passes silently.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::inventory::ExpectedInventory;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) aimaster: Option<RawAimaster>,
    pub(super) gpuvet: Option<RawSettings>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAimaster {
    pub(super) runtime_check: Option<RawRuntime>,
    pub(super) sanity_check: Option<RawSanity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSanity {
    pub(super) fail_action: Option<String>,
    pub(super) micro_benchmarks: Option<RawList>,
    pub(super) timeout: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRuntime {
    pub(super) fail_action: Option<String>,
    pub(super) micro_benchmarks: Option<RawList>,
}

/// PAI writes a comma-separated string; a JSON array is accepted too.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawList {
    Text(String),
    Items(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    pub(super) backend: Option<String>,
    pub(super) tolerance_pct: Option<f64>,
    pub(super) baselines: Option<BTreeMap<String, RawLimit>>,
    pub(super) store: Option<String>,
    /// One address or a list of them; read by hand to name what else was given.
    pub(super) report_to: Option<serde_json::Value>,
    pub(super) report_ca: Option<String>,
    pub(super) keep_days: Option<u32>,
    pub(super) rebuild_hook: Option<RawCommand>,
    pub(super) cpu_devices: Option<u32>,
    pub(super) gemm: Option<RawGemm>,
    pub(super) collective_bytes: Option<u64>,
    pub(super) pairing: Option<String>,
    pub(super) interfaces: Option<Vec<String>>,
    pub(super) expected_inventory: Option<ExpectedInventory>,
    pub(super) sim: Option<RawSim>,
    pub(super) watch: Option<RawWatch>,
    pub(super) kubernetes: Option<RawKubernetes>,
    pub(super) slurm: Option<RawKubernetes>,
    pub(super) repeat_offender: Option<RawRepeatOffender>,
    pub(super) history: Option<RawHistory>,
    pub(super) baseline_from: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHistory {
    pub(super) enabled: Option<bool>,
    pub(super) runs: Option<u32>,
    pub(super) min_runs: Option<u32>,
    pub(super) tolerance_pct: Option<f64>,
    pub(super) fail_on_degraded: Option<bool>,
}

/// `gpuvet.kubernetes` and `gpuvet.slurm`: the same two keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKubernetes {
    pub(super) enabled: Option<String>,
    pub(super) quarantine: Option<RawQuarantine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRepeatOffender {
    pub(super) failures: Option<u32>,
    pub(super) of_last: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuarantine {
    pub(super) max_share_pct: Option<f64>,
    pub(super) window_minutes: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWatch {
    pub(super) kmsg: Option<String>,
    pub(super) nvml: Option<bool>,
    pub(super) interval_ms: Option<u64>,
    pub(super) metrics_addr: Option<String>,
    pub(super) nccl_ras: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub(super) floor: Option<f64>,
    pub(super) ceiling: Option<f64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawCommand {
    Shell(String),
    Argv(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGemm {
    pub(super) dtype: Option<String>,
    pub(super) size: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSim {
    pub(super) seed: Option<u64>,
    pub(super) devices: Option<u32>,
    pub(super) noise_pct: Option<f64>,
    pub(super) speed: Option<BTreeMap<String, f64>>,
    pub(super) node_speed: Option<BTreeMap<String, f64>>,
    pub(super) node_device_speed: Option<BTreeMap<String, BTreeMap<String, f64>>>,
    pub(super) node_devices: Option<BTreeMap<String, u32>>,
    pub(super) link_speed: Option<BTreeMap<String, f64>>,
    pub(super) node_rail_speed: Option<BTreeMap<String, BTreeMap<String, f64>>>,
    pub(super) node_faults: Option<BTreeMap<String, RawNodeFault>>,
    pub(super) faults: Option<Vec<RawFault>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNodeFault {
    pub(super) check: String,
    pub(super) fault: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFault {
    pub(super) check: String,
    pub(super) device: u32,
    pub(super) fault: String,
}
