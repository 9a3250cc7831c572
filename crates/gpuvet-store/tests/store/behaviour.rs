//! What a store does, the same on SQLite and on PostgreSQL: attempt numbering, report
//! and event round trips, ids that keep an item once, filters, lists, the outbox,
//! concurrency between handles and processes, and the errors a user can meet. Each
//! test is a function of a fresh [`Fixture`]; [`behaviours!`] names them all, and
//! `sqlite.rs` and `postgres.rs` run each on their database.

use std::thread;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Attempt, EventKind};
use gpuvet_model::history::{RecordKey, work_of};
use gpuvet_model::results::{Lane, Outcome, RunReport};
use gpuvet_store::{
    EventFilter, OutboxKind, ResultFilter, RunFilter, SCHEMA_VERSION, Store, StoreError,
    StoreLocation,
};
use serde_json::json;

use crate::common::{
    Fixture, event, event_with_id, messages, passing_report, refused_by_the_database, report,
    watch_state, with_id,
};

/// Calls `$run!` with the name of every test in this file: each database's module
/// makes a `#[test]` of each, so none can be left out on one of them.
macro_rules! behaviours {
    ($run:ident) => {
        $run! {
            attempts_start_at_one_and_count_per_job_and_node,
            a_nodes_history_spans_its_jobs_and_nodes_rank_by_failures,
            a_requeued_slurm_job_starts_at_its_restart_count_and_counts_on,
            report_round_trips_and_its_check_rows_match,
            results_of_one_attempt_never_appear_under_another,
            events_filter_by_job_attempt_kind_and_node_in_time_order,
            reopening_keeps_the_data_and_the_schema,
            two_handles_on_one_store_interleave_their_writes,
            concurrent_handles_never_share_an_attempt_number,
            processes_never_share_an_attempt_number,
            concurrent_first_opens_migrate_a_new_store_once,
            another_programs_database_is_left_alone,
            a_store_from_a_newer_gpuvet_is_refused,
            corrupt_rows_give_decode_errors_naming_table_and_id,
            a_value_the_store_cannot_read_is_an_error_naming_it,
            a_number_too_large_to_store_is_refused_and_changes_nothing,
            a_report_is_stored_whole_or_not_at_all,
            a_report_of_another_attempt_or_that_cannot_read_back_is_refused,
            a_report_of_an_attempt_begun_elsewhere_adds_the_attempt,
            runtime_events_and_state_are_recorded_together_and_read_back,
            runtime_events_and_state_are_stored_whole_or_not_at_all,
            a_saved_state_that_no_longer_decodes_names_its_row,
            a_report_stored_twice_under_its_id_is_stored_once,
            one_report_pushed_by_several_handles_at_once_is_stored_once,
            one_report_id_on_two_different_reports_is_refused_and_changes_nothing,
            reports_without_an_id_are_each_stored_as_before,
            an_event_stored_twice_under_its_id_is_stored_once_and_keeps_its_id,
            events_pushed_by_several_handles_at_once_are_each_stored_once,
            one_event_id_on_two_different_events_is_refused,
            jobs_and_instances_summarize_each_nodes_latest_attempt,
            lists_are_in_byte_order_of_their_names,
            runs_list_newest_first_with_filters_and_one_run_reads_back_whole,
            events_filter_by_time_range_newest_first_and_count_ignores_the_limit,
            with_queueing_on_every_new_report_and_event_is_queued_once_in_the_same_transaction,
            a_failed_send_waits_longer_each_time_and_a_sent_entry_leaves_the_outbox,
            a_failed_send_of_an_entry_not_in_the_outbox_is_an_error,
            an_attempt_begun_with_queueing_on_is_queued_and_a_pushed_one_is_recorded_once,
            pruning_takes_old_attempts_with_their_reports_and_old_events_a_batch_at_a_time,
            a_batch_stores_each_write_and_answers_each_in_order,
            a_write_refused_in_a_batch_leaves_its_neighbours_stored,
            writes_of_one_id_in_one_batch_are_stored_once,
            a_batch_whose_commit_fails_stores_none_of_its_writes,
            batches_from_several_handles_at_once_store_each_id_once,
            repeats_within_the_window_are_counted_on_the_first_row,
            an_event_at_the_stores_last_millisecond_still_folds,
            only_the_same_attempt_kind_lane_and_subject_fold,
            a_repeat_pushed_twice_is_counted_once,
            repeats_from_several_handles_at_once_fold_into_one_row_each_counted_once,
            first_sightings_from_several_handles_at_once_make_one_row,
            a_late_repeat_is_counted_and_the_latest_message_stays,
            with_queueing_on_every_repeat_is_queued_for_the_server_to_count,
            pruning_a_counted_row_takes_its_repeats_ids,
            a_gpus_record_is_its_last_ok_results_newest_first_kept_once_per_attempt,
            on_cuda_a_group_keeps_one_record_per_gpu_under_its_uuid,
            records_and_fleet_baselines_are_kept_per_workload,
            the_fleet_learns_a_baseline_per_model_and_check_from_its_newest_ok_results,
        }
    };
}
pub(crate) use behaviours;

pub use crate::batch::{
    a_batch_stores_each_write_and_answers_each_in_order,
    a_batch_whose_commit_fails_stores_none_of_its_writes,
    a_write_refused_in_a_batch_leaves_its_neighbours_stored,
    batches_from_several_handles_at_once_store_each_id_once,
    writes_of_one_id_in_one_batch_are_stored_once,
};
pub use crate::fold::{
    a_late_repeat_is_counted_and_the_latest_message_stays, a_repeat_pushed_twice_is_counted_once,
    an_event_at_the_stores_last_millisecond_still_folds,
    first_sightings_from_several_handles_at_once_make_one_row,
    only_the_same_attempt_kind_lane_and_subject_fold, pruning_a_counted_row_takes_its_repeats_ids,
    repeats_from_several_handles_at_once_fold_into_one_row_each_counted_once,
    repeats_within_the_window_are_counted_on_the_first_row,
    with_queueing_on_every_repeat_is_queued_for_the_server_to_count,
};

