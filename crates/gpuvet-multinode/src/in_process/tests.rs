//! Whole groups in this process, through the real coordinator and agents.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpuvet_backend::WorkSpec;
use gpuvet_backend::sim::SimBackend;
use gpuvet_model::analysis::Tolerances;
use gpuvet_model::catalog::CheckName;
use gpuvet_model::config::{NodeFault, NodeFaultKind, SimScript};
use gpuvet_model::events::Attempt;
use gpuvet_model::pairing::PairingMode;
use gpuvet_model::results::{Outcome, RunReport};

use super::*;

fn attempt(node: &str) -> Attempt {
    Attempt {
        job_id: "in-process".to_owned(),
        attempt: 1,
        node: node.to_owned(),
        instance: node.to_owned(),
    }
}

fn group(n: usize, checks: &[CheckName], script: SimScript) -> SimulatedGroup {
    let nodes: Vec<NodeSetup> = (0..n)
        .map(|rank| {
            let name = format!("local-{rank}");
            NodeSetup {
                backend: Arc::new(SimBackend::new(SimScript {
                    seed: rank as u64,
                    ..script.clone().for_node(&name)
                })),
                attempt: attempt(&name),
                nnodes: n,
                tolerance: Tolerances::uniform(0.05),
                baselines: BTreeMap::new(),
                work: WorkSpec::default(),
                python: PathBuf::from("python3"),
                worker: None,
                history: None,
            }
        })
        .collect();
    let fabric = Arc::new(Fabric::new(&script, &node_ips(&nodes)));
    SimulatedGroup {
        plan: GroupPlan {
            attempt: attempt("local-0"),
            checks: checks.to_vec(),
            timeout: Duration::from_secs(60),
            rendezvous_timeout: Duration::from_secs(30),
            tolerance: Tolerances::uniform(0.05),
            baselines: BTreeMap::new(),
            expected_inventory: Default::default(),
            pairing: PairingMode::Adaptive,
            collective_bytes: None,
            started_at_ms: 0,
        },
        nodes,
        fabric,
        node_faults: script.node_faults.clone(),
        rails: 2,
    }
}

fn script() -> SimScript {
    SimScript {
        devices: 2,
        noise: 0.01,
        ..SimScript::default()
    }
}

fn named(report: &RunReport) -> Vec<String> {
    report
        .findings()
        .map(|(check, finding)| format!("{} {}", check.name, finding.entity))
        .collect()
}

#[test]
fn node_addresses_are_distinct_and_count_up_from_10_0_0_1() {
    assert_eq!(node_ip(0).to_string(), "10.0.0.1");
    assert_eq!(node_ip(255).to_string(), "10.0.1.0");
    assert_eq!(node_ip(4095).to_string(), "10.0.16.0");
}

#[test]
fn a_healthy_group_passes_every_check_the_sim_and_its_network_play() {
    let checks = [
        CheckName::GemmFlops,
        CheckName::AllReduce1,
        CheckName::AllReduce2,
        CheckName::AllReduce,
        CheckName::MultiAllReduce2,
        CheckName::PytorchGloo2,
        CheckName::NetworkConnectivity,
    ];
    let run = run_simulated(&group(6, &checks, script()), &mut |_| {}).unwrap();
    assert_eq!(
        run.report.outcome,
        Outcome::Passed,
        "{:#?}",
        run.report.checks
    );
    assert_eq!(run.report.checks.len(), checks.len());
    assert_eq!((run.verdicts, run.left_behind), (6, 0));
    assert!(run.played.is_empty());
    let nodes = &run.report.group.as_ref().unwrap().nodes;
    assert_eq!(nodes.len(), 6);
}

#[test]
fn a_slow_link_is_named_as_that_link() {
    let script = SimScript {
        link_speed: BTreeMap::from([(("local-1".to_owned(), "local-4".to_owned()), 0.5)]),
        ..script()
    };
    // Adaptive pairing measures the pairs it needs to find a slow node; a link outside
    // them is found by measuring every pair.
    let mut group = group(6, &[CheckName::AllReduce2], script);
    group.plan.pairing = PairingMode::Full;
    let run = run_simulated(&group, &mut |_| {}).unwrap();
    assert_eq!(run.report.outcome, Outcome::Failed);
    assert_eq!(named(&run.report), ["all_reduce_2 local-1<->local-4"]);
}

#[test]
fn a_slow_rail_names_its_node() {
    let script = SimScript {
        node_rail_speed: BTreeMap::from([("local-2".to_owned(), BTreeMap::from([(1, 0.5)]))]),
        ..script()
    };
    let run = run_simulated(
        &group(6, &[CheckName::MultiAllReduce2], script),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(run.report.outcome, Outcome::Failed);
    let named = named(&run.report);
    assert!(
        !named.is_empty() && named.iter().all(|n| n.contains("local-2")),
        "{named:?}"
    );
}

#[test]
fn a_hung_node_is_the_first_error_and_the_rest_get_the_verdict() {
    let script = SimScript {
        node_faults: BTreeMap::from([(
            "local-3".to_owned(),
            NodeFault {
                check: CheckName::AllReduce2,
                fault: NodeFaultKind::Hang,
            },
        )]),
        ..script()
    };
    let checks = [CheckName::GemmFlops, CheckName::AllReduce2];
    let run = run_simulated(&group(5, &checks, script), &mut |_| {}).unwrap();
    assert_eq!(run.report.outcome, Outcome::Failed);
    let first = run
        .report
        .group
        .as_ref()
        .unwrap()
        .first_error
        .clone()
        .unwrap();
    assert_eq!(
        (first.node.as_str(), first.kind.as_str()),
        ("local-3", "unresponsive")
    );
    assert_eq!(run.played.len(), 1);
    assert_eq!(
        run.left_behind, 0,
        "the frozen node is cut after the verdict"
    );
}

#[test]
fn a_crashed_node_is_the_first_error() {
    let script = SimScript {
        node_faults: BTreeMap::from([(
            "local-1".to_owned(),
            NodeFault {
                check: CheckName::GemmFlops,
                fault: NodeFaultKind::Crash,
            },
        )]),
        ..script()
    };
    let run = run_simulated(&group(4, &[CheckName::GemmFlops], script), &mut |_| {}).unwrap();
    assert_eq!(run.report.outcome, Outcome::Failed);
    let first = run
        .report
        .group
        .as_ref()
        .unwrap()
        .first_error
        .clone()
        .unwrap();
    assert_eq!(
        (first.node.as_str(), first.kind.as_str()),
        ("local-1", "crashed")
    );
    // After a lost node the others are told to abort, not given a verdict.
    assert_eq!((run.verdicts, run.left_behind), (0, 0));
}

#[test]
fn a_large_group_probes_partners_not_every_pair() {
    let run = run_simulated(
        &group(100, &[CheckName::NetworkConnectivity], script()),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(run.report.outcome, Outcome::Passed);
    let check = &run.report.checks[0];
    // 1, 2, 4, …, 32 either way and the one opposite: 13 partners of 99 each.
    assert_eq!(check.entities.len(), 100 * 13 / 2);
    assert_eq!(
        check.params["pairs"],
        "13 partners per node (about 2·log2 N): 650 of 4950 pairs"
    );
}
