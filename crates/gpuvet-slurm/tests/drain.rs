//! The rebuild against a fake Slurm: which nodes are drained, with which reason, when
//! the job is requeued, and what is recorded when Slurm fails.

use std::cell::RefCell;
use std::time::Duration;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::config::QuarantinePolicy;
use gpuvet_model::results::{
    CheckResult, CheckStatus, Entity, EntityResult, GroupSummary, Lane, RunReport,
};
use gpuvet_slurm::drain::drain_reason;
use gpuvet_slurm::nodes::SlurmNode;
use gpuvet_slurm::{Slurm, SlurmError, drain};
use serde_json::json;

const NOW: u64 = 1_796_379_548_000;
const MINUTE: u64 = 60_000;

/// A cluster in memory: its nodes, and every command gpuvet gave it.
#[derive(Default)]
struct FakeSlurm {
    nodes: RefCell<Vec<SlurmNode>>,
    calls: RefCell<Vec<String>>,
    /// Commands that fail, by their first word (`nodes`, `drain`, `requeue`).
    failing: Vec<&'static str>,
}

impl FakeSlurm {
    fn with(nodes: &[(&str, Option<u64>)]) -> FakeSlurm {
        let nodes = nodes
            .iter()
            .map(|(name, drained_at)| SlurmNode {
                name: (*name).to_owned(),
                state: if drained_at.is_some() {
                    "drained"
                } else {
                    "idle"
                }
                .to_owned(),
                reason: drained_at.map(|_| "gpuvet: earlier".to_owned()),
                reason_at_ms: *drained_at,
            })
            .collect();
        FakeSlurm {
            nodes: RefCell::new(nodes),
            ..FakeSlurm::default()
        }
    }

    fn fail(&self, what: &str) -> Result<(), SlurmError> {
        if self.failing.contains(&what) {
            return Err(SlurmError::Failed {
                command: format!("scontrol {what}"),
                status: "exit status: 1".into(),
                stderr: "Access/permission denied".into(),
            });
        }
        Ok(())
    }
}

impl Slurm for FakeSlurm {
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        self.fail("nodes")?;
        Ok(self.nodes.borrow().clone())
    }

    fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        self.calls
            .borrow_mut()
            .push(format!("drain {node} {reason}"));
        self.fail("drain")?;
        for n in self
            .nodes
            .borrow_mut()
            .iter_mut()
            .filter(|n| n.name == node)
        {
            n.state = "drained".into();
            n.reason = Some(reason.to_owned());
            n.reason_at_ms = Some(NOW);
        }
        Ok(())
    }

    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        self.calls.borrow_mut().push(format!("resume {node}"));
        Ok(())
    }

    fn requeue(&self, job_id: &str) -> Result<(), SlurmError> {
        self.calls.borrow_mut().push(format!("requeue {job_id}"));
        self.fail("requeue")
    }
}

/// A failed report of a group, naming `culprits` in the host lane.
fn report(group: &[&str], culprits: &[&str]) -> RunReport {
    let entities = culprits
        .iter()
        .map(|node| {
            let entity = Entity::Device {
                node: (*node).to_owned(),
                index: 3,
            };
            let mut result: EntityResult = serde_json::from_value(json!({
                "entity": entity,
                "verdict": "slow",
                "lane": "host",
                "reason": "61 % of its peers' median",
                "evidence": {},
                "measurement": { "entity": entity, "value": 1.0 },
            }))
            .unwrap();
            result.lane = Lane::Host;
            result
        })
        .collect();
    let check = CheckResult::judged(CheckName::GemmFlops, CheckStatus::Failed, entities);
    let mut report: RunReport = serde_json::from_value(json!({
        "gpuvet_version": "0", "job_id": "4242", "attempt": 1, "node": group[0],
        "instance": "i", "backend": "sim", "devices": [], "started_at_ms": 0,
        "duration_secs": 1.0, "timeout_secs": 1.0, "outcome": "failed", "checks": [],
    }))
    .unwrap();
    report.checks = vec![check];
    report.group = Some(GroupSummary {
        size: None,
        nodes: group.iter().map(|n| (*n).to_owned()).collect(),
        ..GroupSummary::default()
    });
    report
}

/// The binary's order: drain, then (after recording) requeue; the requeue's error as
/// text.
fn drain_then_requeue(
    slurm: &FakeSlurm,
    report: &RunReport,
    job_id: &str,
    rank_0: bool,
    policy: &QuarantinePolicy,
    now_ms: u64,
) -> (gpuvet_slurm::DrainOutcome, Option<String>) {
    let outcome = drain(slurm, report, job_id, rank_0, policy, now_ms);
    let requeued = outcome.requeue_with(slurm).err().map(|e| e.with_causes());
    (outcome, requeued)
}

fn policy() -> QuarantinePolicy {
    QuarantinePolicy {
        max_share: 0.5,
        window: Duration::from_secs(300),
    }
}

#[test]
fn the_culprit_is_drained_with_its_finding_and_the_job_requeued() {
    let slurm = FakeSlurm::with(&[("gpu-01", None), ("gpu-02", None), ("gpu-03", None)]);
    let (outcome, requeue_error) = drain_then_requeue(
        &slurm,
        &report(&["gpu-01", "gpu-02"], &["gpu-02"]),
        "4242",
        true,
        &policy(),
        NOW,
    );
    assert_eq!(outcome.drained, ["gpu-02"]);
    assert_eq!(outcome.requeue.as_deref(), Some("4242"));
    assert_eq!(requeue_error, None);
    assert_eq!(
        *slurm.calls.borrow(),
        [
            "drain gpu-02 gpuvet: host lane: gemm_flops gpu-02/dev3 slow: 61 % of its peers' median",
            "requeue 4242",
        ]
    );
    assert_eq!(
        outcome.summary("4242"),
        "rebuild of slurm job `4242`: drained `gpu-02`; requeueing job `4242`"
    );
}

