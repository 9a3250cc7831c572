//! Failing over between replicas of a fleet server, over real sockets: which replica an
//! entry goes to after which failure, that a node stays with the replica that answered,
//! that a `Retry-After` is obeyed rather than dodged, and that with every replica down
//! the entries stay in the outbox (a real store) with each replica's error.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use gpuvet_push::{AfterFailure, PushError, Pusher, Sender, after_failure, drain, retry_after};
use gpuvet_store::{OutboxEntry, OutboxKind, Store};

/// One scripted answer: a status and its extra header lines.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    headers: &'static str,
}

const OK: Answer = Answer {
    status: 200,
    headers: "",
};

fn status(status: u16) -> Answer {
    Answer {
        status,
        headers: "",
    }
}

/// A fake replica on loopback: answers each request with the next scripted answer, and
/// with the last one once the script runs out; remembers when each request came.
struct Replica {
    url: String,
    hits: Arc<Mutex<Vec<Instant>>>,
}

impl Replica {
    fn start(script: Vec<Answer>) -> Replica {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&hits);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let mut seen = seen.lock().unwrap();
                let answer = script[seen.len().min(script.len() - 1)].clone();
                seen.push(Instant::now());
                drop(seen);
                answer_one(stream, &answer);
            }
        });
        Replica { url, hits }
    }

    fn hits(&self) -> usize {
        self.hits.lock().unwrap().len()
    }
}

/// Reads one request (head and body) and answers it, closing the connection.
fn answer_one(stream: TcpStream, answer: &Answer) {
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let message = r#"{"error":{"message":"scripted","hint":"a scripted hint"}}"#;
    let _ = write!(
        reader.get_mut(),
        "HTTP/1.1 {} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{}\r\n{message}",
        answer.status,
        message.len(),
        answer.headers,
    );
}

/// An address where nothing listens (just now).
fn down() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

fn entry(id: i64) -> OutboxEntry {
    OutboxEntry {
        id,
        kind: OutboxKind::Event,
        item_id: format!("event-{id}"),
        body: "{}".to_owned(),
        created_at_ms: 0,
        tries: 0,
        next_try_at_ms: 0,
        last_error: None,
    }
}

fn replicas(urls: &[&str]) -> Pusher {
    Pusher::to_any_of(urls, Some("token")).unwrap()
}

#[test]
fn a_replica_that_cannot_be_reached_is_passed_over_and_the_next_one_kept() {
    let b = Replica::start(vec![OK]);
    let unreachable = down();
    let pusher = replicas(&[&unreachable, &b.url]);
    for id in 0..5 {
        pusher.send(&entry(id)).unwrap();
    }
    assert_eq!(b.hits(), 5);
    assert_eq!(pusher.base_url(), b.url);
}

#[test]
fn after_a_failover_a_node_stays_with_the_replica_that_answered() {
    // `a` fails once, then would answer again: the node stays with `b` all the same,
    // rather than spreading its entries over both.
    let a = Replica::start(vec![status(503), OK]);
    let b = Replica::start(vec![OK]);
    let pusher = replicas(&[&a.url, &b.url]);
    for id in 0..5 {
        pusher.send(&entry(id)).unwrap();
    }
    assert_eq!((a.hits(), b.hits()), (1, 5));
}

