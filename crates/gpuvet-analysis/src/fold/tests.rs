use super::*;
use gpuvet_model::analysis::{JudgePolicy, judge};
use gpuvet_model::results::{Evidence, Measurement, Outcome};

/// A report of `checks`, run on the sim backend (GPUs are `GPUs`).
pub(crate) fn report(checks: Vec<CheckResult>) -> RunReport {
    serde_json::from_value(serde_json::json!({
        "gpuvet_version": "0.0.0-test", "job_id": "job", "attempt": 1, "node": "n0",
        "instance": "i0", "backend": "sim", "devices": [], "started_at_ms": 0,
        "duration_secs": 1.0, "timeout_secs": 60.0, "outcome": Outcome::Failed,
        "checks": checks,
    }))
    .expect("a report")
}

/// `check` on every device of `nodes` (8 each), judged against its peers: `value_of`
/// gives each device's value.
pub(crate) fn device_check(
    check: CheckName,
    nodes: &[&str],
    value_of: impl Fn(&str, u32) -> f64,
) -> CheckResult {
    let measurements: Vec<Measurement> = nodes
        .iter()
        .flat_map(|node| (0..8).map(move |index| (*node, index)))
        .map(|(node, index)| {
            let value = value_of(node, index);
            let entity = Entity::Device {
                node: node.to_owned(),
                index,
            };
            Measurement::ok(entity, value, vec![value; 4])
        })
        .collect();
    judged(check, &measurements)
}

/// `check` on `entities`, each with the value `value_of` gives.
pub(crate) fn entity_check(
    check: CheckName,
    entities: &[Entity],
    value_of: impl Fn(&Entity) -> f64,
) -> CheckResult {
    let measurements: Vec<Measurement> = entities
        .iter()
        .map(|e| {
            let value = value_of(e);
            Measurement::ok(e.clone(), value, vec![value; 4])
        })
        .collect();
    judged(check, &measurements)
}

fn judged(check: CheckName, measurements: &[Measurement]) -> CheckResult {
    let policy = JudgePolicy {
        tolerance: 0.05,
        limit: None,
    };
    let entities = judge(check.spec(), measurements, &policy);
    let status = if entities.iter().any(|e| e.verdict != Verdict::Ok) {
        CheckStatus::Failed
    } else {
        CheckStatus::Passed
    };
    CheckResult::judged(check, status, entities)
}

pub(crate) fn node(name: &str) -> Entity {
    Entity::Node {
        node: name.to_owned(),
    }
}

fn pair(a: &str, b: &str) -> Entity {
    Entity::NodePair {
        a: a.to_owned(),
        b: b.to_owned(),
    }
}

const NODES: [&str; 4] = ["n0", "n1", "n2", "n3"];

#[test]
fn eight_slow_gpus_of_one_node_are_one_line_with_a_range() {
    let gemm = device_check(CheckName::GemmFlops, &NODES[..2], |node, _| {
        if node == "n1" { 420.0 } else { 700.0 }
    });
    let folded = fold_findings(&[gemm]);
    assert_eq!(folded.len(), 1, "{folded:#?}");
    assert_eq!(folded[0].count, 8);
    assert_eq!(
        folded[0].line(),
        "gemm_flops: n1/dev[0-7] slow: 420 TFLOPS, 40 % below the peer median 700 TFLOPS \
         (threshold 5 %)"
    );
    assert_eq!(folded[0].headline(), "n1/dev[0-7] are slow in gemm_flops");
}

#[test]
fn values_that_differ_are_given_as_a_range() {
    let gemm = device_check(CheckName::GemmFlops, &NODES[..1], |_, index| match index {
        2 => 350.0,
        5 => 420.0,
        _ => 700.0,
    });
    let folded = fold_findings(&[gemm]);
    assert_eq!(folded.len(), 1, "{folded:#?}");
    assert_eq!(folded[0].entities, "n0/dev[2,5]");
    assert_eq!(
        folded[0].what,
        "350–420 TFLOPS, 40–50 % below the peer median 700 TFLOPS (threshold 5 %)"
    );
}

#[test]
fn findings_without_a_comparison_say_their_reason_once() {
    let mut check = device_check(CheckName::GemmFlops, &NODES[..1], |_, _| 700.0);
    for (index, reason) in [(1, "error: boom"), (3, "error: boom"), (4, "error: bang")] {
        let entity = &mut check.entities[index];
        entity.verdict = Verdict::Faulty;
        entity.reason = reason.to_owned();
        entity.evidence = Evidence::default();
    }
    let folded = fold_findings(&[check]);
    assert_eq!(folded.len(), 1, "{folded:#?}");
    assert_eq!(folded[0].entities, "n0/dev[1,3-4]");
    assert_eq!(folded[0].what, "error: boom (and 1 other reasons)");
    assert_eq!(verdict_word(folded[0].verdict), "faulty");
}

