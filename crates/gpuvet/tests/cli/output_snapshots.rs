//! What scripts and people read from gpuvet, as snapshots (`snapshots/`): the JSON
//! report of a scripted run (an API: orchestrators parse it), `--help`, and the
//! messages of a few usage errors. A change to any of them shows up as a snapshot
//! diff to review (`cargo insta review`); CONTRIBUTING.md says how.

use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{Scratch, json, stderr};

/// `gpuvet` in `scratch`'s directory with an empty environment: `--help` shows the
/// values of the environment variables behind flags, and the environment could ask
/// for colour.
fn bare_gpuvet(scratch: &Scratch) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuvet"));
    command.current_dir(scratch.dir.path()).env_clear();
    command
}

/// The exit status and stderr of a refused command, as one snapshot.
fn refusal(output: &Output) -> String {
    assert!(output.stdout.is_empty(), "nothing on stdout");
    format!("{}\n{}", output.status, stderr(output))
}

/// Replaces `report[key]` (a number that differs from run to run) with a placeholder.
fn redact_number(report: &mut Value, key: &str) {
    assert!(report[key].is_number(), "`{key}` is a number: {report:#}");
    report[key] = Value::from(format!("[{key}]"));
}

#[test]
fn the_json_report_of_a_scripted_run() {
    let scratch = Scratch::temp();
    // No noise, so every number is exact: one slow device, one that computes wrong, and
    // a check that one node cannot run.
    let config = r#"{"gpuvet": {"backend": "sim", "sim": {"devices": 4, "seed": 7,
        "speed": {"2": 0.85},
        "faults": [{"check": "gemm_flops", "device": 3, "fault": "wrong_result"}]}}}"#;
    scratch.config("sim.json", config);
    let output = scratch
        .gpuvet()
        .args(["check", "--json", "--no-store", "--config", "sim.json"])
        .args(["--checks", "gemm_flops,all_reduce_1,all_reduce_2"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let mut report = json(&output);
    assert_eq!(report["gpuvet_version"], env!("CARGO_PKG_VERSION"));
    report["gpuvet_version"] = Value::from("[version]");
    // Every report carries its own id, so that a store or server keeps it once.
    let id = report["report_id"].as_str().unwrap_or_default();
    assert!(gpuvet_model::ids::is_id(id), "report_id `{id}`");
    report["report_id"] = Value::from("[id]");
    redact_number(&mut report, "started_at_ms");
    redact_number(&mut report, "duration_secs");
    for check in report["checks"].as_array_mut().unwrap() {
        redact_number(check, "duration_secs");
    }
    // The environment is the test runner's (cargo's library paths among it); the
    // snapshot keeps that there is one, and that the scratch store's path is in it.
    let environment = &mut report["context"]["environment"];
    assert!(
        environment["GPUVET_STORE"]
            .as_str()
            .is_some_and(|path| path.ends_with("gpuvet.db")),
        "{environment:#}"
    );
    *environment = Value::from("[environment]");
    insta::assert_json_snapshot!(report);
}

#[test]
fn help() {
    let scratch = Scratch::temp();
    for (name, args) in [
        ("help", &["--help"][..]),
        ("check_help", &["check", "--help"]),
    ] {
        let output = bare_gpuvet(&scratch).args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        insta::assert_snapshot!(name, String::from_utf8(output.stdout).unwrap());
    }
}

#[test]
fn usage_error_messages() {
    let scratch = Scratch::temp();
    scratch.config("unknown-field.json", r#"{"gpuvett": {}}"#);
    scratch.config(
        "misspelled-check.json",
        r#"{"aimaster": {"sanity_check": {"micro_benchmarks": "gemm_flops,kernel_lanch"}}}"#,
    );
    for (name, args) in [
        (
            "error_unknown_config_field",
            &["check", "--config", "unknown-field.json"][..],
        ),
        (
            "error_misspelled_check_in_config",
            &["check", "--config", "misspelled-check.json"],
        ),
        (
            "error_unknown_check_in_flag",
            &["check", "--no-store", "--checks", "gemm_flops,bogus"],
        ),
        ("error_unknown_backend", &["check", "--backend", "tpu"]),
    ] {
        let output = bare_gpuvet(&scratch).args(args).output().unwrap();
        insta::assert_snapshot!(name, refusal(&output));
    }
}
