//! The wire protocol between agents and the coordinator.
//!
//! A frame is a big-endian `u32` length and that many bytes of JSON: one [`Message`],
//! tagged by `"type"`. Frames are at most [`MAX_FRAME_BYTES`]; before an agent has
//! proven itself, at most [`MAX_HANDSHAKE_FRAME_BYTES`], so a stranger cannot make the
//! coordinator allocate much.
//!
//! The handshake, coordinator (C) and agent (A):
//!
//! ```text
//! A connects            C → A  challenge {protocol_version, nonce, loopback_only}
//!                       A → C  hello {protocol_version, job_id, rank, nnodes, node,
//!                                     data_addr, agent_nonce, proof, ...}
//! C checks version, proof, job, rank range, group size, duplicate rank; then
//!   N times             C → A  ping {seq, t0}      A → C  pong {seq, t0, t1, t2}
//!                       C → A  welcome {heartbeat_interval_ms, clock, proof}
//!               or else C → A  refused {reason}
//! ```
//!
//! After the welcome the agent sends `heartbeat`s (each answered by a
//! `heartbeat_ack`) and `report`s; the coordinator sends `command`s, `roster`s,
//! `abort` and `bye`. Either side ends cleanly with `bye`; a connection that closes
//! without one is a crash.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

use gpuvet_model::bounds::{OBJECT_WEIGHT, json_values_at_most};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::clock::ClockOffset;
use crate::error::ClusterError;
use crate::transport::Connection;

/// Bumped whenever a message changes incompatibly; both sides must speak the same.
/// Also bumped when what the commands carry changes incompatibly, so that nodes of
/// different gpuvet versions are refused at the door rather than mid-run. 2: collective
/// orders carry the run's data-plane session, and agents prove its key to each other.
pub const PROTOCOL_VERSION: u32 = 2;

/// The largest frame either side accepts once the handshake is done: room for a
/// report with per-iteration samples of every GPU, small enough to refuse nonsense.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// The largest frame accepted from a peer that has not yet authenticated.
pub const MAX_HANDSHAKE_FRAME_BYTES: usize = 64 << 10;

/// The most JSON values one frame may hold (objects weighted, see
/// [`gpuvet_model::bounds`]), counted before they are built: a report of every GPU's
/// per-iteration samples has about 100,000; a full 16 MiB frame of `[0,0,...]` would
/// take half a gigabyte to decode, of `[{},...]` several.
pub const MAX_FRAME_VALUES: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// C → A, first: the coordinator's version and a fresh nonce (hex) to prove against.
    Challenge {
        protocol_version: u32,
        nonce: String,
        /// The coordinator listens on a loopback address only, so every member is on
        /// its host: an agent that reaches it over loopback then keeps its own
        /// listeners on loopback too. Absent (`false`) from coordinators before it, so
        /// their agents keep listening as they did.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        loopback_only: bool,
    },
    /// A → C: who the agent is, and its proof.
    Hello(Hello),
    /// C → A: a clock sample's first half, `t0` on the coordinator's clock.
    Ping { seq: u32, t0_ns: i64 },
    /// A → C: `t0` echoed, `t1` (ping arrived) and `t2` (pong sent) on the agent's clock.
    Pong {
        seq: u32,
        t0_ns: i64,
        t1_ns: i64,
        t2_ns: i64,
    },
    /// C → A: admitted.
    Welcome(Welcome),
    /// C → A: not admitted, and why; the coordinator closes the connection after it.
    Refused { reason: String },
    /// A → C, every heartbeat interval.
    Heartbeat(Heartbeat),
    /// C → A: the heartbeat `seq` arrived; tells the agent the coordinator still runs.
    HeartbeatAck { seq: u64 },
    /// C → A: work for the agent, in the binary's own vocabulary.
    Command { seq: u64, body: Body },
    /// A → C: a result or a progress note, answering a command or on its own.
    Report {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        in_reply_to: Option<u64>,
        body: Body,
    },
    /// C → A: every member and where its data plane listens.
    Roster { members: Vec<RosterEntry> },
    /// C → A: stop the run now; the agent applies its fail action.
    Abort { reason: String },
    /// Either way: a clean goodbye, so closing is not taken for a crash.
    Bye { reason: String },
}

