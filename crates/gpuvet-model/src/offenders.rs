//! Repeat offenders and the proof a quarantined node needs to come back, as pure rules
//! over a node's runs across jobs (newest first, as the store lists them).
//!
//! - A node is a repeat offender when at least `failures` of its last `of_last` runs
//!   failed because of it (`gpuvet.repeat_offender`, default 3 of 5): a node that fails
//!   every few days is named as such, not treated as new each time. A group fails as
//!   one, so in a group only the node its findings or first error name failed
//!   ([`fails_its_node`]); the others' runs failed too, not because of them.
//! - A quarantined node may come back only when a run that started after its
//!   quarantine passed; a repeat offender needs its last two runs since then to pass
//!   (two in a row). Without a recorded time of the quarantine nothing can be proven.

use serde::{Deserialize, Serialize};

use crate::overview::RunSummary;
use crate::results::{Entity, Outcome, RunReport};
use crate::time::format_utc_ms;

/// `gpuvet.repeat_offender`: a node that failed `failures` of its last `of_last` runs
/// is a repeat offender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepeatOffenderPolicy {
    /// K: failed runs that make a repeat offender; 1 to `of_last`. Default 3.
    pub failures: u32,
    /// M: how many of the node's latest runs are looked at; 1 to 100. Default 5.
    pub of_last: u32,
}

impl Default for RepeatOffenderPolicy {
    fn default() -> Self {
        RepeatOffenderPolicy {
            failures: 3,
            of_last: 5,
        }
    }
}

/// The largest `of_last`: a longer memory is the history page's job.
pub const MAX_OF_LAST: u32 = 100;

/// Passing runs since its quarantine that a repeat offender needs, in a row.
pub const REPEAT_OFFENDER_PASSES: usize = 2;

/// A node flagged as a repeat offender: `failed` of its last `of_last` runs failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RepeatOffender {
    pub failed: u32,
    /// How many runs were looked at: the policy's `of_last`, or fewer when the node
    /// has run fewer times.
    pub of_last: u32,
}

impl std::fmt::Display for RepeatOffender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "repeat offender: failed {} of its last {} runs",
            self.failed, self.of_last
        )
    }
}

/// Whether `report` failed because of its own node: it failed, and, in a group of
/// two or more, one of its findings names that node (a GPU of it, or it), or the
/// group's first error is on it. A pair of nodes is a link suspect and names neither.
pub fn fails_its_node(report: &RunReport) -> bool {
    if report.outcome != Outcome::Failed {
        return false;
    }
    let Some(group) = report.group.as_ref().filter(|g| g.nodes.len() >= 2) else {
        return true;
    };
    let named = report.findings().any(|(_, finding)| match &finding.entity {
        Entity::Device { node, .. } | Entity::Node { node } => *node == report.node,
        Entity::NodePair { .. } => false,
    });
    named
        || group
            .first_error
            .as_ref()
            .is_some_and(|e| e.node == report.node)
}

/// Whether the runs, newest first, each `true` when it failed because of its node
/// ([`fails_its_node`]), make their node a repeat offender under `policy`.
pub fn repeat_offender(
    node_failed_newest_first: impl IntoIterator<Item = bool>,
    policy: &RepeatOffenderPolicy,
) -> Option<RepeatOffender> {
    let mut looked = 0;
    let mut failed = 0;
    for node_failed in node_failed_newest_first
        .into_iter()
        .take(policy.of_last as usize)
    {
        looked += 1;
        failed += u32::from(node_failed);
    }
    (failed >= policy.failures.max(1)).then_some(RepeatOffender {
        failed,
        of_last: looked,
    })
}

/// What a quarantine's lifting rests on: the passing runs since it began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proof {
    /// The runs that proved it, newest first.
    pub passing_runs: Vec<i64>,
    /// Whether two in a row were needed (a repeat offender).
    pub repeat_offender: Option<RepeatOffender>,
    /// One line for people: which runs passed, when.
    pub summary: String,
}

/// Why a quarantine may not be lifted yet; its `Display` is the reason in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unproven {
    /// The quarantine's time is unknown, so no run can be said to come after it.
    NoQuarantineTime,
    /// No run started since the quarantine, or too few for a repeat offender.
    TooFewRuns {
        since_ms: u64,
        runs: usize,
        needed: usize,
        repeat_offender: Option<RepeatOffender>,
    },
    /// A run since the quarantine did not pass.
    NotPassed {
        since_ms: u64,
        run_id: i64,
        started_at_ms: u64,
        outcome: Outcome,
        needed: usize,
        repeat_offender: Option<RepeatOffender>,
    },
}

