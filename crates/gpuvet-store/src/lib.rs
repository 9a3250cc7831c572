//! gpuvet's store of attempts, sanity-check reports, per-check results, deployment
//! events, and the runtime check's state between restarts: an SQLite file on each
//! node (the embedded default), or a PostgreSQL database for a central `gpuvet serve`
//! that many nodes push to. Both hold the same schema and behave the same through
//! [`Store`]; [`StoreLocation`] says which (`--store postgres://…` or a path).
//! PostgreSQL is built only with the feature `postgres`, which the fleet server turns
//! on: a node's binary links no PostgreSQL client.
//!
//! SQLite: one file, in WAL mode with a busy timeout, so that several gpuvet processes
//! on one node (the sanity checks, the runtime check, a `gpuvet check` by hand) write
//! to it at once. PostgreSQL: one connection per handle, with TLS when the URL asks
//! for it (`sslmode`, `pg/tls.rs`). Every write that spans rows runs in one transaction: a
//! report is stored whole or not at all, two handles or processes never get the same
//! attempt number, and an item stored twice under its id (a retried push, or two
//! servers receiving it at once) is stored once. A repeat of an event
//! ([`gpuvet_model::event_fold`]) is counted on the event's row, not stored as one.
//!
//! Reports, check results and event details are kept as the JSON of the core types
//! (their serialized form is API) and decoded on the way out; a row that no longer
//! decodes is an error naming its table and id, never silently skipped. The runtime
//! check's state is opaque JSON here: its type lives with the runtime check.
//!
//! Each query is written once, for both databases, against `db.rs`'s `Db`; the
//! schemas are in `schema.rs` (SQLite) and `schema_pg.rs` (PostgreSQL), and what only
//! PostgreSQL needs is in `pg/`. The writes of pushed attempts, reports and events are
//! in `write.rs`: one at a time, or many in one transaction ([`Store::record_batch`],
//! a fleet server's group commit), each write kept or refused on its own.
//!
//! ```no_run
//! # use gpuvet_store::{Store, StoreLocation, EventFilter};
//! let mut store = Store::open_location(&StoreLocation::parse("/var/lib/gpuvet/store.db"))?;
//! let attempt = store.begin_attempt("job-1", "node-0", "pod-0", 1_700_000_000_000)?;
//! let filter = EventFilter { job_id: Some("job-1".into()), ..EventFilter::default() };
//! let events = store.events(&filter)?;
//! # Ok::<(), gpuvet_store::StoreError>(())
//! ```

mod db;
mod error;
mod history;
mod nodes;
mod open;
mod outbox;
mod overview;
#[cfg(feature = "postgres")]
mod pg;
mod retention;
mod schema;
#[cfg(feature = "postgres")]
mod schema_pg;
mod value;
mod write;

use std::path::PathBuf;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::event_fold::{self, RepeatKey};
use gpuvet_model::events::{Attempt, AttemptStart, Event, EventKind, EventRecord, NewEvent};
use gpuvet_model::record::JobRecord;
use gpuvet_model::results::{CheckResult, Lane, RunReport};
use gpuvet_model::time::unix_now_ms;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::db::{Db, IdSpace, Row, Value};
use crate::error::During;
pub use crate::error::StoreError;
pub use crate::open::{StoreLocation, default_path};
pub use crate::outbox::{FIRST_RETRY_MS, MAX_RETRY_MS, OutboxEntry, OutboxKind, next_try_delay_ms};
pub use crate::overview::RunFilter;
pub use crate::retention::Pruned;
pub use crate::schema::SCHEMA_VERSION;
use crate::value::params;
pub use crate::write::{PreparedWrite, Written};
pub use gpuvet_model::node_history::{
    CheckPoint, CheckSeries, NodeFailures, NodeFinding, NodeHistory,
};
pub use gpuvet_model::overview::StoredRun;

