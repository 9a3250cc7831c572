//! Pushing to `gpuvet serve` end to end, with real processes: what `check` and `run`
//! record while the server is down waits in the outbox and arrives once it is up,
//! with nothing lost and nothing stored twice, also when a reply is lost and an entry
//! is sent again; repeats of one event that a node's store counted on one row are
//! counted once each by the server, resent or not. And the browser test of the served pages: Chromium opens the failed
//! instance of a `--local-nodes` group with a slow node (its verdict, at most 12 folded
//! finding rows with 8 and with 64 GPUs a node), the events filtered to
//! `SanityCheckFailed`, and the timeline, whose first-error label covers no lane, on
//! a server that guards its reads and speaks HTTPS (a CA made in the test), into which
//! Chromium signs in with a one-time link followed from another site; and the same
//! pages read from one of two replicas on one PostgreSQL database, after the other
//! was stopped and the nodes failed over.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use gpuvet_server::TlsFiles;
use gpuvet_testkit::tls::TestCa;

use crate::common::serve::{READ_TOKEN, Serve, TOKEN, free_loopback_addr};
use crate::common::{Scratch, stderr, stdout};

/// A sim node whose reports and events go to `addr`.
fn pushing_config(scratch: &Scratch, addr: &str, extra: &str) -> std::path::PathBuf {
    scratch.config(
        "push.json",
        &format!(
            r#"{{"aimaster": {{"sanity_check": {{"fail_action": "fail", "micro_benchmarks": "gemm_flops", "timeout": 2}}}},
               "gpuvet": {{"backend": "sim", "report_to": "http://{addr}", "sim": {{"devices": 2{extra}}}}}}}"#
        ),
    )
}

fn with_token(mut command: Command) -> Command {
    command.env("GPUVET_REPORT_TOKEN", TOKEN);
    command
}

/// The event ids of a node's own store.
fn local_event_ids(scratch: &Scratch) -> BTreeSet<String> {
    scratch
        .events()
        .iter()
        .map(|e| {
            e["event_id"]
                .as_str()
                .expect("every event has an id")
                .to_owned()
        })
        .collect()
}

fn server_event_ids(server: &Serve) -> Vec<String> {
    server
        .get_json("/api/v1/events")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect()
}

fn server_report_ids(server: &Serve) -> Vec<String> {
    server
        .get_json("/api/v1/runs")
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["report_id"].as_str().unwrap().to_owned())
        .collect()
}

fn push(scratch: &Scratch, config: &Path, store: &Path) -> std::process::Output {
    with_token(scratch.gpuvet())
        .args(["push", "--config"])
        .arg(config)
        .arg("--store")
        .arg(store)
        .output()
        .unwrap()
}

