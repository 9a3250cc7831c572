//! The store against real SQLite files in a temporary directory (and in memory): attempt
//! numbering, report and event round trips, filters, concurrency between handles, and
//! the errors a user can meet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::thread;

use gpuvet_core::catalog::CheckName;
use gpuvet_core::events::{Attempt, EventKind, NewEvent};
use gpuvet_core::results::{
    CheckResult, CheckStatus, DeviceInfo, Entity, EntityResult, Evidence, Lane, Measurement,
    Outcome, RunReport, Verdict,
};
use gpuvet_store::{
    EventFilter, OutboxKind, ResultFilter, RunFilter, SCHEMA_VERSION, Store, StoreError,
};
use rusqlite::Connection;
use serde_json::json;
use tempfile::TempDir;

fn temp_store() -> (TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    // A missing parent directory is created.
    let path = dir.path().join("state").join("gpuvet.db");
    let store = Store::open(&path).unwrap();
    (dir, path, store)
}

/// A report of `attempt` with two checks that did no work and one with a slow device.
fn report(attempt: &Attempt, started_at_ms: u64) -> RunReport {
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
            details: BTreeMap::new(),
        }],
        started_at_ms,
        duration_secs: 2.75,
        timeout_secs: 300.0,
        outcome: Outcome::of(&checks),
        checks,
        group: None,
    }
}

fn event(time_ms: u64, kind: EventKind, message: &str) -> NewEvent {
    NewEvent {
        event_id: String::new(),
        time_ms,
        kind,
        lane: (kind == EventKind::SanityCheckFailed).then_some(Lane::Network),
        message: message.to_owned(),
        details: json!({ "message": message, "n": time_ms }),
    }
}

fn messages(events: &[gpuvet_core::events::Event]) -> Vec<&str> {
    events.iter().map(|e| e.event.message.as_str()).collect()
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

#[test]
fn attempts_start_at_one_and_count_per_job_and_node() {
    let (_dir, _path, mut store) = temp_store();
    let numbers: Vec<u32> = (0..3)
        .map(|i| {
            store
                .begin_attempt("job-a", "n0", "pod-0", i)
                .unwrap()
                .attempt
        })
        .collect();
    assert_eq!(numbers, [1, 2, 3]);
    assert_eq!(
        store
            .begin_attempt("job-a", "n1", "pod-1", 9)
            .unwrap()
            .attempt,
        1
    );
    let other = store.begin_attempt("job-b", "n0", "pod-0", 10).unwrap();
    assert_eq!(
        other,
        Attempt {
            job_id: "job-b".into(),
            attempt: 1,
            node: "n0".into(),
            instance: "pod-0".into()
        }
    );
    assert_eq!(store.latest_attempt("job-a").unwrap(), Some(3));
    assert_eq!(store.latest_attempt("job-b").unwrap(), Some(1));
    assert_eq!(store.latest_attempt("job-c").unwrap(), None);
}

#[test]
fn report_round_trips_and_its_check_rows_match() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1_000).unwrap();
    let original = report(&attempt, 1_000);
    let run_id = store.record_report(&attempt, &original).unwrap();

    let reports = store.reports("job", 1).unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        serde_json::to_value(&reports[0]).unwrap(),
        serde_json::to_value(&original).unwrap()
    );

    let results = store.results(&ResultFilter::default()).unwrap();
    assert_eq!(results.len(), 3);
    for (stored, check) in results.iter().zip(&original.checks) {
        assert_eq!(stored.attempt, attempt);
        assert_eq!(stored.run_id, run_id);
        assert_eq!(stored.started_at_ms, 1_000);
        assert_eq!(&stored.result, check);
    }

    let conn = raw(&path);
    let mut select = conn
        .prepare(
            "SELECT check_name, status, duration_secs, median_value, unit, findings
             FROM check_results WHERE run_id = ?1 ORDER BY position",
        )
        .unwrap();
    let rows: Vec<(String, String, f64, Option<f64>, String, i64)> = select
        .query_map([run_id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expected: Vec<_> = original
        .checks
        .iter()
        .map(|c| {
            (
                c.name.as_str().to_owned(),
                c.status.as_str().to_owned(),
                c.duration_secs,
                c.median_value(),
                c.metric.unit.clone(),
                c.findings().count() as i64,
            )
        })
        .collect();
    assert_eq!(rows, expected);
    assert_eq!(rows[0].3, Some(700.0));
    assert_eq!(rows[0].5, 1);

    let (backend, outcome): (String, String) = conn
        .query_row(
            "SELECT backend, outcome FROM runs WHERE id = ?1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((backend.as_str(), outcome.as_str()), ("sim", "failed"));
}

#[test]
fn results_of_one_attempt_never_appear_under_another() {
    let (_dir, _path, mut store) = temp_store();
    let first = store.begin_attempt("job", "n0", "pod-0", 1_000).unwrap();
    let first_run = store.record_report(&first, &report(&first, 1_000)).unwrap();
    let second = store.begin_attempt("job", "n0", "pod-0", 2_000).unwrap();
    let mut retry = report(&second, 2_000);
    retry.checks.truncate(1);
    let second_run = store.record_report(&second, &retry).unwrap();
    let other_node = store.begin_attempt("job", "n1", "pod-1", 2_100).unwrap();
    store
        .record_report(&other_node, &report(&other_node, 2_100))
        .unwrap();

    let filter = ResultFilter {
        job_id: Some("job".into()),
        attempt: Some(2),
        ..ResultFilter::default()
    };
    let results = store.results(&filter).unwrap();
    assert_eq!(results.len(), 1);
    assert!(
        results
            .iter()
            .all(|r| r.attempt.attempt == 2 && r.run_id == second_run)
    );

    let attempt_one = ResultFilter {
        job_id: Some("job".into()),
        attempt: Some(1),
        ..ResultFilter::default()
    };
    let results = store.results(&attempt_one).unwrap();
    assert_eq!(results.len(), 6);
    assert!(results.iter().all(|r| r.attempt.attempt == 1));
    let nodes: Vec<&str> = results.iter().map(|r| r.attempt.node.as_str()).collect();
    assert_eq!(
        nodes,
        ["n0", "n0", "n0", "n1", "n1", "n1"],
        "ordered by run start"
    );

    let by_node_and_check = ResultFilter {
        attempt: Some(1),
        node: Some("n0".into()),
        check: Some(CheckName::AllReduce2),
        ..attempt_one
    };
    let results = store.results(&by_node_and_check).unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].run_id, first_run);
    assert_eq!(results[0].result.name, CheckName::AllReduce2);

    assert_eq!(store.reports("job", 2).unwrap(), [retry]);
    assert_eq!(store.reports("job", 1).unwrap().len(), 2);
    assert!(store.reports("job", 3).unwrap().is_empty());
    assert!(
        store
            .results(&ResultFilter {
                job_id: Some("nope".into()),
                ..ResultFilter::default()
            })
            .unwrap()
            .is_empty()
    );
}

