//! The writes of what nodes push (attempts as they begin, reports, events), one at a
//! time or many in one transaction: group commit, [`Store::record_batch`], which a
//! fleet server uses to store the pushes that arrive while its last transaction was
//! committing, with one commit for them all.
//!
//! A write is checked and encoded first ([`PreparedWrite`]), outside any transaction,
//! so that a transaction holds only the database's work; then stored by the same
//! function alone or in a batch. A batch is stored all together first; if one of its
//! writes is refused (for its content, such as another report under its id, or by the
//! database), that transaction is rolled back and the batch stored again with each
//! write behind a savepoint of its own ([`Db::each_apart`]), so that the refused one
//! gets its error and undoes only its own rows while its neighbours are kept. A batch
//! is committed whole or not at all, so a write counts as stored only once its batch's
//! commit returned. Writes of one id in one batch behave as if sent one after the
//! other: the first is stored, the next finds it.
//!
//! Every write transaction locks the ids it is about to write ([`Db::lock_ids`]: the
//! reports' and events' own ids, and the attempts it may add) at once and before any
//! row, so that two batches (two writer tasks, or two servers on one PostgreSQL) never
//! wait on each other in a circle.

use gpuvet_model::event_fold::RepeatKey;
use gpuvet_model::events::{Attempt, AttemptStart, Event, EventRecord, NewEvent};
use gpuvet_model::results::RunReport;
use gpuvet_model::time::unix_now_ms;

use crate::db::{Db, IdSpace, Value};
use crate::error::During;
use crate::value::params;
use crate::{
    OutboxKind, Store, StoreError, check_belongs, encode, insert_event, non_empty, outbox,
    same_json,
};

/// One write, checked and encoded, ready to be stored alone or in a batch
/// ([`Store::record_batch`]). Making one refuses what the store would refuse for its
/// content alone (a report of another attempt, JSON that does not read back).
#[derive(Debug)]
pub struct PreparedWrite {
    item: Item,
    /// [`attempt_key`] of the attempt the write may add; `None` for an event, which
    /// adds none.
    attempt_key: Option<String>,
}

#[derive(Debug)]
enum Item {
    Attempt(AttemptStart),
    Report {
        attempt: Attempt,
        report: Box<RunReport>,
        encoded: EncodedReport,
    },
    Event {
        record: EventRecord,
        details: String,
        /// Its [`RepeatKey::in_attempt`].
        repeat_key: String,
    },
}

/// What one write did, in the order of the batch's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The attempt was recorded, or was already.
    Attempt,
    /// The report was stored, or was already under its id: the store's id of its run.
    Report { run_id: i64 },
    /// The event was stored, or was already under its id, or was counted as a repeat
    /// (`gpuvet_model::event_fold`): the store's id of its row, and how many times the
    /// row's event has happened.
    Event { id: i64, count: u64 },
}

impl PreparedWrite {
    /// An attempt another store began, with its start time.
    pub fn attempt(start: AttemptStart) -> PreparedWrite {
        PreparedWrite {
            attempt_key: Some(attempt_key(&start.attempt)),
            item: Item::Attempt(start),
        }
    }

    /// A report of `attempt`, refused as [`Store::record_report`] refuses it.
    pub fn report(attempt: Attempt, report: RunReport) -> Result<PreparedWrite, StoreError> {
        let encoded = EncodedReport::new(&attempt, &report)?;
        Ok(PreparedWrite {
            attempt_key: Some(attempt_key(&attempt)),
            item: Item::Report {
                attempt,
                report: Box::new(report),
                encoded,
            },
        })
    }

    /// An event of an attempt.
    pub fn event(record: EventRecord) -> Result<PreparedWrite, StoreError> {
        let details = encode("event details", &record.event.details)?;
        let repeat_key = RepeatKey::of_event(&record.event).in_attempt(&record.attempt);
        Ok(PreparedWrite {
            attempt_key: None,
            item: Item::Event {
                record,
                details,
                repeat_key,
            },
        })
    }

