//! The XID policy: deduplication, escalation and "same XID on many GPUs" detection, as
//! pure code. Time is always passed in; nothing here reads a clock or does I/O.
//!
//! How observations become findings:
//! - **Cross-source dedup.** NVML's event and the kernel's `NVRM: Xid` line report the
//!   same XID; an observation from one source that pairs with an unpaired one from
//!   another source within [`PolicyConfig::cross_source_ms`] is counted once.
//! - **Records per (GPU, XID, boot).** Every line is counted into its record (first
//!   time, last time, count), and a record yields one finding, the first time, never one
//!   per line (NVSentinel#1120: 800k lines, 29 distinct errors).
//! - **Incidents.** Lines of one XID on one GPU less than [`PolicyConfig::incident_gap_ms`]
//!   apart are one incident: a flood of identical lines is one event, not a repeat.
//! - **Hold.** An incident is decided once it has been quiet for
//!   [`PolicyConfig::settle_ms`], or [`PolicyConfig::max_hold_ms`] after it began, so a
//!   burst is reported with its count and the other GPUs of a node-wide burst are in.
//! - **Spread.** If at least half of the node's GPUs (and at least 2) have an incident
//!   of the same XID within [`PolicyConfig::spread_window_ms`], the incidents are one
//!   node-wide finding in lane `app`, never escalated (docs/reference.md, "XID rules":
//!   the same XID on different GPUs at once points to the workload).
//! - **Escalation.** Otherwise the incidents of one GPU within the catalog's window are
//!   counted, and crossing a step of [`crate::xid::XidInfo::escalations`] emits one
//!   update with `escalated: true` (e.g. XID 79 twice, a fatal XID 5 times in 24 h;
//!   XID 45 has no steps and never escalates, NVSentinel#1710).
//!
//! Health conditions (ECC, throttling, a hung probe, ...) go through
//! [`XidPolicy::observe_condition`]: one finding per (check, GPU, boot), updated only
//! when its severity rises.
//!
//! **Restarts.** [`XidPolicy::export`] writes all of the above down as a
//! [`PolicyState`] (plain data) and [`XidPolicy::restore`] picks it up again, so a
//! restarted watcher neither forgets the incidents that count toward an escalation nor
//! reports a finding or an escalation a second time. The caller stores it; this module
//! does no I/O.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use gpuvet_model::results::Lane;
use serde::{Deserialize, Serialize};

// The finding vocabulary is re-exported here because the policy's callers take its
// findings and hand it observations.
use crate::finding::{CheckFamily, RuntimeCheck};
pub use crate::finding::{GpuId, RuntimeFinding, Severity, XidObservation};
use crate::xid::{self, XidInfo};

/// The policy's knobs. The defaults are documented with their reasons.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyConfig {
    /// GPUs on the node; `None`: the GPUs registered or seen so far.
    pub gpu_count: Option<usize>,
    /// Lines closer than this are one incident (60 s: a driver repeats a line for the
    /// same fault within seconds; a fault that comes back after a minute is a repeat).
    pub incident_gap_ms: u64,
    /// "At once" for the node-wide rule (60 s: the ranks of one job fail within
    /// seconds of each other).
    pub spread_window_ms: u64,
    /// Share of the node's GPUs that makes an XID node-wide (docs/reference.md, "XID
    /// rules": the same XID on different GPUs at once points to the workload; half, and
    /// at least 2).
    pub spread_min_fraction: f64,
    /// An incident is decided once quiet this long (2 s).
    pub settle_ms: u64,
    /// ... or at the latest this long after it began (10 s), so a flood is reported.
    pub max_hold_ms: u64,
    /// NVML and kernel-log sightings of one XID closer than this are one (10 s: two
    /// poll periods of the 1 Hz watcher, with slack).
    pub cross_source_ms: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            gpu_count: None,
            incident_gap_ms: 60_000,
            spread_window_ms: 60_000,
            spread_min_fraction: 0.5,
            settle_ms: 2_000,
            max_hold_ms: 10_000,
            cross_source_ms: 10_000,
        }
    }
}

/// What became of an incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Held: not quiet long enough yet.
    Pending,
    /// One GPU's own incident: counts toward its escalation.
    PerGpu,
    /// Part of a node-wide burst: reported once per boot, never escalated.
    #[serde(rename = "node_wide")]
    Spread,
}

