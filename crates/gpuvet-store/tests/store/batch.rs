//! Batches of writes in one transaction (`Store::record_batch`, the fleet server's
//! group commit), the same on SQLite and on PostgreSQL: each write answered in order,
//! one refused without failing its neighbours, writes of one id stored once, a commit
//! that fails storing nothing, and batches of the same ids from several handles at once.

use std::thread;

use gpuvet_model::events::{Attempt, AttemptStart, EventRecord, NewEvent};
use gpuvet_model::results::RunReport;
use gpuvet_store::{EventFilter, PreparedWrite, StoreError, Written};

use crate::common::{Fixture, event_with_id, refused_by_the_database, report, with_id};

fn attempt(node: &str) -> Attempt {
    Attempt {
        job_id: "job".into(),
        attempt: 1,
        node: node.into(),
        instance: format!("pod-{node}"),
    }
}

fn report_write(report: &RunReport) -> PreparedWrite {
    let attempt = Attempt {
        job_id: report.job_id.clone(),
        attempt: report.attempt,
        node: report.node.clone(),
        instance: report.instance.clone(),
    };
    PreparedWrite::report(attempt, report.clone()).unwrap()
}

fn event_write(attempt: &Attempt, event: &NewEvent) -> PreparedWrite {
    PreparedWrite::event(EventRecord {
        attempt: attempt.clone(),
        event: event.clone(),
    })
    .unwrap()
}

fn attempt_write(attempt: &Attempt, started_at_ms: u64) -> PreparedWrite {
    PreparedWrite::attempt(AttemptStart {
        attempt: attempt.clone(),
        started_at_ms,
    })
}

fn run_id(outcome: &Result<Written, StoreError>) -> i64 {
    match outcome {
        Ok(Written::Report { run_id }) => *run_id,
        other => panic!("not a stored report: {other:?}"),
    }
}

fn event_id(outcome: &Result<Written, StoreError>) -> i64 {
    match outcome {
        Ok(Written::Event { id, .. }) => *id,
        other => panic!("not a stored event: {other:?}"),
    }
}

/// The report ids of the stored runs, in order.
fn stored_report_ids(fixture: &Fixture) -> Vec<String> {
    fixture
        .rows("SELECT report_id FROM runs ORDER BY report_id")
        .into_iter()
        .map(|row| row[0].as_str().unwrap().to_owned())
        .collect()
}

pub fn a_batch_stores_each_write_and_answers_each_in_order(fixture: &Fixture) {
    let mut store = fixture.open();
    let (n0, n1) = (attempt("n0"), attempt("n1"));
    let first = with_id(report(&n0, 10), "r-1");
    let second = with_id(report(&n1, 20), "r-2");
    let started = event_with_id(5, "e-1");
    let outcomes = store
        .record_batch(&[
            attempt_write(&n0, 3),
            report_write(&first),
            event_write(&n0, &started),
            report_write(&second),
        ])
        .unwrap();
    assert_eq!(outcomes.len(), 4);
    assert!(matches!(outcomes[0], Ok(Written::Attempt)), "{outcomes:?}");
    let (first_run, second_run) = (run_id(&outcomes[1]), run_id(&outcomes[3]));
    assert_ne!(first_run, second_run);
    let event = event_id(&outcomes[2]);

    // Each answer names what was stored: the runs by their ids, the event by its.
    assert_eq!(store.run(first_run).unwrap().unwrap().1, first);
    assert_eq!(store.run(second_run).unwrap().unwrap().1, second);
    let events = store.events(&EventFilter::default()).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].id, &events[0].event), (event, &started));
    // The pushed attempt keeps its own start time; the report's attempt is added.
    assert_eq!(fixture.count("attempts"), 2);
    assert_eq!(
        fixture.query_int("SELECT started_at_ms FROM attempts WHERE node = 'n0'"),
        Some(3)
    );
    assert_eq!(fixture.count("check_results"), 6);
    // An empty batch is no transaction and no error.
    assert!(store.record_batch(&[]).unwrap().is_empty());
}