    /// An event's repeat key (`gpuvet_model::event_fold::RepeatKey::in_attempt`): the
    /// events of one key within the fold window are counted on one row. `None` for an
    /// attempt or a report.
    pub fn repeat_key(&self) -> Option<&str> {
        match &self.item {
            Item::Event { repeat_key, .. } => Some(repeat_key),
            Item::Attempt(_) | Item::Report { .. } => None,
        }
    }

    /// About how many bytes the write stores: its JSON and its names. A batch is
    /// bounded by this.
    pub fn size(&self) -> usize {
        let names = |a: &Attempt| a.job_id.len() + a.node.len() + a.instance.len();
        match &self.item {
            Item::Attempt(start) => names(&start.attempt),
            Item::Report {
                attempt, encoded, ..
            } => names(attempt) + encoded.size(),
            Item::Event {
                record, details, ..
            } => names(&record.attempt) + record.event.message.len() + details.len(),
        }
    }

    /// The ids this write looks up or adds, to lock before any row is written.
    fn ids(&self) -> impl Iterator<Item = (IdSpace, &str)> {
        let (own, repeat) = match &self.item {
            Item::Attempt(_) => (None, None),
            Item::Report { report, .. } => (
                non_empty(&report.report_id).map(|id| (IdSpace::Report, id)),
                None,
            ),
            Item::Event {
                record, repeat_key, ..
            } => (
                non_empty(&record.event.event_id).map(|id| (IdSpace::Event, id)),
                Some((IdSpace::Repeat, repeat_key.as_str())),
            ),
        };
        let attempt = self
            .attempt_key
            .as_deref()
            .map(|key| (IdSpace::Attempt, key));
        own.into_iter().chain(repeat).chain(attempt)
    }

    /// Stores the write inside the caller's transaction, which holds its ids' locks.
    fn store(&self, db: &Db, queue: bool) -> Result<Written, StoreError> {
        match &self.item {
            Item::Attempt(start) => {
                store_attempt(db, &start.attempt, start.started_at_ms, ATTEMPT_ACTION)?;
                Ok(Written::Attempt)
            }
            Item::Report {
                attempt,
                report,
                encoded,
            } => store_report(db, attempt, report, encoded, queue)
                .map(|run_id| Written::Report { run_id }),
            Item::Event {
                record,
                details,
                repeat_key,
            } => insert_event(
                db,
                &record.attempt,
                &record.event,
                details,
                repeat_key,
                queue,
                EVENT_ACTION,
            )
            .map(|stored| Written::Event {
                id: stored.id,
                count: stored.count,
            }),
        }
    }
}

const ATTEMPT_ACTION: &str = "record an attempt in the store";
const REPORT_ACTION: &str = "record a report in the store";
const EVENT_ACTION: &str = "record an event in the store";
const BATCH_ACTION: &str = "record a batch of writes in the store";

