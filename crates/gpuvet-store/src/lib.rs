//! gpuvet's SQLite store of attempts, sanity-check reports, per-check results,
//! deployment events, and the runtime check's state between restarts.
//!
//! One file, in WAL mode with a busy timeout, so that several gpuvet processes on one
//! node (the sanity checks, the runtime check, a `gpuvet check` by hand) write to it at
//! once. Every write that spans rows runs in one `BEGIN IMMEDIATE` transaction: a
//! report is stored whole or not at all, and two processes never get the same attempt
//! number.
//!
//! Reports, check results and event details are kept as the JSON of the core types
//! (their serialized form is API) and decoded on the way out; a row that no longer
//! decodes is an error naming its table and id, never silently skipped. The runtime
//! check's state is opaque JSON here: its type lives with the runtime check.
//!
//! ```no_run
//! # use gpuvet_store::{Store, EventFilter};
//! let mut store = Store::open("/var/lib/gpuvet/store.db".as_ref())?;
//! let attempt = store.begin_attempt("job-1", "node-0", "pod-0", 1_700_000_000_000)?;
//! let filter = EventFilter { job_id: Some("job-1".into()), ..EventFilter::default() };
//! let events = store.events(&filter)?;
//! # Ok::<(), gpuvet_store::StoreError>(())
//! ```

mod error;
mod outbox;
mod overview;
mod schema;

use std::fs;
use std::path::{Path, PathBuf};

use gpuvet_core::catalog::CheckName;
use gpuvet_core::events::{Attempt, Event, EventKind, EventRecord, NewEvent};
use gpuvet_core::results::{CheckResult, Lane, RunReport};
use gpuvet_core::time::unix_now_ms;
use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::During;
pub use crate::error::StoreError;
pub use crate::outbox::{FIRST_RETRY_MS, MAX_RETRY_MS, OutboxEntry, OutboxKind, next_try_delay_ms};
pub use crate::overview::{RunFilter, StoredRun};
pub use crate::schema::SCHEMA_VERSION;

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

/// An open store. Each handle is one SQLite connection: `Send`, not `Sync`; give each
/// thread or process its own.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: Option<PathBuf>,
    /// Whether recorded reports and events are also queued in the outbox.
    queue_pushes: bool,
}

