//! `--html FILE` end to end: `gpuvet check` and `gpuvet run` write the static report,
//! it names a scripted slow GPU, a slow node's page leads with the verdict and folds
//! its findings into a few rows whatever its GPU count, an unwritable path is an I/O
//! error naming it and its cause, and headless Chromium shows the finding and a chart
//! from a `file://` address, and the page of each fault scenario (a healthy group, a
//! slow node of 8 and of 64 GPUs, a slow link, a stopped node, a node that never
//! joined) with a screenshot of each under the target directory.
//!
//! The browser tests need Chromium and Node with playwright-core (`tests/browser`,
//! after `npm ci`), so they are ignored by default; `.ci/run` installs both and runs
//! them with `--include-ignored`, where a missing one fails them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::group::GROUP_TOKEN;
use crate::common::serve::free_loopback_addr;
use crate::common::{Scratch, assert_exit, error_lines, one_at_a_time, os_error, stderr};

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

/// Every check a group of sim nodes runs, as issue 30's slow-node run has them.
const GROUP_CHECKS: &str = "gemm_flops,all_reduce_1,all_reduce_2,kernel_launch,all_reduce,all_to_all_2,all_gather_2,all_gather,multi_all_reduce_2,multi_all_reduce,pytorch_gloo_2,network_connectivity,comp_comm_overlap";

/// The most rows a slow node's folded findings table may have, whatever its GPUs.
const MOST_FINDING_ROWS: usize = 12;

/// A config of [`GROUP_CHECKS`] on `devices` sim GPUs a node, with `sim` and
/// `settings` added to the `gpuvet.sim` and `gpuvet` objects (each after a comma).
fn group_config(devices: u32, sim: &str, settings: &str) -> String {
    format!(
        r#"{{"aimaster": {{"sanity_check": {{"micro_benchmarks": "{GROUP_CHECKS}", "timeout": 100}}}},
           "gpuvet": {{"backend": "sim"{settings}, "sim": {{"devices": {devices}{sim}}}}}}}"#
    )
}

/// `gpuvet check --sim-nodes 4` of `config` with `--html`: the page's path, once the
/// command exited with `code`.
fn sim_group_page(scratch: &Scratch, name: &str, config: &str, code: i32) -> PathBuf {
    let config = scratch.config(&format!("{name}.json"), config);
    let html = scratch.path(&format!("{name}.html"));
    let output = scratch
        .gpuvet()
        .args(["check", "--sim-nodes", "4", "--no-store", "--config"])
        .arg(&config)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(code),
        "{name}: {}",
        stderr(&output)
    );
    html
}

/// The rows of the page's folded findings table.
fn folded_rows(html: &str) -> usize {
    let Some(start) = html.find("<table class=\"findings folded\">") else {
        return 0;
    };
    let table = &html[start..start + html[start..].find("</table>").unwrap_or(0)];
    table.matches("<tr class=").count()
}

