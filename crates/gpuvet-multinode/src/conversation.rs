//! The coordinator's conversation with the group: send directives, collect replies
//! until a deadline, and turn every member event along the way into an incident.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use gpuvet_control::{
    Coordinator, CoordinatorEvent, Incident, IncidentKind, MemberInfo, RefusedPeer,
};
use gpuvet_model::catalog::CheckName;
use gpuvet_model::record::CheckSpan;
use gpuvet_model::results::CheckResult;

use crate::GroupError;
use crate::wire::{Directive, NodeInfo, Reply, parse_stamped};
use gpuvet_model::time::unix_now_ms;

/// What the coordinator reports while the group runs.
#[derive(Debug)]
pub enum GroupEvent<'a> {
    /// Everyone expected joined, or the rendezvous deadline passed.
    Rendezvous {
        joined: usize,
        expected: usize,
    },
    Refused(&'a RefusedPeer),
    Incident(&'a Incident),
    CheckStarted {
        index: usize,
        total: usize,
        name: CheckName,
    },
    CheckFinished {
        index: usize,
        total: usize,
        result: &'a CheckResult,
    },
}

/// A member as the plan needs it.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub rank: u32,
    /// Unique within the group (the node name, with `#rank` when names repeat).
    pub node: String,
    pub data: SocketAddr,
    pub rails: Vec<SocketAddr>,
    pub probe: SocketAddr,
    pub info: NodeInfo,
}

impl Member {
    /// Reads a joined member's hello; `Err` says what is missing.
    pub(crate) fn from_info(info: &MemberInfo) -> Result<Member, GroupError> {
        let node_info: NodeInfo = info
            .info
            .parse()
            .map_err(|source| GroupError::BadNodeInfo { source })?;
        let data = info.data_addr.ok_or(GroupError::NoDataAddress)?;
        let at = |port: u16| SocketAddr::new(data.ip(), port);
        Ok(Member {
            rank: info.rank,
            node: info.node.clone(),
            data,
            rails: node_info.rail_ports.iter().copied().map(at).collect(),
            probe: at(node_info.probe_port),
            info: node_info,
        })
    }
}

/// Makes every member that listens on all interfaces from the coordinator's host (it
/// reached the coordinator over loopback, so the coordinator saw it at a loopback
/// address) reachable from the other hosts: its data-plane IP becomes the address the
/// other members reached the coordinator's host at. A group all on one host keeps
/// loopback.
pub(crate) fn reachable_from_peers(members: &mut [Member], joined: &[MemberInfo]) {
    let reached = |ipv4: bool| {
        joined
            .iter()
            .filter(|m| !m.peer_addr.ip().is_loopback())
            .filter_map(|m| m.reached_addr)
            .map(|addr| addr.ip())
            .find(|ip| !ip.is_loopback() && !ip.is_unspecified() && ip.is_ipv4() == ipv4)
    };
    for member in members {
        if !(member.info.every_interface && member.data.ip().is_loopback()) {
            continue;
        }
        if let Some(ip) = reached(member.data.is_ipv4()) {
            member.data.set_ip(ip);
            member.probe.set_ip(ip);
            for rail in &mut member.rails {
                rail.set_ip(ip);
            }
        }
    }
}

/// What came back from one round of directives.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    pub replies: BTreeMap<u32, Reply>,
    /// Ranks that did not answer: lost on the way, or still busy at the deadline.
    pub missing: Vec<u32>,
    /// The deadline passed with answers outstanding.
    pub timed_out: bool,
}

pub(crate) struct Conversation<'a> {
    pub coordinator: &'a Coordinator,
    pub members: Vec<Member>,
    pub incidents: Vec<Incident>,
    /// Ranks that crashed, stopped answering or never joined, with what happened.
    pub lost: BTreeMap<u32, String>,
    /// Why each rank's attempts to join were refused (the last refusal), with the node
    /// it claimed to be: a rank that then never joins is explained by it.
    pub refusals: BTreeMap<u32, (Option<String>, String)>,
    /// This run's data-plane session id (hex), sent with every collective order.
    pub data_session: String,
    /// The check whose directives are out: replies are its members' spans.
    pub current_check: Option<CheckName>,
    /// Per rank, its part of each check on its own clock, from the replies' stamps.
    pub spans: BTreeMap<u32, Vec<CheckSpan>>,
    observe: &'a mut dyn FnMut(GroupEvent<'_>),
    next_round: u64,
}

