//! The store on PostgreSQL: every test of `behaviour.rs` in a database of its own, and
//! what only PostgreSQL has: the schema compared with SQLite's, URLs and their
//! passwords, what the server refuses, schemas on the search path, many handles at
//! once, and a connection that breaks.
//!
//! Each test needs the server `GPUVET_TEST_POSTGRES_URL` names (`.ci/run` starts one):
//! ignored unless asked for, and failing, not skipped, without it.

use std::collections::BTreeMap;

use gpuvet_store::{SCHEMA_VERSION, Store, StoreError, StoreLocation};

use crate::behaviour::{self, behaviours};
use crate::common::{Fixture, TestDatabase, connect, with_database, with_param};

macro_rules! on_postgres {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            #[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
            fn $name() {
                behaviour::$name(&Fixture::postgres());
            }
        )*
    };
}

behaviours!(on_postgres);

/// `url` with its password replaced; panics when it has none.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let at = rest.rfind('@').expect("the test URL names a user");
    let (credentials, host) = (&rest[..at], &rest[at..]);
    let (user, _) = credentials
        .split_once(':')
        .expect("the test URL has a password");
    format!("{scheme}://{user}:{password}{host}")
}

fn open_err(url: &str) -> StoreError {
    Store::open_location(&StoreLocation::parse(url)).unwrap_err()
}

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
fn a_database_store_is_at_schema_version_and_shows_no_password() {
    let db = TestDatabase::create();
    let password = "gpuvet-password-in-url";
    // The URL is the server's with a query; its password shows as `***`.
    let url = with_param(&db.url, "application_name=gpuvet-test");
    let store = Store::open_location(&StoreLocation::parse(&url)).unwrap();
    assert_eq!(store.path(), None);
    let shown = store.location_display();
    assert!(shown.starts_with("postgres"), "{shown}");
    assert!(shown.contains(":***@"), "{shown}");
    assert!(!format!("{store:?}").contains(&url));
    let fixture = Fixture::Postgres(db);
    assert_eq!(fixture.schema_version(), i64::from(SCHEMA_VERSION));
    assert_eq!(
        fixture.tables(),
        [
            "attempts",
            "check_results",
            "event_repeats",
            "events",
            "gpu_results",
            "gpuvet_schema",
            "outbox",
            "runs",
            "watch_state"
        ]
    );
    let location = StoreLocation::parse(&with_password(&url, password));
    assert!(!location.to_string().contains(password));
    assert!(!format!("{location:?}").contains(password));
}

/// One table's shape: its columns (name, whether NOT NULL), indexes and foreign keys,
/// spelled the same for both databases.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    columns: Vec<(String, bool)>,
    indexes: Vec<String>,
    foreign_keys: Vec<String>,
}