/// Which events to read. Every field that is set must match; `limit` keeps the first
/// events in time order (the last ones with `newest_first`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EventFilter {
    pub job_id: Option<String>,
    pub attempt: Option<u32>,
    pub kind: Option<EventKind>,
    pub node: Option<String>,
    /// Unix milliseconds: only events at or after this time.
    pub since_ms: Option<u64>,
    /// Unix milliseconds: only events before this time.
    pub until_ms: Option<u64>,
    pub limit: Option<usize>,
    /// Newest first instead of oldest first.
    pub newest_first: bool,
}

/// Which check results to read. Every field that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResultFilter {
    pub job_id: Option<String>,
    pub attempt: Option<u32>,
    pub check: Option<CheckName>,
    pub node: Option<String>,
}

/// One check result as stored, with the attempt and the run it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoredResult {
    #[serde(flatten)]
    pub attempt: Attempt,
    pub run_id: i64,
    /// Unix time in milliseconds when the run started.
    pub started_at_ms: u64,
    pub result: CheckResult,
}

/// An open store. Each handle is one SQLite connection or one PostgreSQL connection:
/// `Send`, not `Sync`; give each thread or process its own. (On PostgreSQL, the
/// `postgres` client blocks on its own runtime: from async code, use a handle inside
/// `spawn_blocking`.)
#[derive(Debug)]
pub struct Store {
    db: Db,
    /// The SQLite file; `None` in memory and on PostgreSQL.
    path: Option<PathBuf>,
    /// [`Store::location_display`].
    display: String,
    /// Whether recorded reports and events are also queued in the outbox.
    queue_pushes: bool,
}

impl Store {
    /// Starts the next attempt of `job_id` on `node`: one more than the highest
    /// recorded so far, starting at 1.
    pub fn begin_attempt(
        &mut self,
        job_id: &str,
        node: &str,
        instance: &str,
        now_ms: u64,
    ) -> Result<Attempt, StoreError> {
        self.begin_attempt_at_least(job_id, node, instance, 1, now_ms)
    }

    /// Starts the next attempt of `job_id` on `node`, numbered at least `at_least`: a
    /// requeued Slurm job is attempt `SLURM_RESTART_COUNT + 1` on whichever nodes it
    /// lands, though their stores have never seen the job.
    pub fn begin_attempt_at_least(
        &mut self,
        job_id: &str,
        node: &str,
        instance: &str,
        at_least: u32,
        now_ms: u64,
    ) -> Result<Attempt, StoreError> {
        const ACTION: &str = "begin an attempt in the store";
        let queue = self.queue_pushes;
        let attempt = self.db.write(ACTION, |db| {
            db.lock_attempt_numbers().during(ACTION)?;
            let attempt: u32 = db
                .query_one(
                    "SELECT COALESCE(MAX(attempt), 0) + 1 FROM attempts
                     WHERE job_id = ?1 AND node = ?2",
                    &params![job_id, node],
                )
                .and_then(|mut row| row.get(0))
                .during(ACTION)?;
            let attempt = attempt.max(at_least.max(1));
            db.execute(
                "INSERT INTO attempts (job_id, node, instance, attempt, started_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                &params![job_id, node, instance, attempt, now_ms],
            )
            .during(ACTION)?;
            if queue {
                let start = AttemptStart {
                    attempt: Attempt {
                        job_id: job_id.to_owned(),
                        attempt,
                        node: node.to_owned(),
                        instance: instance.to_owned(),
                    },
                    started_at_ms: now_ms,
                };
                let item_id = encode("attempt", &(job_id, node, attempt))?;
                let body = encode("attempt", &start)?;
                outbox::enqueue(db, OutboxKind::Attempt, &item_id, &body, now_ms, ACTION)?;
            }
            Ok(attempt)
        })?;
        Ok(Attempt {
            job_id: job_id.to_owned(),
            attempt,
            node: node.to_owned(),
            instance: instance.to_owned(),
        })
    }