/// A command's or a report's body: JSON in the binary's own vocabulary, kept as text
/// until its reader parses it into its own type. A verdict or a check's result is
/// read once, into that type, instead of into a `serde_json::Value` first.
#[derive(Clone)]
pub struct Body(Box<RawValue>);

impl Body {
    pub fn to<T: Serialize + ?Sized>(value: &T) -> Result<Body, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Body)
    }

    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// `null`.
    pub fn null() -> Body {
        Body(RawValue::NULL.to_owned())
    }
}

impl Default for Body {
    fn default() -> Body {
        Body::null()
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Body) -> bool {
        self.get() == other.get()
    }
}

impl Serialize for Body {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Body {
    /// Through a `Value`, so a body inside any other structure (an event, a tagged
    /// message) reads; `decode_message` reads the frames that carry one directly.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Body, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Body::to(&value).map_err(serde::de::Error::custom)
    }
}

impl Message {
    /// The `"type"` tag, for messages about unexpected frames.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Challenge { .. } => "challenge",
            Message::Hello(_) => "hello",
            Message::Ping { .. } => "ping",
            Message::Pong { .. } => "pong",
            Message::Welcome(_) => "welcome",
            Message::Refused { .. } => "refused",
            Message::Heartbeat(_) => "heartbeat",
            Message::HeartbeatAck { .. } => "heartbeat_ack",
            Message::Command { .. } => "command",
            Message::Report { .. } => "report",
            Message::Roster { .. } => "roster",
            Message::Abort { .. } => "abort",
            Message::Bye { .. } => "bye",
        }
    }
}

/// `Info` is the `info` as it is held: `Body` everywhere, and while a hello is read
/// straight from its frame, the text itself (`HelloText`), which only a struct read
/// by `serde_json` from text can hold (a tagged enum buffers its fields in a form that
/// cannot).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello<Info = Body> {
    pub protocol_version: u32,
    pub job_id: String,
    /// This node's rank in the group, from 0.
    pub rank: u32,
    /// The group size as this node was told it; must match the coordinator's.
    pub nnodes: u32,
    /// The node's name, for people.
    pub node: String,
    /// Where this node's data plane listens; an unspecified IP (`0.0.0.0`) means "the
    /// address this connection comes from".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_addr: Option<SocketAddr>,
    pub gpuvet_version: String,
    /// Anything else the binary wants the coordinator to know (backend, devices, ...),
    /// kept as text until the binary reads it into its own type.
    #[serde(default)]
    pub info: Info,
    /// The agent's nonce (hex) for the coordinator to prove against.
    pub agent_nonce: String,
    /// HMAC-SHA256 over the coordinator's nonce, the job id and the rank (hex).
    pub proof: String,
}

/// A hello read straight from its frame's text, `info` untouched.
pub(crate) type HelloText = Hello<Option<Box<RawValue>>>;

