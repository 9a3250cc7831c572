//! Accuracy and scale of pairing and localization on simulated groups.
//!
//! ```text
//! cargo run --release -p gpuvet-model --example localize_accuracy [-- OPTIONS]
//!   --trials-scale X   multiply every trial count by X (0.1 for a quick look)
//!   --sweep            also find, per N and pairing, the smallest slowdown found in
//!                      at least 95 % of runs (2 % to 20 %)
//!   --n 4,8            only these group sizes;  --pairing adaptive|full  only that one
//! ```
//!
//! Each trial builds a group of N nodes, injects one fault (none, a node 10 % slow, or
//! a link 10 % slow: a pair of the first plan with adaptive pairing, any pair with
//! full), and runs what the coordinator (`gpuvet-multinode`'s `checks/pairs.rs`) runs:
//! the first plan, then `retest` until it plans nothing or `MAX_RETEST_PLANS` stops
//! it, judging with the default policy (5 % tolerance, no baseline), then `localize`.
//! A pair measures 100 GB/s × the slower member's speed × the link's speed × (1 + 2 % ×
//! a standard normal draw); the measurement carries no per-iteration samples, so the
//! analysis noise term is zero and the threshold is the bare 5 %. Seeded with
//! splitmix64, so every run prints the same figures.
//!
//! Printed per N and scenario: recall (the injected node named as the culprit, or the
//! injected link as the suspect), false names per node-run (culprits, links or
//! unresolved pairs that do not involve the injected fault), how many of those were
//! nodes / links / unresolved, rounds used, and the time spent planning and judging
//! (the library calls only, single-threaded, so wall time on an idle core is the CPU
//! time).

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use gpuvet_model::analysis::JudgePolicy;
use gpuvet_model::catalog::{CheckName, CheckSpec};
use gpuvet_model::localize::{Localization, PairTest, judge_pairs, localize, outcomes};
use gpuvet_model::pairing::{
    MAX_RETEST_PLANS, NodeId, Pair, Plan, full_round_robin, retest, round_one,
};
use gpuvet_model::results::{Entity, EntityResult, Lane, Measurement, Verdict};

const NOISE: f64 = 0.02;
const SLOWDOWN: f64 = 0.10;
const POLICY: JudgePolicy = JudgePolicy {
    tolerance: 0.05,
    limit: None,
};

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

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A standard normal draw (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    SlowNode(usize),
    SlowLink(usize, usize),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Scenario {
    Healthy,
    SlowNode,
    SlowLink,
}

impl Scenario {
    fn as_str(self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::SlowNode => "slow node",
            Scenario::SlowLink => "slow link",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Adaptive,
    Full,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Adaptive => "adaptive",
            Mode::Full => "full",
        }
    }
}

struct Trial {
    found: Localization,
    rounds: usize,
    spent: Duration,
}

fn index_of(node: &str) -> usize {
    node[1..].parse().expect("nodes are named n<index>")
}

/// Runs one check on a simulated group the way the coordinator does.
fn run_trial(
    spec: &CheckSpec,
    nodes: &[NodeId],
    mode: Mode,
    fault: Fault,
    slowdown: f64,
    rng: &mut SplitMix64,
) -> Trial {
    let speed = |i: usize| {
        if fault == Fault::SlowNode(i) {
            1.0 - slowdown
        } else {
            1.0
        }
    };
    let mut measure = |pair: &Pair| {
        let (a, b) = (index_of(&pair.a), index_of(&pair.b));
        let link = match fault {
            Fault::SlowLink(x, y) if (x, y) == (a, b) || (x, y) == (b, a) => 1.0 - slowdown,
            _ => 1.0,
        };
        let value = 100.0 * speed(a).min(speed(b)) * link * (1.0 + NOISE * rng.normal());
        Measurement::ok(pair.entity(), value.max(1e-6), Vec::new())
    };
    let mut tests = Vec::new();
    let mut rounds = 0;
    let mut run_plan = |plan: &Plan, tests: &mut Vec<PairTest>| {
        rounds += plan.rounds.len();
        for pair in plan.pairs() {
            tests.push(PairTest::new(pair.clone(), plan.stage, measure(pair)));
        }
    };

    let started = Instant::now();
    let mut plan = match mode {
        Mode::Adaptive => round_one(nodes),
        Mode::Full => full_round_robin(nodes).to_plan(),
    };
    let mut spent = started.elapsed();
    // As `checks/pairs.rs`: the first plan, then retests until none is planned or the
    // guard stops them.
    let mut plans_run = 0;
    loop {
        run_plan(&plan, &mut tests);
        plans_run += 1;
        let started = Instant::now();
        let judged = judge_pairs(spec, &tests, &POLICY);
        let next = retest(nodes, &outcomes(&judged));
        if next.plan.is_empty() || plans_run > MAX_RETEST_PLANS {
            let found = localize(spec, nodes, &judged, Lane::Network);
            spent += started.elapsed();
            return Trial {
                found,
                rounds,
                spent,
            };
        }
        spent += started.elapsed();
        plan = next.plan;
    }
}