pub fn a_requeued_slurm_job_starts_at_its_restart_count_and_counts_on(fixture: &Fixture) {
    let mut store = fixture.open();
    let mut begin = |node: &str, at_least: u32| {
        store
            .begin_attempt_at_least("4242", node, "i", at_least, 1)
            .unwrap()
            .attempt
    };
    // A node that never saw the job, after its second requeue.
    assert_eq!(begin("gpu-05", 3), 3);
    // A second gpuvet in the same run of the job counts on, never back.
    assert_eq!(begin("gpu-05", 3), 4);
    assert_eq!(begin("gpu-05", 1), 5);
    // Another node of the same run: its own count, from the same floor.
    assert_eq!(begin("gpu-06", 3), 3);
    assert_eq!(begin("gpu-07", 0), 1);
}

pub fn attempts_start_at_one_and_count_per_job_and_node(fixture: &Fixture) {
    let mut store = fixture.open();
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

pub fn report_round_trips_and_its_check_rows_match(fixture: &Fixture) {
    let mut store = fixture.open();
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

    let rows = fixture.rows(&format!(
        "SELECT check_name, status, duration_secs, median_value, unit, findings
         FROM check_results WHERE run_id = {run_id} ORDER BY position"
    ));
    let expected: Vec<Vec<serde_json::Value>> = original
        .checks
        .iter()
        .map(|c| {
            vec![
                json!(c.name.as_str()),
                json!(c.status.as_str()),
                json!(c.duration_secs),
                json!(c.median_value()),
                json!(c.metric.unit),
                json!(c.findings().count()),
            ]
        })
        .collect();
    assert_eq!(rows, expected);
    assert_eq!(rows[0][3], json!(700.0));
    assert_eq!(rows[0][5], json!(1));

    let run = fixture.rows(&format!(
        "SELECT backend, outcome FROM runs WHERE id = {run_id}"
    ));
    assert_eq!(run, [[json!("sim"), json!("failed")]]);
}

pub fn results_of_one_attempt_never_appear_under_another(fixture: &Fixture) {
    let mut store = fixture.open();
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

pub fn events_filter_by_job_attempt_kind_and_node_in_time_order(fixture: &Fixture) {
    let mut store = fixture.open();
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

pub fn reopening_keeps_the_data_and_the_schema(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    store.record_report(&attempt, &report(&attempt, 1)).unwrap();
    store
        .record_event(&attempt, &event(1, EventKind::SanityCheckFailed, "failed"))
        .unwrap();
    drop(store);

    for round in 0..2 {
        let mut store = fixture.open();
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
    assert_eq!(fixture.schema_version(), i64::from(SCHEMA_VERSION));
}

pub fn two_handles_on_one_store_interleave_their_writes(fixture: &Fixture) {
    let mut first = fixture.open();
    let mut second = fixture.open();
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
    for store in [&first, &second, &fixture.open()] {
        let events = store.events(&EventFilter::default()).unwrap();
        assert_eq!(messages(&events), expected);
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids follow the order written: {ids:?}"
        );
    }
}

pub fn concurrent_handles_never_share_an_attempt_number(fixture: &Fixture) {
    let mut numbers = attempt_numbers_from_threads(fixture, 2, 20);
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=40).collect::<Vec<u32>>());
}

/// The attempt numbers `threads` handles of their own get when each begins `each`
/// attempts of one job and node at once.
pub fn attempt_numbers_from_threads(fixture: &Fixture, threads: usize, each: u64) -> Vec<u32> {
    drop(fixture.open());
    thread::scope(|scope| {
        let threads: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut store = fixture.open();
                    (0..each)
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
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    })
}

/// Set in the child processes of `processes_never_share_an_attempt_number`.
const CHILD_STORE: &str = "GPUVET_STORE_TEST_CHILD_STORE";

pub fn processes_never_share_an_attempt_number(fixture: &Fixture) {
    // The children open the new store at once: they also race to create the schema.
    let children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .env(CHILD_STORE, fixture.location_arg())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let numbers: Vec<serde_json::Value> = fixture
        .rows("SELECT attempt FROM attempts ORDER BY attempt")
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(numbers, (1..=45).map(|n| json!(n)).collect::<Vec<_>>());
}

gpuvet_testkit::child_process_entry!(CHILD_STORE, begin_attempts_in_a_child_process);

/// A child of `processes_never_share_an_attempt_number`, with the store at `location`.
fn begin_attempts_in_a_child_process(location: String) {
    let mut store = Store::open_location(&StoreLocation::parse(&location)).unwrap();
    for i in 0..15 {
        store
            .begin_attempt("job", "n0", &format!("pid-{}", std::process::id()), i)
            .unwrap();
    }
}

pub fn concurrent_first_opens_migrate_a_new_store_once(fixture: &Fixture) {
    let attempts: Vec<u32> = thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                scope.spawn(move || {
                    let mut store = fixture.open();
                    store
                        .begin_attempt("job", &format!("n{t}"), "pod", 0)
                        .unwrap()
                        .attempt
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(attempts, [1, 1, 1, 1]);
    let store = fixture.open();
    assert_eq!(store.latest_attempt("job").unwrap(), Some(1));
    assert_eq!(fixture.schema_version(), i64::from(SCHEMA_VERSION));
    if fixture.is_postgres() {
        assert_eq!(fixture.count("gpuvet_schema"), 1);
    }
}

pub fn another_programs_database_is_left_alone(fixture: &Fixture) {
    fixture.execute("CREATE TABLE notes (body TEXT)");
    let err = Store::open_location(&fixture.location()).unwrap_err();
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("`{}`", fixture.location())),
        "{err}"
    );
    assert!(err.hint().is_some());
    assert_eq!(fixture.tables(), ["notes"]);
}

pub fn a_store_from_a_newer_gpuvet_is_refused(fixture: &Fixture) {
    drop(fixture.open());
    fixture.set_schema_version(SCHEMA_VERSION + 1);
    let err = Store::open_location(&fixture.location()).unwrap_err();
    match &err {
        StoreError::TooNew {
            found, supported, ..
        } => {
            assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "cannot open the store at `{}`: its schema version is {}, newer than the {} this gpuvet knows",
            fixture.location(),
            SCHEMA_VERSION + 1,
            SCHEMA_VERSION
        )
    );
    assert!(err.hint().is_some());
}

pub fn corrupt_rows_give_decode_errors_naming_table_and_id(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    let run_id = store.record_report(&attempt, &report(&attempt, 0)).unwrap();
    let event = store
        .record_event(&attempt, &event(1, EventKind::InstanceStarted, "started"))
        .unwrap();

    fixture.execute(&format!(
        "UPDATE runs SET report_json = '{{\"job_id\": 3' WHERE id = {run_id}"
    ));
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

    let check_id = fixture
        .query_int("SELECT MAX(id) FROM check_results")
        .unwrap();
    fixture.execute(&format!(
        "UPDATE check_results SET result_json = '{{\"name\": \"gemm_flop\"}}' WHERE id = {check_id}"
    ));
    let err = store.results(&ResultFilter::default()).unwrap_err();
    assert!(
        matches!(err, StoreError::Decode { table: "check_results", id, .. } if id == check_id),
        "{err:?}"
    );

    fixture.execute(&format!(
        "UPDATE events SET details = 'not json' WHERE id = {}",
        event.id
    ));
    let err = store.events(&EventFilter::default()).unwrap_err();
    assert!(
        matches!(err, StoreError::Decode { table: "events", id, .. } if id == event.id),
        "{err:?}"
    );

    fixture.execute(&format!(
        "UPDATE events SET details = '{{}}', kind = 'Started' WHERE id = {}",
        event.id
    ));
    let err = store.events(&EventFilter::default()).unwrap_err();
    assert!(
        err.to_string().contains("unknown event type `Started`"),
        "{err}"
    );
}

pub fn a_value_the_store_cannot_read_is_an_error_naming_it(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    store
        .record_event(&attempt, &event(1, EventKind::InstanceStarted, "started"))
        .unwrap();
    // A time before 1970, written by hand: the store's times are unsigned.
    fixture.execute("UPDATE events SET time_ms = -5");
    let err = store.events(&EventFilter::default()).unwrap_err();
    assert!(matches!(err, StoreError::Data { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "cannot read events from the store: column 1 holds the integer `-5`, not an integer from 0 up"
    );
    assert!(err.hint().is_some());
}

pub fn a_number_too_large_to_store_is_refused_and_changes_nothing(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    let err = store
        .record_runtime(
            &attempt,
            &[
                event(1, EventKind::RuntimeCheckFailed, "fine"),
                event(u64::MAX, EventKind::RuntimeCheckFailed, "far future"),
            ],
            Some(&watch_state(1)),
            2,
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::OutOfRange {
                value: u64::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "cannot record the runtime check's events and state in the store: `{}` is larger than the largest integer the store holds (`{}`)",
            u64::MAX,
            i64::MAX
        )
    );
    assert_eq!(fixture.count("events"), 0);
    assert_eq!(
        store.watch_state::<serde_json::Value>("job", "n0").unwrap(),
        None
    );
    // An attempt number beyond what the store holds is refused the same way.
    assert!(matches!(
        store.begin_attempt("job", "n0", "pod-0", u64::MAX),
        Err(StoreError::OutOfRange { .. })
    ));
    assert_eq!(store.latest_attempt("job").unwrap(), Some(1));
}

pub fn a_report_is_stored_whole_or_not_at_all(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    // Make the third check row fail to insert.
    fixture.refuse("check_results", "INSERT", "NEW.position = 2");
    let err = store
        .record_report(&attempt, &report(&attempt, 0))
        .unwrap_err();
    assert!(refused_by_the_database(&err), "{err:?}");
    let message = err.to_string();
    assert!(
        message.starts_with("cannot record a report in the store: ")
            && message.contains("refused by test"),
        "{message}"
    );
    assert!(store.reports("job", 1).unwrap().is_empty());
    assert!(store.results(&ResultFilter::default()).unwrap().is_empty());
    assert_eq!(fixture.count("runs"), 0);
    // The handle is still good for the next write.
    store
        .record_event(&attempt, &event(1, EventKind::InstanceStarted, "started"))
        .unwrap();
}

pub fn a_report_of_another_attempt_or_that_cannot_read_back_is_refused(fixture: &Fixture) {
    let mut store = fixture.open();
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

pub fn a_report_of_an_attempt_begun_elsewhere_adds_the_attempt(fixture: &Fixture) {
    let mut store = fixture.open();
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

pub fn runtime_events_and_state_are_recorded_together_and_read_back(fixture: &Fixture) {
    let mut store = fixture.open();
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
    let store = fixture.open();
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
    assert_eq!(fixture.count("watch_state"), 1);
}

pub fn runtime_events_and_state_are_stored_whole_or_not_at_all(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    store
        .record_runtime(&attempt, &[], Some(&watch_state(0)), 1)
        .unwrap();
    // The state's write fails after the events' inserts, in the same transaction.
    fixture.refuse("watch_state", "UPDATE", "1 = 1");
    let err = store
        .record_runtime(
            &attempt,
            &[event(2, EventKind::RuntimeCheckFailed, "escalated")],
            Some(&watch_state(1)),
            2,
        )
        .unwrap_err();
    assert!(refused_by_the_database(&err), "{err:?}");
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

pub fn a_saved_state_that_no_longer_decodes_names_its_row(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 0).unwrap();
    store
        .record_runtime(&attempt, &[], Some(&watch_state(0)), 1)
        .unwrap();
    fixture.execute("UPDATE watch_state SET state_json = '{\"format\": '");
    let row = fixture.query_int("SELECT id FROM watch_state").unwrap();
    let err = store
        .watch_state::<serde_json::Value>("job", "n0")
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Decode {
                table: "watch_state",
                id,
                ..
            } if id == row
        ),
        "{err:?}"
    );
    assert!(err.hint().is_some());
}

pub fn a_report_stored_twice_under_its_id_is_stored_once(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let mut sent = report(&attempt, 10);
    sent.report_id = gpuvet_model::ids::new_id();
    let first = store.record_report(&attempt, &sent).unwrap();
    // Again, and from another handle on the same store (a retried push).
    assert_eq!(store.record_report(&attempt, &sent).unwrap(), first);
    let mut other = fixture.open();
    assert_eq!(other.record_report(&attempt, &sent).unwrap(), first);
    assert_eq!(fixture.count("runs"), 1);
    assert_eq!(fixture.count("check_results"), 3);
    let stored = store.reports("job", 1).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].report_id, sent.report_id);

    // Another report, with its own id, is another run.
    let mut next = report(&attempt, 20);
    next.report_id = gpuvet_model::ids::new_id();
    assert_ne!(store.record_report(&attempt, &next).unwrap(), first);
    assert_eq!(fixture.count("runs"), 2);
}

pub fn one_report_pushed_by_several_handles_at_once_is_stored_once(fixture: &Fixture) {
    drop(fixture.open());
    let attempt = Attempt {
        job_id: "job".into(),
        attempt: 1,
        node: "n0".into(),
        instance: "pod-0".into(),
    };
    let sent = with_id(report(&attempt, 10), &gpuvet_model::ids::new_id());
    // Each handle is a server receiving the same push (a retry after a lost reply).
    let run_ids: Vec<i64> = thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let mut store = fixture.open();
                    store.record_report(&attempt, &sent).unwrap()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert!(run_ids.iter().all(|&id| id == run_ids[0]), "{run_ids:?}");
    assert_eq!(fixture.count("runs"), 1);
    assert_eq!(fixture.count("check_results"), 3);
    assert_eq!(fixture.count("attempts"), 1);
}

pub fn one_report_id_on_two_different_reports_is_refused_and_changes_nothing(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let mut sent = report(&attempt, 10);
    sent.report_id = gpuvet_model::ids::new_id();
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
    assert_eq!(fixture.count("runs"), 1);
    assert_eq!(fixture.count("check_results"), 3);
}

pub fn reports_without_an_id_are_each_stored_as_before(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let sent = report(&attempt, 10);
    assert!(sent.report_id.is_empty());
    let first = store.record_report(&attempt, &sent).unwrap();
    assert_ne!(store.record_report(&attempt, &sent).unwrap(), first);
    assert_eq!(fixture.count("runs"), 2);
}

pub fn an_event_stored_twice_under_its_id_is_stored_once_and_keeps_its_id(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let mut sent = event(5, EventKind::RuntimeCheckFailed, "xid 79");
    sent.event_id = gpuvet_model::ids::new_id();
    let first = store.record_event(&attempt, &sent).unwrap();
    assert_eq!(store.record_event(&attempt, &sent).unwrap().id, first.id);
    // The runtime check's batch path deduplicates too, inside its transaction.
    let other = event(6, EventKind::RuntimeCheckFailed, "xid 48");
    let stored = store
        .record_runtime(&attempt, &[sent.clone(), other], None::<&()>, 9)
        .unwrap();
    assert_eq!(stored[0].id, first.id);
    assert_eq!(fixture.count("events"), 2);
    let read = store.events(&EventFilter::default()).unwrap();
    assert_eq!(read[0].event.event_id, sent.event_id);
    assert_eq!(read[1].event.event_id, "");
}

pub fn events_pushed_by_several_handles_at_once_are_each_stored_once(fixture: &Fixture) {
    drop(fixture.open());
    let attempt = Attempt {
        job_id: "job".into(),
        attempt: 1,
        node: "n0".into(),
        instance: "pod-0".into(),
    };
    let ids: Vec<String> = (0..6).map(|_| gpuvet_model::ids::new_id()).collect();
    let events: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| event_with_id(i as u64, id))
        .collect();
    // Overlapping batches in different orders, and single events, at once.
    let stored: Vec<Vec<i64>> = thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (events, attempt) = (&events, &attempt);
                scope.spawn(move || {
                    let mut store = fixture.open();
                    let mut batch = events.clone();
                    if t % 2 == 1 {
                        batch.reverse();
                    }
                    let mut stored: Vec<i64> = if t < 2 {
                        store
                            .record_runtime::<()>(attempt, &batch, None, 1)
                            .unwrap()
                            .iter()
                            .map(|e| e.id)
                            .collect()
                    } else {
                        batch
                            .iter()
                            .map(|e| store.record_event(attempt, e).unwrap().id)
                            .collect()
                    };
                    if t % 2 == 1 {
                        stored.reverse();
                    }
                    stored
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert!(stored.iter().all(|ids| *ids == stored[0]), "{stored:?}");
    assert_eq!(fixture.count("events"), 6);
    let store = fixture.open();
    let read: Vec<String> = store
        .events(&EventFilter::default())
        .unwrap()
        .into_iter()
        .map(|e| e.event.event_id)
        .collect();
    assert_eq!(read, ids);
}

pub fn one_event_id_on_two_different_events_is_refused(fixture: &Fixture) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "pod-0", 1).unwrap();
    let mut sent = event(5, EventKind::RuntimeCheckFailed, "xid 79");
    sent.event_id = gpuvet_model::ids::new_id();
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
    assert_eq!(fixture.count("events"), 1);
}

