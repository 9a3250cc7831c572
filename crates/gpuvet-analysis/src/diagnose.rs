//! The conclusion of one attempt in words for people ([`Diagnosis`]): the culprit
//! and what it did, what that rests on, the team to hand it to, the next step, and the
//! other culprits. `explain` prints it, `check` and `run` print it as their verdict
//! block, and the report, events and Kubernetes Events carry it: one function makes
//! it, so they agree.
//!
//! The culprit is the timeline's first error, lifted to its node when that node failed
//! most of the checks that judged it ([`fold`](crate::fold)): eight slow GPUs and six
//! slow links of one node are one slow node.

use gpuvet_model::catalog::{CheckName, Scope};
use gpuvet_model::diagnosis::{Diagnosis, team};
use gpuvet_model::record::JobRecord;
use gpuvet_model::results::{
    CheckStatus, Entity, GroupIncident, IncidentKind, Lane, RunReport, Verdict,
};
use gpuvet_model::runtime::{FrFindingKind, RuntimeCheck, RuntimeFinding};

use crate::fold::{Folded, NodeSummary, fold, verdict_word};
use crate::timeline::{self, Entry, Role, Timeline, What};

/// The most other culprits a diagnosis keeps; the last line counts the rest.
const MOST_OTHERS: usize = 16;

/// The diagnosis of one node's report on its own (what `check` and `run` print): its
/// timeline made from the report alone.
pub fn diagnose_report(report: &RunReport) -> Option<Diagnosis> {
    let record = JobRecord {
        job_id: report.job_id.clone(),
        attempt: report.attempt,
        reports: vec![report.clone()],
        events: Vec::new(),
    };
    let timeline = timeline::assemble(&record);
    diagnose(&record, &timeline)
}

/// The diagnosis of an attempt: `None` when nothing failed.
pub fn diagnose(record: &JobRecord, timeline: &Timeline) -> Option<Diagnosis> {
    let report = record.group_report();
    let folded = report.map(fold).unwrap_or_default();
    let Some(first) = timeline.first() else {
        return report.and_then(failed_without_findings);
    };
    let summary = culprit_summary(first, &folded);
    let (headline, why, lane, next_step) = match summary {
        Some(node) => (
            format!("{} is {}", node.node, verdict_word(node.verdict)),
            node.sentence(),
            Some(node.lane),
            node_step(node, first),
        ),
        None => (
            headline(first, &folded),
            why(first, &folded),
            first.lane,
            next_step(first),
        ),
    };
    let culprit = summary.map(|n| n.node.as_str());
    Some(Diagnosis {
        headline,
        why,
        lane,
        team: lane.map_or("the platform team, to triage", team).to_owned(),
        next_step,
        others: others(report, timeline, &folded, culprit, first),
    })
}

/// The diagnosis of one finding of the runtime check on `node`, as `run` and `watch`
/// print it while the app runs: the same words `explain` later gives for it.
pub fn diagnose_runtime(node: &str, finding: &RuntimeFinding) -> Diagnosis {
    let mut why = finding.message.clone();
    if finding.count > 1 {
        why.push_str(&format!(" (seen {} times)", finding.count));
    }
    Diagnosis {
        headline: runtime_headline(node, &finding.check, finding.xid),
        why,
        lane: Some(finding.lane),
        team: team(finding.lane).to_owned(),
        next_step: runtime_step(node, &finding.check, finding.xid),
        others: Vec::new(),
    }
}

/// `node-3 had XID 79`, `the rank on node-3 never entered the collective`, `node-3:
/// ecc volatile uncorrected`.
fn runtime_headline(node: &str, check: &RuntimeCheck, xid: Option<u32>) -> String {
    if let Some(xid) = xid {
        return format!("{node} had XID {xid}");
    }
    match check.flight_recorder_kind() {
        Some(FrFindingKind::NotCompleted) => {
            format!("the rank on {node} never finished a collective its peers completed")
        }
        Some(FrFindingKind::Stalled) => "every rank stalled in one collective".to_owned(),
        Some(FrFindingKind::MissingDump) => format!("{node} wrote no flight-recorder dump"),
        Some(FrFindingKind::NeverEntered) => {
            format!("the rank on {node} never entered the collective its peers wait in")
        }
        Some(
            FrFindingKind::OpMismatch | FrFindingKind::SizeMismatch | FrFindingKind::DtypeMismatch,
        ) => "the ranks issued different collectives".to_owned(),
        None => format!("{node}: {}", words(&check.to_string().replace('.', " "))),
    }
}

