//! A budget of pushed events per node, so that one flapping source (an XID storm, a
//! log line repeated ten times a second) cannot bloat the store or put the pipeline
//! behind for every other node: each node has a bucket of `burst` events that refills
//! at `rate_per_sec`; an event past it is answered `429` with `Retry-After`, stays in
//! the node's outbox, and comes again later (the sender holds off as told).
//!
//! Per node by name, as pushed: a node that lies about its name only spends another
//! name's budget, and writes still need the token. The table of buckets is bounded:
//! past [`MAX_NODES`] names, the full buckets (nodes that have been quiet) are dropped,
//! since a dropped bucket comes back full.
//!
//! A repeat of an event stored lately (`gpuvet_model::event_fold`: same attempt, kind,
//! lane and subject, within the window) costs no budget: the store counts it on that
//! event's row and adds none, so a source that repeats one event is never refused,
//! while one that makes up new events still is. Which events were stored lately is
//! [`RecentEvents`]'s guess, kept from the store's answers; a wrong guess costs at
//! most one row that spent no budget, and the table is bounded ([`MAX_RECENT`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gpuvet_model::event_fold::{FOLD_WINDOW_MS, folds_into};

/// Names kept before the quiet ones are dropped.
pub const MAX_NODES: usize = 65_536;

/// Repeat keys [`RecentEvents`] keeps before it drops the ones past their window.
pub const MAX_RECENT: usize = 65_536;

/// The repeat keys (`RepeatKey::in_attempt`) of events stored lately, with the first
/// and last times seen of each: whether a pushed event will be counted as a repeat.
#[derive(Debug, Default)]
pub(crate) struct RecentEvents {
    keys: Mutex<HashMap<String, (u64, u64)>>,
}

impl RecentEvents {
    /// Whether an event of `key` at `time_ms` folds into one stored lately.
    pub fn folds(&self, key: &str, time_ms: u64) -> bool {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.get(key)
            .is_some_and(|&(first, last)| folds_into(first, last, time_ms))
    }

    /// The store took an event of `key` at `time_ms`.
    pub fn stored(&self, key: &str, time_ms: u64) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((first, last)) = keys.get_mut(key) {
            if folds_into(*first, *last, time_ms) {
                *first = (*first).min(time_ms);
                *last = (*last).max(time_ms);
            } else {
                // A row of its own now.
                (*first, *last) = (time_ms, time_ms);
            }
            return;
        }
        if keys.len() >= MAX_RECENT {
            keys.retain(|_, &mut (_, last)| last.saturating_add(FOLD_WINDOW_MS) >= time_ms);
            if keys.len() >= MAX_RECENT {
                // Forgetting costs each key one more event of its node's budget.
                keys.clear();
            }
        }
        keys.insert(key.to_owned(), (time_ms, time_ms));
    }
}

/// How many events a node may push.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventLimits {
    /// Events a second, sustained.
    pub rate_per_sec: f64,
    /// Events at once after a quiet spell: a run's start records a few dozen.
    pub burst: f64,
}