#[derive(Debug, Clone)]
struct Incident {
    start_ms: u64,
    last_ms: u64,
    count: u64,
    boot: String,
    decision: Decision,
}

/// History of one XID on one GPU, across boots.
#[derive(Debug, Default)]
struct GpuXid {
    incidents: VecDeque<Incident>,
    /// Unpaired sighting times per source, for cross-source dedup (bounded).
    unpaired: BTreeMap<String, VecDeque<u64>>,
}

/// One (GPU, XID, boot).
#[derive(Debug)]
struct Record {
    gpu: GpuId,
    first_ms: u64,
    last_ms: u64,
    count: u64,
    pid: Option<u32>,
    text: String,
    sources: BTreeSet<String>,
    emitted: bool,
    /// Escalation steps already reported.
    level: usize,
    /// The last finding emitted, refreshed by `snapshot`.
    last_finding: Option<RuntimeFinding>,
    /// Restored from a [`PolicyState`]: sightings up to this time were counted before
    /// the restart, and a log read again from its start shows them again.
    replayed_until_ms: Option<u64>,
}

impl Record {
    /// NVML's events carry no pid or text; the kernel's line does.
    fn fill_in(&mut self, obs: &XidObservation) {
        if self.pid.is_none() {
            self.pid = obs.pid;
        }
        if self.text.is_empty() {
            self.text.clone_from(&obs.text);
        }
    }
}

/// One node-wide burst of an XID in one boot.
#[derive(Debug)]
struct Episode {
    gpus: BTreeMap<String, GpuId>,
    first_ms: u64,
    last_ms: u64,
    count: u64,
    sources: BTreeSet<String>,
    finding: RuntimeFinding,
}

#[derive(Debug)]
struct Condition {
    finding: RuntimeFinding,
    reported: Severity,
}

/// Bound on the unpaired sightings remembered per (GPU, XID, source).
const MAX_UNPAIRED: usize = 256;

/// The [`PolicyState::format`] this gpuvet writes and reads.
pub const POLICY_STATE_FORMAT: u32 = 1;

/// A kernel-log line read again after a restart lands this close to its first time
/// (`/dev/kmsg` places it by the boot time, which is re-derived from `/proc/uptime`
/// with 10 ms steps). Far below [`PolicyConfig::incident_gap_ms`], so a new line
/// dropped as a replay would only have joined the last incident anyway.
pub const REPLAY_SLACK_MS: u64 = 1_000;

/// The XID and condition policy of one node. Feed it with [`XidPolicy::observe`] and
/// [`XidPolicy::observe_condition`], and call [`XidPolicy::tick`] (about once a second)
/// to collect XID findings that are due.
#[derive(Debug, Default)]
pub struct XidPolicy {
    config: PolicyConfig,
    index_to_pci: BTreeMap<u32, String>,
    pci_to_index: BTreeMap<String, u32>,
    known: BTreeSet<String>,
    history: BTreeMap<(String, u32), GpuXid>,
    records: BTreeMap<(String, u32, String), Record>,
    episodes: BTreeMap<(u32, String), Episode>,
    conditions: BTreeMap<(String, String, String), Condition>,
    /// (GPU key, XID) with an undecided incident.
    pending: BTreeSet<(String, u32)>,
    /// Grows with every change a restarted watcher would need (see
    /// [`XidPolicy::revision`]).
    revision: u64,
}

