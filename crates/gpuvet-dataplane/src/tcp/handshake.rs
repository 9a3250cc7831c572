//! The first bytes on every data-plane connection: who is calling, for which round, and
//! proof that both ends hold the run's data-plane key.
//!
//! ```text
//! acceptor → caller   Challenge  40 B  "GVDC" ‖ version u16 ‖ 0u16 ‖ nonce[32]
//! caller → acceptor   Hello      72 B  head[40] ‖ HMAC(key, HELLO ‖ nonce ‖ head)
//!                                      head = "GVDP" ‖ version u16 ‖ 0u16 ‖ round u64 ‖
//!                                             world u32 ‖ from u32 ‖ to u32 ‖ 1.0f32 ‖ 0[8]
//! acceptor → caller   Reply      56 B  head[24] ‖ HMAC(key, REPLY ‖ hello MAC ‖ head)
//!                                      head = "GVDP" ‖ version u16 ‖ refusal u16 ‖
//!                                             round u64 ‖ world u32 ‖ rank u32
//! ```
//!
//! Fixed-size little-endian records, so a stray or garbage connection is recognised
//! from its first bytes and refused without disturbing the ranks that belong to the
//! group. The acceptor's fresh nonce makes every hello's MAC single-use: a hello
//! recorded on the wire cannot be replayed, not even in the same round. The reply's MAC
//! covers the hello's, so the caller knows the acceptor holds the key too and answered
//! this very hello. A hello whose MAC does not verify is refused ([`Refusal::Proof`])
//! with an all-zero reply MAC: the acceptor never computes a MAC over a stranger's bytes.
//! MACs are compared in constant time.
//!
//! The key is derived per run by the caller of this crate (gpuvet-control derives it
//! from the group's token); this module only uses it.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Marks a gpuvet data-plane hello and reply.
const MAGIC: [u8; 4] = *b"GVDP";
/// Marks the acceptor's challenge.
const CHALLENGE_MAGIC: [u8; 4] = *b"GVDC";
/// Bumped whenever the handshake or the framing of a collective changes. 2: the
/// challenge and the MACs.
pub(super) const PROTOCOL_VERSION: u16 = 2;
/// `1.0f32` in this host's byte order: collectives move raw native-endian floats, so
/// peers of a different byte order are refused up front.
const BYTE_ORDER_MARK: [u8; 4] = 1.0f32.to_ne_bytes();

const HELLO_LABEL: &[u8] = b"gpuvet/data-hello/v2\0";
const REPLY_LABEL: &[u8] = b"gpuvet/data-reply/v2\0";

pub(super) const NONCE_BYTES: usize = 32;
pub(super) const MAC_BYTES: usize = 32;
pub(super) const CHALLENGE_BYTES: usize = 8 + NONCE_BYTES;
const HELLO_HEAD_BYTES: usize = 40;
pub(super) const HELLO_BYTES: usize = HELLO_HEAD_BYTES + MAC_BYTES;
const REPLY_HEAD_BYTES: usize = 24;
pub(super) const REPLY_BYTES: usize = REPLY_HEAD_BYTES + MAC_BYTES;

type HmacSha256 = Hmac<Sha256>;

/// The secret every rank of one run shares, from which each greeting's proof is made.
/// Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct DataKey([u8; 32]);

impl DataKey {
    /// A key from 32 bytes the caller derived (gpuvet derives it per run from the
    /// group's token, the job id and a session id the coordinator chose).
    pub fn from_bytes(bytes: [u8; 32]) -> DataKey {
        DataKey(bytes)
    }

    /// A fresh random key, for a group whose ranks are all started by one process
    /// (tests, benchmarks, examples).
    pub fn random() -> Result<DataKey, crate::BackendError> {
        let mut bytes = [0u8; 32];
        fill_random(&mut bytes)?;
        Ok(DataKey(bytes))
    }

    fn mac(&self, label: &[u8]) -> HmacSha256 {
        let mut mac =
            <HmacSha256 as Mac>::new_from_slice(&self.0).expect("hmac accepts any key length");
        mac.update(label);
        mac
    }
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DataKey(<redacted>)")
    }
}