impl Store {
    /// Opens the store at `path`, creating the file and its missing parent
    /// directories, and migrates its schema to [`SCHEMA_VERSION`].
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let open_error = |cause: Box<dyn std::error::Error + Send + Sync>| StoreError::Open {
            path: path.to_owned(),
            cause,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| {
                if parent.is_file() {
                    open_error(format!("`{}` is a file, not a directory", parent.display()).into())
                } else {
                    open_error(Box::new(e))
                }
            })?;
        }
        // No SQLITE_OPEN_URI: a path is a path, even one that starts with `file:`.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(path, flags).map_err(|e| open_error(Box::new(e)))?;
        schema::prepare(&mut conn, path)?;
        Ok(Store {
            conn,
            path: Some(path.to_owned()),
            queue_pushes: false,
        })
    }

    /// A private store that lives as long as the handle, for tests and dry runs.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = Path::new(":memory:");
        let mut conn = Connection::open_in_memory().map_err(|e| StoreError::Open {
            path: path.to_owned(),
            cause: Box::new(e),
        })?;
        schema::prepare(&mut conn, path)?;
        Ok(Store {
            conn,
            path: None,
            queue_pushes: false,
        })
    }

    /// The file behind the store; `None` in memory.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Starts the next attempt of `job_id` on `node`: one more than the highest
    /// recorded so far, starting at 1.
    pub fn begin_attempt(
        &mut self,
        job_id: &str,
        node: &str,
        instance: &str,
        now_ms: u64,
    ) -> Result<Attempt, StoreError> {
        const ACTION: &str = "begin an attempt in the store";
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .during(ACTION)?;
        let attempt: u32 = tx
            .query_row(
                "SELECT COALESCE(MAX(attempt), 0) + 1 FROM attempts WHERE job_id = ?1 AND node = ?2",
                params![job_id, node],
                |row| row.get(0),
            )
            .during(ACTION)?;
        tx.execute(
            "INSERT INTO attempts (job_id, node, instance, attempt, started_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![job_id, node, instance, attempt, now_ms],
        )
        .during(ACTION)?;
        tx.commit().during(ACTION)?;
        Ok(Attempt {
            job_id: job_id.to_owned(),
            attempt,
            node: node.to_owned(),
            instance: instance.to_owned(),
        })
    }

    /// Records a report and each of its check results, all or nothing; returns the
    /// run's id.
    ///
    /// A report with an id (`report_id`) that is already stored is not stored again:
    /// the stored run's id is returned when the content is the same, and
    /// [`StoreError::IdConflict`] when it differs. A report without an id (from before
    /// ids) is always added.
    ///
    /// The report must belong to `attempt` (same job, attempt, node and instance). An
    /// attempt this store has not begun (a report pushed from another node) is added.
    /// A report whose JSON would not read back (e.g. a NaN where a number is required)
    /// is refused, so that one bad row never breaks later queries.
    pub fn record_report(
        &mut self,
        attempt: &Attempt,
        report: &RunReport,
    ) -> Result<i64, StoreError> {
        const ACTION: &str = "record a report in the store";
        check_belongs(attempt, report)?;
        let report_json = encode("report", report)?;
        if let Err(e) = serde_json::from_str::<RunReport>(&report_json) {
            return Err(StoreError::Encode {
                what: "report",
                message: format!("its JSON does not read back: {e}"),
            });
        }
        let check_jsons = report
            .checks
            .iter()
            .map(|c| encode("check result", c))
            .collect::<Result<Vec<_>, _>>()?;

        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .during(ACTION)?;
        let report_id = non_empty(&report.report_id);
        if let Some(id) = report_id {
            let stored: Option<(i64, String)> = tx
                .query_row(
                    "SELECT id, report_json FROM runs WHERE report_id = ?1",
                    [id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .during(ACTION)?;
            if let Some((run_id, stored_json)) = stored {
                return if same_json(&stored_json, &report_json) {
                    Ok(run_id)
                } else {
                    Err(StoreError::IdConflict {
                        what: "report",
                        id: id.to_owned(),
                    })
                };
            }
        }
        tx.execute(
            "INSERT INTO attempts (job_id, node, instance, attempt, started_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (job_id, node, attempt) DO NOTHING",
            params![
                attempt.job_id,
                attempt.node,
                attempt.instance,
                attempt.attempt,
                report.started_at_ms
            ],
        )
        .during(ACTION)?;
        let attempt_id: i64 = tx
            .query_row(
                "SELECT id FROM attempts WHERE job_id = ?1 AND node = ?2 AND attempt = ?3",
                params![attempt.job_id, attempt.node, attempt.attempt],
                |row| row.get(0),
            )
            .during(ACTION)?;
        let run_id: i64 = tx
            .query_row(
                "INSERT INTO runs (attempt_id, gpuvet_version, backend, outcome, started_at_ms,
                                   duration_secs, timeout_secs, report_json, report_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 RETURNING id",
                params![
                    attempt_id,
                    report.gpuvet_version,
                    report.backend,
                    report.outcome.as_str(),
                    report.started_at_ms,
                    report.duration_secs,
                    report.timeout_secs,
                    report_json,
                    report_id,
                ],
                |row| row.get(0),
            )
            .during(ACTION)?;
        if let (true, Some(id)) = (self.queue_pushes, report_id) {
            outbox::enqueue(
                &tx,
                OutboxKind::Report,
                id,
                &report_json,
                unix_now_ms(),
                ACTION,
            )?;
        }
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO check_results (run_id, position, check_name, status, duration_secs,
                                                median_value, unit, findings, result_json)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .during(ACTION)?;
            for (position, (check, json)) in report.checks.iter().zip(&check_jsons).enumerate() {
                insert
                    .execute(params![
                        run_id,
                        position,
                        check.name.as_str(),
                        check.status.as_str(),
                        check.duration_secs,
                        check.median_value(),
                        check.metric.unit,
                        check.findings().count(),
                        json,
                    ])
                    .during(ACTION)?;
            }
        }
        tx.commit().during(ACTION)?;
        Ok(run_id)
    }

    /// Records an event of `attempt` and returns it as stored, with its id.
    pub fn record_event(
        &mut self,
        attempt: &Attempt,
        event: &NewEvent,
    ) -> Result<Event, StoreError> {
        const ACTION: &str = "record an event in the store";
        let details = encode("event details", &event.details)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .during(ACTION)?;
        let id = insert_event(&tx, attempt, event, &details, self.queue_pushes, ACTION)?;
        tx.commit().during(ACTION)?;
        Ok(Event {
            id,
            attempt: attempt.clone(),
            event: event.clone(),
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
        let state_json = state
            .map(|s| encode("runtime check state", s))
            .transpose()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .during(ACTION)?;
        let mut stored = Vec::with_capacity(events.len());
        for (event, details) in events.iter().zip(details) {
            let id = insert_event(&tx, attempt, event, &details, self.queue_pushes, ACTION)?;
            stored.push(Event {
                id,
                attempt: attempt.clone(),
                event: event.clone(),
            });
        }
        if let Some(json) = state_json {
            tx.prepare_cached(
                "INSERT INTO watch_state (job_id, node, saved_at_ms, state_json)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (job_id, node) DO UPDATE
                 SET saved_at_ms = excluded.saved_at_ms, state_json = excluded.state_json",
            )
            .and_then(|mut upsert| {
                upsert.execute(params![attempt.job_id, attempt.node, now_ms, json])
            })
            .during(ACTION)?;
        }
        tx.commit().during(ACTION)?;
        Ok(stored)
    }

    /// The runtime check's state last saved for `job_id` on `node`, with the time it
    /// was saved; `None` when none was.
    pub fn watch_state<S: DeserializeOwned>(
        &self,
        job_id: &str,
        node: &str,
    ) -> Result<Option<(u64, S)>, StoreError> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT id, saved_at_ms, state_json FROM watch_state WHERE job_id = ?1 AND node = ?2",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![job_id, node], |row| {
                        Ok((
                            row.get::<_, i64>(0)?,
                            row.get::<_, u64>(1)?,
                            row.get::<_, String>(2)?,
                        ))
                    })?
                    .next()
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
                    event_id
             FROM events",
        );
        query.filter("job_id", filter.job_id.as_deref().map(text));
        query.filter("attempt", filter.attempt.map(|a| Value::Integer(a.into())));
        query.filter("kind", filter.kind.map(|k| text(k.as_str())));
        query.filter("node", filter.node.as_deref().map(text));
        event_times(&mut query, filter);
        query.sql.push_str(if filter.newest_first {
            " ORDER BY time_ms DESC, id DESC LIMIT ?"
        } else {
            " ORDER BY time_ms, id LIMIT ?"
        });
        query.args.push(Value::Integer(limit(filter.limit)));

        let rows = query.rows(&self.conn, RawEvent::from_row).during(ACTION)?;
        rows.into_iter().map(RawEvent::decode).collect()
    }

    /// How many events match `filter`, ignoring its `limit`.
    pub fn count_events(&self, filter: &EventFilter) -> Result<u64, StoreError> {
        let mut query = Query::new("SELECT COUNT(*) FROM events");
        query.filter("job_id", filter.job_id.as_deref().map(text));
        query.filter("attempt", filter.attempt.map(|a| Value::Integer(a.into())));
        query.filter("kind", filter.kind.map(|k| text(k.as_str())));
        query.filter("node", filter.node.as_deref().map(text));
        event_times(&mut query, filter);
        let counts = query
            .rows(&self.conn, |row| row.get::<_, u64>(0))
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
        query.filter("a.job_id", filter.job_id.as_deref().map(text));
        query.filter(
            "a.attempt",
            filter.attempt.map(|a| Value::Integer(a.into())),
        );
        query.filter("c.check_name", filter.check.map(|c| text(c.as_str())));
        query.filter("a.node", filter.node.as_deref().map(text));
        query
            .sql
            .push_str(" ORDER BY r.started_at_ms, r.id, c.position");

        let rows = query
            .rows(&self.conn, |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    Attempt {
                        job_id: row.get(1)?,
                        attempt: row.get(2)?,
                        node: row.get(3)?,
                        instance: row.get(4)?,
                    },
                    row.get::<_, i64>(5)?,
                    row.get::<_, u64>(6)?,
                    row.get::<_, String>(7)?,
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
        self.conn
            .query_row(
                "SELECT MAX(attempt) FROM attempts WHERE job_id = ?1",
                [job_id],
                |row| row.get(0),
            )
            .during("read the latest attempt from the store")
    }

    /// The reports of one attempt of a job, from every node, by start time.
    pub fn reports(&self, job_id: &str, attempt: u32) -> Result<Vec<RunReport>, StoreError> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT r.id, r.report_json
                 FROM runs r JOIN attempts a ON a.id = r.attempt_id
                 WHERE a.job_id = ?1 AND a.attempt = ?2
                 ORDER BY r.started_at_ms, r.id",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![job_id, attempt], |row| {
                        Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .during("read reports from the store")?;
        rows.into_iter()
            .map(|(id, json)| decode("runs", id, &json))
            .collect()
    }
}

