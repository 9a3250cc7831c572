//! `--html FILE` end to end: `gpuvet check` and `gpuvet run` write the static report,
//! it names a scripted slow GPU, an unwritable path is an I/O error naming it and its
//! cause, and headless
//! Chromium shows the finding and a chart from a `file://` address.
//!
//! The browser test needs Chromium and Node with playwright-core (`tests/browser`, after
//! `npm ci`), so it is ignored by default; `.ci/run` installs both and runs it with
//! `--include-ignored`, where a missing one fails it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Scratch, assert_exit, error_lines, os_error, stderr};

/// Eight sim GPUs, GPU 5 at 85 % speed, and a baseline floor the chart draws.
const SLOW_GPU: &str = r#"{"gpuvet": {"backend": "sim", "sim": {"devices": 8, "seed": 7, "noise_pct": 1,
    "speed": {"5": 0.85}}, "baselines": {"gemm_flops": {"floor": 400}}}}"#;

/// The reason the report gives for the slow GPU, up to its numbers.
const SLOW_GPU_FINDING: &str = "below the peer median";

/// Runs `gpuvet check` on [`SLOW_GPU`] with `--html`, and returns the page's path.
fn check_with_slow_gpu(scratch: &Scratch) -> PathBuf {
    let config = scratch.config("sim.json", SLOW_GPU);
    let html = scratch.path("report.html");
    let output = scratch
        .gpuvet()
        .args(["check", "--checks", "gemm_flops", "--config"])
        .arg(&config)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    html
}

#[test]
fn check_html_names_the_slow_gpu_on_its_chart_and_in_the_findings() {
    let scratch = Scratch::temp();
    let html = std::fs::read_to_string(check_with_slow_gpu(&scratch)).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.contains("<td>node-test/dev5</td>"), "{html}");
    assert!(html.contains(SLOW_GPU_FINDING), "{html}");
    assert!(html.contains(r#"<span class="lane">host</span>"#), "{html}");
    assert!(html.contains(r#"<rect class="bar slow""#), "{html}");
    assert!(html.contains(">floor 400 TFLOPS</text>"), "{html}");
    // Self-contained: nothing to fetch, no script needed. (The SVG namespace is a name,
    // not an address anything fetches.)
    let markup = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for external in ["<script", "<link", " src=", "http://", "https://"] {
        assert!(!markup.contains(external), "{external} in {html}");
    }
    // Written atomically: no temp file is left beside it.
    let names: Vec<_> = std::fs::read_dir(scratch.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("report.html"))
        .collect();
    assert_eq!(names, ["report.html"]);
}

#[test]
fn run_writes_the_html_report_before_starting_the_app() {
    let scratch = Scratch::temp();
    let html = scratch.path("run.html");
    let output = scratch
        .gpuvet()
        .args([
            "run",
            "--backend",
            "sim",
            "--checks",
            "gemm_flops",
            "--html",
        ])
        .arg(&html)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(
        html.contains(r#"<span class="status passed">passed</span>"#),
        "{html}"
    );
    assert!(html.contains(r#"<svg class="chart""#), "{html}");
}

/// A report that cannot be written is the environment's problem (exit 73, not a bug
/// and not a usage error): the path on the `error:` line, the OS's reason on its own
/// `caused by:` line, then what to do.
#[test]
fn an_unwritable_html_path_is_an_io_error_naming_it_and_its_cause() {
    let scratch = Scratch::temp();
    let run = |html: &str| {
        scratch.run(&[
            "check",
            "--backend",
            "sim",
            "--checks",
            "gemm_flops",
            "--html",
            html,
        ])
    };
    let output = run("/nonexistent-dir/report.html");
    assert_exit(
        &output,
        73,
        "error: cannot write the HTML report to `/nonexistent-dir/report.html`\n",
    );
    assert_eq!(
        error_lines(&output)[1],
        format!("  caused by: {}", os_error(libc::ENOENT))
    );

    // Under a regular file: no permission stops root, but this does.
    std::fs::write(scratch.path("a-file"), "not a directory").unwrap();
    let html = scratch.path("a-file/report.html");
    let output = run(html.to_str().unwrap());
    assert_eq!(output.status.code(), Some(73), "{}", stderr(&output));
    assert_eq!(
        error_lines(&output),
        [
            format!(
                "error: cannot write the HTML report to `{}`",
                html.display()
            ),
            format!("  caused by: {}", os_error(libc::ENOTDIR)),
            "hint: check that the directory exists and is writable".to_owned(),
        ]
    );
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/gpuvet sits two levels below the workspace root")
        .to_path_buf()
}

/// What the browser test needs, or a message naming what is missing.
fn browser_prerequisites() -> Result<(), String> {
    let chromium =
        std::env::var("GPUVET_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let mut missing = Vec::new();
    if !Path::new(&chromium).exists() {
        missing.push(format!(
            "chromium at `{chromium}` (apt-get install chromium)"
        ));
    }
    if Command::new("node").arg("--version").output().is_err() {
        missing.push("node on PATH (apt-get install nodejs npm)".to_owned());
    }
    let playwright = repo_root().join("tests/browser/node_modules/playwright-core");
    if !playwright.exists() {
        missing.push(format!(
            "playwright-core in `{}` (npm ci --prefix tests/browser)",
            playwright.display()
        ));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("this test needs {}", missing.join(", ")))
    }
}

#[test]
#[ignore = "needs chromium and node with playwright-core (tests/browser: npm ci)"]
fn chromium_shows_the_slow_gpu_and_a_chart_from_a_file_url() {
    if let Err(missing) = browser_prerequisites() {
        panic!("{missing}");
    }
    let scratch = Scratch::temp();
    let html = check_with_slow_gpu(&scratch);
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html_report.png");
    let output = Command::new("node")
        .arg(repo_root().join("tests/browser/html_report.mjs"))
        .arg(&html)
        .arg(&screenshot)
        .args(["node-test/dev5", SLOW_GPU_FINDING])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "the browser check failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(&output)
    );
    assert!(
        screenshot.exists(),
        "no screenshot at {}",
        screenshot.display()
    );
}
