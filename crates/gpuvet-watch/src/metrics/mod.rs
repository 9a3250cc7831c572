//! Prometheus metrics for the runtime check: per-GPU health gauges from the latest
//! [`GpuSample`], and counters of what the watcher saw and reported.
//!
//! - [`Metrics`]: thread-safe state the [`crate::health::Watcher`] updates on every
//!   reading and finding (see [`crate::health::Watcher::with_metrics`]), rendered in
//!   the Prometheus text exposition format (0.0.4) by [`Metrics::render`].
//! - [`MetricsServer`]: the endpoint answering `GET /metrics`, on std threads with
//!   bounds on every connection, the request head parsed by httparse.
//!
//! Names follow dcgm-exporter (`etc/default-counters.csv`, DCGM field names) where a
//! counterpart exists, with its labels `gpu`, `pci_bus_id`, `device` and `Hostname`;
//! `pci_bus_id` is gpuvet's normalized `dddd:bb:dd`, not NVML's `00000000:BB:DD.0`.
//! gpuvet's own series start with `gpuvet_`. dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS`
//! gauge keeps only the last XID, so XIDs are counted instead
//! (`gpuvet_xid_events_total`).

mod server;

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

use gpuvet_model::gpu_health::throttle;
use gpuvet_model::prometheus::{help_text, label_value};

use crate::finding::{GpuId, RuntimeFinding};
use crate::health::{GpuSample, HealthReading, NvLinkState, RecoveryAction};

pub use server::{MetricsServer, ServerOptions};

/// The check names of XID findings (see [`crate::policy`]).
const XID_CHECK: &str = "xid";
const XID_NODE_WIDE_CHECK: &str = "xid.node_wide";

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot listen for /metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot start the /metrics server thread: {0}")]
    Spawn(#[source] io::Error),
}

/// The watcher's metrics. Cheap to update (one short mutex hold per call; the watcher
/// runs at about 1 Hz) and bounded by the node's GPUs, XIDs and check names.
#[derive(Debug, Default)]
pub struct Metrics {
    hostname: Option<String>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    up: bool,
    polls: u64,
    last_poll_ms: Option<u64>,
    probe_hung: u64,
    source_errors: BTreeMap<String, u64>,
    /// (check, lane, severity, action) → findings reported.
    findings: BTreeMap<(String, &'static str, &'static str, &'static str), u64>,
    /// By [`GpuId::key`] of the canonical id.
    gpus: BTreeMap<String, GpuState>,
    index_to_pci: BTreeMap<u32, String>,
    pci_to_index: BTreeMap<String, u32>,
    /// (GPU key, XID, boot) → lines, from the policy's per-GPU records.
    xid: BTreeMap<(String, u32, String), (GpuId, u64)>,
    /// (XID, boot) → lines of node-wide bursts.
    xid_node_wide: BTreeMap<(u32, String), u64>,
}

#[derive(Debug, Default)]
struct GpuState {
    id: GpuId,
    sample: Option<GpuSample>,
    /// NVML says the GPU is lost; its last sample is dropped, not shown as current.
    lost: bool,
}

impl State {
    /// Fills in the index or PCI id learned from an inventory, as the policy does.
    fn canonical(&self, gpu: &GpuId) -> GpuId {
        let mut g = gpu.clone();
        if g.pci_bus_id.is_none() {
            g.pci_bus_id = g.index.and_then(|i| self.index_to_pci.get(&i).cloned());
        }
        if g.index.is_none() {
            g.index = g
                .pci_bus_id
                .as_ref()
                .and_then(|p| self.pci_to_index.get(p).copied());
        }
        g
    }

    fn gpu_mut(&mut self, gpu: &GpuId) -> &mut GpuState {
        let id = self.canonical(gpu);
        self.gpus.entry(id.key()).or_insert_with(|| GpuState {
            id,
            ..GpuState::default()
        })
    }

    fn register(&mut self, gpus: &[GpuId]) {
        for g in gpus {
            if let (Some(i), Some(p)) = (g.index, &g.pci_bus_id) {
                self.index_to_pci.insert(i, p.clone());
                self.pci_to_index.insert(p.clone(), i);
                // A GPU first seen by index alone joins its PCI-keyed entry, so one GPU
                // is one series.
                if let Some(mut old) = self.gpus.remove(&format!("index:{i}")) {
                    old.id = g.clone();
                    self.gpus.entry(g.key()).or_insert(old);
                }
            }
            self.gpu_mut(g);
        }
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics::default()
    }

