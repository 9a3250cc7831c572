use super::*;
use crate::explain::{Hypothesis, Judged};
use crate::timeline::{Entry, Role};
use gpuvet_model::config::Config;
use gpuvet_model::results::IncidentKind;

#[test]
fn every_scenario_has_a_valid_config_at_every_size() {
    for scenario in SCENARIOS {
        for (nodes, group) in [2, 4, 8]
            .into_iter()
            .flat_map(|n| [(n, GroupKind::InProcess), (n, GroupKind::Processes)])
        {
            let drill = drill(scenario, nodes, group).unwrap();
            assert_eq!(drill.nodes, nodes);
            assert!(!drill.expectations.is_empty(), "{scenario}");
            let text = drill.config.to_string();
            let config = Config::from_json(&text).unwrap_or_else(|e| panic!("{scenario}: {e}"));
            assert!(config.settings.sim.is_some(), "{scenario}");
        }
    }
    assert!(drill("no-such-fault", 4, GroupKind::InProcess).is_none());
    // A group of one has nobody to compare with: drills run at two nodes at least.
    assert_eq!(drill("healthy", 1, GroupKind::Processes).unwrap().nodes, 2);
}

#[test]
fn the_faulty_node_is_the_last_at_every_size() {
    let eight = drill("slow-node", 8, GroupKind::Processes).unwrap();
    assert_eq!(
        eight.config["gpuvet"]["sim"]["node_speed"]["local-7"],
        serde_json::json!(0.5)
    );
    assert_eq!(
        drill("hung-node", 2, GroupKind::Processes)
            .unwrap()
            .disruption,
        Some(Disruption::Stop { rank: 1 })
    );
    // In one process the network plays the hang: no signal, a scripted node fault.
    let in_process = drill("hung-node", 2, GroupKind::InProcess).unwrap();
    assert_eq!(in_process.disruption, None);
    assert_eq!(
        in_process.config["gpuvet"]["sim"]["node_faults"]["local-1"]["fault"],
        serde_json::json!("hang")
    );
}

#[test]
fn links_and_rails_are_played_in_one_process_only() {
    for scenario in ["slow-link", "bad-rail"] {
        assert_eq!(
            drill(scenario, 4, GroupKind::InProcess)
                .unwrap()
                .not_applicable,
            None
        );
        let processes = drill(scenario, 4, GroupKind::Processes).unwrap();
        let why = processes.not_applicable.clone().unwrap();
        assert!(why.contains("--local-nodes"), "{why}");
        let table = not_applicable(&processes, &why);
        assert_eq!(table.len(), processes.expectations.len());
        assert!(
            table
                .iter()
                .all(|p| p.conclusion == Conclusion::NotApplicable)
        );
    }
    let link = drill("slow-link", 4, GroupKind::InProcess).unwrap();
    assert_eq!(link.config["gpuvet"]["pairing"], serde_json::json!("full"));
}

#[test]
fn a_link_is_the_same_link_either_way_round() {
    assert!(same_entity("local-3<->local-0", "local-0<->local-3"));
    assert!(same_entity("local-0<->local-3", "local-0<->local-3"));
    assert!(!same_entity("local-0<->local-2", "local-0<->local-3"));
    assert!(!same_entity("local-0", "local-0<->local-3"));
    assert!(same_entity("local-0/dev1", "local-0/dev1"));
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
                incident: IncidentKind::Unresponsive,
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
        diagnosis: None,
    }
}

