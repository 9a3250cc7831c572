//! When an event repeats one already recorded: the one rule by which the Kubernetes
//! Events (`gpuvet-kube`, a repeat adds to the Event's `series`) and the stores (a
//! repeat adds to the first row's `count`) fold repeats, so that a flapping source
//! grows neither by a row or an object per sighting.
//!
//! Two events are repeats when they come from the same place (the same attempt of the
//! same instance on the same node; for an Event, the same pod about the same object)
//! and say the same thing: the same kind, lane and subject ([`RepeatKey`]; a runtime
//! finding's subject is its condition and GPU, so its message may differ by a count or
//! a temperature). The row or Event carries the latest message. A repeat folds while
//! it comes within [`FOLD_WINDOW_MS`] of the last one seen (or, arriving late, of the
//! first); after a quiet spell it starts anew.

use serde::Deserialize;

use crate::events::{Attempt, EventKind, NewEvent};
use crate::results::Lane;
use crate::runtime::{GpuId, RuntimeCheck};
use crate::time::format_utc_ms;

/// A repeat within this long of the last one folds into it: client-go's event
/// aggregator's interval (`defaultAggregateIntervalInSeconds`, 600 s).
pub const FOLD_WINDOW_MS: u64 = 10 * 60 * 1000;

/// What an event says, for telling repeats apart: its kind, its lane, and its subject.
/// A Kubernetes Event's subject is the caller's key (a runtime finding's, or none); a
/// stored event's is [`RepeatKey::of_event`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepeatKey<'a> {
    pub kind: EventKind,
    pub lane: Option<Lane>,
    pub subject: std::borrow::Cow<'a, str>,
}

impl<'a> RepeatKey<'a> {
    /// The key of an event as recorded. A `RuntimeCheckFailed` event's subject is its
    /// finding's condition and GPU ([`runtime_subject`], from its details), whatever
    /// its message says (a count, a temperature); any other event's is its message,
    /// which is what tells one exit or failed start from another.
    pub fn of_event(event: &NewEvent) -> RepeatKey<'static> {
        let subject = match event.kind {
            EventKind::RuntimeCheckFailed => {
                finding_subject(&event.details).unwrap_or_else(|| event.message.clone())
            }
            _ => event.message.clone(),
        };
        RepeatKey {
            kind: event.kind,
            lane: event.lane,
            subject: subject.into(),
        }
    }

    /// A hash of the key, stable across processes and Rust versions: `regarding` (what
    /// the event is about) before it and `source` (who reports it) after it.
    pub fn hash(&self, regarding: &[&str], source: &str) -> u64 {
        let lane = self.lane.map(Lane::as_str).unwrap_or("");
        let parts =
            regarding
                .iter()
                .copied()
                .chain([self.kind.as_str(), lane, &self.subject, source]);
        fnv1a(parts)
    }

    /// The key under which a store keeps the event of `attempt`: 16 hex digits.
    pub fn in_attempt(&self, attempt: &Attempt) -> String {
        let number = attempt.attempt.to_string();
        let hash = self.hash(
            &[&attempt.job_id, &number, &attempt.node],
            &attempt.instance,
        );
        format!("{hash:016x}")
    }
}

/// The subject of a runtime finding: its condition, and the GPU when it has one.
pub fn runtime_subject(check: &RuntimeCheck, gpu: Option<&GpuId>) -> String {
    match gpu {
        // Debug, not Display: the Events already named by it keep their names.
        Some(gpu) => format!("{check}:{gpu:?}"),
        None => check.to_string(),
    }
}

/// The subject of a `RuntimeCheckFailed` event's details; `None` when they hold no
/// finding.
fn finding_subject(details: &serde_json::Value) -> Option<String> {
    #[derive(Deserialize)]
    struct Subject {
        check: RuntimeCheck,
        #[serde(default)]
        gpu: Option<GpuId>,
    }
    Subject::deserialize(details)
        .ok()
        .map(|s| runtime_subject(&s.check, s.gpu.as_ref()))
}

/// Whether an event at `time_ms` folds into one first seen at `first_ms` and last at
/// `last_seen_ms`: within [`FOLD_WINDOW_MS`] of its sightings, after the last or (one
/// that arrives late, past a newer one) before the first.
pub fn folds_into(first_ms: u64, last_seen_ms: u64, time_ms: u64) -> bool {
    time_ms.saturating_add(FOLD_WINDOW_MS) >= first_ms
        && time_ms <= last_seen_ms.saturating_add(FOLD_WINDOW_MS)
}

/// How an event that happened `count` times reads beside its message:
/// `×5, last 2026-11-30T04:05:06.789Z`; `None` for one seen once.
pub fn repeats_note(count: u64, last_seen_ms: Option<u64>) -> Option<String> {
    if count <= 1 {
        return None;
    }
    Some(match last_seen_ms {
        Some(ms) => format!("×{count}, last {}", format_utc_ms(ms)),
        None => format!("×{count}"),
    })
}

/// A 64-bit hash of an event's id, under which a store remembers a repeat it counted.
/// Two repeats of one event whose ids share it (odds of about n²/2⁶⁵ for n repeats)
/// would be counted once.
pub fn id_hash(event_id: &str) -> i64 {
    fnv1a([event_id]) as i64
}

