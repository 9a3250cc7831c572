//! PostgreSQL's schema: the same tables, columns, constraints and indexes as SQLite's
//! (`schema.rs`) at the same version, in PostgreSQL's types, migrated the same way.
//!
//! The types: every integer is a `BIGINT` (SQLite's `INTEGER` holds 64 bits), every
//! `REAL` a `DOUBLE PRECISION`, and an `INTEGER PRIMARY KEY` a
//! `BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY`. Text is `COLLATE "C"`: ordered
//! by byte, as SQLite's `BINARY` orders it, so that lists come back in the same order
//! from both whatever the database's locale.
//!
//! The version is the one row of `gpuvet_schema`. `MIGRATIONS` lists each migration
//! with the version it reaches; a database runs every one above its version, in
//! order, in one transaction that holds a transaction-level advisory lock, so two
//! servers starting at once on a new database migrate it once. PostgreSQL stores began
//! at version 4 (SQLite's when PostgreSQL came), so the first migration creates that
//! schema whole; a schema change appends a migration here and one to `schema.rs`, with
//! the same version.
//!
//! The tables go in the connection's current schema (the first of its `search_path`
//! that exists, usually `public`); a database whose current schema holds other tables
//! and no `gpuvet_schema` is not a store, and is left alone.

use postgres::{Client, GenericClient};

use crate::pg::error::PostgresOpenError;
use crate::{SCHEMA_VERSION, StoreError};

/// The key of the advisory lock that migrations hold: "gpvt", as SQLite's
/// `application_id`. (Ids are locked in the two-key space, which is separate.)
const MIGRATION_LOCK: i64 = 0x6770_7674;

const MIGRATIONS: [(u32, &str); 6] = [
    (4, V4),
    (5, V5),
    (6, V6),
    (7, V7_GPU_RESULTS),
    (8, V8_NODE_HISTORY),
    (9, V9_GPU_RESULT_WORK),
];

const _: () = assert!(
    MIGRATIONS[MIGRATIONS.len() - 1].0 == SCHEMA_VERSION,
    "PostgreSQL's migrations reach SQLite's schema version"
);

/// `schema.rs`'s V5: the index retention finds the oldest attempts by.
const V5: &str = "CREATE INDEX attempts_by_start ON attempts (started_at_ms);";

/// `schema.rs`'s V6: a repeat of an event is counted on its first row.
const V6: &str = r#"
ALTER TABLE events ADD COLUMN repeat_key TEXT COLLATE "C";
ALTER TABLE events ADD COLUMN count BIGINT NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN last_seen_ms BIGINT;
CREATE INDEX events_by_repeat_key ON events (repeat_key, time_ms) WHERE repeat_key IS NOT NULL;
CREATE TABLE event_repeats (
    event_row BIGINT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    id_hash   BIGINT NOT NULL,
    PRIMARY KEY (event_row, id_hash)
);
"#;

/// `schema.rs`'s `V7_GPU_RESULTS`: each GPU's result of each check, for its record.
const V7_GPU_RESULTS: &str = r#"
CREATE TABLE gpu_results (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id         BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    gpu            TEXT COLLATE "C" NOT NULL,
    check_name     TEXT COLLATE "C" NOT NULL,
    job_id         TEXT COLLATE "C" NOT NULL,
    attempt        BIGINT NOT NULL,
    verdict        TEXT COLLATE "C" NOT NULL,
    value          DOUBLE PRECISION,
    model          TEXT COLLATE "C",
    measured_at_ms BIGINT NOT NULL,
    UNIQUE (gpu, check_name, job_id, attempt)
);
CREATE INDEX gpu_results_by_gpu ON gpu_results (gpu, check_name, measured_at_ms);
CREATE INDEX gpu_results_by_run ON gpu_results (run_id);
"#;

/// `schema.rs`'s `V8_NODE_HISTORY`: a node's history reads its attempts and events by
/// node, and whether each run failed because of its node.
const V8_NODE_HISTORY: &str = "
ALTER TABLE runs ADD COLUMN node_failed BIGINT;
CREATE INDEX attempts_by_node ON attempts (node, started_at_ms);
CREATE INDEX events_by_node ON events (node, kind, time_ms);
";

/// `schema.rs`'s `V9_GPU_RESULT_WORK`: each GPU result's workload.
const V9_GPU_RESULT_WORK: &str = r#"
ALTER TABLE gpu_results ADD COLUMN work TEXT COLLATE "C" NOT NULL DEFAULT '';
"#;

/// SQLite's schema after its migrations 1 to 4; see `schema.rs` for what each part is.
const V4: &str = r#"
CREATE TABLE attempts (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        TEXT COLLATE "C" NOT NULL,
    node          TEXT COLLATE "C" NOT NULL,
    instance      TEXT COLLATE "C" NOT NULL,
    attempt       BIGINT NOT NULL CHECK (attempt >= 1),
    started_at_ms BIGINT NOT NULL,
    UNIQUE (job_id, node, attempt)
);

-- The DOUBLE PRECISION columns may be NULL: the store writes a NaN as NULL, as SQLite
-- does, and the report's JSON is what queries return.
CREATE TABLE runs (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attempt_id     BIGINT NOT NULL REFERENCES attempts (id) ON DELETE CASCADE,
    gpuvet_version TEXT COLLATE "C" NOT NULL,
    backend        TEXT COLLATE "C" NOT NULL,
    outcome        TEXT COLLATE "C" NOT NULL,
    started_at_ms  BIGINT NOT NULL,
    duration_secs  DOUBLE PRECISION,
    timeout_secs   DOUBLE PRECISION,
    report_json    TEXT COLLATE "C" NOT NULL,
    report_id      TEXT COLLATE "C"
);
CREATE INDEX runs_by_attempt ON runs (attempt_id);
CREATE UNIQUE INDEX runs_by_report_id ON runs (report_id) WHERE report_id IS NOT NULL;

