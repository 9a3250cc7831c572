//! How `gpuvet serve` holds up: 64 clients push 1,000 reports at once (each report
//! stored once, even when every one is sent twice), and the pages of a 1,024-node job
//! render. `cargo run --release -p gpuvet-server --example serve_load [--store S]...`.
//!
//! Each `--store` is served in turn, in this process, on a loopback port: `sqlite` (the
//! default) a fresh SQLite store in a temp directory, a path an SQLite file, and
//! `postgres://…` a PostgreSQL database, which must be empty. The clients are real HTTP
//! clients on their own threads. Each figure is printed beside a reference taken in
//! the same run, since this machine's speed varies: recording the same report
//! straight into an SQLite store, without HTTP, and `GET /api/v1/health`; a summary of
//! every store ends the run. The figures are in docs/benchmarks.md.

#[path = "../../gpuvet-html/tests/support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use gpuvet_model::events::Attempt;
use gpuvet_model::results::RunReport;
use gpuvet_server::Server;
use gpuvet_server::pool::StorePool;
use gpuvet_store::{Store, StoreLocation};

const CLIENTS: usize = 64;
const REPORTS: usize = 1_000;
const PAGE_RUNS: usize = 21;
const TOKEN: &str = "bench";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// Report `i` of the load: one node of 8 GPUs, its own node name and id.
fn load_report(i: usize) -> RunReport {
    let node = format!("node-{i:04}");
    let mut report = support::one_node_report(&node);
    report.job_id = "job-load".to_owned();
    report.attempt = 1;
    report.report_id = format!("{:032x}", i + 1);
    report
}

fn attempt_of(report: &RunReport) -> Attempt {
    Attempt {
        job_id: report.job_id.clone(),
        attempt: report.attempt,
        node: report.node.clone(),
        instance: report.instance.clone(),
    }
}

fn post(agent: &ureq::Agent, url: &str, body: &str) -> (u16, f64) {
    let start = Instant::now();
    let mut response = agent
        .post(url)
        .header("content-type", "application/json")
        .header("authorization", &format!("Bearer {TOKEN}"))
        .send(body)
        .expect("a reply");
    let _ = response.body_mut().read_to_string();
    (
        response.status().as_u16(),
        start.elapsed().as_secs_f64() * 1000.0,
    )
}

/// Median milliseconds of `GET url` over [`PAGE_RUNS`] tries, and the page's size.
fn time_get(url: &str) -> (f64, usize) {
    let agent = agent();
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..PAGE_RUNS {
        let start = Instant::now();
        let mut response = agent.get(url).call().expect("a reply");
        assert_eq!(response.status().as_u16(), 200, "{url}");
        bytes = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .unwrap()
            .len();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    (times[PAGE_RUNS / 2], bytes)
}

/// What one store's push load measured, for the summary.
struct PushFigures {
    store: String,
    wall_s: f64,
    p50: f64,
    p99: f64,
    max: f64,
    transactions: Option<u64>,
    direct_ms: f64,
}

/// A counter of the server's `/metrics`; `None` when it has none of that name.
fn metric(base: &str, name: &str) -> Option<u64> {
    let mut response = agent().get(&format!("{base}/metrics")).call().ok()?;
    let text = response.body_mut().read_to_string().ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

// A benchmark's output is its result.
#[allow(clippy::print_stdout)]
fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        assert_eq!(
            arg, "--store",
            "usage: serve_load [--store sqlite|PATH|postgres://…]..."
        );
        stores.push(
            args.next()
                .expect("--store takes `sqlite`, a path or a URL"),
        );
    }
    if stores.is_empty() {
        stores.push("sqlite".to_owned());
    }
    let mut figures = Vec::new();
    for (i, store) in stores.iter().enumerate() {
        let location = match store.as_str() {
            "sqlite" => StoreLocation::Sqlite(dir.path().join(format!("server-{i}.db"))),
            other => StoreLocation::parse(other),
        };
        figures.push(load_one_store(
            &location,
            &dir.path().join(format!("direct-{i}.db")),
        ));
    }
    println!("summary (ratios against the same run's straight-into-SQLite reference):");
    println!(
        "  store         wall     req/s   p50 ms  p99 ms  max ms  pushes/tx  p50/ref  p99/ref"
    );
    for f in &figures {
        let requests = (REPORTS * 2) as f64;
        let per_tx = f.transactions.map_or("-".to_owned(), |t| {
            format!("{:.1}", requests / t.max(1) as f64)
        });
        println!(
            "  {:<12} {:>5.2} s {:>8.0} {:>8.1} {:>7.1} {:>7.1} {:>10} {:>8.0} {:>8.0}",
            f.store,
            f.wall_s,
            requests / f.wall_s,
            f.p50,
            f.p99,
            f.max,
            per_tx,
            f.p50 / f.direct_ms,
            f.p99 / f.direct_ms,
        );
    }
}

