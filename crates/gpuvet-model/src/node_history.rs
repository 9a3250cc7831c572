//! One node across jobs, as the store reads it and the server, the pages and `gpuvet
//! history` show it: the nodes ranked by failed runs in a window, and one node's
//! history (its runs, each check's figures over time, findings, quarantines), each
//! with its repeat-offender flag ([`crate::offenders`]).

use serde::{Deserialize, Serialize};

use crate::catalog::CheckName;
use crate::events::Event;
use crate::offenders::RepeatOffender;
use crate::overview::StoredRun;
use crate::results::{CheckStatus, Verdict};

/// One node's runs in a window, for the ranking of nodes by failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeFailures {
    pub node: String,
    /// Runs that started in the window, and how they ended: `failed` because of this
    /// node ([`crate::offenders::fails_its_node`]), or, in a group, `failed_by_others`.
    pub runs: u32,
    pub failed: u32,
    pub failed_by_others: u32,
    pub passed: u32,
    pub incomplete: u32,
    /// Unix milliseconds of its latest run in the window, and of its latest failure.
    pub last_run_at_ms: u64,
    pub last_failed_at_ms: Option<u64>,
    /// Set when its latest runs (in or before the window) make it a repeat offender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_offender: Option<RepeatOffender>,
}

/// One check's figure in one run of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckPoint {
    pub run_id: i64,
    pub started_at_ms: u64,
    pub status: CheckStatus,
    /// The median of its entities' values; `None` when it measured nothing.
    pub median: Option<f64>,
}

/// One check's figures on a node over time, the oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckSeries {
    pub check: CheckName,
    pub unit: String,
    pub points: Vec<CheckPoint>,
}

/// One slow or faulty entity a run on the node named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeFinding {
    pub run_id: i64,
    pub job_id: String,
    pub attempt: u32,
    pub started_at_ms: u64,
    pub check: CheckName,
    pub entity: String,
    pub verdict: Verdict,
    pub reason: String,
}

/// Everything kept about one node across jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeHistory {
    pub node: String,
    /// Its latest runs, the newest first.
    pub runs: Vec<StoredRun>,
    /// Each check's figures over those runs, by check name.
    pub checks: Vec<CheckSeries>,
    /// What those runs named on it (one of its GPUs, it, or a link of it), the newest
    /// first.
    pub findings: Vec<NodeFinding>,
    /// Its quarantines (the rebuilds that tainted it) and their lifting
    /// (`NodeUntainted`), the newest first.
    pub quarantines: Vec<Event>,
    /// Set when its latest runs make it a repeat offender under the policy asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_offender: Option<RepeatOffender>,
}