impl HelloText {
    pub(crate) fn into_hello(self) -> Hello {
        Hello {
            protocol_version: self.protocol_version,
            job_id: self.job_id,
            rank: self.rank,
            nnodes: self.nnodes,
            node: self.node,
            data_addr: self.data_addr,
            gpuvet_version: self.gpuvet_version,
            info: self.info.map_or_else(Body::null, Body),
            agent_nonce: self.agent_nonce,
            proof: self.proof,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    pub nnodes: u32,
    /// How often the agent must send a heartbeat.
    pub heartbeat_interval_ms: u64,
    /// The agent's clock relative to the coordinator's, from the pings just exchanged.
    pub clock: ClockOffset,
    /// HMAC-SHA256 over the agent's nonce, the job id and the rank (hex).
    pub proof: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub rank: u32,
    pub seq: u64,
    /// What the agent is doing, e.g. "all_reduce_2 round 1 step 3".
    pub phase: String,
    /// When the agent entered this phase, Unix nanoseconds on its clock.
    pub phase_since_ns: i64,
    /// When this heartbeat left, Unix nanoseconds on the agent's clock.
    pub sent_at_ns: i64,
}

/// One member as other members need to know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterEntry {
    pub rank: u32,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_addr: Option<SocketAddr>,
}

/// Why reading a frame stopped; the caller decides whether that is a refusal, a crash
/// or a lost coordinator.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The peer closed the connection; `mid_frame` when it did so halfway.
    Closed {
        mid_frame: bool,
    },
    /// The deadline passed first.
    TimedOut,
    TooLarge {
        len: u64,
        max: u64,
        hint: String,
    },
    Io(io::Error),
    Malformed(String),
    /// More than [`MAX_FRAME_VALUES`] values.
    TooManyValues {
        max: usize,
    },
}

impl FrameError {
    pub(crate) fn describe(&self) -> String {
        match self {
            FrameError::Closed { mid_frame: false } => "the connection closed".to_owned(),
            FrameError::Closed { mid_frame: true } => {
                "the connection closed in the middle of a frame".to_owned()
            }
            FrameError::TimedOut => "timed out waiting for a frame".to_owned(),
            FrameError::TooLarge { len, max, hint } => {
                format!("frame of {len} bytes exceeds the {max}-byte limit{hint}")
            }
            FrameError::Io(err) => format!("connection error: {err}"),
            FrameError::Malformed(detail) => format!("malformed frame: {detail}"),
            FrameError::TooManyValues { max } => {
                format!("malformed frame: it holds more than `{max}` json values")
            }
        }
    }
}

impl From<FrameError> for ClusterError {
    fn from(err: FrameError) -> Self {
        match err {
            FrameError::TooLarge { len, max, hint } => {
                ClusterError::FrameTooLarge { len, max, hint }
            }
            FrameError::Malformed(detail) => ClusterError::BadFrame { detail },
            FrameError::TooManyValues { max } => ClusterError::BadFrame {
                detail: format!("it holds more than `{max}` json values"),
            },
            FrameError::Io(source) => ClusterError::io("connection error", source),
            FrameError::TimedOut => {
                ClusterError::io(err.describe(), io::Error::from(io::ErrorKind::TimedOut))
            }
            FrameError::Closed { .. } => ClusterError::io(
                err.describe(),
                io::Error::from(io::ErrorKind::UnexpectedEof),
            ),
        }
    }
}

/// The bytes of one frame carrying `message`.
pub fn encode_frame(message: &Message) -> Result<Vec<u8>, ClusterError> {
    let json = serde_json::to_vec(message)?;
    if json.len() > MAX_FRAME_BYTES {
        return Err(ClusterError::FrameTooLarge {
            len: json.len() as u64,
            max: MAX_FRAME_BYTES as u64,
            hint: format!(" (a `{}` message; send less per message)", message.kind()),
        });
    }
    let len = u32::try_from(json.len()).expect("bounded by MAX_FRAME_BYTES");
    let mut frame = Vec::with_capacity(4 + json.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&json);
    Ok(frame)
}

/// Writes one frame; a single `write_all`, so frames from threads sharing a locked
/// writer never interleave.
pub fn write_message(writer: &mut impl Write, message: &Message) -> Result<(), ClusterError> {
    write_frame(writer, &encode_frame(message)?, message.kind())
}

/// Writes a frame [`encode_frame`] made, so a message for many peers is encoded once.
pub fn write_frame(writer: &mut impl Write, frame: &[u8], kind: &str) -> Result<(), ClusterError> {
    writer
        .write_all(frame)
        .and_then(|()| writer.flush())
        .map_err(|err| ClusterError::io(format!("cannot send a `{kind}` message"), err))
}