#[test]
fn a_slow_node_page_leads_with_the_verdict_and_folds_its_gpus_into_a_few_rows() {
    let scratch = Scratch::temp();
    for devices in [8, 64] {
        let config = group_config(devices, r#", "node_speed": {"local-2": 0.6}"#, "");
        let page = sim_group_page(&scratch, &format!("slow-node-{devices}"), &config, 1);
        let html = std::fs::read_to_string(page).unwrap();
        assert!(
            html.contains("<strong class=\"culprit\">local-2 is slow</strong>; hand it to <span class=\"team\">the host team</span>"),
            "{devices} GPUs: {html}"
        );
        assert!(
            html.contains(&format!(
                "<dd class=\"why\">slow in 10 of 13 checks, all {devices} GPUs and every link</dd>"
            )),
            "{devices} GPUs"
        );
        assert!(html.find("id=\"verdict\"") < html.find("id=\"findings\""));
        let rows = folded_rows(&html);
        assert!(
            (1..=MOST_FINDING_ROWS).contains(&rows),
            "{devices} GPUs: {rows} rows"
        );
        // Every entity is still on the page, collapsed.
        let findings = 2 * devices as usize + 8;
        assert!(
            html.contains(&format!("<summary>every entity ({findings})</summary>")),
            "{devices} GPUs"
        );
        assert!(html.contains(&format!("<td>local-2/dev{}</td>", devices - 1)));
    }
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

/// A fault scenario's page as the browser check reads it.
struct Scenario {
    name: &'static str,
    html: PathBuf,
    /// What the verdict must name; `None` for a healthy group, which has none.
    culprit: Option<&'static str>,
    texts: Vec<&'static str>,
}

/// The coordinator of a group of 3 whose ranks 1 and 2 are never started: the group
/// in one process (`--sim-nodes`) always joins, so a node that never joins takes a
/// real rendezvous. Returns its page.
fn never_joined_page(scratch: &Scratch) -> PathBuf {
    let _turn = one_at_a_time();
    let config = scratch.config("never-joined.json", &group_config(8, "", ""));
    let html = scratch.path("never-joined.html");
    let port = free_loopback_addr().port().to_string();
    let output = scratch
        .gpuvet()
        .env("GPUVET_TOKEN", GROUP_TOKEN)
        .args(["check", "--nnodes", "3", "--node-rank", "0"])
        .args(["--master-addr", "127.0.0.1", "--gpuvet-port", &port])
        .args(["--rendezvous-timeout", "2", "--no-store", "--config"])
        .arg(&config)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    html
}

#[test]
#[ignore = "needs chromium and node with playwright-core (tests/browser: npm ci)"]
fn chromium_shows_the_verdict_and_folded_findings_of_each_fault_scenario() {
    if let Err(missing) = browser_prerequisites() {
        panic!("{missing}");
    }
    let scratch = Scratch::temp();
    let slow_node = |devices: u32| group_config(devices, r#", "node_speed": {"local-2": 0.6}"#, "");
    let scenarios = [
        Scenario {
            name: "healthy",
            html: sim_group_page(&scratch, "healthy", &group_config(8, "", ""), 0),
            culprit: None,
            texts: vec!["No GPU, node or link was found slow or faulty."],
        },
        Scenario {
            name: "slow-node-8",
            html: sim_group_page(&scratch, "slow-node-8", &slow_node(8), 1),
            culprit: Some("local-2"),
            texts: vec!["local-2 is slow", "all 8 GPUs and every link"],
        },
        Scenario {
            name: "slow-node-64",
            html: sim_group_page(&scratch, "slow-node-64", &slow_node(64), 1),
            culprit: Some("local-2"),
            texts: vec!["local-2 is slow", "all 64 GPUs and every link"],
        },
        Scenario {
            name: "slow-link",
            // As the `slow-link` drill: the link at half speed, every pair measured.
            html: sim_group_page(
                &scratch,
                "slow-link",
                &group_config(
                    8,
                    r#", "link_speed": {"local-0<->local-3": 0.5}"#,
                    r#", "pairing": "full""#,
                ),
                1,
            ),
            culprit: Some("local-0<->local-3"),
            texts: vec!["the network team"],
        },
        Scenario {
            name: "stopped-node",
            // As the `hung-node` drill: `local-3` goes silent, as a stopped process does.
            html: sim_group_page(
                &scratch,
                "stopped-node",
                &group_config(
                    8,
                    r#", "node_faults": {"local-3": {"check": "all_reduce_2", "fault": "hang"}}"#,
                    "",
                ),
                1,
            ),
            culprit: Some("local-3"),
            texts: vec!["stopped answering"],
        },
        Scenario {
            name: "never-joined",
            html: never_joined_page(&scratch),
            culprit: Some("rank 1"),
            texts: vec!["rank 1 never joined", "the platform team"],
        },
    ];
    let spec: Vec<serde_json::Value> = scenarios
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "html": s.html,
                "culprit": s.culprit,
                "max_rows": MOST_FINDING_ROWS,
                "texts": s.texts,
            })
        })
        .collect();
    let spec_file = scratch.path("scenarios.json");
    std::fs::write(&spec_file, serde_json::to_string(&spec).unwrap()).unwrap();
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-report-scenarios");
    std::fs::create_dir_all(&shots).unwrap();
    let output = Command::new("node")
        .arg(repo_root().join("tests/browser/report_scenarios.mjs"))
        .arg(&spec_file)
        .arg(&shots)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "the browser check failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(&output)
    );
    for scenario in &scenarios {
        let shot = shots.join(format!("{}.png", scenario.name));
        assert!(shot.exists(), "no screenshot at {}", shot.display());
    }
}