CREATE TABLE check_results (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position      BIGINT NOT NULL,
    check_name    TEXT COLLATE "C" NOT NULL,
    status        TEXT COLLATE "C" NOT NULL,
    duration_secs DOUBLE PRECISION,
    median_value  DOUBLE PRECISION,
    unit          TEXT COLLATE "C" NOT NULL,
    findings      BIGINT NOT NULL,
    result_json   TEXT COLLATE "C" NOT NULL,
    UNIQUE (run_id, position)
);
CREATE INDEX check_results_by_check ON check_results (check_name, status);

CREATE TABLE events (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time_ms  BIGINT NOT NULL,
    job_id   TEXT COLLATE "C" NOT NULL,
    attempt  BIGINT NOT NULL,
    node     TEXT COLLATE "C" NOT NULL,
    instance TEXT COLLATE "C" NOT NULL,
    kind     TEXT COLLATE "C" NOT NULL,
    lane     TEXT COLLATE "C",
    message  TEXT COLLATE "C" NOT NULL,
    details  TEXT COLLATE "C" NOT NULL,
    event_id TEXT COLLATE "C"
);
CREATE INDEX events_by_job ON events (job_id, attempt, time_ms);
CREATE INDEX events_by_kind ON events (kind, time_ms);
CREATE INDEX events_by_time ON events (time_ms);
CREATE UNIQUE INDEX events_by_event_id ON events (event_id) WHERE event_id IS NOT NULL;

CREATE TABLE watch_state (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      TEXT COLLATE "C" NOT NULL,
    node        TEXT COLLATE "C" NOT NULL,
    saved_at_ms BIGINT NOT NULL,
    state_json  TEXT COLLATE "C" NOT NULL,
    UNIQUE (job_id, node)
);

CREATE TABLE outbox (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind           TEXT COLLATE "C" NOT NULL,
    item_id        TEXT COLLATE "C" NOT NULL,
    body           TEXT COLLATE "C" NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    tries          BIGINT NOT NULL,
    next_try_at_ms BIGINT NOT NULL,
    last_error     TEXT COLLATE "C",
    UNIQUE (kind, item_id)
);
CREATE INDEX outbox_by_next_try ON outbox (next_try_at_ms);
"#;

/// What opening finds in the database.
enum State {
    Current,
    /// Needs the migrations above this version (0: a new database).
    Migrate(u32),
}

/// Brings the schema to [`SCHEMA_VERSION`], or refuses a database that is not a store
/// or is newer than this gpuvet.
pub(crate) fn prepare(client: &mut Client, location: &str) -> Result<(), StoreError> {
    let open_error = |error: postgres::Error| StoreError::Open {
        location: location.to_owned(),
        cause: Box::new(PostgresOpenError::Server(error)),
    };
    // Usually the schema is current and one look suffices.
    if let State::Current = state(client, location).map_err(open_error)?? {
        return Ok(());
    }
    let mut tx = client.transaction().map_err(open_error)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(open_error)?;
    // Again under the lock: another server may have migrated meanwhile.
    let from = match state(&mut tx, location).map_err(open_error)?? {
        State::Current => return Ok(()),
        State::Migrate(version) => version,
    };
    if from == 0 {
        tx.batch_execute(
            "CREATE TABLE gpuvet_schema (version INTEGER NOT NULL);
             INSERT INTO gpuvet_schema (version) VALUES (0);",
        )
        .map_err(open_error)?;
    }
    for (_, migration) in MIGRATIONS.iter().filter(|(to, _)| *to > from) {
        tx.batch_execute(migration).map_err(open_error)?;
    }
    let version = i32::try_from(SCHEMA_VERSION).expect("the schema version fits an INTEGER");
    tx.execute("UPDATE gpuvet_schema SET version = $1", &[&version])
        .map_err(open_error)?;
    tx.commit().map_err(open_error)
}

/// Whether the current schema is gpuvet's at the current version, or needs migrating;
/// an error when it holds other tables or is newer than this gpuvet.
fn state(
    client: &mut impl GenericClient,
    location: &str,
) -> Result<Result<State, StoreError>, postgres::Error> {
    let tables: Vec<String> = client
        .query(
            "SELECT c.relname::text FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
            &[],
        )?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let version = if tables.iter().any(|t| t == "gpuvet_schema") {
        let row = client.query_one("SELECT MAX(version) FROM gpuvet_schema", &[])?;
        row.get::<_, Option<i32>>(0)
    } else if tables.is_empty() {
        Some(0)
    } else {
        None
    };
    let not_a_store = || StoreError::NotAStore {
        location: location.to_owned(),
    };
    Ok(match version.map(u32::try_from) {
        None | Some(Err(_)) => Err(not_a_store()),
        Some(Ok(found)) if found > SCHEMA_VERSION => Err(StoreError::TooNew {
            location: location.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        }),
        Some(Ok(found)) if found == SCHEMA_VERSION => Ok(State::Current),
        Some(Ok(0)) if !tables.is_empty() => Err(not_a_store()),
        Some(Ok(found)) => Ok(State::Migrate(found)),
    })
}