/// Reads and decodes one message, waiting until `deadline` (forever with `None`).
pub fn read_message(
    stream: &mut dyn Connection,
    deadline: Option<Instant>,
) -> Result<Message, ClusterError> {
    let bytes = read_frame(stream, MAX_FRAME_BYTES, deadline)?;
    Ok(decode_message(&bytes)?)
}

/// Reads and decodes one message from any reader (a byte slice, a pipe), taking no
/// more than the frame's length from it and at most [`MAX_FRAME_BYTES`].
pub fn read_message_from(reader: &mut impl Read) -> Result<Message, ClusterError> {
    let mut header = [0u8; 4];
    reader
        .read_exact(&mut header)
        .map_err(|err| ClusterError::io("cannot read a frame", err))?;
    let len = frame_len(header, MAX_FRAME_BYTES)?;
    // Grown as bytes arrive, so a length the stream does not back allocates nothing.
    let mut payload = Vec::new();
    reader
        .take(len as u64)
        .read_to_end(&mut payload)
        .map_err(|err| ClusterError::io("cannot read a frame", err))?;
    if payload.len() < len {
        return Err(FrameError::Closed { mid_frame: true }.into());
    }
    Ok(decode_message(&payload)?)
}

/// Reads one frame's payload of at most `max` bytes.
pub(crate) fn read_frame(
    stream: &mut dyn Connection,
    max: usize,
    deadline: Option<Instant>,
) -> Result<Vec<u8>, FrameError> {
    if deadline.is_none() {
        stream.set_read_timeout(None).map_err(FrameError::Io)?;
    }
    let mut header = [0u8; 4];
    read_exact_until(stream, &mut header, deadline, false)?;
    let mut payload = vec![0u8; frame_len(header, max)?];
    read_exact_until(stream, &mut payload, deadline, true)?;
    Ok(payload)
}

/// Frames read as they arrive, without waiting: for a thread that serves many
/// connections, each of which may hold half a frame at a time.
#[derive(Debug)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`.
    start: usize,
    max: usize,
}

/// Bytes taken from a connection per read: a few heartbeats' worth.
const READ_CHUNK: usize = 4 << 10;

impl FrameReader {
    pub(crate) fn new(max: usize) -> FrameReader {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            max,
        }
    }

    /// Reads everything `stream` has now and appends each whole frame's payload to
    /// `frames`. `Err` once the connection has ended or broken the framing; the
    /// frames before that are in `frames` all the same.
    pub(crate) fn read_ready(
        &mut self,
        stream: &mut dyn Connection,
        frames: &mut Vec<Vec<u8>>,
    ) -> Result<(), FrameError> {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            let read = stream.read_ready(&mut chunk);
            if let Ok(n) = read {
                self.buf.extend_from_slice(&chunk[..n]);
            }
            let whole = self.take_frames(frames);
            match read {
                Ok(0) => {
                    whole?;
                    return Err(FrameError::Closed {
                        mid_frame: self.start < self.buf.len(),
                    });
                }
                Ok(_) => whole?,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => whole?,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return whole,
                Err(err) if err.kind() == io::ErrorKind::ConnectionReset => {
                    whole?;
                    return Err(FrameError::Closed {
                        mid_frame: self.start < self.buf.len(),
                    });
                }
                Err(err) => return Err(FrameError::Io(err)),
            }
        }
    }

    /// Moves every whole frame in the buffer to `frames`.
    fn take_frames(&mut self, frames: &mut Vec<Vec<u8>>) -> Result<(), FrameError> {
        loop {
            let rest = &self.buf[self.start..];
            let Some(header) = rest.first_chunk::<4>() else {
                break;
            };
            let len = frame_len(*header, self.max)?;
            let Some(payload) = rest.get(4..4 + len) else {
                break;
            };
            frames.push(payload.to_vec());
            self.start += 4 + len;
        }
        self.buf.drain(..self.start);
        self.start = 0;
        Ok(())
    }
}

