//! The server over real HTTP on a loopback port, against a real store (each test on
//! SQLite, and on PostgreSQL when `GPUVET_TEST_POSTGRES_URL` names a server): every
//! endpoint, its filters, and its 400, 401, 404 and 409 answers; pushes stored once;
//! the pages (an attempt's timeline among them) and `/metrics`; and, with a read
//! token, every read refused without it, pushes taken without it, and a browser signed
//! in by a one-time link. Group commit: concurrent pushes with repeats each answered
//! and stored once, pushes queued meanwhile sharing one transaction, and none answered
//! before its transaction committed.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::events::{Attempt, AttemptStart, EventKind, EventRecord, NewEvent};
use gpuvet_model::record::{CheckSpan, CheckWindow, MemberClock, MemberRecord, RecordedTimeline};
use gpuvet_model::results::{
    CheckResult, CheckStatus, Entity, EntityResult, Evidence, GroupIncident, GroupSummary,
    IncidentKind, Lane, Measurement, Outcome, RunReport, Verdict,
};
use gpuvet_server::Server;
use gpuvet_server::pool::StorePool;
use gpuvet_store::{Store, StoreLocation};
use gpuvet_testkit::postgres::TestDatabase;
use serde_json::{Value, json};

const TOKEN: &str = "test-token";

/// The read token of the servers that guard their reads.
const READ_TOKEN: &str = "test-read-token-s3cret";

/// Where a test's server keeps its data: a fresh SQLite file, or a fresh database on
/// the PostgreSQL test server. Dropped at the end of the test.
enum Backing {
    Sqlite(tempfile::TempDir),
    Postgres(TestDatabase),
}

impl Backing {
    fn location(&self) -> StoreLocation {
        match self {
            Backing::Sqlite(dir) => StoreLocation::Sqlite(dir.path().join("server.db")),
            Backing::Postgres(db) => StoreLocation::Postgres(db.url.clone()),
        }
    }
}

/// A server on its own thread and runtime; stops when dropped.
struct Running {
    addr: SocketAddr,
    location: StoreLocation,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    // Last: the data outlives the server that uses it.
    _backing: Backing,
}

impl Running {
    fn start(backing: Backing, token: Option<&str>) -> Running {
        Running::start_guarded(backing, token, None)
    }

    /// A server whose reads need `read_token` when given.
    fn start_guarded(backing: Backing, token: Option<&str>, read_token: Option<&str>) -> Running {
        let location = backing.location();
        let pool = StorePool::new(location.clone()).unwrap();
        let token = token.map(str::to_owned);
        let read_token = read_token.map(str::to_owned);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, addr) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let server = Server::bind("127.0.0.1:0".parse().unwrap(), pool, token)
                    .await
                    .unwrap()
                    .with_read_token(read_token.as_deref());
                ready.send(server.local_addr().unwrap()).unwrap();
                server
                    .run(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Running {
            addr: addr.recv().unwrap(),
            location,
            stop: Some(stop),
            thread: Some(thread),
            _backing: backing,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    /// `GET path`: the status and the body as text.
    fn get(&self, path: &str) -> (u16, String) {
        let mut response = Self::agent().get(&self.url(path)).call().unwrap();
        let status = response.status().as_u16();
        (status, response.body_mut().read_to_string().unwrap())
    }

    /// `GET path`: its status, content type and body as bytes.
    fn get_bytes(&self, path: &str) -> (u16, String, Vec<u8>) {
        let mut response = Self::agent().get(&self.url(path)).call().unwrap();
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, kind, response.body_mut().read_to_vec().unwrap())
    }

    /// `GET path` answered with JSON.
    fn get_json(&self, path: &str) -> (u16, Value) {
        let (status, body) = self.get(path);
        (
            status,
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")),
        )
    }

    /// `POST path` with `body`, and the token when given.
    fn post(&self, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
        let mut request = Self::agent()
            .post(&self.url(path))
            .header("content-type", "application/json");
        if let Some(token) = token {
            request = request.header("authorization", &format!("Bearer {token}"));
        }
        let mut response = request.send(body).unwrap();
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}")),
        )
    }

    fn store(&self) -> Store {
        Store::open_location(&self.location).unwrap()
    }

    /// Runs SQL on the server's database beside it: `sqlite` on SQLite, `postgres` on
    /// PostgreSQL.
    fn execute(&self, sqlite: &str, postgres: &str) {
        match &self._backing {
            Backing::Sqlite(_) => self.sqlite().execute_batch(sqlite).unwrap(),
            Backing::Postgres(db) => db.client().batch_execute(postgres).unwrap(),
        }
    }

    fn sqlite(&self) -> rusqlite::Connection {
        let StoreLocation::Sqlite(path) = &self.location else {
            panic!("not an SQLite store");
        };
        rusqlite::Connection::open(path).unwrap()
    }

    /// Holds the store's write lock (SQLite's one writer, PostgreSQL's table of runs)
    /// until the returned function is called: the server's writes wait meanwhile (on
    /// SQLite, for up to the store's busy timeout of 10 s).
    fn hold_write_lock(&self) -> Box<dyn FnOnce()> {
        match &self._backing {
            Backing::Sqlite(_) => {
                let conn = self.sqlite();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                Box::new(move || conn.execute_batch("COMMIT").unwrap())
            }
            Backing::Postgres(db) => {
                let mut client = db.client();
                client
                    .batch_execute("BEGIN; LOCK TABLE runs IN EXCLUSIVE MODE")
                    .unwrap();
                Box::new(move || client.batch_execute("COMMIT").unwrap())
            }
        }
    }

    /// A counter or gauge of `/metrics`.
    fn metric(&self, name: &str) -> u64 {
        let (status, text) = self.get("/metrics");
        assert_eq!(status, 200);
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no `{name}` in /metrics"))
    }

    /// Waits until the metric `name` is `value`.
    fn wait_for_metric(&self, name: &str, value: u64) {
        // A bound only so that a broken server fails the test instead of hanging it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.metric(name) != value {
            assert!(
                std::time::Instant::now() < deadline,
                "`{name}` never became {value}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// `method path` with `headers`: the status, the headers and the body as text.
    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = Self::agent().run(request.body(()).unwrap()).unwrap();
        Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            // Lossy: a bundle is gzip.
            body: String::from_utf8_lossy(&response.body_mut().read_to_vec().unwrap()).into_owned(),
        }
    }
}

/// One answer, whole.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: ureq::http::HeaderMap,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn attempt(job: &str, node: &str, number: u32) -> Attempt {
    Attempt {
        job_id: job.to_owned(),
        attempt: number,
        node: node.to_owned(),
        instance: format!("pod-{node}"),
    }
}

/// A report with one gemm check; device 1 slow when `slow`.
fn report(attempt: &Attempt, id: &str, slow: bool) -> RunReport {
    let entities = [(0, 700.0), (1, if slow { 400.0 } else { 701.0 })]
        .into_iter()
        .map(|(index, value)| {
            let entity = Entity::Device {
                node: attempt.node.clone(),
                index,
            };
            let verdict = if value < 500.0 {
                Verdict::Slow
            } else {
                Verdict::Ok
            };
            EntityResult {
                entity: entity.clone(),
                verdict,
                lane: Lane::Host,
                reason: format!("{value} TFLOPS"),
                evidence: Evidence {
                    value: Some(value),
                    peer_median: Some(700.0),
                    ..Evidence::default()
                },
                measurement: Measurement::ok(entity, value, vec![value]),
            }
        })
        .collect();
    let status = if slow {
        CheckStatus::Failed
    } else {
        CheckStatus::Passed
    };
    let mut gemm = CheckResult::judged(CheckName::GemmFlops, status, entities);
    gemm.duration_secs = 1.5;
    let checks = vec![gemm];
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
        duration_secs: 2.0,
        timeout_secs: 300.0,
        outcome: Outcome::of(&checks),
        checks,
        group: None,
        context: None,
        diagnosis: None,
        repeat_offender: None,
    }
}

fn event(attempt: &Attempt, id: &str, time_ms: u64, kind: EventKind) -> EventRecord {
    EventRecord {
        attempt: attempt.clone(),
        event: NewEvent {
            event_id: id.to_owned(),
            time_ms,
            kind,
            lane: Some(Lane::Host),
            message: format!("{kind} at {time_ms}"),
            details: json!({ "n": time_ms }),
        },
    }
}

fn push_report(server: &Running, report: &RunReport) -> (u16, Value) {
    server.post(
        "/api/v1/reports",
        Some(TOKEN),
        &serde_json::to_string(report).unwrap(),
    )
}

fn push_event(server: &Running, record: &EventRecord) -> (u16, Value) {
    server.post(
        "/api/v1/events",
        Some(TOKEN),
        &serde_json::to_string(record).unwrap(),
    )
}

