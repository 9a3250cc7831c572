//! Whole-group collectives (`all_reduce`, `all_gather`, `multi_all_reduce`): one ring
//! over every node, judged by its busbw, with the ring's bottleneck named.
//!
//! A ring runs at the pace of its slowest link, so every rank reports the same busbw
//! and busbw alone cannot say which node is slow. Where each rank's time went can: the
//! rank behind a slow link spends its waiting time blocked in writes to that link,
//! while every other rank waits in reads for data the slow link holds back. A rank
//! whose waiting is mostly writes while the others' is mostly reads is the bottleneck.

use gpuvet_model::analysis::{JudgePolicy, check_status, judge};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{CheckResult, Entity, Lane, Measurement, Verdict};
use gpuvet_model::stats::median;
use std::net::SocketAddr;

use super::native;
use super::pairs::{collective_error, name_peers, order, shared_params};
use crate::coordinator::CheckContext;
use crate::wire::{CollectiveReply, Directive, Reply};

/// A rank is the bottleneck when at least this share of its waiting is writes...
///
/// Measured between network namespaces on a 2-core VM (4 nodes, one node's egress
/// capped by `tbf` at 200 Mbit/s, 8 runs each, 2026-12-02): that node's share was
/// 0.12–0.50 in `all_reduce` (the pipelined ring's socket buffers absorb much of a
/// slow link's backlog) and 0.56–0.72 in `all_gather`, the others' 0.01–0.04; in
/// healthy rings every share was 0.08–0.17 (`all_reduce`) and 0.18–0.23
/// (`all_gather`), so no rank ever stood out 4×. The bottleneck also waits in reads,
/// for upstream data the whole ring's pace holds back, so its share stays well below 1.
/// At 0.4 (the first setting, from 4 runs) 3 of 8 capped `all_reduce` rings went
/// unnamed; at 0.2 one did (0.12), and the factor below keeps healthy rings clear.
pub const BOTTLENECK_SHARE: f64 = 0.2;
/// ...and this many times the other ranks' median share (or [`SHARE_FLOOR`], if more).
pub const BOTTLENECK_FACTOR: f64 = 4.0;
/// Below this, a median share is noise and is not divided by.
pub const SHARE_FLOOR: f64 = 0.05;

pub(crate) fn run(context: &mut CheckContext<'_, '_>, name: CheckName) -> CheckResult {
    let ranks: Vec<u32> = context
        .conversation
        .members
        .iter()
        .map(|m| m.rank)
        .collect();
    let (budget_ms, due) = context.budget();
    let round = context.conversation.round();
    let native = native::applies(context.conversation, name);
    // A native group's orders are built from one address list; others build their own.
    let addrs: Vec<SocketAddr> = if native {
        context
            .conversation
            .members
            .iter()
            .map(|m| m.data)
            .collect()
    } else {
        Vec::new()
    };
    let mut orders: Vec<(u32, Directive)> = ranks
        .iter()
        .enumerate()
        .map(|(index, &rank)| {
            let order = if native {
                native::order(context, name, round, index, &addrs, budget_ms)
            } else {
                order(context, name, round, index, &ranks, budget_ms)
            };
            (rank, Directive::Collective(order))
        })
        .collect();
    if native
        && let Err(result) =
            native::attach(context, name, std::slice::from_ref(&ranks), &mut orders)
    {
        return *result;
    }
    let mut answers = context.conversation.ask(orders, due);
    let names: Vec<String> = ranks
        .iter()
        .map(|&rank| context.conversation.node_name(rank))
        .collect();
    for reply in answers.replies.values_mut() {
        name_peers(reply, &names);
    }
    context
        .conversation
        .record_secondary(&answers, collective_error);
    if !answers.missing.is_empty() {
        return context.interrupted(name, answers.timed_out);
    }
    let nodes: Vec<(String, Option<&CollectiveReply>)> = ranks
        .iter()
        .map(|rank| {
            let reply = match answers.replies.get(rank) {
                Some(Reply::Collective(reply)) => Some(reply),
                _ => None,
            };
            (context.conversation.node_name(*rank), reply)
        })
        .collect();
    let (policy, tolerance_param) = context.between_nodes_policy(name);
    let mut result = judge_ring(name, &nodes, &policy);
    result.params.extend(tolerance_param);
    if let Some(Some(reply)) = nodes.first().map(|(_, r)| r) {
        result.params.extend(shared_params(reply));
    }
    // One rank per node on the data plane; a backend's own transport counts devices.
    result
        .params
        .entry("ranks".to_owned())
        .or_insert_with(|| ranks.len().to_string());
    result
        .params
        .insert("nodes".to_owned(), ranks.len().to_string());
    result
}

