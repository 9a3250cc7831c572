//! How long the server's pages take to render for a large job, and how big they are:
//! `cargo run --release -p gpuvet-html --example site_scale [--write DIR] [NODES ...]`
//! (default 64, 256 and 1024 nodes of 8 GPUs, the group of `html_scale` with five
//! failed nodes and one node in 64 still running). Per size it times the instances page
//! and one instance's page (with the group's report), and, as references measured in
//! the same run, the static report (`page`) and `serde_json::to_string` of the same
//! report; the last column is each time over the JSON's. `--write` also saves the last
//! size's two pages in DIR to look at.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use gpuvet_html::site::{instance_page, instances_page};
use gpuvet_model::results::Outcome;

/// Renders per page and size; the median time is reported.
const RUNS: usize = 21;

/// The median time of `RUNS` calls of `render`, in milliseconds, and the size of what
/// it returned.
fn measure(mut render: impl FnMut() -> String) -> (f64, usize) {
    let mut times = Vec::with_capacity(RUNS);
    let mut bytes = 0;
    for _ in 0..RUNS {
        let start = Instant::now();
        let text = render();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        bytes = text.len();
    }
    times.sort_by(f64::total_cmp);
    (times[RUNS / 2], bytes)
}

// A benchmark's output is its result.
#[allow(clippy::print_stdout)]
fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let write_to = args.iter().position(|a| a == "--write").map(|at| {
        let dir = args.get(at + 1).expect("--write takes a folder").clone();
        args.drain(at..at + 2);
        dir
    });
    let sizes: Vec<usize> = args
        .iter()
        .map(|a| a.parse().expect("each argument is a node count"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![64, 256, 1024]
    } else {
        sizes
    };
    println!(
        "{:>5}  {:<29} {:>8}  {:>8}  {:>13}",
        "nodes", "page", "bytes", "ms", "x report JSON"
    );
    let mut last_pages = (String::new(), String::new());
    for nodes in sizes {
        let report = support::group_report(nodes);
        let (job, instances) = support::job_instances(nodes);
        let history = [
            support::run_summary(0, Outcome::Failed),
            support::run_summary(-1, Outcome::Passed),
        ];
        let events = support::node_events(0);
        let now_ms = job.started_at_ms + 300_000;
        let (json_ms, json_bytes) =
            measure(|| serde_json::to_string(&report).expect("a report serializes"));
        let rows = [
            (
                "instances_page",
                measure(|| instances_page(std::slice::from_ref(&job), &instances, None, now_ms)),
            ),
            (
                "instance_page (with report)",
                measure(|| instance_page(&instances[0], Some(&report), &history, &events, false)),
            ),
            (
                "page (static report)",
                measure(|| gpuvet_html::page(&report)),
            ),
            ("serde_json::to_string(report)", (json_ms, json_bytes)),
        ];
        last_pages = (
            instances_page(std::slice::from_ref(&job), &instances, None, now_ms),
            instance_page(&instances[0], Some(&report), &history, &events, false),
        );
        for (name, (ms, bytes)) in rows {
            println!(
                "{nodes:>5}  {name:<29} {bytes:>8}  {ms:>8.3}  {:>13.2}",
                ms / json_ms
            );
        }
    }
    println!("(ms: the median of {RUNS} renders)");
    if let Some(dir) = write_to {
        let dir = std::path::Path::new(&dir);
        std::fs::write(dir.join("instances.html"), last_pages.0).expect("writing a page");
        std::fs::write(dir.join("instance.html"), last_pages.1).expect("writing a page");
    }
}