#[test]
fn what_is_recorded_while_the_server_is_down_arrives_once_when_it_is_up() {
    let scratch = Scratch::temp();
    let addr = free_loopback_addr().to_string();
    let config = pushing_config(&scratch, &addr, "");

    // The server is down: `check` and `run` still do their work, and say so.
    let check = with_token(scratch.gpuvet())
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    let said = stderr(&check);
    assert!(
        said.contains("push: cannot send to") && said.contains("cannot reach"),
        "{said}"
    );
    let run = with_token(scratch.gpuvet())
        .args(["run", "--config"])
        .arg(&config)
        .args(["--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(3), "the app ran: {}", stderr(&run));

    let down = push(&scratch, &config, &scratch.store());
    assert_eq!(down.status.code(), Some(76), "{}", stderr(&down));
    // Two attempts (check's and run's), their two reports, and every event.
    let waiting = 2 + 2 + local_event_ids(&scratch).len();
    assert!(
        stdout(&down).contains(&format!("sent 0 to http://{addr}; {waiting} waiting")),
        "everything waits: {}",
        stdout(&down)
    );

    // A copy of the node's store, as if every reply to the sends below were lost.
    let copy = scratch.path("copy.db");
    std::fs::copy(scratch.store(), &copy).unwrap();

    let server = Serve::start(&scratch.path("server.db"), &addr);
    let up = push(&scratch, &config, &scratch.store());
    assert_eq!(up.status.code(), Some(0), "{}", stderr(&up));
    assert!(
        stdout(&up).contains(&format!("sent {waiting} to")),
        "{}",
        stdout(&up)
    );
    let again = push(&scratch, &config, &copy);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let empty = push(&scratch, &config, &scratch.store());
    assert!(stdout(&empty).contains("sent 0 to"), "{}", stdout(&empty));
    assert!(stdout(&empty).contains("; 0 waiting"), "{}", stdout(&empty));

    let events = server_event_ids(&server);
    let unique: BTreeSet<String> = events.iter().cloned().collect();
    assert_eq!(unique.len(), events.len(), "nothing twice: {events:?}");
    assert_eq!(unique, local_event_ids(&scratch), "nothing lost");
    let reports = server_report_ids(&server);
    assert_eq!(reports.len(), 2, "{reports:?}");
    let jobs = server.get_json("/api/v1/jobs/job-test/instances");
    assert_eq!(jobs[0]["node"], "node-test");
    assert_eq!(jobs[0]["attempt"], 2, "check was attempt 1, run attempt 2");
}

#[test]
fn repeats_a_node_counted_on_one_row_are_counted_once_each_by_the_server() {
    let scratch = Scratch::temp();
    let addr = free_loopback_addr().to_string();
    let kmsg = scratch.path("kmsg.log");
    let config = scratch.config(
        "watch-push.json",
        &format!(
            r#"{{"aimaster": {{"runtime_check": {{"fail_action": "retain", "micro_benchmarks": "c4d"}}}},
               "gpuvet": {{"backend": "sim", "report_to": "http://{addr}",
                          "watch": {{"kmsg": "{}", "nvml": false, "interval_ms": 200}}}}}}"#,
            kmsg.display()
        ),
    );
    // XID 119 on one GPU twice, 100 s apart: reported, then escalated. One XID on one
    // GPU: the node's store counts both on one row, and queues both.
    let xid =
        |s: u64| format!("[ {s}.000000] NVRM: Xid (PCI:0000:3b:00): 119, pid=1, test error\n");
    std::fs::write(&kmsg, format!("{}{}", xid(100), xid(200))).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let watch = with_token(scratch.gpuvet())
        .args(["watch", "--json", "--duration", "2", "--config"])
        .arg(&config)
        .env("GPUVET_KMSG_BOOT_TIME_MS", (now - 3_600_000).to_string())
        .output()
        .unwrap();
    assert_eq!(watch.status.code(), Some(0), "{}", stderr(&watch));
    assert_eq!(stdout(&watch).lines().count(), 2, "{}", stdout(&watch));
    let local = scratch.events();
    assert_eq!(local.len(), 1, "{local:#?}");
    assert_eq!(local[0]["count"], 2, "{local:#?}");

    // Sent while the server is up, and again from a copy, as if every reply was lost.
    let copy = scratch.path("copy.db");
    std::fs::copy(scratch.store(), &copy).unwrap();
    let server = Serve::start(&scratch.path("server.db"), &addr);
    for store in [scratch.store(), copy] {
        let sent = push(&scratch, &config, &store);
        assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
    }
    let on_server = server.get_json("/api/v1/events");
    let on_server = on_server.as_array().unwrap();
    assert_eq!(on_server.len(), 1, "{on_server:#?}");
    for field in ["event_id", "time_ms", "count", "last_seen_ms", "message"] {
        assert_eq!(on_server[0][field], local[0][field], "{field}");
    }
}

/// A server (whose reads need [`READ_TOKEN`] when `guarded`), and a node's
/// `gpuvet run -- true` that pushed to it, without the read token, and passed.
fn run_pushing_to_a_server(
    guarded: bool,
) -> (Scratch, Serve, std::path::PathBuf, std::process::Output) {
    let scratch = Scratch::temp();
    let server = if guarded {
        Serve::start_guarded(&scratch.path("server.db"), "127.0.0.1:0")
    } else {
        Serve::start(&scratch.path("server.db"), "127.0.0.1:0")
    };
    let config = pushing_config(&scratch, &server.addr.to_string(), "");
    let run = with_token(scratch.gpuvet())
        .args(["run", "--config"])
        .arg(&config)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    (scratch, server, config, run)
}

