//! The rebuild in Slurm: drain the culprit nodes the circuit breaker allows, then
//! requeue the job so that it starts again on other nodes; unless the breaker refused a
//! node, since a requeued job could land on it again: then the exit code alone asks for
//! the rebuild, as `fail` would.
//!
//! Every node of a group applies the verdict, and all of them drain the same culprits
//! (a drain already there is said so, not made twice); only the group's rank 0 requeues,
//! so the job is requeued once. The requeue is a step of its own
//! ([`DrainOutcome::requeue_with`]), taken after the caller recorded what was drained:
//! Slurm ends the job's steps as it requeues, this gpuvet among them.

use gpuvet_model::config::QuarantinePolicy;
use gpuvet_model::quarantine::{Culprit, Decision, culprits, decide};
use gpuvet_model::results::RunReport;
use serde::Serialize;

use crate::error::SlurmError;
use crate::nodes::REASON_PREFIX;
use crate::scontrol::Slurm;

/// The setting a breaker's refusal points at.
pub const POLICY_PATH: &str = "gpuvet.slurm.quarantine";

/// The longest reason gpuvet writes: one line of `sinfo -R`, not a report.
pub const MAX_REASON_CHARS: usize = 160;

/// What the rebuild did, for the `InstanceRebuildRequested` event and stderr.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DrainOutcome {
    pub culprits: Vec<Culprit>,
    pub drained: Vec<String>,
    pub already_drained: Vec<String>,
    /// Culprits Slurm has no node of (the group's node names are not Slurm's).
    pub not_in_cluster: Vec<String>,
    /// Refused by the circuit breaker, with why.
    pub refused: Vec<(String, String)>,
    /// Drains `scontrol` failed, with why.
    pub failed: Vec<(String, String)>,
    /// Set when the report named every node of its group: nothing is drained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_group: Option<String>,
    /// The nodes could not be listed: nothing was drained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The job this node requeues (next, with [`DrainOutcome::requeue_with`]): set on
    /// the group's rank 0 when the breaker refused no node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue: Option<String>,
}

impl DrainOutcome {
    /// Whether the job goes back to the queue: not when the breaker refused a node.
    pub fn requeues(&self) -> bool {
        self.refused.is_empty()
    }

    /// Requeues the job, when this node is the one to: `scontrol requeue JOB`.
    pub fn requeue_with(&self, slurm: &dyn Slurm) -> Result<(), SlurmError> {
        match &self.requeue {
            Some(job_id) => slurm.requeue(job_id),
            None => Ok(()),
        }
    }

    /// One line for the event's message and stderr.
    pub fn summary(&self, job_id: &str) -> String {
        let mut text = format!(
            "rebuild of slurm job `{job_id}`: drained {}",
            list(&self.drained)
        );
        if !self.already_drained.is_empty() {
            text.push_str(&format!(
                "; already drained {}",
                list(&self.already_drained)
            ));
        }
        if !self.refused.is_empty() {
            text.push_str(&format!(
                "; refused {}; the job is not requeued",
                reasons(&self.refused)
            ));
        }
        if !self.failed.is_empty() {
            text.push_str(&format!("; could not drain {}", reasons(&self.failed)));
        }
        if !self.not_in_cluster.is_empty() {
            text.push_str(&format!(
                "; not nodes of this cluster: {}",
                list(&self.not_in_cluster)
            ));
        }
        if let Some(why) = &self.whole_group {
            text.push_str(&format!("; {why}"));
        }
        if let Some(why) = &self.error {
            text.push_str(&format!("; {why}"));
        }
        if let Some(job) = &self.requeue {
            text.push_str(&format!("; requeueing job `{job}`"));
        }
        text
    }
}

fn list(nodes: &[String]) -> String {
    if nodes.is_empty() {
        return "none".to_owned();
    }
    nodes
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn reasons(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(node, why)| format!("`{node}` ({why})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The drain reason for a culprit: `gpuvet: ` and its finding on one line, within
/// [`MAX_REASON_CHARS`].
pub fn drain_reason(culprit: &Culprit) -> String {
    let field = |key: &str| {
        culprit
            .finding
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let what = match culprit.finding.get("first_error") {
        Some(kind) => format!(
            "first error {}: {}",
            kind.as_str().unwrap_or("unknown"),
            field("reason")
        ),
        None => format!(
            "{} {} {}: {}",
            field("check"),
            field("entity"),
            field("verdict"),
            field("reason")
        ),
    };
    let line: String = format!("{REASON_PREFIX} {} lane: {what}", culprit.lane.as_str())
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if line.chars().count() <= MAX_REASON_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(MAX_REASON_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Drains the culprits of `report` the breaker allows and, when `requeue` (this node is
/// the group's rank 0) and the breaker refused none, names `job_id` to requeue. Failures
/// are recorded in the outcome, never returned: the exit code still asks for the
/// rebuild.
pub fn drain(
    slurm: &dyn Slurm,
    report: &RunReport,
    job_id: &str,
    requeue: bool,
    policy: &QuarantinePolicy,
    now_ms: u64,
) -> DrainOutcome {
    let found = culprits(report);
    let mut outcome = DrainOutcome {
        culprits: found.nodes.clone(),
        whole_group: found.whole_group,
        ..DrainOutcome::default()
    };
    if !found.nodes.is_empty() {
        match slurm.nodes() {
            Ok(nodes) => {
                let standing: Vec<_> = nodes.iter().map(|n| n.for_breaker()).collect();
                for (culprit, decision) in
                    decide(&standing, &found.nodes, policy, POLICY_PATH, now_ms)
                {
                    match decision {
                        Decision::AlreadyQuarantined => outcome.already_drained.push(culprit.node),
                        Decision::NotInCluster => outcome.not_in_cluster.push(culprit.node),
                        Decision::Refused(why) => outcome.refused.push((culprit.node, why)),
                        Decision::Quarantine => {
                            match slurm.drain(&culprit.node, &drain_reason(&culprit)) {
                                Ok(()) => outcome.drained.push(culprit.node),
                                Err(err) => outcome.failed.push((culprit.node, err.with_causes())),
                            }
                        }
                    }
                }
            }
            Err(err) => {
                outcome.error = Some(format!("no node was drained: {}", err.with_causes()));
            }
        }
    }
    if requeue && outcome.requeues() {
        outcome.requeue = Some(job_id.to_owned());
    }
    outcome
}