/// A run that failed with no finding and no incident: checks that timed out or did not
/// run.
fn failed_without_findings(report: &RunReport) -> Option<Diagnosis> {
    let failed: Vec<String> = report
        .checks
        .iter()
        .filter(|c| c.status.is_failure())
        .map(|c| format!("{} {}", c.name, status_words(c.status)))
        .collect();
    if failed.is_empty() {
        return None;
    }
    Some(Diagnosis {
        headline: format!("{} on `{}`", failed[0], report.node),
        why: failed.join(", "),
        lane: None,
        team: "the platform team, to triage".to_owned(),
        next_step: format!(
            "read the failed checks' reasons with `gpuvet check --verbose` on `{}`",
            report.node
        ),
        others: Vec::new(),
    })
}

/// A check's status in words: `timed out`, `not run`.
pub fn status_words(status: CheckStatus) -> &'static str {
    match status {
        CheckStatus::Passed => "passed",
        CheckStatus::Failed => "failed",
        CheckStatus::Skipped => "skipped",
        CheckStatus::NotImplemented => "not implemented",
        CheckStatus::TimedOut => "timed out",
        CheckStatus::NotRun => "not run",
    }
}

/// The node summary the first error belongs to, when its node (or a node of its pair)
/// has one.
fn culprit_summary<'a>(first: &Entry, folded: &'a Folded) -> Option<&'a NodeSummary> {
    match &first.what {
        What::Finding {
            entity: Entity::NodePair { a, b },
            ..
        } => folded.node(a).or_else(|| folded.node(b)),
        What::Finding { entity, .. } => folded.node(entity.node()),
        _ => None,
    }
}

/// `rank 3 (node-3)`, or `rank 3` when that is all that is known.
pub fn rank_name(incident: &GroupIncident) -> String {
    if incident.node.is_empty() || incident.node == format!("rank {}", incident.rank) {
        format!("rank {}", incident.rank)
    } else {
        format!("rank {} ({})", incident.rank, incident.node)
    }
}

/// The culprit and what it did, when no node summary speaks for it.
fn headline(first: &Entry, folded: &Folded) -> String {
    let node = &first.node;
    match &first.what {
        What::Incident { incident } => match first.rank {
            Some(rank) if *node != format!("rank {rank}") => {
                format!("rank {rank} ({node}) {}", incident_words(*incident))
            }
            Some(rank) => format!("rank {rank} {}", incident_words(*incident)),
            None => format!("{node} {}", incident_words(*incident)),
        },
        What::Finding {
            check,
            entity,
            verdict,
        } => folded_of(folded, *check, entity).map_or_else(
            || format!("{entity} is {} in {check}", verdict_word(*verdict)),
            |f| f.headline(),
        ),
        What::RuntimeFinding { check, xid, .. } => runtime_headline(node, check, *xid),
        What::Event { event } => format!("{node}: {}", timeline::event_words(*event)),
        What::Check { check, status, .. } => {
            format!("{check} {} on {node}", status_words(*status))
        }
        What::Collective {
            op,
            seq,
            torch_rank,
            ..
        } => {
            format!("rank {torch_rank} on {node} stuck in {op} #{seq}")
        }
    }
}

/// What the first error rests on: the folded measurement of a finding, else the
/// entry's own words.
fn why(first: &Entry, folded: &Folded) -> String {
    if let What::Finding { check, entity, .. } = &first.what
        && let Some(found) = folded_of(folded, *check, entity)
    {
        return found.what.clone();
    }
    if let (What::Incident { incident }, Some(rank)) = (&first.what, first.rank) {
        return without_preamble(&first.detail, rank, &first.node, *incident);
    }
    first.detail.clone()
}

/// An incident's detail without the `rank 3 (node-3) is unresponsive: ` the headline
/// says already.
fn without_preamble(detail: &str, rank: u32, node: &str, kind: IncidentKind) -> String {
    let names = [format!("rank {rank} ({node})"), format!("rank {rank}")];
    let Some(rest) = names.iter().find_map(|n| detail.strip_prefix(n.as_str())) else {
        return detail.to_owned();
    };
    let rest = rest.trim_start();
    let rest = rest.strip_prefix("is ").unwrap_or(rest);
    match rest.strip_prefix(kind.words()) {
        Some(tail) => {
            let tail = tail.trim_start_matches([':', ' ']);
            let tail = tail
                .strip_prefix('(')
                .and_then(|t| t.strip_suffix(')'))
                .unwrap_or(tail);
            if tail.is_empty() {
                detail.to_owned()
            } else {
                tail.to_owned()
            }
        }
        None => detail.to_owned(),
    }
}