/// job-a: n0 failed (slow GPU), n1 passed, both attempt 1; then n0 attempt 2 passed.
fn populated(backing: Backing) -> Running {
    let server = Running::start(backing, Some(TOKEN));
    let n0 = attempt("job-a", "n0", 1);
    assert_eq!(push_report(&server, &report(&n0, "r-n0-1", true)).0, 200);
    let n1 = attempt("job-a", "n1", 1);
    assert_eq!(push_report(&server, &report(&n1, "r-n1-1", false)).0, 200);
    let n0_2 = attempt("job-a", "n0", 2);
    assert_eq!(push_report(&server, &report(&n0_2, "r-n0-2", false)).0, 200);
    for (record, time) in [
        (event(&n0, "e-1", 100, EventKind::SanityCheckFailed), 100),
        (event(&n1, "e-2", 200, EventKind::SanityCheckSucceeded), 200),
        (
            event(&n0_2, "e-3", 300, EventKind::SanityCheckSucceeded),
            300,
        ),
    ] {
        let (status, body) = push_event(&server, &record);
        assert_eq!(status, 200, "{time}: {body}");
    }
    server
}

/// `gpuvet.baseline_from: server`: the fleet's baseline of a model and check, learned
/// from the GPUs whose reports named their model, once it has enough results.
fn the_fleet_baselines_are_learned_from_the_pushed_reports(backing: Backing) {
    use gpuvet_model::fleet::MIN_FLEET_RESULTS;
    use gpuvet_model::results::DeviceInfo;
    let server = Running::start(backing, Some(TOKEN));
    let (status, baselines) = server.get_json("/api/v1/baselines");
    assert_eq!((status, baselines), (200, json!([])));
    for i in 0..MIN_FLEET_RESULTS {
        let node = attempt("job-f", &format!("n{i}"), 1);
        let mut report = report(&node, &format!("r-f-{i}"), false);
        // GPU 0 names its model; GPU 1 does not, and is left out.
        report.devices.push(DeviceInfo {
            index: 0,
            name: "NVIDIA H200".to_owned(),
            memory_bytes: None,
            facts: Default::default(),
            details: Default::default(),
        });
        assert_eq!(push_report(&server, &report).0, 200);
    }
    let (status, baselines) = server.get_json("/api/v1/baselines");
    assert_eq!(status, 200);
    assert_eq!(baselines.as_array().unwrap().len(), 1, "{baselines}");
    let baseline = &baselines[0];
    assert_eq!(baseline["model"], "NVIDIA H200");
    assert_eq!(baseline["check"], "gemm_flops");
    assert_eq!(baseline["results"], MIN_FLEET_RESULTS);
    assert_eq!(baseline["median"], 700.0);
    assert_eq!(baseline["limit"], 630.0);
}

fn nodes_rank_by_failures_and_a_nodes_history_reads_back(backing: Backing) {
    let server = populated(backing);
    // n0 failed in job-a's attempt 1 and passed in attempt 2; n1 passed.
    let (status, nodes) = server.get_json("/api/v1/nodes?since_ms=0");
    assert_eq!(status, 200, "{nodes}");
    let rows: Vec<(&str, u64, u64)> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap(),
                n["runs"].as_u64().unwrap(),
                n["failed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows, [("n0", 2, 1), ("n1", 1, 0)]);
    assert!(nodes[0].get("repeat_offender").is_none(), "{nodes}");
    // One failure of its last two flags n0 under a rule of 1 of 2.
    let (_, strict) = server.get_json("/api/v1/nodes?since_ms=0&failures=1&of_last=2");
    assert_eq!(
        strict[0]["repeat_offender"],
        json!({ "failed": 1, "of_last": 2 })
    );
    // The default window is the last 7 days: these runs are older.
    assert_eq!(server.get_json("/api/v1/nodes"), (200, json!([])));
    for bad in [
        "failures=6&of_last=5",
        "of_last=0",
        "limit=0",
        "since_ms=x",
        "k=1",
    ] {
        let (status, body) = server.get_json(&format!("/api/v1/nodes?{bad}"));
        assert_eq!(status, 400, "{bad}: {body}");
    }

    let (status, history) = server.get_json("/api/v1/nodes/n0");
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["node"], "n0");
    assert_eq!(history["runs"].as_array().unwrap().len(), 2);
    assert_eq!(history["checks"][0]["check"], "gemm_flops");
    assert_eq!(history["checks"][0]["points"].as_array().unwrap().len(), 2);
    assert_eq!(history["findings"][0]["entity"], "n0/dev1");
    let (_, one) = server.get_json("/api/v1/nodes/n0?limit=1");
    assert_eq!(one["runs"].as_array().unwrap().len(), 1);
    let (status, body) = server.get_json("/api/v1/nodes/nobody");
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("node `nobody`"),
        "{body}"
    );
    assert_eq!(server.get_json("/api/v1/nodes/n0?limit=0").0, 400);
}

fn jobs_attempts_and_instances_read_back_and_unknown_ones_are_404(backing: Backing) {
    let server = populated(backing);
    let (status, jobs) = server.get_json("/api/v1/jobs");
    assert_eq!(status, 200);
    assert_eq!(jobs[0]["job_id"], "job-a");
    assert_eq!(jobs[0]["nodes"], 2);
    assert_eq!(jobs[0]["passed"], 2, "each node's latest attempt: {jobs}");

    let (status, job) = server.get_json("/api/v1/jobs/job-a");
    assert_eq!((status, &job["latest_attempt"]), (200, &json!(2)));

    let (status, attempts) = server.get_json("/api/v1/jobs/job-a/attempts");
    assert_eq!(status, 200);
    assert_eq!(attempts[0]["attempt"], 1);
    assert_eq!(attempts[0]["failed"], 1);
    assert_eq!(attempts[0]["passed"], 1);
    assert_eq!(attempts[1]["attempt"], 2);
    assert_eq!(attempts[1]["nodes"], 1);

    let (_, instances) = server.get_json("/api/v1/jobs/job-a/instances");
    let nodes: Vec<(&str, u64)> = instances
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["node"].as_str().unwrap(), i["attempt"].as_u64().unwrap()))
        .collect();
    assert_eq!(nodes, [("n0", 2), ("n1", 1)]);
    let (_, first) = server.get_json("/api/v1/jobs/job-a/instances?attempt=1");
    assert_eq!(first[0]["latest_run"]["outcome"], "failed");
    assert_eq!(first[0]["latest_run"]["findings"], 1);

    let (status, one) = server.get_json("/api/v1/jobs/job-a/instances/n1");
    assert_eq!((status, &one["instance"]), (200, &json!("pod-n1")));

    for (path, message) in [
        ("/api/v1/jobs/nope", "no job `nope` in the store"),
        ("/api/v1/jobs/nope/attempts", "no job `nope` in the store"),
        ("/api/v1/jobs/nope/instances", "no job `nope` in the store"),
        (
            "/api/v1/jobs/job-a/instances/n9",
            "no instance of job `job-a` on node `n9`",
        ),
        (
            "/api/v1/jobs/job-a/instances/n1?attempt=2",
            "no instance of job `job-a` on node `n1` in attempt 2",
        ),
        ("/api/v1/runs/999", "no run `999` in the store"),
        ("/api/v1/unknown", "no endpoint at `/api/v1/unknown`"),
    ] {
        let (status, body) = server.get_json(path);
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["status"], 404);
        assert_eq!(body["error"]["message"], message, "{path}");
        assert!(body["error"]["hint"].is_string(), "{path}: {body}");
    }
}

