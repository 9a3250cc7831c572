use super::*;
use gpuvet_model::events::{Attempt, NewEvent};
use gpuvet_model::record::{CheckSpan, CheckWindow, MemberClock, MemberRecord};
use gpuvet_model::results::{
    CheckResult, Entity, EntityResult, Evidence, GroupSummary, Measurement, Outcome, RunContext,
};

pub(crate) const T0: u64 = 1_800_000_000_000;

pub(crate) fn entity_result(
    entity: Entity,
    verdict: Verdict,
    lane: Lane,
    reason: &str,
) -> EntityResult {
    EntityResult {
        measurement: Measurement::ok(entity.clone(), 1.0, vec![1.0, 1.0]),
        entity,
        verdict,
        lane,
        reason: reason.to_owned(),
        evidence: Evidence::default(),
    }
}

/// A three-node group whose coordinator (on `n0`) ran `gemm_flops` then
/// `all_reduce_2`; `n1`'s clock is 1 s ahead, `n2`'s 2 s behind.
pub(crate) fn group_report(checks: Vec<CheckResult>, group: GroupSummary) -> RunReport {
    let spans = |offset: i64| {
        let at = |ms: u64| (ms as i64 + offset) as u64;
        vec![
            CheckSpan {
                check: CheckName::GemmFlops,
                began_ms: at(T0 + 100),
                ended_ms: at(T0 + 1_100),
            },
            CheckSpan {
                check: CheckName::AllReduce2,
                began_ms: at(T0 + 1_200),
                ended_ms: at(T0 + 2_200),
            },
        ]
    };
    let member = |rank: u32, offset_ms: i64| MemberRecord {
        rank,
        node: format!("n{rank}"),
        clock: Some(MemberClock {
            offset_ns: offset_ms * 1_000_000,
            uncertainty_ns: 50_000,
            samples: 5,
        }),
        spans: spans(offset_ms),
        devices: Vec::new(),
    };
    let windows = checks
        .iter()
        .enumerate()
        .map(|(i, c)| CheckWindow {
            check: c.name,
            began_ms: T0 + 100 + 1_100 * i as u64,
            ended_ms: T0 + 1_150 + 1_100 * i as u64,
            status: c.status,
        })
        .collect();
    let mut group = group;
    group.nodes = vec!["n0".into(), "n1".into(), "n2".into()];
    group.timeline = Some(RecordedTimeline {
        coordinator: "n0".into(),
        members: vec![member(0, 0), member(1, 1_000), member(2, -2_000)],
        checks: windows,
    });
    RunReport {
        report_id: "r".into(),
        gpuvet_version: "0".into(),
        job_id: "job".into(),
        attempt: 1,
        node: "n0".into(),
        instance: "i0".into(),
        backend: "sim".into(),
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
    }
}

pub(crate) fn passed(name: CheckName) -> CheckResult {
    CheckResult::judged(name, CheckStatus::Passed, Vec::new())
}

pub(crate) fn event(
    node: &str,
    time_ms: u64,
    kind: EventKind,
    details: serde_json::Value,
) -> Event {
    Event {
        id: 1,
        attempt: Attempt {
            job_id: "job".into(),
            attempt: 1,
            node: node.into(),
            instance: format!("i-{node}"),
        },
        event: NewEvent {
            event_id: String::new(),
            time_ms,
            kind,
            lane: details
                .get("lane")
                .and_then(|l| serde_json::from_value(l.clone()).ok()),
            message: format!("{kind} on {node}"),
            details,
        },
        count: 1,
        last_seen_ms: None,
    }
}

pub(crate) fn record(report: RunReport, events: Vec<Event>) -> JobRecord {
    JobRecord {
        job_id: "job".into(),
        attempt: 1,
        reports: vec![report],
        events,
    }
}

pub(crate) fn incident(rank: u32, kind: IncidentKind, lane: Lane, time_ms: u64) -> GroupIncident {
    GroupIncident {
        rank,
        node: format!("n{rank}"),
        kind,
        lane,
        time_ms,
        detail: format!("rank {rank} (n{rank}) {kind}"),
    }
}

