//! What the coordinator tells the binary: members joining, falling silent, crashing or
//! leaving; connections it refused and why; phases; and the agents' reports.
//!
//! A library does not print: the binary turns these into progress lines, report
//! entries and stored events. Times are Unix milliseconds on the coordinator's clock.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::clock::ClockOffset;
use crate::error::human;
use crate::protocol::{Body, RosterEntry};

/// Where a member stands, as the coordinator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Heartbeats arrive within the deadline.
    Alive,
    /// Connected, but silent past the heartbeat deadline: hung, stopped or cut off.
    Unresponsive,
    /// The connection closed or broke without a goodbye.
    Crashed,
    /// Said goodbye.
    Left,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Alive => "alive",
            MemberState::Unresponsive => "unresponsive",
            MemberState::Crashed => "crashed",
            MemberState::Left => "left",
        }
    }

    /// Whether messages can still be sent to the member.
    pub fn is_connected(self) -> bool {
        matches!(self, MemberState::Alive | MemberState::Unresponsive)
    }
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A member as it introduced itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberInfo {
    pub rank: u32,
    pub node: String,
    /// The address its control connection comes from.
    pub peer_addr: SocketAddr,
    /// Where its data plane listens, with an unspecified IP replaced by `peer_addr`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_addr: Option<SocketAddr>,
    /// The coordinator's address its control connection reached: how the member's host
    /// reaches the coordinator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_addr: Option<SocketAddr>,
    pub gpuvet_version: String,
    /// What the agent sent in its hello's `info`, as text.
    pub info: Body,
    pub joined_ms: u64,
    /// Its clock relative to the coordinator's.
    pub clock: ClockOffset,
}

impl MemberInfo {
    pub fn roster_entry(&self) -> RosterEntry {
        RosterEntry {
            rank: self.rank,
            node: self.node.clone(),
            data_addr: self.data_addr,
        }
    }
}

/// A member now: who it is, its state, when it was last heard from, and its phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberStatus {
    #[serde(flatten)]
    pub info: MemberInfo,
    pub state: MemberState,
    pub last_seen_ms: u64,
    /// The phase of its last heartbeat; empty before the first one.
    pub phase: String,
    /// When it entered that phase, on the coordinator's clock.
    pub phase_since_ms: u64,
}

/// Something that happened to one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberEvent {
    pub rank: u32,
    /// `None` only for a rank that never joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// When the coordinator noticed.
    pub time_ms: u64,
    #[serde(flatten)]
    pub kind: MemberEventKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MemberEventKind {
    Joined,
    /// The rendezvous deadline passed without this rank.
    NeverJoined {
        waited_ms: u64,
    },
    /// Silent past the heartbeat deadline; `last_seen_ms` is when it stopped answering.
    Unresponsive {
        last_seen_ms: u64,
        silent_for_ms: u64,
        last_phase: String,
    },
    /// Answering again after being declared unresponsive.
    Recovered {
        silent_for_ms: u64,
    },
    /// The connection closed or broke without a goodbye.
    Crashed {
        detail: String,
        last_phase: String,
    },
    Left {
        reason: String,
    },
}

impl MemberEvent {
    /// One line for people, e.g. "rank 2 (node-2) is unresponsive: silent for 3.1s in
    /// phase `all_reduce_2 step 3`".
    pub fn describe(&self) -> String {
        let who = match &self.node {
            Some(node) => format!("rank {} ({node})", self.rank),
            None => format!("rank {}", self.rank),
        };
        let ms = |ms: u64| human(std::time::Duration::from_millis(ms));
        let in_phase = |phase: &str| {
            if phase.is_empty() {
                String::new()
            } else {
                format!(" in phase `{phase}`")
            }
        };
        match &self.kind {
            MemberEventKind::Joined => format!("{who} joined"),
            MemberEventKind::NeverJoined { waited_ms } => {
                format!("{who} never joined (waited {})", ms(*waited_ms))
            }
            MemberEventKind::Unresponsive {
                silent_for_ms,
                last_phase,
                ..
            } => {
                format!(
                    "{who} is unresponsive: silent for {}{}",
                    ms(*silent_for_ms),
                    in_phase(last_phase)
                )
            }
            MemberEventKind::Recovered { silent_for_ms } => {
                format!(
                    "{who} answers again after {} of silence",
                    ms(*silent_for_ms)
                )
            }
            MemberEventKind::Crashed { detail, last_phase } => {
                format!("{who} crashed{}: {detail}", in_phase(last_phase))
            }
            MemberEventKind::Left { reason } => format!("{who} left: {reason}"),
        }
    }
}