    /// Records runtime events of `attempt` and, when given, replaces the runtime
    /// check's saved state of its job and node, in one transaction: a state that says
    /// a finding was reported is never stored without the finding's event, nor the
    /// event without the state. Returns the events as stored.
    pub fn record_runtime<S: Serialize + ?Sized>(
        &mut self,
        attempt: &Attempt,
        events: &[NewEvent],
        state: Option<&S>,
        now_ms: u64,
    ) -> Result<Vec<Event>, StoreError> {
        const ACTION: &str = "record the runtime check's events and state in the store";
        let details = events
            .iter()
            .map(|e| encode("event details", &e.details))
            .collect::<Result<Vec<_>, _>>()?;
        let keys: Vec<String> = events
            .iter()
            .map(|e| RepeatKey::of_event(e).in_attempt(attempt))
            .collect();
        let state_json = state
            .map(|s| encode("runtime check state", s))
            .transpose()?;
        let queue = self.queue_pushes;
        self.db.write(ACTION, |db| {
            db.lock_ids(
                events
                    .iter()
                    .filter_map(|e| non_empty(&e.event_id))
                    .map(|id| (IdSpace::Event, id))
                    .chain(keys.iter().map(|key| (IdSpace::Repeat, key.as_str()))),
            )
            .during(ACTION)?;
            let mut stored = Vec::with_capacity(events.len());
            for ((event, details), key) in events.iter().zip(&details).zip(&keys) {
                stored.push(
                    insert_event(db, attempt, event, details, key, queue, ACTION)?
                        .into_event(attempt, event),
                );
            }
            if let Some(json) = &state_json {
                db.execute(
                    "INSERT INTO watch_state (job_id, node, saved_at_ms, state_json)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (job_id, node) DO UPDATE
                     SET saved_at_ms = excluded.saved_at_ms, state_json = excluded.state_json",
                    &params![&attempt.job_id, &attempt.node, now_ms, json],
                )
                .during(ACTION)?;
            }
            Ok(stored)
        })
    }

    /// The runtime check's state last saved for `job_id` on `node`, with the time it
    /// was saved; `None` when none was.
    pub fn watch_state<S: DeserializeOwned>(
        &self,
        job_id: &str,
        node: &str,
    ) -> Result<Option<(u64, S)>, StoreError> {
        let row = self
            .db
            .query_opt(
                "SELECT id, saved_at_ms, state_json FROM watch_state WHERE job_id = ?1 AND node = ?2",
                &params![job_id, node],
            )
            .and_then(|row| {
                row.map(|mut row| {
                    Ok((
                        row.get::<i64>(0)?,
                        row.get::<u64>(1)?,
                        row.get::<String>(2)?,
                    ))
                })
                .transpose()
            })
            .during("read the runtime check's state from the store")?;
        row.map(|(id, saved_at_ms, json)| Ok((saved_at_ms, decode("watch_state", id, &json)?)))
            .transpose()
    }

    /// The events that match `filter`, in time order (then in the order recorded).
    pub fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError> {
        const ACTION: &str = "read events from the store";
        let mut query = Query::new(
            "SELECT id, time_ms, job_id, attempt, node, instance, kind, lane, message, details,
                    event_id, count, last_seen_ms
             FROM events",
        );
        event_conditions(&mut query, filter);
        query.sql.push_str(if filter.newest_first {
            " ORDER BY time_ms DESC, id DESC LIMIT ?"
        } else {
            " ORDER BY time_ms, id LIMIT ?"
        });
        query.args.push(self.db.limit(filter.limit));

        let rows = query.rows(&self.db, RawEvent::from_row).during(ACTION)?;
        rows.into_iter().map(RawEvent::decode).collect()
    }

    /// How many events match `filter`, ignoring its `limit`.
    pub fn count_events(&self, filter: &EventFilter) -> Result<u64, StoreError> {
        let mut query = Query::new("SELECT COUNT(*) FROM events");
        event_conditions(&mut query, filter);
        let counts = query
            .rows(&self.db, |row| row.get::<u64>(0))
            .during("count events in the store")?;
        Ok(counts.into_iter().next().unwrap_or(0))
    }

