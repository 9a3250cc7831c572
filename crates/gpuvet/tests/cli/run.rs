//! `gpuvet run -- CMD` end to end: each fail_action with a check that really fails (a
//! baseline floor the cpu backend cannot meet), the events in the store, the rebuild
//! hook, exit codes, and signal forwarding.

use std::time::{Duration, Instant};

use crate::common::{Scratch, stderr};

/// A config whose gemm_flops floor no CPU meets, so the check really fails.
fn unmeetable(fail_action: &str, extra: &str) -> String {
    format!(
        r#"{{"aimaster": {{"sanity_check": {{"fail_action": "{fail_action}", "micro_benchmarks": "gemm_flops", "timeout": 2}}}},
            "gpuvet": {{"backend": "cpu", "cpu_devices": 1, "gemm": {{"size": 256}},
                        "baselines": {{"gemm_flops": {{"floor": 1000000}}}}{extra}}}}}"#
    )
}

/// `gpuvet run --config CONFIG -- APP`, where the app exits with `code`.
fn run_app(scratch: &Scratch, config: &std::path::Path, code: i32) -> std::process::Output {
    scratch
        .gpuvet()
        .arg("run")
        .arg("--config")
        .arg(config)
        .arg("--")
        .args(app(scratch, code))
        .output()
        .unwrap()
}

/// A command that records that it ran, then exits with `code`.
fn app(scratch: &Scratch, code: i32) -> Vec<String> {
    let marker = scratch.path("app-ran");
    vec![
        "sh".into(),
        "-c".into(),
        format!("echo ran > '{}'; exit {code}", marker.display()),
    ]
}