impl std::fmt::Display for Unproven {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // What a proof takes: one passing run, or two in a row for a repeat offender.
        let needs = |needed: usize, flag: &Option<RepeatOffender>| match flag {
            Some(flag) => {
                format!("as a {flag}, it needs {needed} passing runs in a row since its quarantine")
            }
            None => "it needs a passing run since its quarantine".to_owned(),
        };
        match self {
            Unproven::NoQuarantineTime => f.write_str(
                "the quarantine has no readable time, so no run can be shown to come after it",
            ),
            Unproven::TooFewRuns {
                since_ms,
                runs,
                needed,
                repeat_offender,
            } => {
                let ran = match runs {
                    0 => "no run".to_owned(),
                    n => format!("only {n} run(s)"),
                };
                write!(
                    f,
                    "{ran} started since the quarantine at `{}`; {}",
                    format_utc_ms(*since_ms),
                    needs(*needed, repeat_offender)
                )
            }
            Unproven::NotPassed {
                since_ms,
                run_id,
                started_at_ms,
                outcome,
                needed,
                repeat_offender,
            } => write!(
                f,
                "run `{run_id}` at `{}`, after the quarantine at `{}`, {}; {}",
                format_utc_ms(*started_at_ms),
                format_utc_ms(*since_ms),
                match outcome {
                    Outcome::Passed => "passed",
                    Outcome::Incomplete => "was incomplete",
                    Outcome::Failed => "failed",
                },
                needs(*needed, repeat_offender)
            ),
        }
    }
}

