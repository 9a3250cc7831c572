//! Forgetting what a fleet server no longer needs to keep: attempts begun before a
//! cutoff, with their reports and check results (the schema deletes those with their
//! attempt), and events from before it (an event that counts repeats, by its last
//! one). In bounded batches, each its own short write, so that pruning a year of
//! history never holds the writer long enough to delay a push: the caller calls again
//! until a batch comes back short.
//!
//! The outbox is never pruned here: an entry leaves it only once the server took it.

use crate::db::Value;
use crate::error::During;
use crate::{Store, StoreError};

/// What one batch deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Attempts, each with its reports and check results.
    pub attempts: u64,
    pub events: u64,
}

impl Pruned {
    /// Whether a batch of `batch` rows a table left nothing more to delete.
    pub fn done(&self, batch: usize) -> bool {
        self.attempts < batch as u64 && self.events < batch as u64
    }
}

impl Store {
    /// Deletes at most `batch` of the oldest attempts begun before `before_ms` (Unix
    /// milliseconds) with their reports and results, and at most `batch` events from
    /// before it, in one write.
    pub fn prune_batch(&mut self, before_ms: u64, batch: usize) -> Result<Pruned, StoreError> {
        const ACTION: &str = "prune old attempts and events";
        let before = Value::from(before_ms);
        let limit = Value::from(batch);
        self.db.write(ACTION, |db| {
            let attempts = db
                .execute(
                    "DELETE FROM attempts WHERE id IN (
                         SELECT id FROM attempts WHERE started_at_ms < ?1
                         ORDER BY started_at_ms LIMIT ?2)",
                    &[before.clone(), limit.clone()],
                )
                .during(ACTION)?;
            // An event that still repeats is kept while its last sighting is.
            let events = db
                .execute(
                    "DELETE FROM events WHERE id IN (
                         SELECT id FROM events
                         WHERE time_ms < ?1 AND COALESCE(last_seen_ms, time_ms) < ?1
                         ORDER BY time_ms LIMIT ?2)",
                    &[before.clone(), limit.clone()],
                )
                .during(ACTION)?;
            Ok(Pruned { attempts, events })
        })
    }
}
