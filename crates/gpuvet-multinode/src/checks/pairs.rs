//! The `_2` checks: node pairs measured over the data plane, planned and judged by
//! `gpuvet_model::pairing` and `gpuvet_model::localize`.
//!
//! Round one measures disjoint pairs at once; each further plan re-measures suspects
//! and tests members of failed pairs with known-good nodes, until nothing is left to
//! learn. Then a node that fails with good partners is named, or the link between two
//! nodes that pass elsewhere.

use std::collections::BTreeMap;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::localize::{PairTest, judge_pairs, localize, outcomes};
use gpuvet_model::pairing::{
    MAX_RETEST_PLANS, NodeId, Pair, PairingMode, Plan, full_round_robin, retest, round_one,
};
use gpuvet_model::results::{CheckResult, Lane, Measurement};

use super::{host_engine, native};
use crate::coordinator::CheckContext;
use crate::wire::{CollectiveOrder, CollectiveReply, Directive, HostEngine, Reply};

pub(crate) fn run(context: &mut CheckContext<'_, '_>, name: CheckName) -> CheckResult {
    let nodes: Vec<NodeId> = context
        .conversation
        .members
        .iter()
        .map(|m| m.node.clone())
        .collect();
    let spec = name.spec();
    let (policy, tolerance_param) = context.between_nodes_policy(name);
    let mut plan = match context.plan.pairing {
        PairingMode::Adaptive => round_one(&nodes),
        PairingMode::Full => full_round_robin(&nodes).to_plan(),
    };
    let choice = if name == CheckName::PytorchGloo2 {
        match host_engine::choose(context) {
            Ok(choice) => Some(choice),
            Err(result) => return *result,
        }
    } else {
        None
    };
    let engine = choice.as_ref().map(|c| c.engine).unwrap_or_default();
    let mut tests: Vec<PairTest> = Vec::new();
    let mut params = BTreeMap::new();
    let mut plans_run = 0;
    let judged = loop {
        if let Err(result) = run_plan(context, name, engine, &plan, &mut tests, &mut params) {
            return *result;
        }
        plans_run += 1;
        let judged = judge_pairs(spec, &tests, &policy);
        let next = retest(&nodes, &outcomes(&judged));
        if next.plan.is_empty() || plans_run > MAX_RETEST_PLANS {
            break judged;
        }
        plan = next.plan;
    };
    let found = localize(spec, &nodes, &judged, Lane::Network);
    params.insert("pair_tests".to_owned(), tests.len().to_string());
    params.extend(tolerance_param);
    params.insert("plans".to_owned(), plans_run.to_string());
    params.insert(
        "pairing".to_owned(),
        match context.plan.pairing {
            PairingMode::Adaptive => "adaptive",
            PairingMode::Full => "full",
        }
        .to_owned(),
    );
    if let Some(choice) = choice {
        params.extend(choice.params);
    }
    CheckResult {
        reason: found.group_wide.as_ref().map(|g| g.reason.clone()),
        params,
        ..CheckResult::judged(name, found.status(), found.entity_results())
    }
}

