//! Replicas of the fleet server on one PostgreSQL store, and nodes that list them all
//! (`gpuvet.report_to: [a, b]`, `gpuvet push --to a --to b`), over real processes:
//! two servers, each a process of its own over the same database; the senders of 64
//! nodes (gpuvet-push's own `Sender`, each on a real SQLite outbox) and real `gpuvet
//! check` and `gpuvet push` processes push through them; one replica is SIGKILLed
//! while they do. At the end every attempt, report and event is stored exactly once
//! and every outbox is empty.
//!
//! Each replica is this test binary re-run as a server (`child_process_entry!`): the
//! fleet server's own library (`gpuvet_server::Server`, as the `gpuvet-server`
//! program runs it) on a PostgreSQL `StorePool`, since a test of this package cannot
//! name the other package's program.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Attempt, EventKind, NewEvent};
use gpuvet_model::results::{CheckResult, CheckStatus, Outcome, RunReport};
use gpuvet_push::{Pusher, Sender, start_index};
use gpuvet_server::Server;
use gpuvet_server::pool::StorePool;
use gpuvet_store::{EventFilter, Store, StoreLocation};
use gpuvet_testkit::postgres::TestDatabase;

use crate::common::serve::TOKEN;
use crate::common::{Scratch, stderr, stdout};

/// Set to the database's URL, it makes this test binary a replica of the server.
const REPLICA_OF: &str = "GPUVET_TEST_REPLICA_OF";

gpuvet_testkit::child_process_entry!(REPLICA_OF, serve_replica);

/// A replica's process: the fleet server over the PostgreSQL database at `url`, on a
/// loopback port it prints, until it is killed.
fn serve_replica(url: String) {
    // Outside the runtime, as the program opens it: the PostgreSQL client blocks.
    let pool = StorePool::new(StoreLocation::Postgres(url)).expect("the store");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let server = Server::bind("127.0.0.1:0".parse().unwrap(), pool, Some(TOKEN.into()))
            .await
            .expect("binding");
        let mut out = std::io::stdout();
        writeln!(out, "listening on {}", server.local_addr().unwrap()).unwrap();
        out.flush().unwrap();
        server.run(std::future::pending()).await.expect("serving");
    });
}

/// A replica's process; killed when dropped.
struct Replica {
    child: Child,
    url: String,
}

impl Replica {
    /// Starts a replica over `db` and waits until it listens.
    fn start(db: &TestDatabase) -> Replica {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(REPLICA_OF, &db.url)
            .stdout(Stdio::piped())
            .spawn()
            .expect("a replica");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the replica said {line:?}"))
            .trim();
        Replica {
            url: format!("http://{addr}"),
            child,
        }
    }

    /// SIGKILL: no shutdown, whatever is in flight is cut off.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One node pushing with gpuvet-push's own background sender from a real outbox.
struct Node {
    name: String,
    store: PathBuf,
    attempt: Attempt,
    recorded: usize,
}

impl Node {
    fn begin(dir: &Path, index: usize) -> Node {
        let name = format!("node-{index:02}");
        let path = dir.join(format!("{name}.db"));
        let mut store = open_queueing(&path);
        let attempt = store
            .begin_attempt("replicas", &name, &format!("pod-{name}"), 1_000)
            .unwrap();
        Node {
            name,
            store: path,
            attempt,
            recorded: 0,
        }
    }

    /// Records `reports` reports and `events` events (queued for the server).
    fn record(&mut self, reports: usize, events: usize) {
        let mut store = open_queueing(&self.store);
        for _ in 0..reports {
            self.recorded += 1;
            let id = format!("{}-report-{}", self.name, self.recorded);
            store
                .record_report(&self.attempt, &report(&self.attempt, &id))
                .unwrap();
        }
        for _ in 0..events {
            self.recorded += 1;
            let event = NewEvent {
                event_id: format!("{}-event-{}", self.name, self.recorded),
                time_ms: 2_000 + self.recorded as u64,
                kind: EventKind::RuntimeCheckFailed,
                lane: None,
                message: format!("event {} of {}", self.recorded, self.name),
                details: serde_json::json!({ "n": self.recorded }),
            };
            store.record_event(&self.attempt, &event).unwrap();
        }
    }