impl XidPolicy {
    pub fn new(config: PolicyConfig) -> Self {
        XidPolicy {
            config,
            ..XidPolicy::default()
        }
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// Tells the policy which GPUs the node has (from NVML), so index-only and
    /// PCI-only sightings of one GPU meet, and the node-wide rule knows the total.
    pub fn register_gpus(&mut self, gpus: &[GpuId]) {
        for g in gpus {
            if let (Some(i), Some(p)) = (g.index, &g.pci_bus_id) {
                self.index_to_pci.insert(i, p.clone());
                self.pci_to_index.insert(p.clone(), i);
            }
            let g = self.canonical(g);
            self.known.insert(g.key());
        }
    }

    /// The node's GPU count as the policy sees it.
    pub fn gpu_count(&self) -> usize {
        if let Some(n) = self.config.gpu_count {
            return n;
        }
        let seen: BTreeSet<&String> = self.history.keys().map(|(k, _)| k).collect();
        self.known.len().max(seen.len())
    }

    fn canonical(&self, gpu: &GpuId) -> GpuId {
        let mut g = gpu.clone();
        if g.pci_bus_id.is_none()
            && let Some(p) = g.index.and_then(|i| self.index_to_pci.get(&i))
        {
            g.pci_bus_id = Some(p.clone());
        }
        if g.index.is_none()
            && let Some(i) = g.pci_bus_id.as_ref().and_then(|p| self.pci_to_index.get(p))
        {
            g.index = Some(*i);
        }
        g
    }

    /// Counts one XID sighting. Findings come out of [`XidPolicy::tick`].
    pub fn observe(&mut self, obs: &XidObservation) {
        let gpu = self.canonical(&obs.gpu);
        let key = gpu.key();
        let t = obs.time_ms;
        let record_key = (key.clone(), obs.xid, obs.boot_id.clone());
        let replayed = self
            .records
            .get(&record_key)
            .and_then(|r| r.replayed_until_ms)
            .is_some_and(|until| t <= until);
        if replayed {
            // Counted before the restart: the log was read again from its start.
            return;
        }
        self.revision += 1;
        let config = &self.config;
        let gx = self.history.entry((key.clone(), obs.xid)).or_default();

        if pair_with_other_source(gx, &obs.source, t, config.cross_source_ms) {
            // The same event, seen by a second source: note it, don't count it.
            if let Some(r) = self.records.get_mut(&record_key) {
                r.sources.insert(obs.source.clone());
                r.last_ms = r.last_ms.max(t);
                r.fill_in(obs);
            }
            return;
        }

        // Join the latest incident of this GPU and XID, or start a new one.
        let gap = config.incident_gap_ms;
        let joined = match gx.incidents.back_mut() {
            Some(inc)
                if inc.boot == obs.boot_id
                    && t <= inc.last_ms.saturating_add(gap)
                    && t.saturating_add(gap) >= inc.start_ms =>
            {
                inc.count += 1;
                inc.start_ms = inc.start_ms.min(t);
                inc.last_ms = inc.last_ms.max(t);
                Some(inc.decision)
            }
            _ => None,
        };
        match joined {
            None => {
                gx.incidents.push_back(Incident {
                    start_ms: t,
                    last_ms: t,
                    count: 1,
                    boot: obs.boot_id.clone(),
                    decision: Decision::Pending,
                });
                self.pending.insert((key.clone(), obs.xid));
            }
            Some(Decision::Spread) => {
                if let Some(ep) = self.episodes.get_mut(&(obs.xid, obs.boot_id.clone())) {
                    ep.count += 1;
                    ep.last_ms = ep.last_ms.max(t);
                    ep.sources.insert(obs.source.clone());
                }
            }
            Some(_) => {}
        }
        // Keep a day of incidents (the escalation window), always the latest, and
        // every one not decided yet.
        let window = longest_window();
        while gx.incidents.len() > 1
            && gx.incidents.front().is_some_and(|i| {
                i.decision != Decision::Pending && i.last_ms.saturating_add(window) < t
            })
        {
            gx.incidents.pop_front();
        }

        let r = self.records.entry(record_key).or_insert_with(|| Record {
            gpu: gpu.clone(),
            first_ms: t,
            last_ms: t,
            count: 0,
            pid: obs.pid,
            text: obs.text.clone(),
            sources: BTreeSet::new(),
            emitted: false,
            level: 0,
            last_finding: None,
            replayed_until_ms: None,
        });
        r.gpu = gpu;
        r.count += 1;
        r.first_ms = r.first_ms.min(t);
        r.last_ms = r.last_ms.max(t);
        r.sources.insert(obs.source.clone());
        r.fill_in(obs);
    }

    /// Decides the incidents that are due at `now_ms` and returns the new findings:
    /// first sightings, escalations and node-wide bursts, ordered by first time.
    pub fn tick(&mut self, now_ms: u64) -> Vec<RuntimeFinding> {
        let mut due: Vec<(u64, String, u32, usize)> = Vec::new();
        for (key, xid) in &self.pending {
            let Some(gx) = self.history.get(&(key.clone(), *xid)) else {
                continue;
            };
            for (i, inc) in gx.incidents.iter().enumerate() {
                let quiet = now_ms >= inc.last_ms.saturating_add(self.config.settle_ms);
                let held = now_ms >= inc.start_ms.saturating_add(self.config.max_hold_ms);
                if inc.decision == Decision::Pending && (quiet || held) {
                    due.push((inc.start_ms, key.clone(), *xid, i));
                }
            }
        }
        due.sort();
        if !due.is_empty() {
            self.revision += 1;
        }
        let mut out = Vec::new();
        for (_, key, xid, i) in due {
            // An earlier decision in this tick may have settled it as part of a burst.
            let still_pending = self
                .history
                .get(&(key.clone(), xid))
                .and_then(|gx| gx.incidents.get(i))
                .is_some_and(|inc| inc.decision == Decision::Pending);
            if still_pending {
                out.extend(self.decide(&key, xid, i));
            }
        }
        self.pending.retain(|(key, xid)| {
            self.history.get(&(key.clone(), *xid)).is_some_and(|gx| {
                gx.incidents
                    .iter()
                    .any(|inc| inc.decision == Decision::Pending)
            })
        });
        out.sort_by(|a, b| {
            (a.first_ms, a.gpu.as_ref().map(GpuId::key), a.xid).cmp(&(
                b.first_ms,
                b.gpu.as_ref().map(GpuId::key),
                b.xid,
            ))
        });
        out
    }

    /// Decides everything still held (at shutdown, or at the end of a replayed log).
    pub fn flush(&mut self) -> Vec<RuntimeFinding> {
        self.tick(u64::MAX)
    }

    fn decide(&mut self, key: &str, xid: u32, i: usize) -> Option<RuntimeFinding> {
        let (start, boot) = {
            let inc = &self.history[&(key.to_owned(), xid)].incidents[i];
            (inc.start_ms, inc.boot.clone())
        };
        let cluster = self.spread_cluster(xid, &boot, start);
        let needed = spread_needed(self.gpu_count(), self.config.spread_min_fraction);
        if cluster.len() >= needed {
            return self.decide_spread(xid, &boot, &cluster);
        }
        self.history.get_mut(&(key.to_owned(), xid))?.incidents[i].decision = Decision::PerGpu;
        self.decide_per_gpu(key, xid, &boot, start)
    }

    /// The incidents of `xid` in `boot`, on any GPU, that overlap `start ± window`:
    /// (GPU key, incident index).
    fn spread_cluster(&self, xid: u32, boot: &str, start: u64) -> Vec<(String, usize)> {
        let w = self.config.spread_window_ms;
        let (lo, hi) = (start.saturating_sub(w), start.saturating_add(w));
        let mut out = Vec::new();
        for ((key, x), gx) in &self.history {
            if *x != xid {
                continue;
            }
            let hit = gx
                .incidents
                .iter()
                .enumerate()
                .rev()
                .find(|(_, inc)| inc.boot == boot && inc.start_ms <= hi && inc.last_ms >= lo)
                .map(|(j, _)| j);
            if let Some(j) = hit {
                out.push((key.clone(), j));
            }
        }
        out
    }

    fn decide_spread(
        &mut self,
        xid: u32,
        boot: &str,
        cluster: &[(String, usize)],
    ) -> Option<RuntimeFinding> {
        // The burst is decided as a group: every undecided incident in it joins.
        let mut joined_count = 0;
        let mut first = u64::MAX;
        let mut last = 0;
        let mut joined_gpus = Vec::new();
        for (key, j) in cluster {
            let Some(inc) = self
                .history
                .get_mut(&(key.clone(), xid))
                .and_then(|gx| gx.incidents.get_mut(*j))
            else {
                continue;
            };
            if inc.decision == Decision::Pending {
                inc.decision = Decision::Spread;
                joined_count += inc.count;
            }
            first = first.min(inc.start_ms);
            last = last.max(inc.last_ms);
            joined_gpus.push(key.clone());
        }
        let mut gpus = BTreeMap::new();
        let mut sources = BTreeSet::new();
        for key in &joined_gpus {
            if let Some(r) = self.records.get(&(key.clone(), xid, boot.to_owned())) {
                gpus.insert(key.clone(), r.gpu.clone());
                sources.extend(r.sources.iter().cloned());
            }
        }
        let n_gpus = self.gpu_count();
        let window_s = self.config.spread_window_ms / 1000;
        let ep_key = (xid, boot.to_owned());
        if let Some(ep) = self.episodes.get_mut(&ep_key) {
            // Later bursts of the same XID in the same boot are counted, not re-reported.
            ep.count += joined_count;
            ep.first_ms = ep.first_ms.min(first);
            ep.last_ms = ep.last_ms.max(last);
            ep.gpus.extend(gpus);
            ep.sources.extend(sources);
            return None;
        }
        let info = xid::classify(xid);
        let gpu_list: Vec<GpuId> = gpus.values().cloned().collect();
        let finding = RuntimeFinding {
            source: join_sources(&sources),
            check: RuntimeCheck::new(CheckFamily::Xid, "node_wide"),
            gpu: None,
            gpus: gpu_list.clone(),
            xid: Some(xid),
            lane: Lane::App,
            action: info.action,
            severity: Severity::from(info.action),
            first_ms: first,
            last_ms: last,
            count: joined_count,
            message: format!(
                "XID {xid} ({}) on {} of {n_gpus} GPUs within {window_s} s: the same error on \
                 many GPUs at once points to the workload, not the hardware; not escalated \
                 ({})",
                info.meaning,
                gpu_list.len(),
                info.action.describe(),
            ),
            escalated: false,
            boot_id: boot.to_owned(),
            value: None,
            threshold: None,
        };
        self.episodes.insert(
            ep_key,
            Episode {
                gpus,
                first_ms: first,
                last_ms: last,
                count: joined_count,
                sources,
                finding: finding.clone(),
            },
        );
        Some(finding)
    }

    fn decide_per_gpu(
        &mut self,
        key: &str,
        xid: u32,
        boot: &str,
        start: u64,
    ) -> Option<RuntimeFinding> {
        let info = xid::classify(xid);
        let gx = self.history.get(&(key.to_owned(), xid))?;
        // Count this GPU's own incidents (not node-wide ones) in each step's window.
        let mut level = 0;
        let mut repeats = 0;
        for (step_no, step) in info.escalations.iter().enumerate() {
            let n = gx
                .incidents
                .iter()
                .filter(|inc| {
                    inc.decision == Decision::PerGpu
                        && inc.start_ms <= start
                        && inc.start_ms.saturating_add(step.window_ms) > start
                })
                .count();
            if n >= step.min_incidents as usize {
                level = step_no + 1;
                repeats = n;
            }
        }
        let r = self
            .records
            .get_mut(&(key.to_owned(), xid, boot.to_owned()))?;
        if r.emitted && level <= r.level {
            return None;
        }
        r.emitted = true;
        r.level = level;
        let f = per_gpu_finding(&info, r, boot, level, repeats);
        r.last_finding = Some(f.clone());
        Some(f)
    }

    /// Dedups a health condition per (check, GPU, boot): the first sighting is returned,
    /// later ones only add to the count, unless the severity rises (then the updated
    /// finding is returned again).
    pub fn observe_condition(&mut self, finding: RuntimeFinding) -> Option<RuntimeFinding> {
        let mut finding = finding;
        if let Some(g) = finding.gpu.as_ref() {
            finding.gpu = Some(self.canonical(g));
        }
        let key = (
            finding.check.to_string(),
            finding.gpu.as_ref().map(GpuId::key).unwrap_or_default(),
            finding.boot_id.clone(),
        );
        match self.conditions.get_mut(&key) {
            None => {
                self.revision += 1;
                self.conditions.insert(
                    key,
                    Condition {
                        reported: finding.severity,
                        finding: finding.clone(),
                    },
                );
                Some(finding)
            }
            Some(c) => {
                let f = &mut c.finding;
                f.count += finding.count;
                f.first_ms = f.first_ms.min(finding.first_ms);
                f.last_ms = f.last_ms.max(finding.last_ms);
                f.value = finding.value.or(f.value);
                if finding.severity > c.reported {
                    self.revision += 1;
                    f.severity = finding.severity;
                    f.action = f.action.max(finding.action);
                    f.lane = finding.lane;
                    f.message = finding.message;
                    f.threshold = finding.threshold;
                    c.reported = f.severity;
                    Some(f.clone())
                } else {
                    None
                }
            }
        }
    }

    /// Every finding reported so far, with its counts brought up to date (for metrics
    /// and for the final record at the app's exit).
    pub fn snapshot(&self) -> Vec<RuntimeFinding> {
        let mut out = Vec::new();
        for ((_, _, boot), r) in &self.records {
            if let Some(f) = &r.last_finding {
                let mut f = f.clone();
                f.count = r.count;
                f.first_ms = r.first_ms;
                f.last_ms = r.last_ms;
                f.source = join_sources(&r.sources);
                f.boot_id = boot.clone();
                out.push(f);
            }
        }
        for ep in self.episodes.values() {
            let mut f = ep.finding.clone();
            f.count = ep.count;
            f.first_ms = ep.first_ms;
            f.last_ms = ep.last_ms;
            f.gpus = ep.gpus.values().cloned().collect();
            f.source = join_sources(&ep.sources);
            out.push(f);
        }
        out.extend(self.conditions.values().map(|c| c.finding.clone()));
        out.sort_by(|a, b| (a.first_ms, &a.check).cmp(&(b.first_ms, &b.check)));
        out
    }

    /// Grows whenever the policy changes in a way a restarted watcher needs to know:
    /// a counted sighting, a decision, a new or worse condition. A condition seen again
    /// at the same severity only adds to its count and leaves it alone, so a lasting
    /// condition does not ask for a save on every poll.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Everything a restarted watcher needs, as plain data: every incident kept for
    /// escalation (pending ones too), what was reported per (GPU, XID, boot), the
    /// node-wide bursts and the health conditions. GPU registrations are left out:
    /// the sources report their inventory again.
    pub fn export(&self) -> PolicyState {
        let mut incidents = Vec::new();
        for ((gpu_key, xid), gx) in &self.history {
            incidents.extend(gx.incidents.iter().map(|inc| IncidentState {
                gpu_key: gpu_key.clone(),
                xid: *xid,
                boot_id: inc.boot.clone(),
                start_ms: inc.start_ms,
                last_ms: inc.last_ms,
                count: inc.count,
                decision: inc.decision,
            }));
        }
        let records = self
            .records
            .iter()
            .map(|((_, xid, boot), r)| XidRecordState {
                gpu: r.gpu.clone(),
                xid: *xid,
                boot_id: boot.clone(),
                first_ms: r.first_ms,
                last_ms: r.last_ms,
                count: r.count,
                pid: r.pid,
                text: r.text.clone(),
                sources: r.sources.clone(),
                emitted: r.emitted,
                level: r.level,
                finding: r.last_finding.clone(),
            })
            .collect();
        let node_wide = self
            .episodes
            .iter()
            .map(|((xid, boot), ep)| NodeWideState {
                xid: *xid,
                boot_id: boot.clone(),
                gpus: ep.gpus.values().cloned().collect(),
                first_ms: ep.first_ms,
                last_ms: ep.last_ms,
                count: ep.count,
                sources: ep.sources.clone(),
                finding: ep.finding.clone(),
            })
            .collect();
        let conditions = self
            .conditions
            .values()
            .map(|c| ConditionState {
                finding: c.finding.clone(),
                reported: c.reported,
            })
            .collect();
        PolicyState {
            format: POLICY_STATE_FORMAT,
            incidents,
            records,
            node_wide,
            conditions,
        }
    }

    /// Picks up a state [`XidPolicy::export`] wrote before a restart; call it on a new
    /// policy, before the first sighting. `now_ms` and `boot_id` (this boot's) decide
    /// what has expired:
    ///
    /// - incidents older than the longest escalation window (24 h) are dropped, as a
    ///   running policy drops them, unless still undecided: those are decided at the
    ///   next tick, so an incident seen just before a crash is still reported;
    /// - what was reported in this boot is kept for the whole boot (the dedup is per
    ///   boot, and `/dev/kmsg` still holds the boot's old lines);
    /// - what was reported in an earlier boot is kept while it is younger than the
    ///   window, then dropped: a new boot reports afresh, though its incidents still
    ///   count toward escalation, as they do in a running policy.
    ///
    /// Sightings up to the last one counted before the restart (plus
    /// [`REPLAY_SLACK_MS`]) are taken for replays of the log and not counted again.
    /// A state of another [`PolicyState::format`] restores nothing.
    pub fn restore(&mut self, state: PolicyState, now_ms: u64, boot_id: &str) -> Restored {
        let mut restored = Restored::default();
        if state.format != POLICY_STATE_FORMAT {
            restored.unknown_format = Some(state.format);
            return restored;
        }
        let window = longest_window();
        let young = |last_ms: u64| last_ms.saturating_add(window) >= now_ms;
        let keep = |boot: &str, last_ms: u64| boot == boot_id || young(last_ms);
        for inc in state.incidents {
            if inc.decision != Decision::Pending && !young(inc.last_ms) {
                restored.expired += 1;
                continue;
            }
            if inc.decision == Decision::Pending {
                self.pending.insert((inc.gpu_key.clone(), inc.xid));
            }
            self.history
                .entry((inc.gpu_key, inc.xid))
                .or_default()
                .incidents
                .push_back(Incident {
                    start_ms: inc.start_ms,
                    last_ms: inc.last_ms,
                    count: inc.count,
                    boot: inc.boot_id,
                    decision: inc.decision,
                });
            restored.incidents += 1;
        }
        for r in state.records {
            if !keep(&r.boot_id, r.last_ms) {
                restored.expired += 1;
                continue;
            }
            self.records.insert(
                (r.gpu.key(), r.xid, r.boot_id),
                Record {
                    gpu: r.gpu,
                    first_ms: r.first_ms,
                    last_ms: r.last_ms,
                    count: r.count,
                    pid: r.pid,
                    text: r.text,
                    sources: r.sources,
                    emitted: r.emitted,
                    level: r.level,
                    last_finding: r.finding,
                    replayed_until_ms: Some(r.last_ms.saturating_add(REPLAY_SLACK_MS)),
                },
            );
            restored.records += 1;
        }
        for ep in state.node_wide {
            if !keep(&ep.boot_id, ep.last_ms) {
                restored.expired += 1;
                continue;
            }
            self.episodes.insert(
                (ep.xid, ep.boot_id),
                Episode {
                    gpus: ep.gpus.into_iter().map(|g| (g.key(), g)).collect(),
                    first_ms: ep.first_ms,
                    last_ms: ep.last_ms,
                    count: ep.count,
                    sources: ep.sources,
                    finding: ep.finding,
                },
            );
            restored.node_wide += 1;
        }
        for c in state.conditions {
            if !keep(&c.finding.boot_id, c.finding.last_ms) {
                restored.expired += 1;
                continue;
            }
            let key = (
                c.finding.check.to_string(),
                c.finding.gpu.as_ref().map(GpuId::key).unwrap_or_default(),
                c.finding.boot_id.clone(),
            );
            self.conditions.insert(
                key,
                Condition {
                    finding: c.finding,
                    reported: c.reported,
                },
            );
            restored.conditions += 1;
        }
        restored
    }
}

/// What [`XidPolicy::restore`] took over and what it let expire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    pub incidents: usize,
    pub records: usize,
    pub node_wide: usize,
    pub conditions: usize,
    /// Entries older than the escalation window (of earlier boots), dropped.
    pub expired: usize,
    /// The state was written in this format, which this gpuvet does not read.
    pub unknown_format: Option<u32>,
}