#[test]
fn run_sends_its_report_and_events_while_the_server_is_up_and_leaves_nothing_queued() {
    let (scratch, server, config, run) = run_pushing_to_a_server(true);
    assert!(!stderr(&run).contains("push:"), "{}", stderr(&run));
    let events: BTreeSet<String> = server_event_ids(&server).into_iter().collect();
    assert_eq!(events, local_event_ids(&scratch));
    let kinds: Vec<String> = server
        .get_json("/api/v1/events")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        kinds.contains(&"SanityCheckSucceeded".to_owned()),
        "{kinds:?}"
    );
    assert_eq!(server_report_ids(&server).len(), 1);
    let left = push(&scratch, &config, &scratch.store());
    assert!(stdout(&left).contains("sent 0 to"), "{}", stdout(&left));
    assert!(stdout(&left).contains("; 0 waiting"), "{}", stdout(&left));
}

#[test]
fn a_wrong_token_keeps_everything_queued_and_says_why() {
    let scratch = Scratch::temp();
    let server = Serve::start(&scratch.path("server.db"), "127.0.0.1:0");
    let config = pushing_config(&scratch, &server.addr.to_string(), "");
    let check = scratch
        .gpuvet()
        .env("GPUVET_REPORT_TOKEN", "not-the-token")
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert!(
        stderr(&check).contains("answered 401: the token does not match the server's"),
        "{}",
        stderr(&check)
    );
    assert!(server_report_ids(&server).is_empty());
    let fixed = push(&scratch, &config, &scratch.store());
    assert_eq!(fixed.status.code(), Some(0), "{}", stdout(&fixed));
    assert_eq!(server_report_ids(&server).len(), 1);
}

#[test]
fn push_without_a_server_to_push_to_is_a_usage_error() {
    let scratch = Scratch::temp();
    let output = scratch.run(&["push"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("error: there is no server to push to"));
    assert!(stderr(&output).contains("hint: set `gpuvet.report_to`"));
}

/// Chromium and playwright-core, or a panic naming what is missing.
fn browser_prerequisites() {
    let chromium =
        std::env::var("GPUVET_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "missing chromium at `{chromium}` (apt-get install chromium)"
    );
    let playwright = repo_root().join("tests/browser/node_modules/playwright-core");
    assert!(
        playwright.exists(),
        "missing playwright-core in `{}` (npm ci --prefix tests/browser)",
        playwright.display()
    );
}

fn repo_root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/gpuvet sits two levels below the workspace root")
        .to_path_buf()
}

/// The checks of issue 30's slow-node run: every check a group of sim nodes runs.
const ISSUE_30_CHECKS: &str = "gemm_flops,all_reduce_1,all_reduce_2,kernel_launch,all_reduce,all_to_all_2,all_gather_2,all_gather,multi_all_reduce_2,multi_all_reduce,pytorch_gloo_2,network_connectivity,comp_comm_overlap";

/// The most rows the instance page of a slow node may give its folded findings,
/// whatever the node's GPU count (issue 30).
const MOST_FINDING_ROWS: usize = 12;

/// `run --local-nodes 4` of job `job` on `devices` sim GPUs a node, `local-2` at 60 %,
/// pushing to `report_to` (JSON: one address or a list; over HTTPS, trusting the CA in
/// `ca`); the start refused.
fn run_slow_node_group(scratch: &Scratch, report_to: &str, ca: &Path, job: &str, devices: u32) {
    let config = scratch.config(
        &format!("slow-{devices}.json"),
        &format!(
            r#"{{"aimaster": {{"sanity_check": {{"fail_action": "fail", "micro_benchmarks": "{ISSUE_30_CHECKS}", "timeout": 100}}}},
               "gpuvet": {{"backend": "sim", "report_to": {report_to}, "report_ca": "{}", "sim": {{"devices": {devices}, "node_speed": {{"local-2": 0.6}}}}}}}}"#,
            ca.display()
        ),
    );
    let run = with_token(scratch.gpuvet())
        .env("GPUVET_JOB_ID", job)
        .args(["run", "--local-nodes", "4", "--config"])
        .arg(&config)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(1),
        "fail_action fail: {}",
        stderr(&run)
    );
    assert!(stderr(&run).contains("local-2"), "{}", stderr(&run));
}

