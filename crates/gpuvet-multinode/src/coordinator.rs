//! The coordinator's side of a group run: wait for the group, run each check across
//! it, judge, name the first error, and hand every node the verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gpuvet_backend::with_causes;
use gpuvet_control::{
    Coordinator, CoordinatorEvent, Diagnosis, Incident, IncidentKind, MemberEventKind, MemberState,
    diagnose,
};
use gpuvet_model::analysis::{JudgePolicy, Limit, Tolerances};
use gpuvet_model::catalog::{CheckName, Scope};
use gpuvet_model::events::Attempt;
use gpuvet_model::inventory::{ExpectedInventory, NodeInventory, keys};
use gpuvet_model::inventory_check::judge_inventories;
use gpuvet_model::pairing::PairingMode;
use gpuvet_model::record::{CheckWindow, MemberClock, MemberRecord, RecordedTimeline};
use gpuvet_model::results::{
    CheckResult, CheckStatus, Entity, EntityResult, GroupIncident, GroupSummary, Outcome,
    RunReport, Verdict,
};
use gpuvet_model::time::unix_now_ms;
use gpuvet_runner::{human_duration, scope_skip_reason};

use gpuvet_control::auth::to_hex;

use crate::checks::{connectivity, native, node_scope, pairs, whole_group};
use crate::conversation::{Answers, Conversation, GroupEvent, Member, reachable_from_peers};
use crate::wire::Directive;

/// How the group's checks run and are judged.
#[derive(Debug, Clone)]
pub struct GroupPlan {
    /// The coordinator's attempt; the report carries its job and attempt.
    pub attempt: Attempt,
    pub checks: Vec<CheckName>,
    /// For all checks together, counted from when the group is complete.
    pub timeout: Duration,
    /// How long to wait for every rank to join.
    pub rendezvous_timeout: Duration,
    /// Allowed deficit against the peer median, per check.
    pub tolerance: Tolerances,
    pub baselines: BTreeMap<CheckName, Limit>,
    /// What `inventory_consistency` compares every node with.
    pub expected_inventory: ExpectedInventory,
    pub pairing: PairingMode,
    pub collective_bytes: Option<u64>,
    pub started_at_ms: u64,
}

/// The longest one directive may run: a collective takes about a second, a local check
/// its own time; bounded so one stuck piece of work cannot use the whole timeout.
pub(crate) const MAX_DIRECTIVE: Duration = Duration::from_secs(120);
/// The least tolerance of checks between nodes that share one machine (see
/// [`CheckContext::between_nodes_policy`]).
pub const SHARED_HOST_TOLERANCE: f64 = 0.5;
/// Time on top of a directive's budget for its answer to arrive.
pub(crate) const ANSWER_GRACE: Duration = Duration::from_secs(3);

