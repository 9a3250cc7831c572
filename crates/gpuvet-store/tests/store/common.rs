//! What the tests share: a fresh store on either database ([`Fixture`]), plain SQL
//! beside the store's own, and the reports and events the tests record.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Attempt, EventKind, NewEvent};
use gpuvet_model::results::{
    CheckResult, CheckStatus, DeviceInfo, Entity, EntityResult, Evidence, Lane, Measurement,
    Outcome, RunReport, Verdict,
};
use gpuvet_store::{Store, StoreLocation};
use serde_json::json;
use tempfile::TempDir;

#[cfg(feature = "postgres")]
pub use gpuvet_testkit::postgres::connect;
/// The PostgreSQL server of the tests: a URL whose user may create databases.
pub use gpuvet_testkit::postgres::{TestDatabase, with_database};

/// A fresh, empty place for a store, which nothing else uses, removed at the end.
pub enum Fixture {
    /// A file that does not exist yet, in a directory that does not exist yet.
    Sqlite { _dir: TempDir, path: PathBuf },
    /// A database of its own on the test server (made only with the feature
    /// `postgres`).
    Postgres(TestDatabase),
}

impl Fixture {
    pub fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        // A missing parent directory is created.
        let path = dir.path().join("state").join("gpuvet.db");
        Fixture::Sqlite { _dir: dir, path }
    }

    #[cfg_attr(not(feature = "postgres"), expect(dead_code))]
    pub fn postgres() -> Fixture {
        Fixture::Postgres(TestDatabase::create())
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Fixture::Postgres(_))
    }

    pub fn location(&self) -> StoreLocation {
        match self {
            Fixture::Sqlite { path, .. } => StoreLocation::Sqlite(path.clone()),
            Fixture::Postgres(db) => StoreLocation::Postgres(db.url.clone()),
        }
    }

    /// The location as `--store` would take it (for a child process).
    pub fn location_arg(&self) -> String {
        match self {
            Fixture::Sqlite { path, .. } => path.to_str().unwrap().to_owned(),
            Fixture::Postgres(db) => db.url.clone(),
        }
    }

    /// A new handle on the store (creating it the first time).
    pub fn open(&self) -> Store {
        Store::open_location(&self.location()).unwrap()
    }

    /// Runs SQL on the store's database beside the store, as another program would.
    pub fn execute(&self, sql: &str) {
        match self {
            Fixture::Sqlite { path, .. } => {
                // Before the store (another program's file): its directory too.
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                rusqlite::Connection::open(path)
                    .unwrap()
                    .execute_batch(sql)
                    .unwrap();
            }
            Fixture::Postgres(db) => db.client().batch_execute(sql).unwrap(),
        }
    }

    /// The one integer (or NULL) a query returns.
    pub fn query_int(&self, sql: &str) -> Option<i64> {
        match self {
            Fixture::Sqlite { path, .. } => rusqlite::Connection::open(path)
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap(),
            Fixture::Postgres(db) => db.client().query_one(sql, &[]).unwrap().get(0),
        }
    }

    /// The rows of a query, each column as JSON: integers, numbers, text or null.
    pub fn rows(&self, sql: &str) -> Vec<Vec<serde_json::Value>> {
        match self {
            Fixture::Sqlite { path, .. } => {
                use rusqlite::types::ValueRef;
                let conn = rusqlite::Connection::open(path).unwrap();
                let mut select = conn.prepare(sql).unwrap();
                let columns = select.column_count();
                select
                    .query_map([], |r| {
                        (0..columns)
                            .map(|i| {
                                Ok(match r.get_ref(i)? {
                                    ValueRef::Null => json!(null),
                                    ValueRef::Integer(n) => json!(n),
                                    ValueRef::Real(x) => json!(x),
                                    ValueRef::Text(t) => json!(std::str::from_utf8(t).unwrap()),
                                    ValueRef::Blob(_) => panic!("a blob in column {i}"),
                                })
                            })
                            .collect()
                    })
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
            Fixture::Postgres(db) => {
                use postgres::types::Type;
                db.client()
                    .query(sql, &[])
                    .unwrap()
                    .iter()
                    .map(|r| {
                        r.columns()
                            .iter()
                            .enumerate()
                            .map(|(i, column)| match *column.type_() {
                                Type::INT8 => json!(r.get::<_, Option<i64>>(i)),
                                Type::INT4 => json!(r.get::<_, Option<i32>>(i)),
                                Type::FLOAT8 => json!(r.get::<_, Option<f64>>(i)),
                                _ => json!(r.get::<_, Option<String>>(i)),
                            })
                            .collect()
                    })
                    .collect()
            }
        }
    }

    pub fn count(&self, table: &str) -> i64 {
        self.query_int(&format!("SELECT COUNT(*) FROM {table}"))
            .unwrap()
    }

    /// The tables in the database (in PostgreSQL, in its current schema), by name.
    pub fn tables(&self) -> Vec<String> {
        let sql = match self {
            Fixture::Sqlite { .. } => {
                "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
            }
            Fixture::Postgres(_) => {
                "SELECT c.relname::text FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY 1"
            }
        };
        match self {
            Fixture::Sqlite { path, .. } => {
                let conn = rusqlite::Connection::open(path).unwrap();
                let mut select = conn.prepare(sql).unwrap();
                select
                    .query_map([], |r| r.get(0))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
            Fixture::Postgres(db) => db
                .client()
                .query(sql, &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect(),
        }
    }

    /// The schema version the database records.
    pub fn schema_version(&self) -> i64 {
        match self {
            Fixture::Sqlite { .. } => self.query_int("PRAGMA user_version").unwrap(),
            Fixture::Postgres(_) => self
                .query_int("SELECT CAST(version AS BIGINT) FROM gpuvet_schema")
                .unwrap(),
        }
    }

    pub fn set_schema_version(&self, version: u32) {
        match self {
            Fixture::Sqlite { .. } => self.execute(&format!("PRAGMA user_version = {version}")),
            Fixture::Postgres(_) => {
                self.execute(&format!("UPDATE gpuvet_schema SET version = {version}"))
            }
        }
    }

    /// Makes the database refuse (raise an error on) each `event` (`INSERT`, `UPDATE`)
    /// on `table` where `condition` (on `NEW`) holds.
    pub fn refuse(&self, table: &str, event: &str, condition: &str) {
        self.execute(&match self {
            Fixture::Sqlite { .. } => format!(
                "CREATE TRIGGER refuse BEFORE {event} ON {table} WHEN {condition}
                 BEGIN SELECT RAISE(ABORT, 'refused by test'); END;"
            ),
            Fixture::Postgres(_) => format!(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql
                 AS $$ BEGIN RAISE EXCEPTION 'refused by test'; END $$;
                 CREATE TRIGGER refuse BEFORE {event} ON {table}
                 FOR EACH ROW WHEN ({condition}) EXECUTE FUNCTION refuse();"
            ),
        });
    }
}

impl Fixture {
    /// Makes the database refuse to commit a transaction that added a run whose
    /// `report_id` is `report_id`: every statement succeeds, and `COMMIT` fails (a
    /// deferred foreign key on SQLite, a deferred constraint trigger on PostgreSQL).
    pub fn refuse_commit_of_report(&self, report_id: &str) {
        self.execute(&match self {
            Fixture::Sqlite { .. } => format!(
                "CREATE TABLE commit_guard (
                     attempt_id INTEGER REFERENCES attempts (id) DEFERRABLE INITIALLY DEFERRED);
                 CREATE TRIGGER refuse_commit AFTER INSERT ON runs
                 WHEN NEW.report_id = '{report_id}'
                 BEGIN INSERT INTO commit_guard VALUES (-1); END;"
            ),
            Fixture::Postgres(_) => format!(
                "CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql
                 AS $$ BEGIN RAISE EXCEPTION 'commit refused by test'; END $$;
                 CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON runs
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
                 WHEN (NEW.report_id = '{report_id}') EXECUTE FUNCTION refuse_commit();"
            ),
        });
    }
}

/// `url` with `param=value` added to its query.
pub fn with_param(url: &str, param: &str) -> String {
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}{param}")
}

