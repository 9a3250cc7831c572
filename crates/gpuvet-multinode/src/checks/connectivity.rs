//! `network_connectivity`: nodes probe each other (TCP connect plus a 16-byte echo), all
//! at once, on the data plane's address and on each interface in `gpuvet.interfaces`,
//! and each probed pair is judged on both directions, per network. A node that none of
//! its partners can reach, and that reaches none of them, is named itself.
//!
//! Up to [`FULL_MESH_NODES`] nodes every pair is probed. Above that, every pair would be
//! N² probes (16.7 M at 4,096 nodes), so each node probes only its partners in a
//! circulant graph: the ranks at ±1, ±2, ±4, … and, in an even group, the one opposite,
//! about 2·log2 N each ([`probe_partners`]). Every node is still probed from that many
//! directions, so a node whose link is down, or a set of nodes cut off from the rest,
//! is still found; a single blocked pair between two nodes that are not partners is
//! not. The ±1 neighbours are always partners, since NCCL's rings run over them. The
//! check's `pairs` parameter says which way it ran.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use gpuvet_model::analysis::check_status;
use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{
    CheckResult, Entity, EntityResult, Evidence, Lane, Measurement, Verdict,
};

use gpuvet_backend::with_causes;

use crate::GroupError;
use crate::conversation::Member;
use crate::coordinator::CheckContext;
use crate::wire::{Directive, ProbeReply, ProbeTarget, Reply};

/// The data plane's own network, always probed.
const DATA_NETWORK: &str = "data";