/// The folded finding `entity` of `check` is in.
fn folded_of<'a>(
    folded: &'a Folded,
    check: CheckName,
    entity: &Entity,
) -> Option<&'a crate::fold::FoldedFinding> {
    let key = match entity {
        Entity::NodePair { .. } => entity.to_string(),
        _ => entity.node().to_owned(),
    };
    folded
        .findings
        .iter()
        .find(|f| f.check == check && f.node == key)
}

/// An incident kind as a verb phrase: `never joined`, `is unresponsive`.
fn incident_words(kind: IncidentKind) -> &'static str {
    match kind {
        IncidentKind::NeverJoined => "never joined",
        IncidentKind::Crashed => "crashed",
        IncidentKind::Unresponsive => "stopped answering",
        IncidentKind::Failed => "failed",
        IncidentKind::TimedOut => "timed out",
        IncidentKind::PeerError => "lost a peer",
    }
}

/// A code word as people read it: `instance_startup_failed` is `instance startup
/// failed`.
pub fn words(code: &str) -> String {
    code.replace('_', " ")
}

/// Every other culprit, one line each: summed-up nodes, folded findings and incidents
/// that are neither the first error, nor what `summed_up` (the culprit's summary)
/// says, nor only the first error's consequences; at most [`MOST_OTHERS`].
fn others(
    report: Option<&RunReport>,
    timeline: &Timeline,
    folded: &Folded,
    summed_up: Option<&str>,
    first: &Entry,
) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    // After a lost node, what failed later followed from it (the timeline marks them).
    let lost_node = matches!(&first.what, What::Incident { incident } if incident.lost_the_node());
    if !lost_node {
        lines.extend(
            folded
                .nodes
                .iter()
                .filter(|n| Some(n.node.as_str()) != summed_up)
                .map(NodeSummary::line),
        );
        lines.extend(
            folded
                .findings
                .iter()
                .filter(|f| !first_is(first, f))
                .map(crate::fold::FoldedFinding::line),
        );
    }
    if let Some(group) = report.and_then(|r| r.group.as_ref()) {
        lines.extend(
            group
                .other_failures
                .iter()
                .filter(|i| i.node != first.node)
                .map(|i| format!("{} {}", rank_name(i), incident_words(i.kind))),
        );
    }
    lines.extend(
        timeline
            .entries
            .iter()
            .filter(|e| e.role == Role::OtherFailure)
            .filter(|e| {
                matches!(
                    e.what,
                    What::RuntimeFinding { .. } | What::Collective { .. }
                )
            })
            .map(|e| format!("{}: {}", e.node, e.detail)),
    );
    if lines.len() > MOST_OTHERS {
        let more = lines.len() - (MOST_OTHERS - 1);
        lines.truncate(MOST_OTHERS - 1);
        lines.push(format!("and {more} more"));
    }
    lines
}

/// Whether `found` is the first error itself (a pair's finding is folded by its pair).
fn first_is(first: &Entry, found: &crate::fold::FoldedFinding) -> bool {
    let What::Finding {
        check,
        entity,
        verdict,
    } = &first.what
    else {
        return false;
    };
    let key = match entity {
        Entity::NodePair { .. } => entity.to_string(),
        _ => entity.node().to_owned(),
    };
    *check == found.check && *verdict == found.verdict && key == found.node
}

/// What to do about a node that failed most checks.
fn node_step(node: &NodeSummary, first: &Entry) -> String {
    let name = &node.node;
    if node.devices > 0 && node.bad_devices == node.devices {
        format!(
            "check `{name}` as a whole: power and thermal limits, clocks (`nvidia-smi -q -d \
             PERFORMANCE,POWER`), CPU governor, PCIe links; if it stays {}, drain it",
            verdict_word(node.verdict)
        )
    } else {
        next_step(first)
    }
}

