//! What a run produces: per-entity measurements and verdicts, per-check results, and
//! the report of one run on one node.
//!
//! These types are the interface between the runner and every report, the store and
//! the web page; their serialized form is API.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::catalog::{CheckName, Direction};
use crate::inventory::DeviceFacts;

/// The team that owns a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Lane {
    /// GPU compute, XID, ECC, PCIe: the host/hardware team.
    Host,
    /// Links, NICs, rails, connectivity: the network team.
    Network,
    /// Rendezvous, missing node, config mismatch, scheduling: the platform team.
    Platform,
    /// The workload's own error.
    App,
}

impl Lane {
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Host => "host",
            Lane::Network => "network",
            Lane::Platform => "platform",
            Lane::App => "app",
        }
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict on one entity (GPU, node, pair, rail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Verdict {
    Ok,
    /// Works, but worse than its peers or its baseline.
    Slow,
    /// Error, hang, zero work or a wrong result.
    Faulty,
    Skipped,
    /// Works, and its peers and baseline pass it, but it is worse than its own record
    /// (`gpuvet.history`): see [`crate::history`]. Fails its check only where the
    /// config says so.
    Degraded,
}

impl Verdict {
    pub const ALL: [Verdict; 5] = [
        Verdict::Ok,
        Verdict::Slow,
        Verdict::Faulty,
        Verdict::Skipped,
        Verdict::Degraded,
    ];

    /// Its name in reports and the API (`degraded`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Slow => "slow",
            Verdict::Faulty => "faulty",
            Verdict::Skipped => "skipped",
            Verdict::Degraded => "degraded",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a measurement is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Entity {
    Device {
        node: String,
        index: u32,
    },
    Node {
        node: String,
    },
    /// Two nodes measured together (a `_2` check), or the link or path between them.
    NodePair {
        a: String,
        b: String,
    },
}

impl Entity {
    /// The node the entity belongs to; for a pair, its first node.
    pub fn node(&self) -> &str {
        match self {
            Entity::Device { node, .. } | Entity::Node { node } => node,
            Entity::NodePair { a, .. } => a,
        }
    }
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entity::Device { node, index } => write!(f, "{node}/dev{index}"),
            Entity::Node { node } => f.write_str(node),
            Entity::NodePair { a, b } => write!(f, "{a}<->{b}"),
        }
    }
}

impl std::str::FromStr for Entity {
    type Err = std::convert::Infallible;

    /// Reads [`Entity`]'s `Display` back: `a<->b` is a pair, `node/devN` a device, any
    /// other text a node. (Node names are host names, which hold neither `<->` nor `/`.)
    fn from_str(text: &str) -> Result<Entity, Self::Err> {
        if let Some((a, b)) = text.split_once("<->") {
            return Ok(Entity::NodePair {
                a: a.to_owned(),
                b: b.to_owned(),
            });
        }
        // Only the digits `Display` writes, so that the text reads back unchanged.
        if let Some((node, digits)) = text.rsplit_once("/dev")
            && let Ok(index) = digits.parse::<u32>()
            && index.to_string() == digits
        {
            return Ok(Entity::Device {
                node: node.to_owned(),
                index,
            });
        }
        Ok(Entity::Node {
            node: text.to_owned(),
        })
    }
}

/// An [`Entity`] kept as the text people read (`node-2/dev3`), where an API shows it
/// that way: `#[serde(with = "entity_as_text")]`.
pub mod entity_as_text {
    use super::Entity;

    pub fn serialize<S: serde::Serializer>(
        entity: &Entity,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_str(entity)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Entity, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        Ok(text
            .parse()
            .unwrap_or_else(|never: std::convert::Infallible| match never {}))
    }
}

/// One entity's measurement for one check, as a backend reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Measurement {
    pub entity: Entity,
    /// The headline metric (see the check's `MetricSpec`); `None` when it failed.
    pub value: Option<f64>,
    /// Per-iteration values of the headline metric, for the noise estimate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<f64>,
    /// An error that stopped the measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Set when the result of the work was checked and found wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrong_result: Option<String>,
    /// Secondary metrics and parameters (sizes, algbw, wall time, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, f64>,
}

impl Measurement {
    pub fn ok(entity: Entity, value: f64, samples: Vec<f64>) -> Self {
        Measurement {
            entity,
            value: Some(value),
            samples,
            error: None,
            wrong_result: None,
            extra: BTreeMap::new(),
        }
    }