#[test]
fn a_run_that_shows_what_was_expected_confirms_each_expectation() {
    let drill = drill("hung-node", 4, GroupKind::Processes).unwrap();
    let observed = Observed {
        coordinator: "vm".into(),
        explanation: explanation(Some(("local-3", Lane::Host))),
        named: Vec::new(),
        events: vec![
            EventKind::SanityCheckFailed,
            EventKind::InstanceStartupFailed,
        ],
        app_stopped: false,
        degraded: Vec::new(),
        flagged: Vec::new(),
        untaint_tries: Vec::new(),
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
    let drill = drill("slow-gpu-10", 4, GroupKind::Processes).unwrap();
    let observed = Observed {
        coordinator: "vm".into(),
        explanation: explanation(Some(("local-1", Lane::Network))),
        named: vec![("local-1".into(), Lane::Network)],
        events: vec![EventKind::InstanceStarted],
        app_stopped: false,
        degraded: Vec::new(),
        flagged: Vec::new(),
        untaint_tries: Vec::new(),
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
    let drill = drill("xid-79", 2, GroupKind::Processes).unwrap();
    let observed = Observed {
        coordinator: "vm".into(),
        explanation: explanation(Some(("vm", Lane::Host))),
        named: Vec::new(),
        events: vec![EventKind::InstanceStarted, EventKind::RuntimeCheckFailed],
        app_stopped: true,
        degraded: Vec::new(),
        flagged: Vec::new(),
        untaint_tries: Vec::new(),
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

#[test]
fn the_degraded_drill_builds_a_healthy_record_then_slows_every_gpu_alike() {
    let drill = drill("degraded", 4, GroupKind::InProcess).unwrap();
    let history = drill.record.clone().unwrap();
    assert_eq!(history.runs, DEGRADED_HISTORY_RUNS);
    assert_eq!(
        drill.config["gpuvet"]["sim"]["speed"],
        serde_json::json!({"0": 0.85, "1": 0.85})
    );
    assert_eq!(
        history.config["gpuvet"]["sim"]["speed"],
        serde_json::json!({})
    );
    let history_config = Config::from_json(&history.config.to_string()).unwrap();
    assert_eq!(history_config.settings.history.min_runs, 3);
    assert!(
        drill
            .expectations
            .contains(&Expectation::AllDegraded { gpus: 8 })
    );

    let observed = |degraded: Vec<(String, Lane)>| Observed {
        coordinator: "local-0".into(),
        explanation: explanation(None),
        named: Vec::new(),
        events: vec![EventKind::SanityCheckSucceeded, EventKind::InstanceStarted],
        app_stopped: false,
        degraded,
        flagged: Vec::new(),
        untaint_tries: Vec::new(),
    };
    let all: Vec<(String, Lane)> = (0..4)
        .flat_map(|n| (0..2).map(move |d| (format!("local-{n}/dev{d}"), Lane::Host)))
        .collect();
    let proofs = judge(&drill, &observed(all.clone()));
    assert!(
        proofs.iter().all(|p| p.conclusion == Conclusion::Confirmed),
        "{proofs:#?}"
    );
    // One GPU short, or the same GPU twice, is not every GPU.
    let mut short = all[1..].to_vec();
    let proofs = judge(&drill, &observed(short.clone()));
    assert_eq!(proofs[0].conclusion, Conclusion::EvidenceMissing);
    assert_eq!(
        proofs[0].evidence,
        "7 of 8 GPUs named degraded, e.g. `local-0/dev1`"
    );
    short.push(all[1].clone());
    assert_eq!(
        judge(&drill, &observed(short))[0].conclusion,
        Conclusion::EvidenceMissing
    );
}

#[test]
fn a_history_drill_judges_its_flags_and_its_tries_to_come_back() {
    let repeat = drill("repeat-offender", 4, GroupKind::InProcess).unwrap();
    assert_eq!(repeat.history, Some(History::RepeatOffender { starts: 3 }));
    assert_eq!(
        repeat.config["gpuvet"]["repeat_offender"],
        serde_json::json!({"failures": 2, "of_last": 3})
    );
    let early = drill("early-return", 2, GroupKind::Processes).unwrap();
    let Some(History::EarlyReturn { healed }) = &early.history else {
        panic!("{early:?}");
    };
    // The healed node is the same config without its slow GPU.
    assert_eq!(
        early.config["gpuvet"]["sim"]["speed"],
        serde_json::json!({"1": 0.6})
    );
    assert!(healed["gpuvet"]["sim"].get("speed").is_none(), "{healed}");
    assert_eq!(healed["aimaster"], early.config["aimaster"]);
    Config::from_json(&healed.to_string()).unwrap();

    let observed = |flagged: Vec<bool>, untaint_tries: Vec<UntaintTry>| Observed {
        coordinator: "local-3".into(),
        explanation: crate::explain::explain(
            &gpuvet_model::record::JobRecord {
                job_id: "j".into(),
                attempt: 1,
                reports: Vec::new(),
                events: Vec::new(),
            },
            &crate::timeline::assemble(&gpuvet_model::record::JobRecord {
                job_id: "j".into(),
                attempt: 1,
                reports: Vec::new(),
                events: Vec::new(),
            }),
        ),
        named: Vec::new(),
        events: vec![
            EventKind::SanityCheckFailed,
            EventKind::InstanceStartupFailed,
        ],
        app_stopped: false,
        degraded: Vec::new(),
        flagged,
        untaint_tries,
    };
    let conclusions = |drill: &Drill, seen: &Observed| -> Vec<Conclusion> {
        judge(drill, seen).iter().map(|p| p.conclusion).collect()
    };
    // Flagged at the second start: confirmed; at the first, or never: missing.
    assert_eq!(
        conclusions(&repeat, &observed(vec![false, true, true], Vec::new())),
        [Conclusion::Confirmed, Conclusion::Confirmed]
    );
    for wrong in [vec![true, true, true], vec![false, false, false]] {
        assert_eq!(
            conclusions(&repeat, &observed(wrong, Vec::new()))[0],
            Conclusion::EvidenceMissing
        );
    }
    let attempt = |after: &str, lifted: bool| UntaintTry {
        after: after.into(),
        lifted,
        why: "because".into(),
    };
    assert_eq!(
        conclusions(
            &early,
            &observed(
                Vec::new(),
                vec![
                    attempt("a failed start", false),
                    attempt("a passing start", true)
                ]
            )
        ),
        [Conclusion::Confirmed, Conclusion::Confirmed]
    );
    // Let back before it passed: the drill catches it.
    assert_eq!(
        conclusions(
            &early,
            &observed(
                Vec::new(),
                vec![
                    attempt("a failed start", true),
                    attempt("a passing start", true)
                ]
            )
        ),
        [Conclusion::EvidenceMissing, Conclusion::Confirmed]
    );
    assert_eq!(
        conclusions(
            &early,
            &observed(Vec::new(), vec![attempt("a failed start", false)])
        ),
        [Conclusion::Confirmed, Conclusion::EvidenceMissing]
    );
}
