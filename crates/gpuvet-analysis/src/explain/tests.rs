use super::*;
use crate::timeline::assemble;
use crate::timeline::tests::{T0, entity_result, event, group_report, incident, passed, record};
use gpuvet_model::results::{CheckResult, Entity, GroupSummary, Verdict};

fn explained(record: &JobRecord) -> Explanation {
    explain(record, &assemble(record))
}

fn conclusion(explanation: &Explanation, hypothesis: Hypothesis) -> (Conclusion, &str) {
    let judged = explanation
        .hypotheses
        .iter()
        .find(|j| j.hypothesis == hypothesis)
        .unwrap();
    (judged.conclusion, judged.evidence.as_str())
}

fn all_checks_passed() -> Vec<CheckResult> {
    vec![
        passed(CheckName::GemmFlops),
        passed(CheckName::AllReduce2),
        passed(CheckName::InventoryConsistency),
    ]
}

#[test]
fn a_stopped_node_is_the_hosts_and_a_link_does_not_explain_it() {
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
    let explanation = explained(&record(
        group_report(all_checks_passed(), group),
        Vec::new(),
    ));
    assert_eq!(explanation.lane, Some(Lane::Host));
    assert_eq!(explanation.first_error.as_ref().unwrap().node, "n2");
    assert!(explanation.team.starts_with("the host team"));
    assert!(
        explanation.next_step.contains("log in to `n2`"),
        "{}",
        explanation.next_step
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::Host).0,
        Conclusion::Confirmed
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::Gpu).0,
        Conclusion::EvidenceMissing
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::NetworkLink).0,
        Conclusion::NotApplicable
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::App).0,
        Conclusion::NotApplicable
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::Platform).0,
        Conclusion::NotApplicable
    );
    assert!(
        explanation
            .evidence
            .iter()
            .any(|l| l.contains("consequence") && l.contains("n1")),
        "{:?}",
        explanation.evidence
    );
}

#[test]
fn a_slow_gpu_is_confirmed_on_the_gpu_and_rules_out_the_links() {
    let gemm = CheckResult::judged(
        CheckName::GemmFlops,
        CheckStatus::Failed,
        vec![entity_result(
            Entity::Device {
                node: "n2".into(),
                index: 1,
            },
            Verdict::Slow,
            Lane::Host,
            "40% below its peers",
        )],
    );
    let checks = vec![
        gemm,
        passed(CheckName::AllReduce1),
        passed(CheckName::AllReduce2),
        passed(CheckName::InventoryConsistency),
    ];
    let mut without_node_checks = checks.clone();
    without_node_checks.remove(1);
    let without_node_checks = explained(&record(
        group_report(without_node_checks, GroupSummary::default()),
        Vec::new(),
    ));
    assert_eq!(
        conclusion(&without_node_checks, Hypothesis::Host).0,
        Conclusion::EvidenceMissing
    );
    let explanation = explained(&record(
        group_report(checks, GroupSummary::default()),
        Vec::new(),
    ));
    assert_eq!(
        conclusion(&explanation, Hypothesis::Gpu).0,
        Conclusion::Confirmed
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::Host).0,
        Conclusion::NotApplicable
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::NetworkLink).0,
        Conclusion::NotApplicable
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::CommunicationSetup).0,
        Conclusion::NotApplicable
    );
    assert!(
        explanation.next_step.contains("--checks gemm_flops"),
        "{}",
        explanation.next_step
    );
}

#[test]
fn a_slow_link_names_both_ends_in_the_network_lane() {
    let pairs = CheckResult::judged(
        CheckName::AllReduce2,
        CheckStatus::Failed,
        vec![entity_result(
            Entity::NodePair {
                a: "n1".into(),
                b: "n2".into(),
            },
            Verdict::Slow,
            Lane::Network,
            "the link is 70% below the others",
        )],
    );
    let checks = vec![passed(CheckName::GemmFlops), pairs];
    let explanation = explained(&record(
        group_report(checks, GroupSummary::default()),
        Vec::new(),
    ));
    assert_eq!(explanation.lane, Some(Lane::Network));
    assert_eq!(
        conclusion(&explanation, Hypothesis::NetworkLink).0,
        Conclusion::Confirmed
    );
    let (gpu, why) = conclusion(&explanation, Hypothesis::Gpu);
    assert_eq!(gpu, Conclusion::NotApplicable);
    assert!(why.contains("`n1` and `n2`"), "{why}");
    assert_eq!(
        conclusion(&explanation, Hypothesis::Platform).0,
        Conclusion::EvidenceMissing
    );
    assert!(
        explanation.next_step.contains("n1<->n2"),
        "{}",
        explanation.next_step
    );
}

