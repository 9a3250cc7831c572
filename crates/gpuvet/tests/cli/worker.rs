//! A check's device work runs in a worker process, and a check that hangs there is
//! killed, not abandoned: by the time the app starts, no worker is left holding a
//! device. Workers are found by an environment marker that only this test's gpuvet
//! (and so its workers) carries.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Scratch, stderr};

const MARK: &str = "GPUVET_TEST_WORKER_MARK";
/// Generous: the checks end in seconds; this guards against a hang.
const PATIENCE: Duration = Duration::from_secs(120);

/// A config with `fail_action: retain`, so the app starts after a failed check, and a
/// sim node of 2 devices where gemm_flops hangs on device 1.
fn hanging_config(scratch: &Scratch, timeout_minutes: f64) -> std::path::PathBuf {
    scratch.config(
        "hang.json",
        &format!(
            r#"{{"aimaster": {{"sanity_check": {{"fail_action": "retain",
                "micro_benchmarks": "gemm_flops,kernel_launch", "timeout": {timeout_minutes}}}}},
              "gpuvet": {{"backend": "sim", "sim": {{"devices": 2,
                "faults": [{{"check": "gemm_flops", "device": 1, "fault": "hang"}}]}}}}}}"#
        ),
    )
}

/// Worker processes: pid and command line.
type Workers = Vec<(u32, String)>;

/// The live `gpuvet worker` processes marked `mark`.
fn marked_workers(mark: &str) -> Workers {
    common::marked_processes(MARK, mark)
        .into_iter()
        .filter(|(_, args)| args.get(1).map(String::as_str) == Some("worker"))
        .map(|(pid, args)| (pid, args.join(" ")))
        .collect()
}

/// `gpuvet run` with `config`, whose app says it started, then waits to be stopped.
fn start_run(scratch: &Scratch, config: &Path, mark: &str) -> Child {
    let started = scratch.path("app-started");
    let script = format!(
        "trap 'exit 0' TERM; touch '{}'; while true; do sleep 0.1; done",
        started.display()
    );
    scratch
        .gpuvet()
        .env(MARK, mark)
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(stderr_file(scratch))
        .spawn()
        .unwrap()
}

/// gpuvet's stderr goes to a file, not a pipe: a worker left alive would hold a pipe
/// open, and the test would hang instead of failing.
fn stderr_file(scratch: &Scratch) -> std::fs::File {
    std::fs::File::create(scratch.path("stderr")).unwrap()
}

fn stderr_text(scratch: &Scratch) -> String {
    std::fs::read_to_string(scratch.path("stderr")).unwrap_or_default()
}