/// Runs every round of `plan`, appending one test per pair. `Err` carries the result
/// when a node was lost or time ran out.
fn run_plan(
    context: &mut CheckContext<'_, '_>,
    name: CheckName,
    engine: HostEngine,
    plan: &Plan,
    tests: &mut Vec<PairTest>,
    params: &mut BTreeMap<String, String>,
) -> Result<(), Box<CheckResult>> {
    let shared_host = context.shared_host();
    for round in &plan.rounds {
        // On a shared machine pairs take turns; otherwise a round runs at once.
        let batches: Vec<&[Pair]> = if shared_host {
            round.pairs.chunks(1).collect()
        } else {
            vec![&round.pairs[..]]
        };
        for batch in batches {
            let (budget_ms, due) = context.budget();
            let mut orders = Vec::new();
            let mut ranks_of = Vec::new();
            for pair in batch {
                let (a, b) = (rank_of(context, &pair.a), rank_of(context, &pair.b));
                let round_id = context.conversation.round();
                for (index, &rank) in [a, b].iter().enumerate() {
                    let order = CollectiveOrder {
                        engine,
                        ..order(context, name, round_id, index, &[a, b], budget_ms)
                    };
                    orders.push((rank, Directive::Collective(order)));
                }
                ranks_of.push((pair.clone(), a, b));
            }
            if native::applies(context.conversation, name) {
                let groups: Vec<Vec<u32>> = ranks_of.iter().map(|(_, a, b)| vec![*a, *b]).collect();
                native::attach(context, name, &groups, &mut orders)?;
            }
            let mut answers = context.conversation.ask(orders, due);
            for (pair, a, b) in &ranks_of {
                let names = [pair.a.clone(), pair.b.clone()];
                for rank in [a, b] {
                    if let Some(reply) = answers.replies.get_mut(rank) {
                        name_peers(reply, &names);
                    }
                }
            }
            context
                .conversation
                .record_secondary(&answers, collective_error);
            if !answers.missing.is_empty() {
                return Err(Box::new(context.interrupted(name, answers.timed_out)));
            }
            // Errors are ordered by when they happened, so on one clock.
            for (&rank, reply) in answers.replies.iter_mut() {
                if let Reply::Collective(CollectiveReply {
                    failed_at_ms: Some(ms),
                    ..
                }) = reply
                {
                    *ms = context
                        .conversation
                        .on_coordinator_clock(rank, *ms)
                        .unwrap_or(*ms);
                }
            }
            for (pair, a, b) in ranks_of {
                let replies = [answers.replies.get(&a), answers.replies.get(&b)];
                if let Some(Reply::Collective(reply)) = replies[0] {
                    params.extend(shared_params(reply));
                }
                let measurement = pair_measurement(&pair, replies);
                tests.push(PairTest::new(pair, plan.stage, measurement));
            }
        }
    }
    Ok(())
}

fn rank_of(context: &CheckContext<'_, '_>, node: &str) -> u32 {
    context
        .conversation
        .members
        .iter()
        .find(|m| m.node == node)
        .map(|m| m.rank)
        .expect("pairing plans name only members")
}

/// The order for the member at `index` of a data-plane group of `ranks`.
pub(crate) fn order(
    context: &CheckContext<'_, '_>,
    name: CheckName,
    round: u64,
    index: usize,
    ranks: &[u32],
    budget_ms: u64,
) -> CollectiveOrder {
    let members: Vec<_> = ranks
        .iter()
        .map(|&rank| {
            context
                .conversation
                .member(rank)
                .expect("ranks are members")
        })
        .collect();
    let multi = matches!(name, CheckName::MultiAllReduce | CheckName::MultiAllReduce2);
    let rails = if multi {
        let count = members.iter().map(|m| m.rails.len()).min().unwrap_or(0);
        (0..count)
            .map(|rail| members.iter().map(|m| m.rails[rail]).collect())
            .collect()
    } else {
        Vec::new()
    };
    CollectiveOrder {
        check: name,
        round,
        session: context.conversation.data_session.clone(),
        rank: index,
        peers: members.iter().map(|m| m.data).collect(),
        rails,
        bytes: context.plan.collective_bytes,
        budget_ms,
        engine: HostEngine::default(),
        native: None,
        ring: Vec::new(),
    }
}

/// Rewrites the data plane's names for peers, which are ranks within one small group
/// (`rank 1 (`10.0.0.2:4000`)`), into the nodes they are (`node-7 (`10.0.0.2:4000`)`).
pub(crate) fn name_peers(reply: &mut Reply, nodes: &[String]) {
    if let Reply::Collective(CollectiveReply {
        error: Some(error), ..
    }) = reply
    {
        // Highest rank first, so `rank 1` does not match inside `rank 12`.
        for (index, node) in nodes.iter().enumerate().rev() {
            *error = error.replace(&format!("rank {index} (`"), &format!("{node} (`"));
        }
    }
}

/// A rank's parameters that hold for every rank of the group (not its own rank).
pub(crate) fn shared_params(reply: &CollectiveReply) -> BTreeMap<String, String> {
    let mut params = reply.params.clone();
    params.remove("rank");
    params
}

/// The error a collective reply carries, and when it happened.
pub(crate) fn collective_error(reply: &Reply) -> Option<(String, Option<u64>)> {
    match reply {
        Reply::Collective(CollectiveReply {
            error: Some(error),
            failed_at_ms,
            ..
        }) => Some((error.clone(), *failed_at_ms)),
        Reply::Refused { reason } => Some((reason.clone(), None)),
        _ => None,
    }
}