#[test]
fn fail_does_not_start_the_app() {
    let scratch = Scratch::temp();
    let config = scratch.config("c.json", &unmeetable("fail", ""));
    let output = run_app(&scratch, &config, 0);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(!scratch.path("app-ran").exists(), "the app must not start");
    assert!(
        stderr(&output).contains("below the baseline floor"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        scratch.event_kinds(),
        ["SanityCheckFailed", "InstanceStartupFailed"]
    );
    let events = scratch.events();
    assert_eq!(events[0]["lane"], "host");
    assert_eq!(events[0]["job_id"], "job-test");
    assert_eq!(events[0]["attempt"], 1);
    assert_eq!(events[0]["details"]["findings"][0]["check"], "gemm_flops");
}

#[test]
fn retain_starts_the_app_anyway_and_returns_its_code() {
    let scratch = Scratch::temp();
    let config = scratch.config("c.json", &unmeetable("retain", ""));
    let output = run_app(&scratch, &config, 7);
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    assert!(scratch.path("app-ran").exists(), "the app must start");
    assert!(stderr(&output).contains("starting the app anyway because fail_action is `retain`"));
    assert_eq!(
        scratch.event_kinds(),
        ["SanityCheckFailed", "InstanceStarted", "InstanceExited"]
    );
    assert_eq!(scratch.events()[2]["details"]["exit_code"], 7);
}

#[test]
fn ignore_is_retain() {
    let scratch = Scratch::temp();
    let config = scratch.config("c.json", &unmeetable("ignore", ""));
    let output = run_app(&scratch, &config, 0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(scratch.path("app-ran").exists());
}

#[test]
fn rebuild_runs_the_hook_with_the_findings_and_exits_75() {
    let scratch = Scratch::temp();
    let hook_out = scratch.path("hook-env");
    let hook = format!(
        r#", "rebuild_hook": ["sh", "-c", "echo \"$GPUVET_JOB_ID $GPUVET_ATTEMPT $GPUVET_NODE $GPUVET_LANE\" > '{0}'; echo \"$GPUVET_FINDINGS\" >> '{0}'; test -s \"$GPUVET_REPORT_FILE\" && echo report >> '{0}'"]"#,
        hook_out.display()
    );
    let config = scratch.config("c.json", &unmeetable("rebuild", &hook));
    let output = run_app(&scratch, &config, 0);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(
        !scratch.path("app-ran").exists(),
        "the app must not start here"
    );
    let hook_env = std::fs::read_to_string(&hook_out).expect("the hook ran");
    let mut lines = hook_env.lines();
    assert_eq!(lines.next(), Some("job-test 1 node-test host"));
    let findings: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(findings[0]["entity"], "node-test/dev0");
    assert_eq!(findings[0]["verdict"], "slow");
    assert_eq!(
        lines.next(),
        Some("report"),
        "the hook can read the full report"
    );
    assert_eq!(
        scratch.event_kinds(),
        ["SanityCheckFailed", "InstanceRebuildRequested"]
    );
    assert_eq!(scratch.events()[1]["details"]["hook"]["exit_code"], 0);
}

/// The hook's report file cannot be written (`TMPDIR` under a regular file): the
/// rebuild is not held back by it. The hook runs without `GPUVET_REPORT_FILE`, a warning
/// and the event say why, with the OS's reason, and the exit code still asks for the
/// rebuild.
#[test]
fn rebuild_runs_the_hook_without_a_report_file_it_cannot_write_and_says_why() {
    let scratch = Scratch::temp();
    std::fs::write(scratch.path("a-file"), "not a directory").unwrap();
    let tmpdir = scratch.path("a-file/sub");
    let hook_out = scratch.path("hook-env");
    let hook = format!(
        r#", "rebuild_hook": ["sh", "-c", "echo \"${{GPUVET_REPORT_FILE:-none}}\" > '{}'"]"#,
        hook_out.display()
    );
    let config = scratch.config("c.json", &unmeetable("rebuild", &hook));
    let output = scratch
        .gpuvet()
        .env("TMPDIR", &tmpdir)
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--")
        .args(app(&scratch, 0))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    let hook_env = std::fs::read_to_string(&hook_out).expect("the hook ran");
    assert_eq!(hook_env.trim(), "none");
    let why = format!(
        "cannot write the report for the rebuild hook in `{}`: {}",
        tmpdir.display(),
        std::io::Error::from_raw_os_error(libc::ENOTDIR)
    );
    assert!(
        stderr(&output).contains(&format!(
            "warning: the rebuild hook runs without `GPUVET_REPORT_FILE`: {why}"
        )),
        "{}",
        stderr(&output)
    );
    let events = scratch.events();
    assert_eq!(events[1]["kind"], "InstanceRebuildRequested");
    let recorded = events[1]["details"]["hook"]["report_file_error"]
        .as_str()
        .unwrap();
    assert!(recorded.starts_with(&why), "{recorded}");
    assert_eq!(events[1]["details"]["hook"]["exit_code"], 0);
}

#[test]
fn rebuild_without_a_hook_still_asks_for_the_rebuild() {
    let scratch = Scratch::temp();
    let config = scratch.config("c.json", &unmeetable("rebuild", ""));
    let output = run_app(&scratch, &config, 0);
    assert_eq!(output.status.code(), Some(75));
    assert!(
        stderr(&output).contains("no `gpuvet.rebuild_hook` is configured"),
        "{}",
        stderr(&output)
    );
    assert_eq!(scratch.events()[1]["details"]["hook"]["ran"], false);
}

#[test]
fn a_healthy_node_starts_the_app_and_each_run_is_a_new_attempt() {
    let scratch = Scratch::temp();
    let config = scratch.config(
        "ok.json",
        r#"{"aimaster": {"sanity_check": {"micro_benchmarks": "gemm_flops,all_reduce_1"}}, "gpuvet": {"backend": "sim"}}"#,
    );
    for expected_attempt in 1..=2 {
        let output = run_app(&scratch, &config, 0);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let events = scratch.events();
        let latest: Vec<_> = events
            .iter()
            .filter(|e| e["attempt"] == expected_attempt)
            .collect();
        let kinds: Vec<_> = latest.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["SanityCheckSucceeded", "InstanceStarted", "InstanceExited"]
        );
    }
    let output = scratch
        .gpuvet()
        .args([
            "events",
            "--json",
            "--attempt",
            "2",
            "--type",
            "InstanceStarted",
        ])
        .output()
        .unwrap();
    let filtered: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(filtered.as_array().unwrap().len(), 1);
    let output = scratch
        .gpuvet()
        .args(["events", "--type", "Started"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "an unknown event type is a usage error"
    );
}

#[test]
fn an_aimaster_block_without_sanity_check_starts_the_app_directly() {
    let scratch = Scratch::temp();
    let config = scratch.config(
        "rt.json",
        r#"{"aimaster": {"runtime_check": {"micro_benchmarks": "c4d"}}}"#,
    );
    let output = run_app(&scratch, &config, 3);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(scratch.event_kinds(), ["InstanceStarted", "InstanceExited"]);
    assert!(stderr(&output).contains("c4d:"), "{}", stderr(&output));
}

#[test]
fn a_missing_app_is_127_and_recorded() {
    let scratch = Scratch::temp();
    let output = scratch
        .gpuvet()
        .args([
            "run",
            "--backend",
            "sim",
            "--checks",
            "gemm_flops",
            "--",
            "/nonexistent/app",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127), "{}", stderr(&output));
    assert!(stderr(&output).contains("cannot start `/nonexistent/app`"));
    assert_eq!(
        scratch.event_kinds(),
        ["SanityCheckSucceeded", "InstanceStartupFailed"]
    );
}

#[test]
fn sigterm_is_forwarded_to_the_app_and_its_exit_code_returned() {
    let scratch = Scratch::temp();
    let ready = scratch.path("ready");
    let script = format!(
        "trap 'exit 42' TERM; touch '{}'; while true; do sleep 0.1; done",
        ready.display()
    );
    let mut child = scratch
        .gpuvet()
        .args([
            "run",
            "--backend",
            "sim",
            "--checks",
            "gemm_flops",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ready.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the app never became ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(42),
        "gpuvet returns the app's code after forwarding SIGTERM"
    );
    assert_eq!(scratch.events().last().unwrap()["details"]["exit_code"], 42);
}
