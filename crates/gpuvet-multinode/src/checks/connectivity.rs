//! `network_connectivity`: every node probes every other node (TCP connect plus a
//! 16-byte echo), all at once, on the data plane's address and on each interface in
//! `gpuvet.interfaces`, and each pair is judged on both directions, per network. A node
//! that no peer can reach, and that reaches none, is named itself.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use gpuvet_core::analysis::check_status;
use gpuvet_core::catalog::CheckName;
use gpuvet_core::results::{
    CheckResult, Entity, EntityResult, Evidence, Lane, Measurement, Verdict,
};

use crate::conversation::Member;
use crate::coordinator::CheckContext;
use crate::wire::{Directive, ProbeReply, ProbeTarget, Reply};

/// The data plane's own network, always probed.
const DATA_NETWORK: &str = "data";

pub(crate) fn run(context: &mut CheckContext<'_, '_>) -> CheckResult {
    let name = CheckName::NetworkConnectivity;
    let members = context.conversation.members.clone();
    let mut networks = vec![DATA_NETWORK.to_owned()];
    for member in &members {
        for interface in &member.info.interfaces {
            if !networks.contains(&interface.name) {
                networks.push(interface.name.clone());
            }
        }
    }
    let (budget_ms, due) = context.budget();
    let orders = members
        .iter()
        .map(|member| {
            let targets = networks
                .iter()
                .flat_map(|network| {
                    members
                        .iter()
                        .filter(|m| m.rank != member.rank)
                        .filter_map(|m| {
                            Some(ProbeTarget {
                                rank: m.rank,
                                addr: address_on(m, network).ok()?,
                                network: network.clone(),
                            })
                        })
                })
                .collect();
            (member.rank, Directive::Probe { targets, budget_ms })
        })
        .collect();
    let answers = match context.ask_all(name, orders, due) {
        Ok(answers) => answers,
        Err(result) => return *result,
    };
    let nodes: Vec<(u32, String)> = members.iter().map(|m| (m.rank, m.node.clone())).collect();
    let mut entities = Vec::new();
    for network in &networks {
        let mut probes: BTreeMap<(u32, u32), ProbeReply> = BTreeMap::new();
        for (&from, reply) in &answers.replies {
            if let Reply::Probe { results } = reply {
                for result in results.iter().filter(|r| &r.network == network) {
                    probes.insert((from, result.rank), result.clone());
                }
            }
        }
        for mut entity in judge_matrix(&nodes, &probes).entities {
            if network == DATA_NETWORK {
                entities.push(entity);
                continue;
            }
            // A node that cannot be probed on this network says why, once per pair.
            let unprobeable = members.iter().find_map(|m| {
                let involved = match &entity.entity {
                    Entity::NodePair { a, b } => *a == m.node || *b == m.node,
                    Entity::Node { node } => *node == m.node,
                    Entity::Device { .. } => false,
                };
                let why = address_on(m, network).err()?;
                involved.then(|| format!("{}: {why}", m.node))
            });
            entity.reason = match (entity.verdict, unprobeable) {
                (Verdict::Faulty, Some(why)) => format!("on `{network}`: {why}"),
                _ => format!("on `{network}`: {}", entity.reason),
            };
            entities.push(entity);
        }
    }
    let mut params = BTreeMap::new();
    params.insert(
        "networks".to_owned(),
        networks
            .iter()
            .map(|n| {
                if n == DATA_NETWORK {
                    "data (the data plane's address)".to_owned()
                } else {
                    format!("`{n}`")
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
    );
    CheckResult {
        params,
        ..CheckResult::judged(name, check_status(&entities), entities)
    }
}

/// Where `member` answers probes on `network`, or why it cannot.
fn address_on(member: &Member, network: &str) -> Result<SocketAddr, String> {
    if network == DATA_NETWORK {
        return Ok(member.probe);
    }
    let interface = member
        .info
        .interfaces
        .iter()
        .find(|i| i.name == network)
        .ok_or_else(|| format!("`{network}` is not in its `gpuvet.interfaces`"))?;
    interface.addr.ok_or_else(|| {
        interface
            .error
            .clone()
            .unwrap_or_else(|| format!("no address on `{network}`"))
    })
}

/// Judges every pair of `nodes` from the probes `(from, to)`; a missing probe counts
/// as a failed one.
pub(crate) fn judge_matrix(
    nodes: &[(u32, String)],
    probes: &BTreeMap<(u32, u32), ProbeReply>,
) -> CheckResult {
    let mut entities = Vec::new();
    let mut bad_pairs_of: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, (a, a_name)) in nodes.iter().enumerate() {
        for (b, b_name) in &nodes[i + 1..] {
            let there = probes.get(&(*a, *b));
            let back = probes.get(&(*b, *a));
            let rate = |p: Option<&ProbeReply>| {
                p.filter(|p| p.attempts > 0)
                    .map_or(0.0, |p| f64::from(p.successes) / f64::from(p.attempts))
            };
            let success = rate(there).min(rate(back)) * 100.0;
            let entity = Entity::NodePair {
                a: a_name.clone(),
                b: b_name.clone(),
            };
            let mut measurement = Measurement::ok(entity.clone(), success, Vec::new());
            let rtts: Vec<f64> = [there, back]
                .iter()
                .filter_map(|p| p.and_then(|p| p.rtt_us))
                .collect();
            if let Some(rtt) = rtts.iter().copied().reduce(f64::max) {
                measurement = measurement.with_extra("rtt_us", rtt);
            }
            let (verdict, reason) = if success >= 100.0 {
                (
                    Verdict::Ok,
                    "every probe in both directions answered".to_owned(),
                )
            } else {
                *bad_pairs_of.entry(*a).or_default() += 1;
                *bad_pairs_of.entry(*b).or_default() += 1;
                let line = |from: &str, to: &str, p: Option<&ProbeReply>| match p {
                    Some(p) => format!(
                        "{from}→{to} {}/{} connects{}",
                        p.successes,
                        p.attempts,
                        p.error
                            .as_deref()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default()
                    ),
                    None => format!("{from}→{to} not probed"),
                };
                let word = if success == 0.0 {
                    "unreachable"
                } else {
                    "lossy"
                };
                (
                    Verdict::Faulty,
                    format!(
                        "{word}: {}; {}",
                        line(a_name, b_name, there),
                        line(b_name, a_name, back)
                    ),
                )
            };
            entities.push(EntityResult {
                entity,
                verdict,
                lane: Lane::Network,
                reason,
                evidence: Evidence {
                    value: Some(success),
                    ..Evidence::default()
                },
                measurement,
            });
        }
    }
    // A node cut off from every peer is the fault, not each of its links.
    if nodes.len() >= 3 {
        for (rank, node) in nodes {
            if bad_pairs_of.get(rank).copied() == Some(nodes.len() - 1) {
                let entity = Entity::Node { node: node.clone() };
                entities.push(EntityResult {
                    entity: entity.clone(),
                    verdict: Verdict::Faulty,
                    lane: Lane::Network,
                    reason: "no peer reaches it and it reaches no peer: its network link is down"
                        .to_owned(),
                    evidence: Evidence {
                        value: Some(0.0),
                        ..Evidence::default()
                    },
                    measurement: Measurement::ok(entity, 0.0, Vec::new()),
                });
            }
        }
    }
    CheckResult::judged(
        CheckName::NetworkConnectivity,
        check_status(&entities),
        entities,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(rank: u32, successes: u32) -> ProbeReply {
        ProbeReply {
            rank,
            network: "data".to_owned(),
            attempts: 5,
            successes,
            rtt_us: (successes > 0).then_some(50.0),
            error: (successes < 5).then(|| "connection timed out".to_owned()),
        }
    }

    fn nodes(n: u32) -> Vec<(u32, String)> {
        (0..n).map(|r| (r, format!("n{r}"))).collect()
    }

    fn all_pairs(n: u32, broken: &[(u32, u32)]) -> BTreeMap<(u32, u32), ProbeReply> {
        let mut probes = BTreeMap::new();
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    let cut = broken.contains(&(a, b)) || broken.contains(&(b, a));
                    probes.insert((a, b), probe(b, if cut { 0 } else { 5 }));
                }
            }
        }
        probes
    }

    fn findings(result: &CheckResult) -> Vec<String> {
        result.findings().map(|e| e.entity.to_string()).collect()
    }

    #[test]
    fn a_healthy_mesh_passes_with_every_pair() {
        let result = judge_matrix(&nodes(4), &all_pairs(4, &[]));
        assert_eq!(result.status, gpuvet_core::results::CheckStatus::Passed);
        assert_eq!(result.entities.len(), 6);
        assert_eq!(result.entities[0].measurement.extra["rtt_us"], 50.0);
    }

    #[test]
    fn one_cut_link_names_that_pair_only() {
        let result = judge_matrix(&nodes(4), &all_pairs(4, &[(1, 3)]));
        assert_eq!(findings(&result), ["n1<->n3"]);
        let reason = &result.findings().next().unwrap().reason;
        assert!(reason.starts_with("unreachable: n1→n3 0/5"), "{reason}");
    }

    #[test]
    fn a_node_cut_off_from_everyone_is_named_itself() {
        let result = judge_matrix(&nodes(4), &all_pairs(4, &[(2, 0), (2, 1), (2, 3)]));
        let named = findings(&result);
        assert!(named.contains(&"n2".to_owned()), "{named:?}");
        assert_eq!(named.len(), 4);
    }
}