fn runs_results_and_events_filter_and_bad_filters_are_400(backing: Backing) {
    let server = populated(backing);
    let (_, runs) = server.get_json("/api/v1/runs?job=job-a&node=n0");
    let ids: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["report_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["r-n0-2", "r-n0-1"], "the newest first");
    let (_, failed) = server.get_json("/api/v1/runs?outcome=failed");
    assert_eq!(failed.as_array().unwrap().len(), 1);
    let run_id = failed[0]["run_id"].as_i64().unwrap();
    let (status, run) = server.get_json(&format!("/api/v1/runs/{run_id}"));
    assert_eq!(status, 200);
    assert_eq!(run["report"]["report_id"], "r-n0-1");
    assert_eq!(run["node"], "n0");

    let (_, results) = server.get_json("/api/v1/results?check=gemm_flops&node=n0&attempt=1");
    assert_eq!(results.as_array().unwrap().len(), 1);
    assert_eq!(results[0]["result"]["status"], "failed");
    assert_eq!(results[0]["result"]["entities"][1]["verdict"], "slow");

    let kinds = |path: &str| -> Vec<String> {
        let (status, events) = server.get_json(path);
        assert_eq!(status, 200, "{path}: {events}");
        events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(kinds("/api/v1/events"), ["e-1", "e-2", "e-3"]);
    assert_eq!(kinds("/api/v1/events?kind=SanityCheckFailed"), ["e-1"]);
    assert_eq!(kinds("/api/v1/events?node=n0"), ["e-1", "e-3"]);
    assert_eq!(kinds("/api/v1/events?job=job-a&attempt=2"), ["e-3"]);
    assert_eq!(kinds("/api/v1/events?since_ms=150&until_ms=300"), ["e-2"]);
    assert_eq!(kinds("/api/v1/events?order=newest&limit=2"), ["e-3", "e-2"]);
    assert!(kinds("/api/v1/events?job=other").is_empty());

    for (path, needle) in [
        ("/api/v1/events?kind=Bogus", "unknown variant `Bogus`"),
        ("/api/v1/events?limit=0", "`limit` is 0"),
        ("/api/v1/events?limit=10001", "`limit` is 10001"),
        (
            "/api/v1/events?since_ms=5&until_ms=1",
            "`since_ms` (5) is after `until_ms` (1)",
        ),
        ("/api/v1/events?since_ms=-1", "since_ms"),
        ("/api/v1/events?colour=red", "unknown field `colour`"),
        ("/api/v1/runs?outcome=great", "unknown variant `great`"),
        ("/api/v1/runs?attempt=x", "attempt"),
        ("/api/v1/results?check=gemm", "unknown check `gemm`"),
        ("/api/v1/runs/abc", "abc"),
        ("/api/v1/jobs/a%00b", "NUL"),
        ("/api/v1/events?job=a%00b", "NUL"),
    ] {
        let (status, body) = server.get_json(path);
        assert_eq!(status, 400, "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{path}: {message}");
    }
}

fn a_push_needs_the_token_and_is_stored_once_under_its_id(backing: Backing) {
    let server = Running::start(backing, Some(TOKEN));
    let n0 = attempt("job-p", "n0", 1);
    let body = serde_json::to_string(&report(&n0, "r-1", true)).unwrap();
    for (token, needle) in [
        (None, "needs the server's token"),
        (Some("wrong"), "does not match"),
    ] {
        let (status, answer) = server.post("/api/v1/reports", token, &body);
        assert_eq!(status, 401, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains(needle)
        );
    }
    assert!(
        server.store().jobs().unwrap().is_empty(),
        "nothing stored without the token"
    );

    let (status, first) = server.post("/api/v1/reports", Some(TOKEN), &body);
    assert_eq!(status, 200, "{first}");
    let (status, again) = server.post("/api/v1/reports", Some(TOKEN), &body);
    assert_eq!((status, &again), (200, &first), "the same run id");
    assert_eq!(server.store().runs(&Default::default()).unwrap().len(), 1);

    let mut changed = report(&n0, "r-1", false);
    changed.duration_secs = 9.0;
    let (status, conflict) = push_report(&server, &changed);
    assert_eq!(status, 409, "{conflict}");
    assert!(
        conflict["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`r-1`")
    );

    let record = event(&n0, "e-1", 5, EventKind::SanityCheckFailed);
    let (status, stored) = push_event(&server, &record);
    assert_eq!(status, 200, "{stored}");
    assert_eq!(push_event(&server, &record), (200, stored));
    assert_eq!(server.store().count_events(&Default::default()).unwrap(), 1);

    for (path, body, needle) in [
        (
            "/api/v1/reports",
            serde_json::to_string(&report(&n0, "", true)).unwrap(),
            "no `report_id`",
        ),
        (
            "/api/v1/events",
            serde_json::to_string(&event(&n0, "", 1, EventKind::InstanceStarted)).unwrap(),
            "no `event_id`",
        ),
        (
            "/api/v1/reports",
            "{\"job_id\": 3}".to_owned(),
            "not a gpuvet report",
        ),
        ("/api/v1/events", "[1, 2".to_owned(), "JSON"),
        (
            "/api/v1/reports",
            serde_json::to_string(&report(&attempt("job-p", "n0", 0), "r-0", true)).unwrap(),
            "`attempt` is 0",
        ),
        (
            "/api/v1/events",
            serde_json::to_string(&event(&n0, "e-9", u64::MAX, EventKind::InstanceStarted))
                .unwrap(),
            "`time_ms` is 18446744073709551615, beyond the largest time the store keeps",
        ),
        (
            "/api/v1/events",
            serde_json::to_string(&event(
                &attempt("job-p", "n0", 0),
                "e-0",
                1,
                EventKind::InstanceStarted,
            ))
            .unwrap(),
            "`attempt` is 0",
        ),
        (
            "/api/v1/events",
            serde_json::to_string(&event(
                &attempt("a\u{0}b", "n0", 1),
                "e-9",
                1,
                EventKind::InstanceStarted,
            ))
            .unwrap(),
            "NUL",
        ),
    ] {
        let (status, answer) = server.post(path, Some(TOKEN), &body);
        assert_eq!(status, 400, "{path} {body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{path}: {message}");
    }
}

fn a_server_without_a_token_refuses_writes_and_still_serves_reads(backing: Backing) {
    let server = Running::start(backing, None);
    let n0 = attempt("job", "n0", 1);
    let (status, answer) = push_report(&server, &report(&n0, "r-1", false));
    assert_eq!(status, 401);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("takes no writes")
    );
    assert_eq!(server.get_json("/api/v1/jobs"), (200, json!([])));
    assert_eq!(server.get_json("/api/v1/health").1["status"], "ok");
}

fn pages_show_instances_the_failed_instance_and_filtered_events(backing: Backing) {
    let server = populated(backing);
    let (status, list) = server.get("/");
    assert_eq!(status, 200);
    assert!(list.contains("data-node=\"n0\""), "{list}");
    assert!(list.contains("/instances/job-a/n0"), "{list}");

    let (status, page) = server.get("/instances/job-a/n0?attempt=1");
    assert_eq!(status, 200);
    assert!(page.contains("<svg"), "a chart: {page}");
    assert!(page.contains("n0/dev1"), "the slow GPU: {page}");
    assert!(
        !page.contains("<script"),
        "no live refresh once the report is in"
    );

    let (status, events) = server.get("/events?kind=SanityCheckFailed&job=&node=");
    assert_eq!(status, 200);
    assert_eq!(
        events.matches("data-kind=\"SanityCheckFailed\"").count(),
        1,
        "{events}"
    );
    assert!(
        !events.contains("data-kind=\"SanityCheckSucceeded\""),
        "{events}"
    );

    let (status, report) = server.get(&format!(
        "/reports/{}.html",
        server.store().runs(&Default::default()).unwrap()[2]
            .run
            .run_id
    ));
    assert_eq!(status, 200);
    assert!(report.starts_with("<!DOCTYPE html>"));

    for path in [
        "/instances/job-a/n9",
        "/reports/abc.html",
        "/reports/999.html",
        "/nowhere",
    ] {
        let (status, body) = server.get(path);
        assert_eq!(status, 404, "{path}");
        assert!(body.starts_with("<!DOCTYPE html>"), "{path}: {body}");
    }
    assert_eq!(server.get("/events?kind=Bogus").0, 400);

    // Nodes across jobs: ranked (these runs are from 2023, so a long window), then one.
    let (status, nodes) = server.get("/nodes?days=100000&failures=1&of_last=2");
    assert_eq!(status, 200, "{nodes}");
    let n0 = nodes.find("data-node=\"n0\"").expect("n0 is listed");
    assert!(
        n0 < nodes.find("data-node=\"n1\"").unwrap(),
        "most failed first: {nodes}"
    );
    assert_eq!(
        nodes.matches("class=\"failed repeat-offender\"").count(),
        1,
        "{nodes}"
    );
    assert!(nodes.contains("href=\"/nodes/n0\""), "{nodes}");
    assert!(
        server
            .get("/nodes")
            .1
            .contains("No node ran in this window.")
    );
    let (status, node) = server.get("/nodes/n0");
    assert_eq!(status, 200, "{node}");
    assert!(
        node.contains("<svg class=\"chart spark\""),
        "a sparkline: {node}"
    );
    assert!(node.contains("n0/dev1"), "the finding: {node}");
    assert!(
        node.contains("1 of its last 2 runs failed because of it, in 1 job(s)"),
        "{node}"
    );
    let (status, body) = server.get("/nodes/n9");
    assert_eq!(status, 404);
    assert!(body.contains("No such node"), "{body}");
    for bad in ["/nodes?days=x", "/nodes?failures=9", "/nodes/n0?of_last=0"] {
        let (status, body) = server.get(bad);
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.starts_with("<!DOCTYPE html>"), "{bad}: {body}");
    }
}