/// The policy's memory, as plain data to store between runs ([`XidPolicy::export`],
/// [`XidPolicy::restore`]). Its JSON is what the store keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyState {
    /// [`POLICY_STATE_FORMAT`] when written; another value is not restored.
    pub format: u32,
    #[serde(default)]
    pub incidents: Vec<IncidentState>,
    #[serde(default)]
    pub records: Vec<XidRecordState>,
    #[serde(default)]
    pub node_wide: Vec<NodeWideState>,
    #[serde(default)]
    pub conditions: Vec<ConditionState>,
}

impl Default for PolicyState {
    fn default() -> Self {
        PolicyState {
            format: POLICY_STATE_FORMAT,
            incidents: Vec::new(),
            records: Vec::new(),
            node_wide: Vec::new(),
            conditions: Vec::new(),
        }
    }
}

/// One incident of one XID on one GPU: what escalation counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncidentState {
    /// [`GpuId::key`].
    pub gpu_key: String,
    pub xid: u32,
    #[serde(default)]
    pub boot_id: String,
    pub start_ms: u64,
    pub last_ms: u64,
    pub count: u64,
    pub decision: Decision,
}

/// One (GPU, XID, boot): its counts and what was reported about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct XidRecordState {
    pub gpu: GpuId,
    pub xid: u32,
    #[serde(default)]
    pub boot_id: String,
    pub first_ms: u64,
    pub last_ms: u64,
    pub count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub sources: BTreeSet<String>,
    /// A finding was reported.
    pub emitted: bool,
    /// Escalation steps reported (0: none).
    pub level: usize,
    /// The last finding reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<RuntimeFinding>,
}

