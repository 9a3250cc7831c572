//! Node-scope checks across the group (`gemm_flops`, `kernel_launch`, `all_reduce_1`,
//! `comp_comm_overlap`): every node runs the check with its own runner, then the
//! coordinator judges each device or node against the whole group, so a node whose
//! GPUs are all equally slow is found too.

use gpuvet_model::analysis::{JudgePolicy, check_status, clear_contended_slow, judge};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{CheckResult, CheckStatus, EntityResult, Measurement, Verdict};

use crate::coordinator::CheckContext;
use crate::wire::{Directive, Reply};

pub(crate) fn run(context: &mut CheckContext<'_, '_>, name: CheckName) -> CheckResult {
    let ranks: Vec<u32> = context
        .conversation
        .members
        .iter()
        .map(|m| m.rank)
        .collect();
    let shared_host = context.shared_host();
    // On a shared machine one node at a time; otherwise all at once.
    let batches: Vec<Vec<u32>> = if shared_host {
        ranks.iter().map(|&rank| vec![rank]).collect()
    } else {
        vec![ranks]
    };
    let mut per_node: Vec<CheckResult> = Vec::new();
    for batch in batches {
        let (budget_ms, due) = context.budget();
        let orders = batch
            .iter()
            .map(|&rank| {
                (
                    rank,
                    Directive::Local {
                        check: name,
                        budget_ms,
                    },
                )
            })
            .collect();
        let answers = match context.ask_all(name, orders, due) {
            Ok(answers) => answers,
            Err(result) => return *result,
        };
        for (rank, reply) in answers.replies {
            per_node.push(match reply {
                Reply::Local { result } => *result,
                other => CheckResult::without_work(
                    name,
                    CheckStatus::Failed,
                    format!(
                        "{} answered with `{other:?}` instead of a check result",
                        context.conversation.node_name(rank)
                    ),
                ),
            });
        }
    }
    // Nodes on one machine share its devices' hardware: comparing them would compare
    // the same cores under different load, so each node is judged on its own. The sim
    // backend's figures are scripted, not measured, so its nodes compare as if apart.
    let scripted = context
        .conversation
        .members
        .iter()
        .all(|m| m.info.backend == "sim");
    let across = if shared_host && !scripted {
        Across::NodesShareAMachine
    } else {
        Across::Group(policy(context, name))
    };
    merge(name, per_node, &across)
}

/// Whether entities are also judged against the whole group.
pub(crate) enum Across {
    Group(JudgePolicy),
    NodesShareAMachine,
}

fn policy(context: &CheckContext<'_, '_>, name: CheckName) -> JudgePolicy {
    JudgePolicy {
        tolerance: context.plan.tolerance.of(name),
        limit: context.plan.baselines.get(&name).copied(),
    }
}