// Lists and pages: jobs, instances, runs.

pub fn jobs_and_instances_summarize_each_nodes_latest_attempt(fixture: &Fixture) {
    let mut store = fixture.open();
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

pub fn lists_are_in_byte_order_of_their_names(fixture: &Fixture) {
    let mut store = fixture.open();
    // Byte order: upper case before lower case, `-` before `_`, `é` after `z`. A
    // locale's order (PostgreSQL's default for text) would mix them.
    let nodes = ["node-a", "Node-B", "node_c", "nodé", "node-b", "nodz"];
    for node in nodes {
        store.begin_attempt("job", node, "pod", 1).unwrap();
    }
    let listed: Vec<String> = store
        .instances("job", None)
        .unwrap()
        .into_iter()
        .map(|i| i.attempt.node)
        .collect();
    let mut sorted = nodes.map(str::to_owned).to_vec();
    sorted.sort();
    assert_eq!(listed, sorted);
    assert_eq!(
        listed,
        ["Node-B", "node-a", "node-b", "node_c", "nodz", "nodé"]
    );

    // Jobs that started at once come by name.
    for job in ["job-b", "Job-c", "job_a"] {
        store.begin_attempt(job, "n0", "pod", 5).unwrap();
    }
    let jobs: Vec<String> = store
        .jobs()
        .unwrap()
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(jobs, ["Job-c", "job-b", "job_a", "job"]);
}

pub fn runs_list_newest_first_with_filters_and_one_run_reads_back_whole(fixture: &Fixture) {
    let mut store = fixture.open();
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

pub fn events_filter_by_time_range_newest_first_and_count_ignores_the_limit(fixture: &Fixture) {
    let mut store = fixture.open();
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

pub fn with_queueing_on_every_new_report_and_event_is_queued_once_in_the_same_transaction(
    fixture: &Fixture,
) {
    let mut store = fixture.open();
    let attempt = store.begin_attempt("job", "n0", "p0", 0).unwrap();
    // Recorded before queueing was on: not queued.
    store
        .record_report(&attempt, &with_id(report(&attempt, 1), "r-before"))
        .unwrap();
    store.queue_pushes(true);
    let queued = with_id(report(&attempt, 2), "r-1");
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
    let record: gpuvet_model::events::EventRecord = serde_json::from_str(&due[1].body).unwrap();
    assert_eq!(record.attempt, attempt);
    assert_eq!(record.event, event_with_id(10, "e-1"));
    assert!(due.iter().all(|e| e.tries == 0 && e.last_error.is_none()));

    // A report refused for its id (different content) is neither stored nor queued.
    let mut conflicting = queued.clone();
    conflicting.duration_secs = 99.0;
    store.record_report(&attempt, &conflicting).unwrap_err();
    assert_eq!(store.outbox_len().unwrap(), 4);

    // Another handle on the store sees the queue.
    let other = fixture.open();
    assert_eq!(other.outbox_len().unwrap(), 4);
}

pub fn a_failed_send_waits_longer_each_time_and_a_sent_entry_leaves_the_outbox(fixture: &Fixture) {
    let mut store = fixture.open();
    // Begun before queueing, so that only the events below are queued.
    let attempt = store.begin_attempt("job", "n0", "p0", 0).unwrap();
    store.queue_pushes(true);
    store
        .record_event(&attempt, &event_with_id(10, "e-1"))
        .unwrap();
    store
        .record_event(&attempt, &event_with_id(11, "e-2"))
        .unwrap();
    let first = store.outbox_due(u64::MAX, 1).unwrap();
    assert_eq!(first.len(), 1, "the limit holds");
    let id = first[0].id;

    // When both entries are due (each is first due when it was queued, by the clock).
    let now = store
        .outbox_due(u64::MAX, 10)
        .unwrap()
        .iter()
        .map(|e| e.next_try_at_ms)
        .max()
        .unwrap();
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

pub fn a_failed_send_of_an_entry_not_in_the_outbox_is_an_error(fixture: &Fixture) {
    let mut store = fixture.open();
    // Begun before queueing, so that only the events below are queued.
    let attempt = store.begin_attempt("job", "n0", "p0", 0).unwrap();
    store.queue_pushes(true);
    store
        .record_event(&attempt, &event_with_id(10, "e-1"))
        .unwrap();
    let id = store.outbox_due(u64::MAX, 10).unwrap()[0].id;
    store.outbox_sent(id).unwrap();
    // Sent twice (a retry after a lost reply): nothing left to remove.
    store.outbox_sent(id).unwrap();
    let err = store.outbox_failed(id, "timed out", 5).unwrap_err();
    assert!(
        matches!(&err, StoreError::NotFound { what: "outbox entry", id: found } if *found == id.to_string()),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("the store has no outbox entry with id `{id}`")
    );
    assert_eq!(store.outbox_len().unwrap(), 0);
}

pub fn an_attempt_begun_with_queueing_on_is_queued_and_a_pushed_one_is_recorded_once(
    fixture: &Fixture,
) {
    let mut node = fixture.open();
    node.begin_attempt("job", "n0", "p0", 5).unwrap();
    assert_eq!(
        node.outbox_len().unwrap(),
        0,
        "queueing off: nothing queued"
    );
    node.queue_pushes(true);
    let second = node.begin_attempt("job", "n0", "p0", 7).unwrap();
    let due = node.outbox_due(u64::MAX, 10).unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].kind, OutboxKind::Attempt);
    let start: gpuvet_model::events::AttemptStart = serde_json::from_str(&due[0].body).unwrap();
    assert_eq!(start.attempt, second);
    assert_eq!(start.started_at_ms, 7);

    // As a server records it (under another job here, in the same store): shown as
    // running until its report arrives, and recorded once however often it comes.
    let mut server = fixture.open();
    let pushed = gpuvet_model::events::AttemptStart {
        attempt: Attempt {
            job_id: "job-pushed".to_owned(),
            ..second.clone()
        },
        started_at_ms: 7,
    };
    server.record_attempt(&pushed).unwrap();
    server.record_attempt(&pushed).unwrap();
    let instances = server.instances("job-pushed", None).unwrap();
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0].attempt, pushed.attempt);
    assert_eq!(instances[0].attempt_started_at_ms, 7);
    assert_eq!(instances[0].status(), "running");
    let report = with_id(report(&pushed.attempt, 8), "r-2");
    server.record_report(&pushed.attempt, &report).unwrap();
    let now = server.instance("job-pushed", "n0", None).unwrap().unwrap();
    assert_eq!(now.status(), "failed");
}