#[test]
fn events_filter_by_job_attempt_kind_and_node_in_time_order() {
    let mut store = Store::open_in_memory().unwrap();
    assert_eq!(store.path(), None);
    let a1 = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    let a2 = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    let b1 = store.begin_attempt("job", "n1", "pod-1", 0).unwrap();
    let other = store.begin_attempt("other", "n0", "pod-0", 0).unwrap();

    // Recorded out of time order; equal times keep the order recorded.
    let stored = store
        .record_event(&a1, &event(300, EventKind::SanityCheckFailed, "a1 failed"))
        .unwrap();
    assert_eq!(stored.event.lane, Some(Lane::Network));
    store
        .record_event(&a1, &event(100, EventKind::InstanceStarted, "a1 started"))
        .unwrap();
    store
        .record_event(
            &b1,
            &event(300, EventKind::SanityCheckSucceeded, "b1 passed"),
        )
        .unwrap();
    store
        .record_event(&a2, &event(400, EventKind::SanityCheckFailed, "a2 failed"))
        .unwrap();
    store
        .record_event(
            &other,
            &event(50, EventKind::InstanceStarted, "other started"),
        )
        .unwrap();
    let last = store
        .record_event(&a2, &event(500, EventKind::InstanceExited, "a2 exited"))
        .unwrap();

    let all = store.events(&EventFilter::default()).unwrap();
    assert_eq!(
        messages(&all),
        [
            "other started",
            "a1 started",
            "a1 failed",
            "b1 passed",
            "a2 failed",
            "a2 exited"
        ]
    );
    assert_eq!(all.last().unwrap(), &last);
    assert_eq!(all[2], stored);
    assert_eq!(
        all[2].event.details,
        json!({ "message": "a1 failed", "n": 300 })
    );

    let job = EventFilter {
        job_id: Some("job".into()),
        ..EventFilter::default()
    };
    assert_eq!(
        messages(&store.events(&job).unwrap()),
        [
            "a1 started",
            "a1 failed",
            "b1 passed",
            "a2 failed",
            "a2 exited"
        ]
    );
    let first_try = EventFilter {
        attempt: Some(1),
        ..job.clone()
    };
    assert_eq!(
        messages(&store.events(&first_try).unwrap()),
        ["a1 started", "a1 failed", "b1 passed"]
    );
    let second_try = EventFilter {
        attempt: Some(2),
        ..job.clone()
    };
    assert_eq!(
        messages(&store.events(&second_try).unwrap()),
        ["a2 failed", "a2 exited"]
    );
    let failed = EventFilter {
        kind: Some(EventKind::SanityCheckFailed),
        ..EventFilter::default()
    };
    assert_eq!(
        messages(&store.events(&failed).unwrap()),
        ["a1 failed", "a2 failed"]
    );
    let n1 = EventFilter {
        node: Some("n1".into()),
        ..EventFilter::default()
    };
    assert_eq!(messages(&store.events(&n1).unwrap()), ["b1 passed"]);
    let limited = EventFilter {
        limit: Some(2),
        ..job
    };
    assert_eq!(
        messages(&store.events(&limited).unwrap()),
        ["a1 started", "a1 failed"]
    );
    let none = EventFilter {
        kind: Some(EventKind::InstanceRebuildRequested),
        ..EventFilter::default()
    };
    assert!(store.events(&none).unwrap().is_empty());
}

