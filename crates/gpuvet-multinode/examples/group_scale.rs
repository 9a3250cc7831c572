//! Benchmark, not a test: a whole group in one process, from plan to verdict, at
//! 8, 64, 512 and 4,096 nodes (8 sim GPUs each), with the default suite and the full
//! one.
//!
//! The coordinator and every agent run the real protocol (HMAC handshake, 4 clock
//! pings, heartbeats every 500 ms) over the in-memory network, each node with its
//! sim backend and its place on the simulated network
//! (`gpuvet_multinode::in_process`). Each size and suite runs in a fresh child
//! process, so its peak RSS is its own. Printed per run: the wall time from the plan
//! to the verdict and to the rendezvous (every node joined), the process's CPU time
//! (coordinator and every agent) and how much of it went before the rendezvous, the
//! coordinator thread's own CPU time, the peak RSS, the most plans a pair check used,
//! a reference taken in the same process and the CPU in its units (see
//! `reference_cpu_s`), and PAI's estimate for the same suite (the checks' estimated
//! durations in Alibaba Cloud PAI-EAS's documentation on GPU health checks, added up).
//!
//! Usage: `cargo run --release -p gpuvet-multinode --example group_scale [-- N ...]`
//!
//! The agents are served by a fixed pool of threads, not one per node: 4,096 nodes
//! took about 1,500 memory maps.

#![allow(clippy::print_stdout, clippy::print_stderr)] // a benchmark prints its figures

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuvet_backend::WorkSpec;
use gpuvet_backend::sim::SimBackend;
use gpuvet_model::analysis::Tolerances;
use gpuvet_model::catalog::{CheckName, DEFAULT_CHECKS};
use gpuvet_model::config::SimScript;
use gpuvet_model::events::Attempt;
use gpuvet_model::pairing::PairingMode;
use gpuvet_multinode::fabric::Fabric;
use gpuvet_multinode::in_process::{SimulatedGroup, node_ips, run_simulated};
use gpuvet_multinode::{GroupEvent, GroupPlan, NodeSetup};

const DEFAULT_SIZES: [usize; 4] = [8, 64, 512, 4096];
const GPUS_PER_NODE: u32 = 8;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("one") {
        let n: usize = args[1].parse().expect("N");
        one(n, &args[2]);
        return;
    }
    let sizes: Vec<usize> = if args.is_empty() {
        DEFAULT_SIZES.to_vec()
    } else {
        args.iter()
            .map(|a| a.parse().expect("a group size"))
            .collect()
    };
    println!(
        "{:>5}  {:<7}  {:>7}  {:>12}  {:>7}  {:>16}  {:>11}  {:>8}  {:>5}  {:>6}  {:>7}  {:>12}  outcome",
        "nodes",
        "suite",
        "wall_s",
        "rendezvous_s",
        "cpu_s",
        "rendezvous_cpu_s",
        "coord_cpu_s",
        "peak_mib",
        "plans",
        "ref_s",
        "cpu/ref",
        "pai_estimate"
    );
    for n in sizes {
        for suite in ["default", "full"] {
            let status = Command::new(std::env::current_exe().expect("this example"))
                .args(["one", &n.to_string(), suite])
                .status()
                .expect("running one size");
            if !status.success() {
                eprintln!("{n} nodes, {suite} suite: the run failed ({status})");
            }
        }
    }
}

fn checks(suite: &str) -> Vec<CheckName> {
    match suite {
        "default" => DEFAULT_CHECKS.to_vec(),
        _ => CheckName::ALL.to_vec(),
    }
}

/// PAI's estimate for the suite, minutes: each check's estimated duration, added up.
fn pai_estimate_min(checks: &[CheckName]) -> f64 {
    let secs: u32 = checks
        .iter()
        .filter_map(|c| c.spec().pai_estimate_secs)
        .sum();
    f64::from(secs) / 60.0
}

fn attempt(node: &str) -> Attempt {
    Attempt {
        job_id: "scale".to_owned(),
        attempt: 1,
        node: node.to_owned(),
        instance: node.to_owned(),
    }
}