pub fn pruning_takes_old_attempts_with_their_reports_and_old_events_a_batch_at_a_time(
    fixture: &Fixture,
) {
    let mut store = fixture.open();
    for (node, started) in [
        ("n0", 100),
        ("n1", 101),
        ("n2", 102),
        ("n3", 103),
        ("n4", 104),
    ] {
        let attempt = store.begin_attempt("old", node, "pod", started).unwrap();
        store
            .record_report(&attempt, &report(&attempt, started))
            .unwrap();
        if node == "n0" {
            for time in [50, 60, 70] {
                store
                    .record_event(
                        &attempt,
                        &event(time, EventKind::InstanceStarted, &format!("old {time}")),
                    )
                    .unwrap();
            }
        }
    }
    for node in ["n0", "n1"] {
        let attempt = store.begin_attempt("new", node, "pod", 10_000).unwrap();
        store
            .record_report(&attempt, &report(&attempt, 10_000))
            .unwrap();
        store
            .record_event(&attempt, &event(20_000, EventKind::InstanceStarted, "new"))
            .unwrap();
    }
    assert_eq!(fixture.count("check_results"), 21);

    let mut batches = Vec::new();
    loop {
        let pruned = store.prune_batch(1_000, 2).unwrap();
        batches.push((pruned.attempts, pruned.events));
        if pruned.done(2) {
            break;
        }
    }
    assert_eq!(batches, [(2, 2), (2, 1), (1, 0)]);
    assert_eq!(fixture.count("attempts"), 2);
    assert_eq!(
        fixture.count("runs"),
        2,
        "the reports went with their attempts"
    );
    assert_eq!(fixture.count("check_results"), 6);
    assert_eq!(fixture.count("events"), 2);
    assert_eq!(store.latest_attempt("old").unwrap(), None);
    assert_eq!(store.latest_attempt("new").unwrap(), Some(1));
    // Nothing older is left: another call deletes nothing.
    assert_eq!(
        store.prune_batch(1_000, 2).unwrap(),
        gpuvet_store::Pruned::default()
    );
}