    fn waiting(&self) -> u64 {
        Store::open(&self.store).unwrap().outbox_len().unwrap()
    }
}

fn open_queueing(path: &Path) -> Store {
    let mut store = Store::open(path).unwrap();
    store.queue_pushes(true);
    store
}

/// A passing report of one check.
fn report(attempt: &Attempt, id: &str) -> RunReport {
    let checks = vec![CheckResult::judged(
        CheckName::GemmFlops,
        CheckStatus::Passed,
        Vec::new(),
    )];
    RunReport {
        report_id: id.to_owned(),
        gpuvet_version: "0.1.0".to_owned(),
        job_id: attempt.job_id.clone(),
        attempt: attempt.attempt,
        node: attempt.node.clone(),
        instance: attempt.instance.clone(),
        backend: "sim".to_owned(),
        devices: Vec::new(),
        started_at_ms: 1_700_000_000_000,
        duration_secs: 1.0,
        timeout_secs: 300.0,
        outcome: Outcome::of(&checks),
        checks,
        group: None,
        context: None,
        diagnosis: None,
        repeat_offender: None,
    }
}

/// Every attempt, report and event in a store, as sorted keys: what a node recorded,
/// or what the server holds (where a key twice is a report or event stored twice).
fn keys(store: &Store, jobs: &[(String, String)]) -> Vec<String> {
    let mut keys = Vec::new();
    for (job, node) in jobs {
        keys.push(format!("attempt {job} {node} 1"));
        for report in store.reports(job, 1).unwrap() {
            if report.node == *node {
                keys.push(format!("report {}", report.report_id));
            }
        }
        let filter = EventFilter {
            job_id: Some(job.clone()),
            node: Some(node.clone()),
            ..EventFilter::default()
        };
        for event in store.events(&filter).unwrap() {
            keys.push(format!("event {}", event.event.event_id));
        }
    }
    keys.sort();
    keys
}

/// The server's own rows, counted in SQL so that nothing a read folds hides a double.
fn server_keys(db: &TestDatabase) -> Vec<String> {
    let mut client = db.client();
    let mut keys: Vec<String> = Vec::new();
    for row in client
        .query("SELECT job_id, node, attempt FROM attempts", &[])
        .unwrap()
    {
        let (job, node, attempt): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        keys.push(format!("attempt {job} {node} {attempt}"));
    }
    for row in client.query("SELECT report_id FROM runs", &[]).unwrap() {
        keys.push(format!("report {}", row.get::<_, String>(0)));
    }
    for row in client.query("SELECT event_id FROM events", &[]).unwrap() {
        keys.push(format!("event {}", row.get::<_, String>(0)));
    }
    keys.sort();
    keys
}

/// A sim node's config pushing to every replica in `report_to`.
fn node_config(scratch: &Scratch, report_to: &[&str]) -> PathBuf {
    let list = report_to
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect::<Vec<_>>()
        .join(", ");
    scratch.config(
        "node.json",
        &format!(
            r#"{{"aimaster": {{"sanity_check": {{"fail_action": "fail", "micro_benchmarks": "gemm_flops", "timeout": 2}}}},
               "gpuvet": {{"backend": "sim", "report_to": [{list}], "sim": {{"devices": 2}}}}}}"#
        ),
    )
}

/// `gpuvet ARGS` as the node `name` of the job `replicas-cli`, with the push token.
fn gpuvet_node(scratch: &Scratch, name: &str) -> Command {
    let mut command = scratch.gpuvet();
    command
        .env("GPUVET_NODE", name)
        .env("GPUVET_JOB_ID", "replicas-cli")
        .env("GPUVET_REPORT_TOKEN", TOKEN);
    command
}

/// Node names of the CLI nodes that start with the first replica of two.
fn names_starting_at_the_first(count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("cli-node-{i}"))
        .filter(|name| start_index(name, 2) == 0)
        .take(count)
        .collect()
}

/// How long the test waits for what must happen, so that a failure ends it instead
/// of hanging it; never a bound on speed.
const HANG_GUARD: Duration = Duration::from_secs(240);

const NODES: usize = 64;
/// Reports and events each node records before the kill, and after it.
const BEFORE: (usize, usize) = (2, 8);
const AFTER: (usize, usize) = (1, 4);