/// FNV-1a over the parts, each followed by a byte no UTF-8 text holds.
fn fnv1a<'p>(parts: impl IntoIterator<Item = &'p str>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime_event(check: &str, gpu: Option<u32>, message: &str) -> NewEvent {
        let mut details = serde_json::json!({ "check": check, "message": message });
        if let Some(index) = gpu {
            details["gpu"] = serde_json::json!({ "index": index });
        }
        NewEvent {
            event_id: String::new(),
            time_ms: 1_000,
            kind: EventKind::RuntimeCheckFailed,
            lane: Some(Lane::Host),
            message: message.to_owned(),
            details,
        }
    }

    fn attempt(node: &str) -> Attempt {
        Attempt {
            job_id: "job".into(),
            attempt: 1,
            node: node.into(),
            instance: format!("pod-{node}"),
        }
    }

    #[test]
    fn a_repeat_is_the_same_kind_lane_and_subject_whatever_its_message() {
        let first = RepeatKey::of_event(&runtime_event("xid", Some(3), "xid 79 on gpu 3"));
        let again = RepeatKey::of_event(&runtime_event("xid", Some(3), "xid 79 again"));
        assert_eq!(first, again);
        assert_eq!(
            first.in_attempt(&attempt("n0")),
            again.in_attempt(&attempt("n0"))
        );
        let other_gpu = RepeatKey::of_event(&runtime_event("xid", Some(4), "xid 79 on gpu 4"));
        let other_check = RepeatKey::of_event(&runtime_event("probe.hung", Some(3), "hung"));
        for other in [&other_gpu, &other_check] {
            assert_ne!(&first, other);
            assert_ne!(
                first.in_attempt(&attempt("n0")),
                other.in_attempt(&attempt("n0"))
            );
        }
        let key = first.in_attempt(&attempt("n0"));
        assert_eq!(key.len(), 16);
        // The same event elsewhere is not a repeat.
        assert_ne!(key, first.in_attempt(&attempt("n1")));
        let next_attempt = Attempt {
            attempt: 2,
            ..attempt("n0")
        };
        assert_ne!(key, first.in_attempt(&next_attempt));
        let other_lane = RepeatKey {
            lane: Some(Lane::Platform),
            ..first.clone()
        };
        assert_ne!(key, other_lane.in_attempt(&attempt("n0")));
    }

    #[test]
    fn the_subject_is_the_findings_condition_and_gpu_as_kubernetes_names_it() {
        let check = RuntimeCheck::xid();
        let gpu = GpuId {
            index: Some(3),
            ..GpuId::default()
        };
        let event = runtime_event("xid", Some(3), "x");
        assert_eq!(
            RepeatKey::of_event(&event).subject,
            runtime_subject(&check, Some(&gpu))
        );
        assert_eq!(runtime_subject(&check, None), "xid");
        // Details that hold no finding, and other kinds: the message.
        let untyped = NewEvent {
            details: serde_json::json!({"note": 1}),
            ..event.clone()
        };
        assert_eq!(RepeatKey::of_event(&untyped).subject, "x");
        let exited = NewEvent {
            kind: EventKind::InstanceExited,
            message: "exit code 137".into(),
            ..event
        };
        assert_eq!(RepeatKey::of_event(&exited).subject, "exit code 137");
    }

    #[test]
    fn a_repeat_folds_within_the_window_of_its_sightings() {
        let first = 10 * FOLD_WINDOW_MS;
        assert!(folds_into(first, first, first));
        assert!(folds_into(first, first, first + FOLD_WINDOW_MS));
        assert!(!folds_into(first, first, first + FOLD_WINDOW_MS + 1));
        // The window slides with the last sighting: a steady flood stays one row.
        let last = first + 5 * FOLD_WINDOW_MS;
        assert!(folds_into(first, last, last + FOLD_WINDOW_MS));
        assert!(folds_into(first, last, first + 1));
        // One that arrives late, older than the first, folds as far back.
        assert!(folds_into(first, last, first - FOLD_WINDOW_MS));
        assert!(!folds_into(first, last, first - FOLD_WINDOW_MS - 1));
        assert!(folds_into(0, u64::MAX, u64::MAX));
        assert!(!folds_into(u64::MAX, u64::MAX, 0));
    }

    #[test]
    fn a_counted_event_says_how_often_and_when_last() {
        assert_eq!(repeats_note(1, None), None);
        assert_eq!(repeats_note(1, Some(5)), None);
        assert_eq!(
            repeats_note(5, Some(1_796_011_506_789)).as_deref(),
            Some("×5, last 2026-11-30T04:05:06.789Z")
        );
        assert_eq!(repeats_note(2, None).as_deref(), Some("×2"));
    }

    #[test]
    fn the_hash_is_fnv1a_of_the_parts_in_order() {
        let key = RepeatKey {
            kind: EventKind::SanityCheckFailed,
            lane: Some(Lane::Host),
            subject: "".into(),
        };
        // Pinned (FNV-1a worked out apart from this code): Kubernetes Events already
        // in clusters are named by it.
        assert_eq!(
            key.hash(&["pod", "vllm-0"], "vllm-0"),
            0x7ede_0870_04b8_ebd7
        );
        assert_eq!(
            key.hash(&["pod", "vllm-0"], "vllm-0"),
            fnv1a(["pod", "vllm-0", "SanityCheckFailed", "host", "", "vllm-0"])
        );
        assert_eq!(fnv1a([]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(id_hash("x"), fnv1a(["x"]) as i64);
        assert_ne!(id_hash("e-1"), id_hash("e-2"));
        assert_ne!(fnv1a(["ab", ""]), fnv1a(["a", "b"]));
    }
}