/// Runs the plan across the group the coordinator serves and returns the group's
/// report. Every node that is still connected gets the verdict; when a node was lost
/// or a check overran, the others are told to abort instead, since some may still be
/// waiting on it.
pub fn run_group(
    coordinator: &Coordinator,
    plan: &GroupPlan,
    observe: &mut dyn FnMut(GroupEvent<'_>),
) -> RunReport {
    let started = Instant::now();
    let membership = coordinator.wait_for_members(started + plan.rendezvous_timeout);
    let expected = coordinator.expected_nodes() as usize;
    let data_session = to_hex(&coordinator.data_session());
    let mut conversation = Conversation::new(coordinator, data_session, observe);
    conversation.observe(GroupEvent::Rendezvous {
        joined: membership.joined.len(),
        expected,
    });
    conversation.drain_events();
    let mut joined = membership.joined;
    joined.sort_by_key(|m| m.rank);
    for info in &joined {
        match Member::from_info(info) {
            Ok(member) => conversation.members.push(member),
            Err(why) => {
                let why = with_causes(&why);
                let incident = Incident {
                    rank: info.rank,
                    node: Some(info.node.clone()),
                    time_ms: info.joined_ms,
                    kind: IncidentKind::Failed {
                        lane: gpuvet_model::results::Lane::Platform,
                    },
                    detail: why.clone(),
                };
                conversation.lost.insert(info.rank, why);
                conversation.record(incident);
            }
        }
    }
    unique_names(&mut conversation.members);
    reachable_from_peers(&mut conversation.members, &joined);

    let deadline = Instant::now() + plan.timeout;
    let total = plan.checks.len();
    let mut results = Vec::with_capacity(total);
    let mut overran = false;
    let mut windows = Vec::with_capacity(total);
    for (index, &name) in plan.checks.iter().enumerate() {
        conversation.observe(GroupEvent::CheckStarted { index, total, name });
        conversation.drain_events();
        conversation.current_check = Some(name);
        let check_started = Instant::now();
        let began_ms = unix_now_ms();
        let mut result = if let Some(reason) = why_not_run(&conversation, overran) {
            CheckResult::without_work(name, CheckStatus::NotRun, reason)
        } else if let Some(reason) = skip_reason(&conversation, name) {
            CheckResult::without_work(name, CheckStatus::Skipped, reason)
        } else if let Some(reason) = not_implemented(&conversation, name) {
            CheckResult::without_work(name, CheckStatus::NotImplemented, reason)
        } else {
            let mut context = CheckContext {
                conversation: &mut conversation,
                plan,
                deadline,
            };
            match name.spec().scope {
                Scope::EachDevice | Scope::EachNode => node_scope::run(&mut context, name),
                // A group of one node is its devices: its runner does the collective.
                Scope::WholeGroup if context.conversation.members.len() == 1 => {
                    node_scope::run(&mut context, name)
                }
                Scope::NodePairs => pairs::run(&mut context, name),
                Scope::WholeGroup => whole_group::run(&mut context, name),
                Scope::AllNodePairs => connectivity::run(&mut context),
                Scope::AllNodes => {
                    let nodes: Vec<NodeInventory> = context
                        .conversation
                        .members
                        .iter()
                        .map(|m| NodeInventory::from_devices(&m.node, &m.info.devices))
                        .collect();
                    judge_inventories(&nodes, &plan.expected_inventory)
                }
            }
        };
        result.duration_secs = check_started.elapsed().as_secs_f64();
        windows.push(CheckWindow {
            check: name,
            began_ms,
            ended_ms: unix_now_ms(),
            status: result.status,
        });
        if result.status == CheckStatus::TimedOut {
            overran = true;
        }
        conversation.observe(GroupEvent::CheckFinished {
            index,
            total,
            result: &result,
        });
        results.push(result);
    }
    conversation.current_check = None;
    conversation.drain_events();

    let mut summary = summarize(&conversation, expected);
    summary.timeline = Some(record_timeline(&conversation, plan, expected, windows));
    let mut report = RunReport {
        report_id: String::new(),
        gpuvet_version: env!("CARGO_PKG_VERSION").to_owned(),
        job_id: plan.attempt.job_id.clone(),
        attempt: plan.attempt.attempt,
        node: plan.attempt.node.clone(),
        instance: plan.attempt.instance.clone(),
        backend: conversation
            .members
            .first()
            .map_or_else(String::new, |m| m.info.backend.clone()),
        // The last use of the members' devices (the timeline has copied its own): moved,
        // each saying which node it is on, since every node has a device 0.
        devices: conversation
            .members
            .iter_mut()
            .flat_map(|m| {
                let node = m.node.clone();
                std::mem::take(&mut m.info.devices)
                    .into_iter()
                    .map(move |mut device| {
                        device.details.insert(keys::NODE.to_owned(), node.clone());
                        device
                    })
            })
            .collect(),
        started_at_ms: plan.started_at_ms,
        duration_secs: started.elapsed().as_secs_f64(),
        timeout_secs: plan.timeout.as_secs_f64(),
        outcome: outcome(&results, &summary),
        checks: results,
        group: Some(summary),
        context: None,
        diagnosis: None,
        repeat_offender: None,
    };
    if conversation.lost.is_empty() && !overran {
        let finish = Directive::Finish {
            report: Box::new(for_members(&mut report)),
        };
        // Encoded once for every member; one that cannot be reached now learns the
        // end from the coordinator's goodbye.
        let _ = coordinator.broadcast(&finish);
    } else {
        coordinator.abort(&abort_reason(&report));
    }
    report
}

/// Waits until every member still alive has said goodbye (or dropped), or `until`
/// passes, so none misses the verdict when the coordinator then shuts down. A member
/// that stopped answering is not waited for: it would not say goodbye either.
pub fn wait_for_goodbyes(coordinator: &Coordinator, until: Instant) {
    let mut connected = coordinator
        .members()
        .iter()
        .filter(|m| m.state == MemberState::Alive)
        .count();
    while connected > 0 {
        match coordinator.recv_event(until) {
            Some(CoordinatorEvent::Member(event))
                if matches!(
                    event.kind,
                    MemberEventKind::Left { .. }
                        | MemberEventKind::Crashed { .. }
                        | MemberEventKind::Unresponsive { .. }
                ) =>
            {
                connected -= 1;
            }
            Some(_) => {}
            None => return,
        }
    }
}

/// The largest verdict sent to members in full; beyond it they get the findings only.
pub(crate) const MEMBER_VERDICT_BYTES: usize = 256 << 10;

/// The parameter of a check in a member's verdict that holds its findings only.
pub(crate) const FINDINGS_ONLY: &str = "entities";

/// The verdict as members get it: without the group's device list (each member knows
/// its own), and whole while it fits [`MEMBER_VERDICT_BYTES`], so a member's store
/// holds the same samples as the coordinator's. A large group's report does not fit
/// (1024 nodes: about 2 MB, parsed by 1024 agents at once, which starved the
/// coordinator's heartbeat acks past the agents' 5 s deadline on a 2-core test
/// machine): members then get it without per-iteration samples, and beyond that the
/// findings only, while the full report stays on the coordinator.
pub(crate) fn for_members(report: &mut RunReport) -> RunReport {
    // The devices, and the timeline (it stays with the coordinator's report, the one
    // kept for it), are set aside while the rest is measured and copied.
    let devices = std::mem::take(&mut report.devices);
    let timeline = report
        .group
        .as_mut()
        .and_then(|group| group.timeline.take());
    let verdict = verdict_for_members(report);
    report.devices = devices;
    if let Some(group) = report.group.as_mut() {
        group.timeline = timeline;
    }
    verdict
}

/// Without its samples an entity still takes more JSON than this (its entity, verdict,
/// lane, reason, evidence and measurement, all empty, are over 150 bytes): a group with
/// more entities than `MEMBER_VERDICT_BYTES / MIN_ENTITY_BYTES` cannot fit even
/// without samples, and its entities are not copied to find that out.
const MIN_ENTITY_BYTES: usize = 64;

fn verdict_for_members(report: &mut RunReport) -> RunReport {
    let size = |verdict: &RunReport| {
        let mut counted = ByteCount(0);
        serde_json::to_writer(&mut counted, verdict).map_or(usize::MAX, |()| counted.0)
    };
    if size(report) <= MEMBER_VERDICT_BYTES {
        return report.clone();
    }
    // Everything but the entities is copied; then the entities that go along.
    let entities: Vec<Vec<EntityResult>> = report
        .checks
        .iter_mut()
        .map(|check| std::mem::take(&mut check.entities))
        .collect();
    let mut verdict = report.clone();
    for (check, entities) in report.checks.iter_mut().zip(entities) {
        check.entities = entities;
    }
    for check in &mut verdict.checks {
        check.params.insert(
            "samples".to_owned(),
            "on the coordinator's report".to_owned(),
        );
    }
    let without_samples = |entity: &EntityResult| {
        let mut entity = entity.clone();
        entity.measurement.samples.clear();
        entity
    };
    let total: usize = report.checks.iter().map(|check| check.entities.len()).sum();
    if total.saturating_mul(MIN_ENTITY_BYTES) <= MEMBER_VERDICT_BYTES {
        for (check, all) in verdict.checks.iter_mut().zip(&report.checks) {
            check.entities = all.entities.iter().map(without_samples).collect();
        }
        if size(&verdict) <= MEMBER_VERDICT_BYTES {
            return verdict;
        }
    }
    for (check, all) in verdict.checks.iter_mut().zip(&report.checks) {
        check.entities = all
            .entities
            .iter()
            .filter(|e| e.verdict != Verdict::Ok)
            .map(without_samples)
            .collect();
        let total = all.entities.len();
        if check.entities.len() < total {
            check.params.insert(
                FINDINGS_ONLY.to_owned(),
                format!(
                    "findings only ({} of {total}); the coordinator's report has all",
                    check.entities.len()
                ),
            );
        }
    }
    elide_unnamed_nodes(&mut verdict);
    verdict
}

/// Counts what is written to it: a verdict's size without building its JSON.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Keeps in the group's node list only the nodes the findings and incidents name
/// (with the group's size beside them): otherwise each of N members reads N names, and
/// a group of 4,096 in one process spent half its CPU on them.
fn elide_unnamed_nodes(verdict: &mut RunReport) {
    let mut named: BTreeSet<&str> = BTreeSet::new();
    for (_, finding) in verdict.findings() {
        match &finding.entity {
            Entity::NodePair { a, b } => named.extend([a.as_str(), b.as_str()]),
            entity => {
                named.insert(entity.node());
            }
        }
    }
    let Some(group) = verdict.group.as_ref() else {
        return;
    };
    let incidents = group
        .first_error
        .iter()
        .chain(&group.secondary)
        .chain(&group.other_failures);
    named.extend(incidents.map(|incident| incident.node.as_str()));
    let kept: Vec<String> = group
        .nodes
        .iter()
        .filter(|node| named.contains(node.as_str()))
        .cloned()
        .collect();
    if let Some(group) = verdict.group.as_mut() {
        group.size = Some(group.nodes.len());
        group.nodes = kept;
    }
}

/// What a check handler works with.
pub(crate) struct CheckContext<'s, 'a> {
    pub conversation: &'s mut Conversation<'a>,
    pub plan: &'s GroupPlan,
    /// The overall deadline.
    pub deadline: Instant,
}

impl CheckContext<'_, '_> {
    /// The budget of the next directive and when its answers are due.
    pub(crate) fn budget(&self) -> (u64, Instant) {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let budget = remaining.min(MAX_DIRECTIVE);
        let due = (Instant::now() + budget + ANSWER_GRACE).min(self.deadline + ANSWER_GRACE);
        (crate::time::millis(budget), due)
    }

    /// The thresholds a check between nodes is judged by, and the `tolerance` param
    /// that says so when the machine widened them. Nodes that share one machine share
    /// its cores, and collectives over gpuvet's data plane between them measure its
    /// scheduler as much as their links: healthy loopback pairs differed up to 2× on
    /// the 2-core VM (more with a busy loop beside them), so there a pair or ring is
    /// slow only beyond [`SHARED_HOST_TOLERANCE`]. A rate-limited link between
    /// namespaces is still named (96 % below its peers). A backend's own transport
    /// (NCCL, the sim's) keeps the configured tolerance.
    pub(crate) fn between_nodes_policy(
        &self,
        name: CheckName,
    ) -> (JudgePolicy, Option<(String, String)>) {
        let mut policy = JudgePolicy {
            tolerance: self.plan.tolerance.of(name),
            limit: self.plan.baselines.get(&name).copied(),
        };
        if !self.shared_host() || native::applies(self.conversation, name) {
            return (policy, None);
        }
        policy.tolerance = policy.tolerance.max(SHARED_HOST_TOLERANCE);
        let param = format!(
            "{:.0}% (the nodes share one machine)",
            policy.tolerance * 100.0
        );
        (policy, Some(("tolerance".to_owned(), param)))
    }

    /// Whether members share one machine: they then take turns, since measuring at the
    /// same time would measure each other's load, not their own hardware.
    pub(crate) fn shared_host(&self) -> bool {
        let mut seen = std::collections::HashSet::new();
        self.conversation
            .members
            .iter()
            .filter(|m| !m.info.host_id.is_empty())
            .any(|m| !seen.insert(m.info.host_id.as_str()))
    }

    /// Sends the orders and waits for every answer until `due`. `Err` carries the
    /// check's result when a member was lost or time ran out (the others' errors are
    /// then recorded as secondary).
    pub(crate) fn ask_all(
        &mut self,
        name: CheckName,
        orders: Vec<(u32, Directive)>,
        due: Instant,
    ) -> Result<Answers, Box<CheckResult>> {
        let answers = self.conversation.ask(orders, due);
        self.conversation.record_secondary(&answers, |_| None);
        if answers.missing.is_empty() {
            Ok(answers)
        } else {
            Err(Box::new(self.interrupted(name, answers.timed_out)))
        }
    }

    /// The result for a check that ran out of time or lost a member, with what it did
    /// manage to judge.
    pub(crate) fn interrupted(&self, name: CheckName, timed_out: bool) -> CheckResult {
        if timed_out {
            CheckResult::without_work(
                name,
                CheckStatus::TimedOut,
                format!(
                    "the overall timeout of {} expired before every node answered",
                    human_duration(self.plan.timeout)
                ),
            )
        } else {
            CheckResult::without_work(name, CheckStatus::Failed, lost_line(self.conversation))
        }
    }
}

fn lost_line(conversation: &Conversation<'_>) -> String {
    let lost: Vec<String> = conversation
        .lost
        .iter()
        .map(|(rank, why)| format!("rank {rank} ({}): {why}", conversation.node_name(*rank)))
        .collect();
    format!("a node was lost: {}", lost.join("; "))
}

fn why_not_run(conversation: &Conversation<'_>, overran: bool) -> Option<String> {
    if overran {
        return Some("the overall timeout expired before this check started".to_owned());
    }
    (!conversation.lost.is_empty()).then(|| lost_line(conversation))
}

fn skip_reason(conversation: &Conversation<'_>, name: CheckName) -> Option<String> {
    let devices = conversation
        .members
        .iter()
        .map(|m| m.info.devices.len())
        .min()
        .unwrap_or(0);
    scope_skip_reason(name, conversation.members.len(), devices)
}

/// Collectives between nodes run over the TCP data plane for the cpu backend, and over
/// the backends' own transport (NCCL) for the checks it runs; the data plane would
/// misreport a GPU's figures, so the other collectives are not run on GPUs.
fn not_implemented(conversation: &Conversation<'_>, name: CheckName) -> Option<String> {
    let scope = name.spec().scope;
    let host_network = matches!(
        name,
        CheckName::PytorchGloo2 | CheckName::NetworkConnectivity
    );
    if !matches!(scope, Scope::NodePairs | Scope::WholeGroup)
        || host_network
        || native::applies(conversation, name)
    {
        return None;
    }
    let other = conversation
        .members
        .iter()
        .find(|m| m.info.backend != "cpu")?;
    if let Some((a, b, gpu)) = native::shared_gpu(&conversation.members)
        && native::NATIVE_CHECKS.contains(&name)
    {
        return Some(format!(
            "`{name}` cannot run: {a} and {b} drive the same GPU `{gpu}` (nodes on one \
             machine), and NCCL cannot make one GPU two ranks"
        ));
    }
    let why = if !other.info.spans_nodes {
        format!(
            "its `{}` backend has no transport between nodes (NCCL did not load)",
            other.info.backend
        )
    } else {
        "another member's backend has none, and the nodes must use the same one".to_owned()
    };
    Some(format!("`{name}` cannot run on {}: {why}", other.node))
}

fn unique_names(members: &mut [Member]) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for member in members.iter() {
        *seen.entry(member.node.clone()).or_default() += 1;
    }
    for member in members.iter_mut() {
        if seen[&member.node] > 1 {
            member.node = format!("{}#{}", member.node, member.rank);
        }
    }
}

