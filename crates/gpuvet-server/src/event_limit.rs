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

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Names kept before the quiet ones are dropped.
pub const MAX_NODES: usize = 65_536;

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
