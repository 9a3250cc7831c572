//! Reports the tests and the `html_scale` and `site_scale` examples render: a few GPUs
//! on one node, and a group of any size with a slow GPU, a GPU that failed and a slow
//! pair; and that group's instances, runs and events as the server would list them.

#![allow(dead_code)]

use std::collections::BTreeMap;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Attempt, Event, EventKind, NewEvent};
use gpuvet_model::overview::{InstanceSummary, JobSummary, RunSummary};
use gpuvet_model::results::{
    CheckResult, CheckStatus, DeviceInfo, Entity, EntityResult, Evidence, GroupIncident,
    GroupSummary, Lane, Measurement, Outcome, RunReport, Verdict,
};

/// The slow GPU of [`group_report`] and of [`one_node_report`].
pub const SLOW_DEVICE: usize = 3;
pub const SLOW_REASON: &str = "22.0% below the peer median 100.0 TFLOPS (threshold 5.0%)";

pub fn node_name(rank: usize) -> String {
    format!("node-{rank}")
}

fn entity(entity: Entity, value: Option<f64>, verdict: Verdict, reason: &str) -> EntityResult {
    let measurement = match value {
        Some(value) => Measurement::ok(entity.clone(), value, Vec::new()),
        None => Measurement::failed(entity.clone(), reason),
    };
    EntityResult {
        entity,
        verdict,
        lane: Lane::Host,
        reason: reason.to_owned(),
        evidence: Evidence {
            value,
            peer_median: Some(100.0),
            baseline: Some(60.0),
            ..Evidence::default()
        },
        measurement,
    }
}

/// Healthy values that differ a little, deterministically.
fn healthy(i: usize) -> f64 {
    100.0 + ((i * 37) % 11) as f64 * 0.3 - 1.5
}

fn gemm(nodes: usize, devices: usize, faulty: Option<(usize, usize)>) -> CheckResult {
    let mut entities = Vec::new();
    for rank in 0..nodes {
        for index in 0..devices {
            let device = Entity::Device {
                node: node_name(rank),
                index: index as u32,
            };
            let i = rank * devices + index;
            entities.push(if rank == nodes / 2 && index == SLOW_DEVICE {
                entity(device, Some(78.0), Verdict::Slow, SLOW_REASON)
            } else if faulty == Some((rank, index)) {
                entity(
                    device,
                    None,
                    Verdict::Faulty,
                    "cuda error: an illegal memory access",
                )
            } else {
                entity(
                    device,
                    Some(healthy(i)),
                    Verdict::Ok,
                    "within 5.0% of its peers",
                )
            });
        }
    }
    let mut check = CheckResult::judged(CheckName::GemmFlops, CheckStatus::Failed, entities);
    check.duration_secs = 4.2;
    check.params = BTreeMap::from([("dtype".to_owned(), "bf16".to_owned())]);
    check
}

fn devices(n: usize) -> Vec<DeviceInfo> {
    (0..n)
        .map(|index| DeviceInfo {
            index: index as u32,
            name: "NVIDIA H200".to_owned(),
            memory_bytes: None,
            facts: Default::default(),
            details: BTreeMap::new(),
        })
        .collect()
}

fn report(node: &str, devices_per_node: usize, checks: Vec<CheckResult>) -> RunReport {
    RunReport {
        report_id: String::new(),
        gpuvet_version: "0.1.0".to_owned(),
        job_id: "job-7".to_owned(),
        attempt: 2,
        node: node.to_owned(),
        instance: "instance-a".to_owned(),
        backend: "sim".to_owned(),
        devices: devices(devices_per_node),
        started_at_ms: 1_767_225_600_000,
        duration_secs: 12.5,
        timeout_secs: 300.0,
        outcome: Outcome::of(&checks),
        checks,
        group: None,
        context: None,
        diagnosis: None,
        repeat_offender: None,
    }
}

/// One node of 8 GPUs: GPU 3 slow, the rest fine; a skipped pair check.
pub fn one_node_report(node: &str) -> RunReport {
    let checks = vec![
        gemm(1, 8, None),
        CheckResult::without_work(
            CheckName::AllReduce2,
            CheckStatus::Skipped,
            "needs at least 2 nodes",
        ),
    ];
    let mut report = report(node, 8, checks);
    // One node: its devices carry its own name.
    for entity in &mut report.checks[0].entities {
        entity.entity = Entity::Device {
            node: node.to_owned(),
            index: match entity.entity {
                Entity::Device { index, .. } => index,
                _ => unreachable!("gemm entities are devices"),
            },
        };
    }
    report
}