fn outcome(results: &[CheckResult], summary: &GroupSummary) -> Outcome {
    match Outcome::of(results) {
        Outcome::Passed | Outcome::Incomplete if summary.first_error.is_some() => Outcome::Failed,
        outcome => outcome,
    }
}

fn summarize(conversation: &Conversation<'_>, expected: usize) -> GroupSummary {
    let nodes = (0..expected as u32)
        .map(|rank| conversation.node_name(rank))
        .collect();
    let to_group = |incident: &Incident| GroupIncident {
        rank: incident.rank,
        node: incident
            .node
            .clone()
            .unwrap_or_else(|| conversation.node_name(incident.rank)),
        kind: (&incident.kind).into(),
        lane: incident.lane(),
        time_ms: incident.time_ms,
        detail: incident.detail.clone(),
    };
    match diagnose(&conversation.incidents) {
        Diagnosis::Healthy => GroupSummary {
            size: None,
            nodes,
            first_error: None,
            secondary: Vec::new(),
            other_failures: Vec::new(),
            timeline: None,
        },
        Diagnosis::FirstError {
            first,
            secondary,
            other_failures,
        } => GroupSummary {
            size: None,
            nodes,
            first_error: Some(to_group(&first)),
            secondary: secondary.iter().map(to_group).collect(),
            other_failures: other_failures.iter().map(to_group).collect(),
            timeline: None,
        },
        Diagnosis::Unexplained { incidents } => GroupSummary {
            size: None,
            nodes,
            first_error: None,
            secondary: incidents.iter().map(to_group).collect(),
            other_failures: Vec::new(),
            timeline: None,
        },
    }
}