    /// The check results that match `filter`, by run start time, then run, then the
    /// check's place in its report.
    pub fn results(&self, filter: &ResultFilter) -> Result<Vec<StoredResult>, StoreError> {
        const ACTION: &str = "read check results from the store";
        let mut query = Query::new(
            "SELECT c.id, a.job_id, a.attempt, a.node, a.instance, r.id, r.started_at_ms, c.result_json
             FROM check_results c
             JOIN runs r ON r.id = c.run_id
             JOIN attempts a ON a.id = r.attempt_id",
        );
        query.filter("a.job_id", filter.job_id.as_deref());
        query.filter("a.attempt", filter.attempt);
        query.filter("c.check_name", filter.check.map(|c| c.as_str()));
        query.filter("a.node", filter.node.as_deref());
        query
            .sql
            .push_str(" ORDER BY r.started_at_ms, r.id, c.position");

        let rows = query
            .rows(&self.db, |row| {
                Ok((
                    row.get::<i64>(0)?,
                    Attempt {
                        job_id: row.get(1)?,
                        attempt: row.get(2)?,
                        node: row.get(3)?,
                        instance: row.get(4)?,
                    },
                    row.get::<i64>(5)?,
                    row.get::<u64>(6)?,
                    row.get::<String>(7)?,
                ))
            })
            .during(ACTION)?;
        rows.into_iter()
            .map(|(id, attempt, run_id, started_at_ms, json)| {
                Ok(StoredResult {
                    attempt,
                    run_id,
                    started_at_ms,
                    result: decode("check_results", id, &json)?,
                })
            })
            .collect()
    }

    /// The highest attempt number of `job_id` on any node; `None` when it has none.
    pub fn latest_attempt(&self, job_id: &str) -> Result<Option<u32>, StoreError> {
        self.db
            .query_one(
                "SELECT MAX(attempt) FROM attempts WHERE job_id = ?1",
                &params![job_id],
            )
            .and_then(|mut row| row.get(0))
            .during("read the latest attempt from the store")
    }

    /// Everything kept about one attempt of a job: every node's report and every
    /// event, in time order. `None` when the store holds neither.
    pub fn job_record(&self, job_id: &str, attempt: u32) -> Result<Option<JobRecord>, StoreError> {
        let reports = self.reports(job_id, attempt)?;
        let events = self.events(&EventFilter {
            job_id: Some(job_id.to_owned()),
            attempt: Some(attempt),
            ..EventFilter::default()
        })?;
        if reports.is_empty() && events.is_empty() {
            return Ok(None);
        }
        Ok(Some(JobRecord {
            job_id: job_id.to_owned(),
            attempt,
            reports,
            events,
        }))
    }