/// Each GPU's record (`gpuvet.history`): its `ok` values newest first, at most `runs`,
/// each attempt's result once, and when its present run of `degraded` results began.
pub fn a_gpus_record_is_its_last_ok_results_newest_first_kept_once_per_attempt(fixture: &Fixture) {
    use gpuvet_model::results::Verdict;
    let mut store = fixture.open();
    let with_gpu0 = |attempt: &Attempt, at: u64, value: f64, verdict: Verdict| {
        let mut report = report(attempt, at);
        let gpu0 = &mut report.checks[0].entities[0];
        gpu0.measurement.value = Some(value);
        gpu0.verdict = verdict;
        report
    };
    for i in 1..=4u64 {
        let attempt = store.begin_attempt("job", "n0", "pod-0", i * 1000).unwrap();
        let report = with_gpu0(&attempt, i * 1000, 700.0 + i as f64, Verdict::Ok);
        store.record_report(&attempt, &report).unwrap();
        // The same attempt's result again (as a group's coordinator reports it): once.
        let again = with_gpu0(&attempt, i * 1000 + 1, 1.0, Verdict::Ok);
        store.record_report(&attempt, &again).unwrap();
    }
    let wanted = [
        record_key("n0/dev0", CheckName::GemmFlops),
        record_key("n0/dev2", CheckName::GemmFlops),
        record_key("n9/dev0", CheckName::GemmFlops),
        record_key("n0/dev0", CheckName::KernelLaunch),
    ];
    let records = store.gpu_records(&wanted, 3).unwrap();
    // dev2 was only ever slow, n9 never measured, kernel_launch never run: no record.
    assert_eq!(records.len(), 1, "{records:?}");
    let gpu0 = &records[&record_key("n0/dev0", CheckName::GemmFlops)];
    assert_eq!(gpu0.values, [704.0, 703.0, 702.0]);
    assert_eq!(gpu0.first_at_ms, 2000);
    assert_eq!(gpu0.degraded_since_ms, None);

    // Two degraded runs: the record keeps its ok past and says since when.
    for i in 5..=6u64 {
        let attempt = store.begin_attempt("job", "n0", "pod-0", i * 1000).unwrap();
        let report = with_gpu0(&attempt, i * 1000, 600.0, Verdict::Degraded);
        store.record_report(&attempt, &report).unwrap();
    }
    let records = store.gpu_records(&wanted[..1], 3).unwrap();
    let gpu0 = &records[&record_key("n0/dev0", CheckName::GemmFlops)];
    assert_eq!(gpu0.values, [704.0, 703.0, 702.0]);
    assert_eq!(gpu0.degraded_since_ms, Some(5000));
    // An ok result ends the degradation.
    let attempt = store.begin_attempt("job", "n0", "pod-0", 7000).unwrap();
    let report = with_gpu0(&attempt, 7000, 705.0, Verdict::Ok);
    store.record_report(&attempt, &report).unwrap();
    let records = store.gpu_records(&wanted[..1], 3).unwrap();
    let gpu0 = &records[&record_key("n0/dev0", CheckName::GemmFlops)];
    assert_eq!(gpu0.values, [705.0, 704.0, 703.0]);
    assert_eq!(gpu0.degraded_since_ms, None);
}