#[test]
fn a_file_store_is_in_wal_mode_at_schema_version() {
    let (_dir, path, store) = temp_store();
    assert_eq!(store.path(), Some(path.as_path()));
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
fn reopening_keeps_the_data_and_the_schema() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    store.record_report(&attempt, &report(&attempt, 1)).unwrap();
    store
        .record_event(&attempt, &event(1, EventKind::SanityCheckFailed, "failed"))
        .unwrap();
    drop(store);

    for round in 0..2 {
        let mut store = Store::open(&path).unwrap();
        assert_eq!(store.reports("job", 1).unwrap(), [report(&attempt, 1)]);
        assert_eq!(store.results(&ResultFilter::default()).unwrap().len(), 3);
        assert_eq!(
            messages(&store.events(&EventFilter::default()).unwrap()),
            ["failed"]
        );
        assert_eq!(
            store
                .begin_attempt("job", "n0", "pod-0", 2)
                .unwrap()
                .attempt,
            2 + round
        );
    }
    let version: u32 = raw(&path)
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[test]
fn two_handles_on_one_file_interleave_their_writes() {
    let (_dir, path, mut first) = temp_store();
    let mut second = Store::open(&path).unwrap();
    let a = first.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    let b = second.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    assert_eq!((a.attempt, b.attempt), (1, 2));
    for i in 0..10 {
        first
            .record_event(
                &a,
                &event(i * 2, EventKind::InstanceStarted, &format!("first {i}")),
            )
            .unwrap();
        second
            .record_event(
                &b,
                &event(
                    i * 2 + 1,
                    EventKind::RuntimeCheckFailed,
                    &format!("second {i}"),
                ),
            )
            .unwrap();
    }
    let expected: Vec<String> = (0..10)
        .flat_map(|i| [format!("first {i}"), format!("second {i}")])
        .collect();
    for store in [&first, &second, &Store::open(&path).unwrap()] {
        let events = store.events(&EventFilter::default()).unwrap();
        assert_eq!(messages(&events), expected);
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids follow the order written: {ids:?}"
        );
    }
}

#[test]
fn concurrent_handles_never_share_an_attempt_number() {
    let (_dir, path, store) = temp_store();
    drop(store);
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let path = path.clone();
            thread::spawn(move || {
                let mut store = Store::open(&path).unwrap();
                (0..20)
                    .map(|i| {
                        store
                            .begin_attempt("job", "n0", &format!("pod-{t}"), i)
                            .unwrap()
                            .attempt
                    })
                    .collect::<Vec<u32>>()
            })
        })
        .collect();
    let mut numbers: Vec<u32> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=40).collect::<Vec<u32>>());
}

/// Set in the child processes of `processes_never_share_an_attempt_number`.
const CHILD_STORE: &str = "GPUVET_STORE_TEST_CHILD_STORE";

#[test]
fn processes_never_share_an_attempt_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    // The children open the new file at once: they also race to create the schema.
    let children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .env(CHILD_STORE, &path)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let conn = raw(&path);
    let mut select = conn
        .prepare("SELECT attempt FROM attempts ORDER BY attempt")
        .unwrap();
    let numbers: Vec<u32> = select
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(numbers, (1..=45).collect::<Vec<u32>>());
}

gpuvet_testkit::child_process_entry!(CHILD_STORE, begin_attempts_in_a_child_process);

/// A child of `processes_never_share_an_attempt_number`, with the store at `path`.
fn begin_attempts_in_a_child_process(path: String) {
    let mut store = Store::open(Path::new(&path)).unwrap();
    for i in 0..15 {
        store
            .begin_attempt("job", "n0", &format!("pid-{}", std::process::id()), i)
            .unwrap();
    }
}

