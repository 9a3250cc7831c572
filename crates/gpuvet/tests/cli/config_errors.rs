//! Every bad input is refused with a message naming the JSON path, exit code 2, and
//! nothing started (no store written).

use crate::common::{self, PAI_SAMPLE, Scratch, assert_exit, stderr};

fn refused(json: &str) -> String {
    let scratch = Scratch::temp();
    let config = scratch.config("bad.json", json);
    let output = scratch
        .gpuvet()
        .arg("check")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "stderr: {}", stderr(&output));
    assert!(output.stdout.is_empty(), "nothing on stdout");
    assert!(
        !scratch.store().exists(),
        "nothing was started, so no store was written"
    );
    stderr(&output)
}

fn sanity(body: &str) -> String {
    format!(r#"{{"aimaster": {{"sanity_check": {body}}}}}"#)
}

#[test]
fn misspelled_check_names_the_path_and_suggests() {
    let err = refused(&sanity(
        r#"{"micro_benchmarks": "gemm_flops,kernel_lanch"}"#,
    ));
    assert!(err.contains("invalid config at `aimaster.sanity_check.micro_benchmarks[1]`: unknown check `kernel_lanch`"), "{err}");
    assert!(err.contains("hint: did you mean `kernel_launch`?"), "{err}");
}

#[test]
fn unknown_fail_action() {
    let err = refused(&sanity(r#"{"fail_action": "restart"}"#));
    assert!(err.contains("`aimaster.sanity_check.fail_action`: unknown value `restart`; expected one of `fail`, `retain`, `ignore`, `rebuild`"), "{err}");
}

#[test]
fn zero_negative_and_absurd_timeouts() {
    for bad in ["0", "-1", "99999"] {
        let err = refused(&sanity(&format!(r#"{{"timeout": {bad}}}"#)));
        assert!(
            err.contains(&format!(
                "`aimaster.sanity_check.timeout`: `{bad}` is not a usable timeout"
            )),
            "{err}"
        );
    }
}

#[test]
fn duplicate_checks() {
    let err = refused(&sanity(r#"{"micro_benchmarks": "gemm_flops,gemm_flops"}"#));
    assert!(err.contains("check `gemm_flops` is listed twice"), "{err}");
}

#[test]
fn malformed_json_with_line_and_column() {
    let err = refused("{\n  \"aimaster\": {\n    \"sanity_check\": {\"timeout\": 5,}\n  }\n}");
    assert!(err.contains("the config is not valid JSON"), "{err}");
    assert!(err.contains("trailing comma (line 3, column 35)"), "{err}");
}

#[test]
fn empty_check_list() {
    let err = refused(&sanity(r#"{"micro_benchmarks": ""}"#));
    assert!(
        err.contains("`aimaster.sanity_check.micro_benchmarks`: the list of checks is empty"),
        "{err}"
    );
}

#[test]
fn runtime_check_other_than_c4d() {
    let err = refused(r#"{"aimaster": {"runtime_check": {"micro_benchmarks": "dcgm"}}}"#);
    assert!(err.contains("`aimaster.runtime_check.micro_benchmarks`: unknown runtime check `dcgm`; expected `c4d`"), "{err}");
}

#[test]
fn wrong_type() {
    let err = refused(&sanity(r#"{"timeout": "5"}"#));
    assert!(
        err.contains("`aimaster.sanity_check.timeout`: invalid type: string \"5\", expected f64"),
        "{err}"
    );
}

#[test]
fn unknown_key() {
    let err = refused(r#"{"aimaster": {"sanity_check": {}}, "gpuvett": {}}"#);
    assert!(
        err.contains("invalid config at `gpuvett`: unknown field `gpuvett`"),
        "{err}"
    );
}

#[test]
fn missing_config_file() {
    let scratch = Scratch::temp();
    let output = scratch.run(&["check", "--config", "nope.json"]);
    assert_exit(&output, 2, "cannot read the config file `nope.json`");
}

#[test]
fn bad_flags_are_usage_errors_too() {
    let scratch = Scratch::temp();
    let output = scratch.run(&["check", "--checks", "gemm_flops,bogus", "--no-store"]);
    assert_exit(
        &output,
        2,
        "invalid config at `--checks[1]`: unknown check `bogus`",
    );
    let output = scratch.run(&["check", "--timeout", "0", "--no-store"]);
    assert_eq!(output.status.code(), Some(2));
    let output = scratch.run(&["check", "--backend", "tpu"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "clap refuses unknown backends"
    );
    let output = scratch.gpuvet().args(["run"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "run needs a command");
}

#[test]
fn pai_sample_is_accepted_by_the_binary() {
    // The sample from the PAI documents, verbatim; all_reduce runs on 2 cpu devices.
    let scratch = Scratch::temp();
    let config = scratch.config("pai.json", PAI_SAMPLE);
    let output = scratch
        .gpuvet()
        .args([
            "check",
            "--backend",
            "sim",
            "--no-store",
            "--json",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    let report = common::json(&output);
    assert_eq!(report["checks"].as_array().unwrap().len(), 13);
    assert_eq!(report["timeout_secs"], 6000.0);
}