/// Kills what a failing test left behind, so it fails without leaving workers.
fn kill_all(workers: &Workers) {
    for (pid, _) in workers {
        // SAFETY: signalling a process this test's gpuvet started.
        unsafe {
            libc::kill(*pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

/// Runs `gpuvet run` with `config` and returns the workers seen while the checks ran
/// and those alive once the app had started; then stops the app and gpuvet.
fn workers_before_and_after_the_app_starts(
    scratch: &Scratch,
    config: &Path,
    mark: &str,
) -> (Workers, Workers) {
    let mut child = start_run(scratch, config, mark);
    let since = Instant::now();
    let mut seen = Vec::new();
    while !scratch.path("app-started").exists() {
        for worker in marked_workers(mark) {
            if !seen.contains(&worker) {
                seen.push(worker);
            }
        }
        if since.elapsed() > PATIENCE || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            let _ = child.wait();
            kill_all(&marked_workers(mark));
            panic!("the app never started: {}", stderr_text(scratch));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = marked_workers(mark);
    kill_all(&left);
    // SAFETY: signalling our own child, which forwards it to the app.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", stderr_text(scratch));
    (seen, left)
}

fn results(scratch: &Scratch) -> serde_json::Value {
    let output = scratch
        .gpuvet()
        .args(["results", "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// One check's stored result.
fn check<'a>(results: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    results
        .as_array()
        .and_then(|stored| stored.iter().find(|s| s["result"]["name"] == name))
        .map(|stored| &stored["result"])
        .unwrap_or_else(|| panic!("no {name} in {results}"))
}

#[test]
fn a_device_hung_in_its_worker_is_named_and_the_worker_killed_before_the_app_starts() {
    let scratch = Scratch::temp();
    let config = hanging_config(&scratch, 2.0);
    let mark = format!("hung-{}", std::process::id());
    let (seen, left) = workers_before_and_after_the_app_starts(&scratch, &config, &mark);
    assert!(
        !seen.is_empty(),
        "the checks ran in marked worker processes"
    );
    assert!(
        seen.iter()
            .all(|(_, cmd)| cmd.contains("worker --backend sim --config")),
        "{seen:?}"
    );
    assert_eq!(left, Workers::new(), "no worker outlives its check");

    let results = results(&scratch);
    let gemm = check(&results, "gemm_flops");
    assert_eq!(gemm["status"], "failed", "{gemm}");
    let hung = gemm["entities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["entity"]["index"] == 1)
        .unwrap();
    assert_eq!(hung["verdict"], "faulty", "{hung}");
    let reason = hung["reason"].as_str().unwrap();
    assert!(
        reason.contains("hung: no result after")
            && reason.ends_with("its worker process was killed"),
        "{reason}"
    );
    // The next check ran in a fresh worker.
    assert_eq!(check(&results, "kernel_launch")["status"], "passed");
}

#[test]
fn the_overall_timeout_kills_the_hung_worker_before_the_app_starts() {
    let scratch = Scratch::temp();
    // 3 s: shorter than the hang grace, so the deadline, not the peers, ends it.
    let config = hanging_config(&scratch, 0.05);
    let mark = format!("timeout-{}", std::process::id());
    let (seen, left) = workers_before_and_after_the_app_starts(&scratch, &config, &mark);
    assert!(!seen.is_empty(), "the check ran in a marked worker process");
    assert_eq!(left, Workers::new(), "the timeout killed the worker");

    let results = results(&scratch);
    let gemm = check(&results, "gemm_flops");
    assert_eq!(gemm["status"], "timed_out", "{gemm}");
    let reason = gemm["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("the overall timeout of 3.0s expired")
            && reason.ends_with("; its worker process was killed"),
        "{reason}"
    );
    assert_eq!(check(&results, "kernel_launch")["status"], "not_run");
}

#[test]
fn the_worker_says_hello_with_its_backend_or_why_it_has_none() {
    let scratch = Scratch::temp();
    let config = scratch.config(
        "sim.json",
        r#"{"gpuvet": {"backend": "sim", "sim": {"devices": 2}}}"#,
    );
    let output = scratch
        .gpuvet()
        .args(["worker", "--backend", "sim", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let hello: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(hello["hello"]["backend"], "sim");
    assert_eq!(hello["hello"]["devices"], serde_json::json!([0, 1]));

    let output = scratch
        .gpuvet()
        .args(["worker", "--backend", "sim", "--config"])
        .arg(scratch.path("missing.json"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let fatal: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        fatal["fatal"]["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot read the config file"),
        "{fatal}"
    );
}

/// The command line of `pid`'s parent.
fn parent_cmdline(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // `pid (comm) state ppid ...`; comm may hold spaces, so read after its `)`.
    let ppid = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .unwrap_or_default();
    std::fs::read(format!("/proc/{ppid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .unwrap_or_default()
}

#[test]
fn every_local_agent_runs_its_checks_in_its_own_workers_and_none_is_left() {
    let scratch = Scratch::temp();
    let config = hanging_config(&scratch, 0.1);
    let mark = format!("agents-{}", std::process::id());
    let mut child = scratch
        .gpuvet()
        .env(MARK, &mark)
        .args(["check", "--json", "--local-nodes", "2", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(stderr_file(&scratch))
        .spawn()
        .unwrap();
    let since = Instant::now();
    let mut parents = Vec::new();
    while matches!(child.try_wait(), Ok(None)) && since.elapsed() < PATIENCE {
        for (pid, _) in marked_workers(&mark) {
            let parent = parent_cmdline(pid);
            if !parent.is_empty() && !parents.contains(&parent) {
                parents.push(parent);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let left = marked_workers(&mark);
    kill_all(&left);
    assert_eq!(left, Workers::new(), "no worker outlives the run");
    assert!(!parents.is_empty(), "workers ran");
    assert!(
        parents
            .iter()
            .all(|p| p.contains("check --no-store --json --join-only")),
        "only agents start workers: {parents:?}"
    );
    let report = common::json(&output);
    let gemm = &report["checks"][0];
    assert_eq!(gemm["name"], "gemm_flops");
    assert!(
        gemm["status"] == "timed_out" || gemm["status"] == "failed",
        "{gemm:#}\n{}",
        stderr_text(&scratch)
    );
}
