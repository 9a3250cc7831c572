//! `scripts/gpu-smoke.sh` end to end on a machine without a GPU, with a fake
//! `nvidia-smi`: the one script a GPU session runs must not first meet its own bugs
//! there. It writes a valid config from what `nvidia-smi` says, runs every step,
//! survives the cuda backend being unavailable, and leaves a summary in `$OUT`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::common::Scratch;
use gpuvet_backend::setup_extra;
use gpuvet_model::exit_codes::BACKEND_UNAVAILABLE;

/// Answers the three questions the script asks of `nvidia-smi`, as one H200 would.
const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
case "$*" in
  "-L") echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-1111-2222-3333-444444444444)" ;;
  *driver_version*) echo "580.159.03" ;;
  *) echo "fake nvidia-smi: $*" ;;
esac
"#;

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("crates/gpuvet sits two levels below the repository root")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&read(path))
        .unwrap_or_else(|err| panic!("{} is not JSON: {err}", path.display()))
}

/// A scratch directory with a fake `nvidia-smi` in `bin/`.
fn scratch_with_fake_nvidia_smi() -> Scratch {
    let scratch = Scratch::temp();
    let fake_bin = scratch.path("bin");
    std::fs::create_dir(&fake_bin).unwrap();
    let smi = fake_bin.join("nvidia-smi");
    std::fs::write(&smi, FAKE_NVIDIA_SMI).unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    scratch
}

/// `bash SCRIPT` with the fake `nvidia-smi` first on `path`, writing to `scratch/out`.
fn smoke(scratch: &Scratch, script: &Path, path: &str) -> Command {
    let mut command = Command::new("bash");
    command
        .arg(script)
        .current_dir(scratch.dir.path())
        .env("PATH", format!("{}:{path}", scratch.path("bin").display()))
        .env("OUT", scratch.path("out"))
        .env("GPUVET_SMOKE_WATCH_SECS", "2")
        .env("GPUVET_SMOKE_WATCH_COST_SECS", "1")
        .env(
            "GPUVET_SMOKE_METRICS_PORT",
            gpuvet_testkit::free_port().to_string(),
        )
        .env_remove("GPUVET_BIN")
        .env_remove("GPUVET_CUDA_LIBRARY_PATH");
    command
}

#[test]
fn the_smoke_script_runs_every_step_and_summarises_without_a_gpu() {
    let scratch = scratch_with_fake_nvidia_smi();
    let out = scratch.path("out");
    let work = scratch.path("work");
    let run = smoke(
        &scratch,
        &repo_root().join("scripts/gpu-smoke.sh"),
        &std::env::var("PATH").unwrap_or_default(),
    )
    .env("GPUVET_BIN", env!("CARGO_BIN_EXE_gpuvet"))
    .env("GPUVET_SMOKE_WORK", &work)
    .output()
    .expect("running bash");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let context = format!("stdout: {stdout}\nstderr: {stderr}");

    // No cuda backend here, so the smoke test fails, and says how far it got.
    assert_eq!(run.status.code(), Some(1), "{context}");
    let config = read_json(&work.join("config.json"));
    assert_eq!(
        config["gpuvet"]["expected_inventory"],
        serde_json::json!({ "gpu_count": 1, "driver_version": "580.159.03" }),
        "{context}"
    );
    assert_eq!(config["gpuvet"]["backend"], "cuda");
    assert!(
        read(&work.join("gpuvet.log")).contains("the `cuda` backend is not available"),
        "{context}"
    );
    let log = read(&work.join("smoke.log"));
    for step in [
        "using prebuilt",
        &format!("gpuvet exited with {BACKEND_UNAVAILABLE}"),
        "running gpuvet watch for 2 s (NVML)",
        "measuring gpuvet watch's cost with NVML for 1 s",
        "one GPU: the collectives across nodes over NCCL need two or more, skipped",
        &format!("gemm_flops in fp8: gpuvet exited with {BACKEND_UNAVAILABLE}"),
        &format!("gemm_flops in fp32: gpuvet exited with {BACKEND_UNAVAILABLE}"),
    ] {
        assert!(log.contains(step), "no `{step}` in the log:\n{log}");
    }
    assert!(
        !log.contains("no python"),
        "the summary needs python3: {log}"
    );

    // A machine that returns a few files from `$OUT` gets the results and one archive.
    let mut returned: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    returned.sort();
    assert_eq!(
        returned,
        [
            "gpu-smoke.tar.gz",
            "report.json",
            "smoke.log",
            "summary.json"
        ],
        "{context}"
    );
    let listing = Command::new("tar")
        .arg("-tzf")
        .arg(out.join("gpu-smoke.tar.gz"))
        .output()
        .expect("running tar");
    let listing = String::from_utf8_lossy(&listing.stdout);
    for file in [
        "work/config.json",
        "work/report-gemm-fp8.json",
        "work/watch.log",
    ] {
        assert!(
            listing.contains(file),
            "no `{file}` in the archive: {listing}"
        );
    }

    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["gpuvet_exit_code"], BACKEND_UNAVAILABLE);
    assert_eq!(summary["backend"], serde_json::Value::Null);
    assert_eq!(summary["torch"]["available"], false, "{summary:#}");
    assert!(
        summary["check_seconds"].as_f64().is_some_and(|s| s > 0.0),
        "the check's time from start to verdict: {summary:#}"
    );
    assert_eq!(
        summary["worker_setup_ms"],
        serde_json::json!({}),
        "no check ran, so no setup cost: {summary:#}"
    );
    assert_eq!(summary["watch"]["findings"], 0, "{summary:#}");
    assert!(
        stdout.contains("GEMM ratio not measured"),
        "the summary says why there is no ratio: {context}"
    );
    assert!(
        stdout.contains("gemm_flops fp8: no report"),
        "the summary covers every precision: {context}"
    );
    // The watch step ran against the real binary and said why it could not watch.
    assert!(
        read(&work.join("watch.log")).contains("without NVML"),
        "{context}"
    );
}