/// One node-wide burst of an XID in one boot, reported once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeWideState {
    pub xid: u32,
    #[serde(default)]
    pub boot_id: String,
    pub gpus: Vec<GpuId>,
    pub first_ms: u64,
    pub last_ms: u64,
    pub count: u64,
    #[serde(default)]
    pub sources: BTreeSet<String>,
    pub finding: RuntimeFinding,
}

/// One health condition per (check, GPU, boot), and the severity reported for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionState {
    pub finding: RuntimeFinding,
    pub reported: Severity,
}

/// The longest escalation window in the catalog: how long incidents are kept.
fn longest_window() -> u64 {
    xid::XID_CATALOG
        .iter()
        .flat_map(|e| e.escalations.iter().map(|s| s.window_ms))
        .max()
        .unwrap_or(xid::ESCALATION_WINDOW_MS)
}

/// GPUs needed for the node-wide rule: `fraction` of the node, and at least 2 (one GPU
/// is never "many").
fn spread_needed(gpu_count: usize, fraction: f64) -> usize {
    let n = (gpu_count as f64 * fraction).ceil() as usize;
    n.max(2)
}

/// Pairs a sighting with an unpaired one from a different source within `window`;
/// otherwise remembers it as unpaired. Returns whether it paired (a duplicate).
fn pair_with_other_source(gx: &mut GpuXid, source: &str, t: u64, window: u64) -> bool {
    for times in gx.unpaired.values_mut() {
        while times.front().is_some_and(|&f| f.saturating_add(window) < t) {
            times.pop_front();
        }
    }
    let other = gx
        .unpaired
        .iter_mut()
        .find(|(s, times)| s.as_str() != source && times.iter().any(|&f| f.abs_diff(t) <= window));
    if let Some((_, times)) = other {
        if let Some(pos) = times.iter().position(|&f| f.abs_diff(t) <= window) {
            times.remove(pos);
        }
        return true;
    }
    let own = gx.unpaired.entry(source.to_owned()).or_default();
    if own.len() == MAX_UNPAIRED {
        own.pop_front();
    }
    own.push_back(t);
    false
}