#[test]
fn concurrent_first_opens_migrate_a_new_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let path = path.clone();
            thread::spawn(move || {
                let mut store = Store::open(&path).unwrap();
                store
                    .begin_attempt("job", &format!("n{t}"), "pod", 0)
                    .unwrap()
                    .attempt
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), 1);
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.latest_attempt("job").unwrap(), Some(1));
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
fn another_programs_database_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    raw(&path)
        .execute_batch("CREATE TABLE notes (body TEXT)")
        .unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("`{}`", path.display())),
        "{err}"
    );
    let tables: i64 = raw(&path)
        .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
        .unwrap();
    assert_eq!(tables, 1);
}

#[test]
fn a_store_from_a_newer_gpuvet_is_refused() {
    let (_dir, path, store) = temp_store();
    drop(store);
    raw(&path)
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    match Store::open(&path).unwrap_err() {
        StoreError::TooNew {
            found, supported, ..
        } => {
            assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_rows_give_decode_errors_naming_table_and_id() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    let run_id = store.record_report(&attempt, &report(&attempt, 0)).unwrap();
    let event = store
        .record_event(&attempt, &event(1, EventKind::InstanceStarted, "started"))
        .unwrap();

    let conn = raw(&path);
    conn.execute(
        "UPDATE runs SET report_json = '{\"job_id\": 3' WHERE id = ?1",
        [run_id],
    )
    .unwrap();
    let err = store.reports("job", 1).unwrap_err();
    assert!(
        matches!(err, StoreError::Decode { table: "runs", id, .. } if id == run_id),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&format!("row {run_id} of table `runs`")),
        "{err}"
    );
    assert!(err.hint().is_some());

    let check_id: i64 = conn
        .query_row("SELECT max(id) FROM check_results", [], |r| r.get(0))
        .unwrap();
    conn.execute(
        "UPDATE check_results SET result_json = '{\"name\": \"gemm_flop\"}' WHERE id = ?1",
        [check_id],
    )
    .unwrap();
    let err = store.results(&ResultFilter::default()).unwrap_err();
    assert!(
        matches!(err, StoreError::Decode { table: "check_results", id, .. } if id == check_id),
        "{err:?}"
    );

    conn.execute(
        "UPDATE events SET details = 'not json' WHERE id = ?1",
        [event.id],
    )
    .unwrap();
    let err = store.events(&EventFilter::default()).unwrap_err();
    assert!(
        matches!(err, StoreError::Decode { table: "events", id, .. } if id == event.id),
        "{err:?}"
    );

    conn.execute(
        "UPDATE events SET details = '{}', kind = 'Started' WHERE id = ?1",
        [event.id],
    )
    .unwrap();
    let err = store.events(&EventFilter::default()).unwrap_err();
    assert!(
        err.to_string().contains("unknown event type `Started`"),
        "{err}"
    );
}

#[test]
fn a_report_is_stored_whole_or_not_at_all() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    // Make the third check row fail to insert.
    raw(&path)
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON check_results WHEN NEW.position = 2
             BEGIN SELECT RAISE(ABORT, 'refused by test'); END;",
        )
        .unwrap();
    let err = store
        .record_report(&attempt, &report(&attempt, 0))
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlite { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("cannot record a report in the store: "),
        "{err}"
    );
    assert!(store.reports("job", 1).unwrap().is_empty());
    assert!(store.results(&ResultFilter::default()).unwrap().is_empty());
    let runs: i64 = raw(&path)
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 0);
}

#[test]
fn a_report_of_another_attempt_or_that_cannot_read_back_is_refused() {
    let mut store = Store::open_in_memory().unwrap();
    let first = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    let second = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    let err = store
        .record_report(&second, &report(&first, 0))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Mismatch {
                field: "attempt",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the report's attempt is `1` but the attempt's is `2`"
    );

    let mut bad = report(&first, 0);
    bad.duration_secs = f64::NAN;
    let err = store.record_report(&first, &bad).unwrap_err();
    assert!(
        matches!(err, StoreError::Encode { what: "report", .. }),
        "{err:?}"
    );
    assert!(store.reports("job", 1).unwrap().is_empty());
}

#[test]
fn a_report_of_an_attempt_begun_elsewhere_adds_the_attempt() {
    let mut store = Store::open_in_memory().unwrap();
    let attempt = Attempt {
        job_id: "job".into(),
        attempt: 4,
        node: "n7".into(),
        instance: "pod-7".into(),
    };
    store.record_report(&attempt, &report(&attempt, 0)).unwrap();
    assert_eq!(store.latest_attempt("job").unwrap(), Some(4));
    assert_eq!(
        store
            .begin_attempt("job", "n7", "pod-7", 1)
            .unwrap()
            .attempt,
        5
    );
    let results = store
        .results(&ResultFilter {
            attempt: Some(4),
            ..ResultFilter::default()
        })
        .unwrap();
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r.attempt == attempt));
}