fn one(n: usize, suite: &str) {
    let checks = checks(suite);
    let script = SimScript {
        devices: GPUS_PER_NODE,
        noise: 0.01,
        ..SimScript::default()
    };
    let nodes: Vec<NodeSetup> = (0..n)
        .map(|rank| {
            let name = format!("node-{rank}");
            NodeSetup {
                backend: Arc::new(SimBackend::new(SimScript {
                    seed: rank as u64,
                    ..script.clone()
                })),
                attempt: attempt(&name),
                nnodes: n,
                tolerance: Tolerances::uniform(0.05),
                baselines: BTreeMap::new(),
                work: WorkSpec::default(),
                python: "python3".into(),
                worker: None,
                history: None,
            }
        })
        .collect();
    let fabric = Arc::new(Fabric::new(&script, &node_ips(&nodes)));
    let group = SimulatedGroup {
        plan: GroupPlan {
            attempt: attempt("node-0"),
            checks: checks.clone(),
            timeout: Duration::from_secs(600),
            rendezvous_timeout: Duration::from_secs(300),
            tolerance: Tolerances::uniform(0.05),
            baselines: BTreeMap::new(),
            expected_inventory: Default::default(),
            pairing: PairingMode::Adaptive,
            collective_bytes: None,
            started_at_ms: 0,
        },
        nodes,
        fabric,
        node_faults: BTreeMap::new(),
        rails: GPUS_PER_NODE as usize,
    };
    let (cpu_before, thread_before) = (process_cpu_s(), thread_cpu_s());
    let started = Instant::now();
    let (mut rendezvous_s, mut rendezvous_cpu_s) = (0.0, 0.0);
    let run = run_simulated(&group, &mut |event| match event {
        GroupEvent::Rendezvous { .. } => {
            rendezvous_s = started.elapsed().as_secs_f64();
            rendezvous_cpu_s = process_cpu_s() - cpu_before;
        }
        GroupEvent::CheckFinished { result, .. }
            if std::env::var_os("GROUP_SCALE_TRACE").is_some() =>
        {
            eprintln!(
                "{:.2}s {} {}",
                started.elapsed().as_secs_f64(),
                result.name,
                result.status
            );
        }
        _ => {}
    })
    .unwrap_or_else(|err| {
        eprintln!("{n} nodes, {suite} suite: {err}");
        std::process::exit(1);
    });
    let wall = started.elapsed().as_secs_f64();
    let (cpu, coordinator_cpu) = (process_cpu_s() - cpu_before, thread_cpu_s() - thread_before);
    let plans = run
        .report
        .checks
        .iter()
        .filter_map(|c| c.params.get("plans")?.parse::<u32>().ok())
        .max()
        .map_or_else(|| "-".to_owned(), |p| p.to_string());
    let outcome = match run
        .report
        .group
        .as_ref()
        .and_then(|g| g.first_error.as_ref())
    {
        Some(first) => format!("{} ({})", run.report.outcome.as_str(), first.detail),
        None => format!("{} ({})", run.report.outcome.as_str(), run.report.summary()),
    };
    let peak_mib = peak_rss_kib() as f64 / 1024.0;
    let reference = reference_cpu_s();
    println!(
        "{n:>5}  {suite:<7}  {wall:>7.2}  {rendezvous_s:>12.2}  {cpu:>7.2}  {rendezvous_cpu_s:>16.2}  {coordinator_cpu:>11.2}  {peak_mib:>8.0}  {plans:>5}  {reference:>6.3}  {:>7.2}  {:>9.0} min  {outcome}",
        cpu / reference,
        pai_estimate_min(&checks),
    );
    if run.left_behind > 0 {
        eprintln!("{} agents were still running at the end", run.left_behind);
    }
}

/// JSON round trips of a small check result in the reference.
const REFERENCE_JSON_ROUND_TRIPS: u32 = 500_000;

/// The CPU seconds of a fixed single-threaded workload (allocation and JSON, a third
/// of the group's CPU), taken in the same process right after the run: this VM's
/// speed drifts by a third within the hour, so `cpu/ref` compares runs where `cpu_s`
/// alone does not. It leaves out thread wake-ups, whose cost depends on where the
/// scheduler puts the two threads more than on the machine.
fn reference_cpu_s() -> f64 {
    let before = process_cpu_s();
    let sample = gpuvet_model::results::CheckResult::without_work(
        CheckName::GemmFlops,
        gpuvet_model::results::CheckStatus::Passed,
        "a reason of a typical length for a check's result",
    );
    for _ in 0..REFERENCE_JSON_ROUND_TRIPS {
        let json = serde_json::to_vec(&sample).expect("a check result is JSON");
        let back: gpuvet_model::results::CheckResult =
            serde_json::from_slice(&json).expect("it reads back");
        std::hint::black_box(back);
    }
    process_cpu_s() - before
}

/// CPU time of this process, every thread, user and system, seconds.
fn process_cpu_s() -> f64 {
    // SAFETY: getrusage fills a zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// CPU time of the calling thread (the coordinator's), seconds.
fn thread_cpu_s() -> f64 {
    // SAFETY: clock_gettime writes into the timespec it is given.
    let time = unsafe {
        let mut time: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time);
        time
    };
    time.tv_sec as f64 + time.tv_nsec as f64 / 1e9
}

/// Peak resident set of this process, KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