/// Serves `location`, pushes the load and the 1,024-node job, and times the pages.
#[allow(clippy::print_stdout)]
fn load_one_store(location: &StoreLocation, direct_path: &std::path::Path) -> PushFigures {
    let pool = StorePool::new(location.clone()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            pool,
            Some(TOKEN.into()),
        ))
        .unwrap();
    let addr = server.local_addr().unwrap();
    runtime.spawn(server.run(std::future::pending()));
    let base = format!("http://{addr}");

    // Reference: the same reports straight into a store of their own, one by one.
    let reports: Vec<RunReport> = (0..REPORTS).map(load_report).collect();
    let bodies: Vec<String> = reports
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    let mut direct = Store::open(direct_path).unwrap();
    let start = Instant::now();
    for report in &reports {
        direct.record_report(&attempt_of(report), report).unwrap();
    }
    let direct_ms = start.elapsed().as_secs_f64() * 1000.0 / REPORTS as f64;

    // The load: CLIENTS threads take reports from one queue; every report is sent
    // twice (the second as a retry after a lost reply would be).
    let transactions_before = metric(&base, "gpuvet_server_write_transactions_total");
    let queue = Arc::new(Mutex::new((0..REPORTS * 2).rev().collect::<Vec<usize>>()));
    let bodies = Arc::new(bodies);
    let url = format!("{base}/api/v1/reports");
    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (queue, bodies, url) = (Arc::clone(&queue), Arc::clone(&bodies), url.clone());
            std::thread::spawn(move || {
                let agent = agent();
                let mut latencies = Vec::new();
                loop {
                    let Some(next) = queue.lock().unwrap().pop() else {
                        return latencies;
                    };
                    let (status, ms) = post(&agent, &url, &bodies[next % REPORTS]);
                    assert_eq!(status, 200, "report {next}");
                    latencies.push(ms);
                }
            })
        })
        .collect();
    let mut latencies: Vec<f64> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let wall = start.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let transactions = metric(&base, "gpuvet_server_write_transactions_total")
        .zip(transactions_before)
        .map(|(after, before)| after - before);
    let stored = Store::open_location(location)
        .unwrap()
        .runs(&gpuvet_store::RunFilter::default())
        .unwrap()
        .len();
    let (health_ms, _) = time_get(&format!("{base}/api/v1/health"));
    let p50 = percentile(&latencies, 0.50);
    let p99 = percentile(&latencies, 0.99);
    let max = latencies[latencies.len() - 1];
    println!("store: {location}");
    println!(
        "push: {CLIENTS} clients, {REPORTS} reports each sent twice ({} requests) in {wall:.2} s ({:.0} a second); stored {stored} (expected {REPORTS})",
        latencies.len(),
        latencies.len() as f64 / wall,
    );
    println!("  latency p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms");
    if let Some(transactions) = transactions {
        println!(
            "  {transactions} write transactions, {:.1} pushes each",
            latencies.len() as f64 / transactions.max(1) as f64
        );
    }
    println!(
        "  reference: one report straight into an SQLite store, no HTTP, {direct_ms:.2} ms (p50 is {:.1}x, p99 {:.1}x); GET /api/v1/health {health_ms:.2} ms (p50 is {:.1}x)",
        p50 / direct_ms,
        p99 / direct_ms,
        p50 / health_ms
    );
    assert_eq!(stored, REPORTS, "every report stored once");

    // A 1,024-node job: the group report of its first node, and one report per node.
    let mut group = support::group_report(1024);
    group.job_id = "job-1024".to_owned();
    group.attempt = 1;
    group.node = support::node_name(0);
    group.report_id = "f".repeat(32);
    let agent = agent();
    let (status, _) = post(&agent, &url, &serde_json::to_string(&group).unwrap());
    assert_eq!(status, 200);
    for rank in 1..1024 {
        let mut report = support::one_node_report(&support::node_name(rank));
        report.job_id = "job-1024".to_owned();
        report.attempt = 1;
        report.report_id = format!("{:032x}", 1_000_000 + rank);
        let (status, _) = post(&agent, &url, &serde_json::to_string(&report).unwrap());
        assert_eq!(status, 200);
    }
    let instance = format!("{base}/instances/job-1024/{}", support::node_name(0));
    let (instance_ms, instance_bytes) = time_get(&instance);
    let (list_ms, list_bytes) = time_get(&format!("{base}/instances?job=job-1024"));
    let (json_ms, json_bytes) = time_get(&format!("{base}/api/v1/jobs/job-1024/instances"));
    println!("pages of a 1,024-node job (median of {PAGE_RUNS}):");
    println!(
        "  instance page (1,024-node group report) {instance_ms:.1} ms, {instance_bytes} bytes ({:.1}x health)",
        instance_ms / health_ms
    );
    println!(
        "  instances page (1,024 instances)        {list_ms:.1} ms, {list_bytes} bytes ({:.1}x health)",
        list_ms / health_ms
    );
    println!(
        "  the same instances as JSON              {json_ms:.1} ms, {json_bytes} bytes ({:.1}x health)",
        json_ms / health_ms
    );
    drop(runtime);
    PushFigures {
        store: if location.is_postgres() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
        .to_owned(),
        wall_s: wall,
        p50,
        p99,
        max,
        transactions,
        direct_ms,
    }
}