/// A group of two nodes on cuda, as a server gets it: each node's copy of the verdict
/// (its own GPU with its UUID, the other's without) and the coordinator's report (every
/// node's GPU, each device saying its node). Each GPU has one record, under its UUID,
/// with one result an attempt; none under `node/devN`.
pub fn on_cuda_a_group_keeps_one_record_per_gpu_under_its_uuid(fixture: &Fixture) {
    use gpuvet_model::inventory::keys;
    let mut store = fixture.open();
    let uuids = [("n0", "GPU-aaaa"), ("n1", "GPU-bbbb")];
    let device = |uuid: &str, on: Option<&str>| {
        let mut device = report(&store_attempt("n0"), 0).devices.remove(0);
        device.facts.uuid = Some(uuid.to_owned());
        if let Some(node) = on {
            device
                .details
                .insert(keys::NODE.to_owned(), node.to_owned());
        }
        device
    };
    for run in 1..=2u64 {
        for (node, uuid) in uuids {
            let attempt = store.begin_attempt("job", node, "pod", run * 1000).unwrap();
            let mut own = group_report(&attempt, run * 1000, &["n0", "n1"]);
            own.devices = vec![device(uuid, None)];
            store.record_report(&attempt, &own).unwrap();
            if node == "n0" {
                let mut coordinator = own.clone();
                coordinator.devices = uuids
                    .iter()
                    .map(|(on, uuid)| device(uuid, Some(on)))
                    .collect();
                store.record_report(&attempt, &coordinator).unwrap();
            }
        }
    }
    let wanted: Vec<RecordKey> = ["uuid:GPU-aaaa", "uuid:GPU-bbbb", "n0/dev0", "n1/dev0"]
        .iter()
        .map(|gpu| record_key(gpu, CheckName::GemmFlops))
        .collect();
    let records = store.gpu_records(&wanted, 10).unwrap();
    let keys: Vec<&str> = records.keys().map(|key| key.gpu.as_str()).collect();
    assert_eq!(keys, ["uuid:GPU-aaaa", "uuid:GPU-bbbb"], "{records:?}");
    for record in records.values() {
        assert_eq!(
            record.values,
            [700.0, 700.0],
            "one result a run: {records:?}"
        );
    }
}