pub fn a_write_refused_in_a_batch_leaves_its_neighbours_stored(fixture: &Fixture) {
    let mut store = fixture.open();
    let n0 = attempt("n0");
    let earlier = with_id(report(&n0, 1), "r-earlier");
    store.record_report(&n0, &earlier).unwrap();
    // The database refuses the check rows of one report, after its run row went in.
    fixture.refuse("check_results", "INSERT", "NEW.unit = 'refused-unit'");
    let mut refused = with_id(report(&attempt("n1"), 2), "r-refused");
    refused.checks[2].metric.unit = "refused-unit".to_owned();
    let mut conflicting = earlier.clone();
    conflicting.duration_secs += 1.0;
    let (before, after) = (
        with_id(report(&attempt("n2"), 3), "r-before"),
        with_id(report(&attempt("n3"), 4), "r-after"),
    );
    let stored_event = event_with_id(9, "e-kept");

    let outcomes = store
        .record_batch(&[
            report_write(&before),
            report_write(&refused),
            event_write(&n0, &stored_event),
            report_write(&conflicting),
            report_write(&after),
        ])
        .unwrap();
    run_id(&outcomes[0]);
    let err = outcomes[1].as_ref().unwrap_err();
    assert!(refused_by_the_database(err), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("cannot record a report in the store: "),
        "{err}"
    );
    event_id(&outcomes[2]);
    assert!(
        matches!(&outcomes[3], Err(StoreError::IdConflict { what: "report", id }) if id == "r-earlier"),
        "{:?}",
        outcomes[3]
    );
    run_id(&outcomes[4]);

    // The refused report left no row behind: not its run, not its attempt; its
    // neighbours are whole.
    assert_eq!(
        stored_report_ids(fixture),
        ["r-after", "r-before", "r-earlier"]
    );
    assert_eq!(fixture.count("check_results"), 9);
    assert_eq!(
        fixture.query_int("SELECT COUNT(*) FROM attempts WHERE node = 'n1'"),
        Some(0)
    );
    assert_eq!(store.run(run_id(&outcomes[0])).unwrap().unwrap().1, before);
    assert_eq!(store.events(&EventFilter::default()).unwrap().len(), 1);
    // The stored report under the conflicting id is the first one, unchanged.
    let kept = store.reports("job", 1).unwrap();
    assert!(kept.contains(&earlier) && !kept.contains(&conflicting));
}

pub fn writes_of_one_id_in_one_batch_are_stored_once(fixture: &Fixture) {
    let mut store = fixture.open();
    let n0 = attempt("n0");
    let sent = with_id(report(&n0, 10), "r-twice");
    let mut changed = sent.clone();
    changed.duration_secs += 1.0;
    let event = event_with_id(5, "e-twice");
    let mut other_event = event.clone();
    other_event.message = "another message".to_owned();

    let outcomes = store
        .record_batch(&[
            attempt_write(&n0, 7),
            report_write(&sent),
            event_write(&n0, &event),
            report_write(&sent),
            attempt_write(&n0, 8),
            event_write(&n0, &event),
            report_write(&changed),
            event_write(&n0, &other_event),
        ])
        .unwrap();
    // As if sent one after the other: the repeat finds the first, the changed one
    // conflicts with it.
    assert!(matches!(outcomes[0], Ok(Written::Attempt)));
    assert_eq!(run_id(&outcomes[1]), run_id(&outcomes[3]));
    assert_eq!(event_id(&outcomes[2]), event_id(&outcomes[5]));
    assert!(matches!(outcomes[4], Ok(Written::Attempt)));
    assert!(
        matches!(
            &outcomes[6],
            Err(StoreError::IdConflict { what: "report", .. })
        ),
        "{:?}",
        outcomes[6]
    );
    assert!(
        matches!(
            &outcomes[7],
            Err(StoreError::IdConflict { what: "event", .. })
        ),
        "{:?}",
        outcomes[7]
    );
    assert_eq!(fixture.count("runs"), 1);
    assert_eq!(fixture.count("check_results"), 3);
    assert_eq!(fixture.count("events"), 1);
    assert_eq!(fixture.count("attempts"), 1);
    // The attempt's first start time is kept.
    assert_eq!(
        fixture.query_int("SELECT started_at_ms FROM attempts"),
        Some(7)
    );
    // And a batch after it finds them all stored.
    let again = store
        .record_batch(&[report_write(&sent), event_write(&n0, &event)])
        .unwrap();
    assert_eq!(run_id(&again[0]), run_id(&outcomes[1]));
    assert_eq!(event_id(&again[1]), event_id(&outcomes[2]));
    assert_eq!(fixture.count("runs"), 1);
}