impl EventLimits {
    pub const DEFAULT_RATE: f64 = 10.0;
    pub const DEFAULT_BURST: f64 = 200.0;
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits {
            rate_per_sec: Self::DEFAULT_RATE,
            burst: Self::DEFAULT_BURST,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Every node's bucket.
#[derive(Debug)]
pub(crate) struct EventLimiter {
    limits: EventLimits,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl EventLimiter {
    pub fn new(limits: EventLimits) -> EventLimiter {
        EventLimiter {
            limits,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn limits(&self) -> EventLimits {
        self.limits
    }

    /// Takes one event of `node`'s budget at `now`; how long to wait when there is none.
    pub fn take(&self, node: &str, now: Instant) -> Result<(), Duration> {
        let EventLimits {
            rate_per_sec,
            burst,
        } = self.limits;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_NODES && !buckets.contains_key(node) {
            buckets.retain(|_, b| refill(*b, now, rate_per_sec, burst) < burst);
        }
        let bucket = buckets.entry(node.to_owned()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let tokens = refill(*bucket, now, rate_per_sec, burst);
        if tokens >= 1.0 {
            *bucket = Bucket {
                tokens: tokens - 1.0,
                at: now,
            };
            Ok(())
        } else {
            *bucket = Bucket { tokens, at: now };
            Err(Duration::from_secs_f64((1.0 - tokens) / rate_per_sec))
        }
    }
}

fn refill(bucket: Bucket, now: Instant, rate_per_sec: f64, burst: f64) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    (bucket.tokens + elapsed * rate_per_sec).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rate: f64, burst: f64) -> EventLimiter {
        EventLimiter::new(EventLimits {
            rate_per_sec: rate,
            burst,
        })
    }

    #[test]
    fn a_node_gets_its_burst_then_its_rate_and_is_told_how_long_to_wait() {
        let limiter = limiter(10.0, 3.0);
        let start = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take("n0", start).is_ok());
        }
        let wait = limiter.take("n0", start).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        // A tenth of a second later, one more.
        let later = start + Duration::from_millis(100);
        assert!(limiter.take("n0", later).is_ok());
        assert!(limiter.take("n0", later).is_err());
        // Never more than the burst, however long it was quiet.
        let much_later = start + Duration::from_secs(3_600);
        for _ in 0..3 {
            assert!(limiter.take("n0", much_later).is_ok());
        }
        assert!(limiter.take("n0", much_later).is_err());
    }

    #[test]
    fn one_nodes_flood_spends_no_other_nodes_budget() {
        let limiter = limiter(1.0, 2.0);
        let now = Instant::now();
        for _ in 0..2 {
            limiter.take("flood", now).unwrap();
        }
        assert!(limiter.take("flood", now).is_err());
        assert!(limiter.take("calm", now).is_ok());
    }

    #[test]
    fn an_event_folds_when_its_key_was_stored_within_the_window() {
        let recent = RecentEvents::default();
        let t0 = 1_700_000_000_000;
        assert!(!recent.folds("k", t0), "nothing stored yet");
        recent.stored("k", t0);
        assert!(recent.folds("k", t0 + 1));
        assert!(!recent.folds("other", t0 + 1));
        // The window slides with each repeat stored.
        recent.stored("k", t0 + FOLD_WINDOW_MS);
        assert!(recent.folds("k", t0 + 2 * FOLD_WINDOW_MS));
        assert!(!recent.folds("k", t0 + 2 * FOLD_WINDOW_MS + 1));
        // Past it, the store began a row of its own: the window starts there.
        recent.stored("k", t0 + 5 * FOLD_WINDOW_MS);
        assert!(!recent.folds("k", t0 + 2 * FOLD_WINDOW_MS));
        assert!(recent.folds("k", t0 + 5 * FOLD_WINDOW_MS + 1));
    }

    #[test]
    fn past_the_most_keys_those_past_their_window_go_first() {
        let recent = RecentEvents::default();
        let t0 = 1_700_000_000_000;
        for i in 0..MAX_RECENT - 1 {
            recent.stored(&format!("old-{i}"), t0);
        }
        let later = t0 + 2 * FOLD_WINDOW_MS;
        recent.stored("busy", later);
        recent.stored("new", later);
        assert_eq!(recent.keys.lock().unwrap().len(), 2, "the old keys went");
        assert!(recent.folds("busy", later + 1) && recent.folds("new", later + 1));
        // Full of keys all within their window: all go (each costs one event of
        // budget again), and the new one is kept.
        for i in 0..MAX_RECENT - 2 {
            recent.stored(&format!("fresh-{i}"), later);
        }
        assert_eq!(recent.keys.lock().unwrap().len(), MAX_RECENT);
        recent.stored("last", later);
        assert_eq!(recent.keys.lock().unwrap().len(), 1);
        assert!(recent.folds("last", later) && !recent.folds("busy", later));
    }

    #[test]
    fn past_the_most_names_the_quiet_ones_go_and_the_busy_ones_stay() {
        let limiter = limiter(1.0, 2.0);
        let now = Instant::now();
        limiter.take("busy", now).unwrap();
        limiter.take("busy", now).unwrap();
        {
            let mut buckets = limiter.buckets.lock().unwrap();
            for i in 0..MAX_NODES {
                buckets.insert(
                    format!("quiet-{i}"),
                    Bucket {
                        tokens: 2.0,
                        at: now,
                    },
                );
            }
        }
        limiter.take("new", now).unwrap();
        let buckets = limiter.buckets.lock().unwrap();
        assert_eq!(buckets.len(), 2, "the full buckets went");
        assert!(buckets.contains_key("busy") && buckets.contains_key("new"));
    }
}
