use super::*;
use crate::fold::tests::{device_check, entity_check, node, report};
use crate::timeline::tests::{T0, group_report, incident, passed, record};
use gpuvet_model::diagnosis::TERMINAL_WIDTH;
use gpuvet_model::gpu_health::Severity;
use gpuvet_model::results::GroupSummary;
use gpuvet_model::runtime::ActionClass;

const NODES: [&str; 4] = ["n0", "n1", "n2", "n3"];

#[test]
fn a_slow_node_is_lifted_from_its_first_gpu_to_the_node() {
    let slow = |n: &str| if n == "n2" { 0.6 } else { 1.0 };
    let report = report(vec![
        device_check(CheckName::GemmFlops, &NODES, |n, _| 700.0 * slow(n)),
        entity_check(CheckName::AllReduce, &NODES.map(node), |e| {
            45.0 * slow(e.node())
        }),
        passed(CheckName::NetworkConnectivity),
    ]);
    let diagnosis = diagnose_report(&report).expect("a failed run is diagnosed");
    assert_eq!(diagnosis.headline, "n2 is slow");
    assert_eq!(
        diagnosis.why,
        "slow in 2 of 2 checks, all 8 GPUs and every link"
    );
    assert_eq!(diagnosis.lane, Some(Lane::Host));
    assert_eq!(diagnosis.team, "the host team");
    assert!(
        diagnosis.next_step.starts_with("check `n2` as a whole"),
        "{}",
        diagnosis.next_step
    );
    assert!(diagnosis.others.is_empty(), "{:#?}", diagnosis.others);
    let lines = diagnosis.lines(TERMINAL_WIDTH);
    assert_eq!(
        lines[0],
        "verdict: n2 is slow; hand it to the host team [lane: host]"
    );
}

#[test]
fn one_slow_gpu_is_named_and_the_others_are_listed() {
    let report = report(vec![device_check(
        CheckName::GemmFlops,
        &NODES[..2],
        |n, index| match (n, index) {
            ("n0", 3) => 350.0,
            ("n1", 5) => 420.0,
            _ => 700.0,
        },
    )]);
    let diagnosis = diagnose_report(&report).unwrap();
    assert_eq!(diagnosis.headline, "n0/dev3 is slow in gemm_flops");
    assert_eq!(
        diagnosis.why,
        "350 TFLOPS, 50 % below the peer median 700 TFLOPS (threshold 5 %)"
    );
    assert!(diagnosis.next_step.contains("--checks gemm_flops` on `n0`"));
    assert_eq!(
        diagnosis.others,
        [
            "gemm_flops: n1/dev5 slow: 420 TFLOPS, 40 % below the peer median 700 TFLOPS \
          (threshold 5 %)"
        ]
    );
}

#[test]
fn a_lost_node_leads_and_what_followed_is_not_another_culprit() {
    let mut first = incident(2, IncidentKind::Unresponsive, Lane::Host, T0 + 1_300);
    first.detail = "rank 2 (n2) is unresponsive: silent for 5.0s in phase `check`".to_owned();
    let group = GroupSummary {
        first_error: Some(first),
        secondary: vec![incident(
            1,
            IncidentKind::TimedOut,
            Lane::Network,
            T0 + 1_900,
        )],
        ..GroupSummary::default()
    };
    let record = record(
        group_report(vec![passed(CheckName::GemmFlops)], group),
        Vec::new(),
    );
    let diagnosis = diagnose(&record, &timeline::assemble(&record)).unwrap();
    assert_eq!(diagnosis.headline, "rank 2 (n2) stopped answering");
    assert_eq!(diagnosis.why, "silent for 5.0s in phase `check`");
    assert_eq!(diagnosis.lane, Some(Lane::Host));
    assert!(diagnosis.next_step.starts_with("log in to `n2`"));
    assert!(diagnosis.others.is_empty(), "{:#?}", diagnosis.others);
}

#[test]
fn an_incidents_preamble_is_not_said_twice() {
    let strip = |detail| without_preamble(detail, 1, "n1", IncidentKind::NeverJoined);
    assert_eq!(strip("rank 1 never joined (waited 8.0s)"), "waited 8.0s");
    assert_eq!(strip("rank 1 (n1) never joined: no hello"), "no hello");
    assert_eq!(strip("something else"), "something else");
    assert_eq!(strip("rank 1 never joined"), "rank 1 never joined");
}

#[test]
fn a_run_that_failed_without_findings_names_its_failed_checks() {
    let mut timed_out = passed(CheckName::AllReduce2);
    timed_out.status = CheckStatus::TimedOut;
    let report = report(vec![passed(CheckName::GemmFlops), timed_out]);
    let diagnosis = diagnose_report(&report).unwrap();
    assert_eq!(diagnosis.headline, "all_reduce_2 timed out on `n0`");
    assert_eq!(diagnosis.lane, None);
    assert_eq!(diagnosis.team, "the platform team, to triage");
}

#[test]
fn a_passed_run_has_no_diagnosis() {
    let report = report(vec![passed(CheckName::GemmFlops)]);
    assert_eq!(diagnose_report(&report), None);
}

#[test]
fn an_xid_at_run_time_is_said_with_its_meaning() {
    let mut finding = RuntimeFinding::condition(
        "kmsg",
        RuntimeCheck::xid(),
        None,
        Lane::Host,
        ActionClass::RebootNode,
        T0,
        "XID 79 on gpu 0000:3b:00: GPU has fallen off the bus".to_owned(),
    );
    finding.xid = Some(79);
    finding.count = 3;
    assert_eq!(finding.severity, Severity::Fail);
    let diagnosis = diagnose_runtime("n4", &finding);
    assert_eq!(diagnosis.headline, "n4 had XID 79");
    assert_eq!(
        diagnosis.why,
        "XID 79 on gpu 0000:3b:00: GPU has fallen off the bus (seen 3 times)"
    );
    assert!(
        diagnosis
            .next_step
            .starts_with("XID 79 on `n4` means the GPU fell off the bus"),
        "{}",
        diagnosis.next_step
    );
}

#[test]
fn many_other_culprits_are_counted_past_a_bound() {
    let nodes: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    // One slow GPU on each of 20 nodes.
    let report = report(vec![device_check(
        CheckName::GemmFlops,
        &names,
        |n, index| {
            let number: u32 = n[1..].parse().unwrap();
            if number.is_multiple_of(2) && index == 0 {
                350.0
            } else {
                700.0
            }
        },
    )]);
    let diagnosis = diagnose_report(&report).unwrap();
    assert_eq!(diagnosis.others.len(), MOST_OTHERS);
    assert_eq!(diagnosis.others.last().unwrap(), "and 4 more");
    assert!(diagnosis.lines(TERMINAL_WIDTH).len() <= gpuvet_model::diagnosis::MAX_LINES);
}