fn a_pushed_attempt_shows_as_running_with_the_live_refresh_until_its_report_arrives(
    backing: Backing,
) {
    let server = Running::start(backing, Some(TOKEN));
    let n0 = attempt("job-l", "n0", 1);
    let start = json!({"job_id": "job-l", "attempt": 1, "node": "n0", "instance": "pod-n0",
                       "started_at_ms": 1_700_000_000_000u64});
    assert_eq!(
        server.post("/api/v1/attempts", None, &start.to_string()).0,
        401
    );
    let (status, echoed) = server.post("/api/v1/attempts", Some(TOKEN), &start.to_string());
    assert_eq!((status, &echoed), (200, &start));
    assert_eq!(
        server
            .post("/api/v1/attempts", Some(TOKEN), &start.to_string())
            .0,
        200
    );
    let (_, instance) = server.get_json("/api/v1/jobs/job-l/instances/n0");
    assert_eq!(instance["latest_run"], Value::Null, "{instance}");
    let (status, page) = server.get("/instances/job-l/n0");
    assert_eq!(status, 200);
    assert!(page.contains("<script"), "{page}");
    assert!(page.contains("/api/v1/jobs/job-l/instances/n0"), "{page}");

    assert_eq!(push_report(&server, &report(&n0, "r-l", true)).0, 200);
    let (_, instance) = server.get_json("/api/v1/jobs/job-l/instances/n0");
    assert_eq!(instance["latest_run"]["outcome"], "failed", "{instance}");
    let (_, page) = server.get("/instances/job-l/n0");
    assert!(
        !page.contains("<script"),
        "no refresh once the report is in"
    );
    let bad = json!({"job_id": "job-l", "attempt": 0, "node": "n0", "instance": "p",
                     "started_at_ms": 1});
    let (status, answer) = server.post("/api/v1/attempts", Some(TOKEN), &bad.to_string());
    assert_eq!(status, 400, "{answer}");
}

const T0: u64 = 1_700_000_000_000;

/// The coordinator's report (on `n0`) of attempt 1 of `job-t`, a group of three whose
/// clocks are `n1` 1 s ahead and `n2` 2 s behind: `gemm_flops` passed, then `n2`
/// stopped answering during `all_reduce_2` (the first error), `n1` timed out waiting
/// for it and their pair was found faulty.
fn group_report() -> RunReport {
    let spans = |offset: i64, last_end: u64| {
        let at = |ms: u64| (ms as i64 + offset) as u64;
        vec![
            CheckSpan {
                check: CheckName::GemmFlops,
                began_ms: at(T0 + 100),
                ended_ms: at(T0 + 1_100),
            },
            CheckSpan {
                check: CheckName::AllReduce2,
                began_ms: at(T0 + 1_200),
                ended_ms: at(last_end),
            },
        ]
    };
    let member = |rank: u32, offset_ms: i64, last_end: u64| MemberRecord {
        rank,
        node: format!("n{rank}"),
        clock: Some(MemberClock {
            offset_ns: offset_ms * 1_000_000,
            uncertainty_ns: 50_000,
            samples: 5,
        }),
        spans: spans(offset_ms, last_end),
        devices: Vec::new(),
    };
    let incident = |rank: u32, kind: IncidentKind, lane: Lane, time_ms: u64| GroupIncident {
        rank,
        node: format!("n{rank}"),
        kind,
        lane,
        time_ms,
        detail: format!("rank {rank} (n{rank}) {kind}"),
    };
    let pair = Entity::NodePair {
        a: "n1".to_owned(),
        b: "n2".to_owned(),
    };
    let failed = CheckResult::judged(
        CheckName::AllReduce2,
        CheckStatus::Failed,
        vec![EntityResult {
            measurement: Measurement::ok(pair.clone(), 0.0, vec![0.0]),
            entity: pair,
            verdict: Verdict::Faulty,
            lane: Lane::Network,
            reason: "lost its peer".to_owned(),
            evidence: Evidence::default(),
        }],
    );
    let checks = vec![
        CheckResult::judged(CheckName::GemmFlops, CheckStatus::Passed, Vec::new()),
        failed,
    ];
    let n0 = attempt("job-t", "n0", 1);
    RunReport {
        group: Some(GroupSummary {
            size: None,
            nodes: vec!["n0".into(), "n1".into(), "n2".into()],
            first_error: Some(incident(
                2,
                IncidentKind::Unresponsive,
                Lane::Host,
                T0 + 1_500,
            )),
            secondary: vec![incident(
                1,
                IncidentKind::TimedOut,
                Lane::Network,
                T0 + 1_900,
            )],
            other_failures: Vec::new(),
            timeline: Some(RecordedTimeline {
                coordinator: "n0".into(),
                members: vec![
                    member(0, 0, T0 + 2_200),
                    member(1, 1_000, T0 + 2_200),
                    member(2, -2_000, T0 + 1_500),
                ],
                checks: vec![
                    CheckWindow {
                        check: CheckName::GemmFlops,
                        began_ms: T0 + 100,
                        ended_ms: T0 + 1_100,
                        status: CheckStatus::Passed,
                    },
                    CheckWindow {
                        check: CheckName::AllReduce2,
                        began_ms: T0 + 1_200,
                        ended_ms: T0 + 2_200,
                        status: CheckStatus::Failed,
                    },
                ],
            }),
        }),
        started_at_ms: T0,
        outcome: Outcome::of(&checks),
        checks,
        ..report(&n0, "r-t-0", false)
    }
}

fn the_timeline_page_and_api_name_an_attempts_first_error_and_unknown_ones_are_404(
    backing: Backing,
) {
    let server = Running::start(backing, Some(TOKEN));
    let (status, body) = push_report(&server, &group_report());
    assert_eq!(status, 200, "{body}");
    let n1 = attempt("job-t", "n1", 1);
    let (status, body) = push_event(
        &server,
        &event(&n1, "e-t-1", T0 + 3_300, EventKind::SanityCheckFailed),
    );
    assert_eq!(status, 200, "{body}");

    let (status, timeline) = server.get_json("/api/v1/jobs/job-t/timeline");
    assert_eq!(status, 200, "{timeline}");
    assert_eq!(
        (
            &timeline["job_id"],
            &timeline["attempt"],
            &timeline["clock_of"]
        ),
        (&json!("job-t"), &json!(1), &json!("n0"))
    );
    let first = &timeline["entries"][timeline["first_error"].as_u64().unwrap() as usize];
    assert_eq!(
        (&first["node"], &first["kind"], &first["role"]),
        (&json!("n2"), &json!("incident"), &json!("first_error")),
        "{timeline}"
    );
    // n1's event, 1 s fast on its clock, moves onto n0's.
    let sanity = timeline["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "event")
        .unwrap();
    assert_eq!(
        (
            &sanity["time_ms"],
            &sanity["local_time_ms"],
            &sanity["role"]
        ),
        (
            &json!(T0 + 2_300),
            &json!(T0 + 3_300),
            &json!("consequence")
        ),
        "{sanity}"
    );
    assert_eq!(
        server.get_json("/api/v1/jobs/job-t/timeline?attempt=1"),
        (200, timeline)
    );

    let (status, explanation) = server.get_json("/api/v1/jobs/job-t/explain?attempt=1");
    assert_eq!(status, 200, "{explanation}");
    assert_eq!(explanation["first_error"]["node"], "n2");
    assert_eq!(explanation["lane"], "host");
    assert!(
        explanation["team"].as_str().unwrap().contains("host team"),
        "{explanation}"
    );
    let hypotheses = explanation["hypotheses"].as_array().unwrap();
    assert_eq!(hypotheses.len(), 6, "{explanation}");
    assert_eq!(
        (&hypotheses[1]["hypothesis"], &hypotheses[1]["conclusion"]),
        (&json!("host"), &json!("confirmed"))
    );

    // The bundle the page links to: whole, its manifest matching, the same answer, and
    // without the server's token.
    let (status, kind, bytes) = server.get_bytes("/api/v1/jobs/job-t/bundle?attempt=1");
    assert_eq!((status, kind.as_str()), (200, "application/gzip"));
    let bundle = gpuvet_bundle::read(bytes.as_slice(), &gpuvet_bundle::Limits::default())
        .expect("a bundle whose manifest matches");
    let explained: Value = bundle.json("explain.json").unwrap();
    assert_eq!(explained, explanation);
    for file in &bundle.files {
        assert!(
            !String::from_utf8_lossy(&file.bytes).contains(TOKEN),
            "{} holds the server's token",
            file.path
        );
    }
    let (_, record) = gpuvet_bundle::layout::unpack(bytes.as_slice()).unwrap();
    assert_eq!((record.job_id.as_str(), record.attempt), ("job-t", 1));

    let (status, page) = server.get("/jobs/job-t/timeline");
    assert_eq!(status, 200, "{page}");
    assert_eq!(page.matches("id=\"first-error\"").count(), 1, "{page}");
    let lanes: Vec<usize> = ["n2", "n1", "n0"]
        .iter()
        .map(|n| page.find(&format!("data-lane=\"{n}\"")).unwrap())
        .collect();
    assert!(lanes.is_sorted(), "the failing node first: {lanes:?}");
    assert!(
        page.contains("<a href=\"/instances/job-t/n2?attempt=1\">"),
        "{page}"
    );
    assert!(page.contains(
        "<a class=\"bundle\" href=\"/api/v1/jobs/job-t/bundle?attempt=1\" download>Download bundle</a>"
    ));
    assert_eq!(server.get("/jobs/job-t/timeline?attempt=1").1, page);
    // The job's and the instance's pages link to it.
    for path in ["/instances?job=job-t", "/instances/job-t/n0"] {
        let (status, linking) = server.get(path);
        assert_eq!(status, 200, "{path}");
        assert!(
            linking.contains("href=\"/jobs/job-t/timeline?attempt=1\">Timeline</a>"),
            "{path}: {linking}"
        );
        assert!(
            linking.contains("href=\"/api/v1/jobs/job-t/bundle?attempt=1\" download>"),
            "{path}: {linking}"
        );
    }

    // An attempt begun with nothing recorded yet has an empty timeline, and is latest.
    let begun = json!({"job_id": "job-t", "attempt": 2, "node": "n0", "instance": "pod-n0",
                       "started_at_ms": T0 + 60_000});
    assert_eq!(
        server
            .post("/api/v1/attempts", Some(TOKEN), &begun.to_string())
            .0,
        200
    );
    let (status, empty) = server.get_json("/api/v1/jobs/job-t/timeline");
    assert_eq!((status, &empty["attempt"]), (200, &json!(2)), "{empty}");
    assert_eq!(empty["entries"], json!([]));
    let (status, page) = server.get("/jobs/job-t/timeline");
    assert_eq!(status, 200);
    assert!(
        page.contains("Nothing was recorded for this attempt yet."),
        "{page}"
    );
    assert!(
        page.contains("<a href=\"/jobs/job-t/timeline?attempt=1\">1</a>"),
        "{page}"
    );

    for (path, message) in [
        ("/api/v1/jobs/nope/timeline", "no job `nope` in the store"),
        ("/api/v1/jobs/nope/explain", "no job `nope` in the store"),
        ("/api/v1/jobs/nope/bundle", "no job `nope` in the store"),
        (
            "/api/v1/jobs/job-t/timeline?attempt=5",
            "job `job-t` has no attempt 5; its latest is 2",
        ),
        (
            "/api/v1/jobs/job-t/explain?attempt=5",
            "job `job-t` has no attempt 5; its latest is 2",
        ),
    ] {
        let (status, body) = server.get_json(path);
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["message"], message, "{path}");
        assert!(body["error"]["hint"].is_string(), "{path}: {body}");
    }
    for (path, needle) in [
        ("/api/v1/jobs/job-t/timeline?attempt=0", "`attempt` is 0"),
        ("/api/v1/jobs/job-t/explain?attempt=0", "`attempt` is 0"),
        ("/api/v1/jobs/job-t/bundle?attempt=0", "`attempt` is 0"),
        ("/api/v1/jobs/job-t/timeline?attempt=x", "attempt"),
        ("/api/v1/jobs/job-t/explain?attempt=-1", "attempt"),
        (
            "/api/v1/jobs/job-t/timeline?colour=red",
            "unknown field `colour`",
        ),
    ] {
        let (status, body) = server.get_json(path);
        assert_eq!(status, 400, "{path}: {body}");
        let text = body["error"]["message"].as_str().unwrap();
        assert!(text.contains(needle), "{path}: {text}");
    }
    for (path, status, needle) in [
        ("/jobs/nope/timeline", 404, "no job `nope` in the store"),
        (
            "/jobs/job-t/timeline?attempt=5",
            404,
            "job `job-t` has no attempt 5; its latest is 2",
        ),
        ("/jobs/job-t/timeline?attempt=0", 400, "`attempt` is 0"),
        (
            "/jobs/job-t/timeline?attempt=x",
            400,
            "`attempt` is `x`, not a number",
        ),
    ] {
        let (got, body) = server.get(path);
        assert_eq!(got, status, "{path}: {body}");
        assert!(body.starts_with("<!DOCTYPE html>"), "{path}: {body}");
        let escaped = needle.replace('\'', "&#39;");
        assert!(body.contains(&escaped), "{path}: {body}");
    }
}