/// The payload length a frame's header announces, refused above `max` before anything
/// is allocated for it.
fn frame_len(header: [u8; 4], max: usize) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header);
    if len as usize > max {
        return Err(FrameError::TooLarge {
            len: u64::from(len),
            max: max as u64,
            hint: text_hint(&header),
        });
    }
    Ok(len as usize)
}

/// A stranger who sends text (an HTTP probe, a typo'd port) shows up as an absurd
/// length; saying that the bytes look like text tells a person what happened.
fn text_hint(header: &[u8; 4]) -> String {
    if header.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!(
            " (the first bytes `{}` look like text: not a gpuvet agent?)",
            String::from_utf8_lossy(header)
        )
    } else {
        String::new()
    }
}

fn read_exact_until(
    stream: &mut dyn Connection,
    buf: &mut [u8],
    deadline: Option<Instant>,
    in_frame: bool,
) -> Result<(), FrameError> {
    let mut filled = 0;
    while filled < buf.len() {
        if let Some(deadline) = deadline {
            // Re-armed before every read, so a peer trickling bytes cannot stretch the
            // deadline.
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(FrameError::TimedOut);
            }
            stream
                .set_read_timeout(Some(remaining))
                .map_err(FrameError::Io)?;
        }
        match stream.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(FrameError::Closed {
                    mid_frame: in_frame || filled > 0,
                });
            }
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            // A peer that died with our bytes unread resets the connection instead of
            // closing it, depending only on timing: either way it left without a word.
            Err(err) if err.kind() == io::ErrorKind::ConnectionReset => {
                return Err(FrameError::Closed {
                    mid_frame: in_frame || filled > 0,
                });
            }
            Err(err)
                if deadline.is_some()
                    && matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
            Err(err) => return Err(FrameError::Io(err)),
        }
    }
    Ok(())
}

/// Decodes a frame's payload.
pub(crate) fn decode_message(bytes: &[u8]) -> Result<Message, FrameError> {
    // A byte counts for at most an object's weight, so a frame this short cannot hold
    // more values than the bound, and the heartbeats and acknowledgements of thousands
    // of members skip the count.
    if bytes.len().saturating_mul(OBJECT_WEIGHT) > MAX_FRAME_VALUES
        && json_values_at_most(bytes, MAX_FRAME_VALUES).is_err()
    {
        return Err(FrameError::TooManyValues {
            max: MAX_FRAME_VALUES,
        });
    }
    let malformed =
        |err: serde_json::Error| FrameError::Malformed(format!("not a gpuvet message: {err}"));
    // A tagged enum buffers the whole frame before it reads the tag, and a body
    // inside it cannot stay text; the frames with a body are read as structs, and so
    // are the frames every member sends and gets several times a second.
    let tag: Tag<'_> = serde_json::from_slice(bytes).map_err(malformed)?;
    match tag.kind.as_deref() {
        Some("command") => {
            let frame: CommandFrame = serde_json::from_slice(bytes).map_err(malformed)?;
            Ok(Message::Command {
                seq: frame.seq,
                body: Body(frame.body),
            })
        }
        Some("report") => {
            let frame: ReportFrame = serde_json::from_slice(bytes).map_err(malformed)?;
            Ok(Message::Report {
                in_reply_to: frame.in_reply_to,
                body: Body(frame.body),
            })
        }
        Some("hello") => serde_json::from_slice::<HelloText>(bytes)
            .map(|hello| Message::Hello(hello.into_hello()))
            .map_err(malformed),
        Some("heartbeat") => serde_json::from_slice(bytes)
            .map(Message::Heartbeat)
            .map_err(malformed),
        Some("heartbeat_ack") => serde_json::from_slice::<AckFrame>(bytes)
            .map(|frame| Message::HeartbeatAck { seq: frame.seq })
            .map_err(malformed),
        Some("ping") => serde_json::from_slice::<PingFrame>(bytes)
            .map(|frame| Message::Ping {
                seq: frame.seq,
                t0_ns: frame.t0_ns,
            })
            .map_err(malformed),
        Some("pong") => serde_json::from_slice::<PongFrame>(bytes)
            .map(|frame| Message::Pong {
                seq: frame.seq,
                t0_ns: frame.t0_ns,
                t1_ns: frame.t1_ns,
                t2_ns: frame.t2_ns,
            })
            .map_err(malformed),
        _ => serde_json::from_slice(bytes).map_err(malformed),
    }
}