/// Every rank's clock and spans, and the checks' windows, for the group's timeline.
fn record_timeline(
    conversation: &Conversation<'_>,
    plan: &GroupPlan,
    expected: usize,
    checks: Vec<CheckWindow>,
) -> RecordedTimeline {
    let members = (0..expected as u32)
        .map(|rank| MemberRecord {
            rank,
            node: conversation.node_name(rank),
            clock: conversation
                .coordinator
                .clock_offset(rank)
                .map(|clock| MemberClock {
                    offset_ns: clock.offset_ns,
                    uncertainty_ns: clock.round_trip_ns / 2,
                    samples: clock.samples,
                }),
            spans: conversation.spans.get(&rank).cloned().unwrap_or_default(),
            devices: conversation
                .member(rank)
                .map(|m| m.info.devices.clone())
                .unwrap_or_default(),
        })
        .collect();
    RecordedTimeline {
        coordinator: plan.attempt.node.clone(),
        members,
        checks,
    }
}

/// One line for agents that are told to abort: the first error, else the first failure.
fn abort_reason(report: &RunReport) -> String {
    if let Some(first) = report.group.as_ref().and_then(|g| g.first_error.as_ref()) {
        return format!(
            "the group failed; first error: rank {} ({}) {}: {}",
            first.rank, first.node, first.kind, first.detail
        );
    }
    match report.checks.iter().find(|c| c.status.is_failure()) {
        Some(check) => format!(
            "the group failed: {} {}: {}",
            check.name,
            check.status,
            check.reason.as_deref().unwrap_or("")
        ),
        None => "the group's run ended early".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::results::{DeviceInfo, Entity, EntityResult, Evidence, Lane, Measurement};

    fn report(nodes: usize) -> RunReport {
        let entity = |i: usize, verdict| {
            let entity = Entity::Node {
                node: format!("node-{i}"),
            };
            EntityResult {
                entity: entity.clone(),
                verdict,
                lane: Lane::Host,
                reason: "a reason of a typical length for an entity result".to_owned(),
                evidence: Evidence::default(),
                measurement: Measurement::ok(entity, 1.0, vec![1.0; 20]),
            }
        };
        let mut check = CheckResult::without_work(CheckName::AllReduce1, CheckStatus::Failed, "x");
        check.entities = (0..nodes)
            .map(|i| entity(i, if i == 3 { Verdict::Slow } else { Verdict::Ok }))
            .collect();
        RunReport {
            report_id: String::new(),
            gpuvet_version: "0".to_owned(),
            job_id: "j".to_owned(),
            attempt: 1,
            node: "node-0".to_owned(),
            instance: "i".to_owned(),
            backend: "cpu".to_owned(),
            devices: vec![
                DeviceInfo {
                    index: 0,
                    name: "cpu".to_owned(),
                    memory_bytes: None,
                    facts: Default::default(),
                    details: Default::default(),
                };
                nodes
            ],
            started_at_ms: 0,
            duration_secs: 1.0,
            timeout_secs: 60.0,
            outcome: Outcome::Failed,
            checks: vec![check],
            group: None,
            context: None,
            diagnosis: None,
            repeat_offender: None,
        }
    }

    #[test]
    fn members_get_a_small_group_whole_with_its_samples_but_without_devices() {
        let verdict = for_members(&mut report(8));
        assert!(verdict.devices.is_empty());
        assert_eq!(verdict.checks[0].entities.len(), 8);
        assert_eq!(verdict.checks[0].entities[0].measurement.samples.len(), 20);
        assert!(!verdict.checks[0].params.contains_key("samples"));
    }

    #[test]
    fn members_of_a_mid_sized_group_get_every_entity_without_samples() {
        // 20 samples a node make 1024 nodes too large; without them it fits.
        let verdict = for_members(&mut report(1024));
        let check = &verdict.checks[0];
        assert_eq!(check.entities.len(), 1024);
        assert!(check.entities[0].measurement.samples.is_empty());
        assert_eq!(check.params["samples"], "on the coordinator's report");
        assert!(serde_json::to_vec(&verdict).unwrap().len() <= MEMBER_VERDICT_BYTES);
    }

    #[test]
    fn an_entity_without_samples_takes_more_json_than_the_bound_assumes() {
        let entity = Entity::Node {
            node: String::new(),
        };
        let smallest = EntityResult {
            entity: entity.clone(),
            verdict: Verdict::Ok,
            lane: Lane::Host,
            reason: String::new(),
            evidence: Evidence::default(),
            measurement: Measurement::ok(entity, 0.0, Vec::new()),
        };
        let bytes = serde_json::to_vec(&smallest).unwrap().len();
        assert!(bytes > MIN_ENTITY_BYTES, "{bytes}");
    }

    #[test]
    fn the_coordinators_report_keeps_everything_members_do_not_get() {
        let mut full = report(4096);
        full.group = Some(GroupSummary {
            nodes: (0..4096).map(|i| format!("node-{i}")).collect(),
            ..GroupSummary::default()
        });
        let before = full.clone();
        let verdict = for_members(&mut full);
        assert_eq!(verdict.checks[0].entities.len(), 1);
        assert_eq!(full, before);
    }

    #[test]
    fn members_of_a_large_group_get_the_findings_only() {
        let verdict = for_members(&mut report(4096));
        let check = &verdict.checks[0];
        assert_eq!(check.entities.len(), 1);
        assert_eq!(check.entities[0].verdict, Verdict::Slow);
        assert!(check.params["entities"].starts_with("findings only (1 of 4096)"));
        assert!(serde_json::to_vec(&verdict).unwrap().len() < MEMBER_VERDICT_BYTES);
    }

    /// A member of a large group puts its own results back into its copy of the
    /// verdict (its store keeps them, and its GPUs' records grow); another node's stay
    /// out, and nothing changes a verdict that fits.
    #[test]
    fn a_member_of_a_large_group_keeps_its_own_results() {
        let full = report(4096);
        let own_result = |node: usize| {
            let mut own = full.checks[0].clone();
            own.entities
                .retain(|e| e.entity.to_string() == format!("node-{node}"));
            own
        };
        let verdict = for_members(&mut full.clone());
        let kept = crate::agent::with_own_entities(verdict, &[own_result(5)]);
        let nodes: Vec<String> = kept.checks[0]
            .entities
            .iter()
            .map(|e| format!("{} {}", e.entity, e.verdict.as_str()))
            .collect();
        assert_eq!(nodes, ["node-3 slow", "node-5 ok"]);
        assert_eq!(
            kept.checks[0].params[FINDINGS_ONLY],
            "findings only (1 of 4096); the coordinator's report has all; this node's own 1 added"
        );
        // Its own finding is not added twice.
        let verdict = for_members(&mut full.clone());
        let kept = crate::agent::with_own_entities(verdict, &[own_result(3)]);
        assert_eq!(kept.checks[0].entities.len(), 1);
        assert!(!kept.checks[0].params[FINDINGS_ONLY].contains("added"));

        let mut small = report(8);
        let verdict = for_members(&mut small);
        let whole = verdict.clone();
        assert_eq!(
            crate::agent::with_own_entities(verdict, &[own_result(5)]),
            whole
        );
    }

    fn incident(rank: u32) -> GroupIncident {
        GroupIncident {
            rank,
            node: format!("node-{rank}"),
            kind: gpuvet_model::results::IncidentKind::Crashed,
            lane: Lane::Host,
            time_ms: 0,
            detail: "gone".to_owned(),
        }
    }

    #[test]
    fn members_of_a_large_group_read_only_the_nodes_its_findings_and_incidents_name() {
        let mut full = report(4096);
        full.group = Some(GroupSummary {
            nodes: (0..4096).map(|i| format!("node-{i}")).collect(),
            first_error: Some(incident(9)),
            secondary: vec![incident(700)],
            ..GroupSummary::default()
        });
        let group = for_members(&mut full).group.unwrap();
        // Rank order; node-3 is the slow finding.
        assert_eq!(group.nodes, ["node-3", "node-9", "node-700"]);
        assert_eq!(group.size, Some(4096));
        assert_eq!(group.node_count(), 4096);

        // A group that fits keeps every name, and no size beside them.
        let mut small = report(8);
        small.group = Some(GroupSummary {
            nodes: (0..8).map(|i| format!("node-{i}")).collect(),
            ..GroupSummary::default()
        });
        let group = for_members(&mut small).group.unwrap();
        assert_eq!(group.nodes.len(), 8);
        assert_eq!(group.size, None);
    }
}