/// A GPU that ran its GEMM in bf16 in one job and in fp8 in another has a record of
/// each, and the fleet learns a baseline of each: neither workload's figures judge the
/// other's.
pub fn records_and_fleet_baselines_are_kept_per_workload(fixture: &Fixture) {
    use gpuvet_model::fleet::MIN_FLEET_RESULTS;
    let mut store = fixture.open();
    for i in 0..MIN_FLEET_RESULTS as u64 {
        let node = format!("n{i}");
        for (job, dtype, value) in [("job-bf16", "bf16", 700.0), ("job-fp8", "fp8", 1400.0)] {
            let attempt = store.begin_attempt(job, &node, "pod", i).unwrap();
            let mut sent = report(&attempt, 1000 + i);
            sent.checks[0]
                .params
                .insert("dtype".to_owned(), dtype.to_owned());
            sent.checks[0].entities[0].measurement.value = Some(value);
            store.record_report(&attempt, &sent).unwrap();
        }
    }
    let key = |dtype: &str| RecordKey {
        gpu: "n0/dev0".to_owned(),
        check: CheckName::GemmFlops,
        work: format!("dtype={dtype}"),
    };
    let records = store.gpu_records(&[key("bf16"), key("fp8")], 10).unwrap();
    assert_eq!(records[&key("bf16")].values, [700.0]);
    assert_eq!(records[&key("fp8")].values, [1400.0]);
    // Read by GPU alone, as a node reads its own before it knows its workloads: both,
    // and nothing of another GPU.
    let own = store.gpu_records_of(&["n0/dev0".to_owned()], 10).unwrap();
    let gemm: Vec<(&str, &[f64])> = own
        .iter()
        .filter(|(key, _)| key.check == CheckName::GemmFlops)
        .map(|(key, record)| (key.work.as_str(), record.values.as_slice()))
        .collect();
    assert_eq!(
        gemm,
        [
            ("dtype=bf16", [700.0].as_slice()),
            ("dtype=fp8", [1400.0].as_slice())
        ]
    );
    assert!(own.keys().all(|key| key.gpu == "n0/dev0"), "{own:?}");

    let fleet: Vec<(String, f64, u32)> = store
        .fleet_baselines(100)
        .unwrap()
        .into_iter()
        .filter(|b| b.check == CheckName::GemmFlops)
        .map(|b| (b.work, b.median, b.results))
        .collect();
    let results = MIN_FLEET_RESULTS as u32;
    assert_eq!(
        fleet,
        [
            ("dtype=bf16".to_owned(), 700.0, results),
            ("dtype=fp8".to_owned(), 1400.0, results),
        ]
    );
}

/// The record key of `gpu` and `check` in what `report` stores: its workload is that
/// check's in `report` (a bf16 GEMM).
fn record_key(gpu: &str, check: CheckName) -> RecordKey {
    let work = report(&store_attempt("n0"), 0)
        .checks
        .iter()
        .find(|c| c.name == check)
        .map(work_of)
        .unwrap_or_default();
    RecordKey {
        gpu: gpu.to_owned(),
        check,
        work,
    }
}

/// The attempt `report` is built for, without a store.
fn store_attempt(node: &str) -> Attempt {
    Attempt {
        job_id: "job".to_owned(),
        attempt: 1,
        node: node.to_owned(),
        instance: "pod".to_owned(),
    }
}

/// `report` of a group of `nodes`: `gemm_flops` with GPU 0 of each at 700.
fn group_report(attempt: &Attempt, started_at_ms: u64, nodes: &[&str]) -> RunReport {
    let mut report = report(attempt, started_at_ms);
    let template = report.checks[0].entities[0].clone();
    report.checks[0].entities = nodes
        .iter()
        .map(|node| {
            let mut result = template.clone();
            result.entity = gpuvet_model::results::Entity::Device {
                node: (*node).to_owned(),
                index: 0,
            };
            result
        })
        .collect();
    report.checks[0].status = gpuvet_model::results::CheckStatus::Passed;
    report.outcome = Outcome::of(&report.checks);
    report
}

/// The fleet's baselines (`gpuvet.baseline_from: server`): per model and check, from
/// the newest `ok` results of GPUs whose node named their model, once there are enough.
pub fn the_fleet_learns_a_baseline_per_model_and_check_from_its_newest_ok_results(
    fixture: &Fixture,
) {
    use gpuvet_model::fleet::MIN_FLEET_RESULTS;
    let mut store = fixture.open();
    assert!(store.fleet_baselines(100).unwrap().is_empty());
    // `report` gives GPU 0 of each node a model name (`Sim H200`) and a value of 700;
    // GPUs 1 and 2 (another node's, as far as the report knows) have none.
    for i in 0..(MIN_FLEET_RESULTS as u64 + 5) {
        let node = format!("n{i}");
        let attempt = store.begin_attempt("job", &node, "pod", i).unwrap();
        let mut report = report(&attempt, 1000 + i);
        // The oldest five are far slower: the newest 20 leave them out.
        let value = if i < 5 { 100.0 } else { 700.0 + (i % 3) as f64 };
        report.checks[0].entities[0].measurement.value = Some(value);
        store.record_report(&attempt, &report).unwrap();
    }
    let learned = store.fleet_baselines(MIN_FLEET_RESULTS).unwrap();
    assert_eq!(learned.len(), 1, "{learned:?}");
    let baseline = &learned[0];
    assert_eq!(
        (baseline.model.as_str(), baseline.check),
        ("Sim H200", CheckName::GemmFlops)
    );
    assert_eq!(baseline.results as usize, MIN_FLEET_RESULTS);
    assert_eq!(baseline.median, 701.0);
    // Too few of the newest results: nothing learned.
    assert!(
        store
            .fleet_baselines(MIN_FLEET_RESULTS - 1)
            .unwrap()
            .is_empty()
    );
}

