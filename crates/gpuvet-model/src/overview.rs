//! Summaries of what a store holds, for lists and pages: the jobs it knows, each job's
//! instances (one per node) with their latest sanity-check run, and runs without their
//! full reports.
//!
//! The store builds these from its columns, without decoding whole reports, so that a
//! list of 1,024 instances stays cheap; `gpuvet serve` returns them as JSON and the web
//! pages draw them.

use serde::{Deserialize, Serialize};

use crate::events::Attempt;
use crate::results::Outcome;

/// One job: how many nodes it ran on and how each node's latest attempt did.
/// (Attempts are numbered per node, so nodes may be at different attempts.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobSummary {
    pub job_id: String,
    /// The highest attempt number on any node.
    pub latest_attempt: u32,
    /// Nodes the job ran on.
    pub nodes: u32,
    /// Of those nodes, how many have a latest attempt whose latest run passed, failed
    /// or was incomplete; the rest (`running`) have no report yet in that attempt.
    pub passed: u32,
    pub failed: u32,
    pub incomplete: u32,
    pub running: u32,
    /// Unix milliseconds of the earliest start among the nodes' latest attempts.
    pub started_at_ms: u64,
}

/// One instance (node) of a job in one attempt, with its latest run when it has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstanceSummary {
    #[serde(flatten)]
    pub attempt: Attempt,
    /// Unix milliseconds when the attempt began on this node.
    pub attempt_started_at_ms: u64,
    /// `None` while the node's checks still run (or when it never reported).
    pub latest_run: Option<RunSummary>,
}

impl InstanceSummary {
    /// `passed`, `failed`, `incomplete` or, without a run, `running`.
    pub fn status(&self) -> &'static str {
        self.latest_run
            .as_ref()
            .map_or("running", |run| run.outcome.as_str())
    }
}

/// One run as listed: the attempt it belongs to and its summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoredRun {
    #[serde(flatten)]
    pub attempt: Attempt,
    #[serde(flatten)]
    pub run: RunSummary,
}

/// One stored sanity-check run, without its report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunSummary {
    /// The store's id of the run.
    pub run_id: i64,
    /// The report's own id; empty for reports from before ids.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub report_id: String,
    pub outcome: Outcome,
    pub backend: String,
    /// Unix milliseconds when the run started.
    pub started_at_ms: u64,
    /// `None` when the report's duration was not a number.
    pub duration_secs: Option<f64>,
    /// How many checks the report holds, how many of them failed, and how many slow or
    /// faulty entities they name.
    pub checks: u32,
    pub failed_checks: u32,
    pub findings: u32,
    /// Whether the run failed because of its own node
    /// ([`crate::offenders::fails_its_node`]): what counts against a repeat offender.
    #[serde(default)]
    pub node_failed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(latest_run: Option<RunSummary>) -> InstanceSummary {
        InstanceSummary {
            attempt: Attempt {
                job_id: "job".into(),
                attempt: 1,
                node: "node-0".into(),
                instance: "pod-0".into(),
            },
            attempt_started_at_ms: 1,
            latest_run,
        }
    }

    #[test]
    fn an_instance_without_a_run_is_running_and_one_with_a_run_has_its_outcome() {
        assert_eq!(instance(None).status(), "running");
        let run = RunSummary {
            run_id: 3,
            report_id: String::new(),
            outcome: Outcome::Failed,
            backend: "sim".into(),
            started_at_ms: 2,
            duration_secs: Some(1.5),
            checks: 2,
            failed_checks: 1,
            findings: 1,
            node_failed: false,
        };
        assert_eq!(instance(Some(run)).status(), "failed");
    }

    #[test]
    fn outcomes_round_trip_by_name_and_an_unknown_one_is_named() {
        for outcome in Outcome::ALL {
            assert_eq!(outcome.as_str().parse::<Outcome>(), Ok(outcome));
        }
        let error = "done".parse::<Outcome>().unwrap_err();
        assert!(error.contains("`done`"), "{error}");
    }
}
