//! Instances, runs, events and a group's record for the site's unit tests, and the
//! hostile names every page is tested with.

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Attempt, Event, EventKind, NewEvent};
use gpuvet_model::overview::{InstanceSummary, JobSummary, RunSummary};
use gpuvet_model::record::{
    CheckSpan, CheckWindow, JobRecord, MemberClock, MemberRecord, RecordedTimeline,
};
use gpuvet_model::results::{
    CheckResult, CheckStatus, Entity, EntityResult, Evidence, GroupIncident, GroupSummary,
    IncidentKind, Lane, Measurement, Outcome, RunReport, Verdict,
};

/// A node name that would run script if a page wrote it unescaped.
pub const HOSTILE_NODE: &str = "<script>alert('x')</script>";
/// A job name that would close an attribute and add an element.
pub const HOSTILE_JOB: &str = "\"><img src=x onerror=alert(1)>";

/// 2026-01-01T00:00:00Z.
pub const T0: u64 = 1_767_225_600_000;

/// Neither hostile name appears as markup, and both appear as text.
pub fn assert_no_markup_from(html: &str) {
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"),
        "the node as text: {html}"
    );
    assert!(
        html.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"),
        "the job as text: {html}"
    );
}

pub fn attempt(job: &str, attempt: u32, node: &str) -> Attempt {
    Attempt {
        job_id: job.to_owned(),
        attempt,
        node: node.to_owned(),
        instance: format!("pod-{node}"),
    }
}

pub fn event(id: i64, kind: EventKind, job: &str, attempt_no: u32, node: &str) -> Event {
    Event {
        id,
        attempt: attempt(job, attempt_no, node),
        event: NewEvent {
            event_id: String::new(),
            time_ms: T0 + id as u64 * 1000,
            kind,
            lane: Some(Lane::Host),
            message: format!("{kind} on {node}"),
            details: serde_json::Value::Null,
        },
        count: 1,
        last_seen_ms: None,
    }
}

pub fn run(run_id: i64, outcome: Outcome) -> RunSummary {
    RunSummary {
        run_id,
        report_id: String::new(),
        outcome,
        backend: "sim".to_owned(),
        started_at_ms: T0 + 60_000,
        duration_secs: Some(12.5),
        checks: 3,
        failed_checks: u32::from(outcome == Outcome::Failed),
        findings: u32::from(outcome == Outcome::Failed) * 2,
        node_failed: false,
    }
}

/// An instance of attempt 2 with a run of `outcome`, or running without one.
pub fn instance(job: &str, node: &str, outcome: Option<Outcome>) -> InstanceSummary {
    InstanceSummary {
        attempt: attempt(job, 2, node),
        attempt_started_at_ms: T0,
        latest_run: outcome.map(|outcome| run(1, outcome)),
    }
}

/// `nodes` instances of `job`, `node-0` up: the given ranks failed, incomplete or
/// running, the rest passed; and the job's summary, counted from them.
pub fn job(
    job_id: &str,
    nodes: usize,
    failed: &[usize],
    incomplete: &[usize],
    running: &[usize],
) -> (JobSummary, Vec<InstanceSummary>) {
    let instances: Vec<InstanceSummary> = (0..nodes)
        .map(|rank| {
            let outcome = if failed.contains(&rank) {
                Some(Outcome::Failed)
            } else if incomplete.contains(&rank) {
                Some(Outcome::Incomplete)
            } else if running.contains(&rank) {
                None
            } else {
                Some(Outcome::Passed)
            };
            instance(job_id, &format!("node-{rank}"), outcome)
        })
        .collect();
    let count = |status: &str| instances.iter().filter(|i| i.status() == status).count() as u32;
    let summary = JobSummary {
        job_id: job_id.to_owned(),
        latest_attempt: 2,
        nodes: nodes as u32,
        passed: count("passed"),
        failed: count("failed"),
        incomplete: count("incomplete"),
        running: count("running"),
        started_at_ms: T0,
    };
    (summary, instances)
}

