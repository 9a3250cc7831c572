//! The group's timeline: what every member did and what went wrong, on one clock.
//!
//! The coordinator keeps a [`RecordedTimeline`] in its report: each member's clock
//! against its own (offset and uncertainty, from the control plane's pings) and, on the
//! member's own clock, when it began and ended its part of each check. [`assemble`]
//! later joins that with the group's incidents, the checks' findings, the nodes' events
//! (the runtime check `c4d` among them) and a flight-recorder analysis, converts every
//! time to the coordinator's clock, and marks the first error and its consequences.
//! Pure: the store, a bundle or the server supply the [`JobRecord`].

use std::collections::BTreeMap;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Event, EventKind};
use gpuvet_model::node_list::fold_node_names;
use gpuvet_model::record::{FrCollective, JobRecord, RecordedTimeline};
use gpuvet_model::results::{
    CheckStatus, Entity, GroupIncident, IncidentKind, Lane, RunReport, Verdict,
};
use gpuvet_model::runtime::{RuntimeCheck, RuntimeEventDetails};
use gpuvet_model::slurm::SlurmNames;
use serde::{Deserialize, Serialize};

/// The assembled timeline of one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Timeline {
    pub job_id: String,
    pub attempt: u32,
    /// The node whose clock every time is on.
    pub clock_of: String,
    /// Each node's clock against `clock_of`.
    pub members: Vec<MemberView>,
    /// In time order.
    pub entries: Vec<Entry>,
    /// Index into `entries` of the first error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<usize>,
    /// What could not be placed exactly, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One node's clock as the timeline used it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub node: String,
    /// Its clock minus the timeline's, in milliseconds.
    pub offset_ms: f64,
    /// How far its times may be off, in milliseconds.
    pub uncertainty_ms: f64,
    /// Whether the offset was measured; an unmeasured clock is taken as the
    /// timeline's own.
    pub measured: bool,
    /// Slurm's job, step and node, when the node ran in a Slurm job: from its report's
    /// context, else from its events' details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmNames>,
}

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Entry {
    /// Unix ms on the timeline's clock.
    pub time_ms: u64,
    /// Unix ms on the node's own clock, when the time came from the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_time_ms: Option<u64>,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(flatten)]
    pub what: What,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<Lane>,
    pub role: Role,
    pub detail: String,
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum What {
    /// The node's part of a check, from `time_ms` to `until_ms`.
    Check {
        check: CheckName,
        status: CheckStatus,
        until_ms: u64,
    },
    /// A node that never joined, crashed, stopped answering, failed, timed out, or
    /// lost a peer (the control plane's incidents).
    Incident { incident: IncidentKind },
    /// A slow or faulty entity found by a check.
    Finding {
        check: CheckName,
        /// As people read it: `node-2/dev3`, `node-1<->node-2`, `node-4`.
        #[serde(with = "gpuvet_model::results::entity_as_text")]
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        entity: Entity,
        verdict: Verdict,
    },
    /// A finding of the runtime check `c4d` or of a flight-recorder analysis.
    RuntimeFinding {
        check: RuntimeCheck,
        source: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        xid: Option<u32>,
    },
    /// A deployment event (the runtime check's findings are `RuntimeFinding`s).
    Event { event: EventKind },
    /// One collective of one rank, from a flight-recorder dump.
    Collective {
        op: String,
        seq: u64,
        state: String,
        torch_rank: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until_ms: Option<u64>,
    },
}

/// An entry's place in the story.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Role {
    /// The earliest real failure.
    FirstError,
    /// Followed from the first error: a timeout, a lost peer, a check that failed
    /// once a node was lost, an action taken on the verdict.
    Consequence,
    /// A failure that may be independent of the first.
    OtherFailure,
    /// Context: what ran, and when.
    Context,
}

impl Role {
    fn is_failure(self) -> bool {
        matches!(self, Role::FirstError | Role::OtherFailure)
    }
}

/// Each node's clock, by name.
struct Clocks {
    by_node: BTreeMap<String, MemberView>,
}

impl Clocks {
    fn view(&self, node: &str) -> Option<&MemberView> {
        self.by_node.get(node)
    }

    /// A time on `node`'s clock on the timeline's; unknown nodes keep their time.
    fn convert(&self, node: &str, local_ms: u64) -> u64 {
        match self.view(node) {
            Some(view) if view.measured => {
                let shifted = local_ms as f64 - view.offset_ms;
                if shifted <= 0.0 {
                    0
                } else {
                    shifted.round() as u64
                }
            }
            _ => local_ms,
        }
    }
}

