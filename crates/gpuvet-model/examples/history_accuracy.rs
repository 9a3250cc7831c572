//! False alarms and detection of judging each GPU against its own record
//! (`gpuvet_model::history`), on simulated GPUs.
//!
//! ```text
//! cargo run --release -p gpuvet-model --example history_accuracy [-- OPTIONS]
//!   --gpu-runs N      healthy GPU-runs per noise level (default 2,000,000)
//!   --noise 1,2,3     run-to-run noise levels, in percent (default 1,2,3)
//!   --history 10,20   record lengths (default 10,20)
//!   --tolerance PCT   the tolerance judged with (default: the library's)
//! ```
//!
//! Each trial is one GPU: a true value of 100 TFLOPS, a record of `history` runs, each
//! 100 × (1 + noise × a standard normal draw), then one more run judged against that
//! record by `history::judge_entity`, exactly as a report's GPU is. Healthy trials draw
//! the judged run like the record (any `degraded` is a false alarm); slowed trials
//! draw it 5, 10, 15 and 20 % lower (the share found is the detection). Seeded with
//! splitmix64, so every run prints the same figures.

#![allow(clippy::print_stdout)]

use gpuvet_model::catalog::CheckName;
use gpuvet_model::history::{self, GpuRecord, HistoryPolicy};
use gpuvet_model::results::{Entity, EntityResult, Evidence, Lane, Measurement, Verdict};

/// splitmix64: tiny, seedable, good enough for a simulation.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

struct Options {
    gpu_runs: usize,
    noise_pct: Vec<f64>,
    history: Vec<usize>,
    tolerance: f64,
}

fn options() -> Options {
    let mut options = Options {
        gpu_runs: 2_000_000,
        noise_pct: vec![1.0, 2.0, 3.0],
        history: vec![10, 20],
        tolerance: HistoryPolicy::default().tolerance,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = |text: &str| -> Vec<f64> {
        text.split(',')
            .map(|v| v.parse().expect("a number"))
            .collect()
    };
    for pair in args.chunks(2) {
        let value = pair.get(1).expect("every option takes a value");
        match pair[0].as_str() {
            "--gpu-runs" => options.gpu_runs = value.parse().expect("a count"),
            "--noise" => options.noise_pct = list(value),
            "--history" => options.history = list(value).iter().map(|&n| n as usize).collect(),
            "--tolerance" => {
                options.tolerance = value.parse::<f64>().expect("a percentage") / 100.0
            }
            other => panic!("unknown option `{other}`"),
        }
    }
    options
}

/// One GPU-run judged against a fresh record; whether it came out degraded.
fn trial(
    rng: &mut SplitMix64,
    noise: f64,
    runs: usize,
    slowdown: f64,
    policy: &HistoryPolicy,
) -> bool {
    let mut draw = || 100.0 * (1.0 + noise * rng.normal());
    let values: Vec<f64> = (0..runs).map(|_| draw()).collect();
    let value = draw() * (1.0 - slowdown);
    let entity = Entity::Device {
        node: "n0".to_owned(),
        index: 0,
    };
    let mut result = EntityResult {
        entity: entity.clone(),
        verdict: Verdict::Ok,
        lane: Lane::Host,
        reason: "within its peers".to_owned(),
        evidence: Evidence::default(),
        measurement: Measurement::ok(entity, value, Vec::new()),
    };
    let record = GpuRecord {
        values,
        first_at_ms: 0,
        degraded_since_ms: None,
    };
    history::judge_entity(CheckName::GemmFlops, &mut result, &record, policy, 1)
}

fn main() {
    let options = options();
    println!(
        "tolerance {:.1}%, {} spreads; {} healthy GPU-runs per row, 100,000 per slowed column",
        options.tolerance * 100.0,
        history::SPREAD_SIGMAS,
        options.gpu_runs
    );
    println!(
        "{:>6} {:>8} {:>14} {:>12} {:>8} {:>8} {:>8} {:>8}",
        "noise", "history", "false alarms", "per GPU-run", "-5%", "-10%", "-15%", "-20%"
    );
    for &noise_pct in &options.noise_pct {
        for &runs in &options.history {
            let policy = HistoryPolicy {
                runs,
                min_runs: runs.min(3),
                tolerance: options.tolerance,
                ..HistoryPolicy::default()
            };
            let mut rng = SplitMix64(0x5EED ^ (runs as u64) << 16 ^ noise_pct.to_bits());
            let noise = noise_pct / 100.0;
            let false_alarms = (0..options.gpu_runs)
                .filter(|_| trial(&mut rng, noise, runs, 0.0, &policy))
                .count();
            let found: Vec<f64> = [0.05, 0.10, 0.15, 0.20]
                .iter()
                .map(|&slowdown| {
                    let n = 100_000;
                    let hits = (0..n)
                        .filter(|_| trial(&mut rng, noise, runs, slowdown, &policy))
                        .count();
                    hits as f64 / n as f64 * 100.0
                })
                .collect();
            println!(
                "{:>5.1}% {:>8} {:>14} {:>12.2e} {:>7.2}% {:>7.2}% {:>7.2}% {:>7.2}%",
                noise_pct,
                runs,
                false_alarms,
                false_alarms as f64 / options.gpu_runs as f64,
                found[0],
                found[1],
                found[2],
                found[3]
            );
        }
    }
}