#[test]
fn each_members_spans_move_onto_the_coordinators_clock() {
    let report = group_report(
        vec![passed(CheckName::GemmFlops), passed(CheckName::AllReduce2)],
        GroupSummary::default(),
    );
    let timeline = assemble(&record(report, Vec::new()));
    let gemm_start = |node: &str| {
        timeline
            .entries
            .iter()
            .find(|e| {
                e.node == node
                    && matches!(
                        e.what,
                        What::Check {
                            check: CheckName::GemmFlops,
                            ..
                        }
                    )
            })
            .map(|e| (e.time_ms, e.local_time_ms))
            .unwrap()
    };
    // Every node began at T0+100 on the coordinator's clock, whatever its own said.
    assert_eq!(gemm_start("n0"), (T0 + 100, Some(T0 + 100)));
    assert_eq!(gemm_start("n1"), (T0 + 100, Some(T0 + 1_100)));
    assert_eq!(gemm_start("n2"), (T0 + 100, Some(T0 - 1_900)));
    assert_eq!(timeline.clock_of, "n0");
    assert_eq!(timeline.first_error, None);
    let n1 = timeline.members.iter().find(|m| m.node == "n1").unwrap();
    assert_eq!(
        (n1.offset_ms, n1.uncertainty_ms, n1.measured),
        (1_000.0, 0.05, true)
    );
    assert!(timeline.notes.is_empty(), "{:?}", timeline.notes);
}

#[test]
fn the_groups_first_error_leads_and_what_followed_is_a_consequence() {
    let group = GroupSummary {
        size: None,
        first_error: Some(incident(
            2,
            IncidentKind::Unresponsive,
            Lane::Host,
            T0 + 1_300,
        )),
        secondary: vec![incident(
            1,
            IncidentKind::TimedOut,
            Lane::Network,
            T0 + 1_900,
        )],
        ..GroupSummary::default()
    };
    let failed = CheckResult::judged(
        CheckName::AllReduce2,
        CheckStatus::Failed,
        vec![entity_result(
            Entity::NodePair {
                a: "n0".into(),
                b: "n1".into(),
            },
            Verdict::Faulty,
            Lane::Network,
            "lost its peer",
        )],
    );
    let report = group_report(vec![passed(CheckName::GemmFlops), failed], group);
    let events = vec![event(
        "n1",
        T0 + 4_000,
        EventKind::SanityCheckFailed,
        serde_json::json!({}),
    )];
    let timeline = assemble(&record(report, events));
    let first = timeline.first().unwrap();
    assert_eq!(first.node, "n2");
    assert_eq!(
        first.what,
        What::Incident {
            incident: IncidentKind::Unresponsive
        }
    );
    assert_eq!(first.role, Role::FirstError);
    let role_of =
        |pred: &dyn Fn(&Entry) -> bool| timeline.entries.iter().find(|e| pred(e)).unwrap().role;
    assert_eq!(
        role_of(
            &|e| matches!(&e.what, What::Incident { incident } if *incident == IncidentKind::TimedOut)
        ),
        Role::Consequence
    );
    assert_eq!(
        role_of(&|e| matches!(e.what, What::Finding { .. })),
        Role::Consequence
    );
    let sanity = timeline
        .entries
        .iter()
        .find(|e| matches!(e.what, What::Event { .. }))
        .unwrap();
    assert_eq!(sanity.role, Role::Consequence);
    // n1's clock is 1 s ahead: its event lands 1 s earlier.
    assert_eq!(
        (sanity.time_ms, sanity.local_time_ms),
        (T0 + 3_000, Some(T0 + 4_000))
    );
    // In time order.
    assert!(
        timeline
            .entries
            .windows(2)
            .all(|w| w[0].time_ms <= w[1].time_ms)
    );
}

#[test]
fn without_an_incident_the_earliest_finding_is_the_first_error() {
    let gemm = CheckResult::judged(
        CheckName::GemmFlops,
        CheckStatus::Failed,
        vec![entity_result(
            Entity::Device {
                node: "n2".into(),
                index: 3,
            },
            Verdict::Slow,
            Lane::Host,
            "38% below its peers",
        )],
    );
    let pairs = CheckResult::judged(
        CheckName::AllReduce2,
        CheckStatus::Failed,
        vec![entity_result(
            Entity::NodePair {
                a: "n0".into(),
                b: "n1".into(),
            },
            Verdict::Slow,
            Lane::Network,
            "slow link",
        )],
    );
    let report = group_report(vec![gemm, pairs], GroupSummary::default());
    let timeline = assemble(&record(report, Vec::new()));
    let first = timeline.first().unwrap();
    assert_eq!(first.node, "n2");
    assert_eq!(first.lane, Some(Lane::Host));
    // At the end of n2's own gemm span, on the coordinator's clock.
    assert_eq!(first.time_ms, T0 + 1_100);
    let link = timeline
        .entries
        .iter()
        .find(
            |e| matches!(&e.what, What::Finding { entity, .. } if entity.to_string() == "n0<->n1"),
        )
        .unwrap();
    assert_eq!(link.role, Role::OtherFailure);
}