/// A group of `nodes` nodes with 8 GPUs each: GPU 3 of the middle node slow, GPU 0 of
/// the last node faulty, one slow pair in a ring of pairs, a node-scope check, and a
/// first error.
pub fn group_report(nodes: usize) -> RunReport {
    let ring: Vec<EntityResult> = (0..nodes)
        .map(|rank| {
            let pair = Entity::NodePair {
                a: node_name(rank),
                b: node_name((rank + 1) % nodes),
            };
            if rank == 1 {
                let mut slow = entity(
                    pair,
                    Some(21.0),
                    Verdict::Slow,
                    "busbw 21.0 GB/s, 45% below the peer median",
                );
                slow.lane = Lane::Network;
                slow
            } else {
                entity(
                    pair,
                    Some(healthy(rank) * 0.4),
                    Verdict::Ok,
                    "within tolerance",
                )
            }
        })
        .collect();
    let mut pairs = CheckResult::judged(CheckName::AllReduce2, CheckStatus::Failed, ring);
    pairs.duration_secs = 9.8;
    let per_node: Vec<EntityResult> = (0..nodes)
        .map(|rank| {
            entity(
                Entity::Node {
                    node: node_name(rank),
                },
                Some(healthy(rank) * 2.0),
                Verdict::Ok,
                "within tolerance",
            )
        })
        .collect();
    let mut node_scope = CheckResult::judged(CheckName::AllReduce1, CheckStatus::Passed, per_node);
    node_scope.duration_secs = 3.1;
    let checks = vec![gemm(nodes, 8, Some((nodes - 1, 0))), node_scope, pairs];
    let mut report = report(&node_name(0), 8, checks);
    report.group = Some(GroupSummary {
        size: None,
        nodes: (0..nodes).map(node_name).collect(),
        first_error: Some(GroupIncident {
            rank: (nodes - 1) as u32,
            node: node_name(nodes - 1),
            kind: gpuvet_model::results::IncidentKind::Failed,
            lane: Lane::Host,
            time_ms: 1_767_225_605_000,
            detail: "gemm_flops: cuda error: an illegal memory access".to_owned(),
        }),
        secondary: Vec::new(),
        other_failures: Vec::new(),
        timeline: None,
    });
    report
}

/// The summary of a run of [`group_report`]'s job, stored as `run_id`.
pub fn run_summary(run_id: i64, outcome: Outcome) -> RunSummary {
    RunSummary {
        run_id,
        report_id: String::new(),
        outcome,
        backend: "sim".to_owned(),
        started_at_ms: 1_767_225_600_000,
        duration_secs: Some(12.5),
        checks: 3,
        failed_checks: u32::from(outcome == Outcome::Failed) * 2,
        findings: u32::from(outcome == Outcome::Failed) * 3,
        node_failed: false,
    }
}

/// The instances of [`group_report`]'s job (attempt 2) on `nodes` nodes: the node of
/// the report and the nodes it names failed, one node in 64 still running, the rest
/// passed; and the job's summary counted from them. Run ids are the ranks.
pub fn job_instances(nodes: usize) -> (JobSummary, Vec<InstanceSummary>) {
    let failed = [0, 1, 2, nodes / 2, nodes - 1];
    let instances: Vec<InstanceSummary> = (0..nodes)
        .map(|rank| {
            let outcome = if failed.contains(&rank) {
                Some(Outcome::Failed)
            } else if rank % 64 == 5 {
                None
            } else {
                Some(Outcome::Passed)
            };
            InstanceSummary {
                attempt: attempt(rank),
                attempt_started_at_ms: 1_767_225_590_000,
                latest_run: outcome.map(|outcome| run_summary(rank as i64, outcome)),
            }
        })
        .collect();
    let count = |status: &str| instances.iter().filter(|i| i.status() == status).count() as u32;
    let job = JobSummary {
        job_id: "job-7".to_owned(),
        latest_attempt: 2,
        nodes: nodes as u32,
        passed: count("passed"),
        failed: count("failed"),
        incomplete: count("incomplete"),
        running: count("running"),
        started_at_ms: 1_767_225_590_000,
    };
    (job, instances)
}

fn attempt(rank: usize) -> Attempt {
    Attempt {
        job_id: "job-7".to_owned(),
        attempt: 2,
        node: node_name(rank),
        instance: format!("instance-{rank}"),
    }
}

/// The events of one node of [`group_report`]'s job: started, then the failed check.
pub fn node_events(rank: usize) -> Vec<Event> {
    [
        (
            EventKind::SanityCheckFailed,
            "gemm_flops: node-512/dev3 slow",
        ),
        (EventKind::InstanceStarted, "instance started"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (kind, message))| Event {
        id: (rank * 2 + i) as i64,
        attempt: attempt(rank),
        event: NewEvent {
            event_id: String::new(),
            time_ms: 1_767_225_600_000 - i as u64 * 10_000,
            kind,
            lane: Some(Lane::Host),
            message: message.to_owned(),
            details: serde_json::Value::Null,
        },
        count: 1,
        last_seen_ms: None,
    })
    .collect()
}

