//! Repeats of an event counted on its first row (`gpuvet_model::event_fold`), the same
//! on SQLite and on PostgreSQL: within the window and not past it, only the same
//! attempt, kind, lane and subject, a repeat's id counted once however often it comes,
//! in batches and from several handles at once, late repeats, the outbox of a node,
//! and pruning.

use std::thread;

use gpuvet_model::event_fold::FOLD_WINDOW_MS;
use gpuvet_model::events::{Attempt, Event, EventKind, EventRecord, NewEvent};
use gpuvet_model::results::Lane;
use gpuvet_store::{EventFilter, PreparedWrite, Written};
use serde_json::json;

use crate::common::Fixture;

const T0: u64 = 1_700_000_000_000;

fn attempt(node: &str) -> Attempt {
    Attempt {
        job_id: "job".into(),
        attempt: 1,
        node: node.into(),
        instance: format!("pod-{node}"),
    }
}

/// An XID on `gpu`, as the runtime check records it: the message counts sightings.
fn xid(id: &str, time_ms: u64, gpu: u32, seen: u64) -> NewEvent {
    NewEvent {
        event_id: id.to_owned(),
        time_ms,
        kind: EventKind::RuntimeCheckFailed,
        lane: Some(Lane::Host),
        message: format!("xid 79 on gpu {gpu}, seen {seen} times"),
        details: json!({ "check": "xid", "gpu": { "index": gpu }, "xid": 79, "count": seen }),
    }
}

fn all_events(fixture: &Fixture) -> Vec<Event> {
    fixture.open().events(&EventFilter::default()).unwrap()
}

fn written_count(outcome: &Written) -> (i64, u64) {
    match outcome {
        Written::Event { id, count } => (*id, *count),
        other => panic!("not an event: {other:?}"),
    }
}

pub fn repeats_within_the_window_are_counted_on_the_first_row(fixture: &Fixture) {
    let mut store = fixture.open();
    let n0 = attempt("n0");
    let first = store.record_event(&n0, &xid("e-0", T0, 3, 1)).unwrap();
    assert_eq!((first.count, first.last_seen_ms), (1, None));
    for i in 1..=4 {
        let again = store
            .record_event(&n0, &xid(&format!("e-{i}"), T0 + i * 1_000, 3, i + 1))
            .unwrap();
        assert_eq!(again.id, first.id);
        assert_eq!(again.count, i + 1);
        assert_eq!(again.last_seen_ms, Some(T0 + i * 1_000));
    }
    assert_eq!(fixture.count("events"), 1);
    let read = all_events(fixture);
    assert_eq!(read.len(), 1);
    let row = &read[0];
    assert_eq!((row.count, row.last_seen_ms), (5, Some(T0 + 4_000)));
    // The first sighting's time and id, the latest message and details.
    assert_eq!(
        (row.event.time_ms, row.event.event_id.as_str()),
        (T0, "e-0")
    );
    assert_eq!(row.event.message, "xid 79 on gpu 3, seen 5 times");
    assert_eq!(row.event.details["count"], 5);

    // The window slides with the last sighting: at its very end, still a repeat;
    // past it, a row of its own.
    let edge = T0 + 4_000 + FOLD_WINDOW_MS;
    let at_edge = store.record_event(&n0, &xid("e-5", edge, 3, 6)).unwrap();
    assert_eq!((at_edge.id, at_edge.count), (first.id, 6));
    let past = store
        .record_event(&n0, &xid("e-6", edge + FOLD_WINDOW_MS + 1, 3, 7))
        .unwrap();
    assert_ne!(past.id, first.id);
    assert_eq!(past.count, 1);
    assert_eq!(fixture.count("events"), 2);
}

/// The window's far bound of an event at the last millisecond the store holds is past
/// what the store holds; the event is stored and folds all the same (schemathesis
/// found it answered `500`).
pub fn an_event_at_the_stores_last_millisecond_still_folds(fixture: &Fixture) {
    let mut store = fixture.open();
    let n0 = attempt("n0");
    let last = i64::MAX as u64;
    let first = store
        .record_event(&n0, &xid("e-0", last - 1, 3, 1))
        .unwrap();
    let again = store.record_event(&n0, &xid("e-1", last, 3, 2)).unwrap();
    assert_eq!((again.id, again.count), (first.id, 2));
    assert_eq!(again.last_seen_ms, Some(last));
    assert_eq!(fixture.count("events"), 1);
}