/// An XID policy state as the runtime check saves it (its form is the watcher's; the
/// store keeps any JSON).
fn watch_state(level: u64) -> serde_json::Value {
    json!({ "format": 1, "records": [{ "xid": 79, "level": level, "emitted": true }] })
}

#[test]
fn runtime_events_and_state_are_recorded_together_and_read_back() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    assert_eq!(
        store.watch_state::<serde_json::Value>("job", "n0").unwrap(),
        None
    );
    let events = [
        event(1, EventKind::RuntimeCheckFailed, "xid 79"),
        event(2, EventKind::RuntimeCheckFailed, "xid 79 again"),
    ];
    let stored = store
        .record_runtime(&attempt, &events, Some(&watch_state(1)), 10)
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1].event, events[1]);
    assert_eq!(
        messages(&store.events(&EventFilter::default()).unwrap()),
        ["xid 79", "xid 79 again"]
    );
    assert_eq!(
        store.watch_state("job", "n0").unwrap(),
        Some((10, watch_state(1)))
    );

    // A later save replaces the state; a step with no findings saves the state alone,
    // one with no state only the events.
    store
        .record_runtime(&attempt, &[], Some(&watch_state(2)), 20)
        .unwrap();
    store
        .record_runtime::<serde_json::Value>(
            &attempt,
            &[event(3, EventKind::RuntimeCheckFailed, "ecc")],
            None,
            30,
        )
        .unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.watch_state("job", "n0").unwrap(),
        Some((20, watch_state(2)))
    );
    assert_eq!(store.events(&EventFilter::default()).unwrap().len(), 3);
    // Kept per job and node.
    assert_eq!(
        store.watch_state::<serde_json::Value>("job", "n1").unwrap(),
        None
    );
    assert_eq!(
        store
            .watch_state::<serde_json::Value>("other", "n0")
            .unwrap(),
        None
    );
    let rows: i64 = raw(&path)
        .query_row("SELECT count(*) FROM watch_state", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);
}

#[test]
fn runtime_events_and_state_are_stored_whole_or_not_at_all() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    store
        .record_runtime(&attempt, &[], Some(&watch_state(0)), 1)
        .unwrap();
    // The state's write fails after the events' inserts, in the same transaction.
    raw(&path)
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE UPDATE ON watch_state
             BEGIN SELECT RAISE(ABORT, 'refused by test'); END;",
        )
        .unwrap();
    let err = store
        .record_runtime(
            &attempt,
            &[event(2, EventKind::RuntimeCheckFailed, "escalated")],
            Some(&watch_state(1)),
            2,
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlite { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("cannot record the runtime check's events and state in the store: "),
        "{err}"
    );
    assert!(store.events(&EventFilter::default()).unwrap().is_empty());
    assert_eq!(
        store.watch_state("job", "n0").unwrap(),
        Some((1, watch_state(0)))
    );
}

#[test]
fn a_saved_state_that_no_longer_decodes_names_its_row() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    store
        .record_runtime(&attempt, &[], Some(&watch_state(0)), 1)
        .unwrap();
    raw(&path)
        .execute("UPDATE watch_state SET state_json = '{\"format\": '", [])
        .unwrap();
    let err = store
        .watch_state::<serde_json::Value>("job", "n0")
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Decode {
                table: "watch_state",
                id: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.hint().is_some());
}

#[test]
fn a_version_1_store_is_migrated_and_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuvet.db");
    // A store as the previous gpuvet left it: schema version 1, with an attempt and
    // an event.
    {
        let conn = raw(&path);
        conn.execute_batch(include_str!("fixtures/schema_v1.sql"))
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

fn count(path: &Path, table: &str) -> i64 {
    raw(path)
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_report_stored_twice_under_its_id_is_stored_once() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let mut sent = report(&attempt, 10);
    sent.report_id = gpuvet_core::ids::new_id();
    let first = store.record_report(&attempt, &sent).unwrap();
    // Again, and from another handle on the same file (a retried push).
    assert_eq!(store.record_report(&attempt, &sent).unwrap(), first);
    let mut other = Store::open(&path).unwrap();
    assert_eq!(other.record_report(&attempt, &sent).unwrap(), first);
    assert_eq!(count(&path, "runs"), 1);
    assert_eq!(count(&path, "check_results"), 3);
    let stored = store.reports("job", 1).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].report_id, sent.report_id);

    // Another report, with its own id, is another run.
    let mut next = report(&attempt, 20);
    next.report_id = gpuvet_core::ids::new_id();
    assert_ne!(store.record_report(&attempt, &next).unwrap(), first);
    assert_eq!(count(&path, "runs"), 2);
}