#[test]
#[ignore = "needs chromium and node with playwright-core (tests/browser: npm ci)"]
fn chromium_finds_the_slow_node_of_a_pushed_group_run_and_its_failed_event() {
    browser_prerequisites();
    let _turn = crate::common::one_at_a_time();
    let scratch = Scratch::temp();
    // Over HTTPS, with a certificate from a CA made here: the nodes trust the CA, and
    // Chromium that one key.
    let ca = TestCa::new("fleet CA");
    let files = ca.server_files(&scratch.path(""), "server", &["127.0.0.1"]);
    let ca_file = ca.write_cert(&scratch.path(""), "ca.pem");
    let server = Serve::start_tls_guarded(
        &scratch.path("server.db"),
        "127.0.0.1:0",
        TlsFiles {
            cert: files.cert.clone(),
            key: files.key.clone(),
        },
    );
    assert!(server.url("").starts_with("https://"));
    // Four local agents of 8 GPUs share the config; `local-2` runs at 60 %. The same
    // with 64 GPUs a node, whose instance page must not have more rows.
    let report_to = format!("\"{}\"", server.url(""));
    run_slow_node_group(&scratch, &report_to, &ca_file, "job-e2e", 8);
    run_slow_node_group(&scratch, &report_to, &ca_file, "job-e2e-64", 64);
    browse(&server, &files.spki_sha256, &ca_file, "serve-e2e");
}

/// The same pages, read from the second of two replicas on one PostgreSQL database
/// after the first was stopped: the nodes of the first run pushed through either, the
/// second run's failed over to the replica still up (`report_to` lists both).
#[test]
#[ignore = "needs chromium, node with playwright-core, and PostgreSQL (GPUVET_TEST_POSTGRES_URL)"]
fn chromium_reads_from_one_replica_what_two_replicas_took() {
    browser_prerequisites();
    let _turn = crate::common::one_at_a_time();
    let scratch = Scratch::temp();
    let database = gpuvet_testkit::postgres::TestDatabase::create();
    let ca = TestCa::new("fleet CA");
    let files = ca.server_files(&scratch.path(""), "server", &["127.0.0.1"]);
    let ca_file = ca.write_cert(&scratch.path(""), "ca.pem");
    let replica = || {
        Serve::start_replica(
            gpuvet_store::StoreLocation::Postgres(database.url.clone()),
            TlsFiles {
                cert: files.cert.clone(),
                key: files.key.clone(),
            },
        )
    };
    let (first, second) = (replica(), replica());
    let both = format!("[\"{}\", \"{}\"]", first.url(""), second.url(""));
    run_slow_node_group(&scratch, &both, &ca_file, "job-e2e", 8);
    first.stop();
    run_slow_node_group(&scratch, &both, &ca_file, "job-e2e-64", 64);
    let mut jobs: Vec<String> = second
        .get_json("/api/v1/jobs")
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["job_id"].as_str().unwrap().to_owned())
        .collect();
    jobs.sort();
    assert_eq!(jobs, ["job-e2e", "job-e2e-64"]);
    browse(&second, &files.spki_sha256, &ca_file, "serve-e2e-replicas");
}