pub fn a_nodes_history_spans_its_jobs_and_nodes_rank_by_failures(fixture: &Fixture) {
    use gpuvet_model::events::NewEvent;
    use gpuvet_model::offenders::{RepeatOffender, RepeatOffenderPolicy};

    let mut store = fixture.open();
    // n0 fails in three jobs of five, n1 once; each job is a new start.
    let plan = [
        ("j1", "n0", 1_000, false),
        ("j1", "n1", 1_100, true),
        ("j2", "n0", 2_000, true),
        ("j3", "n0", 3_000, false),
        ("j3", "n1", 3_100, false),
        ("j4", "n0", 4_000, true),
        ("j5", "n0", 5_000, false),
    ];
    for (job, node, at, passes) in plan {
        let attempt = store.begin_attempt(job, node, node, at).unwrap();
        let made = if passes {
            passing_report(&attempt, at)
        } else {
            report(&attempt, at)
        };
        store.record_report(&attempt, &made).unwrap();
    }
    // A rebuild on n1's pod tainted n0; then n0's quarantine was lifted.
    let n1 = store.begin_attempt("j5", "n1", "n1", 5_100).unwrap();
    let mut rebuild = event(5_200, EventKind::InstanceRebuildRequested, "rebuild");
    rebuild.details = json!({ "kubernetes": { "quarantine": { "tainted": ["n0"] } } });
    store.record_event(&n1, &rebuild).unwrap();
    let mut other = event(5_250, EventKind::InstanceRebuildRequested, "other rebuild");
    other.details = json!({ "kubernetes": { "quarantine": { "tainted": ["n9"] } } });
    store.record_event(&n1, &other).unwrap();
    let untaint = Attempt {
        job_id: "gpuvet-untaint".into(),
        attempt: 1,
        node: "n0".into(),
        instance: "n0".into(),
    };
    store
        .record_event(
            &untaint,
            &NewEvent {
                kind: EventKind::NodeUntainted,
                ..event(5_300, EventKind::NodeUntainted, "lifted")
            },
        )
        .unwrap();

    let policy = RepeatOffenderPolicy::default();
    let history = store.node_history("n0", 100, &policy).unwrap().unwrap();
    let jobs: Vec<&str> = history
        .runs
        .iter()
        .map(|r| r.attempt.job_id.as_str())
        .collect();
    assert_eq!(jobs, ["j5", "j4", "j3", "j2", "j1"]);
    assert_eq!(
        history.repeat_offender,
        Some(RepeatOffender {
            failed: 3,
            of_last: 5
        })
    );
    // Each check's figures, the oldest first: gemm_flops's median in every run.
    let gemm = history
        .checks
        .iter()
        .find(|c| c.check == CheckName::GemmFlops)
        .unwrap();
    let times: Vec<u64> = gemm.points.iter().map(|p| p.started_at_ms).collect();
    assert_eq!(times, [1_000, 2_000, 3_000, 4_000, 5_000]);
    assert_eq!(gemm.unit, "TFLOPS");
    assert!(
        gemm.points.iter().all(|p| p.median == Some(700.0)),
        "{:?}",
        gemm.points
    );
    // The failing runs each named dev2, the newest first.
    let found: Vec<(&str, &str)> = history
        .findings
        .iter()
        .map(|f| (f.job_id.as_str(), f.entity.as_str()))
        .collect();
    assert_eq!(
        found,
        [("j5", "n0/dev2"), ("j3", "n0/dev2"), ("j1", "n0/dev2")]
    );
    let quarantines: Vec<&str> = history
        .quarantines
        .iter()
        .map(|e| e.event.message.as_str())
        .collect();
    assert_eq!(quarantines, ["lifted", "rebuild"]);
    // A shorter window of runs keeps only their figures.
    let last_two = store.node_history("n0", 2, &policy).unwrap().unwrap();
    assert_eq!(last_two.runs.len(), 2);
    // all_reduce_2 ran only in the failing one of the two (j5).
    let points: Vec<(CheckName, usize)> = last_two
        .checks
        .iter()
        .map(|c| (c.check, c.points.len()))
        .collect();
    assert_eq!(
        points,
        [
            (CheckName::GemmFlops, 2),
            (CheckName::AllReduce1, 2),
            (CheckName::AllReduce2, 1)
        ]
    );
    // The flag reads the latest five runs, however few the history holds.
    assert_eq!(last_two.repeat_offender, history.repeat_offender);
    assert_eq!(store.node_history("nobody", 100, &policy).unwrap(), None);

    // In a group, n2's run failed because of n0's GPU: not n2's failure.
    let n2 = store.begin_attempt("j6", "n2", "n2", 6_000).unwrap();
    let mut group_run = report(&n2, 6_000);
    for entity in &mut group_run.checks[0].entities {
        entity.entity = gpuvet_model::results::Entity::Device {
            node: "n0".into(),
            index: 2,
        };
    }
    group_run.group = Some(gpuvet_model::results::GroupSummary {
        nodes: vec!["n0".into(), "n2".into()],
        ..Default::default()
    });
    store.record_report(&n2, &group_run).unwrap();
    let n2_runs = store
        .runs(&RunFilter {
            node: Some("n2".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(n2_runs[0].run.outcome, Outcome::Failed);
    assert!(!n2_runs[0].run.node_failed);
    // n2's history keeps only what names n2: nothing here.
    let n2_history = store.node_history("n2", 100, &policy).unwrap().unwrap();
    assert!(n2_history.findings.is_empty(), "{:?}", n2_history.findings);
    assert!(
        history
            .runs
            .iter()
            .all(|r| r.run.node_failed == (r.run.outcome == Outcome::Failed))
    );

    let ranked = store.nodes_by_failures(0, &policy, 100).unwrap();
    let rows: Vec<(&str, u32, u32, bool)> = ranked
        .iter()
        .map(|n| {
            (
                n.node.as_str(),
                n.runs,
                n.failed,
                n.repeat_offender.is_some(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("n0", 5, 3, true), ("n1", 2, 1, false), ("n2", 1, 0, false)]
    );
    assert_eq!(ranked[2].failed_by_others, 1);
    assert_eq!(ranked[0].last_failed_at_ms, Some(5_000));
    assert_eq!(ranked[1].last_run_at_ms, 3_100);
    // The window counts runs since its start; the flag still reads the latest runs.
    let recent = store.nodes_by_failures(3_050, &policy, 100).unwrap();
    let rows: Vec<(&str, u32, u32, bool)> = recent
        .iter()
        .map(|n| {
            (
                n.node.as_str(),
                n.runs,
                n.failed,
                n.repeat_offender.is_some(),
            )
        })
        .collect();
    // One failure each: the later failure ranks first.
    assert_eq!(
        rows,
        [("n0", 2, 1, true), ("n1", 1, 1, false), ("n2", 1, 0, false)]
    );
    assert_eq!(store.nodes_by_failures(0, &policy, 1).unwrap().len(), 1);
}