/// The entities named slow or faulty.
fn named(results: &[EntityResult]) -> impl Iterator<Item = &Entity> {
    results
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Slow | Verdict::Faulty))
        .map(|r| &r.entity)
}

fn ends(entity: &Entity) -> (usize, usize) {
    match entity {
        Entity::NodePair { a, b } => (index_of(a), index_of(b)),
        other => panic!("a pair result on {other}"),
    }
}

#[derive(Default)]
struct Tally {
    trials: usize,
    hits: usize,
    /// False names: culprit nodes, links, unresolved pairs.
    false_names: [usize; 3],
    node_runs: usize,
    rounds: usize,
    max_rounds: usize,
    spent: Duration,
    max_spent: Duration,
}

impl Tally {
    fn add(&mut self, nodes: usize, fault: Fault, trial: &Trial) {
        let culprits: Vec<usize> = named(&trial.found.nodes)
            .map(|e| index_of(e.node()))
            .collect();
        let links: Vec<(usize, usize)> = named(&trial.found.links).map(ends).collect();
        let unresolved: Vec<(usize, usize)> = named(&trial.found.unresolved).map(ends).collect();
        let involves = |&(a, b): &(usize, usize)| match fault {
            Fault::None => false,
            Fault::SlowNode(x) => a == x || b == x,
            Fault::SlowLink(x, y) => (a, b) == (x, y) || (a, b) == (y, x),
        };
        let hit = match fault {
            Fault::None => false,
            Fault::SlowNode(x) => culprits.contains(&x),
            Fault::SlowLink(x, y) => links.iter().any(|&l| l == (x, y) || l == (y, x)),
        };
        let false_nodes = culprits
            .iter()
            .filter(|&&c| fault != Fault::SlowNode(c))
            .count();
        let false_links = links.iter().filter(|p| !involves(p)).count();
        let false_unresolved = unresolved.iter().filter(|p| !involves(p)).count();

        self.trials += 1;
        self.hits += usize::from(hit);
        self.false_names[0] += false_nodes;
        self.false_names[1] += false_links;
        self.false_names[2] += false_unresolved;
        self.node_runs += nodes;
        self.rounds += trial.rounds;
        self.max_rounds = self.max_rounds.max(trial.rounds);
        self.spent += trial.spent;
        self.max_spent = self.max_spent.max(trial.spent);
    }

    fn recall(&self) -> f64 {
        self.hits as f64 / self.trials as f64
    }

    fn false_rate(&self) -> f64 {
        self.false_names.iter().sum::<usize>() as f64 / self.node_runs as f64
    }
}

fn scenario(
    spec: &CheckSpec,
    n: usize,
    mode: Mode,
    kind: Scenario,
    slowdown: f64,
    trials: usize,
    seed: u64,
) -> Tally {
    let nodes: Vec<NodeId> = (0..n).map(|i| format!("n{i}")).collect();
    let first_round = round_one(&nodes);
    let mut rng = SplitMix64(seed);
    let mut tally = Tally::default();
    for _ in 0..trials {
        let fault = match kind {
            Scenario::Healthy => Fault::None,
            Scenario::SlowNode => Fault::SlowNode(rng.below(n)),
            // Adaptive pairing measures only the first-round links, so that is where a
            // slow link can be found; the full round-robin measures every link.
            Scenario::SlowLink if mode == Mode::Adaptive => {
                let pairs: Vec<&Pair> = first_round.pairs().collect();
                let pair = pairs[rng.below(pairs.len())];
                Fault::SlowLink(index_of(&pair.a), index_of(&pair.b))
            }
            Scenario::SlowLink => {
                let a = rng.below(n);
                let b = (a + 1 + rng.below(n - 1)) % n;
                Fault::SlowLink(a, b)
            }
        };
        let trial = run_trial(spec, &nodes, mode, fault, slowdown, &mut rng);
        tally.add(n, fault, &trial);
    }
    tally
}

fn seed(n: usize, mode: Mode, kind: Scenario, salt: u64) -> u64 {
    (n as u64) << 8 | (kind as u64) << 4 | mode as u64 | salt << 32
}

/// The group sizes and pairing modes measured, with their trials at scale 1.
const CASES: [(usize, Mode, usize); 15] = [
    (4, Mode::Adaptive, 20_000),
    (5, Mode::Adaptive, 20_000),
    (6, Mode::Adaptive, 20_000),
    (8, Mode::Adaptive, 20_000),
    (16, Mode::Adaptive, 10_000),
    (64, Mode::Adaptive, 5_000),
    (512, Mode::Adaptive, 2_000),
    (4096, Mode::Adaptive, 300),
    (4, Mode::Full, 20_000),
    (5, Mode::Full, 20_000),
    (6, Mode::Full, 20_000),
    (8, Mode::Full, 10_000),
    (16, Mode::Full, 3_000),
    (64, Mode::Full, 400),
    (512, Mode::Full, 12),
];