/// Inserts one event row (its details already encoded) and returns its id, and queues
/// it in the outbox when `queue` is set. An event whose id is already stored is not
/// stored again: the stored row's id is returned when it is the same event, and
/// [`StoreError::IdConflict`] when it is not.
fn insert_event(
    conn: &Connection,
    attempt: &Attempt,
    event: &NewEvent,
    details: &str,
    queue: bool,
    action: &'static str,
) -> Result<i64, StoreError> {
    let event_id = non_empty(&event.event_id);
    if let Some(id) = event_id {
        let stored = conn
            .prepare_cached(
                "SELECT id, time_ms, job_id, attempt, node, instance, kind, lane, message, details
                 FROM events WHERE event_id = ?1",
            )
            .and_then(|mut select| {
                select
                    .query_row([id], |row| {
                        let same = row.get::<_, u64>(1)? == event.time_ms
                            && row.get::<_, String>(2)? == attempt.job_id
                            && row.get::<_, u32>(3)? == attempt.attempt
                            && row.get::<_, String>(4)? == attempt.node
                            && row.get::<_, String>(5)? == attempt.instance
                            && row.get::<_, String>(6)? == event.kind.as_str()
                            && row.get::<_, Option<String>>(7)?.as_deref()
                                == event.lane.map(Lane::as_str)
                            && row.get::<_, String>(8)? == event.message
                            && same_json(&row.get::<_, String>(9)?, details);
                        Ok((row.get::<_, i64>(0)?, same))
                    })
                    .optional()
            })
            .during(action)?;
        match stored {
            Some((row_id, true)) => return Ok(row_id),
            Some((_, false)) => {
                return Err(StoreError::IdConflict {
                    what: "event",
                    id: id.to_owned(),
                });
            }
            None => {}
        }
    }
    let row_id = conn.prepare_cached(
        "INSERT INTO events (time_ms, job_id, attempt, node, instance, kind, lane, message, details,
                             event_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         RETURNING id",
    )
    .and_then(|mut insert| {
        insert.query_row(
            params![
                event.time_ms,
                attempt.job_id,
                attempt.attempt,
                attempt.node,
                attempt.instance,
                event.kind.as_str(),
                event.lane.map(Lane::as_str),
                event.message,
                details,
                event_id,
            ],
            |row| row.get(0),
        )
    })
    .during(action)?;
    if let (true, Some(id)) = (queue, event_id) {
        let record = EventRecord {
            attempt: attempt.clone(),
            event: event.clone(),
        };
        let body = encode("event", &record)?;
        outbox::enqueue(conn, OutboxKind::Event, id, &body, unix_now_ms(), action)?;
    }
    Ok(row_id)
}

/// The time range of an event filter.
fn event_times(query: &mut Query, filter: &EventFilter) {
    let millis = |ms: u64| Value::Integer(i64::try_from(ms).unwrap_or(i64::MAX));
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

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

/// SQLite's `LIMIT`: a negative one means none.
fn limit(limit: Option<usize>) -> i64 {
    limit.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX))
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
    fn filter(&mut self, column: &str, value: Option<Value>) {
        self.condition(&format!("{column} = ?"), value);
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
        conn: &Connection,
        map: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<Vec<T>> {
        let mut select = conn.prepare_cached(&self.sql)?;
        select
            .query_map(rusqlite::params_from_iter(&self.args), map)?
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
}

impl RawEvent {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
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
        })
    }
}