#[test]
fn one_report_id_on_two_different_reports_is_refused_and_changes_nothing() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let mut sent = report(&attempt, 10);
    sent.report_id = gpuvet_core::ids::new_id();
    store.record_report(&attempt, &sent).unwrap();
    let mut changed = sent.clone();
    changed.duration_secs += 1.0;
    let err = store.record_report(&attempt, &changed).unwrap_err();
    assert!(
        matches!(&err, StoreError::IdConflict { what: "report", id } if *id == sent.report_id),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&format!("`{}`", sent.report_id)),
        "{err}"
    );
    assert!(err.hint().is_some());
    assert_eq!(count(&path, "runs"), 1);
    assert_eq!(count(&path, "check_results"), 3);
}

#[test]
fn reports_without_an_id_are_each_stored_as_before() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let sent = report(&attempt, 10);
    assert!(sent.report_id.is_empty());
    let first = store.record_report(&attempt, &sent).unwrap();
    assert_ne!(store.record_report(&attempt, &sent).unwrap(), first);
    assert_eq!(count(&path, "runs"), 2);
}

#[test]
fn an_event_stored_twice_under_its_id_is_stored_once_and_keeps_its_id() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let mut sent = event(5, EventKind::RuntimeCheckFailed, "xid 79");
    sent.event_id = gpuvet_core::ids::new_id();
    let first = store.record_event(&attempt, &sent).unwrap();
    assert_eq!(store.record_event(&attempt, &sent).unwrap().id, first.id);
    // The runtime check's batch path deduplicates too, inside its transaction.
    let other = event(6, EventKind::RuntimeCheckFailed, "xid 48");
    let stored = store
        .record_runtime(&attempt, &[sent.clone(), other], None::<&()>, 9)
        .unwrap();
    assert_eq!(stored[0].id, first.id);
    assert_eq!(count(&path, "events"), 2);
    let read = store.events(&EventFilter::default()).unwrap();
    assert_eq!(read[0].event.event_id, sent.event_id);
    assert_eq!(read[1].event.event_id, "");
}

#[test]
fn one_event_id_on_two_different_events_is_refused() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let mut sent = event(5, EventKind::RuntimeCheckFailed, "xid 79");
    sent.event_id = gpuvet_core::ids::new_id();
    store.record_event(&attempt, &sent).unwrap();
    let mut changed = sent.clone();
    changed.message = "xid 48".to_owned();
    let err = store.record_event(&attempt, &changed).unwrap_err();
    assert!(
        matches!(&err, StoreError::IdConflict { what: "event", .. }),
        "{err:?}"
    );
    // The same event under another attempt is another event, not a repeat.
    let later = store.begin_attempt("job", "n0", "pod-0", 2).unwrap();
    let err = store.record_event(&later, &sent).unwrap_err();
    assert!(matches!(err, StoreError::IdConflict { .. }), "{err:?}");
    assert_eq!(count(&path, "events"), 1);
}

// Lists and pages: jobs, instances, runs.

fn passing_report(attempt: &Attempt, started_at_ms: u64) -> RunReport {
    let mut report = report(attempt, started_at_ms);
    report.checks.truncate(2);
    report.checks[0].status = CheckStatus::Passed;
    for entity in &mut report.checks[0].entities {
        entity.verdict = Verdict::Ok;
    }
    report.outcome = Outcome::of(&report.checks);
    report
}