pub(super) fn fill_random(bytes: &mut [u8]) -> Result<(), crate::BackendError> {
    getrandom::fill(bytes).map_err(|error| {
        crate::BackendError::Failed(format!("cannot read the system's random source: {error}"))
    })
}

/// What the accepting rank sends first: its protocol version and a fresh nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Challenge {
    pub(super) version: u16,
    pub(super) nonce: [u8; NONCE_BYTES],
}

impl Challenge {
    pub(super) fn new(nonce: [u8; NONCE_BYTES]) -> Challenge {
        Challenge {
            version: PROTOCOL_VERSION,
            nonce,
        }
    }

    pub(super) fn encode(&self) -> [u8; CHALLENGE_BYTES] {
        let mut bytes = [0u8; CHALLENGE_BYTES];
        bytes[0..4].copy_from_slice(&CHALLENGE_MAGIC);
        bytes[4..6].copy_from_slice(&self.version.to_le_bytes());
        bytes[8..].copy_from_slice(&self.nonce);
        bytes
    }

    /// `None` when the bytes are not a gpuvet challenge at all.
    pub(super) fn decode(bytes: &[u8; CHALLENGE_BYTES]) -> Option<Challenge> {
        if bytes[0..4] != CHALLENGE_MAGIC {
            return None;
        }
        let mut nonce = [0u8; NONCE_BYTES];
        nonce.copy_from_slice(&bytes[8..]);
        Some(Challenge {
            version: u16::from_le_bytes([bytes[4], bytes[5]]),
            nonce,
        })
    }
}

/// What the connecting rank says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hello {
    pub(super) version: u16,
    pub(super) round: u64,
    pub(super) world: u32,
    pub(super) from_rank: u32,
    pub(super) to_rank: u32,
    pub(super) same_byte_order: bool,
}

impl Hello {
    pub(super) fn new(round: u64, world: usize, from_rank: usize, to_rank: usize) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            round,
            world: saturating_u32(world),
            from_rank: saturating_u32(from_rank),
            to_rank: saturating_u32(to_rank),
            same_byte_order: true,
        }
    }

    fn head(&self) -> [u8; HELLO_HEAD_BYTES] {
        let mut bytes = [0u8; HELLO_HEAD_BYTES];
        bytes[0..4].copy_from_slice(&MAGIC);
        bytes[4..6].copy_from_slice(&self.version.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.round.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.world.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.from_rank.to_le_bytes());
        bytes[24..28].copy_from_slice(&self.to_rank.to_le_bytes());
        let mark = if self.same_byte_order {
            BYTE_ORDER_MARK
        } else {
            1.0f32.to_bits().swap_bytes().to_ne_bytes()
        };
        bytes[28..32].copy_from_slice(&mark);
        bytes
    }

    /// The hello with its proof for the acceptor's `nonce`.
    pub(super) fn encode(&self, key: &DataKey, nonce: &[u8; NONCE_BYTES]) -> [u8; HELLO_BYTES] {
        let head = self.head();
        let mut bytes = [0u8; HELLO_BYTES];
        bytes[..HELLO_HEAD_BYTES].copy_from_slice(&head);
        bytes[HELLO_HEAD_BYTES..].copy_from_slice(&hello_mac(key, nonce, &head));
        bytes
    }

    /// The hello and the proof it carries; `None` when the bytes are not a gpuvet hello
    /// at all. The proof is checked by [`verify_hello`].
    pub(super) fn decode(bytes: &[u8; HELLO_BYTES]) -> Option<(Hello, [u8; MAC_BYTES])> {
        if bytes[0..4] != MAGIC {
            return None;
        }
        let mut mac = [0u8; MAC_BYTES];
        mac.copy_from_slice(&bytes[HELLO_HEAD_BYTES..]);
        let hello = Hello {
            version: u16::from_le_bytes([bytes[4], bytes[5]]),
            round: u64_at(bytes, 8),
            world: u32_at(bytes, 16),
            from_rank: u32_at(bytes, 20),
            to_rank: u32_at(bytes, 24),
            same_byte_order: bytes[28..32] == BYTE_ORDER_MARK,
        };
        Some((hello, mac))
    }
}