/// `listed` (indexes into the entries, in time order) as rows for people: the
/// findings of one check with one verdict, role and lane on one node (or pair) folded
/// into one row (its eight slow GPUs are one), every other entry a row of its own, and
/// the first error always alone. The terminal's `gpuvet timeline` and the timeline
/// page fold with this.
pub fn rows(timeline: &Timeline, listed: &[usize]) -> Vec<Vec<usize>> {
    let mut rows: Vec<Vec<usize>> = Vec::new();
    let mut keys: Vec<Option<RowKey<'_>>> = Vec::new();
    for &i in listed {
        let key = row_key(timeline, i);
        let found = key
            .as_ref()
            .and_then(|key| keys.iter().position(|k| k.as_ref() == Some(key)));
        match found {
            Some(at) => rows[at].push(i),
            None => {
                rows.push(vec![i]);
                keys.push(key);
            }
        }
    }
    rows
}

/// What folds findings into one row: the check, verdict, node (or pair), role, lane,
/// and the node the entry is on.
type RowKey<'a> = (CheckName, Verdict, String, Role, Option<Lane>, &'a str);

/// The folding key of a finding; `None` for every other entry and for the first error.
fn row_key(timeline: &Timeline, index: usize) -> Option<RowKey<'_>> {
    let entry = &timeline.entries[index];
    let What::Finding {
        check,
        entity,
        verdict,
    } = &entry.what
    else {
        return None;
    };
    if Some(index) == timeline.first_error {
        return None;
    }
    let owner = match entity {
        Entity::NodePair { .. } => entity.to_string(),
        _ => entity.node().to_owned(),
    };
    Some((
        *check,
        *verdict,
        owner,
        entry.role,
        entry.lane,
        entry.node.as_str(),
    ))
}

/// The detail of a row: the entities' range and what they share (`local-2/dev[1-7]
/// slow: 420 TFLOPS …`), else the first detail and the others' names.
pub fn row_detail(timeline: &Timeline, row: &[usize]) -> String {
    const ROW_ENTITIES: usize = 6;
    let entries: Vec<&Entry> = row.iter().map(|&i| &timeline.entries[i]).collect();
    let first = entries[0];
    if entries.len() == 1 {
        return first.detail.clone();
    }
    let names: Vec<String> = entries
        .iter()
        .filter_map(|e| match &e.what {
            What::Finding { entity, .. } => Some(entity.to_string()),
            _ => None,
        })
        .collect();
    // Each detail begins with its entity; what follows is the same when they agree.
    let rests: Vec<Option<&str>> = entries
        .iter()
        .zip(&names)
        .map(|(e, name)| e.detail.strip_prefix(name.as_str()))
        .collect();
    if let Some(Some(rest)) = rests.first()
        && rests.iter().all(|r| *r == Some(*rest))
    {
        return format!("{}{rest}", fold_node_names(&names, ROW_ENTITIES));
    }
    format!(
        "{} (and {} more like it: {})",
        first.detail,
        entries.len() - 1,
        fold_node_names(names.get(1..).unwrap_or_default(), ROW_ENTITIES)
    )
}

/// An event kind as people read it: `SanityCheckFailed` is `sanity check failed`.
pub fn event_words(kind: EventKind) -> String {
    let mut words = String::new();
    for (i, c) in kind.as_str().chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            words.push(' ');
        }
        words.extend(c.to_lowercase());
    }
    words
}