pub fn only_the_same_attempt_kind_lane_and_subject_fold(fixture: &Fixture) {
    let mut store = fixture.open();
    let n0 = attempt("n0");
    let first = store.record_event(&n0, &xid("e-0", T0, 3, 1)).unwrap();
    let others = [
        (n0.clone(), xid("gpu-4", T0 + 1, 4, 1)),
        (attempt("n1"), xid("node-1", T0 + 1, 3, 1)),
        (
            Attempt {
                attempt: 2,
                ..n0.clone()
            },
            xid("attempt-2", T0 + 1, 3, 1),
        ),
        (
            n0.clone(),
            NewEvent {
                lane: Some(Lane::Platform),
                ..xid("platform", T0 + 1, 3, 1)
            },
        ),
        (
            n0.clone(),
            NewEvent {
                details: json!({ "check": "probe.hung", "gpu": { "index": 3 } }),
                ..xid("hung", T0 + 1, 3, 1)
            },
        ),
        (
            n0.clone(),
            NewEvent {
                kind: EventKind::InstanceExited,
                ..xid("exited", T0 + 1, 3, 1)
            },
        ),
    ];
    for (attempt, event) in &others {
        let stored = store.record_event(attempt, event).unwrap();
        assert_ne!(stored.id, first.id, "{}", event.event_id);
        assert_eq!(stored.count, 1, "{}", event.event_id);
    }
    assert_eq!(fixture.count("events"), 1 + others.len() as i64);
    // Other events than findings are told apart by their message.
    let exited = |id: &str, code: u32| NewEvent {
        event_id: id.to_owned(),
        time_ms: T0 + 2,
        kind: EventKind::InstanceExited,
        lane: None,
        message: format!("exited with code {code}"),
        details: json!({}),
    };
    let a = store.record_event(&n0, &exited("x-1", 1)).unwrap();
    let b = store.record_event(&n0, &exited("x-2", 137)).unwrap();
    let c = store.record_event(&n0, &exited("x-3", 1)).unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!((c.id, c.count), (a.id, 2));
}

pub fn a_repeat_pushed_twice_is_counted_once(fixture: &Fixture) {
    let mut store = fixture.open();
    let n0 = attempt("n0");
    let first = store.record_event(&n0, &xid("e-0", T0, 3, 1)).unwrap();
    let repeat = xid("e-1", T0 + 1_000, 3, 2);
    for _ in 0..3 {
        let again = store.record_event(&n0, &repeat).unwrap();
        assert_eq!((again.id, again.count), (first.id, 2));
    }
    // The first one again, now that its row carries the repeat's message: the same row.
    let resent = store.record_event(&n0, &xid("e-0", T0, 3, 1)).unwrap();
    assert_eq!((resent.id, resent.count), (first.id, 2));
    // And in a batch, twice in one and once more.
    let write = |event: &NewEvent| {
        PreparedWrite::event(EventRecord {
            attempt: n0.clone(),
            event: event.clone(),
        })
        .unwrap()
    };
    let next = xid("e-2", T0 + 2_000, 3, 3);
    let outcomes = store
        .record_batch(&[write(&repeat), write(&next), write(&next)])
        .unwrap();
    let counts: Vec<(i64, u64)> = outcomes
        .iter()
        .map(|o| written_count(o.as_ref().unwrap()))
        .collect();
    assert_eq!(counts, [(first.id, 2), (first.id, 3), (first.id, 3)]);
    assert_eq!(all_events(fixture)[0].count, 3);
    assert_eq!(fixture.count("events"), 1);
    assert_eq!(fixture.count("event_repeats"), 2);
}

pub fn repeats_from_several_handles_at_once_fold_into_one_row_each_counted_once(fixture: &Fixture) {
    fixture.open();
    let n0 = attempt("n0");
    // Four handles, each a batch of the same 20 repeats in another order, and 10 of
    // its own: every one is counted once, on one row.
    let shared: Vec<NewEvent> = (0..20)
        .map(|i| xid(&format!("shared-{i}"), T0 + i, 3, i))
        .collect();
    thread::scope(|scope| {
        for t in 0..4u64 {
            let (shared, n0) = (&shared, &n0);
            scope.spawn(move || {
                let mut events = shared.clone();
                events.rotate_left(t as usize * 5);
                events.extend((0..10).map(|i| xid(&format!("own-{t}-{i}"), T0 + 100 + i, 3, i)));
                let batch: Vec<PreparedWrite> = events
                    .into_iter()
                    .map(|event| {
                        PreparedWrite::event(EventRecord {
                            attempt: n0.clone(),
                            event,
                        })
                        .unwrap()
                    })
                    .collect();
                let mut store = fixture.open();
                for outcome in store.record_batch(&batch).unwrap() {
                    outcome.unwrap();
                }
            });
        }
    });
    let read = all_events(fixture);
    assert_eq!(read.len(), 1, "{read:#?}");
    assert_eq!(read[0].count, 20 + 4 * 10);
    assert_eq!(fixture.count("event_repeats"), 20 + 4 * 10 - 1);
}