#[test]
fn a_5xx_or_a_408_moves_on_and_a_4xx_does_not() {
    for code in [500, 502, 503, 504, 408] {
        let a = Replica::start(vec![status(code)]);
        let b = Replica::start(vec![OK]);
        replicas(&[&a.url, &b.url]).send(&entry(1)).unwrap();
        assert_eq!((a.hits(), b.hits()), (1, 1), "{code}");
    }
    for code in [400, 401, 404, 409, 413, 429] {
        let a = Replica::start(vec![status(code)]);
        let b = Replica::start(vec![OK]);
        let pusher = replicas(&[&a.url, &b.url]);
        match pusher.send(&entry(1)).unwrap_err() {
            PushError::Refused { status, hint, .. } => {
                assert_eq!(status, code);
                assert_eq!(hint.as_deref(), Some("a scripted hint"));
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_eq!(b.hits(), 0, "{code}: every replica would answer the same");
        // The replica that answered stays the first tried.
        let _ = pusher.send(&entry(2));
        assert_eq!((a.hits(), b.hits()), (2, 0), "{code}");
    }
}

#[test]
fn a_refusal_after_a_failover_keeps_the_replica_that_refused() {
    let unreachable = down();
    let b = Replica::start(vec![status(401)]);
    let c = Replica::start(vec![OK]);
    let pusher = replicas(&[&unreachable, &b.url, &c.url]);
    let error = pusher.send(&entry(1)).unwrap_err();
    let text = gpuvet_model::diagnostics::with_causes(&error);
    assert!(
        text.starts_with("no server took it: cannot reach"),
        "{text}"
    );
    assert!(
        text.contains(&format!("`{}/api/v1/events` answered 401", b.url)),
        "{text}"
    );
    assert_eq!(
        error.hint(),
        Some("a scripted hint"),
        "the last failure's hint"
    );
    assert_eq!(c.hits(), 0);
    assert_eq!(pusher.base_url(), b.url);
}

#[test]
fn the_list_wraps_around_from_the_replica_in_use() {
    let a = Replica::start(vec![status(503), OK]);
    let b = Replica::start(vec![OK, OK, status(503)]);
    let pusher = replicas(&[&a.url, &b.url]);
    for id in 0..3 {
        pusher.send(&entry(id)).unwrap();
    }
    // 1: a fails, b takes it; 2: b; 3: b fails, back to a.
    assert_eq!((a.hits(), b.hits()), (2, 3));
    assert_eq!(pusher.base_url(), a.url);
}

#[test]
fn each_node_starts_at_its_own_replica_and_one_list_spreads_a_fleet() {
    let a = Replica::start(vec![OK]);
    let b = Replica::start(vec![OK]);
    let nodes: Vec<String> = (0..64).map(|i| format!("node-{i}")).collect();
    for node in &nodes {
        replicas(&[&a.url, &b.url])
            .starting_with(node)
            .send(&entry(1))
            .unwrap();
    }
    assert_eq!(a.hits() + b.hits(), 64);
    assert!(
        a.hits() > 0 && b.hits() > 0,
        "{} and {}",
        a.hits(),
        b.hits()
    );
    // The same node starts at the same replica every time.
    let first = replicas(&[&a.url, &b.url]).starting_with("node-7");
    let again = replicas(&[&a.url, &b.url]).starting_with("node-7");
    assert_eq!(first.base_url(), again.base_url());
    assert_eq!(gpuvet_push::start_index("anything", 1), 0);
}

#[test]
fn which_failures_move_on_to_the_next_replica() {
    let refused = |status| PushError::Refused {
        url: "u".into(),
        status,
        message: String::new(),
        hint: None,
        retry_after: None,
    };
    let unreachable = PushError::Unreachable {
        url: "u".into(),
        source: Box::new(ureq::Error::ConnectionFailed),
    };
    assert_eq!(after_failure(&unreachable), AfterFailure::TryNext);
    for status in [408, 500, 502, 503, 504, 599] {
        assert_eq!(
            after_failure(&refused(status)),
            AfterFailure::TryNext,
            "{status}"
        );
    }
    for status in [300, 400, 401, 403, 404, 409, 413, 422, 429] {
        assert_eq!(
            after_failure(&refused(status)),
            AfterFailure::Stop,
            "{status}"
        );
    }
}

#[test]
fn retry_after_is_read_as_seconds_or_a_date_and_bounded() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
    assert_eq!(retry_after(" 120 ", now), Some(Duration::from_secs(120)));
    assert_eq!(
        retry_after("86400", now),
        Some(Duration::from_secs(300)),
        "at most the outbox's longest backoff"
    );
    let in_30_s = httpdate::fmt_http_date(now + Duration::from_secs(30));
    assert_eq!(retry_after(&in_30_s, now), Some(Duration::from_secs(30)));
    let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
    assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
    assert_eq!(retry_after("soon", now), None);
    assert_eq!(retry_after("-1", now), None);
}

/// A real store whose outbox holds `count` entries (attempts of distinct jobs).
fn store_with_outbox(dir: &tempfile::TempDir, count: usize) -> Store {
    let mut store = Store::open(&dir.path().join("node.db")).unwrap();
    store.queue_pushes(true);
    for job in 0..count {
        store
            .begin_attempt(&format!("job-{job}"), "node-a", "instance", 1_000)
            .unwrap();
    }
    assert_eq!(store.outbox_len().unwrap(), count as u64);
    store
}

#[test]
fn with_every_replica_down_the_entries_stay_with_each_ones_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_with_outbox(&dir, 3);
    let unreachable = down();
    let failing = Replica::start(vec![status(503)]);
    let pusher = replicas(&[&unreachable, &failing.url]);
    let drained = drain(&mut store, &pusher, || 5_000, true).unwrap();
    assert_eq!((drained.sent, drained.failed, drained.waiting), (0, 1, 3));
    let error = drained.last_error.unwrap();
    assert!(
        error.starts_with("no server took it: cannot reach"),
        "{error}"
    );
    assert!(error.contains(&format!(
        "`{}/api/v1/attempts` answered 503: scripted",
        failing.url
    )));
    let kept = store.outbox_due(u64::MAX, 10).unwrap();
    assert_eq!(kept.len(), 3);
    assert_eq!(
        kept.iter()
            .filter(|e| e.last_error.as_ref() == Some(&error))
            .count(),
        1
    );
    // Both came back: the next drain empties the outbox.
    let up = Replica::start(vec![OK]);
    let drained = drain(&mut store, &replicas(&[&down(), &up.url]), || 6_000, true).unwrap();
    assert_eq!((drained.sent, drained.waiting), (3, 0));
}