/// Just a frame's `"type"`.
#[derive(Deserialize)]
struct Tag<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct CommandFrame {
    seq: u64,
    body: Box<RawValue>,
}

#[derive(Deserialize)]
struct AckFrame {
    seq: u64,
}

#[derive(Deserialize)]
struct PingFrame {
    seq: u32,
    t0_ns: i64,
}

#[derive(Deserialize)]
struct PongFrame {
    seq: u32,
    t0_ns: i64,
    t1_ns: i64,
    t2_ns: i64,
}

#[derive(Deserialize)]
struct ReportFrame {
    #[serde(default)]
    in_reply_to: Option<u64>,
    body: Box<RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ends of an in-memory connection.
    fn pipe() -> (crate::transport::Stream, crate::transport::Stream) {
        use crate::transport::{MemoryNetwork, Transport};
        let network = MemoryNetwork::new();
        let server = network.host("10.0.0.1".parse().unwrap());
        let client = network.host("10.0.0.2".parse().unwrap());
        let listener = server.bind("10.0.0.1:0".parse().unwrap()).unwrap();
        let sender = client
            .connect(
                listener.local_addr().unwrap(),
                std::time::Duration::from_secs(5),
            )
            .unwrap();
        (sender, listener.accept().unwrap().0)
    }

    #[test]
    fn a_frame_reader_keeps_half_frames_until_the_rest_comes() {
        let (mut sender, mut receiver) = pipe();
        let bye = |reason: &str| {
            encode_frame(&Message::Bye {
                reason: reason.into(),
            })
            .unwrap()
        };
        let (one, two) = (bye("one"), bye("two"));
        let mut reader = FrameReader::new(MAX_FRAME_BYTES);
        let mut frames = Vec::new();
        // Nothing yet, then a frame and a half, then the rest: two whole frames.
        reader.read_ready(&mut *receiver, &mut frames).unwrap();
        assert!(frames.is_empty());
        sender.write_all(&one).unwrap();
        sender.write_all(&two[..6]).unwrap();
        reader.read_ready(&mut *receiver, &mut frames).unwrap();
        assert_eq!(frames, [one[4..].to_vec()]);
        sender.write_all(&two[6..]).unwrap();
        reader.read_ready(&mut *receiver, &mut frames).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(
            decode_message(&frames[1]).unwrap(),
            Message::Bye {
                reason: "two".into()
            }
        );
    }

    #[test]
    fn a_frame_reader_hands_over_what_came_before_the_end_and_says_how_it_ended() {
        let (mut sender, mut receiver) = pipe();
        let frame = encode_frame(&Message::HeartbeatAck { seq: 1 }).unwrap();
        sender.write_all(&frame).unwrap();
        sender.write_all(&frame[..3]).unwrap();
        drop(sender);
        let mut reader = FrameReader::new(MAX_FRAME_BYTES);
        let mut frames = Vec::new();
        let end = reader.read_ready(&mut *receiver, &mut frames).unwrap_err();
        assert_eq!(frames.len(), 1);
        assert!(
            matches!(end, FrameError::Closed { mid_frame: true }),
            "{end:?}"
        );

        let (mut sender, mut receiver) = pipe();
        sender.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let mut reader = FrameReader::new(MAX_FRAME_BYTES);
        let err = reader.read_ready(&mut *receiver, &mut frames).unwrap_err();
        assert!(
            matches!(&err, FrameError::TooLarge { hint, .. } if hint.contains("look like text")),
            "{err:?}"
        );
    }

