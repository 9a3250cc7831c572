//! The check catalog: every check gpuvet knows, by the names PAI-EAS uses, and the
//! checks gpuvet adds beyond PAI's (`inventory_consistency`).
//!
//! The names are API. Users write them in `micro_benchmarks`, and reports, events and
//! the store carry them, so they never change once published.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::results::Lane;

/// A pre-start (`sanity_check`) check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CheckName {
    GemmFlops,
    AllReduce1,
    AllReduce2,
    KernelLaunch,
    AllReduce,
    AllToAll2,
    AllGather2,
    AllGather,
    MultiAllReduce2,
    MultiAllReduce,
    PytorchGloo2,
    NetworkConnectivity,
    CompCommOverlap,
    InventoryConsistency,
}

/// What a check runs over, which decides whether it can exist in a given group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Each GPU on its own.
    EachDevice,
    /// The GPUs of one node together; needs at least two devices.
    EachNode,
    /// Two nodes at a time; needs at least two nodes.
    NodePairs,
    /// Every GPU of the group; needs at least two devices in all.
    WholeGroup,
    /// Pairs across the whole group: every pair in a small group, about 2·log2 N per node
    /// in a large one; needs at least two nodes.
    AllNodePairs,
    /// Every node's inventory, compared with the others' and with the config; runs in
    /// any group (a single node is compared with the config).
    AllNodes,
}

/// Whether a larger value of a metric is better or worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Direction {
    HigherIsBetter,
    LowerIsBetter,
}

/// The headline metric of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MetricSpec {
    pub name: &'static str,
    pub unit: &'static str,
    pub direction: Direction,
    /// Whether a value of zero means that no work was done (0 TFLOPS, 0 GB/s): the
    /// entity is then faulty. A slowdown of 0 % or 0 mismatches is the best value.
    pub zero_means_no_work: bool,
}

/// Everything the catalog knows about one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckSpec {
    pub name: CheckName,
    pub scope: Scope,
    pub description: &'static str,
    pub metric: MetricSpec,
    /// PAI's own time estimate for the check, in seconds; `None` for a check beyond
    /// PAI's catalog.
    pub pai_estimate_secs: Option<u32>,
    /// The team that owns a problem this check finds.
    pub lane: Lane,
}

const TFLOPS: MetricSpec = MetricSpec {
    name: "tflops",
    unit: "TFLOPS",
    direction: Direction::HigherIsBetter,
    zero_means_no_work: true,
};
const LAUNCH_US: MetricSpec = MetricSpec {
    name: "launch_latency",
    unit: "us",
    direction: Direction::LowerIsBetter,
    zero_means_no_work: true,
};
const BUSBW: MetricSpec = MetricSpec {
    name: "busbw",
    unit: "GB/s",
    direction: Direction::HigherIsBetter,
    zero_means_no_work: true,
};
const RAIL_BUSBW: MetricSpec = MetricSpec {
    name: "rail_busbw",
    unit: "GB/s",
    direction: Direction::HigherIsBetter,
    zero_means_no_work: true,
};
const GLOO_BW: MetricSpec = MetricSpec {
    name: "bandwidth",
    unit: "GB/s",
    direction: Direction::HigherIsBetter,
    zero_means_no_work: true,
};
const SUCCESS_RATE: MetricSpec = MetricSpec {
    name: "success_rate",
    unit: "%",
    direction: Direction::HigherIsBetter,
    zero_means_no_work: true,
};
const SLOWDOWN: MetricSpec = MetricSpec {
    name: "slowdown",
    unit: "%",
    direction: Direction::LowerIsBetter,
    zero_means_no_work: false,
};
const MISMATCHES: MetricSpec = MetricSpec {
    name: "mismatches",
    unit: "facts",
    direction: Direction::LowerIsBetter,
    zero_means_no_work: false,
};