/// The lent GPU machines have no Rust and minutes of time: the script builds nothing,
/// takes the binary brought to `target/release/gpuvet`, and says how to bring one.
#[test]
fn the_smoke_script_builds_nothing_and_uses_a_prebuilt_binary_or_says_how_to_bring_one() {
    let scratch = scratch_with_fake_nvidia_smi();
    let path = std::env::var("PATH").unwrap_or_default();
    let repo = scratch.path("repo");
    std::fs::create_dir_all(repo.join("scripts")).unwrap();
    let script = repo.join("scripts/gpu-smoke.sh");
    std::fs::copy(repo_root().join("scripts/gpu-smoke.sh"), &script).unwrap();

    let missing = smoke(&scratch, &script, &path)
        .output()
        .expect("running bash");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no gpuvet binary at") && stderr.contains("hint: build it where Rust is"),
        "{stderr}"
    );
    assert!(
        !repo.join("target").exists(),
        "the script started a build: {stderr}"
    );

    std::fs::create_dir_all(repo.join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_gpuvet"),
        repo.join("target/release/gpuvet"),
    )
    .unwrap();
    let prebuilt = smoke(&scratch, &script, &path)
        .output()
        .expect("running bash");
    let log = read(&scratch.path("out/files/smoke.log"));
    assert_eq!(prebuilt.status.code(), Some(1), "{log}");
    assert!(log.contains("using prebuilt"), "{log}");
    assert!(
        log.contains(&format!("gpuvet exited with {BACKEND_UNAVAILABLE}")),
        "{log}"
    );
    assert!(scratch.path("out/files/summary.json").exists(), "{log}");
    assert!(scratch.path("out/summary.json").exists(), "{log}");
}

/// A report as the cuda backend makes one: the sim backend's real report for
/// `gemm_flops` and `kernel_launch`, named cuda, each measurement with the worker's
/// setup figures (NVRTC's on the launch check only, as the backend reports them).
fn cuda_like_report(scratch: &Scratch) -> serde_json::Value {
    let run = Command::new(env!("CARGO_BIN_EXE_gpuvet"))
        .args(["check", "--backend", "sim", "--no-store", "--json"])
        .args(["--checks", "gemm_flops,kernel_launch"])
        .current_dir(scratch.dir.path())
        .output()
        .expect("running gpuvet");
    let mut report: serde_json::Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&run.stderr)));
    report["backend"] = "cuda".into();
    for check in report["checks"].as_array_mut().expect("checks") {
        let nvrtc = check["name"] == "kernel_launch";
        for (gpu, entity) in check["entities"]
            .as_array_mut()
            .expect("entities")
            .iter_mut()
            .enumerate()
        {
            let extra = &mut entity["measurement"]["extra"];
            extra[setup_extra::PROBE_MS] = 400.0.into();
            extra[setup_extra::CONTEXT_MS] = (100.0 + gpu as f64).into();
            if nvrtc {
                extra[setup_extra::NVRTC_MS] = 30.0.into();
            }
        }
    }
    report
}

/// The summary's reading of a cuda report, the part a GPU session would otherwise
/// test first: each check's worker setup cost, its verdict, and a passing exit.
#[test]
fn the_smoke_summary_reports_each_checks_worker_setup_cost() {
    let scratch = scratch_with_fake_nvidia_smi();
    let report = scratch.path("cuda-report.json");
    std::fs::write(&report, cuda_like_report(&scratch).to_string()).unwrap();
    // Answers `check` with the report and watches nothing, as a GPU node's gpuvet
    // would answer in shape.
    let fake = scratch.path("bin/gpuvet-cuda");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  check) cat '{}' ;;\n  *) exit 2 ;;\nesac\n",
            report.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();

    let run = smoke(
        &scratch,
        &repo_root().join("scripts/gpu-smoke.sh"),
        &std::env::var("PATH").unwrap_or_default(),
    )
    .env("GPUVET_BIN", &fake)
    .output()
    .expect("running bash");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let context = format!(
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    // On cuda, with no torch to compare with, the smoke test passes.
    assert_eq!(run.status.code(), Some(0), "{context}");

    let summary = read_json(&scratch.path("out/summary.json"));
    assert_eq!(summary["backend"], "cuda", "{summary:#}");
    // The slowest GPU's context (100 ms + its index) is the one a check waits for.
    let gpus = summary["gemm_flops"]["values"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(gpus >= 2, "a figure per GPU: {summary:#}");
    let slowest = 100.0 + (gpus - 1) as f64;
    assert_eq!(
        summary["worker_setup_ms"],
        serde_json::json!({
            "gemm_flops": { "probe": 400.0, "context": slowest, "total": 400.0 + slowest },
            "kernel_launch": {
                "probe": 400.0, "context": slowest, "nvrtc_compile": 30.0,
                "total": 430.0 + slowest
            },
        }),
        "{summary:#}"
    );
    for check in ["gemm_flops", "kernel_launch"] {
        assert_eq!(summary[check]["status"], "passed", "{summary:#}");
        assert!(
            summary[check]["duration_secs"].as_f64().is_some(),
            "{summary:#}"
        );
        assert_eq!(
            summary[check]["values"].as_array().map(Vec::len),
            Some(gpus),
            "{summary:#}"
        );
    }
    assert!(
        stdout.contains(&format!(
            "worker setup for kernel_launch: probe 400.0 ms, context {slowest:.1} ms, \
             nvrtc_compile 30.0 ms, total {:.1} ms",
            430.0 + slowest
        )),
        "{context}"
    );
}