    /// Adds dcgm-exporter's `Hostname` label to every series.
    pub fn with_hostname(mut self, hostname: &str) -> Self {
        self.hostname = Some(hostname.to_owned());
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain counters: a panic elsewhere leaves nothing half-written
        // that matters, so a poisoned lock is still used.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the watcher runs (`gpuvet_watch_up`).
    pub fn set_up(&self, up: bool) {
        self.lock().up = up;
    }

    /// One watcher step at `now_ms` (Unix ms); a watcher that steps is up.
    pub fn observe_poll(&self, now_ms: u64) {
        let mut st = self.lock();
        st.up = true;
        st.polls += 1;
        st.last_poll_ms = Some(now_ms);
    }

    /// A source's poll failed as a whole.
    pub fn observe_source_error(&self, source: &str) {
        *self
            .lock()
            .source_errors
            .entry(source.to_owned())
            .or_default() += 1;
    }

    /// One reading from a source: samples update the gauges, inventories name the
    /// GPUs, lost GPUs and hung probes are counted. XID sightings are counted from the
    /// policy instead ([`Metrics::observe_snapshot`]), after its deduplication.
    pub fn observe_reading(&self, reading: &HealthReading) {
        match reading {
            HealthReading::Inventory { gpus } => self.lock().register(gpus),
            HealthReading::Gpu(sample) => self.observe_sample(sample),
            HealthReading::GpuError { gpu, lost, .. } => {
                if *lost {
                    let mut st = self.lock();
                    let g = st.gpu_mut(gpu);
                    g.lost = true;
                    g.sample = None;
                }
            }
            HealthReading::ProbeHung { .. } => self.lock().probe_hung += 1,
            HealthReading::Xid(_) | HealthReading::Finding(_) => {}
        }
    }

    /// The latest sample of one GPU replaces the previous one. Link states are read
    /// less often than the counters, so a sample without them keeps the last ones.
    pub fn observe_sample(&self, sample: &GpuSample) {
        let mut st = self.lock();
        let g = st.gpu_mut(&sample.gpu);
        let mut keep = sample.clone();
        if keep.nvlink.links.is_empty()
            && let Some(prev) = g.sample.as_mut()
        {
            keep.nvlink.links = std::mem::take(&mut prev.nvlink.links);
        }
        keep.gpu = g.id.clone();
        g.sample = Some(keep);
        g.lost = false;
    }

    /// Findings the watcher reported (new ones and updates), counted by check, lane,
    /// severity and action.
    pub fn observe_findings(&self, findings: &[RuntimeFinding]) {
        if findings.is_empty() {
            return;
        }
        let mut st = self.lock();
        for f in findings {
            let key = (
                f.check.to_string(),
                f.lane.as_str(),
                f.severity.as_str(),
                f.action.as_str(),
            );
            *st.findings.entry(key).or_default() += 1;
        }
    }

    /// The policy's snapshot ([`crate::policy::XidPolicy::snapshot`]): XID findings
    /// carry every line folded into them, which feeds the XID counters. A count never
    /// goes down here, even if a later snapshot says less.
    pub fn observe_snapshot(&self, snapshot: &[RuntimeFinding]) {
        let mut st = self.lock();
        for f in snapshot {
            let Some(xid) = f.xid else { continue };
            match (f.check.as_str(), &f.gpu) {
                (XID_CHECK, Some(gpu)) => {
                    let gpu = st.canonical(gpu);
                    let e = st
                        .xid
                        .entry((gpu.key(), xid, f.boot_id.clone()))
                        .or_insert_with(|| (gpu.clone(), 0));
                    // The latest id: it may have learned its index since.
                    e.0 = gpu;
                    e.1 = e.1.max(f.count);
                }
                (XID_NODE_WIDE_CHECK, _) => {
                    let e = st
                        .xid_node_wide
                        .entry((xid, f.boot_id.clone()))
                        .or_default();
                    *e = (*e).max(f.count);
                }
                _ => {}
            }
        }
    }

    /// The Prometheus text exposition format (0.0.4): `# HELP` and `# TYPE` per
    /// family, then its series, in a stable order: families in a fixed order, GPUs by
    /// index and PCI id, then by XID, reason bit, link or label values. Families with
    /// no series are left out.
    pub fn render(&self) -> String {
        let st = self.lock();
        let mut w = Writer {
            out: String::with_capacity(16 * 1024),
            hostname: self.hostname.as_deref(),
        };
        render_gpus(&st, &mut w);
        render_counters(&st, &mut w);
        w.out
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// A sample value: integers print as integers, exactly.
#[derive(Debug, Clone, Copy)]
enum Num {
    U(u64),
    F(f64),
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Num::U(v) => write!(f, "{v}"),
            Num::F(v) if v.is_nan() => f.write_str("NaN"),
            Num::F(v) if v.is_infinite() => f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" }),
            Num::F(v) => write!(f, "{v}"),
        }
    }
}

type Labels = Vec<(&'static str, String)>;

struct Writer<'a> {
    out: String,
    hostname: Option<&'a str>,
}

impl Writer<'_> {
    /// One family: header and series; nothing at all when it has no series.
    fn family(&mut self, name: &str, kind: Kind, help: &str, series: Vec<(Labels, Num)>) {
        if series.is_empty() {
            return;
        }
        let out = &mut self.out;
        out.push_str("# HELP ");
        out.push_str(name);
        out.push(' ');
        out.push_str(&help_text(help));
        let _ = writeln!(out, "\n# TYPE {name} {}", kind.as_str());
        for (labels, value) in series {
            out.push_str(name);
            let host = self.hostname.map(|h| ("Hostname", h));
            let all = labels.iter().map(|(k, v)| (*k, v.as_str())).chain(host);
            let mut first = true;
            for (k, v) in all {
                out.push(if first { '{' } else { ',' });
                first = false;
                out.push_str(k);
                out.push_str("=\"");
                out.push_str(&label_value(v));
                out.push('"');
            }
            if !first {
                out.push('}');
            }
            let _ = writeln!(out, " {value}");
        }
    }
}

/// dcgm-exporter's GPU labels, for what gpuvet knows (no UUID or model name yet).
fn gpu_labels(id: &GpuId) -> Labels {
    let mut l = Vec::with_capacity(4);
    if let Some(i) = id.index {
        l.push(("gpu", i.to_string()));
    }
    if let Some(p) = &id.pci_bus_id {
        l.push(("pci_bus_id", p.clone()));
    }
    if let Some(i) = id.index {
        l.push(("device", format!("nvidia{i}")));
    }
    l
}

/// `labels` and one more.
fn with_label(labels: &Labels, name: &'static str, value: String) -> Labels {
    let mut l = Vec::with_capacity(labels.len() + 1);
    l.extend_from_slice(labels);
    l.push((name, value));
    l
}

/// One series without labels (node-level values).
fn unlabelled(value: Num) -> Vec<(Labels, Num)> {
    vec![(Vec::new(), value)]
}

/// Counts summed per key (e.g. over boots), in key order.
fn sum_by<K: Ord>(counts: impl IntoIterator<Item = (K, u64)>) -> BTreeMap<K, u64> {
    let mut sums = BTreeMap::new();
    for (k, n) in counts {
        *sums.entry(k).or_default() += n;
    }
    sums
}

/// A counter family's series: one per key, labelled by `labels`.
fn counts<K>(
    counts: impl IntoIterator<Item = (K, u64)>,
    labels: impl Fn(K) -> Labels,
) -> Vec<(Labels, Num)> {
    counts
        .into_iter()
        .map(|(k, n)| (labels(k), Num::U(n)))
        .collect()
}

fn b(v: bool) -> Num {
    Num::U(u64::from(v))
}

fn recovery_raw(a: RecoveryAction) -> u64 {
    u64::from(match a {
        RecoveryAction::None => 0,
        RecoveryAction::GpuReset => 1,
        RecoveryAction::NodeReboot => 2,
        RecoveryAction::DrainP2p => 3,
        RecoveryAction::DrainAndReset => 4,
        RecoveryAction::Other(n) => n,
    })
}

type Field = fn(&GpuSample) -> Option<Num>;

/// The per-GPU families with a dcgm-exporter counterpart: name and type as in
/// dcgm-exporter's counters CSV (DCGM field names for the ones it leaves out), and
/// what of a [`GpuSample`] feeds them. `DCGM_FI_DEV_RETIRED_PENDING` is a 0/1 here, so
/// a gauge, where the CSV says counter.
const GPU_FIELDS: &[(&str, Kind, &str, Field)] = &[
    (
        "DCGM_FI_DEV_GPU_TEMP",
        Kind::Gauge,
        "GPU temperature (in C).",
        |s| s.temperature_c.map(|v| Num::U(v.into())),
    ),
    (
        "DCGM_FI_DEV_POWER_USAGE",
        Kind::Gauge,
        "Power draw (in W).",
        |s| s.power_mw.map(|v| Num::F(f64::from(v) / 1000.0)),
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        Kind::Counter,
        "Total number of single-bit volatile ECC errors.",
        |s| s.ecc.volatile_corrected.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        Kind::Counter,
        "Total number of double-bit volatile ECC errors.",
        |s| s.ecc.volatile_uncorrected.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        Kind::Counter,
        "Total number of single-bit persistent ECC errors.",
        |s| s.ecc.aggregate_corrected.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        Kind::Counter,
        "Total number of double-bit persistent ECC errors.",
        |s| s.ecc.aggregate_uncorrected.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_RETIRED_SBE",
        Kind::Counter,
        "Total number of retired pages due to single-bit errors.",
        |s| s.retired_pages.as_ref().map(|p| Num::U(p.single_bit)),
    ),
    (
        "DCGM_FI_DEV_RETIRED_DBE",
        Kind::Counter,
        "Total number of retired pages due to double-bit errors.",
        |s| s.retired_pages.as_ref().map(|p| Num::U(p.double_bit)),
    ),
    (
        "DCGM_FI_DEV_RETIRED_PENDING",
        Kind::Gauge,
        "Whether a page retirement is pending (1) until the next reboot or driver reload.",
        |s| s.retired_pages.as_ref().map(|p| b(p.pending)),
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        Kind::Counter,
        "Number of remapped rows for correctable errors",
        |s| s.remapped_rows.as_ref().map(|r| Num::U(r.correctable)),
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        Kind::Counter,
        "Number of remapped rows for uncorrectable errors",
        |s| s.remapped_rows.as_ref().map(|r| Num::U(r.uncorrectable)),
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        Kind::Gauge,
        "Whether remapping of rows is pending (a GPU reset applies it)",
        |s| s.remapped_rows.as_ref().map(|r| b(r.pending)),
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        Kind::Gauge,
        "Whether remapping of rows has failed",
        |s| s.remapped_rows.as_ref().map(|r| b(r.failure)),
    ),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        Kind::Counter,
        "Total number of PCIe retries.",
        |s| s.pcie_replays.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
        Kind::Gauge,
        "PCIe current link width (lanes).",
        |s| s.pcie_link_width.map(|v| Num::U(v.into())),
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        Kind::Counter,
        "Total number of NVLink flow-control CRC errors.",
        |s| s.nvlink.crc_flit_total.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        Kind::Counter,
        "Total number of NVLink data CRC errors.",
        |s| s.nvlink.crc_data_total.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        Kind::Counter,
        "Total number of NVLink retries.",
        |s| s.nvlink.replay_total.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        Kind::Counter,
        "Total number of NVLink recovery errors.",
        |s| s.nvlink.recovery_total.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        Kind::Gauge,
        "Current clock event (throttle) reasons, bitmask of NVML's nvmlClocksEventReason bits.",
        |s| s.clock_event_reasons.map(Num::U),
    ),
    (
        "DCGM_FI_DEV_GPU_RECOVERY_ACTION",
        Kind::Gauge,
        "The driver's GPU recovery action (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, \
         4 drain and reset).",
        |s| s.recovery_action.map(|a| Num::U(recovery_raw(a))),
    ),
];