pub fn first_sightings_from_several_handles_at_once_make_one_row(fixture: &Fixture) {
    fixture.open();
    let n0 = attempt("n0");
    // No row yet, and no id in common to hold one batch behind another: only the
    // lock of the repeat key keeps two of them from each adding a row.
    for round in 0..5u64 {
        let base = T0 + round * 10 * FOLD_WINDOW_MS;
        let barrier = std::sync::Barrier::new(4);
        thread::scope(|scope| {
            for t in 0..4u64 {
                let (n0, barrier) = (&n0, &barrier);
                scope.spawn(move || {
                    let batch: Vec<PreparedWrite> = (0..5)
                        .map(|i| {
                            PreparedWrite::event(EventRecord {
                                attempt: n0.clone(),
                                event: xid(&format!("r{round}-{t}-{i}"), base + t * 10 + i, 3, i),
                            })
                            .unwrap()
                        })
                        .collect();
                    let mut store = fixture.open();
                    barrier.wait();
                    for outcome in store.record_batch(&batch).unwrap() {
                        outcome.unwrap();
                    }
                });
            }
        });
    }
    let read = all_events(fixture);
    assert_eq!(read.len(), 5, "one row a round: {read:#?}");
    assert!(read.iter().all(|e| e.count == 20), "{read:#?}");
}

pub fn a_late_repeat_is_counted_and_the_latest_message_stays(fixture: &Fixture) {
    let mut store = fixture.open();
    let n0 = attempt("n0");
    store.record_event(&n0, &xid("e-0", T0, 3, 1)).unwrap();
    store
        .record_event(&n0, &xid("e-2", T0 + 2_000, 3, 3))
        .unwrap();
    let late = store
        .record_event(&n0, &xid("e-1", T0 + 1_000, 3, 2))
        .unwrap();
    assert_eq!((late.count, late.last_seen_ms), (3, Some(T0 + 2_000)));
    let row = &all_events(fixture)[0];
    assert_eq!(row.event.message, "xid 79 on gpu 3, seen 3 times");
    // One from before the first sighting, within the window: the first moves back.
    let earlier = store.record_event(&n0, &xid("e-00", T0 - 1, 3, 0)).unwrap();
    assert_eq!((earlier.count, earlier.last_seen_ms), (4, Some(T0 + 2_000)));
    let row = &all_events(fixture)[0];
    assert_eq!((row.event.time_ms, row.count), (T0 - 1, 4));
    assert_eq!(row.event.message, "xid 79 on gpu 3, seen 3 times");
    // The row's own event again: the same row, though its first time moved.
    let resent = store.record_event(&n0, &xid("e-0", T0, 3, 1)).unwrap();
    assert_eq!(resent.count, 4);
    // Past the window before it: a row of its own.
    let long_before = T0 - 1 - FOLD_WINDOW_MS - 1;
    let apart = store
        .record_event(&n0, &xid("old", long_before, 3, 0))
        .unwrap();
    assert_eq!(apart.count, 1);
    assert_eq!(fixture.count("events"), 2);
}

pub fn with_queueing_on_every_repeat_is_queued_for_the_server_to_count(fixture: &Fixture) {
    let mut store = fixture.open();
    store.queue_pushes(true);
    let n0 = attempt("n0");
    let events: Vec<NewEvent> = (0..5)
        .map(|i| xid(&format!("e-{i}"), T0 + i * 10, 3, i))
        .collect();
    store.record_runtime::<()>(&n0, &events, None, T0).unwrap();
    assert_eq!(fixture.count("events"), 1);
    let queued: Vec<String> = store
        .outbox_due(u64::MAX, 10)
        .unwrap()
        .into_iter()
        .map(|entry| entry.item_id)
        .collect();
    assert_eq!(queued, ["e-0", "e-1", "e-2", "e-3", "e-4"]);
    // Queued once each, however often recorded.
    store.record_event(&n0, &events[2]).unwrap();
    assert_eq!(store.outbox_len().unwrap(), 5);
}

pub fn pruning_a_counted_row_takes_its_repeats_ids(fixture: &Fixture) {
    let mut store = fixture.open();
    let n0 = attempt("n0");
    for i in 0..5 {
        store
            .record_event(&n0, &xid(&format!("e-{i}"), 100 + i, 3, i))
            .unwrap();
    }
    assert_eq!(fixture.count("event_repeats"), 4);
    let pruned = store.prune_batch(1_000, 10).unwrap();
    assert_eq!(pruned.events, 1);
    assert_eq!(fixture.count("events"), 0);
    assert_eq!(fixture.count("event_repeats"), 0);
    // Gone with its row, a repeat's id comes back as a new event.
    let again = store.record_event(&n0, &xid("e-3", 103, 3, 3)).unwrap();
    assert_eq!(again.count, 1);
    // A row first seen before the cutoff but still repeating after it stays.
    store.record_event(&n0, &xid("late", 2_000, 3, 4)).unwrap();
    assert_eq!(store.prune_batch(1_000, 10).unwrap().events, 0);
    assert_eq!(all_events(fixture)[0].count, 2);
    assert_eq!(store.prune_batch(2_001, 10).unwrap().events, 1);
}