    /// The reports of one attempt of a job, from every node, by start time.
    pub fn reports(&self, job_id: &str, attempt: u32) -> Result<Vec<RunReport>, StoreError> {
        let rows = self
            .db
            .query(
                "SELECT r.id, r.report_json
                 FROM runs r JOIN attempts a ON a.id = r.attempt_id
                 WHERE a.job_id = ?1 AND a.attempt = ?2
                 ORDER BY r.started_at_ms, r.id",
                &params![job_id, attempt],
            )
            .and_then(|rows| {
                rows.into_iter()
                    .map(|mut row| Ok((row.get::<i64>(0)?, row.get::<String>(1)?)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .during("read reports from the store")?;
        rows.into_iter()
            .map(|(id, json)| decode("runs", id, &json))
            .collect()
    }
}

/// An event row as one write left it: its id, and how many times it has happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredEvent {
    pub id: i64,
    pub count: u64,
    pub last_seen_ms: Option<u64>,
}

impl StoredEvent {
    fn into_event(self, attempt: &Attempt, event: &NewEvent) -> Event {
        Event {
            id: self.id,
            attempt: attempt.clone(),
            event: event.clone(),
            count: self.count,
            last_seen_ms: self.last_seen_ms,
        }
    }
}

/// Stores one event (its details already encoded, `repeat_key` its
/// [`RepeatKey::in_attempt`]) and queues it in the outbox when `queue` is set. Runs
/// inside the caller's write, which holds the locks of the event's id and key.
///
/// - An event whose id is already stored is not stored again: its row is returned
///   when it is the same event, and [`StoreError::IdConflict`] when it is not. A
///   repeat counted before returns the row it was counted on, unchanged.
/// - A repeat of an event stored within [`event_fold::FOLD_WINDOW_MS`] of that
///   event's sightings adds one to its row's count, moves its first (`time_ms`) or
///   last (`last_seen_ms`) sighting, and, when it is the latest, brings its message
///   and details (a finding that escalated says so), as a Kubernetes Event's series
///   does.
/// - Anything else is a new row.
fn insert_event(
    db: &Db,
    attempt: &Attempt,
    event: &NewEvent,
    details: &str,
    repeat_key: &str,
    queue: bool,
    action: &'static str,
) -> Result<StoredEvent, StoreError> {
    let event_id = non_empty(&event.event_id);
    if let Some(id) = event_id
        && let Some(stored) = stored_under_id(db, attempt, event, details, id, action)?
    {
        return Ok(stored);
    }
    let fold = fold_into(db, event, repeat_key, action)?;
    if let (Some((row, _, last_ms, count)), Some(id)) = (fold, event_id)
        && counted_on(db, row, id, action)?
    {
        // A repeat counted before, sent again: its row as it is. (A repeat is counted
        // on the row its key and time lead to, so a resent one finds the same row.)
        return Ok(StoredEvent {
            id: row,
            count,
            last_seen_ms: (count > 1).then_some(last_ms),
        });
    }
    let stored = match fold {
        Some((row, first_ms, last_ms, count)) => {
            let first_ms = first_ms.min(event.time_ms);
            let last_seen_ms = last_ms.max(event.time_ms);
            if event.time_ms >= last_ms {
                db.execute(
                    "UPDATE events SET count = count + 1, time_ms = ?2, last_seen_ms = ?3,
                                       message = ?4, details = ?5
                     WHERE id = ?1",
                    &params![row, first_ms, last_seen_ms, &event.message, details],
                )
            } else {
                db.execute(
                    "UPDATE events SET count = count + 1, time_ms = ?2, last_seen_ms = ?3
                     WHERE id = ?1",
                    &params![row, first_ms, last_seen_ms],
                )
            }
            .during(action)?;
            if let Some(id) = event_id {
                db.execute(
                    "INSERT INTO event_repeats (event_row, id_hash) VALUES (?1, ?2)",
                    &params![row, event_fold::id_hash(id)],
                )
                .during(action)?;
            }
            StoredEvent {
                id: row,
                count: count + 1,
                last_seen_ms: Some(last_seen_ms),
            }
        }
        None => {
            let row_id = db
                .query_one(
                    "INSERT INTO events (time_ms, job_id, attempt, node, instance, kind, lane,
                                         message, details, event_id, repeat_key)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                     RETURNING id",
                    &params![
                        event.time_ms,
                        &attempt.job_id,
                        attempt.attempt,
                        &attempt.node,
                        &attempt.instance,
                        event.kind.as_str(),
                        event.lane.map(Lane::as_str),
                        &event.message,
                        details,
                        event_id,
                        repeat_key,
                    ],
                )
                .and_then(|mut row| row.get(0))
                .during(action)?;
            StoredEvent {
                id: row_id,
                count: 1,
                last_seen_ms: None,
            }
        }
    };
    // A repeat is queued too: the server it goes to counts it on its own row.
    if let (true, Some(id)) = (queue, event_id) {
        let record = EventRecord {
            attempt: attempt.clone(),
            event: event.clone(),
        };
        let body = encode("event", &record)?;
        outbox::enqueue(db, OutboxKind::Event, id, &body, unix_now_ms(), action)?;
    }
    Ok(stored)
}

/// The row stored under `id`, the event's own. [`StoreError::IdConflict`] when it says
/// another thing (a row that counted repeats carries the first time and the latest
/// message and details of them all, so only the rest is compared).
fn stored_under_id(
    db: &Db,
    attempt: &Attempt,
    event: &NewEvent,
    details: &str,
    id: &str,
    action: &'static str,
) -> Result<Option<StoredEvent>, StoreError> {
    let own = db
        .query_opt(
            "SELECT id, time_ms, job_id, attempt, node, instance, kind, lane, message, details,
                    count, last_seen_ms
             FROM events WHERE event_id = ?1",
            &params![id],
        )
        .and_then(|row| {
            row.map(|mut row| {
                let count = row.get::<u64>(10)?;
                let same = (count > 1 || row.get::<u64>(1)? == event.time_ms)
                    && row.get::<String>(2)? == attempt.job_id
                    && row.get::<u32>(3)? == attempt.attempt
                    && row.get::<String>(4)? == attempt.node
                    && row.get::<String>(5)? == attempt.instance
                    && row.get::<String>(6)? == event.kind.as_str()
                    && row.get::<Option<String>>(7)?.as_deref() == event.lane.map(Lane::as_str)
                    && (count > 1
                        || (row.get::<String>(8)? == event.message
                            && same_json(&row.get::<String>(9)?, details)));
                let stored = StoredEvent {
                    id: row.get(0)?,
                    count,
                    last_seen_ms: row.get(11)?,
                };
                Ok((stored, same))
            })
            .transpose()
        })
        .during(action)?;
    match own {
        Some((stored, true)) => Ok(Some(stored)),
        Some((_, false)) => Err(StoreError::IdConflict {
            what: "event",
            id: id.to_owned(),
        }),
        None => Ok(None),
    }
}

/// Whether the repeat with `id` was counted on `row` already.
fn counted_on(db: &Db, row: i64, id: &str, action: &'static str) -> Result<bool, StoreError> {
    let found = db
        .query_opt(
            "SELECT 1 FROM event_repeats WHERE event_row = ?1 AND id_hash = ?2",
            &params![row, event_fold::id_hash(id)],
        )
        .during(action)?;
    Ok(found.is_some())
}

/// The row an event with `repeat_key` at its time folds into, if any: the latest of
/// its key begun no later than a window after it, when the event is within the window
/// of that row's sightings (rows of one key are more than a window apart, so no other
/// can be). Its id, first and last sightings and count.
fn fold_into(
    db: &Db,
    event: &NewEvent,
    repeat_key: &str,
    action: &'static str,
) -> Result<Option<(i64, u64, u64, u64)>, StoreError> {
    let latest = db
        .query_opt(
            "SELECT id, time_ms, COALESCE(last_seen_ms, time_ms), count FROM events
             WHERE repeat_key = ?1 AND time_ms <= ?2
             ORDER BY time_ms DESC, id DESC LIMIT 1",
            &params![
                repeat_key,
                // Within what the store holds: an event at its last millisecond still
                // folds, rather than failing on a bound past it.
                event
                    .time_ms
                    .saturating_add(event_fold::FOLD_WINDOW_MS)
                    .min(i64::MAX as u64)
            ],
        )
        .and_then(|row| {
            row.map(|mut row| {
                Ok((
                    row.get::<i64>(0)?,
                    row.get::<u64>(1)?,
                    row.get::<u64>(2)?,
                    row.get::<u64>(3)?,
                ))
            })
            .transpose()
        })
        .during(action)?;
    Ok(latest.filter(|&(_, first_ms, last_ms, _)| {
        event_fold::folds_into(first_ms, last_ms, event.time_ms)
    }))
}

/// The conditions of an event filter, all but its limit and order.
fn event_conditions(query: &mut Query, filter: &EventFilter) {
    query.filter("job_id", filter.job_id.as_deref());
    query.filter("attempt", filter.attempt);
    query.filter("kind", filter.kind.map(|k| k.as_str()));
    query.filter("node", filter.node.as_deref());
    // A time beyond what the store holds matches as the largest it holds.
    let millis = |ms: u64| Value::Int(i64::try_from(ms).unwrap_or(i64::MAX));
    query.condition("time_ms >= ?", filter.since_ms.map(millis));
    query.condition("time_ms < ?", filter.until_ms.map(millis));
}

/// An id as stored: `None` (NULL) for the empty id of reports and events from before ids.
fn non_empty(id: &str) -> Option<&str> {
    (!id.is_empty()).then_some(id)
}

/// Whether two JSON texts hold the same value (the same report or details, whatever
/// the spelling of its numbers or the order of its keys).
fn same_json(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Refuses a report recorded under another attempt: it would mix tries.
fn check_belongs(attempt: &Attempt, report: &RunReport) -> Result<(), StoreError> {
    let pairs = [
        ("job id", attempt.job_id.clone(), report.job_id.clone()),
        (
            "attempt",
            attempt.attempt.to_string(),
            report.attempt.to_string(),
        ),
        ("node", attempt.node.clone(), report.node.clone()),
        (
            "instance",
            attempt.instance.clone(),
            report.instance.clone(),
        ),
    ];
    match pairs.into_iter().find(|(_, a, r)| a != r) {
        Some((field, attempt, report)) => Err(StoreError::Mismatch {
            field,
            attempt,
            report,
        }),
        None => Ok(()),
    }
}

fn encode<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Encode {
        what,
        message: e.to_string(),
    })
}

fn decode<T: for<'de> Deserialize<'de>>(
    table: &'static str,
    id: i64,
    json: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Decode {
        table,
        id,
        message: e.to_string(),
    })
}