/// One pair test from its two members' replies: the lower of the two values (both
/// timed the same collective), or both sides' errors, the earlier first (times on the
/// coordinator's clock).
fn pair_measurement(pair: &Pair, replies: [Option<&Reply>; 2]) -> Measurement {
    let entity = pair.entity();
    let mut values = Vec::new();
    let mut best: Option<&CollectiveReply> = None;
    // Both sides' errors, the earlier first: the side that failed first is usually
    // the cause, and the other one only saw it leave.
    let mut errors: Vec<(Option<u64>, String)> = replies
        .iter()
        .zip([&pair.a, &pair.b])
        .filter_map(|(reply, node)| match reply {
            Some(Reply::Collective(CollectiveReply {
                error: Some(error),
                failed_at_ms,
                ..
            })) => Some((*failed_at_ms, format!("{node}: {error}"))),
            _ => None,
        })
        .collect();
    if !errors.is_empty() {
        errors.sort_by_key(|(at, _)| at.unwrap_or(u64::MAX));
        let lines: Vec<String> = errors.into_iter().map(|(_, line)| line).collect();
        return Measurement::failed(entity, lines.join("; "));
    }
    for (reply, node) in replies.iter().zip([&pair.a, &pair.b]) {
        match reply {
            Some(Reply::Collective(reply)) => {
                if let Some(value) = reply.value {
                    values.push(value);
                    if best.is_none_or(|b| b.value.is_some_and(|v| value < v)) {
                        best = Some(reply);
                    }
                }
            }
            Some(other) => {
                return Measurement::failed(entity, format!("{node} answered `{other:?}`"));
            }
            None => return Measurement::failed(entity, format!("{node} did not answer")),
        }
    }
    let Some(best) = best else {
        return Measurement::failed(entity, "neither node reported a value");
    };
    let value = values.iter().copied().fold(f64::INFINITY, f64::min);
    Measurement {
        entity,
        value: Some(value),
        samples: best.samples.clone(),
        error: None,
        wrong_result: best.wrong_result.clone().or_else(|| {
            replies.iter().find_map(|r| match r {
                Some(Reply::Collective(reply)) => reply.wrong_result.clone(),
                _ => None,
            })
        }),
        extra: best.extra.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(value: f64) -> Reply {
        Reply::Collective(CollectiveReply {
            value: Some(value),
            samples: vec![value; 4],
            ..CollectiveReply::default()
        })
    }

    #[test]
    fn data_plane_ranks_become_node_names() {
        let mut reply = Reply::Collective(CollectiveReply {
            error: Some(
                "rank 1 (`10.0.0.2:4000`) sent nothing; rank 0 (`10.0.0.1:4000`) ok".to_owned(),
            ),
            ..CollectiveReply::default()
        });
        name_peers(&mut reply, &["n7".to_owned(), "n9".to_owned()]);
        let Reply::Collective(reply) = reply else {
            unreachable!()
        };
        assert_eq!(
            reply.error.as_deref(),
            Some("n9 (`10.0.0.2:4000`) sent nothing; n7 (`10.0.0.1:4000`) ok")
        );
    }

    #[test]
    fn a_pair_takes_the_lower_value_of_its_two_sides() {
        let pair = Pair::new("a", "b");
        let (left, right) = (ok(10.0), ok(9.0));
        let measurement = pair_measurement(&pair, [Some(&left), Some(&right)]);
        assert_eq!(measurement.value, Some(9.0));
        assert!(measurement.error.is_none());
    }

    #[test]
    fn either_side_failing_fails_the_pair_and_names_the_side() {
        let pair = Pair::new("a", "b");
        let failed = Reply::Collective(CollectiveReply {
            error: Some("rank 0 stalled".to_owned()),
            ..CollectiveReply::default()
        });
        let left = ok(10.0);
        let measurement = pair_measurement(&pair, [Some(&left), Some(&failed)]);
        assert_eq!(measurement.value, None);
        assert_eq!(measurement.error.as_deref(), Some("b: rank 0 stalled"));
        // Both failed: the earlier error first, whichever side it is on.
        let first = Reply::Collective(CollectiveReply {
            error: Some("the script exited".to_owned()),
            failed_at_ms: Some(1_000),
            ..CollectiveReply::default()
        });
        let later = Reply::Collective(CollectiveReply {
            error: Some("b closed the connection".to_owned()),
            failed_at_ms: Some(6_000),
            ..CollectiveReply::default()
        });
        let measurement = pair_measurement(&pair, [Some(&later), Some(&first)]);
        assert_eq!(
            measurement.error.as_deref(),
            Some("b: the script exited; a: b closed the connection")
        );
        let measurement = pair_measurement(&pair, [Some(&left), None]);
        assert_eq!(measurement.error.as_deref(), Some("b did not answer"));
    }
}