/// One result from every node's: the union of their entities, each also judged
/// against the whole group.
///
/// A node that could not run the check decides the status: not implemented or
/// skipped on one node is so for the group, and a node's failure without entities (a
/// timeout) fails the group's check.
pub(crate) fn merge(name: CheckName, per_node: Vec<CheckResult>, across: &Across) -> CheckResult {
    for status in [
        CheckStatus::TimedOut,
        CheckStatus::NotRun,
        CheckStatus::NotImplemented,
    ] {
        if let Some(result) = per_node.iter().find(|r| r.status == status) {
            return result.clone();
        }
    }
    if let Some(failed) = per_node
        .iter()
        .find(|r| r.status == CheckStatus::Failed && r.entities.is_empty())
    {
        return failed.clone();
    }
    if per_node.iter().all(|r| r.status == CheckStatus::Skipped) {
        if let Some(first) = per_node.into_iter().next() {
            return first;
        }
        return CheckResult::without_work(name, CheckStatus::Skipped, "no node ran it");
    }
    let remeasured: usize = per_node
        .iter()
        .filter_map(|r| r.params.get("remeasured")?.parse::<usize>().ok())
        .sum();
    // Every node's entities are moved into the first node's result, not copied: at
    // 4,096 nodes they are 32,768 devices with their samples.
    let entity_count: usize = per_node.iter().map(|r| r.entities.len()).sum();
    let mut per_node = per_node.into_iter();
    let Some(mut merged) = per_node.next() else {
        return CheckResult::without_work(name, CheckStatus::Failed, "no node answered");
    };
    merged
        .entities
        .reserve(entity_count - merged.entities.len());
    for result in per_node {
        merged.entities.extend(result.entities);
    }
    merged.params.remove("remeasured");
    if remeasured > 0 {
        merged
            .params
            .insert("remeasured".to_owned(), remeasured.to_string());
    }
    // A slowdown is a ratio of two rates on one node; between nodes it is compared
    // with the configured ceiling only.
    match across {
        Across::Group(policy) if name != CheckName::CompCommOverlap => {
            judge_across_group(name, &mut merged.entities, policy);
        }
        Across::Group(_) => {}
        Across::NodesShareAMachine => {
            merged.params.insert(
                "judged".to_owned(),
                "per node (the nodes share one machine)".to_owned(),
            );
        }
    }
    merged.status = check_status(&merged.entities);
    merged.reason = None;
    merged
}

