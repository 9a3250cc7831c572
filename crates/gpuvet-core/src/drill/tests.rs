use super::*;
use crate::config::Config;
use crate::explain::{Hypothesis, Judged};
use crate::timeline::{Entry, Role};

#[test]
fn every_scenario_has_a_valid_config_at_every_size() {
    for scenario in SCENARIOS {
        for nodes in [2, 4, 8] {
            let drill = drill(scenario, nodes).unwrap();
            assert_eq!(drill.nodes, nodes);
            assert!(!drill.expectations.is_empty(), "{scenario}");
            let text = drill.config.to_string();
            let config = Config::from_json(&text).unwrap_or_else(|e| panic!("{scenario}: {e}"));
            assert!(config.settings.sim.is_some(), "{scenario}");
        }
    }
    assert!(drill("no-such-fault", 4).is_none());
    // A group of one has nobody to compare with: drills run at two nodes at least.
    assert_eq!(drill("healthy", 1).unwrap().nodes, 2);
}

#[test]
fn the_faulty_node_is_the_last_at_every_size() {
    let eight = drill("slow-node", 8).unwrap();
    assert_eq!(
        eight.config["gpuvet"]["sim"]["node_speed"]["local-7"],
        serde_json::json!(0.5)
    );
    assert_eq!(
        drill("hung-node", 2).unwrap().disruption,
        Some(Disruption::Stop { rank: 1 })
    );
}

fn explanation(first: Option<(&str, Lane)>) -> Explanation {
    Explanation {
        job_id: "drill".into(),
        attempt: 1,
        outcome: "failed".into(),
        first_error: first.map(|(node, lane)| Entry {
            time_ms: 0,
            local_time_ms: None,
            node: node.into(),
            rank: None,
            what: What::Incident {
                incident: "unresponsive".into(),
            },
            lane: Some(lane),
            role: Role::FirstError,
            detail: String::new(),
        }),
        lane: first.map(|(_, lane)| lane),
        team: String::new(),
        next_step: String::new(),
        evidence: Vec::new(),
        hypotheses: vec![Judged {
            hypothesis: Hypothesis::Host,
            conclusion: Conclusion::Confirmed,
            evidence: String::new(),
        }],
    }
}

#[test]
fn a_run_that_shows_what_was_expected_confirms_each_expectation() {
    let drill = drill("hung-node", 4).unwrap();
    let observed = Observed {
        coordinator: "vm".into(),
        explanation: explanation(Some(("local-3", Lane::Host))),
        named: Vec::new(),
        events: vec![
            EventKind::SanityCheckFailed,
            EventKind::InstanceStartupFailed,
        ],
        app_stopped: false,
    };
    let proofs = judge(&drill, &observed);
    assert!(
        proofs.iter().all(|p| p.conclusion == Conclusion::Confirmed),
        "{proofs:#?}"
    );
    let text = render(&proofs);
    assert!(text.contains("2 of 2 expectations confirmed"), "{text}");
    assert!(
        text.contains("the first error is on `local-3`, lane host"),
        "{text}"
    );
}

#[test]
fn a_wrong_node_or_lane_or_action_leaves_the_evidence_missing_and_says_what_was_found() {
    let drill = drill("slow-gpu-10", 4).unwrap();
    let observed = Observed {
        coordinator: "vm".into(),
        explanation: explanation(Some(("local-1", Lane::Network))),
        named: vec![("local-1".into(), Lane::Network)],
        events: vec![EventKind::InstanceStarted],
        app_stopped: false,
    };
    let proofs = judge(&drill, &observed);
    assert!(
        proofs
            .iter()
            .all(|p| p.conclusion == Conclusion::EvidenceMissing),
        "{proofs:#?}"
    );
    assert_eq!(
        proofs[0].evidence,
        "first error: `local-1` unresponsive, lane network"
    );
    assert_eq!(proofs[1].evidence, "named: local-1 (network)");
    assert_eq!(proofs[3].evidence, "events: InstanceStarted");
    let nothing = unobserved(&drill, "the run kept no report");
    assert!(
        nothing
            .iter()
            .all(|p| p.evidence == "the run kept no report")
    );
}

#[test]
fn the_runtime_checks_first_error_is_on_the_coordinators_node() {
    let drill = drill("xid-79", 2).unwrap();
    let observed = Observed {
        coordinator: "vm".into(),
        explanation: explanation(Some(("vm", Lane::Host))),
        named: Vec::new(),
        events: vec![EventKind::InstanceStarted, EventKind::RuntimeCheckFailed],
        app_stopped: true,
    };
    let proofs = judge(&drill, &observed);
    assert_eq!(
        proofs[0].expectation,
        "the first error is on `vm`, lane host"
    );
    assert!(
        proofs.iter().all(|p| p.conclusion == Conclusion::Confirmed),
        "{proofs:#?}"
    );
}
