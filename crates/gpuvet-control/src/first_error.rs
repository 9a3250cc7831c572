//! Naming the first error of a group: the earliest real failure (a node that never
//! joined, crashed, stopped answering, or failed on its own), apart from the ranks that
//! only timed out or lost a peer while waiting on it.
//!
//! Pure: the binary collects [`Incident`]s from the coordinator's [`MemberEvent`]s and
//! from the agents' reports (their times converted to the coordinator's clock), and
//! this module judges them.

use serde::{Deserialize, Serialize};

use gpuvet_model::results::Lane;

use crate::events::{MemberEvent, MemberEventKind};

/// What went wrong on one rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IncidentKind {
    /// Never joined the rendezvous.
    NeverJoined,
    /// Its connection closed or broke without a goodbye.
    Crashed,
    /// Stopped answering (hung, stopped, cut off).
    Unresponsive,
    /// Failed on its own: an error, a wrong result, an XID.
    Failed { lane: Lane },
    /// Gave up waiting, e.g. a collective that never completed.
    TimedOut {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waiting_on: Option<u32>,
    },
    /// An error caused by a peer, e.g. "connection reset by peer" on the data plane.
    PeerError {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<u32>,
    },
}

/// The kind a report keeps: the incident without what the diagnosis needed besides.
impl From<&IncidentKind> for gpuvet_model::results::IncidentKind {
    fn from(kind: &IncidentKind) -> Self {
        use gpuvet_model::results::IncidentKind as Kept;
        match kind {
            IncidentKind::NeverJoined => Kept::NeverJoined,
            IncidentKind::Crashed => Kept::Crashed,
            IncidentKind::Unresponsive => Kept::Unresponsive,
            IncidentKind::Failed { .. } => Kept::Failed,
            IncidentKind::TimedOut { .. } => Kept::TimedOut,
            IncidentKind::PeerError { .. } => Kept::PeerError,
        }
    }
}

impl IncidentKind {
    /// Whether this can be the root cause; timeouts and peer errors only follow one.
    pub fn is_root_cause(&self) -> bool {
        !matches!(
            self,
            IncidentKind::TimedOut { .. } | IncidentKind::PeerError { .. }
        )
    }

    /// Which incident is named first when two share a millisecond.
    fn precedence(&self) -> u8 {
        match self {
            IncidentKind::NeverJoined => 0,
            IncidentKind::Crashed => 1,
            IncidentKind::Unresponsive => 2,
            IncidentKind::Failed { .. } => 3,
            IncidentKind::PeerError { .. } => 4,
            IncidentKind::TimedOut { .. } => 5,
        }
    }
}

/// One rank's failure, at the time it began on the coordinator's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incident {
    pub rank: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// When it began, Unix milliseconds on the coordinator's clock: for a node that
    /// stopped answering, when it was last heard, not when that was noticed.
    pub time_ms: u64,
    #[serde(flatten)]
    pub kind: IncidentKind,
    /// For people: what happened.
    pub detail: String,
}

impl Incident {
    /// The incident a member event stands for; `None` for joining, leaving cleanly and
    /// recovering.
    pub fn from_member_event(event: &MemberEvent) -> Option<Incident> {
        let (kind, time_ms) = match &event.kind {
            MemberEventKind::NeverJoined { .. } => (IncidentKind::NeverJoined, event.time_ms),
            MemberEventKind::Crashed { .. } => (IncidentKind::Crashed, event.time_ms),
            MemberEventKind::Unresponsive { last_seen_ms, .. } => {
                (IncidentKind::Unresponsive, *last_seen_ms)
            }
            MemberEventKind::Joined
            | MemberEventKind::Left { .. }
            | MemberEventKind::Recovered { .. } => return None,
        };
        Some(Incident {
            rank: event.rank,
            node: event.node.clone(),
            time_ms,
            kind,
            detail: event.describe(),
        })
    }

    /// The team that owns it: a missing node is the platform's (scheduling,
    /// rendezvous); a node that died or hung is the host's until shown otherwise; a
    /// wait that nobody explains points at the network.
    pub fn lane(&self) -> Lane {
        match &self.kind {
            IncidentKind::NeverJoined => Lane::Platform,
            IncidentKind::Crashed | IncidentKind::Unresponsive => Lane::Host,
            IncidentKind::Failed { lane } => *lane,
            IncidentKind::TimedOut { .. } | IncidentKind::PeerError { .. } => Lane::Network,
        }
    }
}

/// The judgement on a group's incidents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "diagnosis", rename_all = "snake_case")]
pub enum Diagnosis {
    /// No incident at all.
    Healthy,
    FirstError {
        /// The earliest real failure.
        first: Incident,
        /// Timeouts and peer errors: ranks that only waited on a failure.
        secondary: Vec<Incident>,
        /// Later real failures, in time order; possibly independent, possibly knock-on.
        other_failures: Vec<Incident>,
    },
    /// Ranks timed out or lost peers, but none failed on its own: the cause is outside
    /// what gpuvet saw (often the network between them).
    Unexplained { incidents: Vec<Incident> },
}

