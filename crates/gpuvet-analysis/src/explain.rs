//! `gpuvet explain`: the first error of one attempt, the team it belongs to, the next
//! step, and for each hypothesis (GPU, host, network link, communication setup, app,
//! platform) one of the three conclusions of a fault drill (Alauda's article on multi-node GPU
//! platforms, www.suotukeji.com/blog/1945): confirmed,
//! evidence missing, or not applicable, each with the evidence that decided it.
//!
//! Pure: made from the [`Timeline`] and the [`JobRecord`] it came from, so a bundle
//! and the store it was made from give the same answer.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::diagnose::diagnose;
use crate::timeline::{self, Entry, Role, Timeline, What};
use gpuvet_model::catalog::{CheckName, Scope};
use gpuvet_model::diagnosis::{Diagnosis, TERMINAL_WIDTH};
use gpuvet_model::events::EventKind;
use gpuvet_model::record::JobRecord;
use gpuvet_model::results::{CheckStatus, Entity, IncidentKind, Lane, RunReport};
use gpuvet_model::runtime::CheckFamily;

/// The answer for one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Explanation {
    pub job_id: String,
    pub attempt: u32,
    /// The group's outcome (`passed`, `failed`, `incomplete`); `unknown` without a report.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<Lane>,
    /// Who to hand it to.
    pub team: String,
    pub next_step: String,
    /// What the first error rests on, and what followed from it.
    pub evidence: Vec<String>,
    /// One per [`Hypothesis`], in its order.
    pub hypotheses: Vec<Judged>,
    /// The conclusion in words for people, as `check` and `run` print it; `None`
    /// when nothing failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
}

/// Where a fault can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Hypothesis {
    Gpu,
    Host,
    NetworkLink,
    CommunicationSetup,
    App,
    Platform,
}

impl Hypothesis {
    pub const ALL: [Hypothesis; 6] = [
        Hypothesis::Gpu,
        Hypothesis::Host,
        Hypothesis::NetworkLink,
        Hypothesis::CommunicationSetup,
        Hypothesis::App,
        Hypothesis::Platform,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Hypothesis::Gpu => "gpu",
            Hypothesis::Host => "host",
            Hypothesis::NetworkLink => "network link",
            Hypothesis::CommunicationSetup => "communication setup",
            Hypothesis::App => "app",
            Hypothesis::Platform => "platform",
        }
    }
}

/// The three conclusions of a fault drill, as Alauda's article on multi-node GPU
/// platforms (www.suotukeji.com/blog/1945) gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Conclusion {
    Confirmed,
    EvidenceMissing,
    NotApplicable,
}

impl Conclusion {
    pub fn as_str(self) -> &'static str {
        match self {
            Conclusion::Confirmed => "confirmed",
            Conclusion::EvidenceMissing => "evidence missing",
            Conclusion::NotApplicable => "not applicable",
        }
    }
}

impl fmt::Display for Conclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One hypothesis, judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Judged {
    pub hypothesis: Hypothesis,
    pub conclusion: Conclusion,
    pub evidence: String,
}

/// The team that owns a lane.
pub fn team(lane: Lane) -> &'static str {
    match lane {
        Lane::Host => "the host team (GPUs, servers and their drivers)",
        Lane::Network => "the network team (NICs, cables, switches)",
        Lane::Platform => "the platform team (scheduling, node pools, rendezvous)",
        Lane::App => "the application's owners",
    }
}

