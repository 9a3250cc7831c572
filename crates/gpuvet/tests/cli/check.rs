//! `gpuvet check` end to end: real measurements on the cpu backend, skipped and
//! not-implemented checks, hangs through the sim backend, JUnit output, and the store.

use crate::common::{PAI_SAMPLE, Scratch, assert_exit, json, stderr, stdout};

#[test]
fn cpu_backend_measures_real_numbers_and_skips_what_one_node_cannot_run() {
    let scratch = Scratch::temp();
    let output = scratch
        .gpuvet()
        .args(["check", "--backend", "cpu", "--cpu-devices", "2", "--json"])
        .args([
            "--checks",
            "gemm_flops,kernel_launch,all_reduce_1,all_reduce_2,all_gather",
        ])
        .output()
        .unwrap();
    let report = json(&output);
    assert_eq!(report["backend"], "cpu");
    assert_eq!(report["node"], "node-test");
    assert_eq!(report["devices"].as_array().unwrap().len(), 2);
    let checks = report["checks"].as_array().unwrap();
    let status: Vec<&str> = checks
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    // The local checks ran, and `all_gather` among the node's devices, since the node
    // is the whole group; a slow core on a busy machine may fail one, but each
    // measured a positive number.
    for (i, name) in [
        "gemm_flops",
        "kernel_launch",
        "all_reduce_1",
        "",
        "all_gather",
    ]
    .iter()
    .enumerate()
    .filter(|(_, name)| !name.is_empty())
    {
        assert_eq!(checks[i]["name"], *name);
        assert!(
            status[i] == "passed" || status[i] == "failed",
            "{name}: {}",
            status[i]
        );
        for entity in checks[i]["entities"].as_array().unwrap() {
            let value = entity["measurement"]["value"].as_f64().unwrap();
            assert!(value > 0.0, "{name}: {value}");
        }
    }
    assert_eq!(
        checks[0]["entities"].as_array().unwrap().len(),
        2,
        "one GEMM per device"
    );
    assert_eq!(checks[2]["entities"][0]["entity"]["kind"], "node");
    assert_eq!(status[3], "skipped");
    assert_eq!(
        checks[3]["reason"],
        "needs at least 2 nodes; this group has 1 node"
    );
    assert_eq!(checks[4]["entities"][0]["entity"]["kind"], "node");
    assert_eq!(
        checks[4]["params"]["group"],
        "this node's devices (a group of 1 node)"
    );
    let expected_code = if status.iter().all(|s| *s == "passed" || *s == "skipped") {
        0
    } else {
        1
    };
    assert_eq!(
        output.status.code(),
        Some(expected_code),
        "passed (0) unless a check failed (1)\n{report:#}"
    );
}