/// Whether `runs` (the node's, newest first) prove it healthy since its quarantine at
/// `quarantined_at_ms`: its latest run since then passed, or, for a repeat offender
/// (flagged at the quarantine, or by its runs before it), its latest two in a row.
pub fn untaint_proof(
    runs_newest_first: &[RunSummary],
    quarantined_at_ms: Option<u64>,
    flagged_at_quarantine: Option<RepeatOffender>,
    policy: &RepeatOffenderPolicy,
) -> Result<Proof, Unproven> {
    let since_ms = quarantined_at_ms.ok_or(Unproven::NoQuarantineTime)?;
    let (after, before): (Vec<&RunSummary>, Vec<&RunSummary>) = runs_newest_first
        .iter()
        .partition(|run| run.started_at_ms >= since_ms);
    let repeat_offender = flagged_at_quarantine
        .or_else(|| repeat_offender(before.iter().map(|run| run.node_failed), policy));
    let needed = if repeat_offender.is_some() {
        REPEAT_OFFENDER_PASSES
    } else {
        1
    };
    if let Some(run) = after
        .iter()
        .take(needed)
        .find(|run| run.outcome != Outcome::Passed)
    {
        return Err(Unproven::NotPassed {
            since_ms,
            run_id: run.run_id,
            started_at_ms: run.started_at_ms,
            outcome: run.outcome,
            needed,
            repeat_offender,
        });
    }
    if after.len() < needed {
        return Err(Unproven::TooFewRuns {
            since_ms,
            runs: after.len(),
            needed,
            repeat_offender,
        });
    }
    let passing: Vec<&RunSummary> = after.into_iter().take(needed).collect();
    let named: Vec<String> = passing
        .iter()
        .map(|run| format!("`{}` at `{}`", run.run_id, format_utc_ms(run.started_at_ms)))
        .collect();
    Ok(Proof {
        passing_runs: passing.iter().map(|run| run.run_id).collect(),
        repeat_offender,
        summary: format!(
            "passed since the quarantine at `{}`: run {}",
            format_utc_ms(since_ms),
            named.join(" and ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(run_id: i64, started_at_ms: u64, outcome: Outcome) -> RunSummary {
        RunSummary {
            run_id,
            report_id: String::new(),
            outcome,
            backend: "sim".into(),
            started_at_ms,
            duration_secs: Some(1.0),
            checks: 1,
            failed_checks: u32::from(outcome == Outcome::Failed),
            findings: 0,
            node_failed: outcome == Outcome::Failed,
        }
    }

    use Outcome::{Failed as F, Incomplete as I, Passed as P};

    /// `repeat_offender` of runs that each failed because of their node when failed.
    fn repeat_offender<const N: usize>(
        outcomes: [Outcome; N],
        policy: &RepeatOffenderPolicy,
    ) -> Option<RepeatOffender> {
        super::repeat_offender(outcomes.map(|o| o == Outcome::Failed), policy)
    }

    #[test]
    fn k_failures_of_the_last_m_runs_flag_a_node() {
        let policy = RepeatOffenderPolicy::default();
        assert_eq!(
            repeat_offender([F, P, F, P, F], &policy),
            Some(RepeatOffender {
                failed: 3,
                of_last: 5
            })
        );
        // Two of five is not three; an incomplete run is not a failure.
        assert_eq!(repeat_offender([F, P, I, I, F], &policy), None);
        // Only the last five count: the sixth failure is too old.
        assert_eq!(repeat_offender([F, P, F, P, P, F, F], &policy), None);
        // Fewer runs than M still flag a node that failed K of them.
        assert_eq!(
            repeat_offender([F, F, F], &policy),
            Some(RepeatOffender {
                failed: 3,
                of_last: 3
            })
        );
        assert_eq!(repeat_offender([], &policy), None);
        let strict = RepeatOffenderPolicy {
            failures: 1,
            of_last: 1,
        };
        assert!(repeat_offender([F, P], &strict).is_some());
        assert!(repeat_offender([P, F], &strict).is_none());
        assert_eq!(
            RepeatOffender {
                failed: 3,
                of_last: 5
            }
            .to_string(),
            "repeat offender: failed 3 of its last 5 runs"
        );
    }

    const TAINT: u64 = 1_764_673_200_000; // 2025-12-02T11:00:00Z

    #[test]
    fn a_passing_run_after_the_quarantine_proves_a_node() {
        let policy = RepeatOffenderPolicy::default();
        let runs = [run(9, TAINT + 60_000, P), run(8, TAINT - 60_000, F)];
        let proof = untaint_proof(&runs, Some(TAINT), None, &policy).unwrap();
        assert_eq!(proof.passing_runs, [9]);
        assert_eq!(proof.repeat_offender, None);
        assert_eq!(
            proof.summary,
            "passed since the quarantine at `2025-12-02T11:00:00.000Z`: run `9` at \
             `2025-12-02T11:01:00.000Z`"
        );
    }

    #[test]
    fn no_run_since_the_quarantine_or_a_failing_one_proves_nothing() {
        let policy = RepeatOffenderPolicy::default();
        // A pass before the taint is no proof.
        let before = [run(8, TAINT - 1, P)];
        let refused = untaint_proof(&before, Some(TAINT), None, &policy).unwrap_err();
        assert!(
            matches!(
                refused,
                Unproven::TooFewRuns {
                    runs: 0,
                    needed: 1,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(
            refused.to_string(),
            "no run started since the quarantine at `2025-12-02T11:00:00.000Z`; it needs a \
             passing run since its quarantine"
        );
        // The latest run since failed, even with an older pass since.
        let failing = [run(10, TAINT + 2, F), run(9, TAINT + 1, P)];
        let refused = untaint_proof(&failing, Some(TAINT), None, &policy).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "run `10` at `2025-12-02T11:00:00.002Z`, after the quarantine at \
             `2025-12-02T11:00:00.000Z`, failed; it needs a passing run since its quarantine"
        );
        let incomplete = [run(10, TAINT + 2, I)];
        assert!(matches!(
            untaint_proof(&incomplete, Some(TAINT), None, &policy),
            Err(Unproven::NotPassed {
                outcome: Outcome::Incomplete,
                ..
            })
        ));
        assert_eq!(
            untaint_proof(&[run(9, TAINT + 1, P)], None, None, &policy),
            Err(Unproven::NoQuarantineTime)
        );
    }

    #[test]
    fn a_repeat_offender_needs_two_passes_in_a_row() {
        let policy = RepeatOffenderPolicy::default();
        // Flagged by its runs before the quarantine: F, F, F of the last five.
        let history = [
            run(3, TAINT - 3, F),
            run(2, TAINT - 2, F),
            run(1, TAINT - 1, F),
        ];
        let one_pass: Vec<RunSummary> = [run(4, TAINT + 1, P)]
            .into_iter()
            .chain(history.iter().cloned())
            .collect();
        let refused = untaint_proof(&one_pass, Some(TAINT), None, &policy).unwrap_err();
        assert!(
            matches!(
                refused,
                Unproven::TooFewRuns {
                    runs: 1,
                    needed: 2,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert!(
            refused.to_string().ends_with(
                "; as a repeat offender: failed 3 of its last 3 runs, it needs 2 passing \
                     runs in a row since its quarantine"
            ),
            "{refused}"
        );
        // Pass, fail, pass: not two in a row.
        let broken: Vec<RunSummary> = [run(6, TAINT + 3, P), run(5, TAINT + 2, F)]
            .into_iter()
            .chain(one_pass.iter().cloned())
            .collect();
        assert!(matches!(
            untaint_proof(&broken, Some(TAINT), None, &policy),
            Err(Unproven::NotPassed { run_id: 5, .. })
        ));
        let twice: Vec<RunSummary> = [run(7, TAINT + 4, P)]
            .into_iter()
            .chain(broken.iter().cloned())
            .collect();
        let proof = untaint_proof(&twice, Some(TAINT), None, &policy).unwrap();
        assert_eq!(proof.passing_runs, [7, 6]);
        assert!(proof.repeat_offender.is_some());
        // Flagged at the quarantine, with no history here: two passes still.
        let flag = RepeatOffender {
            failed: 3,
            of_last: 5,
        };
        assert!(untaint_proof(&[run(4, TAINT + 1, P)], Some(TAINT), Some(flag), &policy).is_err());
    }

    fn report(
        node: &str,
        members: &[&str],
        slow: Option<&str>,
        first_error: Option<&str>,
    ) -> RunReport {
        use crate::catalog::CheckName;
        use crate::results::{CheckResult, CheckStatus, EntityResult, GroupIncident, GroupSummary};
        let entities: Vec<EntityResult> = slow
            .into_iter()
            .map(|on| {
                serde_json::from_value(serde_json::json!({
                    "entity": { "kind": "device", "node": on, "index": 1 },
                    "verdict": "slow", "lane": "host", "reason": "40% below", "evidence": {},
                    "measurement": { "entity": { "kind": "device", "node": on, "index": 1 }, "value": 1.0 },
                }))
                .unwrap()
            })
            .collect();
        let mut report: RunReport = serde_json::from_value(serde_json::json!({
            "gpuvet_version": "0", "job_id": "j", "attempt": 1, "node": node,
            "instance": "p", "backend": "sim", "devices": [], "started_at_ms": 0,
            "duration_secs": 1.0, "timeout_secs": 1.0, "outcome": "failed", "checks": [],
        }))
        .unwrap();
        report.checks = vec![CheckResult::judged(
            CheckName::GemmFlops,
            CheckStatus::Failed,
            entities,
        )];
        if !members.is_empty() {
            report.group = Some(GroupSummary {
                nodes: members.iter().map(|n| (*n).to_owned()).collect(),
                first_error: first_error.map(|on| GroupIncident {
                    rank: 1,
                    node: on.into(),
                    kind: crate::results::IncidentKind::Crashed,
                    lane: crate::results::Lane::Host,
                    time_ms: 0,
                    detail: "agent exited".into(),
                }),
                ..GroupSummary::default()
            });
        }
        report
    }

    #[test]
    fn in_a_group_only_the_node_its_findings_or_first_error_name_failed() {
        let group = ["n1", "n2", "n3"];
        // n2's slow GPU: n2's run failed because of n2, n1's because of n2.
        assert!(fails_its_node(&report("n2", &group, Some("n2"), None)));
        assert!(!fails_its_node(&report("n1", &group, Some("n2"), None)));
        // n3 crashed first: that counts against n3 alone.
        assert!(fails_its_node(&report("n3", &group, None, Some("n3"))));
        assert!(!fails_its_node(&report("n1", &group, None, Some("n3"))));
        // Alone, a failed run is its node's, whatever it names.
        assert!(fails_its_node(&report("n1", &[], None, None)));
        let mut passed = report("n1", &[], None, None);
        passed.outcome = Outcome::Passed;
        assert!(!fails_its_node(&passed));
    }
}