/// `n2` slow in its GPUs, in its node-wide check and with every partner.
fn slow_node_report(devices_too: bool) -> RunReport {
    let slow = |n: &str| if n == "n2" { 0.6 } else { 1.0 };
    let mut checks = vec![
        entity_check(CheckName::AllReduce1, &NODES.map(node), |e| {
            450.0 * slow(e.node())
        }),
        entity_check(CheckName::AllReduce, &NODES.map(node), |e| {
            45.0 * slow(e.node())
        }),
        entity_check(CheckName::NetworkConnectivity, &NODES.map(node), |_| 100.0),
    ];
    if devices_too {
        checks.insert(
            0,
            device_check(CheckName::GemmFlops, &NODES, |n, _| 700.0 * slow(n)),
        );
    }
    report(checks)
}

#[test]
fn a_node_that_fails_most_checks_is_summed_up_once() {
    let folded = fold(&slow_node_report(true));
    assert_eq!(folded.nodes.len(), 1, "{folded:#?}");
    let summary = &folded.nodes[0];
    assert_eq!(
        summary.line(),
        "n2: slow in 3 of 4 checks, all 8 GPUs and every link"
    );
    assert_eq!(summary.lane, Lane::Host, "the lane of its first finding");
    assert_eq!(summary.first_check, CheckName::GemmFlops);
    assert!(folded.findings.is_empty(), "said once: {folded:#?}");
    assert_eq!(folded.lines(), [summary.line()]);
}

#[test]
fn a_node_without_gpu_findings_is_summed_up_without_them() {
    let folded = fold(&slow_node_report(false));
    assert_eq!(
        folded.lines(),
        ["n2: slow in 2 of 3 checks, every link"],
        "{folded:#?}"
    );
}

#[test]
fn a_few_slow_gpus_are_theirs_not_their_nodes() {
    let two_of_eight = |_: &str, index: u32| if index < 2 { 350.0 } else { 700.0 };
    let report = report(vec![
        device_check(CheckName::GemmFlops, &NODES[..1], two_of_eight),
        device_check(CheckName::KernelLaunch, &NODES[..1], |_, index| {
            if index < 2 { 10.0 } else { 5.0 }
        }),
    ]);
    let folded = fold(&report);
    assert!(folded.nodes.is_empty(), "{folded:#?}");
    assert_eq!(folded.findings.len(), 2);
    assert_eq!(folded.findings[1].entities, "n0/dev[0-1]");
}

#[test]
fn one_slow_link_blames_the_link_not_its_nodes() {
    let pairs = [
        pair("n0", "n1"),
        pair("n0", "n2"),
        pair("n0", "n3"),
        pair("n1", "n2"),
        pair("n1", "n3"),
        pair("n2", "n3"),
    ];
    let slow_link = |e: &Entity| {
        if *e == pair("n0", "n3") { 22.5 } else { 45.0 }
    };
    let report = report(vec![
        entity_check(CheckName::AllReduce2, &pairs, slow_link),
        entity_check(CheckName::AllGather2, &pairs, slow_link),
    ]);
    let folded = fold(&report);
    assert!(folded.nodes.is_empty(), "{folded:#?}");
    let lines = folded.lines();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].starts_with("all_reduce_2: n0<->n3 slow: 22.5 GB/s, 50 % below"),
        "{lines:#?}"
    );
}

#[test]
fn the_folded_lines_do_not_grow_with_the_gpus() {
    let lines_with = |devices: u32| {
        let measurements: Vec<Measurement> = NODES
            .iter()
            .flat_map(|n| (0..devices).map(move |i| (*n, i)))
            .map(|(n, index)| {
                let value = if n == "n2" { 420.0 } else { 700.0 };
                let entity = Entity::Device {
                    node: n.to_owned(),
                    index,
                };
                Measurement::ok(entity, value, vec![value; 4])
            })
            .collect();
        fold(&report(vec![judged(CheckName::GemmFlops, &measurements)])).lines()
    };
    assert_eq!(lines_with(8).len(), lines_with(64).len());
    assert_eq!(
        lines_with(64),
        [
            "gemm_flops: n2/dev[0-63] slow: 420 TFLOPS, 40 % below the peer median 700 TFLOPS \
          (threshold 5 %)"
        ]
    );
}