/// Explains one attempt.
pub fn explain(record: &JobRecord, timeline: &Timeline) -> Explanation {
    let report = record.group_report();
    let outcome = report.map_or("unknown", |r| r.outcome.as_str()).to_owned();
    let first = timeline.first().cloned();
    let facts = Facts::new(record, timeline, first.as_ref());
    let diagnosis = diagnose(record, timeline);
    let hypotheses = Hypothesis::ALL
        .into_iter()
        .map(|hypothesis| {
            let (conclusion, evidence) = facts.judge(hypothesis);
            Judged {
                hypothesis,
                conclusion,
                evidence,
            }
        })
        .collect();
    let Some(first) = first else {
        let failed_checks: Vec<String> = report
            .map(|r| {
                r.checks
                    .iter()
                    .filter(|c| c.status.is_failure())
                    .map(|c| format!("{} {}", c.name, c.status))
                    .collect()
            })
            .unwrap_or_default();
        let (next_step, evidence) = if report.is_none() {
            (
                "nothing was recorded for this attempt: check the job id and the store".to_owned(),
                Vec::new(),
            )
        } else if failed_checks.is_empty() {
            (
                "nothing to do: no check failed and nothing went wrong".to_owned(),
                Vec::new(),
            )
        } else {
            (
                "read the failed checks' reasons in the report".to_owned(),
                failed_checks,
            )
        };
        return Explanation {
            job_id: record.job_id.clone(),
            attempt: record.attempt,
            outcome,
            first_error: None,
            lane: None,
            team: "nobody: there is no error to hand over".to_owned(),
            next_step,
            evidence,
            hypotheses,
            diagnosis,
        };
    };
    let lane = first.lane;
    Explanation {
        job_id: record.job_id.clone(),
        attempt: record.attempt,
        outcome,
        team: lane.map_or("the platform team, to triage", team).to_owned(),
        next_step: diagnosis
            .as_ref()
            .map(|d| d.next_step.clone())
            .unwrap_or_default(),
        evidence: evidence(timeline, &first),
        lane,
        first_error: Some(first),
        hypotheses,
        diagnosis,
    }
}

/// What the first error rests on and what followed, one line each; bounded.
fn evidence(timeline: &Timeline, first: &Entry) -> Vec<String> {
    const MOST: usize = 8;
    let origin = timeline.origin_ms();
    let at = |e: &Entry| format!("+{:.3} s", e.time_ms.saturating_sub(origin) as f64 / 1000.0);
    let mut lines = vec![format!("{} {}: {}", at(first), first.node, first.detail)];
    if let Some(view) = timeline.members.iter().find(|m| m.node == first.node)
        && view.measured
        && view.uncertainty_ms > 0.0
    {
        lines.push(format!(
            "{}'s clock is {:+.3} ms from {}'s, good to ±{:.3} ms",
            first.node, view.offset_ms, timeline.clock_of, view.uncertainty_ms
        ));
    }
    // Consequences first, then the other failures; a node's alike findings are one row.
    let of_role = |role: Role| -> Vec<usize> {
        (0..timeline.entries.len())
            .filter(|&i| timeline.entries[i].role == role)
            .collect()
    };
    let rows: Vec<Vec<usize>> = timeline::rows(timeline, &of_role(Role::Consequence))
        .into_iter()
        .chain(timeline::rows(timeline, &of_role(Role::OtherFailure)))
        .collect();
    for row in rows.iter().take(MOST) {
        let entry = &timeline.entries[row[0]];
        let role = if entry.role == Role::Consequence {
            "consequence"
        } else {
            "also failed"
        };
        lines.push(format!(
            "{} {} {role}: {}",
            at(entry),
            entry.node,
            timeline::row_detail(timeline, row)
        ));
    }
    let left: usize = rows.iter().skip(MOST).map(Vec::len).sum();
    if left > 0 {
        lines.push(format!("and {left} more on the timeline"));
    }
    lines
}

/// What the record shows, as the hypotheses need it.
struct Facts<'a> {
    report: Option<&'a RunReport>,
    timeline: &'a Timeline,
    first: Option<&'a Entry>,
    /// The nodes the first error is about.
    culprits: Vec<String>,
}

impl<'a> Facts<'a> {
    fn new(record: &'a JobRecord, timeline: &'a Timeline, first: Option<&'a Entry>) -> Self {
        let culprits = first.map_or_else(Vec::new, |first| match &first.what {
            What::Finding {
                entity: Entity::NodePair { a, b },
                ..
            } => vec![a.clone(), b.clone()],
            _ => vec![first.node.clone()],
        });
        Facts {
            report: record.group_report(),
            timeline,
            first,
            culprits,
        }
    }

    fn culprit_list(&self) -> String {
        self.culprits
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(" and ")
    }

