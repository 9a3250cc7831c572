//! SQLite's connection settings and schema, migrated with `PRAGMA user_version`.
//! (PostgreSQL's are in `schema_pg.rs`, with the same tables at the same versions.)
//!
//! `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`. To change the schema,
//! append a migration and never edit a published one: stores in the field run every
//! migration they lack, in order, inside one `BEGIN IMMEDIATE` transaction, so two
//! processes opening a new file at once migrate it once. (`PRAGMA foreign_keys` cannot
//! change inside that transaction: a migration that rebuilds a referenced table must
//! keep the ids it copies.)
//!
//! The JSON columns hold the serialized core types (their form is API) and are what
//! queries return; the other columns are copies kept for filtering and for plain SQL.

use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use crate::StoreError;

/// The schema version this gpuvet writes and reads.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// How long a write waits for another process's lock before failing as busy.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// `PRAGMA application_id` of a gpuvet store: "gpvt".
const APPLICATION_ID: i32 = 0x6770_7674;

const MIGRATIONS: [&str; 9] = [
    V1,
    V2,
    V3,
    V4,
    V5,
    V6,
    V7_GPU_RESULTS,
    V8_NODE_HISTORY,
    V9_GPU_RESULT_WORK,
];

const V1: &str = "
CREATE TABLE attempts (
    id            INTEGER PRIMARY KEY,
    job_id        TEXT    NOT NULL,
    node          TEXT    NOT NULL,
    instance      TEXT    NOT NULL,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    started_at_ms INTEGER NOT NULL,
    UNIQUE (job_id, node, attempt)
);

-- One sanity-check report of one attempt on one node. The REAL columns may be NULL:
-- SQLite stores a NaN as NULL, and the report's JSON is what queries return.
CREATE TABLE runs (
    id             INTEGER PRIMARY KEY,
    attempt_id     INTEGER NOT NULL REFERENCES attempts (id) ON DELETE CASCADE,
    gpuvet_version TEXT    NOT NULL,
    backend        TEXT    NOT NULL,
    outcome        TEXT    NOT NULL,
    started_at_ms  INTEGER NOT NULL,
    duration_secs  REAL,
    timeout_secs   REAL,
    report_json    TEXT    NOT NULL
);
CREATE INDEX runs_by_attempt ON runs (attempt_id);

CREATE TABLE check_results (
    id            INTEGER PRIMARY KEY,
    run_id        INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position      INTEGER NOT NULL,
    check_name    TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    duration_secs REAL,
    median_value  REAL,
    unit          TEXT    NOT NULL,
    findings      INTEGER NOT NULL,
    result_json   TEXT    NOT NULL,
    UNIQUE (run_id, position)
);
CREATE INDEX check_results_by_check ON check_results (check_name, status);

-- Events name their attempt by value, not by reference: an event may arrive for an
-- attempt begun in another store (a central `gpuvet serve`).
CREATE TABLE events (
    id       INTEGER PRIMARY KEY,
    time_ms  INTEGER NOT NULL,
    job_id   TEXT    NOT NULL,
    attempt  INTEGER NOT NULL,
    node     TEXT    NOT NULL,
    instance TEXT    NOT NULL,
    kind     TEXT    NOT NULL,
    lane     TEXT,
    message  TEXT    NOT NULL,
    details  TEXT    NOT NULL
);
CREATE INDEX events_by_job ON events (job_id, attempt, time_ms);
CREATE INDEX events_by_kind ON events (kind, time_ms);
CREATE INDEX events_by_time ON events (time_ms);
";

/// The runtime check's memory: one row per job and node, the JSON of the XID policy's
/// state, so that a restarted watcher neither forgets nor repeats an escalation.
const V2: &str = "
-- Written in the same transaction as the events it explains; replaced on every save.
CREATE TABLE watch_state (
    id          INTEGER PRIMARY KEY,
    job_id      TEXT    NOT NULL,
    node        TEXT    NOT NULL,
    saved_at_ms INTEGER NOT NULL,
    state_json  TEXT    NOT NULL,
    UNIQUE (job_id, node)
);
";

/// Reports and events carry their own ids, so that one stored or pushed twice is kept
/// once. Rows from before have none (NULL), and NULLs never collide.
const V3: &str = "
ALTER TABLE runs ADD COLUMN report_id TEXT;
CREATE UNIQUE INDEX runs_by_report_id ON runs (report_id) WHERE report_id IS NOT NULL;
ALTER TABLE events ADD COLUMN event_id TEXT;
CREATE UNIQUE INDEX events_by_event_id ON events (event_id) WHERE event_id IS NOT NULL;
";

/// The outbox of reports and events waiting to be sent to a central server; see
/// `outbox.rs`. One entry per item: queuing one again while it waits changes nothing.
const V4: &str = "
CREATE TABLE outbox (
    id             INTEGER PRIMARY KEY,
    kind           TEXT    NOT NULL,
    item_id        TEXT    NOT NULL,
    body           TEXT    NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    tries          INTEGER NOT NULL,
    next_try_at_ms INTEGER NOT NULL,
    last_error     TEXT,
    UNIQUE (kind, item_id)
);
CREATE INDEX outbox_by_next_try ON outbox (next_try_at_ms);
";

/// Retention (`retention.rs`) deletes the oldest attempts first, a batch at a time:
/// each batch finds them by when they began.
const V5: &str = "
CREATE INDEX attempts_by_start ON attempts (started_at_ms);
";