#[test]
fn only_rank_0_requeues_and_a_drain_already_there_is_not_made_again() {
    let slurm = FakeSlurm::with(&[("gpu-01", None), ("gpu-02", Some(NOW)), ("gpu-03", None)]);
    let (outcome, _) = drain_then_requeue(
        &slurm,
        &report(&["gpu-01", "gpu-02"], &["gpu-02"]),
        "4242",
        false,
        &policy(),
        NOW,
    );
    assert_eq!(outcome.already_drained, ["gpu-02"]);
    assert!(outcome.drained.is_empty() && outcome.requeue.is_none());
    assert!(
        slurm.calls.borrow().is_empty(),
        "{:?}",
        slurm.calls.borrow()
    );
}

#[test]
fn the_breaker_refuses_past_its_share_and_then_the_job_is_not_requeued() {
    // Two of four drained by gpuvet a minute ago: a third is over 50 %.
    let slurm = FakeSlurm::with(&[
        ("gpu-01", None),
        ("gpu-02", None),
        ("gpu-03", Some(NOW - MINUTE)),
        ("gpu-04", Some(NOW - MINUTE)),
    ]);
    let (outcome, _) = drain_then_requeue(
        &slurm,
        &report(&["gpu-01", "gpu-02"], &["gpu-02"]),
        "4242",
        true,
        &policy(),
        NOW,
    );
    assert!(!outcome.requeues());
    assert_eq!(outcome.refused.len(), 1);
    assert!(
        outcome.refused[0]
            .1
            .ends_with("see `gpuvet.slurm.quarantine`"),
        "{:?}",
        outcome.refused
    );
    assert!(
        slurm.calls.borrow().is_empty(),
        "{:?}",
        slurm.calls.borrow()
    );
    assert!(
        outcome.summary("4242").contains("the job is not requeued"),
        "{}",
        outcome.summary("4242")
    );
    // Outside the window the same drains count no more.
    let later = NOW + 10 * MINUTE;
    let (outcome, _) = drain_then_requeue(
        &slurm,
        &report(&["gpu-01", "gpu-02"], &["gpu-02"]),
        "4242",
        true,
        &policy(),
        later,
    );
    assert_eq!(outcome.drained, ["gpu-02"]);
}

#[test]
fn the_whole_group_is_never_drained_but_the_job_is_requeued() {
    let slurm = FakeSlurm::with(&[("gpu-01", None), ("gpu-02", None), ("gpu-03", None)]);
    let (outcome, _) = drain_then_requeue(
        &slurm,
        &report(&["gpu-01", "gpu-02"], &["gpu-01", "gpu-02"]),
        "4242",
        true,
        &policy(),
        NOW,
    );
    assert!(outcome.whole_group.is_some());
    assert_eq!(*slurm.calls.borrow(), ["requeue 4242"]);
}

#[test]
fn slurm_failures_are_recorded_not_raised() {
    let slurm = FakeSlurm {
        failing: vec!["drain", "requeue"],
        ..FakeSlurm::with(&[("gpu-01", None), ("gpu-02", None), ("gpu-03", None)])
    };
    let (outcome, requeue_error) = drain_then_requeue(
        &slurm,
        &report(&["gpu-01", "gpu-02", "gpu-03"], &["gpu-02", "elsewhere"]),
        "4242",
        true,
        &policy(),
        NOW,
    );
    assert_eq!(outcome.failed.len(), 1);
    assert_eq!(outcome.not_in_cluster, ["elsewhere"]);
    assert_eq!(
        requeue_error.as_deref(),
        Some("`scontrol requeue` failed (exit status: 1): Access/permission denied")
    );
    assert_eq!(
        outcome.summary("4242"),
        "rebuild of slurm job `4242`: drained none; could not drain `gpu-02` (`scontrol \
         drain` failed (exit status: 1): Access/permission denied); not nodes of this \
         cluster: `elsewhere`; requeueing job `4242`"
    );
    let down = FakeSlurm {
        failing: vec!["nodes"],
        ..FakeSlurm::with(&[])
    };
    let (outcome, _) = drain_then_requeue(
        &down,
        &report(&["gpu-01", "gpu-02"], &["gpu-02"]),
        "4242",
        false,
        &policy(),
        NOW,
    );
    assert!(
        outcome
            .error
            .as_deref()
            .unwrap()
            .starts_with("no node was drained: "),
        "{outcome:?}"
    );
}

#[test]
fn reasons_are_one_short_line() {
    let culprit = gpuvet_model::quarantine::Culprit {
        node: "gpu-02".into(),
        lane: Lane::Network,
        finding: json!({ "first_error": "crashed", "reason": "agent\nexited   with 9" }),
        repeat_offender: None,
    };
    assert_eq!(
        drain_reason(&culprit),
        "gpuvet: network lane: first error crashed: agent exited with 9"
    );
    let long = gpuvet_model::quarantine::Culprit {
        finding: json!({ "first_error": "crashed", "reason": "x".repeat(500) }),
        ..culprit
    };
    let reason = drain_reason(&long);
    assert_eq!(reason.chars().count(), 160);
    assert!(reason.starts_with("gpuvet: ") && reason.ends_with('…'));
}
