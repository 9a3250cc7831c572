//! Ids that reports and events carry from the moment they are made, so that storing or
//! sending one twice (a retried push, an outbox drained twice) stores it once.
//!
//! An id is 128 random bits from the operating system, as 32 lowercase hex digits.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::hex::to_hex;
use crate::time::unix_now_ns;

/// Digits of an id.
pub const ID_LEN: usize = 32;

/// A new id for a report or an event.
pub fn new_id() -> String {
    let mut bytes = [0u8; ID_LEN / 2];
    if getrandom::fill(&mut bytes).is_err() {
        // The OS's random source failing is close to impossible on Linux; when it does,
        // the clock, the process and a counter still make an id no other call shares.
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let process = u64::from(std::process::id()) << 32 | (call & 0xFFFF_FFFF);
        bytes[..8].copy_from_slice(&(unix_now_ns() as u64).to_be_bytes());
        bytes[8..].copy_from_slice(&process.to_be_bytes());
    }
    to_hex(&bytes)
}

/// Whether `text` has the form [`new_id`] gives.
pub fn is_id(text: &str) -> bool {
    text.len() == ID_LEN && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_of_the_right_length_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert!(is_id(&a) && is_id(&b), "{a} {b}");
        assert_ne!(a, b);
        assert!(!is_id("ABCDEF0123456789abcdef0123456789"));
        assert!(!is_id("abc"));
    }
}
