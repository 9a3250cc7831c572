//! Repeat offenders end to end: a node that fails start after start, across jobs, is
//! flagged in its report and its `SanityCheckFailed` event, and `gpuvet history` shows
//! its runs across jobs; `gpuvet untaint` without the feature `k8s` says how to get it,
//! and with it (`cargo test -p gpuvet --features k8s --test cli -- offenders`, which
//! `cargo test --workspace` does not build) refuses a node until a run passes after its
//! quarantine, against a fake API server.

use crate::common::{Scratch, json, stderr, stdout};

/// GPU 1 of two at 60 %: gemm_flops fails on every run.
const FAILING: &str = r#"{"gpuvet": {"backend": "sim",
    "sim": {"devices": 2, "seed": 3, "noise_pct": 0.5, "speed": {"1": 0.6}},
    "repeat_offender": {"failures": 2, "of_last": 3}}}"#;
/// The same node healed.
const PASSING: &str = r#"{"gpuvet": {"backend": "sim",
    "sim": {"devices": 2, "seed": 3, "noise_pct": 0.5},
    "repeat_offender": {"failures": 2, "of_last": 3}}}"#;

fn check(scratch: &Scratch, config: &std::path::Path, job: &str) -> serde_json::Value {
    let output = scratch
        .gpuvet()
        .args(["check", "--checks", "gemm_flops", "--json", "--config"])
        .arg(config)
        .env("GPUVET_JOB_ID", job)
        .output()
        .unwrap();
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        stderr(&output)
    );
    json(&output)
}