#[test]
fn jobs_and_instances_summarize_each_nodes_latest_attempt() {
    let mut store = Store::open_in_memory().unwrap();
    // node-a: attempt 1 failed, attempt 2 passed. node-b: attempt 1 failed.
    // node-c: attempt 1 begun, no report yet. Another job on node-a.
    let a1 = store
        .begin_attempt("job", "node-a", "pod-a", 1_000)
        .unwrap();
    store.record_report(&a1, &report(&a1, 1_000)).unwrap();
    let a2 = store
        .begin_attempt("job", "node-a", "pod-a", 5_000)
        .unwrap();
    let passed_run = store
        .record_report(&a2, &passing_report(&a2, 5_000))
        .unwrap();
    let b1 = store
        .begin_attempt("job", "node-b", "pod-b", 2_000)
        .unwrap();
    let failed_run = store.record_report(&b1, &report(&b1, 2_000)).unwrap();
    store
        .begin_attempt("job", "node-c", "pod-c", 3_000)
        .unwrap();
    let other = store
        .begin_attempt("other", "node-a", "pod-x", 9_000)
        .unwrap();
    store
        .record_report(&other, &passing_report(&other, 9_000))
        .unwrap();

    let jobs = store.jobs().unwrap();
    let names: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(names, ["other", "job"], "the most recently started first");
    let job = &jobs[1];
    assert_eq!(
        (
            job.latest_attempt,
            job.nodes,
            job.passed,
            job.failed,
            job.incomplete,
            job.running
        ),
        (2, 3, 1, 1, 0, 1)
    );
    assert_eq!(
        job.started_at_ms, 2_000,
        "the earliest start among latest attempts"
    );
    assert_eq!(store.job("job").unwrap().as_ref(), Some(job));
    assert_eq!(store.job("missing").unwrap(), None);

    let instances = store.instances("job", None).unwrap();
    let rows: Vec<(&str, u32, &str)> = instances
        .iter()
        .map(|i| (i.attempt.node.as_str(), i.attempt.attempt, i.status()))
        .collect();
    assert_eq!(
        rows,
        [
            ("node-a", 2, "passed"),
            ("node-b", 1, "failed"),
            ("node-c", 1, "running")
        ]
    );
    let run = instances[1].latest_run.as_ref().unwrap();
    assert_eq!(run.run_id, failed_run);
    assert_eq!(
        (run.checks, run.failed_checks, run.findings),
        (3, 2, 1),
        "gemm failed with one slow device and all_reduce_2 did not run"
    );
    assert_eq!(run.duration_secs, Some(2.75));
    assert_eq!(run.backend, "sim");

    // An older attempt by number; one node.
    let first = store.instances("job", Some(1)).unwrap();
    assert_eq!(first.len(), 3);
    assert_eq!(first[0].status(), "failed");
    let node_a = store.instance("job", "node-a", None).unwrap().unwrap();
    assert_eq!(node_a.latest_run.unwrap().run_id, passed_run);
    assert_eq!(node_a.attempt_started_at_ms, 5_000);
    assert_eq!(store.instance("job", "node-z", None).unwrap(), None);
    assert_eq!(store.instance("job", "node-a", Some(7)).unwrap(), None);
}

#[test]
fn runs_list_newest_first_with_filters_and_one_run_reads_back_whole() {
    let mut store = Store::open_in_memory().unwrap();
    let mut ids = Vec::new();
    for (node, at) in [("n0", 1_000), ("n1", 2_000), ("n0", 3_000)] {
        let attempt = store.begin_attempt("job", node, node, at).unwrap();
        let report = if at == 2_000 {
            passing_report(&attempt, at)
        } else {
            report(&attempt, at)
        };
        ids.push((store.record_report(&attempt, &report).unwrap(), report));
    }
    let all = store.runs(&RunFilter::default()).unwrap();
    let order: Vec<i64> = all.iter().map(|r| r.run.run_id).collect();
    assert_eq!(order, [ids[2].0, ids[1].0, ids[0].0]);

    let filter = |f: RunFilter| -> Vec<i64> {
        store
            .runs(&f)
            .unwrap()
            .iter()
            .map(|r| r.run.run_id)
            .collect()
    };
    let n0 = RunFilter {
        node: Some("n0".into()),
        ..RunFilter::default()
    };
    assert_eq!(filter(n0.clone()), [ids[2].0, ids[0].0]);
    assert_eq!(
        filter(RunFilter {
            limit: Some(1),
            ..n0.clone()
        }),
        [ids[2].0]
    );
    assert_eq!(
        filter(RunFilter {
            attempt: Some(2),
            ..n0
        }),
        [ids[2].0]
    );
    assert_eq!(
        filter(RunFilter {
            outcome: Some(Outcome::Passed),
            ..RunFilter::default()
        }),
        [ids[1].0]
    );
    assert!(
        filter(RunFilter {
            job_id: Some("nope".into()),
            ..RunFilter::default()
        })
        .is_empty()
    );

    let (attempt, report) = store.run(ids[1].0).unwrap().unwrap();
    assert_eq!(attempt.node, "n1");
    assert_eq!(report, ids[1].1);
    assert_eq!(store.run(9_999).unwrap(), None);
}

#[test]
fn events_filter_by_time_range_newest_first_and_count_ignores_the_limit() {
    let mut store = Store::open_in_memory().unwrap();
    let attempt = store.begin_attempt("job", "n0", "p0", 0).unwrap();
    for t in [100, 200, 300, 400] {
        store
            .record_event(
                &attempt,
                &event(t, EventKind::InstanceStarted, &format!("at {t}")),
            )
            .unwrap();
    }
    let filter = EventFilter {
        since_ms: Some(200),
        until_ms: Some(400),
        ..EventFilter::default()
    };
    assert_eq!(
        messages(&store.events(&filter).unwrap()),
        ["at 200", "at 300"]
    );
    let newest = EventFilter {
        newest_first: true,
        limit: Some(3),
        ..EventFilter::default()
    };
    assert_eq!(
        messages(&store.events(&newest).unwrap()),
        ["at 400", "at 300", "at 200"]
    );
    assert_eq!(store.count_events(&newest).unwrap(), 4);
    assert_eq!(store.count_events(&filter).unwrap(), 2);
}

// The outbox.