impl Store {
    /// Records an attempt another store began (one a node pushed) with its start time.
    /// An attempt already recorded is left as it is, so sending it twice keeps it once.
    pub fn record_attempt(&mut self, start: &AttemptStart) -> Result<(), StoreError> {
        let key = attempt_key(&start.attempt);
        self.db.write(ATTEMPT_ACTION, |db| {
            db.lock_ids([(IdSpace::Attempt, key.as_str())])
                .during(ATTEMPT_ACTION)?;
            store_attempt(db, &start.attempt, start.started_at_ms, ATTEMPT_ACTION)
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
        let encoded = EncodedReport::new(attempt, report)?;
        let key = attempt_key(attempt);
        let queue = self.queue_pushes;
        self.db.write(REPORT_ACTION, |db| {
            let report_id = non_empty(&report.report_id).map(|id| (IdSpace::Report, id));
            db.lock_ids(
                report_id
                    .into_iter()
                    .chain([(IdSpace::Attempt, key.as_str())]),
            )
            .during(REPORT_ACTION)?;
            store_report(db, attempt, report, &encoded, queue)
        })
    }

    /// Records an event of `attempt` and returns it as stored, with its id: a repeat
    /// of one stored within the fold window (`gpuvet_model::event_fold`) is counted on
    /// that event's row, whose id, count and last sighting it returns.
    pub fn record_event(
        &mut self,
        attempt: &Attempt,
        event: &NewEvent,
    ) -> Result<Event, StoreError> {
        let details = encode("event details", &event.details)?;
        let repeat_key = RepeatKey::of_event(event).in_attempt(attempt);
        let queue = self.queue_pushes;
        let stored = self.db.write(EVENT_ACTION, |db| {
            db.lock_ids(
                non_empty(&event.event_id)
                    .map(|id| (IdSpace::Event, id))
                    .into_iter()
                    .chain([(IdSpace::Repeat, repeat_key.as_str())]),
            )
            .during(EVENT_ACTION)?;
            insert_event(
                db,
                attempt,
                event,
                &details,
                &repeat_key,
                queue,
                EVENT_ACTION,
            )
        })?;
        Ok(stored.into_event(attempt, event))
    }

    /// Stores `writes` in one transaction, in their order, and returns what each did
    /// once the transaction has committed: each write is stored or refused as alone
    /// ([`Store::record_attempt`], [`Store::record_report`], [`Store::record_event`]),
    /// and one refused (for its content, or a database error of its own) leaves its
    /// neighbours stored. Two writes of one id behave as if sent one after the other.
    ///
    /// An error of its own (the transaction could not begin or commit, the connection
    /// broke) means that none of the writes was stored.
    pub fn record_batch(
        &mut self,
        writes: &[PreparedWrite],
    ) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let queue = self.queue_pushes;
        let lock = |db: &Db| {
            db.lock_ids(writes.iter().flat_map(PreparedWrite::ids))
                .during(BATCH_ACTION)
        };
        // First all together, without a savepoint each (on PostgreSQL a round trip
        // less per write): most batches hold no write that is refused. A batch that
        // does is rolled back at its first refusal, and stored again with a savepoint
        // per write, which keeps its neighbours.
        let together: Result<Vec<Written>, StoreError> = self.db.write(BATCH_ACTION, |db| {
            lock(db)?;
            writes.iter().map(|write| write.store(db, queue)).collect()
        });
        if let Ok(written) = together {
            return Ok(written.into_iter().map(Ok).collect::<Vec<_>>());
        }
        self.db.write(BATCH_ACTION, |db| {
            lock(db)?;
            db.each_apart(BATCH_ACTION, writes, |db, write| write.store(db, queue))
        })
    }
}

/// The values of one row of `check_results`.
const CHECK_RESULT_COLUMNS: usize = 9;

/// Rows of `check_results` one `INSERT` adds: within the 999 parameters of SQLite's
/// oldest limit, and few enough statements to prepare (one per count up to this).
const CHECK_RESULTS_PER_INSERT: usize = 64;

/// A report's JSON and each of its check results', checked to read back.
#[derive(Debug)]
struct EncodedReport {
    report: String,
    checks: Vec<String>,
}

impl EncodedReport {
    fn new(attempt: &Attempt, report: &RunReport) -> Result<EncodedReport, StoreError> {
        check_belongs(attempt, report)?;
        let json = encode("report", report)?;
        if let Err(e) = serde_json::from_str::<RunReport>(&json) {
            return Err(StoreError::Encode {
                what: "report",
                message: format!("its JSON does not read back: {e}"),
            });
        }
        let checks = report
            .checks
            .iter()
            .map(|c| encode("check result", c))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EncodedReport {
            report: json,
            checks,
        })
    }

    fn size(&self) -> usize {
        self.report.len() + self.checks.iter().map(String::len).sum::<usize>()
    }
}

/// The key of an attempt's lock: its job, node and number, apart by a NUL, which no
/// stored name holds.
pub(crate) fn attempt_key(attempt: &Attempt) -> String {
    format!("{}\0{}\0{}", attempt.job_id, attempt.node, attempt.attempt)
}