/// Chromium through `server`'s pages (`tests/browser/serve_pages.mjs`), trusting the
/// server key `spki` and, for the script's own requests, the CA in `ca`; screenshots
/// under the test target's `shots` directory.
fn browse(server: &Serve, spki: &str, ca: &Path, shots: &str) {
    let wide = server.get_json("/api/v1/jobs/job-e2e-64/instances");
    let node = wide[0]["node"].as_str().expect("the 64-GPU run's instance");

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join(shots);
    std::fs::create_dir_all(&shots).unwrap();
    let output = Command::new("node")
        .arg(repo_root().join("tests/browser/serve_pages.mjs"))
        .arg(server.url(""))
        .arg(&shots)
        .arg("local-2")
        .arg(MOST_FINDING_ROWS.to_string())
        .arg(format!("/instances/job-e2e-64/{node}"))
        .env("GPUVET_SIGN_IN_PATH", server.sign_in_link())
        .env("GPUVET_TEST_TRUSTED_SPKI", spki)
        // The script's own requests (Playwright's, from node) trust the CA.
        .env("NODE_EXTRA_CA_CERTS", ca)
        .output()
        .expect("running node");
    assert!(
        output.status.success(),
        "the browser check failed:\n{}{}",
        stdout(&output),
        stderr(&output)
    );
    for shot in [
        "instances.png",
        "instance.png",
        "instance-2.png",
        "events.png",
        "timeline.png",
        "nodes.png",
        "node.png",
    ] {
        assert!(shots.join(shot).exists(), "{shot} saved");
    }
}

