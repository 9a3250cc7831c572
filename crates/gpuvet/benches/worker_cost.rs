//! What running a check's device work in a worker process costs: the same quick check,
//! run through the real runner on threads of this process and in `gpuvet worker`
//! processes, interleaved in one run on the same machine. Prints the median wall time
//! of each per check and their difference, which is the worker's cost.
//!
//! `cargo bench -p gpuvet --bench worker_cost [-- RUNS]` (default 30 runs of each).

#![allow(clippy::print_stdout)] // a benchmark prints its figures

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuvet_backend::sim::SimBackend;
use gpuvet_backend::{Backend, WorkSpec, cpu::CpuBackend};
use gpuvet_model::analysis::Tolerances;
use gpuvet_model::catalog::CheckName;
use gpuvet_model::config::SimScript;
use gpuvet_model::events::Attempt;
use gpuvet_runner::{HANG_GRACE, RunPlan, WorkerLauncher};

fn plan(check: CheckName, worker: Option<WorkerLauncher>) -> RunPlan {
    RunPlan {
        attempt: Attempt {
            job_id: "bench".into(),
            attempt: 1,
            node: "bench".into(),
            instance: "bench".into(),
        },
        nodes: 1,
        checks: vec![check],
        timeout: Duration::from_secs(120),
        tolerance: Tolerances::uniform(0.5),
        baselines: Default::default(),
        expected_inventory: Default::default(),
        work: WorkSpec::default(),
        started_at_ms: 0,
        hang_grace: HANG_GRACE,
        worker,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Seconds of one run of `check` alone.
fn once(backend: &Arc<dyn Backend>, check: CheckName, worker: Option<WorkerLauncher>) -> f64 {
    let plan = plan(check, worker);
    let started = Instant::now();
    let report = gpuvet_runner::run(Arc::clone(backend), &plan, &mut |_| {});
    let took = started.elapsed().as_secs_f64();
    let status = report.checks[0].status;
    assert!(
        !status.is_failure() || check == CheckName::KernelLaunch,
        "{check}: {status} {:?}",
        report.checks[0].reason
    );
    took
}

fn compare(
    label: &str,
    backend: Arc<dyn Backend>,
    check: CheckName,
    worker_args: &[&str],
    runs: usize,
) {
    let launcher = WorkerLauncher {
        program: env!("CARGO_BIN_EXE_gpuvet").into(),
        args: worker_args.iter().map(Into::into).collect(),
    };
    // One of each first, so neither pays for a cold page cache.
    once(&backend, check, None);
    once(&backend, check, Some(launcher.clone()));
    let (mut threads, mut workers) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        threads.push(once(&backend, check, None));
        workers.push(once(&backend, check, Some(launcher.clone())));
    }
    let (t, w) = (median(threads), median(workers));
    println!(
        "{label:<34} in process {:>8.1} ms   in a worker {:>8.1} ms   cost {:>+7.1} ms ({:.2}x)",
        t * 1e3,
        w * 1e3,
        (w - t) * 1e3,
        w / t
    );
}

fn main() {
    let runs = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse::<usize>().ok())
        .unwrap_or(30);
    println!("median of {runs} interleaved runs of each, one check per run");
    let sim: Arc<dyn Backend> = Arc::new(SimBackend::new(SimScript::default()));
    compare(
        "sim, 8 devices, gemm_flops",
        Arc::clone(&sim),
        CheckName::GemmFlops,
        &["worker", "--backend", "sim"],
        runs,
    );
    compare(
        "sim, 8 devices, all_reduce_1",
        sim,
        CheckName::AllReduce1,
        &["worker", "--backend", "sim"],
        runs,
    );
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(2));
    compare(
        "cpu, 2 devices, kernel_launch",
        cpu,
        CheckName::KernelLaunch,
        &["worker", "--backend", "cpu", "--cpu-devices", "2"],
        runs,
    );
}