fn metrics_count_requests_by_route_and_the_openapi_document_lists_every_endpoint(backing: Backing) {
    let server = populated(backing);
    server.get("/api/v1/jobs/job-a");
    server.get("/api/v1/jobs/nope");
    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(
            "gpuvet_server_requests_total{method=\"GET\",route=\"/api/v1/jobs/{job}\",status=\"404\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("gpuvet_server_reports_accepted_total 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gpuvet_server_events_accepted_total 3"),
        "{metrics}"
    );

    let (status, document) = server.get_json("/api/v1/openapi.json");
    assert_eq!(status, 200);
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    let paths: BTreeMap<&str, Vec<&str>> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| {
            (
                path.as_str(),
                item.as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .collect(),
            )
        })
        .collect();
    let expected = BTreeMap::from([
        ("/api/v1/attempts", vec!["post"]),
        ("/api/v1/baselines", vec!["get"]),
        ("/api/v1/events", vec!["get", "post"]),
        ("/api/v1/health", vec!["get"]),
        ("/api/v1/jobs", vec!["get"]),
        ("/api/v1/jobs/{job}", vec!["get"]),
        ("/api/v1/jobs/{job}/attempts", vec!["get"]),
        ("/api/v1/jobs/{job}/instances", vec!["get"]),
        ("/api/v1/jobs/{job}/bundle", vec!["get"]),
        ("/api/v1/jobs/{job}/explain", vec!["get"]),
        ("/api/v1/jobs/{job}/instances/{node}", vec!["get"]),
        ("/api/v1/jobs/{job}/timeline", vec!["get"]),
        ("/api/v1/nodes", vec!["get"]),
        ("/api/v1/nodes/{node}", vec!["get"]),
        ("/api/v1/reports", vec!["post"]),
        ("/api/v1/results", vec!["get"]),
        ("/api/v1/runs", vec!["get"]),
        ("/api/v1/runs/{run_id}", vec!["get"]),
        ("/api/v1/session", vec!["post"]),
    ]);
    assert_eq!(paths, expected);
    // Every schema a response names is in the document.
    let text = document.to_string();
    for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = reference.split('"').next().unwrap();
        assert!(
            document["components"]["schemas"].get(name).is_some(),
            "`{name}` is referenced but not defined"
        );
    }
}

/// The reads of a guarded server the tests knock on: the API, a page, `/metrics`, and
/// addresses no route has.
const GUARDED_READS: [&str; 9] = [
    "/api/v1/jobs",
    "/api/v1/jobs/job-a/timeline",
    "/api/v1/events",
    "/api/v1/jobs/job-a/bundle",
    "/",
    "/instances/job-a/n0",
    "/metrics",
    "/no-such-page",
    "/api/v1/no-such-endpoint",
];

/// job-a as [`populated`] pushes it, to a server whose reads need [`READ_TOKEN`].
fn populated_guarded(backing: Backing) -> Running {
    let server = Running::start_guarded(backing, Some(TOKEN), Some(READ_TOKEN));
    let n0 = attempt("job-a", "n0", 1);
    // Pushes carry the write token only.
    assert_eq!(push_report(&server, &report(&n0, "r-n0-1", true)).0, 200);
    let n1 = attempt("job-a", "n1", 1);
    assert_eq!(push_report(&server, &report(&n1, "r-n1-1", false)).0, 200);
    let (status, answer) = push_event(
        &server,
        &event(&n0, "e-1", 1_700_000_000_100, EventKind::SanityCheckFailed),
    );
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = server.post(
        "/api/v1/attempts",
        Some(TOKEN),
        &json!({"job_id": "job-a", "attempt": 2, "node": "n0", "instance": "pod-n0", "started_at_ms": 1_700_000_001_000_u64}).to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    server
}

fn reads_need_the_read_token_and_pushes_do_not(backing: Backing) {
    let server = populated_guarded(backing);
    assert_eq!(
        server.store().jobs().unwrap().len(),
        1,
        "pushes were stored"
    );
    let bearer = |token: &str| format!("Bearer {token}");
    for path in GUARDED_READS {
        let is_api = path.starts_with("/api/") || path == "/metrics";
        for (authorization, needle) in [
            (
                None,
                "needs its read token in an `Authorization: Bearer` header",
            ),
            (
                Some(bearer("wrong")),
                "the read token does not match the server's",
            ),
            // The write token grants no reads.
            (
                Some(bearer(TOKEN)),
                "the read token does not match the server's",
            ),
            (Some(format!("Basic {READ_TOKEN}")), "needs its read token"),
        ] {
            let headers: Vec<(&str, &str)> = authorization
                .iter()
                .map(|value| ("authorization", value.as_str()))
                .collect();
            let reply = server.request("GET", path, &headers);
            assert_eq!(
                reply.status, 401,
                "{path} {authorization:?}: {}",
                reply.body
            );
            assert_eq!(
                reply.header("www-authenticate"),
                "Bearer realm=\"gpuvet\"",
                "{path}"
            );
            assert_eq!(reply.header("referrer-policy"), "no-referrer", "{path}");
            assert!(!reply.body.contains(READ_TOKEN), "{path}: {}", reply.body);
            if is_api {
                let error = reply.json();
                assert_eq!(error["error"]["status"], 401, "{path}");
                assert!(
                    error["error"]["message"].as_str().unwrap().contains(needle),
                    "{path}: {error}"
                );
                assert!(
                    error["error"]["hint"]
                        .as_str()
                        .unwrap()
                        .contains("GPUVET_READ_TOKEN"),
                    "{path}: {error}"
                );
            } else {
                assert!(
                    reply.body.starts_with("<!DOCTYPE html>"),
                    "{path}: {}",
                    reply.body
                );
                assert!(
                    reply.body.contains("Sign-in needed"),
                    "{path}: {}",
                    reply.body
                );
                assert!(
                    reply.body.contains("/api/v1/session"),
                    "{path}: {}",
                    reply.body
                );
            }
        }
        let reply = server.request("GET", path, &[("authorization", &bearer(READ_TOKEN))]);
        let expected = if path.contains("no-such") { 404 } else { 200 };
        assert_eq!(
            reply.status, expected,
            "{path} with the read token: {}",
            reply.body
        );
        assert_eq!(reply.header("referrer-policy"), "no-referrer", "{path}");
    }
    // The job's data, read with the token.
    let reply = server.request("GET", "/", &[("authorization", &bearer(READ_TOKEN))]);
    assert!(reply.body.contains("data-node=\"n0\""), "{}", reply.body);
    let reply = server.request("GET", "/metrics", &[("authorization", &bearer(READ_TOKEN))]);
    assert!(
        reply
            .body
            .contains("route=\"/api/v1/jobs\",status=\"401\"} 4"),
        "refused reads are counted: {}",
        reply.body
    );

    // Open whatever the token: the health check and the API's document.
    for path in ["/api/v1/health", "/api/v1/openapi.json"] {
        let reply = server.request("GET", path, &[]);
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    }
    // A push with the write token, and no read token, is still taken.
    let n1 = attempt("job-a", "n1", 2);
    assert_eq!(push_report(&server, &report(&n1, "r-n1-2", false)).0, 200);
    // A push without the write token is refused for that, not for the read token.
    let (status, answer) = server.post(
        "/api/v1/reports",
        Some(READ_TOKEN),
        &serde_json::to_string(&report(&n1, "r-n1-3", false)).unwrap(),
    );
    assert_eq!(status, 401);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the token does not match"),
        "{answer}"
    );
}

