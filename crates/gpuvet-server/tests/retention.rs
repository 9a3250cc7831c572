//! `gpuvet-server --keep-days N` over a real store: what is older than N days is
//! deleted while the server serves (attempts with their reports, and events), what is
//! newer stays, and the log says how much went.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use gpuvet_model::events::{EventKind, NewEvent};
use gpuvet_model::time::unix_now_ms;
use gpuvet_store::Store;

const DAY_MS: u64 = 86_400_000;

fn event(time_ms: u64) -> NewEvent {
    NewEvent {
        event_id: gpuvet_model::ids::new_id(),
        time_ms,
        kind: EventKind::InstanceStarted,
        lane: None,
        message: "started".to_owned(),
        details: serde_json::json!({}),
    }
}

#[test]
fn what_is_older_than_keep_days_is_deleted_while_serving_and_the_rest_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.db");
    let now = unix_now_ms();
    {
        let mut store = Store::open(&path).unwrap();
        for (job, age_days) in [("old-a", 40), ("old-b", 31), ("recent", 2)] {
            let started = now - age_days * DAY_MS;
            let attempt = store.begin_attempt(job, "n0", "pod-n0", started).unwrap();
            store.record_event(&attempt, &event(started)).unwrap();
        }
    }

    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuvet-server"))
        .env_remove("GPUVET_CONFIG")
        .env_remove("GPUVET_STORE")
        .env_remove("GPUVET_READ_TOKEN")
        .env("GPUVET_REPORT_TOKEN", "a-token")
        .args(["--listen", "127.0.0.1:0", "--keep-days", "30", "--store"])
        .arg(&path)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = lines.next().unwrap().unwrap();
    let addr = listening
        .strip_prefix("gpuvet serve: listening on http://")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{listening}"))
        .to_owned();
    // The first round runs at start; its line comes next (a minute: a hang guard).
    let (send, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = send.send(line);
        }
    });
    let pruned = said
        .recv_timeout(Duration::from_secs(60))
        .expect("a line about what was deleted");
    assert_eq!(
        pruned,
        "gpuvet serve: deleted 2 attempt(s) with their reports and 2 event(s) older than 30 days (`--keep-days`)"
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let jobs = agent
        .get(&format!("http://{addr}/api/v1/jobs"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let jobs: serde_json::Value = serde_json::from_str(&jobs).unwrap();
    let names: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["recent"]);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn keep_days_of_zero_is_refused_with_the_range() {
    let output = Command::new(env!("CARGO_BIN_EXE_gpuvet-server"))
        .args(["--keep-days", "0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("--keep-days"), "{said}");
    assert!(said.contains("1.."), "{said}");
}