    fn judge(&self, hypothesis: Hypothesis) -> (Conclusion, String) {
        if self.first.is_none() {
            return (
                Conclusion::NotApplicable,
                "there is no error on the timeline".to_owned(),
            );
        }
        match hypothesis {
            Hypothesis::Gpu => self.gpu(),
            Hypothesis::Host => self.host(),
            Hypothesis::NetworkLink => self.network_link(),
            Hypothesis::CommunicationSetup => self.communication_setup(),
            Hypothesis::App => self.app(),
            Hypothesis::Platform => self.platform(),
        }
    }

    /// Failures (first or other) on the culprits that match `keep`.
    fn failures_on_culprits(&self, keep: impl Fn(&Entry) -> bool) -> Vec<&'a Entry> {
        self.timeline
            .entries
            .iter()
            .filter(|e| matches!(e.role, Role::FirstError | Role::OtherFailure))
            .filter(|e| self.culprits.contains(&e.node) || self.names_culprit(e))
            .filter(|e| keep(e))
            .collect()
    }

    /// Whether `entry` is a finding on a culprit node or on a pair with one.
    fn names_culprit(&self, entry: &Entry) -> bool {
        let What::Finding { entity, .. } = &entry.what else {
            return false;
        };
        self.culprits.iter().any(|c| match entity {
            Entity::NodePair { a, b } => c == a || c == b,
            Entity::Node { node } => c == node,
            Entity::Device { .. } => false,
        })
    }

    /// The checks of `scope` that ran, with how they ended.
    fn checks_of(&self, scopes: &[Scope]) -> Vec<(CheckName, CheckStatus)> {
        self.report
            .map(|r| {
                r.checks
                    .iter()
                    .filter(|c| scopes.contains(&c.name.spec().scope))
                    .filter(|c| matches!(c.status, CheckStatus::Passed | CheckStatus::Failed))
                    .map(|c| (c.name, c.status))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn names(checks: &[(CheckName, CheckStatus)]) -> String {
        checks
            .iter()
            .map(|(c, _)| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The first error's kind, when it is an incident.
    fn first_incident(&self) -> Option<IncidentKind> {
        match self.first.map(|f| &f.what) {
            Some(What::Incident { incident }) => Some(*incident),
            _ => None,
        }
    }

    /// Whether the first error is the loss of a node: it never came, died or hung.
    fn first_lost_a_node(&self) -> bool {
        self.first_incident()
            .is_some_and(IncidentKind::lost_the_node)
    }

    fn gpu(&self) -> (Conclusion, String) {
        let gpu_findings = self.failures_on_culprits(|e| match &e.what {
            What::Finding { entity, .. } => matches!(entity, Entity::Device { .. }),
            What::RuntimeFinding { xid, check, .. } => {
                xid.is_some() || matches!(check.family(), CheckFamily::Xid | CheckFamily::Ecc)
            }
            _ => false,
        });
        if let Some(entry) = gpu_findings.first() {
            return (Conclusion::Confirmed, entry.detail.clone());
        }
        let device_checks = self.checks_of(&[Scope::EachDevice]);
        if self.first_lost_a_node() {
            return (
                Conclusion::EvidenceMissing,
                format!(
                    "{} was lost, so its GPUs could not be measured after that",
                    self.culprit_list()
                ),
            );
        }
        if device_checks.is_empty() {
            return (
                Conclusion::EvidenceMissing,
                "no check measured the GPUs one by one (`gemm_flops`, `kernel_launch`)".to_owned(),
            );
        }
        (
            Conclusion::NotApplicable,
            format!(
                "{} measured every GPU of {} within its peers' range, and no XID or ECC \
                 error was seen",
                Self::names(&device_checks),
                self.culprit_list()
            ),
        )
    }

    fn host(&self) -> (Conclusion, String) {
        if let Some(first) = self.first
            && matches!(
                self.first_incident(),
                Some(IncidentKind::Unresponsive | IncidentKind::Crashed)
            )
        {
            return (Conclusion::Confirmed, first.detail.clone());
        }
        let host_findings = self.failures_on_culprits(|e| match &e.what {
            What::Finding { entity, .. } => {
                e.lane == Some(Lane::Host) && matches!(entity, Entity::Node { .. })
            }
            What::RuntimeFinding { xid, check, .. } => {
                xid.is_none() && e.lane == Some(Lane::Host) && check.family() != CheckFamily::Ecc
            }
            _ => false,
        });
        if let Some(entry) = host_findings.first() {
            return (Conclusion::Confirmed, entry.detail.clone());
        }
        if self.first_incident() == Some(IncidentKind::NeverJoined) {
            return (
                Conclusion::EvidenceMissing,
                format!("{} never joined, so nothing ran on it", self.culprit_list()),
            );
        }
        let node_checks = self.checks_of(&[Scope::EachNode]);
        if node_checks.is_empty() {
            return (
                Conclusion::EvidenceMissing,
                format!(
                    "{} answered throughout, but no node-wide check (`all_reduce_1`, \
                     `comp_comm_overlap`) measured its host",
                    self.culprit_list()
                ),
            );
        }
        (
            Conclusion::NotApplicable,
            format!(
                "{} answered throughout, and {} found nothing wrong with its host",
                self.culprit_list(),
                Self::names(&node_checks)
            ),
        )
    }

    fn network_link(&self) -> (Conclusion, String) {
        let network = self.failures_on_culprits(|e| {
            e.lane == Some(Lane::Network)
                && matches!(e.what, What::Finding { .. } | What::RuntimeFinding { .. })
        });
        if let Some(entry) = network.first() {
            // A node slow with every partner whose own GPUs are slow too: its GPUs
            // explain its pairs as well as its links do.
            let whole_node = matches!(
                &entry.what,
                What::Finding { entity, .. } if !matches!(entity, Entity::NodePair { .. })
            );
            if whole_node && self.gpu().0 == Conclusion::Confirmed {
                return (
                    Conclusion::EvidenceMissing,
                    format!(
                        "{} is slow with every partner, which its own slow GPUs explain as \
                         well as its links; test its links alone to tell",
                        entry.node
                    ),
                );
            }
            return (Conclusion::Confirmed, entry.detail.clone());
        }
        let pair_checks = self.checks_of(&[Scope::NodePairs, Scope::AllNodePairs]);
        if pair_checks.is_empty() {
            return (
                Conclusion::EvidenceMissing,
                "no check measured the links between pairs of nodes".to_owned(),
            );
        }
        if self.first_lost_a_node() {
            return (
                Conclusion::NotApplicable,
                format!(
                    "{} was lost as a whole, which a link does not explain; its peers' \
                     timeouts only followed",
                    self.culprit_list()
                ),
            );
        }
        (
            Conclusion::NotApplicable,
            format!(
                "{} found no slow or broken link of {}",
                Self::names(&pair_checks),
                self.culprit_list()
            ),
        )
    }

    fn communication_setup(&self) -> (Conclusion, String) {
        let refused = self.timeline.entries.iter().find(|e| {
            matches!(e.what, What::Incident { .. })
                && (e.detail.contains("refused") || e.detail.contains("token"))
        });
        if let Some(entry) = refused {
            return (Conclusion::Confirmed, entry.detail.clone());
        }
        let nccl = self.failures_on_culprits(|e| {
            let detail = e.detail.to_ascii_lowercase();
            detail.contains("nccl") && (detail.contains("init") || detail.contains("version"))
        });
        if let Some(entry) = nccl.first() {
            return (Conclusion::Confirmed, entry.detail.clone());
        }
        let collectives = self.working_collectives();
        if collectives.is_empty() {
            return (
                Conclusion::EvidenceMissing,
                "no collective across nodes completed, so the communication setup was \
                 never shown to work"
                    .to_owned(),
            );
        }
        (
            Conclusion::NotApplicable,
            format!(
                "{} moved data between every pair of nodes: the nodes rendezvous, \
                 authenticate and exchange data",
                Self::names(&collectives)
            ),
        )
    }

    /// Collectives across nodes that moved data everywhere: passed, or slow somewhere
    /// but never broken.
    fn working_collectives(&self) -> Vec<(CheckName, CheckStatus)> {
        let Some(report) = self.report else {
            return Vec::new();
        };
        report
            .checks
            .iter()
            .filter(|c| matches!(c.name.spec().scope, Scope::WholeGroup | Scope::NodePairs))
            .filter(|c| match c.status {
                CheckStatus::Passed => true,
                CheckStatus::Failed => {
                    c.findings().next().is_some()
                        && c.findings()
                            .all(|f| f.verdict == gpuvet_model::results::Verdict::Slow)
                }
                _ => false,
            })
            .map(|c| (c.name, c.status))
            .collect()
    }

    fn app(&self) -> (Conclusion, String) {
        let app = self
            .timeline
            .entries
            .iter()
            .find(|e| e.lane == Some(Lane::App) && e.role != Role::Context);
        if let Some(entry) = app {
            return (Conclusion::Confirmed, entry.detail.clone());
        }
        let first_ms = self.first.map_or(0, |f| f.time_ms);
        let started = self.timeline.entries.iter().find(|e| {
            matches!(
                e.what,
                What::Event {
                    event: EventKind::InstanceStarted
                }
            )
        });
        match started {
            Some(started) if started.time_ms <= first_ms => (
                Conclusion::EvidenceMissing,
                format!(
                    "the app was running on `{}` when the first error happened, and \
                     nothing here shows its own errors (a flight-recorder dump would)",
                    started.node
                ),
            ),
            _ => (
                Conclusion::NotApplicable,
                "the app had not started when the first error happened".to_owned(),
            ),
        }
    }

    fn platform(&self) -> (Conclusion, String) {
        let platform = self.timeline.entries.iter().find(|e| {
            e.lane == Some(Lane::Platform)
                && matches!(e.role, Role::FirstError | Role::OtherFailure)
        });
        if let Some(entry) = platform {
            return (Conclusion::Confirmed, entry.detail.clone());
        }
        let Some(report) = self.report else {
            return (
                Conclusion::EvidenceMissing,
                "no report of the attempt was kept".to_owned(),
            );
        };
        let inventory = report
            .checks
            .iter()
            .find(|c| c.name == CheckName::InventoryConsistency);
        let nodes = report.group.as_ref().map_or(1, |g| g.node_count().max(1));
        if nodes == 1 {
            return match inventory.map(|c| c.status) {
                Some(CheckStatus::Passed) => (
                    Conclusion::NotApplicable,
                    format!("`{}` matched the expected inventory", report.node),
                ),
                _ => (
                    Conclusion::EvidenceMissing,
                    format!(
                        "`{}` ran alone, and `inventory_consistency` did not compare it with \
                         the expected inventory",
                        report.node
                    ),
                ),
            };
        }
        match inventory.map(|c| c.status) {
            Some(CheckStatus::Passed) => (
                Conclusion::NotApplicable,
                format!("all {nodes} nodes joined, and `inventory_consistency` found them alike"),
            ),
            _ => (
                Conclusion::EvidenceMissing,
                format!(
                    "all {nodes} nodes joined, but `inventory_consistency` did not compare \
                     them"
                ),
            ),
        }
    }
}

/// `explain`'s text for people.
pub fn render(explanation: &Explanation) -> String {
    let mut out = format!(
        "job `{}` attempt {}: {}\n",
        explanation.job_id, explanation.attempt, explanation.outcome
    );
    match &explanation.diagnosis {
        Some(diagnosis) => {
            for line in diagnosis.lines(TERMINAL_WIDTH) {
                out.push_str(&line);
                out.push('\n');
            }
        }
        None => {
            out.push_str("first error: none\n");
            out.push_str(&format!("hand to: {}\n", explanation.team));
            out.push_str(&format!("next step: {}\n", explanation.next_step));
        }
    }
    if !explanation.evidence.is_empty() {
        out.push_str("evidence:\n");
        for line in &explanation.evidence {
            out.push_str(&format!("  - {line}\n"));
        }
    }
    out.push_str("hypotheses:\n");
    for judged in &explanation.hypotheses {
        out.push_str(&format!(
            "  {:<20} {:<17} {}\n",
            judged.hypothesis.as_str(),
            judged.conclusion.as_str(),
            judged.evidence
        ));
    }
    out
}

#[cfg(test)]
mod tests;