/// The value the `Set-Cookie` of `reply` gives the session cookie, and its attributes.
fn session_cookie(reply: &Reply) -> (String, String) {
    let set = reply.header("set-cookie");
    let (pair, attributes) = set
        .split_once(';')
        .unwrap_or_else(|| panic!("no cookie: {set}"));
    let value = pair
        .strip_prefix("gpuvet_session=")
        .unwrap_or_else(|| panic!("not the session cookie: {set}"));
    (value.to_owned(), attributes.trim().to_owned())
}

fn a_one_time_link_signs_a_browser_in_once_and_its_cookie_grants_the_reads(backing: Backing) {
    let server = populated_guarded(backing);
    let read = format!("Bearer {READ_TOKEN}");
    let write = format!("Bearer {TOKEN}");

    // Only the read token itself makes a link.
    for headers in [vec![], vec![("authorization", write.as_str())]] {
        let reply = server.request("POST", "/api/v1/session", &headers);
        assert_eq!(reply.status, 401, "{headers:?}: {}", reply.body);
    }
    let reply = server.request("POST", "/api/v1/session", &[("authorization", &read)]);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("cache-control"), "no-store");
    let link = reply.json();
    assert_eq!(link["expires_in_secs"], 60);
    let path = link["path"].as_str().unwrap().to_owned();
    assert!(path.starts_with("/session/"), "{path}");
    assert!(!path.contains(READ_TOKEN), "the token is in no URL: {path}");

    // Opening it signs in: a cookie no script reads and no other site sends, then `/`.
    let opened = server.request("GET", &path, &[]);
    assert_eq!(opened.status, 200, "{}", opened.body);
    let (cookie, attributes) = session_cookie(&opened);
    assert!(!cookie.contains(READ_TOKEN), "{cookie}");
    assert!(!cookie.is_empty());
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"] {
        assert!(
            attributes.split("; ").any(|a| a == attribute),
            "{attribute}: {attributes}"
        );
    }
    assert_eq!(opened.header("referrer-policy"), "no-referrer");
    assert_eq!(opened.header("cache-control"), "no-store");
    assert!(
        opened
            .body
            .contains("<meta http-equiv=\"refresh\" content=\"0; url=/\">"),
        "{}",
        opened.body
    );
    assert!(!opened.body.contains(READ_TOKEN));

    // Once only.
    let again = server.request("GET", &path, &[]);
    assert_eq!(again.status, 401, "{}", again.body);
    assert!(again.body.contains("used already"), "{}", again.body);
    assert!(again.header("set-cookie").is_empty());

    // The cookie grants the pages, the API they link to (the bundle, the live
    // refresh) and `/metrics`.
    let with_cookie = format!("gpuvet_session={cookie}");
    for path in GUARDED_READS {
        let reply = server.request("GET", path, &[("cookie", &with_cookie)]);
        let expected = if path.contains("no-such") { 404 } else { 200 };
        assert_eq!(
            reply.status, expected,
            "{path} with the cookie: {}",
            reply.body
        );
    }
    let page = server.request("GET", "/instances/job-a/n0", &[("cookie", &with_cookie)]);
    assert!(page.body.contains("n0"), "{}", page.body);
    assert!(!page.body.contains(READ_TOKEN), "{}", page.body);

    // A cookie that is not the server's, and a session that makes no links.
    let forged = format!("gpuvet_session={}0", &cookie[..cookie.len() - 1]);
    let forged = if forged == with_cookie {
        format!("gpuvet_session={}1", &cookie[..cookie.len() - 1])
    } else {
        forged
    };
    let reply = server.request("GET", "/", &[("cookie", &forged)]);
    assert_eq!(reply.status, 401);
    assert!(reply.body.contains("session has ended"), "{}", reply.body);
    let reply = server.request("GET", "/api/v1/jobs", &[("cookie", &forged)]);
    assert_eq!(reply.status, 401);
    let reply = server.request("POST", "/api/v1/session", &[("cookie", &with_cookie)]);
    assert_eq!(reply.status, 401, "{}", reply.body);

    // Not a link of this server.
    let reply = server.request("GET", "/session/1.2.3", &[]);
    assert_eq!(reply.status, 401);
    assert!(
        reply.body.contains("no sign-in link of this server"),
        "{}",
        reply.body
    );
}

fn a_server_without_a_read_token_has_open_reads_and_no_sign_in(backing: Backing) {
    let server = populated(backing);
    for path in GUARDED_READS {
        let reply = server.request("GET", path, &[]);
        let expected = if path.contains("no-such") { 404 } else { 200 };
        assert_eq!(reply.status, expected, "{path}: {}", reply.body);
        assert_eq!(reply.header("referrer-policy"), "no-referrer", "{path}");
    }
    let reply = server.request(
        "POST",
        "/api/v1/session",
        &[("authorization", &format!("Bearer {READ_TOKEN}"))],
    );
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert!(
        reply.json()["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("GPUVET_READ_TOKEN")
    );
    assert_eq!(server.request("GET", "/session/1.2.3", &[]).status, 404);
}

/// Each operation of `document`: (method, path) → the schemes its `security` names.
fn security_of(document: &Value) -> BTreeMap<(String, String), Vec<String>> {
    let mut out = BTreeMap::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let schemes = operation["security"]
                .as_array()
                .map(|all| {
                    all.iter()
                        .flat_map(|one| one.as_object().unwrap().keys().cloned())
                        .collect()
                })
                .unwrap_or_default();
            out.insert((method.clone(), path.clone()), schemes);
        }
    }
    out
}

fn the_openapi_document_names_the_read_token_on_the_reads_of_a_guarded_server(backing: Backing) {
    let guarded = Running::start_guarded(backing, Some(TOKEN), Some(READ_TOKEN));
    let document = guarded.request("GET", "/api/v1/openapi.json", &[]).json();
    let schemes = &document["components"]["securitySchemes"];
    assert_eq!(schemes["read_token"]["scheme"], "bearer");
    assert!(
        schemes["read_token"]["description"]
            .as_str()
            .unwrap()
            .contains("GPUVET_READ_TOKEN")
    );
    assert_eq!(schemes["token"]["scheme"], "bearer");
    for ((method, path), named) in security_of(&document) {
        let expected: Vec<&str> = match (method.as_str(), path.as_str()) {
            (_, "/api/v1/health") => vec![],
            ("post", "/api/v1/reports" | "/api/v1/events" | "/api/v1/attempts") => vec!["token"],
            _ => vec!["read_token"],
        };
        assert_eq!(named, expected, "{method} {path}");
        let unauthorized = &document["paths"][&path][&method]["responses"]["401"];
        assert_eq!(
            unauthorized.is_null(),
            expected.is_empty(),
            "{method} {path}: {unauthorized}"
        );
    }

    // An open server's document names no read token: every read and the sign-in
    // (which answers 404 there) need none.
    let open = Running::start(Backing::Sqlite(tempfile::tempdir().unwrap()), Some(TOKEN));
    let document = open.request("GET", "/api/v1/openapi.json", &[]).json();
    for ((method, path), named) in security_of(&document) {
        let names_read_token = named.iter().any(|n| n == "read_token");
        assert!(!names_read_token, "{method} {path}: {named:?}");
        let unauthorized = &document["paths"][&path][&method]["responses"]["401"];
        assert_eq!(unauthorized.is_null(), named.is_empty(), "{method} {path}");
    }
}