/// Names the first error. Every incident lands in exactly one place of the result.
pub fn diagnose(incidents: &[Incident]) -> Diagnosis {
    if incidents.is_empty() {
        return Diagnosis::Healthy;
    }
    let mut sorted = incidents.to_vec();
    sorted.sort_by(|a, b| {
        (a.time_ms, a.kind.precedence(), a.rank).cmp(&(b.time_ms, b.kind.precedence(), b.rank))
    });
    let Some(first_index) = sorted
        .iter()
        .position(|incident| incident.kind.is_root_cause())
    else {
        return Diagnosis::Unexplained { incidents: sorted };
    };
    let first = sorted.remove(first_index);
    let (secondary, other_failures) = sorted
        .into_iter()
        .partition(|incident| !incident.kind.is_root_cause());
    Diagnosis::FirstError {
        first,
        secondary,
        other_failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incident(rank: u32, time_ms: u64, kind: IncidentKind) -> Incident {
        Incident {
            rank,
            node: Some(format!("node-{rank}")),
            time_ms,
            kind,
            detail: String::new(),
        }
    }

    fn timed_out(rank: u32, time_ms: u64, waiting_on: Option<u32>) -> Incident {
        incident(rank, time_ms, IncidentKind::TimedOut { waiting_on })
    }

    #[test]
    fn a_hung_node_is_first_and_its_waiting_peers_are_secondary() {
        // Rank 2 was last heard at 1000 and named at 4100; its peers gave up at 5000,
        // and one of them reported the timeout before the coordinator's verdict arrived.
        let hung = MemberEvent {
            rank: 2,
            node: Some("node-2".into()),
            time_ms: 4_100,
            kind: MemberEventKind::Unresponsive {
                last_seen_ms: 1_000,
                silent_for_ms: 3_100,
                last_phase: "step 3".into(),
            },
        };
        let mut incidents = vec![
            timed_out(0, 3_900, Some(2)),
            timed_out(1, 5_000, Some(2)),
            timed_out(3, 5_001, None),
        ];
        incidents.push(Incident::from_member_event(&hung).unwrap());
        let Diagnosis::FirstError {
            first,
            secondary,
            other_failures,
        } = diagnose(&incidents)
        else {
            panic!()
        };
        assert_eq!(
            (first.rank, first.time_ms, first.lane()),
            (2, 1_000, Lane::Host)
        );
        assert!(first.detail.contains("unresponsive"), "{}", first.detail);
        assert_eq!(
            secondary.iter().map(|i| i.rank).collect::<Vec<_>>(),
            vec![0, 1, 3]
        );
        assert!(other_failures.is_empty());
    }

    #[test]
    fn a_peer_error_that_beats_the_crash_report_stays_secondary() {
        let incidents = vec![
            incident(1, 999, IncidentKind::PeerError { peer: Some(3) }),
            incident(3, 1_000, IncidentKind::Crashed),
            incident(0, 1_200, IncidentKind::Failed { lane: Lane::Host }),
        ];
        let Diagnosis::FirstError {
            first,
            secondary,
            other_failures,
        } = diagnose(&incidents)
        else {
            panic!()
        };
        assert_eq!((first.rank, first.kind.clone()), (3, IncidentKind::Crashed));
        assert_eq!(secondary.len(), 1);
        assert_eq!(
            other_failures.iter().map(|i| i.rank).collect::<Vec<_>>(),
            vec![0]
        );
    }

    #[test]
    fn a_node_that_never_joined_is_the_platforms_first_error() {
        let never = MemberEvent {
            rank: 5,
            node: None,
            time_ms: 30_000,
            kind: MemberEventKind::NeverJoined { waited_ms: 30_000 },
        };
        let incidents = vec![
            Incident::from_member_event(&never).unwrap(),
            timed_out(0, 40_000, None),
        ];
        let Diagnosis::FirstError { first, .. } = diagnose(&incidents) else {
            panic!()
        };
        assert_eq!((first.rank, first.lane()), (5, Lane::Platform));
    }

    #[test]
    fn ties_go_to_the_harder_failure_then_the_lower_rank() {
        let incidents = vec![
            incident(0, 10, IncidentKind::Failed { lane: Lane::Host }),
            incident(4, 10, IncidentKind::Unresponsive),
            incident(2, 10, IncidentKind::Crashed),
            incident(1, 10, IncidentKind::Crashed),
        ];
        let Diagnosis::FirstError {
            first,
            other_failures,
            ..
        } = diagnose(&incidents)
        else {
            panic!()
        };
        assert_eq!(first.rank, 1);
        assert_eq!(
            other_failures.iter().map(|i| i.rank).collect::<Vec<_>>(),
            vec![2, 4, 0]
        );
    }

    #[test]
    fn only_timeouts_is_unexplained_and_nothing_is_healthy() {
        assert_eq!(diagnose(&[]), Diagnosis::Healthy);
        let incidents = vec![
            timed_out(1, 7, None),
            incident(0, 5, IncidentKind::PeerError { peer: None }),
        ];
        let Diagnosis::Unexplained { incidents } = diagnose(&incidents) else {
            panic!()
        };
        assert_eq!(
            incidents.iter().map(|i| i.rank).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(incidents[0].lane(), Lane::Network);
    }

    #[test]
    fn clean_departures_and_recoveries_are_no_incidents() {
        for kind in [
            MemberEventKind::Joined,
            MemberEventKind::Left {
                reason: "done".into(),
            },
            MemberEventKind::Recovered {
                silent_for_ms: 4_000,
            },
        ] {
            let event = MemberEvent {
                rank: 0,
                node: None,
                time_ms: 0,
                kind,
            };
            assert_eq!(Incident::from_member_event(&event), None);
        }
    }
}