fn hello_mac(
    key: &DataKey,
    nonce: &[u8; NONCE_BYTES],
    head: &[u8; HELLO_HEAD_BYTES],
) -> [u8; MAC_BYTES] {
    let mut mac = key.mac(HELLO_LABEL);
    mac.update(nonce);
    mac.update(head);
    mac.finalize().into_bytes().into()
}

/// Whether the hello's bytes carry a proof made with `key` for `nonce`; constant-time.
pub(super) fn verify_hello(
    key: &DataKey,
    nonce: &[u8; NONCE_BYTES],
    bytes: &[u8; HELLO_BYTES],
) -> bool {
    let mut mac = key.mac(HELLO_LABEL);
    mac.update(nonce);
    mac.update(&bytes[..HELLO_HEAD_BYTES]);
    mac.verify_slice(&bytes[HELLO_HEAD_BYTES..]).is_ok()
}

/// Why an accepting rank turned a connection down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Version,
    Round,
    World,
    /// The caller meant another rank.
    WrongRank,
    /// The caller's rank is not one this rank accepts from (or it is out of range).
    UnexpectedRank,
    /// That rank is already connected.
    Duplicate,
    ByteOrder,
    /// The hello's proof does not verify: the caller does not hold this run's key.
    Proof,
}

impl Refusal {
    fn code(self) -> u16 {
        match self {
            Refusal::Version => 1,
            Refusal::Round => 2,
            Refusal::World => 3,
            Refusal::WrongRank => 4,
            Refusal::UnexpectedRank => 5,
            Refusal::Duplicate => 6,
            Refusal::ByteOrder => 7,
            Refusal::Proof => 8,
        }
    }

    fn from_code(code: u16) -> Option<Refusal> {
        Some(match code {
            1 => Refusal::Version,
            2 => Refusal::Round,
            3 => Refusal::World,
            4 => Refusal::WrongRank,
            5 => Refusal::UnexpectedRank,
            6 => Refusal::Duplicate,
            7 => Refusal::ByteOrder,
            8 => Refusal::Proof,
            _ => return None,
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Version => "a different protocol version",
            Refusal::Round => "a different round",
            Refusal::World => "a different group size",
            Refusal::WrongRank => "a connection meant for another rank",
            Refusal::UnexpectedRank => "a rank it does not accept connections from",
            Refusal::Duplicate => "a rank that is already connected",
            Refusal::ByteOrder => "a different byte order",
            Refusal::Proof => {
                "no proof of this run's key (a different `GPUVET_TOKEN`, or not gpuvet)"
            }
        })
    }
}

/// The accepting rank's answer, with its own view so the caller can explain a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reply {
    pub(super) refusal: Option<Refusal>,
    pub(super) version: u16,
    pub(super) round: u64,
    pub(super) world: u32,
    pub(super) rank: u32,
}

impl Reply {
    pub(super) fn new(refusal: Option<Refusal>, round: u64, world: usize, rank: usize) -> Reply {
        Reply {
            refusal,
            version: PROTOCOL_VERSION,
            round,
            world: saturating_u32(world),
            rank: saturating_u32(rank),
        }
    }

    fn head(&self) -> [u8; REPLY_HEAD_BYTES] {
        let mut bytes = [0u8; REPLY_HEAD_BYTES];
        bytes[0..4].copy_from_slice(&MAGIC);
        bytes[4..6].copy_from_slice(&self.version.to_le_bytes());
        bytes[6..8].copy_from_slice(&self.refusal.map_or(0, Refusal::code).to_le_bytes());
        bytes[8..16].copy_from_slice(&self.round.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.world.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.rank.to_le_bytes());
        bytes
    }

    /// The reply with its proof over the hello's MAC; `None` for a hello whose own proof
    /// failed, which gets zeros instead.
    pub(super) fn encode(
        &self,
        key: &DataKey,
        hello_mac: Option<&[u8; MAC_BYTES]>,
    ) -> [u8; REPLY_BYTES] {
        let head = self.head();
        let mut bytes = [0u8; REPLY_BYTES];
        bytes[..REPLY_HEAD_BYTES].copy_from_slice(&head);
        if let Some(hello_mac) = hello_mac {
            bytes[REPLY_HEAD_BYTES..].copy_from_slice(&reply_mac(key, hello_mac, &head));
        }
        bytes
    }