/// Attempt 1 of `job` on a group of `names` (the first coordinating) that ran
/// `gemm_flops` then `all_reduce_2`, each node's clock off by up to 2 ms: the node at
/// `failing` stopped answering during the second check (the group's first error), the
/// next one timed out waiting for it and their pair was found faulty, the last node
/// saw XID 79 of its own, and every node recorded that its sanity check failed.
pub fn group_record(job: &str, names: &[String], failing: usize) -> JobRecord {
    let count = names.len();
    let next = (failing + 1) % count;
    let offset = |i: usize| (i % 5) as i64 - 2;
    let local = |i: usize, ms: u64| (ms as i64 + offset(i)) as u64;
    let members = names
        .iter()
        .enumerate()
        .map(|(i, node)| MemberRecord {
            rank: i as u32,
            node: node.clone(),
            clock: Some(MemberClock {
                offset_ns: offset(i) * 1_000_000,
                uncertainty_ns: 40_000,
                samples: 5,
            }),
            spans: vec![
                CheckSpan {
                    check: CheckName::GemmFlops,
                    began_ms: local(i, T0 + 100),
                    ended_ms: local(i, T0 + 1_100 + i as u64 % 7),
                },
                CheckSpan {
                    check: CheckName::AllReduce2,
                    began_ms: local(i, T0 + 1_200),
                    ended_ms: local(i, if i == failing { T0 + 1_500 } else { T0 + 2_200 }),
                },
            ],
            devices: Vec::new(),
        })
        .collect();
    let incident = |rank: usize, kind: IncidentKind, lane: Lane, time_ms: u64| GroupIncident {
        rank: rank as u32,
        node: names[rank].clone(),
        kind,
        lane,
        time_ms,
        detail: format!("rank {rank} ({}) {}", names[rank], kind.words()),
    };
    let pair = Entity::NodePair {
        a: names[next].clone(),
        b: names[failing].clone(),
    };
    let faulty_pair = EntityResult {
        measurement: Measurement::ok(pair.clone(), 0.0, vec![0.0]),
        entity: pair,
        verdict: Verdict::Faulty,
        lane: Lane::Network,
        reason: "lost its peer".to_owned(),
        evidence: Evidence::default(),
    };
    let checks = vec![
        CheckResult::judged(CheckName::GemmFlops, CheckStatus::Passed, Vec::new()),
        CheckResult::judged(
            CheckName::AllReduce2,
            CheckStatus::Failed,
            vec![faulty_pair],
        ),
    ];
    let group = GroupSummary {
        size: None,
        nodes: names.to_vec(),
        first_error: Some(incident(
            failing,
            IncidentKind::Unresponsive,
            Lane::Host,
            T0 + 1_500,
        )),
        secondary: vec![incident(
            next,
            IncidentKind::TimedOut,
            Lane::Network,
            T0 + 1_900,
        )],
        other_failures: Vec::new(),
        timeline: Some(RecordedTimeline {
            coordinator: names[0].clone(),
            members,
            checks: vec![
                CheckWindow {
                    check: CheckName::GemmFlops,
                    began_ms: T0 + 100,
                    ended_ms: T0 + 1_110,
                    status: CheckStatus::Passed,
                },
                CheckWindow {
                    check: CheckName::AllReduce2,
                    began_ms: T0 + 1_200,
                    ended_ms: T0 + 2_200,
                    status: CheckStatus::Failed,
                },
            ],
        }),
    };
    let report = RunReport {
        report_id: "r-0".to_owned(),
        gpuvet_version: "0".to_owned(),
        job_id: job.to_owned(),
        attempt: 1,
        node: names[0].clone(),
        instance: format!("pod-{}", names[0]),
        backend: "sim".to_owned(),
        devices: Vec::new(),
        started_at_ms: T0,
        duration_secs: 2.5,
        timeout_secs: 60.0,
        outcome: Outcome::of(&checks),
        checks,
        group: Some(group),
        context: None,
        diagnosis: None,
        repeat_offender: None,
    };
    let event_at = |id: usize, i: usize, time_ms: u64, kind: EventKind, details| Event {
        id: id as i64,
        attempt: attempt(job, 1, &names[i]),
        event: NewEvent {
            event_id: format!("e-{id}"),
            time_ms: local(i, time_ms),
            kind,
            lane: Some(Lane::Host),
            message: format!("{kind} on {}", names[i]),
            details,
        },
        count: 1,
        last_seen_ms: None,
    };
    let last = count - 1;
    let mut events = vec![event_at(
        0,
        last,
        T0 + 2_000,
        EventKind::RuntimeCheckFailed,
        serde_json::json!({"check": "xid", "source": "c4d", "xid": 79}),
    )];
    events.extend((0..count).map(|i| {
        event_at(
            i + 1,
            i,
            T0 + 2_300,
            EventKind::SanityCheckFailed,
            serde_json::Value::Null,
        )
    }));
    events.sort_by_key(|e| e.event.time_ms);
    JobRecord {
        job_id: job.to_owned(),
        attempt: 1,
        reports: vec![report],
        events,
    }
}