#[test]
fn one_node_gives_every_check_of_the_pai_sample_a_verdict() {
    for backend in ["cpu", "sim"] {
        let scratch = Scratch::temp();
        let config = scratch.config("pai.json", PAI_SAMPLE);
        let output = scratch
            .gpuvet()
            .args(["check", "--json", "--backend", backend, "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let report = json(&output);
        let checks = report["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 13);
        for check in checks {
            assert_ne!(check["status"], "not_implemented", "{backend}: {check:#}");
        }
        let status_of = |name: &str| {
            checks.iter().find(|c| c["name"] == name).unwrap()["status"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        // The whole group is this node: its devices run the group's collectives, and a
        // rail (GPU i of every node) has nothing to cross.
        assert_ne!(status_of("all_reduce"), "skipped", "{backend}");
        assert_ne!(status_of("all_gather"), "skipped", "{backend}");
        assert_eq!(status_of("multi_all_reduce"), "skipped", "{backend}");
        // A healthy node passes; on the cpu backend a core that looks slow is measured
        // again before it could fail the run.
        assert_eq!(
            output.status.code(),
            Some(0),
            "{backend}: {report:#}\n{}",
            stderr(&output)
        );
        assert_eq!(report["outcome"], "passed");
    }
}

#[test]
fn table_output_and_junit_file() {
    let scratch = Scratch::temp();
    let junit = scratch.path("report.xml");
    let output = scratch
        .gpuvet()
        .args([
            "check",
            "--backend",
            "sim",
            "--checks",
            "gemm_flops,all_reduce_2",
            "--junit",
        ])
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(table.contains("backend sim"), "{table}");
    assert!(table.contains("gemm_flops"), "{table}");
    assert!(
        table.contains("outcome: passed (1 passed, 1 skipped)"),
        "{table}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"<testcase name="gemm_flops""#), "{xml}");
    assert!(
        xml.contains(r#"<skipped message="skipped: needs at least 2 nodes"#),
        "{xml}"
    );
}

#[test]
fn a_hanging_check_times_out_within_the_timeout_and_the_rest_do_not_run() {
    let scratch = Scratch::temp();
    let config = scratch.config(
        "hang.json",
        r#"{"aimaster": {"sanity_check": {"micro_benchmarks": "gemm_flops,kernel_launch", "timeout": 0.05}},
            "gpuvet": {"backend": "sim", "sim": {"devices": 2, "faults": [
                {"check": "gemm_flops", "device": 0, "fault": "hang"},
                {"check": "gemm_flops", "device": 1, "fault": "hang"}]}}}"#,
    );
    let output = scratch
        .gpuvet()
        .args(["check", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["outcome"], "failed");
    assert_eq!(report["checks"][0]["status"], "timed_out", "{report}");
    assert_eq!(report["checks"][1]["status"], "not_run");
    // The run ended at its 3 s deadline (generous bound: this guards against a hang).
    assert!(report["duration_secs"].as_f64().unwrap() < 13.0, "{report}");
}

#[test]
fn a_slow_and_a_faulty_device_are_named_with_their_lane() {
    let scratch = Scratch::temp();
    let config = scratch.config(
        "sim.json",
        r#"{"gpuvet": {"backend": "sim", "sim": {"devices": 8, "seed": 7, "noise_pct": 1,
            "speed": {"5": 0.85},
            "faults": [{"check": "gemm_flops", "device": 2, "fault": "wrong_result"}]}}}"#,
    );
    let output = scratch
        .gpuvet()
        .args(["check", "--checks", "gemm_flops", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(
        table.contains("gemm_flops: node-test/dev2 faulty: wrong result"),
        "{table}"
    );
    assert!(
        table.contains("gemm_flops: node-test/dev5 slow: 600 TFLOPS"),
        "{table}"
    );
    for other in [0, 1, 3, 4, 6, 7] {
        assert!(
            !table.contains(&format!("node-test/dev{other}")),
            "no other device is named: {table}"
        );
    }
}

#[test]
fn results_are_stored_per_attempt_and_never_mixed() {
    let scratch = Scratch::temp();
    for _ in 0..2 {
        let output = scratch
            .gpuvet()
            .args(["check", "--backend", "sim", "--checks", "gemm_flops"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
    let output = scratch.run(&["results", "--json"]);
    let latest = json(&output);
    assert_eq!(
        latest.as_array().unwrap().len(),
        1,
        "only the latest attempt by default"
    );
    assert_eq!(latest[0]["attempt"], 2);
    assert_eq!(latest[0]["result"]["name"], "gemm_flops");
    let output = scratch.run(&["results", "--json", "--attempt", "1"]);
    assert_eq!(json(&output)[0]["attempt"], 1);
    let output = scratch.run(&["results", "--json", "--all-attempts"]);
    assert_eq!(json(&output).as_array().unwrap().len(), 2);
    let output = scratch.gpuvet().args(["results"]).output().unwrap();
    assert!(
        stdout(&output).contains("gemm_flops"),
        "{}",
        stdout(&output)
    );
    let output = scratch.run(&["results", "--check", "gemm_flop"]);
    assert_exit(&output, 2, "hint: did you mean `gemm_flops`?");
}

#[test]
fn reading_a_store_that_does_not_exist_is_a_usage_error() {
    let scratch = Scratch::temp();
    let output = scratch.gpuvet().args(["events"]).output().unwrap();
    assert_exit(&output, 2, "there is no store at");
}

#[test]
fn an_unwritable_store_is_exit_74() {
    let scratch = Scratch::temp();
    std::fs::write(scratch.path("file"), "x").unwrap();
    let output = scratch
        .gpuvet()
        .args([
            "check",
            "--backend",
            "sim",
            "--checks",
            "gemm_flops",
            "--store",
        ])
        .arg(scratch.path("file/gpuvet.db"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(74), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot open the store at"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_cuda_backend_without_a_gpu_is_a_clear_error() {
    let scratch = Scratch::temp();
    let output = scratch.run(&["check", "--backend", "cuda", "--no-store"]);
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("error: the `cuda` backend is not available"),
        "{err}"
    );
    assert!(err.contains("hint:"), "{err}");
}

#[test]
fn the_catalog_lists_pais_thirteen_checks_and_gpuvets_own() {
    let scratch = Scratch::temp();
    let output = scratch.run(&["checks", "--json"]);
    let checks = json(&output);
    let checks = checks.as_array().unwrap();
    assert_eq!(checks.len(), 14);
    let beyond_pai: Vec<&serde_json::Value> = checks
        .iter()
        .filter(|c| c["pai_estimate_secs"].is_null())
        .map(|c| &c["name"])
        .collect();
    assert_eq!(beyond_pai, ["inventory_consistency"]);
    let output = scratch.gpuvet().args(["checks"]).output().unwrap();
    let text = stdout(&output);
    assert!(
        text.contains("gemm_flops (default)") && text.contains("runtime check: c4d"),
        "{text}"
    );
}

#[test]
fn auto_without_a_gpu_runs_on_the_cpu_backend_and_says_why() {
    let scratch = Scratch::temp();
    let output = scratch.run(&[
        "check",
        "--backend",
        "auto",
        "--checks",
        "kernel_launch",
        "--cpu-devices",
        "1",
        "--json",
        "--no-store",
    ]);
    let report = json(&output);
    assert_eq!(report["backend"], "cpu");
    assert!(
        stderr(&output)
            .contains("note: no usable GPU, so the checks run on the cpu backend: libcuda"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn events_and_results_find_the_store_named_in_the_config() {
    let scratch = Scratch::temp();
    let store = scratch.path("from-config.db");
    let config = scratch.config(
        "store.json",
        &format!(
            r#"{{"gpuvet": {{"backend": "sim", "store": "{}"}}}}"#,
            store.display()
        ),
    );
    let mut check = scratch.gpuvet();
    check
        .env_remove("GPUVET_STORE")
        .args(["check", "--checks", "gemm_flops", "--config"])
        .arg(&config);
    assert_eq!(check.output().unwrap().status.code(), Some(0));
    let mut results = scratch.gpuvet();
    results
        .env_remove("GPUVET_STORE")
        .args(["results", "--json", "--config"])
        .arg(&config);
    let output = results.output().unwrap();
    assert_eq!(
        json(&output)[0]["result"]["name"],
        "gemm_flops",
        "{}",
        stderr(&output)
    );
}

#[test]
fn inventory_consistency_compares_one_node_with_the_config() {
    let scratch = Scratch::temp();
    let config = scratch.config(
        "inventory.json",
        r#"{"gpuvet": {"backend": "cpu", "cpu_devices": 2,
            "expected_inventory": {"gpu_count": 8}}}"#,
    );
    let output = scratch
        .gpuvet()
        .args([
            "check",
            "--json",
            "--no-store",
            "--checks",
            "inventory_consistency",
        ])
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    let entity = &report["checks"][0]["entities"][0];
    assert_eq!(entity["verdict"], "faulty");
    assert_eq!(entity["lane"], "platform");
    assert_eq!(
        entity["reason"],
        "node `node-test` has GPU count `2` but the config expects `8`"
    );
    // Without expectations one node has nothing to be compared with.
    let output = scratch
        .gpuvet()
        .args(["check", "--json", "--no-store", "--backend", "cpu"])
        .args(["--checks", "inventory_consistency"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json(&output)["checks"][0]["status"], "skipped");
}