#[test]
fn a_429_stops_the_drain_and_holds_the_entry_until_its_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_with_outbox(&dir, 3);
    let a = Replica::start(vec![Answer {
        status: 429,
        headers: "retry-after: 40\r\n",
    }]);
    let b = Replica::start(vec![OK]);
    let pusher = replicas(&[&a.url, &b.url]);
    let drained = drain(&mut store, &pusher, || 10_000, false).unwrap();
    assert_eq!((drained.sent, drained.failed, drained.waiting), (0, 1, 3));
    assert_eq!(drained.retry_after, Some(Duration::from_secs(40)));
    assert_eq!(
        b.hits(),
        0,
        "a node slowed down by one replica does not ask another"
    );
    let held = store
        .outbox_due(u64::MAX, 10)
        .unwrap()
        .into_iter()
        .find(|e| e.tries == 1)
        .unwrap();
    assert_eq!(
        held.next_try_at_ms,
        10_000 + 40_000,
        "Retry-After, not 1 s of backoff"
    );
}

#[test]
fn the_background_sender_sends_nothing_while_a_retry_after_lasts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.db");
    drop(store_with_outbox(&dir, 2));
    let replica = Replica::start(vec![
        Answer {
            status: 429,
            headers: "retry-after: 1\r\n",
        },
        OK,
    ]);
    let errors = Arc::new(Mutex::new(Vec::new()));
    let heard = Arc::clone(&errors);
    let sender = Sender::start(
        move || Store::open(&path),
        Pusher::new(&replica.url, Some("token")),
        move |message| heard.lock().unwrap().push(message.to_owned()),
    );
    // Hang guard only: the sender empties the outbox well within it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while replica.hits() < 3 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    sender.stop();
    let hits = replica.hits.lock().unwrap().clone();
    assert_eq!(hits.len(), 3, "one 429, then both entries");
    assert!(
        hits[1] - hits[0] >= Duration::from_secs(1),
        "the next send came {:?} after the 429's `retry-after: 1`",
        hits[1] - hits[0]
    );
    let errors = errors.lock().unwrap();
    assert!(errors[0].contains("answered 429"), "{errors:?}");
}