#[test]
fn a_runtime_xid_is_placed_by_its_nodes_clock_and_can_be_the_first_error() {
    let report = group_report(
        vec![passed(CheckName::GemmFlops), passed(CheckName::AllReduce2)],
        GroupSummary::default(),
    );
    let xid = event(
        "n2",
        T0 + 5_000,
        EventKind::RuntimeCheckFailed,
        serde_json::json!({"source": "kmsg", "check": "xid", "xid": 79, "lane": "host"}),
    );
    let timeline = assemble(&record(report, vec![xid]));
    let first = timeline.first().unwrap();
    assert_eq!(
        first.what,
        What::RuntimeFinding {
            check: "xid".into(),
            source: "kmsg".into(),
            xid: Some(79)
        }
    );
    // n2's clock is 2 s behind the coordinator's.
    assert_eq!(first.time_ms, T0 + 7_000);
}

#[test]
fn an_event_counted_many_times_says_how_often_and_when_last() {
    let report = group_report(vec![passed(CheckName::GemmFlops)], GroupSummary::default());
    let mut xid = event(
        "n2",
        T0 + 5_000,
        EventKind::RuntimeCheckFailed,
        serde_json::json!({"source": "kmsg", "check": "xid", "xid": 79, "lane": "host"}),
    );
    xid.count = 40;
    xid.last_seen_ms = Some(1_796_011_506_789);
    let once = event(
        "n1",
        T0 + 6_000,
        EventKind::InstanceExited,
        serde_json::json!({}),
    );
    let timeline = assemble(&record(report, vec![xid, once]));
    let counted = timeline.first().unwrap();
    assert_eq!(
        counted.detail,
        "RuntimeCheckFailed on n2 (×40, last 2026-11-30T04:05:06.789Z)"
    );
    let exited = timeline
        .entries
        .iter()
        .find(|e| e.node == "n1" && matches!(e.what, What::Event { .. }))
        .unwrap();
    assert_eq!(exited.detail, "InstanceExited on n1");
    assert!(render(&timeline).contains("(×40, last 2026-11-30T04:05:06.789Z)"));
}