fn render_gpus(st: &State, w: &mut Writer<'_>) {
    let mut gpus: Vec<&GpuState> = st.gpus.values().collect();
    gpus.sort_by(|a, b| a.id.cmp(&b.id));
    let sampled: Vec<(Labels, &GpuSample)> = gpus
        .iter()
        .filter_map(|g| g.sample.as_ref().map(|s| (gpu_labels(&g.id), s)))
        .collect();

    for (name, kind, help, field) in GPU_FIELDS {
        let series = sampled
            .iter()
            .filter_map(|(l, s)| field(s).map(|v| (l.clone(), v)))
            .collect();
        w.family(name, *kind, help, series);
    }

    let mut reasons = Vec::new();
    for (l, s) in &sampled {
        let Some(bits) = s.clock_event_reasons else {
            continue;
        };
        let each = throttle::TABLE
            .iter()
            .map(|e| (e.label, bits & e.bit != 0))
            .chain(std::iter::once(("UNKNOWN", bits & !throttle::KNOWN != 0)));
        for (reason, set) in each {
            reasons.push((with_label(l, "reason", reason.to_owned()), b(set)));
        }
    }
    w.family(
        "gpuvet_clock_event_reason",
        Kind::Gauge,
        "Whether one clock event (throttle) reason is active (1): one series per NVML reason \
         bit; UNKNOWN for bits newer than gpuvet.",
        reasons,
    );

    let mut links = Vec::new();
    for (l, s) in &sampled {
        let mut sorted: Vec<&NvLinkState> = s.nvlink.links.iter().collect();
        sorted.sort_by_key(|k| k.link);
        for link in sorted {
            links.push((with_label(l, "link", link.link.to_string()), b(link.active)));
        }
    }
    w.family(
        "gpuvet_nvlink_link_active",
        Kind::Gauge,
        "Whether an NVLink link is active (1), as last read.",
        links,
    );

    let lost = gpus
        .iter()
        .map(|g| (gpu_labels(&g.id), b(g.lost)))
        .collect();
    w.family(
        "gpuvet_gpu_lost",
        Kind::Gauge,
        "Whether NVML reports the GPU as lost (1): it fell off the bus or hung; its other \
         gauges are gone until it answers again.",
        lost,
    );
}