/// Adds the attempt unless it is recorded. Inside the caller's write.
fn store_attempt(
    db: &Db,
    attempt: &Attempt,
    started_at_ms: u64,
    action: &'static str,
) -> Result<(), StoreError> {
    db.execute(
        "INSERT INTO attempts (job_id, node, instance, attempt, started_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (job_id, node, attempt) DO NOTHING",
        &params![
            attempt.job_id.as_str(),
            attempt.node.as_str(),
            attempt.instance.as_str(),
            attempt.attempt,
            started_at_ms
        ],
    )
    .during(action)?;
    Ok(())
}

/// Stores a report (see [`Store::record_report`]) inside the caller's write, which
/// holds the locks of its id and attempt; returns the run's id.
fn store_report(
    db: &Db,
    attempt: &Attempt,
    report: &RunReport,
    encoded: &EncodedReport,
    queue: bool,
) -> Result<i64, StoreError> {
    const ACTION: &str = REPORT_ACTION;
    let report_id = non_empty(&report.report_id);
    if let Some(id) = report_id {
        let stored = db
            .query_opt(
                "SELECT id, report_json FROM runs WHERE report_id = ?1",
                &params![id],
            )
            .and_then(|row| {
                row.map(|mut row| Ok((row.get::<i64>(0)?, row.get::<String>(1)?)))
                    .transpose()
            })
            .during(ACTION)?;
        if let Some((run_id, stored_json)) = stored {
            return if same_json(&stored_json, &encoded.report) {
                Ok(run_id)
            } else {
                Err(StoreError::IdConflict {
                    what: "report",
                    id: id.to_owned(),
                })
            };
        }
    }
    store_attempt(db, attempt, report.started_at_ms, ACTION)?;
    // The attempt's id looked up in the same statement: one round trip less.
    let run_id: i64 = db
        .query_one(
            "INSERT INTO runs (attempt_id, gpuvet_version, backend, outcome, started_at_ms,
                               duration_secs, timeout_secs, report_json, report_id,
                               node_failed)
             VALUES ((SELECT id FROM attempts WHERE job_id = ?1 AND node = ?2 AND attempt = ?3),
                     ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
             RETURNING id",
            &params![
                &attempt.job_id,
                &attempt.node,
                attempt.attempt,
                &report.gpuvet_version,
                &report.backend,
                report.outcome.as_str(),
                report.started_at_ms,
                report.duration_secs,
                report.timeout_secs,
                &encoded.report,
                report_id,
                i64::from(gpuvet_model::offenders::fails_its_node(report)),
            ],
        )
        .and_then(|mut row| row.get(0))
        .during(ACTION)?;
    if let (true, Some(id)) = (queue, report_id) {
        outbox::enqueue(
            db,
            OutboxKind::Report,
            id,
            &encoded.report,
            unix_now_ms(),
            ACTION,
        )?;
    }
    // Several rows an `INSERT`: a report's results cost one round trip to PostgreSQL,
    // not one each.
    let values: Vec<Value> = report
        .checks
        .iter()
        .zip(&encoded.checks)
        .enumerate()
        .flat_map(|(position, (check, json))| {
            params![
                run_id,
                position,
                check.name.as_str(),
                check.status.as_str(),
                check.duration_secs,
                check.median_value(),
                &check.metric.unit,
                check.findings().count(),
                json,
            ]
        })
        .collect();
    for rows in values.chunks(CHECK_RESULT_COLUMNS * CHECK_RESULTS_PER_INSERT) {
        let placeholders = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?)"; rows.len() / CHECK_RESULT_COLUMNS];
        db.execute(
            &format!(
                "INSERT INTO check_results (run_id, position, check_name, status, duration_secs,
                                            median_value, unit, findings, result_json)
                 VALUES {}",
                placeholders.join(", ")
            ),
            rows,
        )
        .during(ACTION)?;
    }
    crate::history::store_gpu_results(db, run_id, attempt, report, ACTION)?;
    Ok(run_id)
}