fn with_ids(mut report: RunReport, id: &str) -> RunReport {
    report.report_id = id.to_owned();
    report
}

fn event_with_id(time_ms: u64, id: &str) -> NewEvent {
    NewEvent {
        event_id: id.to_owned(),
        ..event(time_ms, EventKind::SanityCheckFailed, "failed")
    }
}

#[test]
fn with_queueing_on_every_new_report_and_event_is_queued_once_in_the_same_transaction() {
    let (_dir, path, mut store) = temp_store();
    let attempt = store.begin_attempt("job", "n0", "p0", 0).unwrap();
    // Recorded before queueing was on: not queued.
    store
        .record_report(&attempt, &with_ids(report(&attempt, 1), "r-before"))
        .unwrap();
    store.queue_pushes(true);
    let queued = with_ids(report(&attempt, 2), "r-1");
    store.record_report(&attempt, &queued).unwrap();
    store.record_report(&attempt, &queued).unwrap();
    // A report without an id cannot be sent idempotently, so it is not queued.
    store.record_report(&attempt, &report(&attempt, 3)).unwrap();
    store
        .record_event(&attempt, &event_with_id(10, "e-1"))
        .unwrap();
    store
        .record_event(&attempt, &event_with_id(10, "e-1"))
        .unwrap();
    store
        .record_runtime::<serde_json::Value>(
            &attempt,
            &[event_with_id(11, "e-2"), event_with_id(12, "e-3")],
            None,
            20,
        )
        .unwrap();

    let due = store.outbox_due(u64::MAX, 100).unwrap();
    let items: Vec<(OutboxKind, &str)> = due.iter().map(|e| (e.kind, e.item_id.as_str())).collect();
    assert_eq!(
        items,
        [
            (OutboxKind::Report, "r-1"),
            (OutboxKind::Event, "e-1"),
            (OutboxKind::Event, "e-2"),
            (OutboxKind::Event, "e-3")
        ]
    );
    assert_eq!(store.outbox_len().unwrap(), 4);
    let body: RunReport = serde_json::from_str(&due[0].body).unwrap();
    assert_eq!(body, queued);
    let record: gpuvet_core::events::EventRecord = serde_json::from_str(&due[1].body).unwrap();
    assert_eq!(record.attempt, attempt);
    assert_eq!(record.event, event_with_id(10, "e-1"));
    assert!(due.iter().all(|e| e.tries == 0 && e.last_error.is_none()));

    // A report refused for its id (different content) is neither stored nor queued.
    let mut conflicting = queued.clone();
    conflicting.duration_secs = 99.0;
    store.record_report(&attempt, &conflicting).unwrap_err();
    assert_eq!(store.outbox_len().unwrap(), 4);

    // Another handle on the file sees the queue.
    let other = Store::open(&path).unwrap();
    assert_eq!(other.outbox_len().unwrap(), 4);
}

#[test]
fn a_failed_send_waits_longer_each_time_and_a_sent_entry_leaves_the_outbox() {
    let mut store = Store::open_in_memory().unwrap();
    store.queue_pushes(true);
    let attempt = store.begin_attempt("job", "n0", "p0", 0).unwrap();
    store
        .record_event(&attempt, &event_with_id(10, "e-1"))
        .unwrap();
    store
        .record_event(&attempt, &event_with_id(11, "e-2"))
        .unwrap();
    let first = store.outbox_due(u64::MAX, 1).unwrap();
    assert_eq!(first.len(), 1, "the limit holds");
    let id = first[0].id;

    let now = first[0].next_try_at_ms;
    let next = store.outbox_failed(id, "connection refused", now).unwrap();
    assert_eq!(next, now + 1_000);
    let next = store.outbox_failed(id, "connection refused", now).unwrap();
    assert_eq!(next, now + 2_000);
    let due_now: Vec<String> = store
        .outbox_due(now, 10)
        .unwrap()
        .into_iter()
        .map(|e| e.item_id)
        .collect();
    assert_eq!(due_now, ["e-2"], "e-1 waits for its retry");
    let later = store.outbox_due(now + 2_000, 10).unwrap();
    assert_eq!(later[0].item_id, "e-1");
    assert_eq!(later[0].tries, 2);
    assert_eq!(later[0].last_error.as_deref(), Some("connection refused"));
    assert_eq!(
        store.outbox_next_try_ms().unwrap(),
        Some(later[1].next_try_at_ms)
    );

    store.outbox_sent(id).unwrap();
    store.outbox_sent(later[1].id).unwrap();
    assert_eq!(store.outbox_len().unwrap(), 0);
    assert_eq!(store.outbox_next_try_ms().unwrap(), None);
    // The events stay in the store itself.
    assert_eq!(store.count_events(&EventFilter::default()).unwrap(), 2);
}