#[test]
#[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
#[allow(clippy::print_stderr)] // when the kill came and how long draining took are worth seeing
fn two_replicas_one_killed_mid_run_store_every_push_once_and_empty_every_outbox() {
    let db = TestDatabase::create();
    // Both at once, as a Deployment starts them: they migrate the database in turn.
    let (mut a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| Replica::start(&db));
        let b = scope.spawn(|| Replica::start(&db));
        (a.join().unwrap(), b.join().unwrap())
    });
    let urls = [a.url.clone(), b.url.clone()];

    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (0..NODES).map(|i| Node::begin(dir.path(), i)).collect();
    for node in &mut nodes {
        node.record(BEFORE.0, BEFORE.1);
    }
    let queued: u64 = nodes.iter().map(Node::waiting).sum();
    assert_eq!(queued, (NODES * (1 + BEFORE.0 + BEFORE.1)) as u64);
    let starting_at_a = nodes
        .iter()
        .filter(|node| start_index(&node.name, 2) == 0)
        .count();
    assert!(
        starting_at_a > 0 && starting_at_a < NODES,
        "{starting_at_a}"
    );

    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let senders: Vec<Sender> = nodes
        .iter()
        .map(|node| {
            let path = node.store.clone();
            let heard = Arc::clone(&errors);
            let name = node.name.clone();
            Sender::start(
                move || Store::open(&path),
                Pusher::to_any_of(&urls, Some(TOKEN))
                    .unwrap()
                    .starting_with(&node.name),
                move |message| heard.lock().unwrap().push(format!("{name}: {message}")),
            )
        })
        .collect();

    // Mid-run: once a third of what was queued has been taken.
    let started = Instant::now();
    let waiting = |nodes: &[Node]| nodes.iter().map(Node::waiting).sum::<u64>();
    let mut left_at_kill = waiting(&nodes);
    while left_at_kill > queued * 2 / 3 {
        assert!(
            started.elapsed() < HANG_GUARD,
            "{left_at_kill} of {queued} still queued"
        );
        std::thread::sleep(Duration::from_millis(20));
        left_at_kill = waiting(&nodes);
    }
    a.kill();
    let killed_after = started.elapsed();

    // Every node records more after the kill: those that sent to `a` must move on.
    for node in &mut nodes {
        node.record(AFTER.0, AFTER.1);
    }
    // Real nodes that start with the dead replica: `check` sends through its list...
    let dead = a.url.clone();
    let list = [dead.as_str(), b.url.as_str()];
    let cli_names = names_starting_at_the_first(3);
    let scratches: Vec<Scratch> = cli_names.iter().map(|_| Scratch::temp()).collect();
    let checks: Vec<Child> = cli_names
        .iter()
        .zip(&scratches)
        .map(|(name, scratch)| {
            gpuvet_node(scratch, name)
                .args(["check", "--config"])
                .arg(node_config(scratch, &list))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // ...and `push --to dead --to b` sends what a node queued for a server that is gone.
    let pushed = Scratch::temp();
    let pushed_name = names_starting_at_the_first(4).pop().unwrap();
    let gone = crate::common::serve::free_loopback_addr();
    let queued_only = gpuvet_node(&pushed, &pushed_name)
        .args(["check", "--config"])
        .arg(node_config(&pushed, &[&format!("http://{gone}")]))
        .output()
        .unwrap();
    assert_eq!(
        queued_only.status.code(),
        Some(0),
        "{}",
        stderr(&queued_only)
    );
    let push = gpuvet_node(&pushed, &pushed_name)
        .args(["push", "--to", &dead, "--to", &b.url])
        .output()
        .unwrap();
    assert_eq!(push.status.code(), Some(0), "{}", stderr(&push));
    assert!(
        stdout(&push).contains(&format!("to one of {dead}, {}; 0 waiting", b.url)),
        "{}",
        stdout(&push)
    );
    for (check, name) in checks.into_iter().zip(&cli_names) {
        let output = check.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
        assert!(
            !stderr(&output).contains("push:"),
            "{name}: {}",
            stderr(&output)
        );
    }

    // Every outbox empties (the guard only ends a test that would hang).
    let total: u64 = queued + (NODES * (AFTER.0 + AFTER.1)) as u64;
    loop {
        let left = waiting(&nodes);
        if left == 0 {
            break;
        }
        assert!(
            started.elapsed() < HANG_GUARD,
            "{left} of {total} still queued; the senders said: {:?}",
            errors.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let drained_after = started.elapsed();
    for sender in senders {
        sender.stop();
    }
    for scratch in scratches.iter().chain([&pushed]) {
        let store = Store::open(&scratch.store()).unwrap();
        assert_eq!(
            store.outbox_len().unwrap(),
            0,
            "{}",
            scratch.store().display()
        );
    }

    // Exactly once: the server's rows are what the nodes recorded, none twice.
    let mut recorded: Vec<String> = Vec::new();
    for node in &nodes {
        recorded.extend(keys(
            &Store::open(&node.store).unwrap(),
            &[("replicas".to_owned(), node.name.clone())],
        ));
    }
    for (scratch, name) in scratches
        .iter()
        .zip(&cli_names)
        .chain([(&pushed, &pushed_name)])
    {
        recorded.extend(keys(
            &Store::open(&scratch.store()).unwrap(),
            &[("replicas-cli".to_owned(), name.clone())],
        ));
    }
    recorded.sort();
    let stored = server_keys(&db);
    let expected_in_process = NODES * (1 + BEFORE.0 + BEFORE.1 + AFTER.0 + AFTER.1);
    assert!(recorded.len() > expected_in_process, "{}", recorded.len());
    assert_eq!(
        stored.len(),
        recorded.len(),
        "as many rows as the nodes recorded"
    );
    assert_eq!(stored, recorded);
    eprintln!(
        "replicas: {} entries from {NODES} senders and {} gpuvet processes; {starting_at_a} senders started at the killed replica, killed after {killed_after:?} with {left_at_kill} of {queued} queued; every outbox empty after {drained_after:?}; sender errors heard: {}",
        recorded.len(),
        cli_names.len() + 1,
        errors.lock().unwrap().len()
    );
}

#[test]
fn push_checks_each_address_of_to_as_report_to_is_checked() {
    let scratch = Scratch::temp();
    for (to, said) in [
        (
            vec!["http://a:9470", "http://A:9470/"],
            "error: invalid `--to[1]`: `http://A:9470/` is listed twice (also at `--to[0]`)\nhint: list each replica once",
        ),
        (
            vec!["http://a:9470", "a:9470"],
            "error: invalid `--to[1]`: `a:9470` is not an `https://` or `http://` address\nhint: give the server's base address",
        ),
    ] {
        let mut command = scratch.gpuvet();
        command.arg("push");
        for url in &to {
            command.args(["--to", url]);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).starts_with(said), "{}", stderr(&output));
    }
}
