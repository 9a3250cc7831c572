//! How long rendering the HTML report of a large group takes, and how big the page is:
//! `cargo run --release -p gpuvet-html --example html_scale [--write FILE] [NODES ...]`
//! (default 64, 256 and 1024 nodes of 8 GPUs, with a slow GPU, a faulty GPU and a slow
//! pair). Prints one line per size; `--write` also saves the last page to look at. The
//! figures are in docs/benchmarks.md.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

/// Renders per size; the median time is reported.
const RUNS: usize = 21;

// A benchmark's output is its result.
#[allow(clippy::print_stdout)]
fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let write_to = args.iter().position(|a| a == "--write").map(|at| {
        let path = args.get(at + 1).expect("--write takes a file").clone();
        args.drain(at..at + 2);
        path
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
    println!("nodes  entities  page bytes  render ms (median of {RUNS})");
    let mut last_page = String::new();
    for nodes in sizes {
        let report = support::group_report(nodes);
        let entities: usize = report.checks.iter().map(|c| c.entities.len()).sum();
        let mut times = Vec::with_capacity(RUNS);
        let mut bytes = 0;
        for _ in 0..RUNS {
            let start = Instant::now();
            let html = gpuvet_html::page(&report);
            times.push(start.elapsed().as_secs_f64() * 1000.0);
            bytes = html.len();
            last_page = html;
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{nodes:>5}  {entities:>8}  {bytes:>10}  {:>9.2}",
            times[RUNS / 2]
        );
    }
    if let Some(path) = write_to {
        std::fs::write(&path, last_page).expect("writing the page");
    }
}