/// What to do first about `first`.
fn next_step(first: &Entry) -> String {
    let node = &first.node;
    match &first.what {
        What::Incident { incident } => match incident {
            IncidentKind::Unresponsive => format!(
                "log in to `{node}` and see whether its gpuvet or the host is stopped or hung \
                 (`ps -o stat,pid,cmd`, `dmesg`); if it does not answer, drain `{node}` and \
                 rebuild the instance elsewhere"
            ),
            IncidentKind::Crashed => format!(
                "read `{node}`'s kernel log and the process's exit status (OOM killer, \
                 segfault, XID); drain `{node}` if its host is at fault, then rebuild the \
                 instance elsewhere"
            ),
            IncidentKind::NeverJoined => format!(
                "check that `{node}` was scheduled, runs the same gpuvet, and reaches the \
                 coordinator's address and port with the group's token"
            ),
            _ => format!("read `{node}`'s stderr and report for what it was doing"),
        },
        What::Finding {
            check,
            entity,
            verdict,
        } => finding_step(*check, entity, *verdict, first.lane),
        What::RuntimeFinding { check, xid, .. } => runtime_step(node, check, *xid),
        What::Event { event } => format!("read the `{event}` event's details on `{node}`"),
        What::Check { check, .. } => format!("rerun `{check}` on `{node}` alone"),
        What::Collective { .. } => format!("read `{node}`'s flight-recorder dump"),
    }
}

fn finding_step(check: CheckName, entity: &Entity, verdict: Verdict, lane: Option<Lane>) -> String {
    let scope = check.spec().scope;
    match (scope, lane) {
        (Scope::EachDevice, _) if verdict == Verdict::Faulty => format!(
            "run `gpuvet check --checks {check}` on `{}` alone; if `{entity}` errs or computes \
             wrong again, drain the node and reset or replace the GPU (`nvidia-smi -q` for its \
             XID and ECC history first)",
            entity.node()
        ),
        (_, Some(Lane::Platform)) => format!(
            "`{entity}` does not match the group: fix the node pool or the scheduling \
             constraints so that the group lands on identical nodes"
        ),
        (Scope::EachDevice, _) => format!(
            "run `gpuvet check --checks {check}` on `{}` alone and read the GPU's clocks and \
             throttle reasons (`nvidia-smi -q -d PERFORMANCE`); reset or replace it if it \
             stays slow",
            entity.node()
        ),
        (_, Some(Lane::Network)) if matches!(entity, Entity::NodePair { .. }) => format!(
            "test the link `{entity}` on its own (`ib_write_bw` or `iperf3`) and read both \
             NICs' error counters and the switch ports between them"
        ),
        (_, Some(Lane::Network)) => format!(
            "`{entity}` is slow with every peer: check its NICs (link speed, errors, \
             `ethtool -S`) and its switch ports, then rerun `gpuvet check --checks {check}`"
        ),
        _ => format!(
            "run `gpuvet check --checks {check}` on `{entity}` alone and compare it with a \
             healthy node"
        ),
    }
}

fn runtime_step(node: &str, check: &RuntimeCheck, xid: Option<u32>) -> String {
    if let Some(xid) = xid {
        let meaning = match xid {
            79 => "the GPU fell off the bus",
            48 => "a double-bit ECC error",
            94 => "a contained ECC error",
            95 => "an uncontained ECC error",
            63 | 64 => "an ECC page retirement or row remapping event",
            74 => "an NVLink error",
            119 | 120 => "a GSP error",
            13 | 31 | 43 => "a fault in the application's kernel",
            _ => "a GPU error",
        };
        return format!(
            "XID {xid} on `{node}` means {meaning}: drain `{node}` and follow NVIDIA's XID \
             catalog for XID {xid} (reset, reseat or replace the GPU) before it takes work \
             again"
        );
    }
    if let Some(kind) = check.flight_recorder_kind() {
        return match kind {
            FrFindingKind::NotCompleted => format!(
                "the rank on `{node}` entered a collective its peers completed and never \
                 finished it: look for an XID or a hung kernel on `{node}` (kernel log, \
                 `nvidia-smi`), then take the rank's stack with `py-spy dump`"
            ),
            FrFindingKind::Stalled => {
                "every rank entered the collective and none finished: test the \
                             links between the ranks' nodes"
                    .to_owned()
            }
            FrFindingKind::MissingDump => {
                format!("`{node}` wrote no dump: find out whether its process or node is gone")
            }
            FrFindingKind::NeverEntered => format!(
                "the rank on `{node}` never issued the collective its peers wait in: its code \
                 is elsewhere (stuck before it, an exception, another branch); take its \
                 stack with `py-spy dump`"
            ),
            FrFindingKind::OpMismatch
            | FrFindingKind::SizeMismatch
            | FrFindingKind::DtypeMismatch => "the ranks issued different collectives: the \
                                               application's ranks diverged; read the waiting \
                                               ranks' stacks in the dumps"
                .to_owned(),
        };
    }
    format!("read the runtime check's finding `{check}` on `{node}` and its kernel log")
}

#[cfg(test)]
mod tests;