#[test]
fn flight_recorder_collectives_land_on_their_nodes_clock() {
    let report = group_report(
        vec![passed(CheckName::GemmFlops), passed(CheckName::AllReduce2)],
        GroupSummary::default(),
    );
    let collective = |rank: u32, node: &str, created_ms: i64| {
        serde_json::to_value(FrCollective {
            torch_rank: rank,
            node: Some(node.into()),
            op: "nccl:all_reduce".into(),
            seq: 7,
            state: "scheduled".into(),
            created_ns: Some(created_ms * 1_000_000),
            completed_ns: None,
        })
        .unwrap()
    };
    let details = serde_json::json!({
        "source": gpuvet_model::record::FLIGHT_RECORDER_SOURCE,
        "check": "fr.not_completed",
        "lane": "host",
        "collectives": [
            collective(2, "n1", (T0 + 9_000) as i64),
            collective(4, "n2", (T0 + 6_000) as i64),
            {"torch_rank": 5, "op": "nccl:all_reduce", "seq": 7, "state": "scheduled"},
        ],
    });
    let fr = event("n1", T0 + 9_500, EventKind::RuntimeCheckFailed, details);
    let timeline = assemble(&record(report, vec![fr]));
    let times: Vec<(u32, u64)> = timeline
        .entries
        .iter()
        .filter_map(|e| match e.what {
            What::Collective { torch_rank, .. } => Some((torch_rank, e.time_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(times, vec![(2, T0 + 8_000), (4, T0 + 8_000)]);
    assert!(
        timeline
            .notes
            .iter()
            .any(|n| n.contains("1 flight-recorder")),
        "{:?}",
        timeline.notes
    );
    assert_eq!(timeline.first().unwrap().node, "n1");
}

#[test]
fn a_single_nodes_checks_follow_one_another_from_its_start() {
    let mut report = group_report(vec![passed(CheckName::GemmFlops)], GroupSummary::default());
    report.group = None;
    report.checks[0].duration_secs = 1.5;
    let mut second = passed(CheckName::KernelLaunch);
    second.duration_secs = 0.5;
    report.checks.push(second);
    let stranger = event(
        "other",
        T0 + 10,
        EventKind::InstanceStarted,
        serde_json::json!({}),
    );
    let timeline = assemble(&record(report, vec![stranger]));
    let spans: Vec<(u64, u64)> = timeline
        .entries
        .iter()
        .filter_map(|e| match e.what {
            What::Check { until_ms, .. } => Some((e.time_ms, until_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(spans, vec![(T0, T0 + 1_500), (T0 + 1_500, T0 + 2_000)]);
    assert!(timeline.notes[0].contains("other"), "{:?}", timeline.notes);
}

#[test]
fn nothing_kept_makes_an_empty_timeline() {
    let timeline = assemble(&JobRecord {
        job_id: "j".into(),
        attempt: 2,
        reports: Vec::new(),
        events: Vec::new(),
    });
    assert!(timeline.entries.is_empty());
    assert_eq!(timeline.first_error, None);
    assert!(render(&timeline).starts_with("timeline of job `j` attempt 2"));
}

#[test]
fn the_text_marks_the_first_error_and_shows_only_its_nodes_spans() {
    let group = GroupSummary {
        size: None,
        first_error: Some(incident(2, IncidentKind::Crashed, Lane::Host, T0 + 1_300)),
        ..GroupSummary::default()
    };
    let report = group_report(
        vec![passed(CheckName::GemmFlops), passed(CheckName::AllReduce2)],
        group,
    );
    let text = render(&assemble(&record(report, Vec::new())));
    let first_line = text.lines().find(|l| l.starts_with(">>")).unwrap();
    assert!(
        first_line.contains("n2") && first_line.contains("FIRST ERROR [host] crashed"),
        "{text}"
    );
    assert!(
        text.contains("(4 spans of other nodes' checks are in `--json`)"),
        "{text}"
    );
    assert!(
        text.contains("clocks: n1 +1000.000 ms ±0.050, n2 -2000.000 ms ±0.050"),
        "{text}"
    );
}

#[test]
fn event_kinds_read_as_words() {
    assert_eq!(
        event_words(EventKind::SanityCheckFailed),
        "sanity check failed"
    );
    assert_eq!(
        event_words(EventKind::InstanceRebuildRequested),
        "instance rebuild requested"
    );
}

#[test]
fn the_text_says_a_nodes_alike_findings_once() {
    let gemm = crate::fold::tests::device_check(CheckName::GemmFlops, &["n0", "n1"], |n, _| {
        if n == "n1" { 420.0 } else { 700.0 }
    });
    let report = crate::fold::tests::report(vec![gemm]);
    let text = render(&assemble(&record(report, Vec::new())));
    let findings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("gemm_flops finding"))
        .collect();
    assert_eq!(findings.len(), 2, "the first error, then the rest: {text}");
    assert!(
        findings[0].contains("FIRST ERROR [host] gemm_flops finding: n1/dev0 "),
        "{text}"
    );
    assert!(
        findings[1].contains("gemm_flops finding: n1/dev[1-7] slow:"),
        "{text}"
    );
}

#[test]
fn slurm_names_come_from_reports_and_events_and_fold_into_one_line() {
    let names = |node: &str, restarts: u32| SlurmNames {
        job_id: "4242".into(),
        step_id: Some("0".into()),
        node: Some(node.into()),
        restart_count: restarts,
    };
    let mut report = group_report(vec![passed(CheckName::GemmFlops)], GroupSummary::default());
    report.context = Some(RunContext {
        slurm: Some(names("n0", 1)),
        ..Default::default()
    });
    let started = |node: &str| {
        event(
            node,
            T0 + 10,
            EventKind::InstanceStarted,
            serde_json::json!({ "slurm": names(node, 1) }),
        )
    };
    let timeline = assemble(&record(report, vec![started("n1"), started("n2")]));
    let slurm: Vec<Option<&str>> = timeline
        .members
        .iter()
        .map(|m| m.slurm.as_ref().and_then(|s| s.node.as_deref()))
        .collect();
    assert_eq!(slurm, [Some("n0"), Some("n1"), Some("n2")]);
    let text = render(&timeline);
    assert!(
        text.contains("\nslurm: job 4242 step 0 (requeued 1×) on n[0-2]\n"),
        "{text}"
    );
    // Outside Slurm the line is not there.
    let plain = group_report(vec![passed(CheckName::GemmFlops)], GroupSummary::default());
    let text = render(&assemble(&record(plain, Vec::new())));
    assert!(!text.contains("slurm"), "{text}");
}
