//! Collectives the backends run among themselves across nodes (NCCL for GPUs), instead
//! of over gpuvet's TCP data plane, which would measure the host network and not what
//! the GPUs' own transport gets.
//!
//! Before each batch, the coordinator asks every group's first member for a token
//! (NCCL's unique id) and hands each member the token with its ranks: a member's
//! devices are consecutive ranks, members in group order.

use gpuvet_core::catalog::CheckName;
use gpuvet_core::results::{CheckResult, CheckStatus};

use crate::coordinate::CheckContext;
use crate::session::Session;
use crate::wire::{Directive, NativeGroup, Reply};

/// The checks the backends' own transport runs across nodes.
pub(crate) const NATIVE_CHECKS: [CheckName; 2] = [CheckName::AllReduce2, CheckName::AllReduce];

/// Whether `name` runs on the backends' own transport in this group: every member's
/// backend has one (the cpu backend has none; its nodes use the data plane).
pub(crate) fn applies(session: &Session<'_>, name: CheckName) -> bool {
    NATIVE_CHECKS.contains(&name)
        && !session.members.is_empty()
        && session.members.iter().all(|m| m.info.spans_nodes)
}

/// Gives the collective order of every member of each group (ranks in group order)
/// the group's token and the member's ranks. `Err` carries the check's result when a
/// member was lost, time ran out, or a token could not be made.
pub(crate) fn attach(
    context: &mut CheckContext<'_, '_>,
    name: CheckName,
    groups: &[Vec<u32>],
    orders: &mut [(u32, Directive)],
) -> Result<(), Box<CheckResult>> {
    let (_, due) = context.budget();
    let asks = groups
        .iter()
        .filter_map(|group| group.first().map(|&first| (first, Directive::GroupToken)))
        .collect();
    let answers = context.session.ask(asks, due);
    context.session.record_secondary(&answers, |_| None);
    if !answers.missing.is_empty() {
        return Err(Box::new(context.interrupted(name, answers.timed_out)));
    }
    for group in groups {
        let Some(&first) = group.first() else {
            continue;
        };
        let token = match answers.replies.get(&first) {
            Some(Reply::GroupToken {
                token: Some(token), ..
            }) => token.clone(),
            other => {
                let why = match other {
                    Some(Reply::GroupToken {
                        error: Some(error), ..
                    }) => error.clone(),
                    other => format!("it answered `{other:?}`"),
                };
                return Err(Box::new(CheckResult::without_work(
                    name,
                    CheckStatus::Failed,
                    format!(
                        "{} could not make the token of a collective across nodes: {why}",
                        context.session.node_name(first)
                    ),
                )));
            }
        };
        let devices: Vec<usize> = group
            .iter()
            .map(|&rank| {
                context
                    .session
                    .member(rank)
                    .map_or(0, |m| m.info.devices.len())
            })
            .collect();
        for (place, native) in places(&token, &devices).into_iter().enumerate() {
            let rank = group[place];
            for (to, directive) in orders.iter_mut() {
                if let (true, Directive::Collective(order)) = (*to == rank, directive) {
                    order.native = Some(native.clone());
                }
            }
        }
    }
    Ok(())
}

/// Each member's place, in group order: its devices are consecutive ranks.
pub(crate) fn places(token: &str, devices: &[usize]) -> Vec<NativeGroup> {
    let world = devices.iter().sum();
    let mut first_rank = 0;
    devices
        .iter()
        .map(|&count| {
            let place = NativeGroup {
                token: token.to_owned(),
                world,
                first_rank,
            };
            first_rank += count;
            place
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_take_consecutive_ranks_in_group_order() {
        let places = places("ab", &[8, 4, 8]);
        let firsts: Vec<usize> = places.iter().map(|p| p.first_rank).collect();
        assert_eq!(firsts, [0, 8, 12]);
        assert!(places.iter().all(|p| p.world == 20 && p.token == "ab"));
    }
}
