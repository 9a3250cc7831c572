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
    /// The Slurm job ended on this node (`gpuvet epilog`, Slurm's `Epilog`): also a job
    /// that was cancelled, or whose app gpuvet never started.
    JobEnded,
}

impl EventKind {
    pub const ALL: [EventKind; 9] = [
        EventKind::SanityCheckSucceeded,
        EventKind::SanityCheckFailed,
        EventKind::InstanceStarted,
        EventKind::InstanceStartupFailed,
        EventKind::InstanceRebuildRequested,
        EventKind::RuntimeCheckFailed,
        EventKind::InstanceExited,
        EventKind::NodeUntainted,
        EventKind::JobEnded,
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
            EventKind::JobEnded => "JobEnded",
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

impl NewEvent {
    /// Removes secrets from the message and details again, by [`crate::redact`]'s
    /// rules and `known` secrets: what a receiver does with an event it did not make.
    /// Redacting twice changes nothing.
    pub fn redact(&mut self, known: &[&str]) {
        self.message = crate::redact::redact_text(&self.message, known).into_owned();
        crate::redact::redact_json(&mut self.details, known);
    }
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
    fn a_received_event_and_context_are_redacted_again_and_twice_is_once() {
        let mut event = NewEvent {
            event_id: "e".into(),
            time_ms: 1,
            kind: EventKind::InstanceStarted,
            lane: None,
            message: "curl -u admin:hunter2-secret https://x".into(),
            details: serde_json::json!({ "command": ["mysql", "-phunter2-secret"], "n": 3 }),
        };
        event.redact(&["known-secret-value"]);
        assert_eq!(event.message, "curl -u admin:[redacted] https://x");
        assert_eq!(
            event.details,
            serde_json::json!({ "command": ["mysql", "-p[redacted]"], "n": 3 })
        );
        let once = event.clone();
        event.redact(&["known-secret-value"]);
        assert_eq!(event, once);

        let mut context = crate::results::RunContext {
            config_file: Some("/etc/a.json".into()),
            config: serde_json::json!({ "token": "abc", "x": "known-secret-value" }),
            environment: [("HF_TOKEN".to_owned(), "hf_x".to_owned())].into(),
            slurm: None,
        };
        context.redact(&["known-secret-value"]);
        assert_eq!(
            context.config,
            serde_json::json!({ "token": "[redacted]", "x": "[redacted]" })
        );
        assert_eq!(context.environment["HF_TOKEN"], "[redacted]");
        assert_eq!(context.config_file.as_deref(), Some("/etc/a.json"));
        let once = context.clone();
        context.redact(&["known-secret-value"]);
        assert_eq!(context, once);
    }

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