/// A `SELECT` with optional `column = ?` conditions.
struct Query {
    sql: String,
    args: Vec<Value>,
    conditions: usize,
}

impl Query {
    fn new(select: &str) -> Self {
        Query {
            sql: select.to_owned(),
            args: Vec::new(),
            conditions: 0,
        }
    }

    /// Adds `column = ?` when there is a value.
    fn filter<V: Into<Value>>(&mut self, column: &str, value: Option<V>) {
        self.condition(&format!("{column} = ?"), value.map(Into::into));
    }

    /// Adds `condition` (with one `?`) when there is a value.
    fn condition(&mut self, condition: &str, value: Option<Value>) {
        if let Some(value) = value {
            self.conditions += 1;
            let joiner = if self.conditions == 1 {
                " WHERE "
            } else {
                " AND "
            };
            self.sql.push_str(joiner);
            self.sql.push_str(condition);
            self.args.push(value);
        }
    }

    fn rows<T>(
        &self,
        db: &Db,
        mut map: impl FnMut(&mut Row) -> Result<T, db::DbError>,
    ) -> Result<Vec<T>, db::DbError> {
        db.query(&self.sql, &self.args)?
            .iter_mut()
            .map(&mut map)
            .collect()
    }
}

/// An event row before its kind, lane and details are decoded.
struct RawEvent {
    id: i64,
    time_ms: u64,
    attempt: Attempt,
    kind: String,
    lane: Option<String>,
    message: String,
    details: String,
    /// NULL for events from before ids.
    event_id: Option<String>,
    count: u64,
    last_seen_ms: Option<u64>,
}

