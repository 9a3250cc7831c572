//! The store on SQLite: every test of `behaviour.rs` on a new file, and what only
//! SQLite has: WAL mode, the store in memory, paths and files that are no database,
//! and stores from before the later schema versions.

use std::path::Path;

use gpuvet_store::{EventFilter, SCHEMA_VERSION, Store, StoreError, StoreLocation};
use rusqlite::Connection;

use crate::behaviour::{self, behaviours};
use crate::common::{Fixture, messages, watch_state};

macro_rules! on_sqlite {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                behaviour::$name(&Fixture::sqlite());
            }
        )*
    };
}

behaviours!(on_sqlite);

fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

#[test]
fn an_in_memory_store_has_no_path() {
    let mut store = Store::open_in_memory().unwrap();
    assert_eq!(store.path(), None);
    assert_eq!(store.location_display(), ":memory:");
    assert_eq!(
        store.begin_attempt("job", "n0", "pod", 0).unwrap().attempt,
        1
    );
}

#[test]
fn a_location_that_is_no_url_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postgres:").join("store.db");
    let location = StoreLocation::parse(path.to_str().unwrap());
    assert_eq!(location, StoreLocation::Sqlite(path.clone()));
    let store = Store::open_location(&location).unwrap();
    assert_eq!(store.path(), Some(path.as_path()));
    assert!(path.is_file());
}

#[test]
fn a_file_store_is_in_wal_mode_at_schema_version() {
    let fixture = Fixture::sqlite();
    let store = fixture.open();
    let StoreLocation::Sqlite(path) = fixture.location() else {
        unreachable!()
    };
    assert_eq!(store.path(), Some(path.as_path()));
    assert_eq!(store.location_display(), path.display().to_string());
    let conn = raw(&path);
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[test]
fn a_store_under_a_regular_file_names_the_path() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let path = file.path().join("x.db");
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot open the store at `{}`: `{}` is a file, not a directory",
            path.display(),
            file.path().display()
        )
    );
    assert!(err.hint().unwrap().contains("--store"));
}

#[test]
fn a_file_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.db");
    std::fs::write(
        &path,
        "these are not the pages you are looking for, ".repeat(100),
    )
    .unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));
    assert!(
        err.hint().unwrap().contains("not an SQLite database"),
        "{:?}",
        err.hint()
    );
}

#[test]
fn a_version_1_store_is_migrated_and_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuvet.db");
    // A store as the previous gpuvet left it: schema version 1, with an attempt and
    // an event.
    {
        let conn = raw(&path);
        conn.execute_batch(include_str!("../fixtures/schema_v1.sql"))
            .unwrap();
        conn.execute_batch(
            "PRAGMA application_id = 1735423604; PRAGMA user_version = 1;
             INSERT INTO attempts (job_id, node, instance, attempt, started_at_ms)
             VALUES ('job', 'n0', 'pod-0', 1, 5);
             INSERT INTO events (time_ms, job_id, attempt, node, instance, kind, lane, message, details)
             VALUES (7, 'job', 1, 'n0', 'pod-0', 'RuntimeCheckFailed', 'host', 'xid 79', '{}');",
        )
        .unwrap();
    }
    let has_state_table = || -> bool {
        raw(&path)
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'watch_state'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
            == 1
    };
    assert!(!has_state_table());

    let mut store = Store::open(&path).unwrap();
    let version: u32 = raw(&path)
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(has_state_table());
    assert_eq!(
        messages(&store.events(&EventFilter::default()).unwrap()),
        ["xid 79"]
    );
    assert_eq!(
        store.watch_state::<serde_json::Value>("job", "n0").unwrap(),
        None
    );
    let attempt = store.begin_attempt("job", "n0", "pod-0", 8).unwrap();
    assert_eq!(attempt.attempt, 2);
    store
        .record_runtime(&attempt, &[], Some(&watch_state(1)), 9)
        .unwrap();
    drop(store);
    // Opened again: already current, nothing migrates twice.
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.watch_state("job", "n0").unwrap(),
        Some((9, watch_state(1)))
    );
}