fn render_counters(st: &State, w: &mut Writer<'_>) {
    // Summed over boots: one series per (GPU, XID).
    let xid = sum_by(st.xid.iter().map(|((_, x, _), (gpu, n))| ((gpu, *x), *n)));
    let series = counts(xid, |(gpu, x)| {
        with_label(&gpu_labels(gpu), "xid", x.to_string())
    });
    w.family(
        "gpuvet_xid_events_total",
        Kind::Counter,
        "XID lines (kernel log or NVML events, one per sighting after cross-source dedup) \
         folded into a per-GPU XID finding; repeats count, unlike DCGM_FI_DEV_XID_ERRORS.",
        series,
    );

    let node_wide = sum_by(st.xid_node_wide.iter().map(|((x, _), n)| (*x, *n)));
    let series = counts(node_wide, |x| vec![("xid", x.to_string())]);
    w.family(
        "gpuvet_xid_node_wide_events_total",
        Kind::Counter,
        "XID lines folded into node-wide findings (the same XID on many GPUs at once, \
         which points to the workload).",
        series,
    );

    let series = counts(
        st.findings.iter().map(|(k, n)| (k, *n)),
        |(check, lane, severity, action)| {
            vec![
                ("check", check.clone()),
                ("lane", (*lane).to_owned()),
                ("severity", (*severity).to_owned()),
                ("action", (*action).to_owned()),
            ]
        },
    );
    w.family(
        "gpuvet_runtime_findings_total",
        Kind::Counter,
        "Runtime findings reported (each is a RuntimeCheckFailed event: a first sighting, \
         an escalation or a rise in severity).",
        series,
    );

    w.family(
        "gpuvet_watch_polls_total",
        Kind::Counter,
        "Watcher steps (one poll of every health source).",
        unlabelled(Num::U(st.polls)),
    );
    let series = counts(st.source_errors.iter().map(|(s, n)| (s, *n)), |s| {
        vec![("source", s.clone())]
    });
    w.family(
        "gpuvet_watch_source_errors_total",
        Kind::Counter,
        "Polls of a health source that failed as a whole.",
        series,
    );
    w.family(
        "gpuvet_watch_probe_hung_total",
        Kind::Counter,
        "Probes (NVML calls) that did not return within the watchdog's timeout.",
        unlabelled(Num::U(st.probe_hung)),
    );
    w.family(
        "gpuvet_watch_up",
        Kind::Gauge,
        "Whether the watcher is running (1).",
        unlabelled(b(st.up)),
    );
    if let Some(ms) = st.last_poll_ms {
        w.family(
            "gpuvet_watch_last_poll_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the watcher's last step: a stale value means a stuck watcher.",
            unlabelled(Num::F(ms as f64 / 1000.0)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_exactly() {
        assert_eq!(Num::U(u64::MAX).to_string(), "18446744073709551615");
        assert_eq!(Num::F(312.5).to_string(), "312.5");
        assert_eq!(Num::F(300.0).to_string(), "300");
        assert_eq!(Num::F(f64::INFINITY).to_string(), "+Inf");
        assert_eq!(Num::F(f64::NAN).to_string(), "NaN");
    }
}