/// Judges every entity that its own node found ok, or degraded against its own record,
/// against all entities of the group, and keeps the worse verdict: slow against the
/// group outranks degraded, and the record's evidence stays.
fn judge_across_group(name: CheckName, entities: &mut [EntityResult], policy: &JudgePolicy) {
    if entities.len() < 2 {
        return;
    }
    let measurements: Vec<Measurement> = entities.iter().map(|e| e.measurement.clone()).collect();
    let across = judge(name.spec(), &measurements, policy);
    for (entity, group_view) in entities.iter_mut().zip(across) {
        let passed_its_node = matches!(entity.verdict, Verdict::Ok | Verdict::Degraded);
        if passed_its_node && group_view.verdict == Verdict::Slow {
            let remeasured = entity.evidence.remeasured;
            let mut group_view = group_view;
            if clear_contended_slow(&mut group_view, name.spec(), policy) {
                continue;
            }
            let history = entity.evidence.history.take();
            *entity = group_view;
            entity.evidence.remeasured = remeasured;
            entity.evidence.history = history;
            entity.reason = format!("{} (compared with every node of the group)", entity.reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_model::results::{Entity, Evidence, Lane};

    fn device(node: &str, value: f64) -> EntityResult {
        let entity = Entity::Device {
            node: node.to_owned(),
            index: 0,
        };
        EntityResult {
            entity: entity.clone(),
            verdict: Verdict::Ok,
            lane: Lane::Host,
            reason: "ok".to_owned(),
            evidence: Evidence {
                value: Some(value),
                ..Evidence::default()
            },
            measurement: Measurement::ok(entity, value, vec![value; 8]),
        }
    }

    fn node_result(entities: Vec<EntityResult>) -> CheckResult {
        CheckResult::judged(CheckName::GemmFlops, CheckStatus::Passed, entities)
    }

    const POLICY: Across = Across::Group(JudgePolicy {
        tolerance: 0.05,
        limit: None,
    });

    #[test]
    fn a_node_slow_as_a_whole_is_found_against_the_group() {
        let per_node = vec![
            node_result(vec![device("a", 100.0)]),
            node_result(vec![device("b", 101.0)]),
            node_result(vec![device("c", 60.0)]),
            node_result(vec![device("d", 99.0)]),
        ];
        let merged = merge(CheckName::GemmFlops, per_node, &POLICY);
        assert_eq!(merged.status, CheckStatus::Failed);
        let slow: Vec<String> = merged.findings().map(|e| e.entity.to_string()).collect();
        assert_eq!(slow, ["c/dev0"]);
        assert!(
            merged
                .findings()
                .next()
                .unwrap()
                .reason
                .contains("every node")
        );
    }

    /// `device` as its own node judged it against its record: degraded, failing the
    /// check when `fails` (`fail_on_degraded`).
    fn degraded(node: &str, value: f64, fails: bool) -> EntityResult {
        let mut entity = device(node, value);
        entity.verdict = Verdict::Degraded;
        entity.evidence.history = Some(gpuvet_model::history::HistoryEvidence {
            runs: 10,
            median: value * 1.2,
            spread_pct: 0.5,
            threshold_pct: 8.0,
            deficit_pct: 16.7,
            since_ms: 1,
            degraded_since_ms: Some(2),
            fails,
        });
        entity
    }

    #[test]
    fn a_node_s_judgment_against_its_own_record_is_the_group_s() {
        let per_node = |fails: bool| {
            vec![
                node_result(vec![degraded("a", 100.0, fails)]),
                node_result(vec![device("b", 100.5)]),
            ]
        };
        // Failing: the group's check fails, so every node applies it.
        let merged = merge(CheckName::GemmFlops, per_node(true), &POLICY);
        assert_eq!(merged.status, CheckStatus::Failed);
        assert_eq!(merged.entities[0].verdict, Verdict::Degraded);
        assert!(merged.entities[0].evidence.history.is_some());
        // Informing only: it passes, and the verdict still says degraded.
        let merged = merge(CheckName::GemmFlops, per_node(false), &POLICY);
        assert_eq!(merged.status, CheckStatus::Passed);
        assert_eq!(merged.entities[0].verdict, Verdict::Degraded);
    }

    #[test]
    fn slow_against_the_group_outranks_degraded_and_keeps_the_record() {
        let per_node = vec![
            node_result(vec![degraded("a", 60.0, false)]),
            node_result(vec![device("b", 100.0)]),
            node_result(vec![device("c", 101.0)]),
        ];
        let merged = merge(CheckName::GemmFlops, per_node, &POLICY);
        assert_eq!(merged.status, CheckStatus::Failed);
        let a = &merged.entities[0];
        assert_eq!(a.verdict, Verdict::Slow, "{a:?}");
        assert!(a.evidence.history.is_some(), "{a:?}");
    }

    #[test]
    fn nodes_on_one_machine_are_not_compared_with_each_other() {
        let per_node = vec![
            node_result(vec![device("a", 100.0)]),
            node_result(vec![device("b", 60.0)]),
        ];
        let merged = merge(CheckName::GemmFlops, per_node, &Across::NodesShareAMachine);
        assert_eq!(merged.status, CheckStatus::Passed);
        assert!(merged.params["judged"].contains("share one machine"));
    }

    #[test]
    fn equal_nodes_pass_and_keep_every_entity() {
        let per_node = vec![
            node_result(vec![device("a", 100.0)]),
            node_result(vec![device("b", 100.5)]),
        ];
        let merged = merge(CheckName::GemmFlops, per_node, &POLICY);
        assert_eq!(merged.status, CheckStatus::Passed);
        assert_eq!(merged.entities.len(), 2);
    }

    #[test]
    fn one_node_without_the_check_decides_the_status() {
        let per_node = vec![
            node_result(vec![device("a", 100.0)]),
            CheckResult::without_work(CheckName::GemmFlops, CheckStatus::NotImplemented, "no"),
        ];
        let merged = merge(CheckName::GemmFlops, per_node, &POLICY);
        assert_eq!(merged.status, CheckStatus::NotImplemented);
        let per_node = vec![
            node_result(vec![device("a", 100.0)]),
            CheckResult::without_work(CheckName::GemmFlops, CheckStatus::TimedOut, "late"),
        ];
        assert_eq!(
            merge(CheckName::GemmFlops, per_node, &POLICY).status,
            CheckStatus::TimedOut
        );
    }
}
