//! The crate's one error type. Messages are lowercase, name the setting or the peer,
//! and put values in backticks, so the binary can print them as they are.

use std::io;
use std::time::Duration;

use crate::events::MemberState;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A rendezvous flag or variable has a value gpuvet cannot use.
    #[error("{name} is `{value}`; expected {expected}")]
    InvalidSetting {
        /// The flag or variable, already quoted, e.g. "`NODE_RANK`".
        name: String,
        value: String,
        expected: String,
    },

    #[error(
        "rank `{rank}` (from {rank_source}) is out of range for a group of `{nnodes}` \
         node(s) (from {nnodes_source}); ranks run from 0 to {last}{hint}",
        last = nnodes.saturating_sub(1)
    )]
    RankOutOfRange {
        rank: u32,
        nnodes: u32,
        rank_source: String,
        nnodes_source: String,
        hint: String,
    },

    #[error(
        "rank `{rank}` of a group of `{nnodes}` nodes needs the coordinator's address: set \
         `MASTER_ADDR` or `LWS_LEADER_ADDRESS`, pass `--master-addr`, or run under Slurm's \
         `srun` (`SLURM_STEP_NODELIST`)"
    )]
    MissingCoordinatorAddress { rank: u32, nnodes: u32 },

    /// A token too short to keep strangers out; the message never shows it.
    #[error(
        "{name} is {len} byte{plural} long; a group's token needs at least {min} bytes, \
         since anyone who can reach a node could guess a shorter one",
        plural = if *len == 1 { "" } else { "s" }
    )]
    WeakToken {
        name: String,
        len: usize,
        min: usize,
    },

    #[error(
        "a group of `{nnodes}` nodes needs a shared secret: set `GPUVET_TOKEN` (or pass \
         `--token`) to the same value on every node"
    )]
    MissingToken { nnodes: u32 },

    #[error(
        "gpuvet's port `{port}` (from {port_source}) is the app's `MASTER_PORT`; the app \
         needs it, so set `GPUVET_PORT` to another port"
    )]
    PortClash { port: u16, port_source: String },

    #[error("invalid option `{name}`: {reason}")]
    InvalidOption { name: &'static str, reason: String },

    /// What could not be done; the OS's reason is the source, so a chain (or
    /// `with_causes`) prints it once.
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },

    #[error(
        "could not join the coordinator at `{endpoint}` within {} ({attempts} attempt(s)); \
         last error: {last_error}",
        human(*waited)
    )]
    Unreachable {
        endpoint: String,
        waited: Duration,
        attempts: u32,
        last_error: String,
    },

    /// The caller could not say who this agent is once it heard the coordinator (its
    /// data plane would not bind, say); trying again cannot help.
    #[error("cannot introduce this agent to the coordinator")]
    Identity {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    #[error("the coordinator refused this agent: {reason}")]
    Refused { reason: String },

    #[error(
        "protocol version mismatch: this agent speaks `{ours}`, the coordinator `{theirs}`; \
         run the same gpuvet version on every node"
    )]
    ProtocolMismatch { ours: u32, theirs: u32 },

    #[error(
        "the coordinator at `{endpoint}` could not prove that it holds the token: a stray \
         coordinator, or a different `GPUVET_TOKEN` on the coordinator's node"
    )]
    CoordinatorAuthFailed { endpoint: String },

    #[error("frame of {len} bytes exceeds the {max}-byte limit{hint}")]
    FrameTooLarge { len: u64, max: u64, hint: String },

    #[error("malformed frame: {detail}")]
    BadFrame { detail: String },

    #[error("lost the coordinator: {detail}")]
    CoordinatorLost { detail: String },

    #[error(
        "the coordinator has not answered for {}, past this agent's deadline of {}",
        human(*silent_for),
        human(*deadline)
    )]
    CoordinatorUnresponsive {
        silent_for: Duration,
        deadline: Duration,
    },

    #[error("the coordinator aborted the run: {reason}")]
    Aborted { reason: String },

    #[error("the coordinator ended the session: {reason}")]
    SessionClosed { reason: String },

    #[error("rank `{rank}` has not joined the group")]
    NoSuchMember { rank: u32 },

    #[error("rank `{rank}` can no longer be reached: it is {state}")]
    MemberGone { rank: u32, state: MemberState },

    #[error("the coordinator is shut down")]
    ShutDown,

    #[error("cannot encode or decode a payload")]
    Payload(#[from] serde_json::Error),
}

impl ClusterError {
    /// What to do about it, for the binary's `hint:` line, where gpuvet knows.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ClusterError::WeakToken { .. } | ClusterError::MissingToken { .. } => {
                Some(crate::auth::TOKEN_HINT)
            }
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        ClusterError::Io {
            context: context.into(),
            source,
        }
    }
}

/// `0.8s`, `12s`, `3m20s`: durations in messages.
pub(crate) fn human(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 10.0 {
        format!("{secs:.1}s")
    } else if secs < 60.0 {
        format!("{secs:.0}s")
    } else {
        let whole = duration.as_secs();
        match (whole / 60, whole % 60) {
            (m, 0) => format!("{m}m"),
            (m, s) => format!("{m}m{s}s"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human(Duration::from_millis(800)), "0.8s");
        assert_eq!(human(Duration::from_secs(12)), "12s");
        assert_eq!(human(Duration::from_secs(200)), "3m20s");
        assert_eq!(human(Duration::from_secs(120)), "2m");
    }
}