#[test]
fn a_node_failing_k_of_its_last_m_runs_across_jobs_is_flagged_and_its_history_shows_them() {
    let scratch = Scratch::temp();
    let failing = scratch.config("failing.json", FAILING);
    let passing = scratch.config("passing.json", PASSING);
    // Job 1 fails: one failure is not two.
    let first = check(&scratch, &failing, "job-1");
    assert_eq!(first["outcome"], "failed");
    assert!(first.get("repeat_offender").is_none(), "{first}");
    // Job 2 passes, job 3 fails: two of the last three, across three jobs.
    assert_eq!(check(&scratch, &passing, "job-2")["outcome"], "passed");
    let third = check(&scratch, &failing, "job-3");
    assert_eq!(
        third["repeat_offender"],
        serde_json::json!({ "failed": 2, "of_last": 3 }),
        "{third}"
    );

    // `gpuvet run` records the flag in its event's message and details.
    let output = scratch
        .gpuvet()
        .args(["run", "--config"])
        .arg(&failing)
        .args(["--checks", "gemm_flops", "--", "true"])
        .env("GPUVET_JOB_ID", "job-4")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .contains("node `node-test` is a repeat offender: failed 2 of its last 3 runs"),
        "{}",
        stderr(&output)
    );
    let output = scratch
        .gpuvet()
        .args(["events", "--json", "--job-id", "job-4"])
        .output()
        .unwrap();
    let events: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let failed = events
        .iter()
        .find(|e| e["kind"] == "SanityCheckFailed")
        .expect("a SanityCheckFailed event");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .ends_with("; `node-test` is a repeat offender: failed 2 of its last 3 runs"),
        "{failed}"
    );
    assert_eq!(
        failed["details"]["repeat_offender"]["failed"], 2,
        "{failed}"
    );

    // Its history spans the four jobs, the newest first, flagged.
    let output = scratch
        .gpuvet()
        .args(["history", "node-test", "--json", "--config"])
        .arg(&failing)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let history = json(&output);
    let jobs: Vec<&str> = history["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["job-4", "job-3", "job-2", "job-1"]);
    assert_eq!(history["repeat_offender"]["of_last"], 3, "{history}");
    assert_eq!(history["checks"][0]["points"].as_array().unwrap().len(), 4);
    assert_eq!(
        history["findings"].as_array().unwrap().len(),
        3,
        "{history}"
    );
    let table = scratch.run(&["history", "node-test", "--runs", "2"]);
    assert_eq!(table.status.code(), Some(0), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(
        text.starts_with(
            "node `node-test`: 2 of its last 2 runs failed because of it; repeat offender"
        ),
        "{text}"
    );
    assert!(text.contains("gemm_flops"), "{text}");

    // A node the store never saw is the user's mistake, with a hint.
    let unknown = scratch.run(&["history", "node-9"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("no run or quarantine of node `node-9`"));
}

#[cfg(not(feature = "k8s"))]
#[test]
fn untaint_without_the_feature_says_how_to_get_it_and_force_needs_a_reason() {
    let scratch = Scratch::temp();
    let output = scratch.run(&["untaint", "gpu-7"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--features k8s"),
        "{}",
        stderr(&output)
    );
    let output = scratch.run(&["untaint", "gpu-7", "--force"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--reason"), "{}", stderr(&output));
}

/// `gpuvet untaint` end to end (a gpuvet built with `k8s`: `cargo test -p gpuvet
/// --features k8s`), against a fake API server that holds one node, `gpu-7`, tainted
/// by gpuvet a moment ago: refused with exit 81 and a hint while its only run is the
/// failed one before the quarantine; lifted (a PATCH) once a run after it passed, and
/// recorded as a `NodeUntainted` event.
#[cfg(feature = "k8s")]
#[test]
fn untaint_refuses_a_node_without_a_later_passing_run_and_lifts_it_after_one() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::{Arc, Mutex};

    let scratch = Scratch::temp();
    let failing = scratch.config("failing.json", FAILING);
    let passing = scratch.config("passing.json", PASSING);
    let run = |config: &std::path::Path, job: &str| {
        let output = scratch
            .gpuvet()
            .args(["check", "--checks", "gemm_flops", "--config"])
            .arg(config)
            .env("GPUVET_JOB_ID", job)
            .env("GPUVET_NODE", "gpu-7")
            .output()
            .unwrap();
        assert!(
            matches!(output.status.code(), Some(0 | 1)),
            "{}",
            stderr(&output)
        );
    };
    run(&failing, "job-1");
    // Quarantined after that failed run (RFC 3339 has whole seconds: wait past one).
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let tainted_at = format_rfc3339(now);
    std::thread::sleep(std::time::Duration::from_millis(1_100));

    // The fake API server: GET answers the node, PATCH lifts the taint; every request
    // is kept.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = requests.clone();
    std::thread::spawn(move || {
        let tainted = Arc::new(Mutex::new(true));
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let (seen, tainted, at) = (seen.clone(), tainted.clone(), tainted_at.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        if header.trim().is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let request = line.trim().to_owned();
                    if request.starts_with("PATCH") {
                        *tainted.lock().unwrap() = false;
                    }
                    seen.lock().unwrap().push(request);
                    let mut node = serde_json::json!({
                        "apiVersion": "v1", "kind": "Node",
                        "metadata": { "name": "gpu-7", "resourceVersion": "41", "annotations": {} },
                        "spec": { "taints": [] },
                    });
                    if *tainted.lock().unwrap() {
                        node["spec"]["taints"] = serde_json::json!([
                            { "key": "gpuvet.io/unhealthy", "value": "host", "effect": "NoSchedule" }
                        ]);
                        node["metadata"]["annotations"]["gpuvet.io/quarantined-at"] =
                            serde_json::json!(at);
                    }
                    let text = node.to_string();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                        text.len()
                    );
                    if stream.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let kubeconfig = scratch.config(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\nusers:\n- name: op\n  user: {{token: \"t\"}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: op}}\ncurrent-context: fake\n"
        ),
    );
    let untaint = || {
        scratch
            .gpuvet()
            .args(["untaint", "gpu-7"])
            .env("KUBECONFIG", &kubeconfig)
            .env("USER", "operator")
            .output()
            .unwrap()
    };
    let refused = untaint();
    assert_eq!(refused.status.code(), Some(81), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains("error: node `gpu-7` stays quarantined: no run started since the quarantine"),
        "{said}"
    );
    assert!(
        said.contains("hint: run `gpuvet check` on the node"),
        "{said}"
    );
    assert!(
        !requests
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.starts_with("PATCH")),
        "a refused untaint changes nothing"
    );

    run(&passing, "job-2");
    let lifted = untaint();
    assert_eq!(lifted.status.code(), Some(0), "{}", stderr(&lifted));
    assert!(
        stdout(&lifted).starts_with("lifted `gpuvet.io/unhealthy` from node `gpu-7`: passed since"),
        "{}",
        stdout(&lifted)
    );
    assert!(
        requests
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.starts_with("PATCH /api/v1/nodes/gpu-7")),
        "{:?}",
        requests.lock().unwrap()
    );
    let output = scratch
        .gpuvet()
        .args(["events", "--json", "--job-id", "gpuvet-untaint"])
        .output()
        .unwrap();
    let events: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["kind"], "NodeUntainted");
    assert_eq!(events[0]["details"]["forced"], false);
    assert!(
        events[0]["details"]["by"]
            .as_str()
            .unwrap()
            .starts_with("operator@")
    );
}

/// Unix seconds as RFC 3339 in UTC, as the API writes times.
#[cfg(feature = "k8s")]
fn format_rfc3339(secs: u64) -> String {
    let ms = gpuvet_model::time::format_utc_ms(secs * 1000);
    // `2026-12-04T10:49:23.000Z` without its milliseconds.
    format!("{}Z", &ms[..19])
}