/// The whole catalog: PAI's checks in the order of its sample config, then gpuvet's own.
pub const CATALOG: [CheckSpec; 14] = [
    spec(
        CheckName::GemmFlops,
        Scope::EachDevice,
        "dense GEMM throughput with a correctness sample",
        TFLOPS,
        60,
        Lane::Host,
    ),
    spec(
        CheckName::AllReduce1,
        Scope::EachNode,
        "all-reduce across the GPUs of each node",
        BUSBW,
        300,
        Lane::Host,
    ),
    spec(
        CheckName::AllReduce2,
        Scope::NodePairs,
        "all-reduce across the GPUs of two nodes",
        BUSBW,
        300,
        Lane::Network,
    ),
    spec(
        CheckName::KernelLaunch,
        Scope::EachDevice,
        "empty-kernel launch latency",
        LAUNCH_US,
        60,
        Lane::Host,
    ),
    spec(
        CheckName::AllReduce,
        Scope::WholeGroup,
        "all-reduce across every GPU of the group",
        BUSBW,
        300,
        Lane::Network,
    ),
    spec(
        CheckName::AllToAll2,
        Scope::NodePairs,
        "all-to-all across two nodes",
        BUSBW,
        300,
        Lane::Network,
    ),
    spec(
        CheckName::AllGather2,
        Scope::NodePairs,
        "all-gather across two nodes",
        BUSBW,
        300,
        Lane::Network,
    ),
    spec(
        CheckName::AllGather,
        Scope::WholeGroup,
        "all-gather across every GPU of the group",
        BUSBW,
        300,
        Lane::Network,
    ),
    spec(
        CheckName::MultiAllReduce2,
        Scope::NodePairs,
        "concurrent all-reduces, one per rail, across two nodes",
        RAIL_BUSBW,
        300,
        Lane::Network,
    ),
    spec(
        CheckName::MultiAllReduce,
        Scope::WholeGroup,
        "concurrent all-reduces, one per rail, across the group",
        RAIL_BUSBW,
        300,
        Lane::Network,
    ),
    spec(
        CheckName::PytorchGloo2,
        Scope::NodePairs,
        "host-network collective through PyTorch Gloo (or the built-in TCP collective)",
        GLOO_BW,
        60,
        Lane::Network,
    ),
    spec(
        CheckName::NetworkConnectivity,
        Scope::AllNodePairs,
        "TCP reachability and round-trip time between nodes: every pair up to 64 nodes, \
         about 2·log2 N partners per node above",
        SUCCESS_RATE,
        120,
        Lane::Network,
    ),
    spec(
        CheckName::CompCommOverlap,
        Scope::EachNode,
        "GEMM and all-reduce alone, then overlapped; the slowdown of each",
        SLOWDOWN,
        60,
        Lane::Host,
    ),
    CheckSpec {
        name: CheckName::InventoryConsistency,
        scope: Scope::AllNodes,
        description: "GPU count, model, driver, CUDA and NCCL versions and NVLink layout agree \
                      across the nodes and with the config",
        metric: MISMATCHES,
        pai_estimate_secs: None,
        lane: Lane::Platform,
    },
];

const fn spec(
    name: CheckName,
    scope: Scope,
    description: &'static str,
    metric: MetricSpec,
    pai_estimate_secs: u32,
    lane: Lane,
) -> CheckSpec {
    CheckSpec {
        name,
        scope,
        description,
        metric,
        pai_estimate_secs: Some(pai_estimate_secs),
        lane,
    }
}

/// PAI's default set, used when `micro_benchmarks` is absent.
pub const DEFAULT_CHECKS: [CheckName; 3] = [
    CheckName::GemmFlops,
    CheckName::AllReduce1,
    CheckName::AllReduce2,
];

/// The only runtime check PAI offers.
pub const RUNTIME_CHECK_C4D: &str = "c4d";

impl CheckName {
    pub const ALL: [CheckName; CATALOG.len()] = {
        let mut all = [CheckName::GemmFlops; CATALOG.len()];
        let mut i = 0;
        while i < CATALOG.len() {
            all[i] = CATALOG[i].name;
            i += 1;
        }
        all
    };

