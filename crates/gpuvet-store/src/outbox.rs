//! The outbox: reports and events waiting to be sent to a central `gpuvet serve`.
//!
//! With [`Store::queue_pushes`] on, every report and event the store records is also
//! queued here in the same transaction, so an entry is never recorded without being
//! queued, nor queued without being recorded. A sender takes the entries that are due,
//! deletes each one the server accepted, and pushes the next try of each failure back
//! with [`next_try_delay_ms`]. Each entry carries the report's or event's own id, which
//! the server uses to store it once however often it arrives.

use serde::{Deserialize, Serialize};

use crate::db::Db;
use crate::error::During;
use crate::value::params;
use crate::{Store, StoreError};

/// What an outbox entry holds, which decides where it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxKind {
    /// A [`gpuvet_model::events::AttemptStart`].
    Attempt,
    /// A [`gpuvet_model::results::RunReport`].
    Report,
    /// A [`gpuvet_model::events::EventRecord`].
    Event,
}

impl OutboxKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxKind::Attempt => "attempt",
            OutboxKind::Report => "report",
            OutboxKind::Event => "event",
        }
    }

    fn parse(name: &str) -> Option<OutboxKind> {
        [OutboxKind::Attempt, OutboxKind::Report, OutboxKind::Event]
            .into_iter()
            .find(|k| k.as_str() == name)
    }
}

/// One queued report or event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEntry {
    pub id: i64,
    pub kind: OutboxKind,
    /// The report's or event's own id; for an attempt, its job, node and number.
    pub item_id: String,
    /// The JSON body to send.
    pub body: String,
    pub created_at_ms: u64,
    /// Failed sends so far.
    pub tries: u32,
    pub next_try_at_ms: u64,
    pub last_error: Option<String>,
}

/// The first retry waits this long; each later one twice as long as the one before.
pub const FIRST_RETRY_MS: u64 = 1_000;
/// No retry waits longer than this.
pub const MAX_RETRY_MS: u64 = 5 * 60 * 1_000;

/// How long to wait before the next try of an entry that has failed `tries` times
/// (at least 1): 1 s, 2 s, 4 s, … up to 5 minutes. No jitter: each node has its
/// own outbox and its entries fail together, so they retry together anyway.
pub fn next_try_delay_ms(tries: u32) -> u64 {
    let doublings = tries.saturating_sub(1).min(32);
    FIRST_RETRY_MS
        .saturating_mul(1u64 << doublings)
        .min(MAX_RETRY_MS)
}

/// Queues one entry inside the caller's transaction. An item already queued (or
/// queued and not yet sent) is not queued again.
pub(crate) fn enqueue(
    db: &Db,
    kind: OutboxKind,
    item_id: &str,
    body: &str,
    now_ms: u64,
    action: &'static str,
) -> Result<(), StoreError> {
    db.execute(
        "INSERT INTO outbox (kind, item_id, body, created_at_ms, tries, next_try_at_ms)
         VALUES (?1, ?2, ?3, ?4, 0, ?4)
         ON CONFLICT (kind, item_id) DO NOTHING",
        &params![kind.as_str(), item_id, body, now_ms],
    )
    .during(action)?;
    Ok(())
}

impl Store {
    /// Whether attempts, reports and events recorded from now on are also queued for
    /// sending.
    pub fn queue_pushes(&mut self, on: bool) {
        self.queue_pushes = on;
    }

    /// Entries whose next try is due at `now_ms`, the oldest first, at most `limit`.
    pub fn outbox_due(&self, now_ms: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        const ACTION: &str = "read the outbox";
        let rows = self
            .db
            .query(
                "SELECT id, kind, item_id, body, created_at_ms, tries, next_try_at_ms, last_error
                 FROM outbox WHERE next_try_at_ms <= ?1 ORDER BY id LIMIT ?2",
                &params![
                    i64::try_from(now_ms).unwrap_or(i64::MAX),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
            )
            .and_then(|rows| {
                rows.into_iter()
                    .map(|mut row| {
                        Ok((
                            row.get::<i64>(0)?,
                            row.get::<String>(1)?,
                            row.get::<String>(2)?,
                            row.get::<String>(3)?,
                            row.get::<u64>(4)?,
                            row.get::<u32>(5)?,
                            row.get::<u64>(6)?,
                            row.get::<Option<String>>(7)?,
                        ))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .during(ACTION)?;
        rows.into_iter()
            .map(
                |(id, kind, item_id, body, created_at_ms, tries, next_try_at_ms, last_error)| {
                    let kind = OutboxKind::parse(&kind).ok_or_else(|| StoreError::Decode {
                        table: "outbox",
                        id,
                        message: format!("unknown kind `{kind}`"),
                    })?;
                    Ok(OutboxEntry {
                        id,
                        kind,
                        item_id,
                        body,
                        created_at_ms,
                        tries,
                        next_try_at_ms,
                        last_error,
                    })
                },
            )
            .collect()
    }

    /// How many entries wait, due or not.
    pub fn outbox_len(&self) -> Result<u64, StoreError> {
        self.db
            .query_one("SELECT COUNT(*) FROM outbox", &[])
            .and_then(|mut row| row.get(0))
            .during("count the outbox")
    }

    /// The earliest next try of any waiting entry; `None` when the outbox is empty.
    pub fn outbox_next_try_ms(&self) -> Result<Option<u64>, StoreError> {
        self.db
            .query_one("SELECT MIN(next_try_at_ms) FROM outbox", &[])
            .and_then(|mut row| row.get(0))
            .during("read the outbox")
    }

    /// Removes an entry the server accepted. Removing one that is not there (already
    /// removed) does nothing.
    pub fn outbox_sent(&mut self, id: i64) -> Result<(), StoreError> {
        self.db
            .execute("DELETE FROM outbox WHERE id = ?1", &params![id])
            .during("remove a sent entry from the outbox")?;
        Ok(())
    }

    /// Records a failed send of an entry and when to try it next
    /// ([`next_try_delay_ms`] after `now_ms`); returns that time. An entry that is not
    /// in the outbox is [`StoreError::NotFound`].
    pub fn outbox_failed(&mut self, id: i64, error: &str, now_ms: u64) -> Result<u64, StoreError> {
        const ACTION: &str = "record a failed send in the outbox";
        self.db.write(ACTION, |db| {
            let tries: u32 = db
                .query_opt("SELECT tries FROM outbox WHERE id = ?1", &params![id])
                .and_then(|row| row.map(|mut row| row.get(0)).transpose())
                .during(ACTION)?
                .ok_or_else(|| StoreError::NotFound {
                    what: "outbox entry",
                    id: id.to_string(),
                })?;
            let tries = tries.saturating_add(1);
            let next_try_at_ms = now_ms.saturating_add(next_try_delay_ms(tries));
            db.execute(
                "UPDATE outbox SET tries = ?2, next_try_at_ms = ?3, last_error = ?4 WHERE id = ?1",
                &params![id, tries, next_try_at_ms, error],
            )
            .during(ACTION)?;
            Ok(next_try_at_ms)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_from_one_second_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=12).map(next_try_delay_ms).collect();
        assert_eq!(
            delays,
            [
                1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000,
                300_000, 300_000
            ]
        );
        assert_eq!(next_try_delay_ms(0), 1_000);
        assert_eq!(next_try_delay_ms(u32::MAX), MAX_RETRY_MS);
    }

    #[test]
    fn kinds_round_trip_by_name() {
        for kind in [OutboxKind::Attempt, OutboxKind::Report, OutboxKind::Event] {
            assert_eq!(OutboxKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(OutboxKind::parse("metric"), None);
    }
}
