//! What to run: the checks, the deadline, the thresholds, and the shape of the group.

use std::collections::BTreeMap;
use std::time::Duration;

use gpuvet_backend::WorkSpec;
use gpuvet_model::analysis::{Limit, Tolerances};
use gpuvet_model::catalog::{CheckName, Scope};
use gpuvet_model::events::Attempt;
use gpuvet_model::inventory::ExpectedInventory;

use crate::WorkerLauncher;

/// Everything the runner needs to know about one run on one node.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub attempt: Attempt,
    /// Number of nodes in the group (1 until the coordinator exists).
    pub nodes: usize,
    pub checks: Vec<CheckName>,
    /// For all checks together.
    pub timeout: Duration,
    /// Allowed deficit against the peer median, per check.
    pub tolerance: Tolerances,
    pub baselines: BTreeMap<CheckName, Limit>,
    /// What `inventory_consistency` compares this node with.
    pub expected_inventory: ExpectedInventory,
    pub work: WorkSpec,
    /// Unix time in milliseconds, for the report.
    pub started_at_ms: u64,
    /// The least time a device may take before it is named hung while its peers have
    /// finished; normally [`HANG_GRACE`](crate::HANG_GRACE).
    pub hang_grace: Duration,
    /// How to start the worker process each check's device work runs in; `None` runs
    /// it on threads of this process, where a hung unit can only be abandoned (for
    /// tests, and simulations that need no isolation).
    pub worker: Option<WorkerLauncher>,
}

/// Whether the runner itself runs `check` as a collective among this node's devices:
/// a whole-group collective when the group is this one node.
pub fn runs_among_local_devices(check: CheckName, nodes: usize) -> bool {
    nodes == 1 && matches!(check, CheckName::AllReduce | CheckName::AllGather)
}

/// Why a check cannot exist in a group of this shape, or `None` when it can.
pub fn scope_skip_reason(
    check: CheckName,
    nodes: usize,
    devices_per_node: usize,
) -> Option<String> {
    let plural = |n: usize, word: &str| {
        if n == 1 {
            format!("{n} {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    match check.spec().scope {
        Scope::NodePairs | Scope::AllNodePairs if nodes < 2 => Some(format!(
            "needs at least 2 nodes; this group has {}",
            plural(nodes, "node")
        )),
        Scope::EachNode if devices_per_node < 2 => Some(format!(
            "needs at least 2 devices on a node; this node has {}",
            plural(devices_per_node, "device")
        )),
        Scope::WholeGroup if nodes * devices_per_node < 2 => Some(format!(
            "needs at least 2 devices in the group; it has {}",
            plural(nodes * devices_per_node, "device")
        )),
        // A rail is GPU i of every node; on one node each rail is a single GPU, and
        // `all_reduce` already covers the node's GPUs together.
        Scope::WholeGroup if nodes < 2 && check == CheckName::MultiAllReduce => Some(
            "runs one all-reduce per rail between nodes (GPU i of every node); a group of \
             1 node has no rail between nodes"
                .to_owned(),
        ),
        Scope::EachDevice if devices_per_node == 0 => Some("this node has no devices".to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_that_cannot_exist_are_named() {
        assert_eq!(
            scope_skip_reason(CheckName::AllReduce2, 1, 8).as_deref(),
            Some("needs at least 2 nodes; this group has 1 node")
        );
        assert_eq!(
            scope_skip_reason(CheckName::NetworkConnectivity, 1, 8).as_deref(),
            Some("needs at least 2 nodes; this group has 1 node")
        );
        assert_eq!(
            scope_skip_reason(CheckName::AllReduce1, 1, 1).as_deref(),
            Some("needs at least 2 devices on a node; this node has 1 device")
        );
        assert_eq!(
            scope_skip_reason(CheckName::AllReduce, 1, 1).as_deref(),
            Some("needs at least 2 devices in the group; it has 1 device")
        );
        assert_eq!(
            scope_skip_reason(CheckName::MultiAllReduce, 1, 8).as_deref(),
            Some(
                "runs one all-reduce per rail between nodes (GPU i of every node); a group \
                 of 1 node has no rail between nodes"
            )
        );
        assert_eq!(
            scope_skip_reason(CheckName::GemmFlops, 1, 0).as_deref(),
            Some("this node has no devices")
        );
    }

    #[test]
    fn scopes_that_exist_are_not_skipped() {
        assert_eq!(scope_skip_reason(CheckName::AllReduce2, 2, 1), None);
        assert_eq!(scope_skip_reason(CheckName::AllReduce1, 1, 2), None);
        assert_eq!(scope_skip_reason(CheckName::AllReduce, 2, 1), None);
        assert_eq!(scope_skip_reason(CheckName::AllReduce, 1, 2), None);
        assert_eq!(scope_skip_reason(CheckName::AllGather, 1, 2), None);
        assert_eq!(scope_skip_reason(CheckName::MultiAllReduce, 2, 1), None);
        assert_eq!(scope_skip_reason(CheckName::GemmFlops, 1, 1), None);
        assert_eq!(scope_skip_reason(CheckName::CompCommOverlap, 1, 2), None);
    }
}