    pub fn failed(entity: Entity, error: impl Into<String>) -> Self {
        Measurement {
            entity,
            value: None,
            samples: Vec::new(),
            error: Some(error.into()),
            wrong_result: None,
            extra: BTreeMap::new(),
        }
    }

    pub fn with_extra(mut self, key: &str, value: f64) -> Self {
        self.extra.insert(key.to_owned(), value);
        self
    }
}

/// The numbers behind a verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Evidence {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Median of the other entities of the same check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_median: Option<f64>,
    /// Worst acceptable value from the baseline (a floor or a ceiling, by direction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// Which baseline that was: the config's, the fleet's or the built-in table's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_source: Option<crate::fleet::BaselineSource>,
    /// How far from the peer median counts as slow, in percent (tolerance + noise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold_pct: Option<f64>,
    /// Measured noise (coefficient of variation of the samples), in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise_pct: Option<f64>,
    /// How far from the peer median this entity is, in percent (positive is worse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deficit_pct: Option<f64>,
    /// True when the entity was a suspect and this is its second measurement.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remeasured: bool,
    /// The entity against its own record (`gpuvet.history`), where it has enough of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::history::HistoryEvidence>,
}

/// A measurement with its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EntityResult {
    pub entity: Entity,
    pub verdict: Verdict,
    pub lane: Lane,
    /// Why the verdict is what it is, for a person.
    pub reason: String,
    pub evidence: Evidence,
    pub measurement: Measurement,
}

impl EntityResult {
    /// Whether this verdict fails its check: slow, faulty, or degraded where the config
    /// makes a degradation fail (`gpuvet.history.fail_on_degraded`).
    pub fn fails(&self) -> bool {
        match self.verdict {
            Verdict::Slow | Verdict::Faulty => true,
            Verdict::Degraded => self.evidence.history.as_ref().is_some_and(|h| h.fails),
            Verdict::Ok | Verdict::Skipped => false,
        }
    }
}

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CheckStatus {
    Passed,
    /// At least one entity is slow or faulty.
    Failed,
    /// The check's scope cannot exist in this group; never a pass.
    Skipped,
    /// The overall timeout expired while this check ran.
    TimedOut,
    /// An earlier check used up the overall timeout.
    NotRun,
    /// gpuvet cannot run this check yet on this backend; never a pass.
    NotImplemented,
}

impl CheckStatus {
    pub const ALL: [CheckStatus; 6] = [
        CheckStatus::Passed,
        CheckStatus::Failed,
        CheckStatus::Skipped,
        CheckStatus::TimedOut,
        CheckStatus::NotRun,
        CheckStatus::NotImplemented,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Passed => "passed",
            CheckStatus::Failed => "failed",
            CheckStatus::Skipped => "skipped",
            CheckStatus::TimedOut => "timed_out",
            CheckStatus::NotRun => "not_run",
            CheckStatus::NotImplemented => "not_implemented",
        }
    }

    /// Whether this status makes the run fail.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            CheckStatus::Failed | CheckStatus::TimedOut | CheckStatus::NotRun
        )
    }
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The headline metric of a check, as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricInfo {
    pub name: String,
    pub unit: String,
    pub direction: Direction,
}

impl MetricInfo {
    /// The headline metric of `check`, from the catalog.
    pub fn of(check: CheckName) -> Self {
        let metric = check.spec().metric;
        MetricInfo {
            name: metric.name.to_owned(),
            unit: metric.unit.to_owned(),
            direction: metric.direction,
        }
    }
}

/// The result of one check on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckResult {
    pub name: CheckName,
    pub status: CheckStatus,
    /// Why it was skipped, not run, not implemented or timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub duration_secs: f64,
    pub metric: MetricInfo,
    /// Parameters of the work (sizes, dtype, iterations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entities: Vec<EntityResult>,
}

impl CheckResult {
    /// A check that produced no measurements, with the reason.
    pub fn without_work(name: CheckName, status: CheckStatus, reason: impl Into<String>) -> Self {
        CheckResult {
            reason: Some(reason.into()),
            ..CheckResult::judged(name, status, Vec::new())
        }
    }