    #[test]
    fn frames_are_a_big_endian_length_and_tagged_json() {
        let frame = encode_frame(&Message::Bye {
            reason: "done".into(),
        })
        .unwrap();
        let json = br#"{"type":"bye","reason":"done"}"#;
        assert_eq!(&frame[..4], &(json.len() as u32).to_be_bytes());
        assert_eq!(&frame[4..], json);
    }

    #[test]
    fn every_message_round_trips() {
        let messages = vec![
            Message::Challenge {
                protocol_version: 1,
                nonce: "ab".into(),
                loopback_only: false,
            },
            Message::Challenge {
                protocol_version: 1,
                nonce: "ab".into(),
                loopback_only: true,
            },
            Message::Hello(Hello {
                protocol_version: 1,
                job_id: "j".into(),
                rank: 3,
                nnodes: 4,
                node: "n3".into(),
                data_addr: Some("0.0.0.0:4000".parse().unwrap()),
                gpuvet_version: "0.1.0".into(),
                info: Body::to(&serde_json::json!({"backend": "cpu"})).unwrap(),
                agent_nonce: "cd".into(),
                proof: "ef".into(),
            }),
            Message::Ping { seq: 1, t0_ns: 5 },
            Message::Pong {
                seq: 1,
                t0_ns: 5,
                t1_ns: 6,
                t2_ns: 7,
            },
            Message::Welcome(Welcome {
                nnodes: 4,
                heartbeat_interval_ms: 500,
                clock: ClockOffset {
                    offset_ns: -3,
                    round_trip_ns: 9,
                    samples: 8,
                },
                proof: "00".into(),
            }),
            Message::Refused {
                reason: "no".into(),
            },
            Message::Heartbeat(Heartbeat {
                rank: 2,
                seq: 9,
                phase: "all_reduce_2 round 1".into(),
                phase_since_ns: 1,
                sent_at_ns: 2,
            }),
            Message::HeartbeatAck { seq: 9 },
            Message::Command {
                seq: 4,
                body: Body::to(&serde_json::json!({"run_check": "gemm_flops"})).unwrap(),
            },
            Message::Report {
                in_reply_to: Some(4),
                body: Body::to(&[1, 2]).unwrap(),
            },
            Message::Report {
                in_reply_to: None,
                body: Body::to(&Value::Null).unwrap(),
            },
            Message::Roster {
                members: vec![RosterEntry {
                    rank: 0,
                    node: "n0".into(),
                    data_addr: None,
                }],
            },
            Message::Abort {
                reason: "rank 2 crashed".into(),
            },
            Message::Bye {
                reason: "finished".into(),
            },
        ];
        for message in messages {
            let frame = encode_frame(&message).unwrap();
            let decoded = decode_message(&frame[4..]).unwrap();
            assert_eq!(decoded, message, "{}", message.kind());
            // The frames read as plain structs read as the tagged enum reads them.
            let tagged: Message = serde_json::from_slice(&frame[4..]).unwrap();
            assert_eq!(tagged, message, "{}", message.kind());
        }
    }

    #[test]
    fn a_challenge_without_loopback_only_is_one_from_a_coordinator_on_every_interface() {
        // What coordinators before the field send, and what a coordinator on every
        // interface still sends: the same bytes, so older agents read it as before.
        let old = br#"{"type":"challenge","protocol_version":2,"nonce":"ab"}"#;
        let challenge = Message::Challenge {
            protocol_version: 2,
            nonce: "ab".into(),
            loopback_only: false,
        };
        assert_eq!(decode_message(old).unwrap(), challenge);
        assert_eq!(&encode_frame(&challenge).unwrap()[4..], old);
        let loopback =
            br#"{"type":"challenge","protocol_version":2,"nonce":"ab","loopback_only":true}"#;
        assert_eq!(
            decode_message(loopback).unwrap(),
            Message::Challenge {
                protocol_version: 2,
                nonce: "ab".into(),
                loopback_only: true,
            }
        );
    }