impl RawEvent {
    fn from_row(row: &mut Row) -> Result<Self, db::DbError> {
        Ok(RawEvent {
            id: row.get(0)?,
            time_ms: row.get(1)?,
            attempt: Attempt {
                job_id: row.get(2)?,
                attempt: row.get(3)?,
                node: row.get(4)?,
                instance: row.get(5)?,
            },
            kind: row.get(6)?,
            lane: row.get(7)?,
            message: row.get(8)?,
            details: row.get(9)?,
            event_id: row.get(10)?,
            count: row.get(11)?,
            last_seen_ms: row.get(12)?,
        })
    }

    fn decode(self) -> Result<Event, StoreError> {
        let bad = |message: String| StoreError::Decode {
            table: "events",
            id: self.id,
            message,
        };
        let kind: EventKind = self.kind.parse().map_err(bad)?;
        let lane = match &self.lane {
            None => None,
            Some(lane) => Some(
                serde_json::from_value::<Lane>(serde_json::Value::String(lane.clone()))
                    .map_err(|e| bad(format!("unknown lane `{lane}`: {e}")))?,
            ),
        };
        let details = decode("events", self.id, &self.details)?;
        Ok(Event {
            id: self.id,
            attempt: self.attempt,
            event: NewEvent {
                event_id: self.event_id.unwrap_or_default(),
                time_ms: self.time_ms,
                kind,
                lane,
                message: self.message,
                details,
            },
            count: self.count,
            last_seen_ms: self.last_seen_ms,
        })
    }
}