pub fn a_batch_whose_commit_fails_stores_none_of_its_writes(fixture: &Fixture) {
    let mut store = fixture.open();
    fixture.refuse_commit_of_report("r-doomed");
    let n0 = attempt("n0");
    let batch = [
        attempt_write(&attempt("n9"), 1),
        report_write(&with_id(report(&n0, 1), "r-innocent")),
        event_write(&n0, &event_with_id(2, "e-innocent")),
        report_write(&with_id(report(&attempt("n1"), 3), "r-doomed")),
    ];
    let err = store.record_batch(&batch).unwrap_err();
    assert!(refused_by_the_database(&err), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("cannot record a batch of writes in the store: "),
        "{err}"
    );
    for table in ["attempts", "runs", "check_results", "events"] {
        assert_eq!(fixture.count(table), 0, "{table}");
    }
    // The handle is good for the next batch, which commits.
    let outcomes = store.record_batch(&batch[..3]).unwrap();
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(stored_report_ids(fixture), ["r-innocent"]);
    assert_eq!(fixture.count("events"), 1);
    assert_eq!(fixture.count("attempts"), 2);
}

pub fn batches_from_several_handles_at_once_store_each_id_once(fixture: &Fixture) {
    drop(fixture.open());
    let nodes: Vec<Attempt> = (0..6).map(|i| attempt(&format!("n{i}"))).collect();
    let reports: Vec<RunReport> = nodes
        .iter()
        .enumerate()
        .map(|(i, a)| with_id(report(a, i as u64), &format!("r-{i}")))
        .collect();
    let events: Vec<NewEvent> = (0..6)
        .map(|i| event_with_id(i, &format!("e-{i}")))
        .collect();
    // Each thread is a writer (of one server, or of another server on the same
    // database) with the same writes in another order: every id is in every batch.
    let outcomes: Vec<Vec<(String, i64)>> = thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (nodes, reports, events) = (&nodes, &reports, &events);
                scope.spawn(move || {
                    let mut order: Vec<usize> = (0..6).collect();
                    order.rotate_left(t);
                    if t % 2 == 1 {
                        order.reverse();
                    }
                    let mut batch = Vec::new();
                    let mut names = Vec::new();
                    for &i in &order {
                        batch.push(attempt_write(&nodes[i], 1));
                        batch.push(report_write(&reports[i]));
                        batch.push(event_write(&nodes[(i + 1) % 6], &events[i]));
                        names.extend([format!("r-{i}"), format!("e-{i}")]);
                    }
                    let mut store = fixture.open();
                    let outcomes = store.record_batch(&batch).unwrap();
                    let ids = outcomes
                        .iter()
                        .filter(|o| !matches!(o, Ok(Written::Attempt)))
                        .map(|o| match o {
                            Ok(Written::Report { run_id }) => *run_id,
                            Ok(Written::Event { id, .. }) => *id,
                            other => panic!("{other:?}"),
                        });
                    let mut named: Vec<(String, i64)> = names.into_iter().zip(ids).collect();
                    named.sort();
                    named
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // Every writer was answered with the same rows: each id stored once.
    assert!(outcomes.iter().all(|o| *o == outcomes[0]), "{outcomes:?}");
    assert_eq!(fixture.count("runs"), 6);
    assert_eq!(fixture.count("events"), 6);
    assert_eq!(fixture.count("attempts"), 6);
    assert_eq!(fixture.count("check_results"), 18);
}