fn sqlite_shapes(path: &std::path::Path) -> BTreeMap<String, Shape> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let strings = |sql: &str| -> Vec<Vec<String>> {
        let mut select = conn.prepare(sql).unwrap();
        let n = select.column_count();
        select
            .query_map([], |r| {
                (0..n)
                    .map(|i| {
                        Ok(match r.get_ref(i)? {
                            rusqlite::types::ValueRef::Text(t) => {
                                String::from_utf8(t.to_vec()).unwrap()
                            }
                            rusqlite::types::ValueRef::Integer(n) => n.to_string(),
                            rusqlite::types::ValueRef::Null => String::new(),
                            other => panic!("{other:?}"),
                        })
                    })
                    .collect()
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let tables = strings("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name");
    tables
        .into_iter()
        .map(|t| {
            let table = t[0].clone();
            // name, type, notnull, default, pk
            let columns = strings(&format!(
                "SELECT name, \"notnull\", pk FROM pragma_table_info('{table}') ORDER BY cid"
            ))
            .into_iter()
            .map(|c| (c[0].clone(), c[1] == "1" || c[2] != "0"))
            .collect();
            let mut indexes: Vec<String> = strings(&format!(
                "SELECT name, \"unique\", origin, partial FROM pragma_index_list('{table}')
                 WHERE origin <> 'pk'"
            ))
            .into_iter()
            .map(|i| {
                let columns: Vec<String> = strings(&format!(
                    "SELECT name FROM pragma_index_info('{}') ORDER BY seqno",
                    i[0]
                ))
                .into_iter()
                .map(|c| c[0].clone())
                .collect();
                let name = if i[2] == "u" { "" } else { &i[0] };
                index_shape(name, i[1] == "1", i[3] == "1", &columns)
            })
            .collect();
            indexes.sort();
            let mut foreign_keys: Vec<String> = strings(&format!(
                "SELECT \"from\", \"table\", \"to\", on_delete FROM pragma_foreign_key_list('{table}')"
            ))
            .into_iter()
            .map(|f| format!("{} -> {}({}) on delete {}", f[0], f[1], f[2], f[3]))
            .collect();
            foreign_keys.sort();
            (
                table,
                Shape {
                    columns,
                    indexes,
                    foreign_keys,
                },
            )
        })
        .collect()
}

fn postgres_shapes(client: &mut postgres::Client) -> BTreeMap<String, Shape> {
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_name <> 'gpuvet_schema'
             ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    tables
        .into_iter()
        .map(|table| {
            let columns = client
                .query(
                    "SELECT column_name::text, is_nullable = 'NO' FROM information_schema.columns
                     WHERE table_schema = current_schema() AND table_name::text = $1
                     ORDER BY ordinal_position",
                    &[&table],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            let mut indexes: Vec<String> = client
                .query(
                    "SELECT i.relname::text, ix.indisunique, ix.indpred IS NOT NULL,
                            con.oid IS NOT NULL,
                            ARRAY(SELECT a.attname::text
                                  FROM unnest(ix.indkey) WITH ORDINALITY k(attnum, ord)
                                  JOIN pg_attribute a
                                    ON a.attrelid = ix.indrelid AND a.attnum = k.attnum
                                  ORDER BY k.ord)
                     FROM pg_index ix
                     JOIN pg_class i ON i.oid = ix.indexrelid
                     LEFT JOIN pg_constraint con ON con.conindid = ix.indexrelid
                     WHERE ix.indrelid = $1::text::regclass AND NOT ix.indisprimary",
                    &[&table],
                )
                .unwrap()
                .iter()
                .map(|r| {
                    let from_constraint: bool = r.get(3);
                    let name: String = r.get(0);
                    let name = if from_constraint { "" } else { &name };
                    index_shape(name, r.get(1), r.get(2), &r.get::<_, Vec<String>>(4))
                })
                .collect();
            indexes.sort();
            let mut foreign_keys: Vec<String> = client
                .query(
                    "SELECT a.attname::text, t.relname::text, fa.attname::text,
                            CASE con.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'a' THEN 'NO ACTION'
                                 ELSE con.confdeltype::text END
                     FROM pg_constraint con
                     JOIN pg_class t ON t.oid = con.confrelid
                     JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]
                     JOIN pg_attribute fa ON fa.attrelid = con.confrelid
                                         AND fa.attnum = con.confkey[1]
                     WHERE con.conrelid = $1::text::regclass AND con.contype = 'f'",
                    &[&table],
                )
                .unwrap()
                .iter()
                .map(|r| {
                    format!(
                        "{} -> {}({}) on delete {}",
                        r.get::<_, String>(0),
                        r.get::<_, String>(1),
                        r.get::<_, String>(2),
                        r.get::<_, String>(3)
                    )
                })
                .collect();
            foreign_keys.sort();
            (
                table,
                Shape {
                    columns,
                    indexes,
                    foreign_keys,
                },
            )
        })
        .collect()
}

/// An index as both databases can spell it; `name` empty for the index of a `UNIQUE`
/// constraint, which each database names its own way.
fn index_shape(name: &str, unique: bool, partial: bool, columns: &[String]) -> String {
    format!(
        "{name}{}{}({})",
        if unique { " unique " } else { " " },
        if partial { "partial " } else { "" },
        columns.join(", ")
    )
}

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
fn the_schema_is_sqlites_after_its_migrations() {
    let sqlite = Fixture::sqlite();
    drop(sqlite.open());
    let StoreLocation::Sqlite(path) = sqlite.location() else {
        unreachable!()
    };
    let db = TestDatabase::create();
    drop(Store::open_location(&StoreLocation::parse(&db.url)).unwrap());
    let expected = sqlite_shapes(&path);
    assert_eq!(expected.len(), 8, "{expected:#?}");
    assert_eq!(postgres_shapes(&mut db.client()), expected);
}

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
fn a_wrong_password_is_refused_without_showing_either_password() {
    let db = TestDatabase::create();
    let url = with_password(&db.url, "not-the-password");
    let err = open_err(&url);
    let message = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(
        message.starts_with(&format!(
            "cannot open the store at `{}`: ",
            StoreLocation::parse(&url)
        )),
        "{message}"
    );
    assert!(
        message.contains("password authentication failed"),
        "{message}"
    );
    assert!(!message.contains("not-the-password"), "{message}");
    assert!(!format!("{err:?}").contains("not-the-password"));
    assert!(
        err.hint().unwrap().contains("user and password"),
        "{:?}",
        err.hint()
    );
}

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
fn a_database_that_does_not_exist_is_refused_with_a_hint() {
    let db = TestDatabase::create();
    let url = with_database(db.admin_url(), "gpuvet_test_never_created");
    let err = open_err(&url);
    let message = err.to_string();
    assert!(
        message.contains("database \"gpuvet_test_never_created\" does not exist"),
        "{message}"
    );
    assert!(err.hint().unwrap().contains("createdb"), "{:?}", err.hint());
}

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
fn a_search_path_without_a_schema_is_refused_with_a_hint() {
    let db = TestDatabase::create();
    let url = with_param(&db.url, "options=-csearch_path%3Dnowhere");
    let err = open_err(&url);
    let message = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(message.contains("no schema has been selected"), "{message}");
    assert!(
        err.hint().unwrap().contains("CREATE SCHEMA"),
        "{:?}",
        err.hint()
    );
}

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
fn stores_in_two_schemas_of_one_database_are_separate() {
    let db = TestDatabase::create();
    // Tables in a schema off the search path are no one's business.
    db.client()
        .batch_execute(
            "CREATE SCHEMA one; CREATE SCHEMA two; CREATE SCHEMA other;
             CREATE TABLE other.notes (body TEXT);",
        )
        .unwrap();
    let open = |schema: &str| {
        let url = with_param(&db.url, &format!("options=-csearch_path%3D{schema}"));
        Store::open_location(&StoreLocation::parse(&url)).unwrap()
    };
    let mut one = open("one");
    let mut two = open("two");
    for _ in 0..3 {
        one.begin_attempt("job", "n0", "pod", 0).unwrap();
    }
    two.begin_attempt("job", "n0", "pod", 0).unwrap();
    assert_eq!(one.latest_attempt("job").unwrap(), Some(3));
    assert_eq!(two.latest_attempt("job").unwrap(), Some(1));
    assert_eq!(open("one").latest_attempt("job").unwrap(), Some(3));
    let public = Fixture::Postgres(db);
    assert!(public.tables().is_empty(), "{:?}", public.tables());
    // The database's own schema is still free for a third store.
    assert_eq!(public.open().latest_attempt("job").unwrap(), None);
}

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
fn many_handles_on_threads_never_share_an_attempt_number() {
    let fixture = Fixture::postgres();
    let mut numbers = behaviour::attempt_numbers_from_threads(&fixture, 8, 15);
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=120).collect::<Vec<u32>>());
}

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
fn a_broken_connection_is_an_error_with_a_hint_and_a_new_handle_works() {
    let fixture = Fixture::postgres();
    let Fixture::Postgres(db) = &fixture else {
        unreachable!()
    };
    let mut store = fixture.open();
    store.begin_attempt("job", "n0", "pod", 0).unwrap();
    // End the store's connection as an administrator (or a restart) would, and wait
    // until it has ended.
    let ended: bool = connect(db.admin_url())
        .query_one(
            "SELECT bool_and(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity
             WHERE datname = $1 AND application_name = 'gpuvet'",
            &[&db.url.rsplit('/').next().unwrap()],
        )
        .unwrap()
        .get(0);
    assert!(ended);
    let err = store.latest_attempt("job").unwrap_err();
    assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("cannot read the latest attempt from the store: "),
        "{err}"
    );
    assert!(err.hint().is_some(), "{err}");
    assert!(!err.is_busy());
    let err = store.begin_attempt("job", "n0", "pod", 1).unwrap_err();
    assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
    let mut again = fixture.open();
    assert_eq!(
        again.begin_attempt("job", "n0", "pod", 2).unwrap().attempt,
        2
    );
}
