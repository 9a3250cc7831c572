//! Collectives the backends run among themselves across nodes (NCCL for GPUs), instead
//! of over gpuvet's TCP data plane, which would measure the host network and not what
//! the GPUs' own transport gets.
//!
//! Before each batch, the coordinator asks every group's first member for a token
//! (NCCL's unique id) and hands each member the token with its ranks: a member's
//! devices are consecutive ranks, members in group order. `multi_all_reduce` takes one
//! token per rail instead: device i of every member is on rail i, as many rails as the
//! member with the fewest devices has, and each member is one rank per rail.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::results::{CheckResult, CheckStatus};

use crate::conversation::{Conversation, Member};
use crate::coordinator::CheckContext;
use crate::wire::{CollectiveOrder, Directive, HostEngine, NativeGroup, Reply, ring_neighbours};

/// The checks the backends' own transport runs across nodes.
pub(crate) const NATIVE_CHECKS: [CheckName; 7] = [
    CheckName::AllReduce2,
    CheckName::AllReduce,
    CheckName::AllGather2,
    CheckName::AllGather,
    CheckName::AllToAll2,
    CheckName::MultiAllReduce2,
    CheckName::MultiAllReduce,
];

/// Whether `name` runs one collective per rail.
fn per_rail(name: CheckName) -> bool {
    matches!(name, CheckName::MultiAllReduce2 | CheckName::MultiAllReduce)
}

/// Whether `name` runs on the backends' own transport in this group: every member's
/// backend has one (the cpu backend has none; its nodes use the data plane), and no
/// two members drive the same GPU.
pub(crate) fn applies(conversation: &Conversation<'_>, name: CheckName) -> bool {
    NATIVE_CHECKS.contains(&name)
        && !conversation.members.is_empty()
        && conversation.members.iter().all(|m| m.info.spans_nodes)
        && shared_gpu(&conversation.members).is_none()
}

/// Two members that drive the same GPU (by UUID), as nodes on one machine do: NCCL
/// cannot make one GPU two ranks. Returns both nodes and the GPU.
pub(crate) fn shared_gpu(members: &[Member]) -> Option<(String, String, String)> {
    let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
    for member in members {
        for device in &member.info.devices {
            let Some(uuid) = &device.facts.uuid else {
                continue;
            };
            match owners.insert(uuid, &member.node) {
                Some(other) if other != member.node => {
                    return Some((other.to_owned(), member.node.clone(), uuid.clone()));
                }
                _ => {}
            }
        }
    }
    None
}

/// Gives the collective order of every member of each group (ranks in group order)
/// the group's tokens and the member's ranks. `Err` carries the check's result when a
/// member was lost, time ran out, or a token could not be made.
pub(crate) fn attach(
    context: &mut CheckContext<'_, '_>,
    name: CheckName,
    groups: &[Vec<u32>],
    orders: &mut [(u32, Directive)],
) -> Result<(), Box<CheckResult>> {
    let (_, due) = context.budget();
    let position: HashMap<u32, usize> = orders
        .iter()
        .enumerate()
        .map(|(at, (rank, _))| (*rank, at))
        .collect();
    let devices = |context: &CheckContext<'_, '_>, group: &[u32]| -> Vec<usize> {
        group
            .iter()
            .map(|&rank| {
                context
                    .conversation
                    .member(rank)
                    .map_or(0, |m| m.info.devices.len())
            })
            .collect()
    };
    let failed = |context: &CheckContext<'_, '_>, first: u32, why: String| {
        Box::new(CheckResult::without_work(
            name,
            CheckStatus::Failed,
            format!(
                "{} could not make the token of a collective across nodes: {why}",
                context.conversation.node_name(first)
            ),
        ))
    };
    // Tokens per group: one, or one per rail.
    let mut counts = Vec::with_capacity(groups.len());
    for group in groups {
        let count = if per_rail(name) {
            devices(context, group).into_iter().min().unwrap_or(0)
        } else {
            1
        };
        if let (Some(&first), 0) = (group.first(), count) {
            let why = "a member has no devices to put on a rail".to_owned();
            return Err(failed(context, first, why));
        }
        counts.push(count);
    }
    let asks = groups
        .iter()
        .zip(&counts)
        .filter_map(|(group, &count)| {
            group
                .first()
                .map(|&first| (first, Directive::GroupToken { count }))
        })
        .collect();
    let answers = context.ask_all(name, asks, due)?;
    for (group, &count) in groups.iter().zip(&counts) {
        let Some(&first) = group.first() else {
            continue;
        };
        let tokens = match answers.replies.get(&first) {
            Some(Reply::GroupToken {
                tokens,
                error: None,
            }) if tokens.len() == count => tokens.clone(),
            Some(Reply::GroupToken {
                error: Some(error), ..
            }) => return Err(failed(context, first, error.clone())),
            other => {
                let why = format!("asked for {count} tokens, it answered `{other:?}`");
                return Err(failed(context, first, why));
            }
        };
        let places = if per_rail(name) {
            rail_places(&tokens, group.len())
        } else {
            places(&tokens[0], &devices(context, group))
        };
        for (place, native) in places.into_iter().enumerate() {
            let Some(&at) = position.get(&group[place]) else {
                continue;
            };
            if let (_, Directive::Collective(order)) = &mut orders[at] {
                // The backends find each other: only the ring neighbours stay, for a
                // simulated network's pacing.
                if !order.peers.is_empty() {
                    order.ring = ring_neighbours(order.rank, &order.peers);
                    order.peers = Vec::new();
                    order.rails = Vec::new();
                }
                order.native = Some(native);
            }
        }
    }
    Ok(())
}