/// How long after a member is lost the coordinator still waits for the others'
/// answers. The verdict no longer depends on them: the lost member is the first error,
/// and the others only waited on it. A crash's partners notice at once (their error
/// arrives within this grace and is recorded as secondary); a stopped member's would
/// take the data plane's stall timeout (5 s), which the run does not wait out.
const AFTER_LOSS_GRACE: Duration = Duration::from_millis(500);

impl<'a> Conversation<'a> {
    pub(crate) fn new(
        coordinator: &'a Coordinator,
        data_session: String,
        observe: &'a mut dyn FnMut(GroupEvent<'_>),
    ) -> Self {
        Conversation {
            data_session,
            coordinator,
            members: Vec::new(),
            incidents: Vec::new(),
            lost: BTreeMap::new(),
            refusals: BTreeMap::new(),
            current_check: None,
            spans: BTreeMap::new(),
            observe,
            next_round: 1,
        }
    }

    pub(crate) fn observe(&mut self, event: GroupEvent<'_>) {
        (self.observe)(event);
    }

    /// A fresh data-plane round id.
    pub(crate) fn round(&mut self) -> u64 {
        self.next_round += 1;
        self.next_round
    }

    /// The member of `rank`; members are in rank order, so a lookup is a binary
    /// search (a scan per lookup made planning a 4,096-node round quadratic).
    pub(crate) fn member(&self, rank: u32) -> Option<&Member> {
        self.members
            .binary_search_by_key(&rank, |m| m.rank)
            .ok()
            .map(|index| &self.members[index])
    }

    /// The member's name; for a rank that never joined, the name its refused attempt
    /// claimed, else `rank N`.
    pub(crate) fn node_name(&self, rank: u32) -> String {
        if let Some(member) = self.member(rank) {
            return member.node.clone();
        }
        match self.refusals.get(&rank) {
            Some((Some(node), _)) => node.clone(),
            _ => format!("rank {rank}"),
        }
    }

    /// Handles every event already waiting.
    pub(crate) fn drain_events(&mut self) {
        while let Some(event) = self.coordinator.try_recv_event() {
            self.handle(event, &mut HashMap::new(), &mut BTreeMap::new());
        }
    }

    /// Widens `rank`'s span of the current check to cover one reply's work; a check
    /// of several rounds is one span from the first round's start to the last's end.
    fn record_span(&mut self, rank: u32, began_ms: Option<u64>, ended_ms: Option<u64>) {
        let (Some(check), Some(began_ms), Some(ended_ms)) =
            (self.current_check, began_ms, ended_ms)
        else {
            return;
        };
        let spans = self.spans.entry(rank).or_default();
        match spans.last_mut() {
            Some(span) if span.check == check => {
                span.began_ms = span.began_ms.min(began_ms);
                span.ended_ms = span.ended_ms.max(ended_ms);
            }
            _ => spans.push(CheckSpan {
                check,
                began_ms,
                ended_ms: ended_ms.max(began_ms),
            }),
        }
    }

    pub(crate) fn record(&mut self, incident: Incident) {
        (self.observe)(GroupEvent::Incident(&incident));
        self.incidents.push(incident);
    }

    /// Sends each directive and waits for the answers until `deadline`. Once a member
    /// is lost, the others get [`AFTER_LOSS_GRACE`] more at most.
    pub(crate) fn ask(&mut self, orders: Vec<(u32, Directive)>, deadline: Instant) -> Answers {
        let mut pending: HashMap<u64, u32> = HashMap::new();
        let mut answers = Answers::default();
        for (rank, directive) in orders {
            match self.coordinator.send(rank, &directive) {
                Ok(seq) => {
                    pending.insert(seq, rank);
                }
                Err(err) => {
                    self.lost.entry(rank).or_insert_with(|| {
                        format!("cannot reach it: {}", gpuvet_backend::with_causes(&err))
                    });
                    answers.missing.push(rank);
                }
            }
        }
        let mut deadline = deadline;
        while !pending.is_empty() {
            if !self.lost.is_empty() {
                deadline = deadline.min(Instant::now() + AFTER_LOSS_GRACE);
            }
            let Some(event) = self.coordinator.recv_event(deadline) else {
                if Instant::now() >= deadline {
                    break;
                }
                continue;
            };
            self.handle(event, &mut pending, &mut answers.replies);
        }
        let mut still: Vec<u32> = pending.into_values().collect();
        if !still.is_empty() {
            answers.timed_out = self.lost.is_empty();
        }
        answers.missing.append(&mut still);
        answers.missing.sort_unstable();
        answers.missing.dedup();
        answers
    }

    fn handle(
        &mut self,
        event: CoordinatorEvent,
        pending: &mut HashMap<u64, u32>,
        replies: &mut BTreeMap<u32, Reply>,
    ) {
        match event {
            CoordinatorEvent::Report {
                rank,
                in_reply_to: Some(seq),
                body,
                ..
            } if pending.get(&seq) == Some(&rank) => {
                pending.remove(&seq);
                let reply = match parse_stamped(body.get()) {
                    Ok(stamped) => {
                        self.record_span(rank, stamped.began_ms, stamped.ended_ms);
                        stamped.reply
                    }
                    Err(err) => Reply::Refused {
                        reason: format!("the agent's reply could not be read: {err}"),
                    },
                };
                replies.insert(rank, reply);
            }
            CoordinatorEvent::Member(event) => {
                if let Some(mut incident) = Incident::from_member_event(&event) {
                    if let Some((node, refusal)) = self.refusals.get(&event.rank)
                        && incident.kind == IncidentKind::NeverJoined
                    {
                        incident.node = incident.node.or_else(|| node.clone());
                        incident.detail = format!(
                            "{}; its attempt to join was refused: {refusal}",
                            incident.detail
                        );
                    }
                    self.lost
                        .entry(event.rank)
                        .or_insert_with(|| incident.detail.clone());
                    pending.retain(|_, rank| *rank != event.rank);
                    self.record(incident);
                }
            }
            CoordinatorEvent::Refused(peer) => {
                // A rank is only set for a peer that proved the token: a stranger's
                // claim never explains (or blames) a member.
                if let Some(rank) = peer.rank {
                    self.refusals
                        .insert(rank, (peer.node.clone(), peer.refusal.to_string()));
                }
                (self.observe)(GroupEvent::Refused(&peer));
            }
            CoordinatorEvent::Report { .. } | CoordinatorEvent::Phase { .. } => {}
        }
    }

    /// Records what each rank that failed or went silent did, once a member was lost:
    /// they only waited on it.
    /// A time on `rank`'s clock (Unix milliseconds) on the coordinator's, when the
    /// agent's clock offset is known.
    pub(crate) fn on_coordinator_clock(&self, rank: u32, ms: u64) -> Option<u64> {
        self.coordinator
            .clock_offset(rank)
            .map(|clock| clock.to_coordinator_ms(ms))
    }

    pub(crate) fn record_secondary(
        &mut self,
        answers: &Answers,
        error_of: impl Fn(&Reply) -> Option<(String, Option<u64>)>,
    ) {
        if self.lost.is_empty() {
            return;
        }
        let mut incidents = Vec::new();
        for (&rank, reply) in &answers.replies {
            if let Some((error, failed_at_ms)) = error_of(reply) {
                let time_ms = failed_at_ms
                    .and_then(|ms| self.on_coordinator_clock(rank, ms))
                    .unwrap_or_else(unix_now_ms);
                incidents.push(Incident {
                    rank,
                    node: Some(self.node_name(rank)),
                    time_ms,
                    kind: IncidentKind::PeerError { peer: None },
                    detail: error,
                });
            }
        }
        for &rank in &answers.missing {
            if self.lost.contains_key(&rank) {
                continue;
            }
            incidents.push(Incident {
                rank,
                node: Some(self.node_name(rank)),
                time_ms: unix_now_ms(),
                kind: IncidentKind::TimedOut { waiting_on: None },
                detail: "still waiting on its peers when the coordinator stopped the run"
                    .to_owned(),
            });
        }
        for incident in incidents {
            self.record(incident);
        }
    }
}