    #[test]
    fn a_body_reads_the_same_as_text_and_inside_any_other_structure() {
        let frame = br#"{"type":"report","in_reply_to":3,"body":{"status":"passed","v":[1.5]}}"#;
        let direct = decode_message(frame).unwrap();
        // The tagged enum's own reader goes through a `Value`; the result is the same.
        let tagged: Message = serde_json::from_slice(frame).unwrap();
        assert_eq!(direct, tagged);
        let Message::Report { body, .. } = direct else {
            panic!("a report")
        };
        assert_eq!(body.get(), r#"{"status":"passed","v":[1.5]}"#);
        assert_eq!(body.parse::<Value>().unwrap()["v"][0], 1.5);
        let missing = br#"{"type":"command","seq":1}"#;
        assert!(matches!(
            decode_message(missing),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn junk_payloads_are_malformed_not_panics() {
        for junk in [
            &b"\xff\xfe"[..],
            b"{}",
            b"{\"type\":\"nope\"}",
            b"[[[[[[",
            b"null",
        ] {
            assert!(matches!(
                decode_message(junk),
                Err(FrameError::Malformed(_))
            ));
        }
        let deep = "[".repeat(100_000);
        assert!(matches!(
            decode_message(deep.as_bytes()),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn an_oversized_message_is_refused_before_sending() {
        let body = Body::to(&"x".repeat(MAX_FRAME_BYTES)).unwrap();
        let err = encode_frame(&Message::Command { seq: 1, body })
            .unwrap_err()
            .to_string();
        assert!(err.contains("exceeds the 16777216-byte limit"), "{err}");
        assert!(err.contains("`command`"), "{err}");
    }

    #[test]
    fn text_where_a_length_belongs_is_called_out() {
        assert!(text_hint(b"GET ").contains("`GET `"));
        assert_eq!(text_hint(&[0, 0, 1, 0]), "");
    }

    #[test]
    fn the_value_bound_is_checked_before_decoding() {
        // The object (weighing 8), `type`, `report`, `body` and the array: 12 values
        // besides the zeros.
        let under = format!(
            r#"{{"type":"report","body":[{}]}}"#,
            vec!["0"; MAX_FRAME_VALUES - 12].join(",")
        );
        assert!(decode_message(under.as_bytes()).is_ok());
        let over = format!(
            r#"{{"type":"report","body":[{}]}}"#,
            vec!["0"; MAX_FRAME_VALUES - 11].join(",")
        );
        assert!(over.len() < MAX_FRAME_BYTES);
        let err = ClusterError::from(decode_message(over.as_bytes()).unwrap_err()).to_string();
        assert_eq!(
            err,
            format!("malformed frame: it holds more than `{MAX_FRAME_VALUES}` json values")
        );
    }

    #[test]
    fn a_reader_yields_messages_and_refuses_bad_lengths() {
        let bye = Message::Bye {
            reason: "done".into(),
        };
        let mut bytes = encode_frame(&bye).unwrap();
        bytes.extend_from_slice(&encode_frame(&Message::HeartbeatAck { seq: 3 }).unwrap());
        let mut reader = &bytes[..];
        assert_eq!(read_message_from(&mut reader).unwrap(), bye);
        assert_eq!(
            read_message_from(&mut reader).unwrap(),
            Message::HeartbeatAck { seq: 3 }
        );
        assert!(read_message_from(&mut reader).is_err());

        let huge = ((MAX_FRAME_BYTES + 1) as u32).to_be_bytes();
        let err = read_message_from(&mut &huge[..]).unwrap_err().to_string();
        assert!(err.contains("exceeds the 16777216-byte limit"), "{err}");
        // A length at the limit that the stream does not back: closed mid-frame.
        let short = [&(MAX_FRAME_BYTES as u32).to_be_bytes()[..], b"{}"].concat();
        let err = read_message_from(&mut &short[..]).unwrap_err().to_string();
        assert!(err.contains("middle of a frame"), "{err}");
    }
}