/// Joins everything kept about one attempt into its timeline.
pub fn assemble(record: &JobRecord) -> Timeline {
    let group_report = record.group_report();
    let recorded = group_report
        .and_then(|r| r.group.as_ref())
        .and_then(|g| g.timeline.as_ref());
    let mut notes = Vec::new();
    let clock_of = match (recorded, group_report) {
        (Some(t), _) => t.coordinator.clone(),
        (None, Some(r)) => r.node.clone(),
        (None, None) => String::new(),
    };
    let clocks = clocks(record, recorded, &clock_of, &mut notes);
    let mut entries = Vec::new();
    if let Some(recorded) = recorded {
        entries.extend(spans(recorded, &clocks));
    } else if let Some(report) = group_report {
        entries.extend(spans_of_single(report));
    }
    let mut first_incident = None;
    if let Some(group) = group_report.and_then(|r| r.group.as_ref()) {
        if let Some(first) = &group.first_error {
            first_incident = Some(entries.len());
            entries.push(incident(first, Role::FirstError));
        }
        let waiting_role = if group.first_error.is_some() {
            Role::Consequence
        } else {
            Role::OtherFailure
        };
        entries.extend(group.secondary.iter().map(|i| incident(i, waiting_role)));
        entries.extend(
            group
                .other_failures
                .iter()
                .map(|i| incident(i, Role::OtherFailure)),
        );
    }
    if let Some(report) = group_report {
        entries.extend(findings(report, recorded, &clocks));
    }
    for event in &record.events {
        entries.extend(from_event(event, &clocks, &mut notes));
    }
    let mut order: Vec<usize> = (0..entries.len()).collect();
    // Stable: what was added first (incidents before findings, findings in check
    // order) stays first within one millisecond.
    order.sort_by_key(|&i| (entries[i].time_ms, precedence(&entries[i])));
    let first_incident = first_incident.and_then(|i| order.iter().position(|&j| j == i));
    let mut entries: Vec<Entry> = order.into_iter().map(|i| entries[i].clone()).collect();
    let first_error = first_incident.or_else(|| {
        let first = entries.iter().position(|e| e.role.is_failure())?;
        entries[first].role = Role::FirstError;
        Some(first)
    });
    if let Some(first) = first_error {
        mark_consequences(&mut entries, first, first_incident.is_some());
    }
    let mut members: BTreeMap<String, MemberView> = clocks.by_node;
    for (node, names) in slurm_names(record) {
        if let Some(member) = members.get_mut(&node) {
            member.slurm = Some(names);
        }
    }
    let members = members.into_values().collect();
    Timeline {
        job_id: record.job_id.clone(),
        attempt: record.attempt,
        clock_of,
        members,
        entries,
        first_error,
        notes,
    }
}

/// Each node's Slurm names: its reports' (the last one's), else its events' (`slurm` in
/// their details).
fn slurm_names(record: &JobRecord) -> BTreeMap<String, SlurmNames> {
    let mut by_node = BTreeMap::new();
    for event in &record.events {
        if let Some(names) = SlurmNames::from_details(&event.event.details) {
            by_node.insert(event.attempt.node.clone(), names);
        }
    }
    for report in &record.reports {
        if let Some(names) = report.context.as_ref().and_then(|c| c.slurm.clone()) {
            by_node.insert(report.node.clone(), names);
        }
    }
    by_node
}

/// Within one millisecond: a failure before the checks that frame it, incidents first.
fn precedence(entry: &Entry) -> u8 {
    match (&entry.what, entry.role) {
        (What::Incident { .. }, Role::FirstError) => 0,
        (What::Incident { .. }, _) => 1,
        (What::Finding { .. } | What::RuntimeFinding { .. }, _) => 2,
        (What::Event { .. }, _) => 3,
        (What::Check { .. } | What::Collective { .. }, _) => 4,
    }
}

/// After a lost node (an incident), what failed later only followed from it; actions
/// on the verdict (failed starts, rebuilds) always do.
fn mark_consequences(entries: &mut [Entry], first: usize, lost_node: bool) {
    for entry in entries.iter_mut().skip(first + 1) {
        let is_action = matches!(
            entry.what,
            What::Event {
                event: EventKind::SanityCheckFailed
                    | EventKind::InstanceStartupFailed
                    | EventKind::InstanceRebuildRequested
            }
        );
        let follows_loss = lost_node && matches!(entry.what, What::Finding { .. });
        if is_action || (follows_loss && entry.role == Role::OtherFailure) {
            entry.role = Role::Consequence;
        }
    }
}