fn join_sources(sources: &BTreeSet<String>) -> String {
    sources
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("+")
}

fn per_gpu_finding(
    info: &XidInfo,
    r: &Record,
    boot: &str,
    level: usize,
    repeats: usize,
) -> RuntimeFinding {
    let xid = info.xid;
    let (action, lane) = match level.checked_sub(1).and_then(|l| info.escalations.get(l)) {
        Some(step) => (step.action, step.lane),
        None => (info.action, info.lane),
    };
    let what = if info.is_known() {
        format!("XID {xid} on {}: {}", r.gpu, info.meaning)
    } else {
        format!("unknown XID {xid} on {}", r.gpu)
    };
    let pid = r.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
    let driver_text = if r.text.is_empty() {
        String::new()
    } else {
        format!(" (driver: \"{}\")", r.text)
    };
    let message = match level.checked_sub(1).and_then(|l| info.escalations.get(l)) {
        Some(step) => format!(
            "{what}{pid}; {repeats} incidents on this GPU within {} h (threshold {}): \
             escalated from \"{}\" to \"{}\"{driver_text}",
            step.window_ms / 3_600_000,
            step.min_incidents,
            info.action.describe(),
            step.action.describe(),
        ),
        None => format!("{what}{pid}; {}{driver_text}", info.action.describe()),
    };
    RuntimeFinding {
        source: join_sources(&r.sources),
        check: RuntimeCheck::xid(),
        gpu: Some(r.gpu.clone()),
        gpus: Vec::new(),
        xid: Some(xid),
        lane,
        action,
        severity: Severity::from(action),
        first_ms: r.first_ms,
        last_ms: r.last_ms,
        count: r.count,
        message,
        escalated: level > 0,
        boot_id: boot.to_owned(),
        value: None,
        threshold: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_needs_half_and_at_least_two() {
        assert_eq!(spread_needed(8, 0.5), 4);
        assert_eq!(spread_needed(1, 0.5), 2);
        assert_eq!(spread_needed(3, 0.5), 2);
    }

    #[test]
    fn gpu_ids_meet_after_registration() {
        let mut p = XidPolicy::default();
        p.register_gpus(&[GpuId::new(Some(3), Some("00000000:3B:00.0"))]);
        assert_eq!(p.canonical(&GpuId::index(3)).key(), "0000:3b:00");
        assert_eq!(p.canonical(&GpuId::pci("0000:3b:00")).index, Some(3));
    }
}