/// The order of the member at `index` of a whole group whose data-plane addresses are
/// `addrs`, for a collective the backends run: its ring neighbours' addresses only,
/// so the coordinator builds and sends O(N), not every address to every member.
pub(crate) fn order(
    context: &CheckContext<'_, '_>,
    name: CheckName,
    round: u64,
    index: usize,
    addrs: &[SocketAddr],
    budget_ms: u64,
) -> CollectiveOrder {
    CollectiveOrder {
        check: name,
        round,
        session: context.conversation.data_session.clone(),
        rank: index,
        peers: Vec::new(),
        rails: Vec::new(),
        ring: ring_neighbours(index, addrs),
        bytes: context.plan.collective_bytes,
        budget_ms,
        engine: HostEngine::default(),
        native: None,
    }
}

/// Each member's place, in group order: its devices are consecutive ranks.
pub(crate) fn places(token: &str, devices: &[usize]) -> Vec<NativeGroup> {
    let world = devices.iter().sum();
    let mut first_rank = 0;
    devices
        .iter()
        .map(|&count| {
            let place = NativeGroup::Devices {
                token: token.to_owned(),
                world,
                first_rank,
            };
            first_rank += count;
            place
        })
        .collect()
}

/// Each of `nodes` members' place on every rail: rank `node` of `nodes`.
pub(crate) fn rail_places(tokens: &[String], nodes: usize) -> Vec<NativeGroup> {
    (0..nodes)
        .map(|node| NativeGroup::Rails {
            tokens: tokens.to_vec(),
            nodes,
            node,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::NodeInfo;
    use gpuvet_model::results::DeviceInfo;

    fn member(rank: u32, gpus: &[&str]) -> Member {
        let at = "127.0.0.1:1".parse().unwrap();
        let devices = gpus
            .iter()
            .enumerate()
            .map(|(index, uuid)| DeviceInfo {
                index: index as u32,
                name: "NVIDIA H200".to_owned(),
                memory_bytes: None,
                facts: gpuvet_model::inventory::DeviceFacts {
                    uuid: Some((*uuid).to_owned()),
                    ..Default::default()
                },
                details: BTreeMap::new(),
            })
            .collect();
        Member {
            rank,
            node: format!("n{rank}"),
            data: at,
            rails: Vec::new(),
            probe: at,
            info: NodeInfo {
                backend: "cuda".to_owned(),
                devices,
                host_id: String::new(),
                rail_ports: Vec::new(),
                probe_port: 1,
                every_interface: false,
                interfaces: Vec::new(),
                spans_nodes: true,
            },
        }
    }

    #[test]
    fn nodes_driving_the_same_gpu_are_found() {
        let apart = [member(0, &["GPU-a", "GPU-b"]), member(1, &["GPU-c"])];
        assert_eq!(shared_gpu(&apart), None);
        let together = [member(0, &["GPU-a", "GPU-b"]), member(1, &["GPU-b"])];
        assert_eq!(
            shared_gpu(&together),
            Some(("n0".to_owned(), "n1".to_owned(), "GPU-b".to_owned()))
        );
    }

    #[test]
    fn members_take_consecutive_ranks_in_group_order() {
        let places = places("ab", &[8, 4, 8]);
        let expected: Vec<NativeGroup> = [0, 8, 12]
            .into_iter()
            .map(|first_rank| NativeGroup::Devices {
                token: "ab".to_owned(),
                world: 20,
                first_rank,
            })
            .collect();
        assert_eq!(places, expected);
    }

    #[test]
    fn on_rails_each_member_is_one_rank_of_every_rail() {
        let tokens = vec!["a0".to_owned(), "a1".to_owned()];
        let places = rail_places(&tokens, 3);
        assert_eq!(places.len(), 3);
        assert_eq!(
            places[2],
            NativeGroup::Rails {
                tokens,
                nodes: 3,
                node: 2
            }
        );
        assert!(per_rail(CheckName::MultiAllReduce2) && per_rail(CheckName::MultiAllReduce));
        assert!(!per_rail(CheckName::AllReduce2));
    }
}
