//! How long rendering the HTML report of a large group takes, and how big the page is:
//! `cargo run --release -p gpuvet-html --example html_scale [NODES ...]` (default 64,
//! 256 and 1024 nodes of 8 GPUs, with a slow GPU, a faulty GPU and a slow pair).
//! Prints one line per size; the figures are in docs/benchmarks.md.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

/// Renders per size; the median time is reported.
const RUNS: usize = 21;

// A benchmark's output is its result.
#[allow(clippy::print_stdout)]
fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("each argument is a node count"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![64, 256, 1024]
    } else {
        sizes
    };
    println!("nodes  entities  page bytes  render ms (median of {RUNS})");
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
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{nodes:>5}  {entities:>8}  {bytes:>10}  {:>9.2}",
            times[RUNS / 2]
        );
    }
}