    /// A check's judged entities with the status they give, before any parameters,
    /// reason or duration are added.
    pub fn judged(name: CheckName, status: CheckStatus, entities: Vec<EntityResult>) -> Self {
        CheckResult {
            name,
            status,
            reason: None,
            duration_secs: 0.0,
            metric: MetricInfo::of(name),
            params: BTreeMap::new(),
            entities,
        }
    }

    /// Entities whose verdict fails the check ([`EntityResult::fails`]).
    pub fn findings(&self) -> impl Iterator<Item = &EntityResult> {
        self.entities.iter().filter(|e| e.fails())
    }

    /// Entities worse than their own record that do not fail the check: told, not acted
    /// on.
    pub fn degraded(&self) -> impl Iterator<Item = &EntityResult> {
        self.entities
            .iter()
            .filter(|e| e.verdict == Verdict::Degraded && !e.fails())
    }

    /// The median of the headline values that were measured.
    pub fn median_value(&self) -> Option<f64> {
        let values: Vec<f64> = self
            .entities
            .iter()
            .filter_map(|e| e.measurement.value)
            .collect();
        crate::stats::median(&values)
    }
}

/// How the whole run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Outcome {
    /// Every check passed or was skipped for a reason.
    Passed,
    /// No check failed, but some requested checks could not run here yet.
    Incomplete,
    /// A check failed, timed out, or could not run because time ran out.
    Failed,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Passed, Outcome::Incomplete, Outcome::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Incomplete => "incomplete",
            Outcome::Failed => "failed",
        }
    }

    /// The outcome of a set of check results.
    pub fn of(checks: &[CheckResult]) -> Self {
        if checks.iter().any(|c| c.status.is_failure()) {
            Outcome::Failed
        } else if checks
            .iter()
            .any(|c| c.status == CheckStatus::NotImplemented)
        {
            Outcome::Incomplete
        } else {
            Outcome::Passed
        }
    }
}

/// One device as the backend sees it. Stored with its [`DeviceFacts`] among its
/// `details`, under [`keys`](crate::inventory::keys), as reports always have been.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredDevice", into = "StoredDevice")]
pub struct DeviceInfo {
    pub index: u32,
    pub name: String,
    pub memory_bytes: Option<u64>,
    /// What the backend knows of it, typed: identity, software, health readings.
    pub facts: DeviceFacts,
    /// Other facts, free-form (a cpu device's threads, a sim device's speed, why NVML
    /// could not read it).
    pub details: BTreeMap<String, String>,
}

/// A device as a report stores it: every fact a detail.
#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = DeviceInfo))]
struct StoredDevice {
    index: u32,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory_bytes: Option<u64>,
    /// Facts about the device (driver version, UUID, health readings, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    details: BTreeMap<String, String>,
}

impl From<StoredDevice> for DeviceInfo {
    fn from(mut stored: StoredDevice) -> DeviceInfo {
        DeviceInfo {
            facts: DeviceFacts::take_from(&mut stored.details),
            index: stored.index,
            name: stored.name,
            memory_bytes: stored.memory_bytes,
            details: stored.details,
        }
    }
}

impl From<DeviceInfo> for StoredDevice {
    fn from(device: DeviceInfo) -> StoredDevice {
        let mut details = device.details;
        details.extend(device.facts.to_details());
        StoredDevice {
            index: device.index,
            name: device.name,
            memory_bytes: device.memory_bytes,
            details,
        }
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for DeviceInfo {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <StoredDevice as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for DeviceInfo {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("DeviceInfo")
    }
}

/// The report of one sanity-check run on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunReport {
    /// This report's own id ([`crate::ids::new_id`]), given when the node keeps the
    /// report: storing or sending it twice stores it once. Empty in reports made before
    /// ids existed, and in reports still being put together.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub report_id: String,
    pub gpuvet_version: String,
    pub job_id: String,
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub attempt: u32,
    pub node: String,
    pub instance: String,
    pub backend: String,
    pub devices: Vec<DeviceInfo>,
    /// Unix time in milliseconds when the run started.
    pub started_at_ms: u64,
    pub duration_secs: f64,
    pub timeout_secs: f64,
    pub outcome: Outcome,
    pub checks: Vec<CheckResult>,
    /// Set when the checks ran across a group of nodes: who took part, and the first
    /// error when a node never joined, crashed or stopped answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupSummary>,
    /// What the run was started with, its secrets removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<RunContext>,
    /// The conclusion, in words for people, when the run failed: what the verdict
    /// block, `explain`, the pages and events say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<crate::diagnosis::Diagnosis>,
    /// Set when this node failed `K` of its last `M` runs across jobs, this one
    /// included (`gpuvet.repeat_offender`), as its own store tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_offender: Option<crate::offenders::RepeatOffender>,
}

/// What a run was started with, its secrets removed before it is kept anywhere: for
/// the team a fault is handed to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunContext {
    /// The config file's path, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    /// The config file as written (`null` without one).
    #[serde(default)]
    pub config: serde_json::Value,
    /// The variables of gpuvet, the launcher, NCCL, CUDA and PyTorch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// Slurm's job, step and node, when the run was part of a Slurm job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<crate::slurm::SlurmNames>,
}