/// A repeat of an event (`gpuvet_model::event_fold`: same attempt, kind, lane and
/// subject, within ten minutes of the last) is counted on the first row, not stored as
/// a row: `repeat_key` finds that row, `count` and `last_seen_ms` say how many and
/// when the last. Each repeat counted leaves a 64-bit hash of its id under its row in
/// `event_repeats` (about 20 bytes, not a row of its own), so that one pushed twice is
/// counted once; they go with their row. Rows from before keep no key and never fold.
const V6: &str = "
ALTER TABLE events ADD COLUMN repeat_key TEXT;
ALTER TABLE events ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN last_seen_ms INTEGER;
CREATE INDEX events_by_repeat_key ON events (repeat_key, time_ms) WHERE repeat_key IS NOT NULL;
CREATE TABLE event_repeats (
    event_row INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    id_hash   INTEGER NOT NULL,
    PRIMARY KEY (event_row, id_hash)
) WITHOUT ROWID;
";

/// Each GPU's result of each check, one row per GPU, check and attempt, for its
/// record (`gpuvet.history`, `gpuvet_model::history`): read newest first by GPU and
/// check. A GPU is its key (`uuid:UUID`, or `node/devN`); a result reported twice for
/// one attempt (by its node and by its group's coordinator) is kept once. Pruned with
/// its run.
const V7_GPU_RESULTS: &str = "
CREATE TABLE gpu_results (
    id             INTEGER PRIMARY KEY,
    run_id         INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    gpu            TEXT    NOT NULL,
    check_name     TEXT    NOT NULL,
    job_id         TEXT    NOT NULL,
    attempt        INTEGER NOT NULL,
    verdict        TEXT    NOT NULL,
    value          REAL,
    model          TEXT,
    measured_at_ms INTEGER NOT NULL,
    UNIQUE (gpu, check_name, job_id, attempt)
);
CREATE INDEX gpu_results_by_gpu ON gpu_results (gpu, check_name, measured_at_ms);
CREATE INDEX gpu_results_by_run ON gpu_results (run_id);
";

/// A node's history across jobs (`nodes.rs`) reads its attempts by node, and its
/// untaint events by node and kind. `node_failed`: whether the run failed because of
/// its own node (`offenders::fails_its_node`), 1 or 0; NULL in runs from before, read
/// as their outcome.
const V8_NODE_HISTORY: &str = "
ALTER TABLE runs ADD COLUMN node_failed INTEGER;
CREATE INDEX attempts_by_node ON attempts (node, started_at_ms);
CREATE INDEX events_by_node ON events (node, kind, time_ms);
";

/// The workload of each GPU result (`gpuvet_model::history::work_of`: a GEMM's
/// precision and shape), so that a GPU's record holds one workload's figures. Results
/// from before have an empty workload and no record reads them: a GPU's record starts
/// again.
const V9_GPU_RESULT_WORK: &str = "
ALTER TABLE gpu_results ADD COLUMN work TEXT NOT NULL DEFAULT '';
";

/// Sets the connection up and brings the schema to [`SCHEMA_VERSION`].
pub(crate) fn prepare(conn: &mut Connection, location: &str) -> Result<(), StoreError> {
    let open_error = |error: rusqlite::Error| StoreError::Open {
        location: location.to_owned(),
        cause: Box::new(error),
    };
    // The busy timeout first: switching to WAL and migrating may wait on another process.
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_error)?;
    set_wal(conn).map_err(open_error)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_error)?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(open_error)?;

    // Usually the schema is current and a read suffices. One read transaction, so that
    // the three values come from one snapshot even while another process migrates.
    let current = {
        let read = conn.transaction().map_err(open_error)?;
        check_version(&read, location).map_err(open_error)??
    };
    if current {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(open_error)?;
    // Again under the write lock: another process may have migrated meanwhile.
    if check_version(&tx, location).map_err(open_error)?? {
        return Ok(());
    }
    let version = user_version(&tx).map_err(open_error)?;
    for migration in &MIGRATIONS[version as usize..] {
        tx.execute_batch(migration).map_err(open_error)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(open_error)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(open_error)?;
    tx.commit().map_err(open_error)
}

/// `Ok(true)` when the schema is current, `Ok(false)` when it needs migrations, and an
/// error when the file is not a gpuvet store or is newer than this gpuvet.
fn check_version(conn: &Connection, location: &str) -> rusqlite::Result<Result<bool, StoreError>> {
    let application_id: i32 = conn.pragma_query_value(None, "application_id", |row| row.get(0))?;
    let version = user_version(conn)?;
    let ours = application_id == APPLICATION_ID;
    let fresh = application_id == 0 && version == 0 && {
        let objects: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
        objects == 0
    };
    Ok(if !ours && !fresh {
        Err(StoreError::NotAStore {
            location: location.to_owned(),
        })
    } else if version > SCHEMA_VERSION {
        Err(StoreError::TooNew {
            location: location.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        })
    } else {
        Ok(version == SCHEMA_VERSION)
    })
}

/// Switches the file to WAL. SQLite does not wait on the busy handler here: a process
/// switching a new file while another one reads it gets `SQLITE_BUSY` at once, so
/// this retries until the busy timeout.
///
/// The mode is `memory` for an in-memory store; a file system without shared memory
/// may refuse WAL and keep `delete`, which still works, only with less concurrency.
fn set_wal(conn: &Connection) -> rusqlite::Result<String> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Err(error)
                if matches!(
                    error.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) && Instant::now() < deadline =>
            {
                thread::sleep(Duration::from_millis(5));
            }
            result => return result,
        }
    }
}

fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}
