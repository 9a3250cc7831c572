//! What is kept of one attempt: what the coordinator records for the group's timeline
//! ([`RecordedTimeline`]: each member's clock against its own, and when each member
//! began and ended its part of each check), and everything the store, a bundle or the
//! server holds of the attempt ([`JobRecord`]). The analysis crate assembles the
//! timeline and the explanation from these.

use serde::{Deserialize, Serialize};

use crate::catalog::CheckName;
use crate::events::Event;
use crate::results::{CheckStatus, RunReport};

/// What the coordinator records for the timeline of a group run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordedTimeline {
    /// The coordinator's node: its clock is the timeline's.
    pub coordinator: String,
    /// Every rank, joined or not, by rank.
    pub members: Vec<MemberRecord>,
    /// Each check's window on the coordinator's clock, in the order run.
    pub checks: Vec<CheckWindow>,
}

/// One member as the coordinator saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberRecord {
    pub rank: u32,
    pub node: String,
    /// `None` when never measured (the rank never joined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<MemberClock>,
    /// Its part of each check, on its own clock.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<CheckSpan>,
    /// Its devices as it reported them when it joined: its inventory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<crate::results::DeviceInfo>,
}

/// How a member's clock relates to the coordinator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberClock {
    /// Member clock minus coordinator clock, in nanoseconds.
    pub offset_ns: i64,
    /// How far the offset may be off: half the round trip of its best ping.
    pub uncertainty_ns: i64,
    pub samples: u32,
}

/// When a member began and ended its part of one check (Unix ms, its own clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckSpan {
    pub check: CheckName,
    pub began_ms: u64,
    pub ended_ms: u64,
}

/// One check across the group, on the coordinator's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckWindow {
    pub check: CheckName,
    pub began_ms: u64,
    pub ended_ms: u64,
    pub status: CheckStatus,
}

/// Everything kept about one attempt of a job: what the timeline, a bundle and
/// `explain` are made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job_id: String,
    pub attempt: u32,
    /// Every node's report of this attempt that the store holds.
    pub reports: Vec<RunReport>,
    /// Every event of this attempt that the store holds, in time order.
    pub events: Vec<Event>,
}

impl JobRecord {
    /// The report that speaks for the group: the coordinator's (it carries the
    /// recorded timeline), else any group report, else the first.
    pub fn group_report(&self) -> Option<&RunReport> {
        let recorded = |r: &&RunReport| r.group.as_ref().is_some_and(|g| g.timeline.is_some());
        let grouped = |r: &&RunReport| r.group.as_ref().is_some_and(|g| g.node_count() > 0);
        self.reports
            .iter()
            .find(recorded)
            .or_else(|| self.reports.iter().find(grouped))
            .or_else(|| self.reports.first())
    }
}

/// Details of an event made from a flight-recorder analysis (`gpuvet fr --job`) carry
/// this `source`.
pub const FLIGHT_RECORDER_SOURCE: &str = "flight_recorder";

/// One collective of one rank, as `gpuvet fr --job` records it in its event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrCollective {
    pub torch_rank: u32,
    /// The gpuvet node the rank ran on, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub op: String,
    pub seq: u64,
    /// `scheduled`, `started` or `completed`.
    pub state: String,
    /// Unix ns on the rank's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_ns: Option<i64>,
}