impl RunContext {
    /// Removes secrets again, by [`crate::redact`]'s rules and `known` secrets: what
    /// a receiver does with a context it did not make (a node of an older gpuvet may
    /// have sent one unredacted). Redacting twice changes nothing.
    pub fn redact(&mut self, known: &[&str]) {
        if let Some(path) = &mut self.config_file {
            *path = crate::redact::redact_text(path, known).into_owned();
        }
        crate::redact::redact_json(&mut self.config, known);
        self.environment = crate::redact::redact_environment(&self.environment, known);
    }
}

impl std::str::FromStr for Outcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| {
                format!("unknown outcome `{s}`; expected `passed`, `incomplete` or `failed`")
            })
    }
}

/// The group a multi-node report covers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupSummary {
    /// Node names by rank; a rank that never joined is named `rank N`. On a member's
    /// copy of a large group's verdict, only the nodes its findings and incidents name
    /// (see `size`).
    pub nodes: Vec<String>,
    /// The group's size, set only where `nodes` does not list every node: a member's
    /// copy of a large group's verdict, which would otherwise make every member of the
    /// group read every node's name (the coordinator's report lists them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<usize>,
    /// The earliest real failure of a node, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<GroupIncident>,
    /// Nodes that only waited on the first error (timeouts, lost peers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondary: Vec<GroupIncident>,
    /// Later failures that may or may not follow from the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_failures: Vec<GroupIncident>,
    /// What the coordinator recorded for the group's timeline; only on its own report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<crate::record::RecordedTimeline>,
}

impl GroupSummary {
    /// How many nodes the group has, whether or not `nodes` lists them all.
    pub fn node_count(&self) -> usize {
        self.size.unwrap_or(self.nodes.len())
    }
}

/// What went wrong on one rank of a group, as its report keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum IncidentKind {
    /// Never joined the rendezvous.
    NeverJoined,
    /// Its connection closed or broke without a goodbye.
    Crashed,
    /// Stopped answering (hung, stopped, cut off).
    Unresponsive,
    /// Failed on its own: an error, a wrong result, an XID.
    Failed,
    /// Gave up waiting, e.g. a collective that never completed.
    TimedOut,
    /// An error caused by a peer, e.g. a connection reset on the data plane.
    PeerError,
}

impl IncidentKind {
    pub const ALL: [IncidentKind; 6] = [
        IncidentKind::NeverJoined,
        IncidentKind::Crashed,
        IncidentKind::Unresponsive,
        IncidentKind::Failed,
        IncidentKind::TimedOut,
        IncidentKind::PeerError,
    ];

    /// Its name in reports and the API (`never_joined`).
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentKind::NeverJoined => "never_joined",
            IncidentKind::Crashed => "crashed",
            IncidentKind::Unresponsive => "unresponsive",
            IncidentKind::Failed => "failed",
            IncidentKind::TimedOut => "timed_out",
            IncidentKind::PeerError => "peer_error",
        }
    }

    /// What a person reads (`never joined`).
    pub fn words(self) -> &'static str {
        match self {
            IncidentKind::NeverJoined => "never joined",
            IncidentKind::Crashed => "crashed",
            IncidentKind::Unresponsive => "unresponsive",
            IncidentKind::Failed => "failed",
            IncidentKind::TimedOut => "timed out",
            IncidentKind::PeerError => "peer error",
        }
    }

    /// Whether the node itself was lost: it never came, died, or stopped answering.
    pub fn lost_the_node(self) -> bool {
        matches!(
            self,
            IncidentKind::NeverJoined | IncidentKind::Crashed | IncidentKind::Unresponsive
        )
    }
}