/// The largest group in which every pair is probed; larger ones probe partners only.
pub(crate) const FULL_MESH_NODES: usize = 64;

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
    let pairs = probe_partners(members.len());
    // Each end of a chosen pair probes the other, so both directions are measured.
    let mut partners_of: Vec<Vec<usize>> = vec![Vec::new(); members.len()];
    for &(a, b) in &pairs {
        partners_of[a].push(b);
        partners_of[b].push(a);
    }
    let (budget_ms, due) = context.budget();
    let orders = members
        .iter()
        .zip(&partners_of)
        .map(|(member, partners)| {
            let targets = networks
                .iter()
                .flat_map(|network| {
                    partners.iter().filter_map(|&partner| {
                        let peer = &members[partner];
                        Some(ProbeTarget {
                            rank: peer.rank,
                            addr: address_on(peer, network).ok()?,
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
    let member_named: HashMap<&str, &Member> =
        members.iter().map(|m| (m.node.as_str(), m)).collect();
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
        for mut entity in judge_matrix(&nodes, &pairs, &probes).entities {
            if network == DATA_NETWORK {
                entities.push(entity);
                continue;
            }
            // A node that cannot be probed on this network says why, once per pair; its
            // ends are looked up by name, since a scan of every member per pair is N³.
            let ends = match &entity.entity {
                Entity::NodePair { a, b } => vec![a, b],
                Entity::Node { node } => vec![node],
                Entity::Device { .. } => Vec::new(),
            };
            let unprobeable = ends.into_iter().find_map(|end| {
                let member = member_named.get(end.as_str())?;
                let why = address_on(member, network).err()?;
                Some(format!("{}: {}", member.node, with_causes(&why)))
            });
            entity.reason = match (entity.verdict, unprobeable) {
                (Verdict::Faulty, Some(why)) => format!("on `{network}`: {why}"),
                _ => format!("on `{network}`: {}", entity.reason),
            };
            entities.push(entity);
        }
    }
    let mut params = BTreeMap::new();
    params.insert("pairs".to_owned(), pairs_param(members.len(), pairs.len()));
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
fn address_on(member: &Member, network: &str) -> Result<SocketAddr, GroupError> {
    if network == DATA_NETWORK {
        return Ok(member.probe);
    }
    let interface = member
        .info
        .interfaces
        .iter()
        .find(|i| i.name == network)
        .ok_or_else(|| GroupError::NotProbed {
            network: network.to_owned(),
        })?;
    interface.addr.ok_or_else(|| match &interface.error {
        // The member's own reason, which came as text in its hello.
        Some(message) => GroupError::Remote {
            message: message.clone(),
        },
        None => GroupError::NoAddressOn {
            network: network.to_owned(),
        },
    })
}

/// The pairs of a group of `n` nodes that probe each other, as positions `(a, b)` with
/// `a < b`, sorted and each once: every pair up to [`FULL_MESH_NODES`] nodes, else
/// each position with those at ±1, ±2, ±4, … (powers of two below `n / 2`) and, when
/// `n` is even, the one opposite (`n / 2` away). Every node then has the same number of
/// partners, about 2·log2 `n`, and the ±1 ring alone keeps the graph connected.
pub(crate) fn probe_partners(n: usize) -> Vec<(usize, usize)> {
    if n <= FULL_MESH_NODES {
        return (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .collect();
    }
    let mut offsets: Vec<usize> = std::iter::successors(Some(1), |d| Some(d * 2))
        .take_while(|d| 2 * d < n)
        .collect();
    if n.is_multiple_of(2) {
        offsets.push(n / 2);
    }
    let mut pairs: Vec<(usize, usize)> = offsets
        .iter()
        .flat_map(|&d| {
            (0..n).map(move |a| {
                let b = (a + d) % n;
                (a.min(b), a.max(b))
            })
        })
        .collect();
    // The opposite offset reaches each of its pairs from both ends.
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

/// The `pairs` parameter: which pairs of a group of `nodes` were probed.
fn pairs_param(nodes: usize, probed: usize) -> String {
    if nodes <= FULL_MESH_NODES {
        return format!("every pair ({probed})");
    }
    let every = nodes * (nodes - 1) / 2;
    let per_node = 2 * probed / nodes;
    format!("{per_node} partners per node (about 2·log2 N): {probed} of {every} pairs")
}

/// Judges the `pairs` (positions in `nodes`) from the probes `(from rank, to rank)`; a
/// missing probe counts as a failed one.
pub(crate) fn judge_matrix(
    nodes: &[(u32, String)],
    pairs: &[(usize, usize)],
    probes: &BTreeMap<(u32, u32), ProbeReply>,
) -> CheckResult {
    let mut entities = Vec::new();
    let mut partners = vec![0_usize; nodes.len()];
    let mut bad_pairs = vec![0_usize; nodes.len()];
    for &(a_at, b_at) in pairs {
        partners[a_at] += 1;
        partners[b_at] += 1;
        let ((a, a_name), (b, b_name)) = (&nodes[a_at], &nodes[b_at]);
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
            bad_pairs[a_at] += 1;
            bad_pairs[b_at] += 1;
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
    // A node cut off from every partner is the fault, not each of its links; with one
    // partner, either end could be the one cut off.
    for (at, (_, node)) in nodes.iter().enumerate() {
        if partners[at] >= 2 && bad_pairs[at] == partners[at] {
            let entity = Entity::Node { node: node.clone() };
            entities.push(EntityResult {
                entity: entity.clone(),
                verdict: Verdict::Faulty,
                lane: Lane::Network,
                reason: format!(
                    "no peer reaches it and it reaches no peer (all {} probed): its network \
                     link is down",
                    partners[at]
                ),
                evidence: Evidence {
                    value: Some(0.0),
                    ..Evidence::default()
                },
                measurement: Measurement::ok(entity, 0.0, Vec::new()),
            });
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

    #[test]
    fn a_member_that_cannot_be_probed_on_a_network_says_why() {
        use crate::wire::{InterfaceProbe, NodeInfo};
        let data: SocketAddr = "10.0.0.2:7000".parse().unwrap();
        let interface = |name: &str, addr: Option<&str>, error: Option<&str>| InterfaceProbe {
            name: name.to_owned(),
            addr: addr.map(|a| a.parse().unwrap()),
            error: error.map(str::to_owned),
        };
        let member = Member {
            rank: 1,
            node: "n1".to_owned(),
            data,
            rails: Vec::new(),
            probe: "10.0.0.2:7002".parse().unwrap(),
            info: NodeInfo {
                backend: "cpu".to_owned(),
                devices: Vec::new(),
                host_id: String::new(),
                rail_ports: Vec::new(),
                probe_port: 7002,
                every_interface: false,
                interfaces: vec![
                    interface("ib0", Some("10.1.0.2:7100"), None),
                    interface("ib1", None, Some("interface `ib1` has no IPv4 address")),
                    interface("ib2", None, None),
                ],
                spans_nodes: false,
            },
        };
        assert_eq!(address_on(&member, DATA_NETWORK).unwrap(), member.probe);
        assert_eq!(
            address_on(&member, "ib0").unwrap(),
            "10.1.0.2:7100".parse().unwrap()
        );
        let err = address_on(&member, "eth9").unwrap_err();
        assert!(matches!(err, GroupError::NotProbed { .. }), "{err:?}");
        assert_eq!(err.to_string(), "`eth9` is not in its `gpuvet.interfaces`");
        // The member's own reason arrived as text and is given as it came.
        let err = address_on(&member, "ib1").unwrap_err();
        assert!(
            matches!(&err, GroupError::Remote { message } if message == "interface `ib1` has no IPv4 address"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "interface `ib1` has no IPv4 address");
        let err = address_on(&member, "ib2").unwrap_err();
        assert!(matches!(err, GroupError::NoAddressOn { .. }), "{err:?}");
        assert_eq!(err.to_string(), "no address on `ib2`");
    }

    fn nodes(n: u32) -> Vec<(u32, String)> {
        (0..n).map(|r| (r, format!("n{r}"))).collect()
    }

    /// Both directions of each of `pairs`, those in `broken` failing.
    fn probes_of(
        pairs: &[(usize, usize)],
        broken: &[(usize, usize)],
    ) -> BTreeMap<(u32, u32), ProbeReply> {
        let mut probes = BTreeMap::new();
        for &(a, b) in pairs {
            let cut = broken.contains(&(a, b)) || broken.contains(&(b, a));
            let successes = if cut { 0 } else { 5 };
            let (a, b) = (a as u32, b as u32);
            probes.insert((a, b), probe(b, successes));
            probes.insert((b, a), probe(a, successes));
        }
        probes
    }

    /// Judges a group of `n` whose chosen pairs answer, except `broken`.
    fn judged(n: usize, broken: &[(usize, usize)]) -> CheckResult {
        let pairs = probe_partners(n);
        judge_matrix(&nodes(n as u32), &pairs, &probes_of(&pairs, broken))
    }

    fn partners_of(n: usize, pairs: &[(usize, usize)]) -> Vec<Vec<usize>> {
        let mut partners = vec![Vec::new(); n];
        for &(a, b) in pairs {
            partners[a].push(b);
            partners[b].push(a);
        }
        partners
    }

    fn findings(result: &CheckResult) -> Vec<String> {
        result.findings().map(|e| e.entity.to_string()).collect()
    }

    #[test]
    fn a_healthy_mesh_passes_with_every_pair() {
        let result = judged(4, &[]);
        assert_eq!(result.status, gpuvet_model::results::CheckStatus::Passed);
        assert_eq!(result.entities.len(), 6);
        assert_eq!(result.entities[0].measurement.extra["rtt_us"], 50.0);
    }

    #[test]
    fn one_cut_link_names_that_pair_only() {
        let result = judged(4, &[(1, 3)]);
        assert_eq!(findings(&result), ["n1<->n3"]);
        let reason = &result.findings().next().unwrap().reason;
        assert!(reason.starts_with("unreachable: n1→n3 0/5"), "{reason}");
    }

    #[test]
    fn a_node_cut_off_from_everyone_is_named_itself() {
        let result = judged(4, &[(2, 0), (2, 1), (2, 3)]);
        let named = findings(&result);
        assert!(named.contains(&"n2".to_owned()), "{named:?}");
        assert_eq!(named.len(), 4);
    }

    #[test]
    fn a_missing_probe_counts_as_a_failed_one() {
        let pairs = probe_partners(3);
        let mut probes = probes_of(&pairs, &[]);
        probes.remove(&(2, 0));
        let result = judge_matrix(&nodes(3), &pairs, &probes);
        assert_eq!(findings(&result), ["n0<->n2"]);
        let reason = &result.findings().next().unwrap().reason;
        assert!(reason.ends_with("n2→n0 not probed"), "{reason}");
    }

    #[test]
    fn small_groups_probe_every_pair() {
        assert_eq!(probe_partners(2), [(0, 1)]);
        assert_eq!(probe_partners(3), [(0, 1), (0, 2), (1, 2)]);
        let every: Vec<(usize, usize)> = (0..64)
            .flat_map(|a| (a + 1..64).map(move |b| (a, b)))
            .collect();
        assert_eq!(probe_partners(FULL_MESH_NODES), every);
        assert_eq!(every.len(), 64 * 63 / 2);
    }

    #[test]
    fn large_groups_probe_about_two_log2_n_partners_each() {
        for n in [65, 100, 128, 201, 4095, 4096] {
            let pairs = probe_partners(n);
            // Sorted and strictly increasing: no pair twice; a < b: no node with itself.
            assert!(pairs.windows(2).all(|w| w[0] < w[1]), "n={n}");
            assert!(pairs.iter().all(|&(a, b)| a < b && b < n), "n={n}");
            let partners = partners_of(n, &pairs);
            let degree = partners[0].len();
            assert!(partners.iter().all(|p| p.len() == degree), "n={n}");
            let two_log2 = 2.0 * (n as f64).log2();
            assert!(
                (degree as f64 - two_log2).abs() <= 2.0,
                "n={n}: {degree} partners, 2·log2 n = {two_log2:.1}"
            );
            // The ring neighbours, the wrap-around included.
            assert!(pairs.contains(&(0, n - 1)), "n={n}");
            assert!(
                (0..n - 1).all(|a| pairs.binary_search(&(a, a + 1)).is_ok()),
                "n={n}"
            );
            let mut reached = vec![false; n];
            let mut frontier = vec![0];
            reached[0] = true;
            while let Some(at) = frontier.pop() {
                for &next in &partners[at] {
                    if !reached[next] {
                        reached[next] = true;
                        frontier.push(next);
                    }
                }
            }
            assert!(reached.iter().all(|&r| r), "n={n}: not connected");
        }
        // 1, 2, 4, …, 1024 either way and the one opposite: 23 partners each.
        assert_eq!(probe_partners(4096).len(), 4096 * 23 / 2);
        assert_eq!(probe_partners(65).len(), 65 * 12 / 2);
    }

    #[test]
    fn the_pairs_param_says_which_way_it_ran() {
        assert_eq!(pairs_param(4, 6), "every pair (6)");
        assert_eq!(
            pairs_param(4096, probe_partners(4096).len()),
            "23 partners per node (about 2·log2 N): 47104 of 8386560 pairs"
        );
    }

    #[test]
    fn a_node_cut_off_from_its_partners_in_a_large_group_is_named_itself() {
        let pairs = probe_partners(200);
        let cut: Vec<(usize, usize)> = pairs
            .iter()
            .copied()
            .filter(|&(a, b)| a == 7 || b == 7)
            .collect();
        let result = judged(200, &cut);
        assert_eq!(result.entities.len(), pairs.len() + 1);
        let named = findings(&result);
        assert!(named.contains(&"n7".to_owned()), "{named:?}");
        assert_eq!(named.len(), cut.len() + 1, "{named:?}");
        let reason = &result.findings().last().unwrap().reason;
        assert!(
            reason.contains(&format!("all {} probed", cut.len())),
            "{reason}"
        );
    }

    #[test]
    fn one_cut_partner_pair_in_a_large_group_names_that_pair_only() {
        let result = judged(200, &[(10, 11)]);
        assert_eq!(findings(&result), ["n10<->n11"]);
    }

    #[test]
    fn a_set_of_nodes_cut_off_from_the_rest_is_found_in_a_large_group() {
        let island = 50..60;
        let crossing: Vec<(usize, usize)> = probe_partners(200)
            .into_iter()
            .filter(|(a, b)| island.contains(a) != island.contains(b))
            .collect();
        let result = judged(200, &crossing);
        let named = findings(&result);
        assert_eq!(named.len(), crossing.len(), "{named:?}");
        // Every node of the island has a partner outside it, so each is in a finding.
        for node in island {
            let name = format!("n{node}");
            assert!(
                named.iter().any(|n| n.split("<->").any(|end| end == name)),
                "{name} in {named:?}"
            );
        }
    }
}