#[cfg(test)]
mod tests {
    use gpuvet_control::ClockOffset;

    use super::*;

    fn info(rank: u32, peer: &str, reached: &str, data: &str, every_interface: bool) -> MemberInfo {
        let node_info = NodeInfo {
            backend: "cpu".to_owned(),
            devices: Vec::new(),
            host_id: String::new(),
            rail_ports: vec![7001],
            probe_port: 7002,
            every_interface,
            interfaces: Vec::new(),
            spans_nodes: false,
        };
        MemberInfo {
            rank,
            node: format!("n{rank}"),
            peer_addr: peer.parse().unwrap(),
            data_addr: Some(data.parse().unwrap()),
            reached_addr: Some(reached.parse().unwrap()),
            gpuvet_version: String::new(),
            info: gpuvet_control::Body::to(&node_info).unwrap(),
            joined_ms: 0,
            clock: ClockOffset::ZERO,
        }
    }

    fn reachable(joined: &[MemberInfo]) -> Vec<Member> {
        let mut members: Vec<Member> = joined
            .iter()
            .map(|m| Member::from_info(m).unwrap())
            .collect();
        reachable_from_peers(&mut members, joined);
        members
    }

    #[test]
    fn a_hello_without_what_the_plan_needs_says_what_is_missing() {
        let mut no_data = info(1, "10.0.0.2:5000", "10.0.0.1:29517", "10.0.0.2:7000", false);
        no_data.data_addr = None;
        let err = Member::from_info(&no_data).unwrap_err();
        assert!(matches!(err, GroupError::NoDataAddress), "{err:?}");
        assert_eq!(err.to_string(), "its hello names no data-plane address");

        let mut garbled = no_data;
        garbled.info = gpuvet_control::Body::to(&"not node info").unwrap();
        let err = Member::from_info(&garbled).unwrap_err();
        let GroupError::BadNodeInfo { source } = &err else {
            panic!("{err:?}");
        };
        // The incident names the parser's reason after the member's, as before.
        assert_eq!(
            gpuvet_backend::with_causes(&err),
            format!("its hello carries no usable node info: {source}")
        );
    }