impl fmt::Display for IncidentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node's failure on the group's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupIncident {
    pub rank: u32,
    pub node: String,
    pub kind: IncidentKind,
    pub lane: Lane,
    /// Unix milliseconds on the coordinator's clock.
    pub time_ms: u64,
    pub detail: String,
}

impl RunReport {
    /// Every entity that fails its check, across checks, in check order.
    pub fn findings(&self) -> impl Iterator<Item = (&CheckResult, &EntityResult)> {
        self.checks
            .iter()
            .flat_map(|check| check.findings().map(move |f| (check, f)))
    }

    /// Every degraded entity that does not fail its check, in check order.
    pub fn degraded(&self) -> impl Iterator<Item = (&CheckResult, &EntityResult)> {
        self.checks
            .iter()
            .flat_map(|check| check.degraded().map(move |f| (check, f)))
    }

    /// The lane of the first problem: the first finding, else the first check that
    /// failed without a finding (a timeout).
    pub fn first_lane(&self) -> Option<Lane> {
        if let Some((_, finding)) = self.findings().next() {
            return Some(finding.lane);
        }
        self.checks
            .iter()
            .find(|c| c.status.is_failure())
            .map(|c| c.name.spec().lane)
    }

    /// A one-line summary, e.g. "2 passed, 1 failed, 1 skipped".
    pub fn summary(&self) -> String {
        let order = [
            CheckStatus::Passed,
            CheckStatus::Failed,
            CheckStatus::TimedOut,
            CheckStatus::NotRun,
            CheckStatus::Skipped,
            CheckStatus::NotImplemented,
        ];
        let parts: Vec<String> = order
            .iter()
            .filter_map(|status| {
                let n = self.checks.iter().filter(|c| c.status == *status).count();
                (n > 0).then(|| format!("{n} {}", status.as_str().replace('_', " ")))
            })
            .collect();
        if parts.is_empty() {
            "no checks".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: CheckName, status: CheckStatus) -> CheckResult {
        CheckResult::without_work(name, status, "test")
    }

    #[test]
    fn outcome_never_counts_skips_or_gaps_as_failures_nor_gaps_as_passes() {
        use CheckStatus::*;
        let cases = [
            (vec![Passed, Skipped], Outcome::Passed),
            (vec![Passed, NotImplemented], Outcome::Incomplete),
            (vec![Passed, Failed, NotImplemented], Outcome::Failed),
            (vec![TimedOut, NotRun], Outcome::Failed),
            (vec![], Outcome::Passed),
        ];
        for (statuses, expected) in cases {
            let checks: Vec<_> = statuses
                .iter()
                .map(|s| check(CheckName::GemmFlops, *s))
                .collect();
            assert_eq!(Outcome::of(&checks), expected, "{statuses:?}");
        }
    }

    #[test]
    fn an_entitys_text_reads_back_as_the_entity() {
        for entity in [
            Entity::Device {
                node: "gpu-07.rack2".into(),
                index: 12,
            },
            Entity::Node { node: "n0".into() },
            Entity::NodePair {
                a: "n1".into(),
                b: "n2".into(),
            },
        ] {
            assert_eq!(entity.to_string().parse::<Entity>(), Ok(entity.clone()));
        }
        // A name that only looks like a device is a node.
        for text in ["host/devx", "host/dev07", "host/dev-1"] {
            assert_eq!(
                text.parse::<Entity>(),
                Ok(Entity::Node { node: text.into() })
            );
        }
    }

    #[test]
    fn incident_kinds_keep_their_stored_names() {
        for kind in IncidentKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(serde_json::from_str::<IncidentKind>(&json).unwrap(), kind);
            assert_eq!(kind.words(), kind.as_str().replace('_', " "));
        }
    }

    #[test]
    fn entity_display_names_node_and_device() {
        let device = Entity::Device {
            node: "n0".into(),
            index: 3,
        };
        assert_eq!(device.to_string(), "n0/dev3");
        assert_eq!(device.node(), "n0");
        assert_eq!(Entity::Node { node: "n1".into() }.to_string(), "n1");
        let pair = Entity::NodePair {
            a: "n1".into(),
            b: "n2".into(),
        };
        assert_eq!(pair.to_string(), "n1<->n2");
        assert_eq!(pair.node(), "n1");
        assert_eq!(
            serde_json::to_string(&pair).unwrap(),
            r#"{"kind":"node_pair","a":"n1","b":"n2"}"#
        );
    }
}