    /// `None` when the bytes are not a gpuvet reply (or name an unknown refusal). The
    /// proof is checked by [`verify_reply`].
    pub(super) fn decode(bytes: &[u8; REPLY_BYTES]) -> Option<Reply> {
        if bytes[0..4] != MAGIC {
            return None;
        }
        let code = u16::from_le_bytes([bytes[6], bytes[7]]);
        let refusal = match code {
            0 => None,
            code => Some(Refusal::from_code(code)?),
        };
        Some(Reply {
            refusal,
            version: u16::from_le_bytes([bytes[4], bytes[5]]),
            round: u64_at(bytes, 8),
            world: u32_at(bytes, 16),
            rank: u32_at(bytes, 20),
        })
    }
}

fn reply_mac(
    key: &DataKey,
    hello_mac: &[u8; MAC_BYTES],
    head: &[u8; REPLY_HEAD_BYTES],
) -> [u8; MAC_BYTES] {
    let mut mac = key.mac(REPLY_LABEL);
    mac.update(hello_mac);
    mac.update(head);
    mac.finalize().into_bytes().into()
}

/// Whether the reply's bytes carry the acceptor's proof over `hello` (the caller's own
/// hello, MAC included); constant-time.
pub(super) fn verify_reply(
    key: &DataKey,
    hello: &[u8; HELLO_BYTES],
    bytes: &[u8; REPLY_BYTES],
) -> bool {
    let mut mac = key.mac(REPLY_LABEL);
    mac.update(&hello[HELLO_HEAD_BYTES..]);
    mac.update(&bytes[..REPLY_HEAD_BYTES]);
    mac.verify_slice(&bytes[REPLY_HEAD_BYTES..]).is_ok()
}

/// What the accepting side makes of a hello whose proof verified: accept it, or the
/// reason to refuse.
pub(super) fn judge(
    hello: &Hello,
    round: u64,
    world: usize,
    rank: usize,
    accepts_from: impl Fn(usize) -> bool,
    already_connected: impl Fn(usize) -> bool,
) -> Option<Refusal> {
    let from = hello.from_rank as usize;
    if hello.version != PROTOCOL_VERSION {
        Some(Refusal::Version)
    } else if !hello.same_byte_order {
        Some(Refusal::ByteOrder)
    } else if hello.round != round {
        Some(Refusal::Round)
    } else if hello.world as usize != world {
        Some(Refusal::World)
    } else if hello.to_rank as usize != rank {
        Some(Refusal::WrongRank)
    } else if from >= world || !accepts_from(from) {
        Some(Refusal::UnexpectedRank)
    } else if already_connected(from) {
        Some(Refusal::Duplicate)
    } else {
        None
    }
}

