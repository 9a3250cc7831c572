//! Repeat offenders end to end: a node that fails start after start, across jobs, is
//! flagged in its report and its `SanityCheckFailed` event, and `gpuvet history` shows
//! its runs across jobs; `gpuvet untaint` without the feature `k8s` says how to get it.

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