/// Why the coordinator turned a connection away.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    VersionMismatch {
        ours: u32,
        theirs: u32,
    },
    /// The proof does not match: a different `GPUVET_TOKEN`.
    BadToken,
    WrongJob {
        expected: String,
        got: String,
    },
    RankOutOfRange {
        rank: u32,
        nnodes: u32,
    },
    GroupSizeMismatch {
        theirs: u32,
        ours: u32,
    },
    DuplicateRank {
        rank: u32,
        holder: String,
    },
    /// The rendezvous was closed without this rank; the group runs without it.
    LateJoin {
        rank: u32,
    },
    HandshakeTimeout {
        waited_ms: u64,
    },
    /// Not a gpuvet frame, too large, or not the message the handshake expects.
    BadFrame {
        detail: String,
    },
    /// The peer closed the connection during the handshake.
    Disconnected {
        detail: String,
    },
    /// The coordinator could not serve the connection (out of threads, shutting down).
    Unavailable {
        detail: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::VersionMismatch { ours, theirs } => write!(
                f,
                "protocol version mismatch: the coordinator speaks `{ours}`, the agent `{theirs}`; run the same gpuvet version on every node"
            ),
            Refusal::BadToken => f.write_str(
                "authentication failed: the agent's proof does not match; its `GPUVET_TOKEN` differs from the coordinator's",
            ),
            Refusal::WrongJob { expected, got } => {
                write!(f, "wrong job: the agent belongs to job `{got}`, this coordinator runs job `{expected}`")
            }
            Refusal::RankOutOfRange { rank, nnodes } => write!(
                f,
                "rank `{rank}` is out of range for a group of `{nnodes}` node(s); ranks run from 0 to {}",
                nnodes.saturating_sub(1)
            ),
            Refusal::GroupSizeMismatch { theirs, ours } => write!(
                f,
                "group size mismatch: the agent was told `{theirs}` node(s), the coordinator expects `{ours}`; set `NNODES` alike on every node"
            ),
            Refusal::DuplicateRank { rank, holder } => {
                write!(f, "rank `{rank}` is already taken by node `{holder}`; every node needs its own rank")
            }
            Refusal::LateJoin { rank } => {
                write!(f, "rank `{rank}` arrived after the rendezvous deadline; the group went on without it")
            }
            Refusal::HandshakeTimeout { waited_ms } => write!(
                f,
                "handshake timed out: the client said nothing valid within {}",
                human(std::time::Duration::from_millis(*waited_ms))
            ),
            Refusal::BadFrame { detail } => write!(f, "bad frame: {detail}"),
            Refusal::Disconnected { detail } => write!(f, "the client went away during the handshake: {detail}"),
            Refusal::Unavailable { detail } => write!(f, "the coordinator cannot serve this connection: {detail}"),
        }
    }
}

/// A connection the coordinator turned away.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefusedPeer {
    pub peer: SocketAddr,
    pub time_ms: u64,
    /// The rank and node the peer claimed, when it got that far and proved the token
    /// first; a peer without the token is known by its address only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub refusal: Refusal,
}

impl RefusedPeer {
    /// One line for people, e.g. "refused 10.0.0.7:51234 (rank 3, node-3): wrong job: ...".
    pub fn describe(&self) -> String {
        let claimed = match (self.rank, &self.node) {
            (Some(rank), Some(node)) => format!(" (rank {rank}, {node})"),
            (Some(rank), None) => format!(" (rank {rank})"),
            _ => String::new(),
        };
        format!("refused {}{claimed}: {}", self.peer, self.refusal)
    }
}

/// Everything the coordinator reports, in the order it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CoordinatorEvent {
    Member(MemberEvent),
    Refused(RefusedPeer),
    /// A member entered a new phase.
    Phase {
        rank: u32,
        node: String,
        phase: String,
        since_ms: u64,
    },
    /// A member's report.
    Report {
        rank: u32,
        node: String,
        in_reply_to: Option<u64>,
        body: Body,
        time_ms: u64,
    },
}

/// Who joined by the rendezvous deadline, and who did not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Membership {
    pub joined: Vec<MemberInfo>,
    /// Ranks that never joined, lowest first.
    pub missing: Vec<u32>,
}

impl Membership {
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_name_the_rank_the_node_and_the_phase() {
        let event = MemberEvent {
            rank: 2,
            node: Some("node-2".into()),
            time_ms: 10,
            kind: MemberEventKind::Unresponsive {
                last_seen_ms: 5,
                silent_for_ms: 3_100,
                last_phase: "all_reduce_2 step 3".into(),
            },
        };
        assert_eq!(
            event.describe(),
            "rank 2 (node-2) is unresponsive: silent for 3.1s in phase `all_reduce_2 step 3`"
        );
        let never = MemberEvent {
            rank: 3,
            node: None,
            time_ms: 0,
            kind: MemberEventKind::NeverJoined { waited_ms: 30_000 },
        };
        assert_eq!(never.describe(), "rank 3 never joined (waited 30s)");
        let refused = RefusedPeer {
            peer: "10.0.0.7:51234".parse().unwrap(),
            time_ms: 0,
            rank: Some(3),
            node: Some("node-3".into()),
            refusal: Refusal::WrongJob {
                expected: "a".into(),
                got: "b".into(),
            },
        };
        assert_eq!(
            refused.describe(),
            "refused 10.0.0.7:51234 (rank 3, node-3): wrong job: the agent belongs to job `b`, this coordinator runs job `a`"
        );
    }

    #[test]
    fn events_serialize_with_readable_tags() {
        let event = CoordinatorEvent::Member(MemberEvent {
            rank: 1,
            node: Some("n1".into()),
            time_ms: 7,
            kind: MemberEventKind::Crashed {
                detail: "reset".into(),
                last_phase: String::new(),
            },
        });
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["event"], "member");
        assert_eq!(json["kind"], "crashed");
        let back: CoordinatorEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }
}