struct Options {
    scale: f64,
    sweep: bool,
    sizes: Option<Vec<usize>>,
    mode: Option<Mode>,
}

fn options() -> Options {
    let mut options = Options {
        scale: 1.0,
        sweep: false,
        sizes: None,
        mode: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} takes a value"));
        match arg.as_str() {
            "--trials-scale" => {
                options.scale = value().parse().expect("--trials-scale takes a number");
            }
            "--sweep" => options.sweep = true,
            "--n" => {
                let sizes = value()
                    .split(',')
                    .map(|n| n.parse().expect("--n takes sizes such as 4,8"))
                    .collect();
                options.sizes = Some(sizes);
            }
            "--pairing" => {
                options.mode = Some(match value().as_str() {
                    "adaptive" => Mode::Adaptive,
                    "full" => Mode::Full,
                    other => panic!("--pairing is adaptive or full, not {other}"),
                });
            }
            other => panic!("unknown argument {other}; see the header of this example"),
        }
    }
    options
}

fn main() {
    let options = options();
    let cases: Vec<(usize, Mode, usize)> = CASES
        .into_iter()
        .filter(|(n, mode, _)| {
            options.sizes.as_ref().is_none_or(|s| s.contains(n))
                && options.mode.is_none_or(|m| m == *mode)
        })
        .map(|(n, mode, trials)| {
            let trials = ((trials as f64 * options.scale).round() as usize).max(1);
            (n, mode, trials)
        })
        .collect();
    let spec = CheckName::AllReduce2.spec();
    println!(
        "noise {:.0}% (normal, multiplicative), fault {:.0}% slow, tolerance {:.0}%",
        NOISE * 100.0,
        SLOWDOWN * 100.0,
        POLICY.tolerance * 100.0
    );
    println!(
        "{:>5} {:>8} {:>10} {:>7} {:>8} {:>14} {:>16} {:>11} {:>14} {:>14}",
        "N",
        "pairing",
        "scenario",
        "trials",
        "recall",
        "false/node-run",
        "node/link/unres",
        "rounds avg",
        "plan+judge avg",
        "plan+judge max"
    );
    for &(n, mode, trials) in &cases {
        let kinds = [Scenario::Healthy, Scenario::SlowNode, Scenario::SlowLink];
        for kind in kinds {
            let tally = scenario(
                spec,
                n,
                mode,
                kind,
                SLOWDOWN,
                trials,
                seed(n, mode, kind, 0),
            );
            let recall = if kind == Scenario::Healthy {
                "-".to_owned()
            } else {
                format!("{:.2}%", 100.0 * tally.recall())
            };
            let [nodes, links, unresolved] = tally.false_names;
            println!(
                "{:>5} {:>8} {:>10} {:>7} {:>8} {:>14.1e} {:>16} {:>5.2} (≤{:>2}) {:>11.3} ms {:>11.3} ms",
                n,
                mode.as_str(),
                kind.as_str(),
                tally.trials,
                recall,
                tally.false_rate(),
                format!("{nodes}/{links}/{unresolved}"),
                tally.rounds as f64 / tally.trials as f64,
                tally.max_rounds,
                tally.spent.as_secs_f64() * 1e3 / tally.trials as f64,
                tally.max_spent.as_secs_f64() * 1e3,
            );
        }
    }
    if options.sweep {
        sweep(spec, &cases);
    }
}

/// The smallest slowdown (whole percent, 2 % to 20 %) that a node and a link are found
/// at in at least 95 % of runs, per group size and pairing.
fn sweep(spec: &CheckSpec, cases: &[(usize, Mode, usize)]) {
    println!();
    println!("smallest slowdown found in >= 95% of runs (recall at that slowdown)");
    println!(
        "{:>5} {:>8} {:>7} {:>18} {:>18}",
        "N", "pairing", "trials", "slow node", "slow link"
    );
    for &(n, mode, trials) in cases {
        // A tenth of the accuracy run's trials per point is enough to place 95 %.
        let trials = (trials / 10).max(10);
        let smallest = |kind: Scenario| {
            (2..=20)
                .map(|pct| {
                    let slowdown = f64::from(pct) / 100.0;
                    let salt = u64::from(pct as u32);
                    let tally = scenario(
                        spec,
                        n,
                        mode,
                        kind,
                        slowdown,
                        trials,
                        seed(n, mode, kind, salt),
                    );
                    (pct, tally.recall())
                })
                .find(|&(_, recall)| recall >= 0.95)
                .map(|(pct, recall)| format!("{pct}% ({:.1}%)", 100.0 * recall))
                .unwrap_or_else(|| "> 20%".to_owned())
        };
        println!(
            "{:>5} {:>8} {:>7} {:>18} {:>18}",
            n,
            mode.as_str(),
            trials,
            smallest(Scenario::SlowNode),
            smallest(Scenario::SlowLink)
        );
    }
}
