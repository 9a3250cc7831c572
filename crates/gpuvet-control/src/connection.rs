//! One connection, on the coordinator's side: the handshake that admits or refuses
//! it, then the member's frames until it leaves, crashes or the coordinator stops.
//!
//! Every way a handshake can go wrong ends in a typed [`Refusal`] that is sent to the
//! peer (when it still listens) and reported as an event; nothing a peer sends can stop
//! the coordinator from serving the others.

use std::io::Read;
use std::net::{Shutdown, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::auth::{
    NONCE_LEN, coordinator_proof, from_hex, random_nonce, to_hex, verify_agent_proof,
};
use crate::clock::{ClockTracker, PingSample, ns_to_ms, unix_now_ms, unix_now_ns};
use crate::coordinator::{HandshakeSlot, Member, Shared, Slot, lock};
use crate::events::{
    CoordinatorEvent, MemberEventKind, MemberInfo, MemberState, Refusal, RefusedPeer,
};
use crate::protocol::{
    FrameError, Heartbeat, Hello, HelloText, MAX_HANDSHAKE_FRAME_BYTES, Message, PROTOCOL_VERSION,
    Welcome, decode_message, read_frame, write_message,
};
use crate::transport::Stream;
use gpuvet_model::diagnostics::with_causes;

/// What a peer that proved the token claimed before it was refused, for the refusal
/// event.
#[derive(Default)]
struct Claim {
    rank: Option<u32>,
    node: Option<String>,
}

/// Serves one accepted connection to its end.
pub(crate) fn serve(
    shared: &Arc<Shared>,
    mut stream: Stream,
    peer: SocketAddr,
    slot: HandshakeSlot,
) {
    let _ = stream.set_nodelay(true);
    let mut claim = Claim::default();
    let admitted = handshake(shared, &mut stream, peer, &mut claim);
    // The handshake is over either way: let the accept loop serve the next one.
    drop(slot);
    match admitted {
        Ok((rank, writer)) => shared.members.adopt(rank, stream, writer),
        Err(refusal) => refuse(shared, stream, peer, claim, refusal),
    }
}

fn handshake(
    shared: &Shared,
    stream: &mut Stream,
    peer: SocketAddr,
    claim: &mut Claim,
) -> Result<(u32, Arc<Mutex<Stream>>), Refusal> {
    let timeout = shared.options.handshake_timeout;
    let deadline = Instant::now() + timeout;
    let _ = stream.set_write_timeout(Some(timeout.min(shared.options.write_timeout)));
    let lost = |err: crate::ClusterError| Refusal::Disconnected {
        detail: with_causes(&err),
    };

    let nonce = random_nonce().map_err(|err| Refusal::Unavailable {
        detail: with_causes(&err),
    })?;
    write_message(
        stream,
        &Message::Challenge {
            protocol_version: PROTOCOL_VERSION,
            nonce: to_hex(&nonce),
            loopback_only: shared.loopback_only,
        },
    )
    .map_err(lost)?;

    let frame = read_frame(&mut **stream, MAX_HANDSHAKE_FRAME_BYTES, Some(deadline))
        .map_err(|err| frame_refusal(err, timeout))?;
    let hello = parse_hello(&frame)?;

    // The proof covers the job id and rank the agent claims, so a right token with a
    // wrong job reads as a wrong job, and only an agent holding the token learns ours.
    let proof = from_hex(&hello.proof).unwrap_or_default();
    if !verify_agent_proof(&shared.token, &nonce, &hello.job_id, hello.rank, &proof) {
        // Anyone can claim any rank and node: without the token, the claim is not
        // reported, so a stranger is never taken for the member it names.
        return Err(Refusal::BadToken);
    }
    claim.rank = Some(hello.rank);
    claim.node = Some(hello.node.clone());
    if hello.job_id != shared.job_id {
        return Err(Refusal::WrongJob {
            expected: shared.job_id.clone(),
            got: hello.job_id,
        });
    }
    if hello.rank >= shared.nnodes {
        return Err(Refusal::RankOutOfRange {
            rank: hello.rank,
            nnodes: shared.nnodes,
        });
    }
    if hello.nnodes != shared.nnodes {
        return Err(Refusal::GroupSizeMismatch {
            theirs: hello.nnodes,
            ours: shared.nnodes,
        });
    }
    let agent_nonce = from_hex(&hello.agent_nonce)
        .filter(|nonce| nonce.len() == NONCE_LEN)
        .ok_or_else(|| Refusal::BadFrame {
            detail: format!("`agent_nonce` must be {} hex digits", NONCE_LEN * 2),
        })?;

    let reservation = Reservation::take(shared, hello.rank, &hello.node)?;
    let clock_samples = sync_clock(shared, stream, deadline)?;

    let clone = |stream: &Stream| {
        stream.try_clone().map_err(|err| Refusal::Unavailable {
            detail: err.to_string(),
        })
    };
    let writer_stream = clone(stream)?;
    let _ = writer_stream.set_write_timeout(Some(shared.options.write_timeout));
    let writer = Arc::new(Mutex::new(writer_stream));
    let control = clone(stream)?;
    let data_addr = hello.data_addr.map(|addr| {
        if addr.ip().is_unspecified() {
            SocketAddr::new(peer.ip(), addr.port())
        } else {
            addr
        }
    });
    let welcome = Message::Welcome(Welcome {
        nnodes: shared.nnodes,
        heartbeat_interval_ms: u64::try_from(shared.options.heartbeat_interval.as_millis())
            .unwrap_or(1000),
        clock: clock_samples.offset(),
        proof: to_hex(&coordinator_proof(
            &shared.token,
            &agent_nonce,
            &hello.job_id,
            hello.rank,
        )),
    });
    let info = MemberInfo {
        rank: hello.rank,
        node: hello.node,
        peer_addr: peer,
        data_addr,
        reached_addr: stream.local_addr().ok(),
        gpuvet_version: hello.gpuvet_version,
        info: hello.info,
        joined_ms: unix_now_ms(),
        clock: clock_samples.offset(),
    };

    // The welcome goes out under the member's writer lock, taken before the member
    // becomes visible: a command sent the moment it joins cannot overtake it.
    let mut writer_guard = lock(&writer);
    let rank = info.rank;
    reservation.commit(info, clock_samples, Arc::clone(&writer), control)?;
    if let Err(err) = write_message(&mut *writer_guard, &welcome) {
        drop(writer_guard);
        member_gone(
            shared,
            rank,
            &format!(
                "the connection broke while welcoming it: {}",
                with_causes(&err)
            ),
        );
        let _ = stream.shutdown(Shutdown::Both);
        return Ok((rank, writer));
    }
    drop(writer_guard);
    Ok((rank, writer))
}

/// Reads the hello leniently: the version is checked before the rest, which may differ
/// between protocol versions.
fn parse_hello(frame: &[u8]) -> Result<Hello, Refusal> {
    let head: HelloHead<'_> = serde_json::from_slice(frame).map_err(|err| Refusal::BadFrame {
        detail: format!("not a gpuvet message: {err}"),
    })?;
    let kind = head.kind.as_deref();
    if kind != Some("hello") {
        let got = kind.map_or_else(
            || "a frame without a `type`".to_owned(),
            |kind| format!("`{kind}`"),
        );
        return Err(Refusal::BadFrame {
            detail: format!("expected a `hello`, got {got}"),
        });
    }
    match head.protocol_version.as_ref().and_then(Value::as_u64) {
        Some(version) if version == u64::from(PROTOCOL_VERSION) => {}
        Some(version) => {
            return Err(Refusal::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: u32::try_from(version).unwrap_or(u32::MAX),
            });
        }
        None => {
            return Err(Refusal::BadFrame {
                detail: "the hello has no `protocol_version`".to_owned(),
            });
        }
    }
    // Read as the struct it is, from the text: its `info` stays text.
    serde_json::from_slice::<HelloText>(frame)
        .map(HelloText::into_hello)
        .map_err(|err| Refusal::BadFrame {
            detail: format!("malformed hello: {err}"),
        })
}