/// Judges one ring collective from every rank's reply (by ring order).
pub(crate) fn judge_ring(
    name: CheckName,
    nodes: &[(String, Option<&CollectiveReply>)],
    policy: &JudgePolicy,
) -> CheckResult {
    let spec = name.spec();
    let measurements: Vec<Measurement> = nodes
        .iter()
        .map(|(node, reply)| {
            let entity = Entity::Node { node: node.clone() };
            match reply {
                None => Measurement::failed(entity, "did not answer"),
                Some(CollectiveReply {
                    error: Some(error), ..
                }) => Measurement::failed(entity, error.clone()),
                Some(reply) => Measurement {
                    entity,
                    value: reply.value,
                    samples: reply.samples.clone(),
                    error: None,
                    wrong_result: reply.wrong_result.clone(),
                    extra: reply.extra.clone(),
                },
            }
        })
        .collect();
    let mut entities = judge(spec, &measurements, policy);
    let shares: Vec<Option<f64>> = nodes
        .iter()
        .map(|(_, reply)| reply.and_then(write_share))
        .collect();
    for (entity, share) in entities.iter_mut().zip(&shares) {
        if let Some(share) = share {
            entity
                .measurement
                .extra
                .insert("write_wait_share".to_owned(), *share);
        }
    }
    if let Some((index, share, others)) = bottleneck(&shares) {
        let next = &nodes[(index + 1) % nodes.len()].0;
        let entity = &mut entities[index];
        if entity.verdict == Verdict::Ok {
            entity.verdict = Verdict::Slow;
            entity.lane = Lane::Network;
            entity.reason = format!(
                "the ring's bottleneck: {:.0}% of its waiting was sending to {next}, while the \
                 other nodes' median was {:.0}% (they waited for data it held back)",
                share * 100.0,
                others * 100.0
            );
        }
    }
    CheckResult::judged(name, check_status(&entities), entities)
}

/// The share of a rank's waiting spent in writes, over all its links.
fn write_share(reply: &CollectiveReply) -> Option<f64> {
    let writes: f64 = reply.links.iter().map(|l| l.send_blocked_s).sum();
    let reads: f64 = reply.links.iter().map(|l| l.receive_blocked_s).sum();
    let waiting = writes + reads;
    (waiting > 0.0).then(|| writes / waiting)
}

