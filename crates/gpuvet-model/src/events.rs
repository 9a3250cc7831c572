//! Deployment events: what happened to an instance, in PAI's vocabulary.
//!
//! Event kinds are API (PAI's `SanityCheckSucceeded` and `SanityCheckFailed`, plus
//! gpuvet's instance lifecycle). Every event carries the job, the attempt and the node,
//! so a retry never mixes with the previous try.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::results::Lane;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventKind {
    SanityCheckSucceeded,
    SanityCheckFailed,
    InstanceStarted,
    InstanceStartupFailed,
    InstanceRebuildRequested,
    RuntimeCheckFailed,
    InstanceExited,
    /// gpuvet's quarantine of a node was lifted (`gpuvet untaint`): proven by its runs
    /// since, or forced, with who and why.
    NodeUntainted,
}

impl EventKind {
    pub const ALL: [EventKind; 8] = [
        EventKind::SanityCheckSucceeded,
        EventKind::SanityCheckFailed,
        EventKind::InstanceStarted,
        EventKind::InstanceStartupFailed,
        EventKind::InstanceRebuildRequested,
        EventKind::RuntimeCheckFailed,
        EventKind::InstanceExited,
        EventKind::NodeUntainted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SanityCheckSucceeded => "SanityCheckSucceeded",
            EventKind::SanityCheckFailed => "SanityCheckFailed",
            EventKind::InstanceStarted => "InstanceStarted",
            EventKind::InstanceStartupFailed => "InstanceStartupFailed",
            EventKind::InstanceRebuildRequested => "InstanceRebuildRequested",
            EventKind::RuntimeCheckFailed => "RuntimeCheckFailed",
            EventKind::InstanceExited => "InstanceExited",
            EventKind::NodeUntainted => "NodeUntainted",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "unknown event type `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Who and what an event is about: one attempt of one instance of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    pub job_id: String,
    /// Numbered from 1; each new run of the same job gets the next number.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub attempt: u32,
    pub node: String,
    pub instance: String,
}

/// An event before the store gives it an id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewEvent {
    /// The event's own id ([`crate::ids::new_id`]): storing or sending it twice stores
    /// it once. Empty in events made before ids existed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event_id: String,
    /// Unix time in milliseconds.
    pub time_ms: u64,
    pub kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lane: Option<Lane>,
    pub message: String,
    pub details: serde_json::Value,
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub id: i64,
    #[serde(flatten)]
    pub attempt: Attempt,
    #[serde(flatten)]
    pub event: NewEvent,
    /// How many times it happened: its repeats ([`crate::event_fold`]) are counted
    /// here, not stored apart. 1 for an event never repeated.
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub count: u64,
    /// Unix milliseconds of its last repeat; absent for an event never repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_ms: Option<u64>,
}

impl Event {
    /// `×5, last …` for an event counted more than once ([`crate::event_fold::repeats_note`]).
    pub fn repeats_note(&self) -> Option<String> {
        crate::event_fold::repeats_note(self.count, self.last_seen_ms)
    }
}

fn one() -> u64 {
    1
}

/// An attempt as it begins: what a node sends to a central `gpuvet serve`, so that the
/// server shows the instance while its checks still run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptStart {
    #[serde(flatten)]
    pub attempt: Attempt,
    /// Unix milliseconds when the attempt began.
    pub started_at_ms: u64,
}

/// An event with the attempt it belongs to, before a store gives it an id: what a node
/// sends to a central `gpuvet serve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventRecord {
    #[serde(flatten)]
    pub attempt: Attempt,
    #[serde(flatten)]
    pub event: NewEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_by_name() {
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>(), Ok(kind));
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{kind}\""));
        }
        assert!(
            "Started"
                .parse::<EventKind>()
                .unwrap_err()
                .contains("SanityCheckFailed")
        );
    }
}