/// What is read of a frame before it is known to be a hello of this version. The
/// version is read as any JSON value, so a string or a float reads as a hello without
/// a version (as when the whole frame was a `Value`), not as a malformed frame.
#[derive(serde::Deserialize)]
struct HelloHead<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    protocol_version: Option<Value>,
}

/// The handshake's clock samples.
fn sync_clock(
    shared: &Shared,
    stream: &mut Stream,
    deadline: Instant,
) -> Result<ClockTracker, Refusal> {
    let timeout = shared.options.handshake_timeout;
    let mut samples = Vec::with_capacity(shared.options.clock_samples as usize);
    for seq in 0..shared.options.clock_samples {
        let t0_ns = unix_now_ns();
        write_message(stream, &Message::Ping { seq, t0_ns }).map_err(|err| {
            Refusal::Disconnected {
                detail: with_causes(&err),
            }
        })?;
        let frame = read_frame(&mut **stream, MAX_HANDSHAKE_FRAME_BYTES, Some(deadline))
            .map_err(|err| frame_refusal(err, timeout))?;
        let t3_ns = unix_now_ns();
        match decode_message(&frame) {
            Ok(Message::Pong {
                seq: echoed,
                t0_ns: echoed_t0,
                t1_ns,
                t2_ns,
            }) if echoed == seq && echoed_t0 == t0_ns => {
                samples.push(PingSample {
                    t0_ns,
                    t1_ns,
                    t2_ns,
                    t3_ns,
                });
            }
            Ok(other) => {
                return Err(Refusal::BadFrame {
                    detail: format!("expected the `pong` to ping {seq}, got `{}`", other.kind()),
                });
            }
            Err(err) => {
                return Err(Refusal::BadFrame {
                    detail: err.describe(),
                });
            }
        }
    }
    ClockTracker::new(&samples).ok_or_else(|| Refusal::Unavailable {
        detail: "no clock samples".to_owned(),
    })
}