fn clocks(
    record: &JobRecord,
    recorded: Option<&RecordedTimeline>,
    clock_of: &str,
    notes: &mut Vec<String>,
) -> Clocks {
    let mut by_node = BTreeMap::new();
    if let Some(recorded) = recorded {
        for member in &recorded.members {
            let view = match member.clock {
                Some(clock) => MemberView {
                    rank: Some(member.rank),
                    node: member.node.clone(),
                    offset_ms: clock.offset_ns as f64 / 1e6,
                    uncertainty_ms: clock.uncertainty_ns as f64 / 1e6,
                    measured: true,
                    slurm: None,
                },
                None => MemberView {
                    rank: Some(member.rank),
                    node: member.node.clone(),
                    offset_ms: 0.0,
                    uncertainty_ms: 0.0,
                    measured: member.node == recorded.coordinator,
                    slurm: None,
                },
            };
            by_node.insert(member.node.clone(), view);
        }
    }
    let mut unmeasured = Vec::new();
    let nodes = record
        .reports
        .iter()
        .map(|r| &r.node)
        .chain(record.events.iter().map(|e| &e.attempt.node));
    for node in nodes {
        if by_node.contains_key(node) {
            continue;
        }
        let own = node == clock_of;
        if !own {
            unmeasured.push(node.clone());
        }
        by_node.insert(
            node.clone(),
            MemberView {
                rank: None,
                node: node.clone(),
                offset_ms: 0.0,
                uncertainty_ms: 0.0,
                measured: own,
                slurm: None,
            },
        );
    }
    if !unmeasured.is_empty() {
        notes.push(format!(
            "no clock offset was measured for {}: their times are taken as they are",
            unmeasured.join(", ")
        ));
    }
    Clocks { by_node }
}

fn spans(recorded: &RecordedTimeline, clocks: &Clocks) -> Vec<Entry> {
    let status: BTreeMap<CheckName, CheckStatus> = recorded
        .checks
        .iter()
        .map(|w| (w.check, w.status))
        .collect();
    let mut entries = Vec::new();
    for member in &recorded.members {
        for span in &member.spans {
            let view = clocks.view(&member.node);
            entries.push(Entry {
                time_ms: clocks.convert(&member.node, span.began_ms),
                local_time_ms: view.filter(|v| v.measured).map(|_| span.began_ms),
                node: member.node.clone(),
                rank: Some(member.rank),
                what: What::Check {
                    check: span.check,
                    status: status
                        .get(&span.check)
                        .copied()
                        .unwrap_or(CheckStatus::NotRun),
                    until_ms: clocks.convert(&member.node, span.ended_ms),
                },
                lane: None,
                role: Role::Context,
                detail: format!("{} on {}", span.check, member.node),
            });
        }
    }
    entries
}

/// A report without a recorded timeline (one node alone): its checks ran one after
/// another from its start, for as long as each took.
fn spans_of_single(report: &RunReport) -> Vec<Entry> {
    let mut at = report.started_at_ms as f64;
    report
        .checks
        .iter()
        .map(|check| {
            let began = at;
            at += check.duration_secs.max(0.0) * 1000.0;
            Entry {
                time_ms: began as u64,
                local_time_ms: None,
                node: report.node.clone(),
                rank: None,
                what: What::Check {
                    check: check.name,
                    status: check.status,
                    until_ms: at as u64,
                },
                lane: None,
                role: Role::Context,
                detail: format!("{} on {}", check.name, report.node),
            }
        })
        .collect()
}

fn incident(incident: &GroupIncident, role: Role) -> Entry {
    Entry {
        time_ms: incident.time_ms,
        local_time_ms: None,
        node: incident.node.clone(),
        rank: Some(incident.rank),
        what: What::Incident {
            incident: incident.kind,
        },
        lane: Some(incident.lane),
        role,
        detail: incident.detail.clone(),
    }
}

/// Each finding at the moment its node ended its part of the check (else when the
/// check ended).
fn findings(
    report: &RunReport,
    recorded: Option<&RecordedTimeline>,
    clocks: &Clocks,
) -> Vec<Entry> {
    let single_ends = spans_of_single(report);
    let mut entries = Vec::new();
    for (position, check) in report.checks.iter().enumerate() {
        for finding in check.findings() {
            let node = finding.entity.node();
            let span_end = recorded.and_then(|t| {
                let member = t.members.iter().find(|m| m.node == node)?;
                let span = member.spans.iter().find(|s| s.check == check.name)?;
                Some(clocks.convert(node, span.ended_ms))
            });
            let window_end = recorded.and_then(|t| {
                t.checks
                    .iter()
                    .find(|w| w.check == check.name)
                    .map(|w| w.ended_ms)
            });
            let single_end = match &single_ends[position].what {
                What::Check { until_ms, .. } => *until_ms,
                _ => report.started_at_ms,
            };
            entries.push(Entry {
                time_ms: span_end.or(window_end).unwrap_or(single_end),
                local_time_ms: None,
                node: node.to_owned(),
                rank: None,
                what: What::Finding {
                    check: check.name,
                    entity: finding.entity.clone(),
                    verdict: finding.verdict,
                },
                lane: Some(finding.lane),
                role: Role::OtherFailure,
                detail: format!(
                    "{} {}: {}",
                    finding.entity,
                    verdict_word(finding.verdict),
                    finding.reason
                ),
            });
        }
    }
    entries
}