/// Schemathesis (PyPI) against the served OpenAPI document, with data from a real
/// `run` pushed first: no request gets a 5xx, and every response matches the schema
/// (its status, content type, headers and body). Two of its checks are left out, since
/// the server is stricter than the schema can say: it refuses a time range that ends
/// before it starts, and a NUL character (which PostgreSQL cannot store), and it takes
/// numbers up to `u64`/`u32` where the schema's formats say `int64`/`int32`.
///
/// Twice: against a server that guards its reads, given each token for the scheme
/// that names it (the write token for pushes, the read token for reads), so that its
/// `ignored_auth` check also finds every read refused without the read token; and
/// against a server whose reads are open, whose document names no read token.
#[test]
#[ignore = "needs schemathesis: set GPUVET_TEST_SCHEMATHESIS to its `st` program"]
fn schemathesis_finds_no_server_error_and_no_response_outside_the_schema() {
    let st = std::env::var("GPUVET_TEST_SCHEMATHESIS")
        .expect("GPUVET_TEST_SCHEMATHESIS names schemathesis's `st` (pip install schemathesis)");
    for guarded in [true, false] {
        // The scratch holds the node's files until the end.
        let (scratch, server, _, _) = run_pushing_to_a_server(guarded);
        let mut auth = format!("[auth.openapi.token]\nbearer = \"{TOKEN}\"\n");
        if guarded {
            auth.push_str(&format!(
                "[auth.openapi.read_token]\nbearer = \"{READ_TOKEN}\"\n"
            ));
        }
        let config = scratch.path("schemathesis.toml");
        std::fs::write(&config, auth).unwrap();
        // Its cache (`.schemathesis/`, crashes it found) goes to the scratch, not the
        // crate's directory.
        let output = Command::new(&st)
            .current_dir(scratch.path("."))
            .arg("--config-file")
            .arg(&config)
            .arg("run")
            .arg(server.url("/api/v1/openapi.json"))
            .args(["--checks", "all"])
            .args([
                "--exclude-checks",
                "positive_data_acceptance,negative_data_rejection",
            ])
            .args(["--max-examples", "30", "--seed", "1"])
            .env("NO_COLOR", "1")
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{st}`: {e}"));
        assert!(
            output.status.success(),
            "schemathesis found failures (reads guarded: {guarded}):\n{}{}",
            stdout(&output),
            stderr(&output)
        );
    }
}

#[test]
#[ignore = "needs chromium and node with playwright-core (tests/browser: npm ci)"]
fn the_instance_page_of_a_running_attempt_reloads_itself_when_the_report_arrives() {
    browser_prerequisites();
    let scratch = Scratch::temp();
    let server = Serve::start(&scratch.path("server.db"), "127.0.0.1:0");
    // A node's attempt as it begins, pushed the way `check` and `run` push it.
    let node_store = scratch.path("node.db");
    let mut node = gpuvet_store::Store::open(&node_store).unwrap();
    node.queue_pushes(true);
    let attempt = node
        .begin_attempt("job-live", "node-live", "pod-live", 1_700_000_000_000)
        .unwrap();
    let config = pushing_config(&scratch, &server.addr.to_string(), "");
    let sent = push(&scratch, &config, &node_store);
    assert_eq!(sent.status.code(), Some(0), "{}", stdout(&sent));
    // The report the node will send: a slow GPU 1, from a real sim check.
    let sim = scratch.config(
        "slow.json",
        r#"{"gpuvet": {"backend": "sim", "sim": {"devices": 4, "speed": {"1": 0.5}}}}"#,
    );
    let check = scratch
        .gpuvet()
        .env("GPUVET_JOB_ID", &attempt.job_id)
        .env("GPUVET_NODE", &attempt.node)
        .env("GPUVET_INSTANCE", &attempt.instance)
        .args([
            "check",
            "--json",
            "--no-store",
            "--checks",
            "gemm_flops",
            "--config",
        ])
        .arg(&sim)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1), "{}", stderr(&check));
    let mut report: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    report["report_id"] = "0123456789abcdef0123456789abcdef".into();
    let report_file = scratch.path("report.json");
    std::fs::write(&report_file, report.to_string()).unwrap();

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-e2e");
    std::fs::create_dir_all(&shots).unwrap();
    let output = Command::new("node")
        .arg(repo_root().join("tests/browser/serve_live.mjs"))
        .arg(server.url("/instances/job-live/node-live"))
        .arg(server.url("/api/v1/reports"))
        .arg(&report_file)
        .arg(TOKEN)
        .arg("node-live/dev1")
        .arg(&shots)
        .output()
        .expect("running node");
    assert!(
        output.status.success(),
        "the browser check failed:\n{}{}",
        stdout(&output),
        stderr(&output)
    );
}

/// `gpuvet.baseline_from: server` (issue 33, item 2): three pushed runs of 8 sim GPUs
/// teach the server the model's baseline, and the next run is judged by it and says
/// so; with the server down, the run warns and goes on with the built-in table.
#[test]
fn a_node_judges_by_the_fleets_baseline_from_the_server_and_says_so() {
    let scratch = Scratch::temp();
    let server = Serve::start(&scratch.path("server.db"), "127.0.0.1:0");
    let addr = server.addr.to_string();
    // `pushing_config` gives 2 devices; 8 here, so three runs make 24 results.
    let config = pushing_config(&scratch, &addr, "");
    let config = scratch.config(
        "fleet.json",
        &std::fs::read_to_string(&config)
            .unwrap()
            .replace(r#""devices": 2"#, r#""devices": 8"#),
    );
    for _ in 0..3 {
        let check = with_token(scratch.gpuvet())
            .args(["check", "--json", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    }
    let baselines = server.get_json("/api/v1/baselines");
    assert_eq!(baselines[0]["check"], "gemm_flops", "{baselines}");
    assert_eq!(baselines[0]["results"], 24, "{baselines}");
    let limit = baselines[0]["limit"].as_f64().unwrap();

    let from_server = scratch.config(
        "from-server.json",
        &std::fs::read_to_string(&config).unwrap().replace(
            r#""backend": "sim","#,
            r#""backend": "sim", "baseline_from": "server","#,
        ),
    );
    let check = with_token(scratch.gpuvet())
        .args(["check", "--json", "--config"])
        .arg(&from_server)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    let report = crate::common::json(&check);
    let evidence = &report["checks"][0]["entities"][0]["evidence"];
    assert_eq!(evidence["baseline_source"], "fleet", "{evidence}");
    assert_eq!(evidence["baseline"].as_f64(), Some(limit), "{evidence}");

    drop(server);
    let down = with_token(scratch.gpuvet())
        .args(["check", "--json", "--config"])
        .arg(&from_server)
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(0), "{}", stderr(&down));
    assert!(
        stderr(&down).contains("the fleet's baselines could not be read from"),
        "{}",
        stderr(&down)
    );
    let report = crate::common::json(&down);
    let evidence = &report["checks"][0]["entities"][0]["evidence"];
    assert_ne!(evidence["baseline_source"], "fleet", "{evidence}");
}