/// A report of `attempt` with two checks that did no work and one with a slow device.
pub fn report(attempt: &Attempt, started_at_ms: u64) -> RunReport {
    let mut gemm = CheckResult::without_work(CheckName::GemmFlops, CheckStatus::Failed, "slow");
    gemm.reason = None;
    gemm.duration_secs = 2.5;
    gemm.params = BTreeMap::from([("dtype".to_owned(), "bf16".to_owned())]);
    gemm.entities = [
        (0, 700.0, Verdict::Ok),
        (1, 710.0, Verdict::Ok),
        (2, 300.0, Verdict::Slow),
    ]
    .into_iter()
    .map(|(index, value, verdict)| {
        let entity = Entity::Device {
            node: attempt.node.clone(),
            index,
        };
        EntityResult {
            entity: entity.clone(),
            verdict,
            lane: Lane::Host,
            reason: format!("{value} TFLOPS"),
            evidence: Evidence {
                value: Some(value),
                peer_median: Some(705.0),
                ..Evidence::default()
            },
            measurement: Measurement::ok(entity, value, vec![value, value + 1.0])
                .with_extra("m", 8192.0),
        }
    })
    .collect();
    let checks = vec![
        gemm,
        CheckResult::without_work(CheckName::AllReduce1, CheckStatus::Skipped, "one device"),
        CheckResult::without_work(CheckName::AllReduce2, CheckStatus::NotRun, "time ran out"),
    ];
    RunReport {
        report_id: String::new(),
        gpuvet_version: "0.1.0".to_owned(),
        job_id: attempt.job_id.clone(),
        attempt: attempt.attempt,
        node: attempt.node.clone(),
        instance: attempt.instance.clone(),
        backend: "sim".to_owned(),
        devices: vec![DeviceInfo {
            index: 0,
            name: "Sim H200".to_owned(),
            memory_bytes: Some(141 << 30),
            facts: Default::default(),
            details: BTreeMap::new(),
        }],
        started_at_ms,
        duration_secs: 2.75,
        timeout_secs: 300.0,
        outcome: Outcome::of(&checks),
        checks,
        group: None,
        context: None,
        diagnosis: None,
        repeat_offender: None,
    }
}