/// The node [`slow_node_report`] slows down.
pub const SLOW_NODE: &str = "local-2";

/// One entity of [`slow_node_report`]: `value` against the peers' `median`, slow when
/// `deficit_pct` is past 5 %, with the evidence the folding reads.
fn judged(entity: Entity, lane: Lane, value: f64, median: f64, deficit_pct: f64) -> EntityResult {
    let slow = deficit_pct > 5.0;
    let reason = if slow {
        format!("{value} is {deficit_pct:.1}% worse than the peer median {median}")
    } else {
        "within 5.0% of its peers".to_owned()
    };
    EntityResult {
        measurement: Measurement::ok(entity.clone(), value, vec![value; 2]),
        entity,
        verdict: if slow { Verdict::Slow } else { Verdict::Ok },
        lane,
        reason,
        evidence: Evidence {
            value: Some(value),
            peer_median: Some(median),
            threshold_pct: Some(5.0),
            deficit_pct: Some(deficit_pct),
            ..Evidence::default()
        },
    }
}

/// The coordinator's report of 4 nodes (`local-0` … `local-3`) of `devices` GPUs each,
/// [`SLOW_NODE`] at 60 % speed, as `check --sim-nodes 4` with `node_speed` makes it:
/// every GPU of it slow in `gemm_flops` and `kernel_launch`, the node itself slow in
/// `all_reduce_1` and the collectives, and two checks that pass; one more slow GPU,
/// `local-0/dev1`, in `kernel_launch` only. With its diagnosis, as `check` sets it.
pub fn slow_node_report(devices: u32) -> RunReport {
    let nodes: Vec<String> = (0..4).map(|i| format!("local-{i}")).collect();
    let per_device = |higher_is_better: bool, nominal: f64, odd_one: Option<(&str, u32)>| {
        let slow_value = if higher_is_better {
            nominal * 0.6
        } else {
            nominal / 0.6
        };
        nodes
            .iter()
            .flat_map(|node| (0..devices).map(move |index| (node.clone(), index)))
            .map(|(node, index)| {
                let odd = odd_one == Some((node.as_str(), index));
                let value = if node == SLOW_NODE || odd {
                    slow_value
                } else {
                    nominal
                };
                let deficit = ((value - nominal) / nominal * 100.0).abs();
                judged(
                    Entity::Device { node, index },
                    Lane::Host,
                    value,
                    nominal,
                    deficit,
                )
            })
            .collect::<Vec<_>>()
    };
    let per_node = |lane: Lane, nominal: f64, slow: bool| {
        nodes
            .iter()
            .map(|node| {
                let value = if slow && node == SLOW_NODE {
                    nominal * 0.6
                } else {
                    nominal
                };
                let deficit = (nominal - value) / nominal * 100.0;
                judged(
                    Entity::Node { node: node.clone() },
                    lane,
                    value,
                    nominal,
                    deficit,
                )
            })
            .collect::<Vec<_>>()
    };
    let pairs: Vec<EntityResult> = (0..nodes.len())
        .flat_map(|a| (a + 1..nodes.len()).map(move |b| (a, b)))
        .map(|(a, b)| {
            let pair = Entity::NodePair {
                a: nodes[a].clone(),
                b: nodes[b].clone(),
            };
            judged(pair, Lane::Network, 100.0, 100.0, 0.0)
        })
        .collect();
    let failed = |name, entities| CheckResult::judged(name, CheckStatus::Failed, entities);
    let checks = vec![
        failed(CheckName::GemmFlops, per_device(true, 700.0, None)),
        failed(CheckName::AllReduce1, per_node(Lane::Host, 450.0, true)),
        failed(CheckName::AllReduce2, per_node(Lane::Network, 45.0, true)),
        failed(
            CheckName::KernelLaunch,
            per_device(false, 5.0, Some(("local-0", 1))),
        ),
        failed(CheckName::AllReduce, per_node(Lane::Network, 45.0, true)),
        CheckResult::judged(CheckName::NetworkConnectivity, CheckStatus::Passed, pairs),
        CheckResult::judged(
            CheckName::CompCommOverlap,
            CheckStatus::Passed,
            per_node(Lane::Host, 1.0, false),
        ),
    ];
    let mut report = report("node-test", 0, checks);
    report.devices = Vec::new();
    report.group = Some(GroupSummary {
        size: None,
        nodes,
        ..GroupSummary::default()
    });
    report.diagnosis = gpuvet_analysis::diagnose::diagnose_report(&report);
    report
}
