//! The first bytes on every data-plane connection: who is calling, for which round.
//!
//! The connecting rank sends a [`Hello`]; the accepting rank answers with a [`Reply`]
//! that accepts it or says why not. Fixed-size little-endian records, so a stray or
//! garbage connection is recognised from its first 40 bytes and refused without
//! disturbing the ranks that belong to the group.

use std::fmt;

/// Marks a gpuvet data-plane connection.
const MAGIC: [u8; 4] = *b"GVDP";
/// Bumped whenever the handshake or the framing of a collective changes.
pub(super) const PROTOCOL_VERSION: u16 = 1;
/// `1.0f32` in this host's byte order: collectives move raw native-endian floats, so
/// peers of a different byte order are refused up front.
const BYTE_ORDER_MARK: [u8; 4] = 1.0f32.to_ne_bytes();

pub(super) const HELLO_BYTES: usize = 40;
pub(super) const REPLY_BYTES: usize = 24;

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

    pub(super) fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut bytes = [0u8; HELLO_BYTES];
        bytes[0..4].copy_from_slice(&MAGIC);
        bytes[4..6].copy_from_slice(&self.version.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.round.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.world.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.from_rank.to_le_bytes());
        bytes[24..28].copy_from_slice(&self.to_rank.to_le_bytes());
        bytes[28..32].copy_from_slice(&BYTE_ORDER_MARK);
        bytes
    }

    /// `None` when the bytes are not a gpuvet hello at all.
    pub(super) fn decode(bytes: &[u8; HELLO_BYTES]) -> Option<Hello> {
        if bytes[0..4] != MAGIC {
            return None;
        }
        Some(Hello {
            version: u16::from_le_bytes([bytes[4], bytes[5]]),
            round: u64_at(bytes, 8),
            world: u32_at(bytes, 16),
            from_rank: u32_at(bytes, 20),
            to_rank: u32_at(bytes, 24),
            same_byte_order: bytes[28..32] == BYTE_ORDER_MARK,
        })
    }
}

/// Why an accepting rank turned a connection down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
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

    pub(super) fn encode(&self) -> [u8; REPLY_BYTES] {
        let mut bytes = [0u8; REPLY_BYTES];
        bytes[0..4].copy_from_slice(&MAGIC);
        bytes[4..6].copy_from_slice(&self.version.to_le_bytes());
        bytes[6..8].copy_from_slice(&self.refusal.map_or(0, Refusal::code).to_le_bytes());
        bytes[8..16].copy_from_slice(&self.round.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.world.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.rank.to_le_bytes());
        bytes
    }

    /// `None` when the bytes are not a gpuvet reply (or name an unknown refusal).
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

/// What the accepting side makes of a hello: accept it, or the reason to refuse.
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

    #[test]
    fn hello_and_reply_survive_the_wire() {
        let hello = Hello::new(7, 4, 1, 3);
        assert_eq!(Hello::decode(&hello.encode()), Some(hello));
        for refusal in [None, Some(Refusal::Round), Some(Refusal::ByteOrder)] {
            let reply = Reply::new(refusal, 9, 4, 3);
            assert_eq!(Reply::decode(&reply.encode()), Some(reply));
        }
    }

    #[test]
    fn garbage_is_not_a_hello() {
        assert_eq!(Hello::decode(&[b'G'; HELLO_BYTES]), None);
        let mut reply = Reply::new(None, 1, 2, 0).encode();
        reply[6] = 99; // an unknown refusal code
        assert_eq!(Reply::decode(&reply), None);
    }

    #[test]
    fn a_foreign_byte_order_is_seen() {
        let mut bytes = Hello::new(1, 2, 0, 1).encode();
        bytes[28..32].reverse();
        assert!(!Hello::decode(&bytes).unwrap().same_byte_order);
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