    #[test]
    fn a_member_on_the_coordinators_host_is_reached_where_the_others_reach_that_host() {
        let joined = [
            // Rank 0 reached its own coordinator over loopback and listens everywhere.
            info(
                0,
                "127.0.0.1:5000",
                "127.0.0.1:29517",
                "127.0.0.1:7000",
                true,
            ),
            info(1, "10.0.0.2:5001", "10.0.0.1:29517", "10.0.0.2:7000", false),
        ];
        let members = reachable(&joined);
        assert_eq!(members[0].data, "10.0.0.1:7000".parse().unwrap());
        assert_eq!(members[0].rails, vec!["10.0.0.1:7001".parse().unwrap()]);
        assert_eq!(members[0].probe, "10.0.0.1:7002".parse().unwrap());
        assert_eq!(members[1].data, "10.0.0.2:7000".parse().unwrap());
    }

    #[test]
    fn a_group_on_one_host_keeps_loopback_and_an_explicit_loopback_is_kept() {
        let one_host = [
            info(
                0,
                "127.0.0.1:5000",
                "127.0.0.1:29517",
                "127.0.0.1:7000",
                true,
            ),
            info(
                1,
                "127.0.0.1:5001",
                "127.0.0.1:29517",
                "127.0.0.1:7100",
                true,
            ),
        ];
        let members = reachable(&one_host);
        assert_eq!(members[0].data, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(members[1].data, "127.0.0.1:7100".parse().unwrap());
        // `--data-addr 127.0.0.1` listens on loopback only: no other address reaches it.
        let explicit = [
            info(
                0,
                "127.0.0.1:5000",
                "127.0.0.1:29517",
                "127.0.0.1:7000",
                false,
            ),
            info(1, "10.0.0.2:5001", "10.0.0.1:29517", "10.0.0.2:7000", false),
        ];
        assert_eq!(
            reachable(&explicit)[0].data,
            "127.0.0.1:7000".parse().unwrap()
        );
    }
}