// Group commit: pushes share transactions, and are answered once theirs committed.

/// The answers to the pushes behind a held lock: the blockers', the batch's, and how
/// many transactions committed.
type HeldLockAnswers = (Vec<(u16, Value)>, Vec<(u16, Value)>, u64);

/// Pushes `blockers` (one per writer task of the server) and then `batch`, with the
/// store's write lock held: each blocker waits in a transaction of its own, so that
/// `batch` queues whole, and goes into the one transaction after them once the lock is
/// let go. Returns the answers in order, and how many transactions committed.
fn push_behind_held_lock(
    server: &Running,
    blockers: &[RunReport],
    batch: &[RunReport],
) -> HeldLockAnswers {
    let tasks = StorePool::new(server.location.clone())
        .unwrap()
        .writer_tasks();
    assert_eq!(blockers.len(), tasks, "one blocker per writer task");
    let committed_before = server.metric("gpuvet_server_write_transactions_total");
    let release = server.hold_write_lock();
    std::thread::scope(|scope| {
        let mut first = Vec::new();
        for (taken, report) in blockers.iter().enumerate() {
            first.push(scope.spawn(move || push_report(server, report)));
            server.wait_for_metric("gpuvet_server_pushes_storing", taken as u64 + 1);
        }
        let rest: Vec<_> = batch
            .iter()
            .map(|report| scope.spawn(move || push_report(server, report)))
            .collect();
        server.wait_for_metric("gpuvet_server_pushes_waiting", batch.len() as u64);
        release();
        let first = first.into_iter().map(|t| t.join().unwrap()).collect();
        let rest = rest.into_iter().map(|t| t.join().unwrap()).collect();
        let committed = server.metric("gpuvet_server_write_transactions_total") - committed_before;
        (first, rest, committed)
    })
}

/// The ids of the reports the store holds, in order.
fn stored_report_ids(server: &Running) -> Vec<String> {
    let store = server.store();
    let mut ids: Vec<String> = store
        .runs(&gpuvet_store::RunFilter::default())
        .unwrap()
        .into_iter()
        .map(|run| store.run(run.run.run_id).unwrap().unwrap().1.report_id)
        .collect();
    ids.sort();
    ids
}

fn concurrent_pushes_with_repeats_are_each_answered_and_stored_once(backing: Backing) {
    const CLIENTS: usize = 64;
    let server = Running::start(backing, Some(TOKEN));
    let earlier = report(&attempt("job-c", "n-earlier", 1), "r-earlier", false);
    assert_eq!(push_report(&server, &earlier).0, 200);
    let mut conflicting = earlier.clone();
    conflicting.duration_secs += 1.0;

    // Two clients send each attempt, report and event (a retry racing the first
    // send), and every 16th client also a report under a stored id with other content.
    let barrier = std::sync::Barrier::new(CLIENTS);
    let answers: Vec<(usize, Vec<(u16, Value)>)> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let (server, barrier, conflicting) = (&server, &barrier, &conflicting);
                scope.spawn(move || {
                    let node = client % (CLIENTS / 2);
                    let own = attempt("job-c", &format!("n{node:02}"), 1);
                    let start = AttemptStart {
                        attempt: own.clone(),
                        started_at_ms: 1_000 + node as u64,
                    };
                    let sent = report(&own, &format!("r-{node:02}"), node.is_multiple_of(3));
                    let record = event(
                        &own,
                        &format!("e-{node:02}"),
                        2_000 + node as u64,
                        EventKind::SanityCheckFailed,
                    );
                    barrier.wait();
                    let mut answers = vec![
                        server.post(
                            "/api/v1/attempts",
                            Some(TOKEN),
                            &serde_json::to_string(&start).unwrap(),
                        ),
                        push_report(server, &sent),
                        push_event(server, &record),
                    ];
                    if client % 16 == 0 {
                        answers.push(push_report(server, conflicting));
                    }
                    (node, answers)
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).collect()
    });

    let mut run_ids = BTreeMap::new();
    let mut event_ids = BTreeMap::new();
    for (node, answers) in &answers {
        for (status, body) in &answers[..3] {
            assert_eq!(*status, 200, "node {node}: {body}");
        }
        // Both senders of one report or event were answered with the same row.
        let run = answers[1].1["run_id"].as_i64().unwrap();
        assert_eq!(*run_ids.entry(node).or_insert(run), run, "node {node}");
        let id = answers[2].1["id"].as_i64().unwrap();
        assert_eq!(*event_ids.entry(node).or_insert(id), id, "node {node}");
        if let Some((status, body)) = answers.get(3) {
            assert_eq!(*status, 409, "{body}");
        }
    }
    assert_eq!(answers.iter().filter(|(_, a)| a.len() == 4).count(), 4);
    let distinct: std::collections::BTreeSet<_> = run_ids.values().collect();
    assert_eq!(distinct.len(), CLIENTS / 2);

    // Each stored once: 32 reports and the earlier one, 32 events, 33 attempts.
    let mut expected: Vec<String> = (0..CLIENTS / 2).map(|n| format!("r-{n:02}")).collect();
    expected.push("r-earlier".to_owned());
    assert_eq!(stored_report_ids(&server), expected);
    let store = server.store();
    assert_eq!(
        store
            .count_events(&gpuvet_store::EventFilter::default())
            .unwrap(),
        (CLIENTS / 2) as u64
    );
    let instances = store.instances("job-c", None).unwrap();
    assert_eq!(instances.len(), CLIENTS / 2 + 1);
    // A pushed attempt keeps the start time it was pushed with, not its report's.
    let n05 = instances.iter().find(|i| i.attempt.node == "n05").unwrap();
    assert_eq!(n05.attempt_started_at_ms, 1_005);
    assert_eq!(store.reports("job-c", 1).unwrap().len(), CLIENTS / 2 + 1);
    assert!(
        store
            .reports("job-c", 1)
            .unwrap()
            .iter()
            .all(|r| r.report_id != "r-earlier" || *r == earlier)
    );
}

fn pushes_queued_while_a_transaction_runs_share_the_next_one(backing: Backing) {
    let server = Running::start(backing, Some(TOKEN));
    let tasks = StorePool::new(server.location.clone())
        .unwrap()
        .writer_tasks();
    let blockers: Vec<RunReport> = (0..tasks)
        .map(|i| {
            report(
                &attempt("job-q", &format!("b{i}"), 1),
                &format!("r-b{i}"),
                false,
            )
        })
        .collect();
    // Ten pushes, one of them twice.
    let mut batch: Vec<RunReport> = (0..9)
        .map(|i| {
            report(
                &attempt("job-q", &format!("n{i}"), 1),
                &format!("r-n{i}"),
                false,
            )
        })
        .collect();
    batch.push(batch[4].clone());

    let (first, rest, committed) = push_behind_held_lock(&server, &blockers, &batch);
    for (status, body) in first.iter().chain(&rest) {
        assert_eq!(*status, 200, "{body}");
    }
    assert_eq!(rest[4].1["run_id"], rest[9].1["run_id"]);
    // One transaction per blocker, and one for all ten queued behind them.
    assert_eq!(committed, tasks as u64 + 1);
    assert_eq!(stored_report_ids(&server).len(), tasks + 9);
    assert_eq!(server.metric("gpuvet_server_pushes_waiting"), 0);
    assert_eq!(server.metric("gpuvet_server_pushes_storing"), 0);
}

fn a_push_is_answered_only_once_its_transaction_committed(backing: Backing) {
    let server = Running::start(backing, Some(TOKEN));
    // Every statement of a report `doomed-…` succeeds; the commit of its transaction
    // fails (a deferred foreign key on SQLite, a deferred trigger on PostgreSQL).
    server.execute(
        "CREATE TABLE commit_guard (
             attempt_id INTEGER REFERENCES attempts (id) DEFERRABLE INITIALLY DEFERRED);
         CREATE TRIGGER refuse_commit AFTER INSERT ON runs
         WHEN NEW.report_id LIKE 'doomed-%'
         BEGIN INSERT INTO commit_guard VALUES (-1); END;",
        "CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql
         AS $$ BEGIN RAISE EXCEPTION 'commit refused by test'; END $$;
         CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON runs
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
         WHEN (NEW.report_id LIKE 'doomed-%') EXECUTE FUNCTION refuse_commit();",
    );
    let tasks = StorePool::new(server.location.clone())
        .unwrap()
        .writer_tasks();
    let blockers: Vec<RunReport> = (0..tasks)
        .map(|i| {
            report(
                &attempt("job-d", &format!("b{i}"), 1),
                &format!("r-b{i}"),
                false,
            )
        })
        .collect();
    let batch: Vec<RunReport> = ["r-n0", "doomed-1", "r-n2", "doomed-3", "r-n4"]
        .iter()
        .enumerate()
        .map(|(i, id)| report(&attempt("job-d", &format!("n{i}"), 1), id, i == 2))
        .collect();

    let (first, rest, committed) = push_behind_held_lock(&server, &blockers, &batch);
    for (status, body) in &first {
        assert_eq!(*status, 200, "{body}");
    }
    // Every push of the failed transaction is answered with its error, the innocent
    // ones too, and none of it was stored.
    for (status, body) in &rest {
        assert_eq!(*status, 500, "{body}");
        let hint = body["error"]["hint"].as_str().unwrap();
        assert!(hint.contains("nothing of this push was stored"), "{hint}");
    }
    assert_eq!(committed, tasks as u64);
    let blocker_ids: Vec<String> = blockers.iter().map(|r| r.report_id.clone()).collect();
    assert_eq!(stored_report_ids(&server), blocker_ids);
    assert!(
        server
            .store()
            .instances("job-d", None)
            .unwrap()
            .iter()
            .all(|i| i.attempt.node.starts_with('b')),
        "no attempt of the failed transaction"
    );

    // Sent again without the doomed ones, they are stored.
    for report in batch.iter().filter(|r| !r.report_id.starts_with("doomed")) {
        let (status, body) = push_report(&server, report);
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(stored_report_ids(&server).len(), tasks + 3);
}

