//! A flight-recorder analysis as a job's event: the finding that started it, which
//! gpuvet node each rank ran on, and the collectives around it with their times on
//! each rank's clock, so the group's timeline can place them (`gpuvet fr --job`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use gpuvet_model::events::{EventKind, NewEvent};
use gpuvet_model::record::{FLIGHT_RECORDER_SOURCE, FrCollective};
use gpuvet_model::runtime::RuntimeCheck;

use super::{EntryState, FrDump, FrReport};

/// The most collectives of one rank an event carries: the last ones, where a hang is.
pub const COLLECTIVES_PER_RANK: usize = 8;
/// The most collectives of all ranks an event carries.
pub const MAX_COLLECTIVES: usize = 4096;

/// Which gpuvet node each torch rank ran on: `ranks_per_node` consecutive ranks a
/// node, in the group's rank order (torchrun's and LWS's numbering).
pub fn rank_nodes(ranks: &[u32], nodes: &[String], ranks_per_node: u32) -> BTreeMap<u32, String> {
    if ranks_per_node == 0 {
        return BTreeMap::new();
    }
    ranks
        .iter()
        .filter_map(|&rank| {
            let node = nodes.get((rank / ranks_per_node) as usize)?;
            Some((rank, node.clone()))
        })
        .collect()
}

/// The event that records `report` for a job, `None` when the dumps show no problem.
/// `time_ms` is when the stuck collective began, when the dumps say and it is not
/// before `not_before_ms` (the attempt's start); else `now_ms`.
pub fn event_of(
    report: &FrReport,
    dumps: &[FrDump],
    nodes: &BTreeMap<u32, String>,
    not_before_ms: u64,
    now_ms: u64,
) -> Option<(Option<String>, NewEvent)> {
    let first = report.first_error.as_ref()?;
    let culprit = first
        .ranks
        .first()
        .and_then(|rank| nodes.get(rank).cloned());
    let began_ms = report
        .groups
        .iter()
        .filter_map(|g| g.first_error.as_ref()?.pending_since_ns)
        .min()
        .map(|ns| u64::try_from(ns.max(0) / 1_000_000).unwrap_or(0))
        .filter(|&ms| ms >= not_before_ms && ms <= now_ms);
    let collectives = collectives(dumps, nodes);
    let details = json!({
        "source": FLIGHT_RECORDER_SOURCE,
        "check": RuntimeCheck::flight_recorder(first.kind),
        "ranks": first.ranks,
        "waiting_ranks": first.waiting_ranks,
        "rank_nodes": nodes,
        "first_error": first,
        "findings": report.findings,
        "notes": report.notes,
        "collectives": collectives,
    });
    let event = NewEvent {
        event_id: gpuvet_model::ids::new_id(),
        time_ms: began_ms.unwrap_or(now_ms),
        kind: EventKind::RuntimeCheckFailed,
        lane: Some(first.lane),
        message: format!("flight recorder: {}", first.message),
        details,
    };
    Some((culprit, event))
}

/// The last collectives of each rank, oldest first, bounded.
fn collectives(dumps: &[FrDump], nodes: &BTreeMap<u32, String>) -> Vec<Value> {
    let per_rank = COLLECTIVES_PER_RANK
        .min(MAX_COLLECTIVES / dumps.len().max(1))
        .max(1);
    let mut out = Vec::new();
    for dump in dumps {
        let start = dump.entries.len().saturating_sub(per_rank);
        for entry in &dump.entries[start..] {
            let collective = FrCollective {
                torch_rank: dump.rank,
                node: nodes.get(&dump.rank).cloned(),
                op: entry.profiling_name.clone(),
                seq: entry.collective_seq_id,
                state: match entry.state {
                    EntryState::Scheduled => "scheduled",
                    EntryState::Started => "started",
                    EntryState::Completed => "completed",
                }
                .to_owned(),
                created_ns: entry.time_created_ns,
                completed_ns: entry.time_discovered_completed_ns,
            };
            out.push(serde_json::to_value(collective).unwrap_or(Value::Null));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_ranks_share_a_node() {
        let nodes = vec!["a".to_owned(), "b".to_owned()];
        let map = rank_nodes(&[0, 1, 2, 3, 4], &nodes, 2);
        assert_eq!(map[&0], "a");
        assert_eq!(map[&1], "a");
        assert_eq!(map[&2], "b");
        assert_eq!(map[&3], "b");
        assert!(!map.contains_key(&4), "no third node");
        assert!(rank_nodes(&[0], &nodes, 0).is_empty());
    }
}
