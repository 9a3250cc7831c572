//! `pytorch_gloo_2` across two `--local-nodes` agents: with torch on every node, without
//! it, and with a Python whose Gloo run hangs or fails on one side, which must end in
//! a finding that names the cause, never in a hang.
//!
//! The torch test needs a Python that imports torch, so it is ignored by default:
//! `.ci/run` installs one, names it in `GPUVET_TEST_TORCH_PYTHON` and runs the test
//! with `--include-ignored`. The other tests stand in for Python with a shell script,
//! so they run everywhere.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::{self, Scratch, json, one_at_a_time, stderr};
use serde_json::Value;

/// Runs the check over two local nodes with `python`; returns the report after
/// checking the exit code.
fn check_pair(scratch: &Scratch, python: &Path, timeout_minutes: &str, code: i32) -> Value {
    let output = scratch
        .gpuvet()
        .args(["check", "--json", "--no-store", "--backend", "cpu"])
        .args(["--local-nodes", "2", "--checks", "pytorch_gloo_2"])
        .args(["--timeout", timeout_minutes])
        .env("GPUVET_PYTHON", python)
        .output()
        .expect("running gpuvet");
    let report = json(&output);
    assert_eq!(
        output.status.code(),
        Some(code),
        "{report:#}\n{}",
        stderr(&output)
    );
    report
}

/// A stand-in for Python: `$3` is the JSON the agent passes to `rank.py`.
fn fake_python(scratch: &Scratch, body: &str) -> PathBuf {
    let path = scratch.path("python");
    std::fs::write(&path, format!("#!/bin/sh\ncase \"$3\" in\n{body}\nesac\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
#[ignore = "needs GPUVET_TEST_TORCH_PYTHON"]
fn with_torch_on_every_node_gloo_runs_and_is_named() {
    let python = common::torch_python();
    let _turn = one_at_a_time();
    let scratch = Scratch::temp();
    let report = check_pair(&scratch, Path::new(&python), "5", 0);
    let check = &report["checks"][0];
    assert_eq!(check["status"], "passed", "{check:#}");
    let params = &check["params"];
    assert_eq!(params["engine"], "torch-gloo", "{check:#}");
    assert!(
        params["torch"].as_str().is_some_and(|v| !v.is_empty()),
        "{check:#}"
    );
    assert_eq!(params["GLOO_SOCKET_IFNAME"], "lo", "{check:#}");
    assert!(params.get("engine_note").is_none(), "{check:#}");
    let values = common::entity_values(check);
    assert_eq!(values.len(), 2, "{check:#}");
    assert!(values.iter().all(|v| *v > 0.0), "{check:#}");
}

#[test]
fn without_torch_the_builtin_engine_runs_and_the_report_says_why() {
    let _turn = one_at_a_time();
    let scratch = Scratch::temp();
    let python = scratch.path("no-such-python");
    let report = check_pair(&scratch, &python, "5", 0);
    let check = &report["checks"][0];
    assert_eq!(check["status"], "passed", "{check:#}");
    assert_eq!(check["params"]["engine"], "gpuvet-tcp", "{check:#}");
    let note = check["params"]["engine_note"].as_str().unwrap();
    assert!(note.contains("2 of 2 nodes cannot run torch"), "{note}");
    // Both nodes failed the same way: said once, for both.
    assert!(note.contains("Gloo: 2 of 2 nodes: `"), "{note}");
    assert!(note.contains("cannot run `"), "{note}");
}

/// Two agents whose "Python" answers the probe; rank 0's prints a store port and
/// hangs, rank 1's runs `rank1` (shell). The run must fail (exit code 1).
fn fake_pair(rank1: &str, timeout_minutes: &str) -> Value {
    let _turn = one_at_a_time();
    let scratch = Scratch::temp();
    let python = fake_python(
        &scratch,
        &format!(
            "  *'\"op\":\"probe\"'*) echo '{{\"torch\": \"0.0-fake\"}}' ;;\n  \
             *'\"rank\":0'*) echo '{{\"port\": 1}}'; exec sleep 600 ;;\n  *) {rank1} ;;"
        ),
    );
    check_pair(&scratch, &python, timeout_minutes, 1)
}

#[test]
fn a_gloo_run_that_hangs_is_killed_and_reported() {
    // 0.25 minutes: the pair's budget is what is left of the overall timeout.
    let report = fake_pair("exec sleep 600", "0.25");
    let status = &report["checks"][0]["status"];
    assert!(status == "failed" || status == "timed_out", "{report:#}");
    assert!(
        report.to_string().contains("hung and was killed"),
        "{report:#}"
    );
}

#[test]
fn a_side_whose_script_fails_is_named_before_the_side_that_saw_it_leave() {
    let report = fake_pair(
        "echo 'RuntimeError: Gloo connectFullMesh failed' >&2; exit 1",
        "2",
    );
    assert_eq!(report["checks"][0]["status"], "failed", "{report:#}");
    let text = report.to_string();
    let cause = text
        .find("local-1: `")
        .unwrap_or_else(|| panic!("the failing side is not named first: {report:#}"));
    let detail = &text[cause..];
    assert!(
        detail.contains(
            "exited with exit status: 1 before printing its result: RuntimeError: \
             Gloo connectFullMesh failed"
        ),
        "{report:#}"
    );
    let echo = detail
        .find("local-0: local-1 (`")
        .unwrap_or_else(|| panic!("the other side's view is missing: {report:#}"));
    assert!(
        detail[echo..].contains("closed the data-plane connection"),
        "{report:#}"
    );
}