/// Each test above, once on SQLite and once on PostgreSQL.
/// An XID on GPU 3 of `attempt`, as the runtime check pushes it: its message counts
/// the sightings, so repeats differ by their message.
fn xid(attempt: &Attempt, id: &str, time_ms: u64, seen: u64) -> EventRecord {
    EventRecord {
        attempt: attempt.clone(),
        event: NewEvent {
            event_id: id.to_owned(),
            time_ms,
            kind: EventKind::RuntimeCheckFailed,
            lane: Some(Lane::Host),
            message: format!("xid 79 on gpu 3, seen {seen} times"),
            details: json!({ "source": "kmsg", "check": "xid", "gpu": { "index": 3 }, "xid": 79 }),
        },
    }
}

fn repeats_of_a_pushed_event_are_counted_once_each_and_read_back_with_their_count(
    backing: Backing,
) {
    let server = Running::start(backing, Some(TOKEN));
    let n0 = attempt("job-f", "n0", 1);
    let t0 = 1_796_011_500_000;
    let start = AttemptStart {
        attempt: n0.clone(),
        started_at_ms: t0 - 1_000,
    };
    let (status, body) = server.post(
        "/api/v1/attempts",
        Some(TOKEN),
        &serde_json::to_string(&start).unwrap(),
    );
    assert_eq!(status, 200, "{body}");
    let mut row = None;
    for i in 0..5u64 {
        let (status, body) =
            push_event(&server, &xid(&n0, &format!("x-{i}"), t0 + i * 1_000, i + 1));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["count"], i + 1, "{body}");
        assert_eq!(body["event_id"], format!("x-{i}"));
        // Every repeat answers with the first one's row.
        assert_eq!(*row.get_or_insert(body["id"].clone()), body["id"]);
    }
    // A repeat sent again (its answer was lost) is counted once.
    let (status, again) = push_event(&server, &xid(&n0, "x-3", t0 + 3_000, 4));
    assert_eq!((status, again["count"].as_u64()), (200, Some(5)), "{again}");
    // Another GPU's XID is an event of its own.
    let mut other = xid(&n0, "y-0", t0 + 500, 1);
    other.event.details["gpu"]["index"] = json!(4);
    let (_, other) = push_event(&server, &other);
    assert_eq!(other["count"], 1);
    assert_ne!(other["id"], row.clone().unwrap());

    let (status, events) = server.get_json("/api/v1/events?job=job-f");
    assert_eq!(status, 200);
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    let counted = &events[0];
    assert_eq!(counted["event_id"], "x-0");
    assert_eq!(counted["time_ms"], t0);
    assert_eq!(counted["count"], 5);
    assert_eq!(counted["last_seen_ms"], t0 + 4_000);
    assert_eq!(counted["message"], "xid 79 on gpu 3, seen 5 times");
    assert_eq!(events[1]["count"], 1);
    assert!(events[1].get("last_seen_ms").is_none(), "{}", events[1]);
    assert_eq!(server.metric("gpuvet_server_events_folded_total"), 5);

    let (status, page) = server.get("/events?job=job-f");
    assert_eq!(status, 200);
    assert!(
        page.contains("<span class=\"repeats\">×5, last 2026-11-30T04:05:04.000Z</span>"),
        "{page}"
    );
    let (status, timeline) = server.get_json("/api/v1/jobs/job-f/timeline");
    assert_eq!(status, 200);
    assert!(
        timeline
            .to_string()
            .contains("(×5, last 2026-11-30T04:05:04.000Z)"),
        "{timeline}"
    );
    let (_, page) = server.get("/jobs/job-f/timeline");
    assert!(page.contains("×5, last 2026-11-30T04:05:04.000Z"), "{page}");
}

/// What a node of an older gpuvet may push unredacted (a context's config, path and
/// environment, an event's message and details, the server's own tokens) is stored
/// redacted, and pushing the same report again is still the same report.
fn what_nodes_push_is_redacted_again_with_the_servers_own_tokens(backing: Backing) {
    let server = Running::start_guarded(backing, Some(TOKEN), Some(READ_TOKEN));
    let n0 = attempt("job-r", "n0", 1);
    let mut sent = report(&n0, "r-secret", false);
    sent.context = Some(gpuvet_model::results::RunContext {
        config_file: Some("/etc/gpuvet/HF_TOKEN=hf_abcdefghijklmnopqrstuv.json".to_owned()),
        config: json!({ "db": { "password": "hunter2-very-secret" }, "note": "kept" }),
        environment: BTreeMap::from([
            (
                "HF_TOKEN".to_owned(),
                "hf_abcdefghijklmnopqrstuv".to_owned(),
            ),
            ("NCCL_DEBUG".to_owned(), "INFO".to_owned()),
            (
                "GPUVET_EXTRA".to_owned(),
                format!("x {TOKEN} {READ_TOKEN} y"),
            ),
        ]),
        slurm: None,
    });
    let (status, answer) = push_report(&server, &sent);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        push_report(&server, &sent).0,
        200,
        "sent again: the same report"
    );
    let mut record = event(&n0, "e-secret", 7, EventKind::InstanceStarted);
    record.event.message = "curl -u admin:hunter2-very-secret https://x".to_owned();
    record.event.details = json!({ "command": ["mysql", "-phunter2-very-secret"] });
    assert_eq!(push_event(&server, &record).0, 200);

    let store = server.store();
    let stored = serde_json::to_string(&store.reports("job-r", 1).unwrap()).unwrap()
        + &serde_json::to_string(&store.events(&Default::default()).unwrap()).unwrap();
    for secret in ["hunter2", "hf_abcdefghijklmnopqrstuv", TOKEN, READ_TOKEN] {
        assert!(!stored.contains(secret), "`{secret}` was stored: {stored}");
    }
    for kept in [
        "NCCL_DEBUG",
        "INFO",
        "\"note\":\"kept\"",
        "HF_TOKEN",
        "curl -u admin:",
    ] {
        assert!(stored.contains(kept), "`{kept}` is gone: {stored}");
    }
}

macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(super::Backing::Sqlite(tempfile::tempdir().unwrap()));
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                #[ignore = "needs PostgreSQL: set GPUVET_TEST_POSTGRES_URL"]
                fn $name() {
                    super::$name(super::Backing::Postgres(gpuvet_testkit::postgres::TestDatabase::create()));
                }
            )*
        }
    };
}

on_both_stores!(
    the_fleet_baselines_are_learned_from_the_pushed_reports,
    nodes_rank_by_failures_and_a_nodes_history_reads_back,
    jobs_attempts_and_instances_read_back_and_unknown_ones_are_404,
    runs_results_and_events_filter_and_bad_filters_are_400,
    a_push_needs_the_token_and_is_stored_once_under_its_id,
    a_server_without_a_token_refuses_writes_and_still_serves_reads,
    pages_show_instances_the_failed_instance_and_filtered_events,
    a_pushed_attempt_shows_as_running_with_the_live_refresh_until_its_report_arrives,
    metrics_count_requests_by_route_and_the_openapi_document_lists_every_endpoint,
    the_timeline_page_and_api_name_an_attempts_first_error_and_unknown_ones_are_404,
    reads_need_the_read_token_and_pushes_do_not,
    a_one_time_link_signs_a_browser_in_once_and_its_cookie_grants_the_reads,
    a_server_without_a_read_token_has_open_reads_and_no_sign_in,
    the_openapi_document_names_the_read_token_on_the_reads_of_a_guarded_server,
    concurrent_pushes_with_repeats_are_each_answered_and_stored_once,
    pushes_queued_while_a_transaction_runs_share_the_next_one,
    a_push_is_answered_only_once_its_transaction_committed,
    repeats_of_a_pushed_event_are_counted_once_each_and_read_back_with_their_count,
    what_nodes_push_is_redacted_again_with_the_servers_own_tokens,
);