#[test]
fn xid_79_at_run_time_is_the_gpus_with_its_meaning() {
    let mut events = vec![event(
        "n2",
        T0 + 3_000,
        EventKind::InstanceStarted,
        serde_json::json!({}),
    )];
    events.push(event(
        "n2",
        T0 + 9_000,
        EventKind::RuntimeCheckFailed,
        serde_json::json!({"source": "kmsg", "check": "xid", "xid": 79, "lane": "host"}),
    ));
    let explanation = explained(&record(
        group_report(all_checks_passed(), GroupSummary::default()),
        events,
    ));
    assert_eq!(
        conclusion(&explanation, Hypothesis::Gpu).0,
        Conclusion::Confirmed
    );
    assert!(
        explanation.next_step.contains("fell off the bus"),
        "{}",
        explanation.next_step
    );
    assert_eq!(
        conclusion(&explanation, Hypothesis::App).0,
        Conclusion::EvidenceMissing
    );
}

#[test]
fn a_node_unlike_the_others_is_the_platforms() {
    let inventory = CheckResult::judged(
        CheckName::InventoryConsistency,
        CheckStatus::Failed,
        vec![entity_result(
            Entity::Node { node: "n1".into() },
            Verdict::Faulty,
            Lane::Platform,
            "4 GPUs, the others 8",
        )],
    );
    let checks = vec![
        passed(CheckName::GemmFlops),
        passed(CheckName::AllReduce2),
        inventory,
    ];
    let explanation = explained(&record(
        group_report(checks, GroupSummary::default()),
        Vec::new(),
    ));
    assert_eq!(explanation.lane, Some(Lane::Platform));
    assert_eq!(
        conclusion(&explanation, Hypothesis::Platform).0,
        Conclusion::Confirmed
    );
    assert!(explanation.team.starts_with("the platform team"));
}

#[test]
fn ranks_that_diverge_in_the_flight_recorder_are_the_apps() {
    let fr = event(
        "n1",
        T0 + 9_000,
        EventKind::RuntimeCheckFailed,
        serde_json::json!({"source": "flight_recorder", "check": "fr.never_entered", "lane": "app"}),
    );
    let explanation = explained(&record(
        group_report(all_checks_passed(), GroupSummary::default()),
        vec![fr],
    ));
    assert_eq!(explanation.lane, Some(Lane::App));
    assert_eq!(
        conclusion(&explanation, Hypothesis::App).0,
        Conclusion::Confirmed
    );
    assert!(
        explanation.next_step.contains("never issued"),
        "{}",
        explanation.next_step
    );
}

#[test]
fn a_healthy_attempt_hands_nothing_over() {
    let explanation = explained(&record(
        group_report(all_checks_passed(), GroupSummary::default()),
        Vec::new(),
    ));
    assert_eq!(explanation.first_error, None);
    assert!(explanation.team.starts_with("nobody"));
    assert!(
        explanation
            .hypotheses
            .iter()
            .all(|j| j.conclusion == Conclusion::NotApplicable)
    );
    let text = render(&explanation);
    assert!(text.contains("first error: none"), "{text}");
    for hypothesis in Hypothesis::ALL {
        assert!(text.contains(hypothesis.as_str()), "{text}");
    }
}

#[test]
fn nothing_recorded_says_to_check_the_job() {
    let explanation = explained(&JobRecord {
        job_id: "j".into(),
        attempt: 1,
        reports: Vec::new(),
        events: Vec::new(),
    });
    assert_eq!(explanation.outcome, "unknown");
    assert!(
        explanation.next_step.contains("job id"),
        "{}",
        explanation.next_step
    );
}

#[test]
fn a_node_slow_with_every_partner_and_slow_gpus_leaves_its_links_open() {
    let gemm = CheckResult::judged(
        CheckName::GemmFlops,
        CheckStatus::Failed,
        vec![entity_result(
            Entity::Device {
                node: "n2".into(),
                index: 0,
            },
            Verdict::Slow,
            Lane::Host,
            "50% below its peers",
        )],
    );
    let pairs = CheckResult::judged(
        CheckName::AllReduce2,
        CheckStatus::Failed,
        vec![entity_result(
            Entity::Node { node: "n2".into() },
            Verdict::Slow,
            Lane::Network,
            "failed with 2 of 2 partners",
        )],
    );
    let explanation = explained(&record(
        group_report(vec![gemm, pairs], GroupSummary::default()),
        Vec::new(),
    ));
    assert_eq!(explanation.lane, Some(Lane::Host));
    let (link, why) = conclusion(&explanation, Hypothesis::NetworkLink);
    assert_eq!(link, Conclusion::EvidenceMissing, "{why}");
    assert!(why.contains("test its links alone"), "{why}");
    // The pairs were slow, not broken: the communication works.
    assert_eq!(
        conclusion(&explanation, Hypothesis::CommunicationSetup).0,
        Conclusion::NotApplicable
    );
}