pub(crate) fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Ok => "ok",
        Verdict::Slow => "slow",
        Verdict::Faulty => "faulty",
        Verdict::Skipped => "skipped",
        Verdict::Degraded => "degraded",
    }
}

fn from_event(event: &Event, clocks: &Clocks, notes: &mut Vec<String>) -> Vec<Entry> {
    let node = &event.attempt.node;
    let local = event.event.time_ms;
    let measured = clocks.view(node).is_some_and(|v| v.measured);
    let base = Entry {
        time_ms: clocks.convert(node, local),
        local_time_ms: measured.then_some(local),
        node: node.clone(),
        rank: clocks.view(node).and_then(|v| v.rank),
        what: What::Event {
            event: event.event.kind,
        },
        lane: event.event.lane,
        role: Role::Context,
        // A row that counts repeats says so: `… (×5, last …)`.
        detail: match event.repeats_note() {
            Some(note) => format!("{} ({note})", event.event.message),
            None => event.event.message.clone(),
        },
    };
    if event.event.kind != EventKind::RuntimeCheckFailed {
        return vec![base];
    }
    let Some(details) = RuntimeEventDetails::read(&event.event.details) else {
        return vec![base];
    };
    let mut entries = vec![Entry {
        what: What::RuntimeFinding {
            check: details.check.clone(),
            source: details.source.clone(),
            xid: details.xid,
        },
        role: Role::OtherFailure,
        ..base
    }];
    if details.is_flight_recorder() {
        entries.extend(collectives(&details.collectives, clocks, notes));
    }
    entries
}

/// The collectives a flight-recorder event carries, each on its node's clock.
fn collectives(list: &[serde_json::Value], clocks: &Clocks, notes: &mut Vec<String>) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut unplaced = 0usize;
    for item in list {
        let Ok(collective) = serde_json::from_value::<FrCollective>(item.clone()) else {
            unplaced += 1;
            continue;
        };
        let Some(created_ns) = collective.created_ns else {
            unplaced += 1;
            continue;
        };
        let to_ms = |ns: i64| u64::try_from(ns.max(0) / 1_000_000).unwrap_or(0);
        let node = collective
            .node
            .clone()
            .unwrap_or_else(|| format!("torch rank {}", collective.torch_rank));
        let local = to_ms(created_ns);
        entries.push(Entry {
            time_ms: clocks.convert(&node, local),
            local_time_ms: Some(local),
            node: node.clone(),
            rank: None,
            what: What::Collective {
                op: collective.op.clone(),
                seq: collective.seq,
                state: collective.state.clone(),
                torch_rank: collective.torch_rank,
                until_ms: collective
                    .completed_ns
                    .map(|ns| clocks.convert(&node, to_ms(ns))),
            },
            lane: None,
            role: Role::Context,
            detail: format!(
                "torch rank {} {} #{} {}",
                collective.torch_rank, collective.op, collective.seq, collective.state
            ),
        });
    }
    if unplaced > 0 {
        notes.push(format!(
            "{unplaced} flight-recorder collectives carry no creation time and are left off"
        ));
    }
    entries
}

impl Timeline {
    /// The first error's entry.
    pub fn first(&self) -> Option<&Entry> {
        self.first_error.and_then(|i| self.entries.get(i))
    }

    /// The earliest time on the timeline: what people read times against.
    pub fn origin_ms(&self) -> u64 {
        self.entries.first().map_or(0, |e| e.time_ms)
    }
}

