//! Instances, runs and events for the site's unit tests, and the hostile names every
//! page is tested with.

use gpuvet_core::events::{Attempt, Event, EventKind, NewEvent};
use gpuvet_core::overview::{InstanceSummary, JobSummary, RunSummary};
use gpuvet_core::results::{Lane, Outcome};

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