    pub fn as_str(self) -> &'static str {
        match self {
            CheckName::GemmFlops => "gemm_flops",
            CheckName::KernelLaunch => "kernel_launch",
            CheckName::AllReduce1 => "all_reduce_1",
            CheckName::AllReduce2 => "all_reduce_2",
            CheckName::AllReduce => "all_reduce",
            CheckName::AllToAll2 => "all_to_all_2",
            CheckName::AllGather2 => "all_gather_2",
            CheckName::AllGather => "all_gather",
            CheckName::MultiAllReduce2 => "multi_all_reduce_2",
            CheckName::MultiAllReduce => "multi_all_reduce",
            CheckName::PytorchGloo2 => "pytorch_gloo_2",
            CheckName::NetworkConnectivity => "network_connectivity",
            CheckName::CompCommOverlap => "comp_comm_overlap",
            CheckName::InventoryConsistency => "inventory_consistency",
        }
    }

    pub fn spec(self) -> &'static CheckSpec {
        CATALOG
            .iter()
            .find(|spec| spec.name == self)
            .expect("every check name has a catalog entry")
    }
}

impl Serialize for CheckName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CheckName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse()
            .map_err(|_| serde::de::Error::custom(format!("unknown check `{name}`")))
    }
}

/// A check's name is a string from the catalog.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for CheckName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(CATALOG.iter().map(|spec| spec.name.as_str())))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for CheckName {}

impl fmt::Display for CheckName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not in the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCheck {
    pub name: String,
    /// The closest catalog name, when one is close enough to be a likely typo.
    pub suggestion: Option<CheckName>,
}

impl FromStr for CheckName {
    type Err = UnknownCheck;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CheckName::ALL
            .into_iter()
            .find(|name| name.as_str() == s)
            .ok_or_else(|| UnknownCheck {
                name: s.to_owned(),
                suggestion: closest(s, CheckName::ALL.into_iter().map(|n| (n.as_str(), n))),
            })
    }
}

/// The candidate nearest to `input` by edit distance, if it is plausibly a typo of it.
pub fn closest<T>(
    input: &str,
    candidates: impl IntoIterator<Item = (&'static str, T)>,
) -> Option<T> {
    let input = input.to_ascii_lowercase();
    let allowed = (input.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|(name, value)| (edit_distance(&input, name), value))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, value)| value)
}

/// Levenshtein distance over chars.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_names_round_trip_and_are_unique() {
        for name in CheckName::ALL {
            assert_eq!(name.as_str().parse::<CheckName>(), Ok(name));
            assert_eq!(name.spec().name, name);
            let json = serde_json::to_string(&name).unwrap();
            assert_eq!(json, format!("\"{name}\""));
        }
        let mut names: Vec<_> = CheckName::ALL.iter().map(|n| n.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 14);
        let pai = CATALOG.iter().filter(|s| s.pai_estimate_secs.is_some());
        assert_eq!(pai.count(), 13, "PAI's catalog has 13 checks");
    }

    #[test]
    fn pai_estimates_add_up_to_the_documented_totals() {
        let default: u32 = DEFAULT_CHECKS
            .iter()
            .filter_map(|n| n.spec().pai_estimate_secs)
            .sum();
        assert_eq!(default, 11 * 60);
        let all: u32 = CATALOG.iter().filter_map(|s| s.pai_estimate_secs).sum();
        // 8 collectives at 5 min, 3 checks at 1 min, connectivity at 2 min.
        assert_eq!(all, 46 * 60);
    }

    #[test]
    fn typos_get_a_suggestion_and_nonsense_does_not() {
        let err = "gemm_flop".parse::<CheckName>().unwrap_err();
        assert_eq!(err.suggestion, Some(CheckName::GemmFlops));
        let err = "allreduce_2".parse::<CheckName>().unwrap_err();
        assert_eq!(err.suggestion, Some(CheckName::AllReduce2));
        let err = "banana".parse::<CheckName>().unwrap_err();
        assert_eq!(err.suggestion, None);
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