fn saturating_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> DataKey {
        DataKey::from_bytes([byte; 32])
    }

    const NONCE: [u8; NONCE_BYTES] = [9; NONCE_BYTES];

    #[test]
    fn challenge_hello_and_reply_survive_the_wire() {
        let challenge = Challenge::new(NONCE);
        assert_eq!(Challenge::decode(&challenge.encode()), Some(challenge));
        let hello = Hello::new(7, 4, 1, 3);
        let bytes = hello.encode(&key(1), &NONCE);
        assert_eq!(Hello::decode(&bytes).map(|(hello, _)| hello), Some(hello));
        assert!(verify_hello(&key(1), &NONCE, &bytes));
        for refusal in [None, Some(Refusal::Round), Some(Refusal::ByteOrder)] {
            let reply = Reply::new(refusal, 9, 4, 3);
            let hello_mac = Hello::decode(&bytes).unwrap().1;
            let answer = reply.encode(&key(1), Some(&hello_mac));
            assert_eq!(Reply::decode(&answer), Some(reply));
            assert!(verify_reply(&key(1), &bytes, &answer));
        }
    }

    #[test]
    fn a_hello_proves_the_key_the_nonce_and_every_field() {
        let bytes = Hello::new(7, 4, 1, 3).encode(&key(1), &NONCE);
        assert!(!verify_hello(&key(2), &NONCE, &bytes), "another key");
        assert!(
            !verify_hello(&key(1), &[8; NONCE_BYTES], &bytes),
            "a replay"
        );
        // Any field changed on the way (round, world, ranks, version) breaks the proof.
        for at in [4, 8, 16, 20, 24, 28] {
            let mut forged = bytes;
            forged[at] ^= 1;
            assert!(!verify_hello(&key(1), &NONCE, &forged), "byte {at}");
        }
        let mut forged = bytes;
        forged[HELLO_BYTES - 1] ^= 1;
        assert!(!verify_hello(&key(1), &NONCE, &forged), "the MAC itself");
    }

    #[test]
    fn a_reply_proves_the_key_and_answers_this_hello() {
        let hello = Hello::new(7, 4, 1, 3).encode(&key(1), &NONCE);
        let other_hello = Hello::new(7, 4, 1, 3).encode(&key(1), &[8; NONCE_BYTES]);
        let hello_mac = Hello::decode(&hello).unwrap().1;
        let reply = Reply::new(None, 7, 4, 3);
        let answer = reply.encode(&key(1), Some(&hello_mac));
        assert!(!verify_reply(&key(2), &hello, &answer), "another key");
        assert!(
            !verify_reply(&key(1), &other_hello, &answer),
            "another hello"
        );
        let mut forged = answer;
        forged[6] = Refusal::Round.code().to_le_bytes()[0];
        assert!(!verify_reply(&key(1), &hello, &forged), "a changed verdict");
        // A refused stranger gets no MAC at all.
        let refused = Reply::new(Some(Refusal::Proof), 7, 4, 3).encode(&key(1), None);
        assert!(refused[REPLY_HEAD_BYTES..].iter().all(|&b| b == 0));
        assert_eq!(
            Reply::decode(&refused).unwrap().refusal,
            Some(Refusal::Proof)
        );
    }

    #[test]
    fn garbage_is_not_a_challenge_hello_or_reply() {
        assert_eq!(Challenge::decode(&[b'G'; CHALLENGE_BYTES]), None);
        assert_eq!(Hello::decode(&[b'G'; HELLO_BYTES]), None);
        let mut reply = Reply::new(None, 1, 2, 0).encode(&key(1), None);
        reply[6] = 99; // an unknown refusal code
        assert_eq!(Reply::decode(&reply), None);
    }

    #[test]
    fn a_foreign_byte_order_is_seen() {
        let mut bytes = Hello::new(1, 2, 0, 1).encode(&key(1), &NONCE);
        bytes[28..32].reverse();
        assert!(!Hello::decode(&bytes).unwrap().0.same_byte_order);
        let foreign = Hello {
            same_byte_order: false,
            ..Hello::new(1, 2, 0, 1)
        };
        let bytes = foreign.encode(&key(1), &NONCE);
        assert!(!Hello::decode(&bytes).unwrap().0.same_byte_order);
    }

    #[test]
    fn keys_never_show() {
        assert_eq!(format!("{:?}", key(1)), "DataKey(<redacted>)");
        assert_ne!(DataKey::random().unwrap(), DataKey::random().unwrap());
    }

    #[test]
    fn judge_names_each_reason() {
        let lower = |rank: usize| rank < 2;
        let none = |_: usize| false;
        let judge_hello = |hello: Hello| judge(&hello, 5, 4, 2, lower, none);
        assert_eq!(judge_hello(Hello::new(5, 4, 1, 2)), None);
        assert_eq!(judge_hello(Hello::new(6, 4, 1, 2)), Some(Refusal::Round));
        assert_eq!(judge_hello(Hello::new(5, 3, 1, 2)), Some(Refusal::World));
        assert_eq!(
            judge_hello(Hello::new(5, 4, 1, 3)),
            Some(Refusal::WrongRank)
        );
        assert_eq!(
            judge_hello(Hello::new(5, 4, 3, 2)),
            Some(Refusal::UnexpectedRank)
        );
        assert_eq!(
            judge_hello(Hello::new(5, 4, 9, 2)),
            Some(Refusal::UnexpectedRank)
        );
        let old = Hello {
            version: PROTOCOL_VERSION + 1,
            ..Hello::new(5, 4, 1, 2)
        };
        assert_eq!(judge_hello(old), Some(Refusal::Version));
        assert_eq!(
            judge(&Hello::new(5, 4, 1, 2), 5, 4, 2, lower, |_| true),
            Some(Refusal::Duplicate)
        );
    }
}