/// The timeline for people, one line an entry, times from its start. Each node's part
/// of each check is shown for the nodes the first error is on (all of them are in the
/// JSON), so that a large group stays readable.
pub fn render(timeline: &Timeline) -> String {
    let origin = timeline.origin_ms();
    let mut out = format!(
        "timeline of job `{}` attempt {}, on {}'s clock, from {}\n",
        timeline.job_id,
        timeline.attempt,
        if timeline.clock_of.is_empty() {
            "the nodes'"
        } else {
            &timeline.clock_of
        },
        gpuvet_model::time::format_utc_ms(origin)
    );
    out.push_str(&clock_line(timeline));
    out.push_str(&slurm_line(timeline));
    let first_node = timeline.first().map(|f| f.node.as_str());
    let mut hidden = 0usize;
    let at = |ms: u64| format!("+{:.3} s", ms.saturating_sub(origin) as f64 / 1000.0);
    let mut listed = Vec::new();
    for (i, entry) in timeline.entries.iter().enumerate() {
        if matches!(entry.what, What::Check { .. }) && Some(entry.node.as_str()) != first_node {
            hidden += 1;
        } else {
            listed.push(i);
        }
    }
    for row in rows(timeline, &listed) {
        let entry = &timeline.entries[row[0]];
        let mark = match entry.role {
            Role::FirstError => ">>",
            Role::Consequence => " ~",
            Role::OtherFailure => " !",
            Role::Context => "  ",
        };
        let what = match &entry.what {
            What::Check {
                check,
                status,
                until_ms,
            } => format!(
                "{check} {} until {}",
                crate::diagnose::status_words(*status),
                at(*until_ms)
            ),
            What::Incident { incident } => incident.words().to_owned(),
            What::Finding { check, .. } => format!("{check} finding"),
            What::RuntimeFinding { check, .. } => format!("runtime {check}"),
            What::Event { event } => event_words(*event),
            What::Collective { op, seq, state, .. } => format!("{op} #{seq} {state}"),
        };
        let role = match entry.role {
            Role::FirstError => "FIRST ERROR ",
            Role::Consequence => "consequence ",
            _ => "",
        };
        let lane = entry
            .lane
            .map_or_else(String::new, |lane| format!("[{lane}] "));
        let detail = if matches!(entry.what, What::Check { .. }) {
            String::new()
        } else {
            format!(": {}", row_detail(timeline, &row))
        };
        out.push_str(&format!(
            "{mark} {:>10}  {:<12} {role}{lane}{what}{detail}\n",
            at(entry.time_ms),
            entry.node
        ));
    }
    if hidden > 0 {
        out.push_str(&format!(
            "({hidden} spans of other nodes' checks are in `--json`)\n"
        ));
    }
    for note in &timeline.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// The members' clocks in one line; a large group as its largest offset.
/// `slurm: job 4242 step 0 on gpu-[01-04]`: the nodes of each Slurm job and step, folded,
/// so the line stays short at any group size; empty outside Slurm.
fn slurm_line(timeline: &Timeline) -> String {
    let mut by_step: BTreeMap<(String, Option<String>, u32), Vec<&str>> = BTreeMap::new();
    for member in &timeline.members {
        if let Some(names) = &member.slurm {
            let node = names.node.as_deref().unwrap_or(&member.node);
            by_step
                .entry((
                    names.job_id.clone(),
                    names.step_id.clone(),
                    names.restart_count,
                ))
                .or_default()
                .push(node);
        }
    }
    if by_step.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = by_step
        .into_iter()
        .map(|((job, step, restarts), nodes)| {
            let step = step.map_or_else(String::new, |s| format!(" step {s}"));
            let restarts = match restarts {
                0 => String::new(),
                n => format!(" (requeued {n}×)"),
            };
            let nodes = fold_node_names(&nodes, gpuvet_model::node_list::MAX_PARTS);
            format!("job {job}{step}{restarts} on {nodes}")
        })
        .collect();
    format!("slurm: {}\n", parts.join("; "))
}

fn clock_line(timeline: &Timeline) -> String {
    let measured: Vec<&MemberView> = timeline
        .members
        .iter()
        .filter(|m| m.measured && m.node != timeline.clock_of)
        .collect();
    if measured.is_empty() {
        return String::new();
    }
    if measured.len() <= 8 {
        let parts: Vec<String> = measured
            .iter()
            .map(|m| format!("{} {:+.3} ms ±{:.3}", m.node, m.offset_ms, m.uncertainty_ms))
            .collect();
        return format!("clocks: {}\n", parts.join(", "));
    }
    let widest = measured
        .iter()
        .map(|m| m.offset_ms.abs())
        .fold(0.0, f64::max);
    let loosest = measured
        .iter()
        .map(|m| m.uncertainty_ms)
        .fold(0.0, f64::max);
    format!(
        "clocks: {} nodes, offsets up to {widest:.3} ms, each good to ±{loosest:.3} ms at worst\n",
        measured.len()
    )
}

#[cfg(test)]
pub(crate) mod tests;