pub fn passing_report(attempt: &Attempt, started_at_ms: u64) -> RunReport {
    let mut report = report(attempt, started_at_ms);
    report.checks.truncate(2);
    report.checks[0].status = CheckStatus::Passed;
    for entity in &mut report.checks[0].entities {
        entity.verdict = Verdict::Ok;
    }
    report.outcome = Outcome::of(&report.checks);
    report
}

pub fn with_id(mut report: RunReport, id: &str) -> RunReport {
    report.report_id = id.to_owned();
    report
}

pub fn event(time_ms: u64, kind: EventKind, message: &str) -> NewEvent {
    NewEvent {
        event_id: String::new(),
        time_ms,
        kind,
        lane: (kind == EventKind::SanityCheckFailed).then_some(Lane::Network),
        message: message.to_owned(),
        details: json!({ "message": message, "n": time_ms }),
    }
}

/// An event with an id, whose message names it: events of one kind and message in
/// one attempt would be repeats (`gpuvet_model::event_fold`), counted on one row.
pub fn event_with_id(time_ms: u64, id: &str) -> NewEvent {
    NewEvent {
        event_id: id.to_owned(),
        ..event(
            time_ms,
            EventKind::SanityCheckFailed,
            &format!("failed: {id}"),
        )
    }
}

pub fn messages(events: &[gpuvet_model::events::Event]) -> Vec<&str> {
    events.iter().map(|e| e.event.message.as_str()).collect()
}

/// An XID policy state as the runtime check saves it (its form is the watcher's; the
/// store keeps any JSON).
pub fn watch_state(level: u64) -> serde_json::Value {
    json!({ "format": 1, "records": [{ "xid": 79, "level": level, "emitted": true }] })
}

#[test]
fn urls_name_another_database() {
    assert_eq!(
        with_database("postgres://u:p@h:5439/gpuvet_test", "x"),
        "postgres://u:p@h:5439/x"
    );
    assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    assert_eq!(
        with_database("postgresql://u:a/b@h/db?sslmode=disable", "x"),
        "postgresql://u:a/b@h/x?sslmode=disable"
    );
    assert_eq!(with_param("postgres://h/x", "a=1"), "postgres://h/x?a=1");
    assert_eq!(
        with_param("postgres://h/x?a=1", "b=2"),
        "postgres://h/x?a=1&b=2"
    );
}

/// Whether the database itself refused what the store asked (a trigger, a constraint).
pub fn refused_by_the_database(err: &gpuvet_store::StoreError) -> bool {
    use gpuvet_store::StoreError;
    match err {
        StoreError::Sqlite { .. } => true,
        #[cfg(feature = "postgres")]
        StoreError::Postgres { .. } => true,
        _ => false,
    }
}