fn frame_refusal(err: FrameError, timeout: Duration) -> Refusal {
    match err {
        FrameError::TimedOut => Refusal::HandshakeTimeout {
            waited_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        },
        FrameError::Closed { .. } | FrameError::Io(_) => Refusal::Disconnected {
            detail: err.describe(),
        },
        FrameError::TooLarge { .. }
        | FrameError::Malformed(_)
        | FrameError::TooManyValues { .. } => Refusal::BadFrame {
            detail: err.describe(),
        },
    }
}

/// A rank held by a handshake in progress; released unless committed.
struct Reservation<'a> {
    shared: &'a Shared,
    rank: u32,
    committed: bool,
}

impl<'a> Reservation<'a> {
    fn take(shared: &'a Shared, rank: u32, node: &str) -> Result<Reservation<'a>, Refusal> {
        let mut state = lock(&shared.state);
        if shared.is_closing() {
            return Err(Refusal::Unavailable {
                detail: "the coordinator is shutting down".to_owned(),
            });
        }
        match state.slots.get(&rank) {
            Some(Slot::Joining { node: holder }) => Err(Refusal::DuplicateRank {
                rank,
                holder: holder.clone(),
            }),
            Some(Slot::Member(member)) => Err(Refusal::DuplicateRank {
                rank,
                holder: member.info.node.clone(),
            }),
            Some(Slot::NeverJoined) => Err(Refusal::LateJoin { rank }),
            None => {
                state.slots.insert(
                    rank,
                    Slot::Joining {
                        node: node.to_owned(),
                    },
                );
                Ok(Reservation {
                    shared,
                    rank,
                    committed: false,
                })
            }
        }
    }

    fn commit(
        mut self,
        info: MemberInfo,
        clock: ClockTracker,
        writer: Arc<Mutex<Stream>>,
        control: Stream,
    ) -> Result<(), Refusal> {
        let shared = self.shared;
        let mut state = lock(&shared.state);
        if shared.is_closing() {
            return Err(Refusal::Unavailable {
                detail: "the coordinator is shutting down".to_owned(),
            });
        }
        if !matches!(state.slots.get(&self.rank), Some(Slot::Joining { .. })) {
            // The rendezvous closed while this agent was still shaking hands.
            return Err(Refusal::LateJoin { rank: self.rank });
        }
        let now_ms = unix_now_ms();
        let node = info.node.clone();
        state.slots.insert(
            self.rank,
            Slot::Member(Box::new(Member {
                info,
                state: MemberState::Alive,
                last_seen: Instant::now(),
                last_seen_ms: now_ms,
                phase: String::new(),
                phase_since_ms: now_ms,
                clock,
                writer,
                control,
            })),
        );
        self.committed = true;
        state.joined += 1;
        shared.emit_member(self.rank, Some(node), MemberEventKind::Joined);
        // The rendezvous waits for the whole group (or its deadline): waking it for
        // every one of thousands of joins would only have it count again.
        if state.joined >= shared.nnodes as usize {
            shared.notify_joined();
        }
        Ok(())
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let mut state = lock(&self.shared.state);
        if matches!(state.slots.get(&self.rank), Some(Slot::Joining { .. })) {
            state.slots.remove(&self.rank);
        }
    }
}

/// Tells the peer why, reports it, and closes.
fn refuse(shared: &Shared, mut stream: Stream, peer: SocketAddr, claim: Claim, refusal: Refusal) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = write_message(
        &mut stream,
        &Message::Refused {
            reason: refusal.to_string(),
        },
    );
    // Send our FIN, then drain what the peer still sends for a moment: closing with
    // unread bytes would reset the connection and could destroy the reason in flight.
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let drain_deadline = Instant::now() + Duration::from_millis(200);
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    while Instant::now() < drain_deadline && drained < MAX_HANDSHAKE_FRAME_BYTES {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    shared.emit(CoordinatorEvent::Refused(RefusedPeer {
        peer,
        time_ms: unix_now_ms(),
        rank: claim.rank,
        node: claim.node,
        refusal,
    }));
}

/// Reads an admitted member's frames until it leaves or the connection ends.
/// What a member's frame meant for its connection.
pub(crate) enum MemberFrame {
    Read,
    /// A goodbye: the connection is over.
    Left,
}

/// Handles one frame from an admitted member (read by [`crate::members`]); the
/// caller acknowledges a heartbeat.
pub(crate) fn on_member_message(shared: &Shared, rank: u32, message: Message) -> MemberFrame {
    if let Message::Heartbeat(heartbeat) = message {
        touch(shared, rank, Some(heartbeat));
        return MemberFrame::Read;
    }
    touch(shared, rank, None);
    match message {
        Message::Report { in_reply_to, body } => {
            let node = node_of(shared, rank);
            shared.emit(CoordinatorEvent::Report {
                rank,
                node,
                in_reply_to,
                body,
                time_ms: unix_now_ms(),
            });
            MemberFrame::Read
        }
        Message::Bye { reason } => {
            left(shared, rank, reason);
            MemberFrame::Left
        }
        // Anything else from an agent carries no meaning after the handshake.
        _ => MemberFrame::Read,
    }
}

/// How a member's connection ended, for its crash event.
pub(crate) fn describe_end(err: &FrameError) -> String {
    match err {
        FrameError::Closed { mid_frame: false } => {
            "the connection closed without a goodbye".to_owned()
        }
        FrameError::TooLarge { .. }
        | FrameError::Malformed(_)
        | FrameError::TooManyValues { .. } => {
            format!("it broke the protocol: {}", err.describe())
        }
        _ => err.describe(),
    }
}

fn node_of(shared: &Shared, rank: u32) -> String {
    match lock(&shared.state).slots.get(&rank) {
        Some(Slot::Member(member)) => member.info.node.clone(),
        _ => String::new(),
    }
}

/// A clock sample taken after the handshake: the member's offset may get better, and
/// follows the clocks' drift.
pub(crate) fn record_clock_sample(shared: &Shared, rank: u32, sample: PingSample) {
    let mut state = lock(&shared.state);
    if let Some(Slot::Member(member)) = state.slots.get_mut(&rank) {
        member.clock.add(sample);
        member.info.clock = member.clock.offset();
    }
}

/// Any frame proves the member is alive; one declared unresponsive has recovered. A
/// heartbeat also says the member's phase. One lock for both: every member sends
/// heartbeats, twice a second.
fn touch(shared: &Shared, rank: u32, heartbeat: Option<Heartbeat>) {
    let mut state = lock(&shared.state);
    let Some(Slot::Member(member)) = state.slots.get_mut(&rank) else {
        return;
    };
    let now = Instant::now();
    if member.state == MemberState::Unresponsive {
        member.state = MemberState::Alive;
        let silent_for_ms =
            u64::try_from(now.duration_since(member.last_seen).as_millis()).unwrap_or(u64::MAX);
        shared.emit_member(
            rank,
            Some(member.info.node.clone()),
            MemberEventKind::Recovered { silent_for_ms },
        );
    }
    member.last_seen = now;
    member.last_seen_ms = unix_now_ms();
    let Some(heartbeat) = heartbeat else {
        return;
    };
    if heartbeat.phase == member.phase {
        return;
    }
    let since_ms = member
        .info
        .clock
        .to_coordinator_ms(ns_to_ms(heartbeat.phase_since_ns));
    member.phase = heartbeat.phase.clone();
    member.phase_since_ms = since_ms;
    shared.emit(CoordinatorEvent::Phase {
        rank,
        node: member.info.node.clone(),
        phase: heartbeat.phase,
        since_ms,
    });
}

fn left(shared: &Shared, rank: u32, reason: String) {
    let mut state = lock(&shared.state);
    let Some(Slot::Member(member)) = state.slots.get_mut(&rank) else {
        return;
    };
    member.state = MemberState::Left;
    shared.emit_member(
        rank,
        Some(member.info.node.clone()),
        MemberEventKind::Left { reason },
    );
}

/// The connection ended without a goodbye: a crash, unless the coordinator itself is
/// closing or the member already left.
pub(crate) fn member_gone(shared: &Shared, rank: u32, detail: &str) {
    if shared.is_closing() {
        return;
    }
    let mut state = lock(&shared.state);
    let Some(Slot::Member(member)) = state.slots.get_mut(&rank) else {
        return;
    };
    if !member.state.is_connected() {
        return;
    }
    member.state = MemberState::Crashed;
    shared.emit_member(
        rank,
        Some(member.info.node.clone()),
        MemberEventKind::Crashed {
            detail: detail.to_owned(),
            last_phase: member.phase.clone(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello_text(version: &str, info: Option<&str>) -> String {
        let info = info.map_or_else(String::new, |info| format!(r#","info":{info}"#));
        format!(
            r#"{{"type":"hello","protocol_version":{version},"job_id":"j","rank":1,"nnodes":2,"node":"n1","gpuvet_version":"0.1.0"{info},"agent_nonce":"ab","proof":"cd"}}"#
        )
    }

    #[test]
    fn a_hello_keeps_its_info_as_the_text_sent() {
        let info = r#"{"backend":"sim","devices":[{"index":0}]}"#;
        let hello =
            parse_hello(hello_text(&PROTOCOL_VERSION.to_string(), Some(info)).as_bytes()).unwrap();
        assert_eq!((hello.rank, hello.node.as_str()), (1, "n1"));
        assert_eq!(hello.info.get(), info);
    }

    #[test]
    fn a_hello_without_info_reads_as_null() {
        let hello =
            parse_hello(hello_text(&PROTOCOL_VERSION.to_string(), None).as_bytes()).unwrap();
        assert_eq!(hello.info.get(), "null");
    }

    #[test]
    fn a_version_that_is_not_a_number_is_a_hello_without_one() {
        let refusal = parse_hello(hello_text(r#""2""#, None).as_bytes()).unwrap_err();
        assert!(
            matches!(&refusal, Refusal::BadFrame { detail } if detail.contains("no `protocol_version`")),
            "{refusal:?}"
        );
        let refusal = parse_hello(hello_text("1", None).as_bytes()).unwrap_err();
        assert!(
            matches!(refusal, Refusal::VersionMismatch { theirs: 1, .. }),
            "{refusal:?}"
        );
    }

    #[test]
    fn a_hello_with_a_field_of_the_wrong_type_is_malformed() {
        let text = hello_text(&PROTOCOL_VERSION.to_string(), None)
            .replace(r#""rank":1"#, r#""rank":"one""#);
        let refusal = parse_hello(text.as_bytes()).unwrap_err();
        assert!(
            matches!(&refusal, Refusal::BadFrame { detail } if detail.starts_with("malformed hello")),
            "{refusal:?}"
        );
    }
}