/// The rank that holds the ring back, with its share and the others' median share.
fn bottleneck(shares: &[Option<f64>]) -> Option<(usize, f64, f64)> {
    if shares.len() < 3 || shares.iter().any(Option::is_none) {
        // With two ranks each is the other's only peer: a pair test names the node.
        return None;
    }
    let shares: Vec<f64> = shares.iter().map(|s| s.unwrap_or(0.0)).collect();
    let (index, &share) = shares
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))?;
    let others: Vec<f64> = shares
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != index)
        .map(|(_, &s)| s)
        .collect();
    let others = median(&others)?;
    let stands_out = share >= BOTTLENECK_FACTOR * others.max(SHARE_FLOOR);
    (share >= BOTTLENECK_SHARE && stands_out).then_some((index, share, others))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::LinkReply;

    fn reply(busbw: f64, writes: f64, reads: f64) -> CollectiveReply {
        CollectiveReply {
            value: Some(busbw),
            samples: vec![busbw; 5],
            links: vec![
                LinkReply {
                    rank: 1,
                    bytes_sent: 1 << 20,
                    send_blocked_s: writes,
                    receive_blocked_s: 0.0,
                },
                LinkReply {
                    rank: 2,
                    bytes_sent: 0,
                    send_blocked_s: 0.0,
                    receive_blocked_s: reads,
                },
            ],
            ..CollectiveReply::default()
        }
    }

    const POLICY: JudgePolicy = JudgePolicy {
        tolerance: 0.25,
        limit: None,
    };

    /// An all-reduce ring of `n0`, `n1`, … with these replies, judged.
    fn judged(replies: &[CollectiveReply]) -> CheckResult {
        let nodes: Vec<(String, Option<&CollectiveReply>)> = replies
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("n{i}"), Some(r)))
            .collect();
        judge_ring(CheckName::AllReduce, &nodes, &POLICY)
    }

    fn names(result: &CheckResult) -> Vec<String> {
        result.findings().map(|e| e.entity.to_string()).collect()
    }

    #[test]
    fn the_rank_blocked_in_writes_is_the_bottleneck() {
        let replies = [
            reply(0.1, 0.05, 0.9),
            reply(0.1, 0.53, 0.47),
            reply(0.1, 0.02, 0.9),
            reply(0.1, 0.04, 0.8),
        ];
        let result = judged(&replies);
        assert_eq!(names(&result), ["n1"]);
        let finding = result.findings().next().unwrap();
        assert_eq!(finding.lane, Lane::Network);
        assert!(
            finding.reason.contains("sending to n2"),
            "{}",
            finding.reason
        );
    }

    #[test]
    fn a_bottleneck_whose_buffers_absorb_most_of_its_backlog_is_still_named() {
        // Measured in a CI run: the capped node waited a quarter of its time in writes,
        // ten times the others.
        let replies = [
            reply(0.024, 0.009, 0.495),
            reply(0.024, 0.012, 0.47),
            reply(0.024, 0.165, 0.483),
            reply(0.024, 0.024, 0.555),
        ];
        let result = judged(&replies);
        assert_eq!(names(&result), ["n2"]);
    }

    #[test]
    fn a_share_below_the_floor_names_nobody_even_when_it_stands_out() {
        // 0.12 is 5× the others but under BOTTLENECK_SHARE: too little to name a node.
        let shares = [Some(0.03), Some(0.016), Some(0.12), Some(0.024)];
        assert_eq!(bottleneck(&shares), None);
        let shares = [Some(0.03), Some(0.016), Some(0.25), Some(0.024)];
        assert_eq!(bottleneck(&shares).map(|b| b.0), Some(2));
    }

    #[test]
    fn waiting_spread_evenly_names_nobody() {
        // As measured in a healthy ring: every share about 0.19.
        let replies = [
            reply(1.0, 0.19, 0.81),
            reply(1.0, 0.6, 0.4),
            reply(1.0, 0.18, 0.82),
            reply(1.0, 0.2, 0.8),
        ];
        let result = judged(&replies);
        assert!(names(&result).is_empty());
        assert_eq!(result.entities.len(), 4);
    }

    #[test]
    fn an_error_is_faulty_on_the_rank_that_met_it() {
        let good = reply(1.0, 0.1, 0.1);
        let bad = CollectiveReply {
            error: Some("wrong sum".to_owned()),
            ..CollectiveReply::default()
        };
        let nodes = vec![
            ("n0".to_owned(), Some(&good)),
            ("n1".to_owned(), Some(&bad)),
            ("n2".to_owned(), None),
        ];
        let result = judge_ring(CheckName::AllReduce, &nodes, &POLICY);
        assert_eq!(names(&result), ["n1", "n2"]);
    }
}
