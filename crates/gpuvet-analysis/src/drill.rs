//! Fault drills (`gpuvet drill`): named scenarios that script one fault into a group
//! on the sim backend, say what must be found (the entity, its lane, the first error,
//! the action taken), and judge what a real run found against it, each expectation
//! with one of the three conclusions of a fault drill (Alauda's article on multi-node GPU
//! platforms, www.suotukeji.com/blog/1945): confirmed, evidence missing, or not
//! applicable.
//!
//! A scenario runs in one of two kinds of group ([`GroupKind`]): in one process over an
//! in-memory network (the default; every fault is scripted, links and rails
//! included), or as real agent processes, where a hung or crashed node is a stopped or
//! killed process.
//!
//! Two scenarios play a node's history rather than one group ([`History`]): a node
//! that fails start after start (`repeat-offender`, flagged at its K-th failure), and
//! a quarantined node that tries to come back before a run passes (`early-return`,
//! refused, then let back after one passing start), as `gpuvet untaint` decides.
//!
//! Pure: the binary runs a scenario's [`Drill`] and hands back what it [`Observed`].

use serde::{Deserialize, Serialize};

use crate::explain::{Conclusion, Explanation};
use crate::timeline::What;
use gpuvet_model::events::EventKind;
use gpuvet_model::results::Lane;

/// The scenarios, in the order `--all` runs them.
pub const SCENARIOS: [&str; 16] = [
    "healthy",
    "slow-gpu-5",
    "slow-gpu-10",
    "slow-gpu-20",
    "slow-gpu-50",
    "slow-node",
    "slow-link",
    "bad-rail",
    "hung-node",
    "crashed-node",
    "xid-79",
    "inventory-mismatch",
    "two-faults",
    "degraded",
    "repeat-offender",
    "early-return",
];

/// How many healthy runs the `degraded` drill gives each GPU's record before the run
/// it judges: the fewest a record may judge from (`gpuvet.history.min_runs`).
pub const DEGRADED_HISTORY_RUNS: u32 = 3;

/// Starts of one node alone, each a job of its own, in a store of their own: what the
/// history scenarios play instead of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "history", rename_all = "snake_case")]
pub enum History {
    /// `starts` failing starts in a row, under a rule of `failures` of the last
    /// `of_last` (the scenario's config).
    RepeatOffender { starts: u32 },
    /// A failing start, then the node's quarantine; a try to lift it; a passing start
    /// (the node healed: `healed`, the config without its fault); a try again.
    EarlyReturn { healed: serde_json::Value },
}

/// One try to lift a node's quarantine, as `gpuvet untaint` decides it (without the
/// cluster): after what, whether it was let back, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UntaintTry {
    pub after: String,
    pub lifted: bool,
    pub why: String,
}

/// How a drill's group runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    /// Every node a thread of one process, over an in-memory network with a simulated
    /// data plane (`gpuvet run --sim-nodes N`).
    InProcess,
    /// Every node an agent process on this machine (`gpuvet run --local-nodes N`).
    Processes,
}

/// What a scenario does to the group while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disruption {
    /// SIGSTOP the agent of `rank` once the group has joined.
    Stop { rank: u32 },
    /// SIGKILL the agent of `rank` once the group has joined.
    Kill { rank: u32 },
    /// Write an XID line into the kernel log the runtime check reads, once the app runs.
    Xid { xid: u32 },
}

/// What the platform must do about the fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The app starts: nothing was wrong.
    Start,
    /// The start is refused (`fail_action: fail`).
    RefuseStart,
    /// The runtime check stops the app (`runtime_check.fail_action: kill`).
    StopApp,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Start => "the app starts",
            Action::RefuseStart => "the start is refused",
            Action::StopApp => "the runtime check stops the app",
        }
    }
}

/// One thing the drill must show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "expect", rename_all = "snake_case")]
pub enum Expectation {
    /// Nothing is named slow or faulty, and there is no first error.
    NothingNamed,
    /// The first error is on `node`, in `lane`.
    FirstError { node: String, lane: Lane },
    /// `entity` (a node, `node/devN` or `a<->b`) is named slow or faulty, in `lane`.
    Named { entity: String, lane: Lane },
    /// No node but these is named.
    OnlyNamed { nodes: Vec<String> },
    /// What the platform does.
    Acts { action: Action },
    /// Every one of the group's `gpus` GPUs is named degraded (below its own record),
    /// lane host, though its peers agree with it.
    AllDegraded { gpus: u32 },
    /// `node` is flagged a repeat offender at its `after`-th failed start, not before.
    FlaggedAt { node: String, after: u32 },
    /// `node`'s quarantine is not lifted before a run passes after it.
    StaysQuarantined { node: String },
    /// `node`'s quarantine is lifted after one passing run.
    ComesBack { node: String },
}

impl Expectation {
    pub fn describe(&self) -> String {
        match self {
            Expectation::NothingNamed => "nothing is named slow or faulty".to_owned(),
            Expectation::FirstError { node, lane } => {
                format!("the first error is on `{node}`, lane {lane}")
            }
            Expectation::Named { entity, lane } => format!("`{entity}` is named, lane {lane}"),
            Expectation::OnlyNamed { nodes } => {
                let list: Vec<String> = nodes.iter().map(|n| format!("`{n}`")).collect();
                format!("no node but {} is named", list.join(", "))
            }
            Expectation::Acts { action } => action.as_str().to_owned(),
            Expectation::AllDegraded { gpus } => {
                format!("all {gpus} GPUs are named degraded, lane host")
            }
            Expectation::FlaggedAt { node, after } => {
                format!(
                    "`{node}` is flagged a repeat offender at its failed start {after}, not before"
                )
            }
            Expectation::StaysQuarantined { node } => {
                format!("`{node}` stays quarantined until a run passes after its quarantine")
            }
            Expectation::ComesBack { node } => {
                format!("`{node}` comes back after one passing run")
            }
        }
    }
}

/// One scenario at one group size: how to run it and what it must show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drill {
    pub scenario: String,
    pub nodes: u32,
    /// What the scenario scripts, for people.
    pub fault: String,
    /// The checks the group runs.
    pub checks: Vec<String>,
    /// The config the group runs with (`gpuvet` and `aimaster` keys).
    pub config: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,
    pub expectations: Vec<Expectation>,
    pub group: GroupKind,
    /// Why this kind of group cannot play the scenario; it is then not run, and every
    /// expectation is not applicable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
    /// Runs that build every GPU's record before the judged run, in a store of the
    /// drill's own (so no earlier run on this machine is part of the record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<HistoryRuns>,
    /// Set for a scenario of one node's history: it runs that instead of a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<History>,
}

/// The healthy runs a drill makes before the one it judges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryRuns {
    pub runs: u32,
    /// The config they run with: the drill's, without its fault.
    pub config: serde_json::Value,
}

/// The node names `--local-nodes` gives a group of `nodes`.
pub fn node_name(rank: u32) -> String {
    format!("local-{rank}")
}

/// The drill of `scenario` for a group of `nodes` (at least 2) of `group`'s kind,
/// `None` for an unknown scenario. The faulty node is the last one, so it exists at
/// every size.
pub fn drill(scenario: &str, nodes: u32, group: GroupKind) -> Option<Drill> {
    let nodes = nodes.max(2);
    let target = nodes - 1;
    let victim = node_name(target);
    let mut sim = serde_json::json!({"devices": 2, "noise_pct": 0.5, "seed": 7});
    let mut checks = vec!["gemm_flops", "all_reduce_2", "inventory_consistency"];
    let mut disruption = None;
    let mut runtime = None;
    let mut pairing = None;
    let mut not_applicable = None;
    let mut history = None;
    let mut repeat_rule = None;
    let in_one_process_only = |what: &str| {
        format!(
            "{what} is scripted only in a group in one process (drop `--local-nodes`); with \
             processes, `cargo test -p gpuvet --test netns` (as root) slows a real link \
             between network namespaces"
        )
    };
    let refused = Expectation::Acts {
        action: Action::RefuseStart,
    };
    let (fault, expectations) = match scenario {
        "healthy" => (
            "no fault".to_owned(),
            vec![
                Expectation::NothingNamed,
                Expectation::Acts {
                    action: Action::Start,
                },
            ],
        ),
        "slow-gpu-5" | "slow-gpu-10" | "slow-gpu-20" | "slow-gpu-50" => {
            let pct: f64 = scenario["slow-gpu-".len()..].parse().ok()?;
            sim["node_device_speed"] = serde_json::json!({ &victim: {"1": 1.0 - pct / 100.0} });
            let gpu = format!("{victim}/dev1");
            (
                format!("GPU 1 of `{victim}` {pct}% slow"),
                vec![
                    Expectation::FirstError {
                        node: victim.clone(),
                        lane: Lane::Host,
                    },
                    Expectation::Named {
                        entity: gpu,
                        lane: Lane::Host,
                    },
                    Expectation::OnlyNamed {
                        nodes: vec![victim.clone()],
                    },
                    refused,
                ],
            )
        }
        "slow-node" => {
            sim["node_speed"] = serde_json::json!({ &victim: 0.5 });
            (
                format!("every GPU of `{victim}` at half speed"),
                vec![
                    Expectation::FirstError {
                        node: victim.clone(),
                        lane: Lane::Host,
                    },
                    Expectation::OnlyNamed {
                        nodes: vec![victim.clone()],
                    },
                    refused,
                ],
            )
        }
        "slow-link" => {
            // Adaptive pairing measures the pairs that find a slow node; a slow link
            // between two healthy nodes is found by measuring every pair.
            checks = vec!["all_reduce_2"];
            pairing = Some("full");
            let first = node_name(0);
            sim["link_speed"] = serde_json::json!({ format!("{first}<->{victim}"): 0.5 });
            if group == GroupKind::Processes {
                not_applicable = Some(in_one_process_only("a slow link"));
            }
            (
                format!("the link `{first}<->{victim}` at half speed"),
                vec![
                    Expectation::Named {
                        entity: format!("{first}<->{victim}"),
                        lane: Lane::Network,
                    },
                    Expectation::OnlyNamed {
                        nodes: vec![first, victim.clone()],
                    },
                    refused,
                ],
            )
        }
        "bad-rail" => {
            checks = vec!["multi_all_reduce_2"];
            sim["node_rail_speed"] = serde_json::json!({ &victim: {"1": 0.5} });
            if group == GroupKind::Processes {
                not_applicable = Some(in_one_process_only("a slow rail (NIC)"));
            }
            (
                format!("rail 1 (its NIC) of `{victim}` at half speed"),
                vec![
                    Expectation::FirstError {
                        node: victim.clone(),
                        lane: Lane::Network,
                    },
                    Expectation::OnlyNamed {
                        nodes: vec![victim.clone()],
                    },
                    refused,
                ],
            )
        }
        "hung-node" | "crashed-node" => {
            checks = vec!["all_reduce_2", "all_gather_2", "all_reduce"];
            let hang = scenario == "hung-node";
            let how = match group {
                GroupKind::Processes => {
                    disruption = Some(if hang {
                        Disruption::Stop { rank: target }
                    } else {
                        Disruption::Kill { rank: target }
                    });
                    if hang {
                        "`{victim}`'s agent stopped (SIGSTOP) once the group joined"
                    } else {
                        "`{victim}`'s agent killed (SIGKILL) once the group joined"
                    }
                }
                GroupKind::InProcess => {
                    let fault = if hang { "hang" } else { "crash" };
                    sim["node_faults"] = serde_json::json!({
                        &victim: {"check": "all_reduce_2", "fault": fault}
                    });
                    if hang {
                        "`{victim}` silent (its network frozen) from the first check on"
                    } else {
                        "`{victim}`'s connections closed without a word at the first check"
                    }
                }
            };
            (
                how.replace("{victim}", &victim),
                vec![
                    Expectation::FirstError {
                        node: victim.clone(),
                        lane: Lane::Host,
                    },
                    refused,
                ],
            )
        }
        "xid-79" => {
            checks = vec!["gemm_flops"];
            disruption = Some(Disruption::Xid { xid: 79 });
            runtime = Some(serde_json::json!({"fail_action": "kill", "micro_benchmarks": "c4d"}));
            (
                "XID 79 in the kernel log while the app runs".to_owned(),
                vec![
                    // The runtime check runs on the node that starts the app: the
                    // coordinator's, whose name the runner fills in.
                    Expectation::FirstError {
                        node: String::new(),
                        lane: Lane::Host,
                    },
                    Expectation::Acts {
                        action: Action::StopApp,
                    },
                ],
            )
        }
        "inventory-mismatch" => {
            sim["node_devices"] = serde_json::json!({ &victim: 1 });
            (
                format!("`{victim}` has 1 GPU, the others 2"),
                vec![
                    Expectation::FirstError {
                        node: victim.clone(),
                        lane: Lane::Platform,
                    },
                    Expectation::OnlyNamed {
                        nodes: vec![victim.clone()],
                    },
                    refused,
                ],
            )
        }
        "two-faults" => {
            let other = node_name(0);
            sim["node_device_speed"] = serde_json::json!({ &other: {"0": 0.5} });
            sim["node_devices"] = serde_json::json!({ &victim: 1 });
            (
                format!("GPU 0 of `{other}` at half speed, and `{victim}` with 1 GPU"),
                vec![
                    Expectation::FirstError {
                        node: other.clone(),
                        lane: Lane::Host,
                    },
                    Expectation::Named {
                        entity: format!("{other}/dev0"),
                        lane: Lane::Host,
                    },
                    Expectation::Named {
                        entity: victim.clone(),
                        lane: Lane::Platform,
                    },
                    refused,
                ],
            )
        }
        "degraded" => {
            // Every GPU of every node 15 % below its own record: its peers agree with
            // it, so only the record can tell.
            checks = vec!["gemm_flops"];
            sim["speed"] = serde_json::json!({"0": 0.85, "1": 0.85});
            (
                "every GPU of every node 15% below its own record (3 healthy runs before)"
                    .to_owned(),
                vec![
                    Expectation::AllDegraded { gpus: nodes * 2 },
                    Expectation::NothingNamed,
                    Expectation::Acts {
                        action: Action::Start,
                    },
                ],
            )
        }
        "repeat-offender" => {
            // A rule of 2 of the last 3 keeps the drill short; the default is 3 of 5.
            checks = vec!["gemm_flops"];
            sim["speed"] = serde_json::json!({"1": 0.6});
            repeat_rule = Some(serde_json::json!({"failures": 2, "of_last": 3}));
            history = Some(History::RepeatOffender { starts: 3 });
            (
                format!("GPU 1 of `{victim}` at 60 %, three starts in a row, alone"),
                vec![
                    Expectation::FlaggedAt {
                        node: victim.clone(),
                        after: 2,
                    },
                    refused,
                ],
            )
        }
        "early-return" => {
            checks = vec!["gemm_flops"];
            let mut healed = serde_json::json!({});
            healed["sim"] = sim.clone();
            sim["speed"] = serde_json::json!({"1": 0.6});
            history = Some(History::EarlyReturn { healed });
            (
                format!(
                    "GPU 1 of `{victim}` at 60 %: quarantined, it tries to come back, then \
                     passes once healed"
                ),
                vec![
                    Expectation::StaysQuarantined {
                        node: victim.clone(),
                    },
                    Expectation::ComesBack {
                        node: victim.clone(),
                    },
                ],
            )
        }
        _ => return None,
    };
    let mut config = serde_json::json!({
        "aimaster": {
            "sanity_check": {"fail_action": "fail", "micro_benchmarks": checks.join(","), "timeout": 2},
        },
        // The expected inventory names the odd node even in a group of two, where no
        // majority can.
        "gpuvet": {"backend": "sim", "tolerance_pct": 3, "sim": sim,
                   "expected_inventory": {"gpu_count": 2}},
    });
    if let Some(runtime) = runtime {
        config["aimaster"]["runtime_check"] = runtime;
    }
    if let Some(pairing) = pairing {
        config["gpuvet"]["pairing"] = serde_json::json!(pairing);
    }
    let record = (scenario == "degraded").then(|| {
        config["gpuvet"]["history"] =
            serde_json::json!({"runs": 20, "min_runs": DEGRADED_HISTORY_RUNS});
        let mut healthy = config.clone();
        healthy["gpuvet"]["sim"]["speed"] = serde_json::json!({});
        HistoryRuns {
            runs: DEGRADED_HISTORY_RUNS,
            config: healthy,
        }
    });
    if let Some(rule) = repeat_rule {
        config["gpuvet"]["repeat_offender"] = rule;
    }
    if let Some(History::EarlyReturn { healed }) = &mut history {
        // The healed node's config: the same, without its slow GPU.
        let mut whole = config.clone();
        whole["gpuvet"]["sim"] = healed["sim"].take();
        *healed = whole;
    }
    Some(Drill {
        scenario: scenario.to_owned(),
        nodes,
        fault,
        checks: checks.into_iter().map(str::to_owned).collect(),
        config,
        disruption,
        expectations,
        group,
        not_applicable,
        record,
        history,
    })
}

/// The table of a drill its group cannot play: every expectation not applicable.
pub fn not_applicable(drill: &Drill, why: &str) -> Vec<Proof> {
    every_expectation(drill, Conclusion::NotApplicable, why)
}

/// Whether a named entity is the expected one; a link is the same either way round.
fn same_entity(named: &str, expected: &str) -> bool {
    match (named.split_once("<->"), expected.split_once("<->")) {
        (Some((a, b)), Some((c, d))) => (a, b) == (c, d) || (a, b) == (d, c),
        _ => named == expected,
    }
}

/// What a drill's run showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// The node whose clock and runtime check the run used (the coordinator's).
    pub coordinator: String,
    pub explanation: Explanation,
    /// Every entity named slow or faulty, with its lane, in the order found.
    pub named: Vec<(String, Lane)>,
    /// The events of the attempt, in time order.
    pub events: Vec<EventKind>,
    /// The runtime check stopped the app.
    pub app_stopped: bool,
    /// Every entity named degraded (below its own record), with its lane.
    #[serde(default)]
    pub degraded: Vec<(String, Lane)>,
    /// A history scenario: whether each start's report flagged its node a repeat
    /// offender, in order.
    #[serde(default)]
    pub flagged: Vec<bool>,
    /// A history scenario: each try to lift the node's quarantine, in order.
    #[serde(default)]
    pub untaint_tries: Vec<UntaintTry>,
}

/// One row of the proof table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proof {
    pub scenario: String,
    pub nodes: u32,
    pub expectation: String,
    pub conclusion: Conclusion,
    /// What was found, or why it was not.
    pub evidence: String,
}

/// Judges each expectation of `drill` against what its run showed.
pub fn judge(drill: &Drill, observed: &Observed) -> Vec<Proof> {
    drill
        .expectations
        .iter()
        .map(|expectation| {
            let (conclusion, evidence) = judge_one(expectation, observed);
            Proof {
                scenario: drill.scenario.clone(),
                nodes: drill.nodes,
                expectation: match expectation {
                    Expectation::FirstError { node, lane } if node.is_empty() => {
                        Expectation::FirstError {
                            node: observed.coordinator.clone(),
                            lane: *lane,
                        }
                        .describe()
                    }
                    other => other.describe(),
                },
                conclusion,
                evidence,
            }
        })
        .collect()
}

/// A run that did not get far enough to show anything (no report kept).
pub fn unobserved(drill: &Drill, why: &str) -> Vec<Proof> {
    every_expectation(drill, Conclusion::EvidenceMissing, why)
}

/// One row per expectation, all with `conclusion` for the same reason.
fn every_expectation(drill: &Drill, conclusion: Conclusion, why: &str) -> Vec<Proof> {
    drill
        .expectations
        .iter()
        .map(|expectation| Proof {
            scenario: drill.scenario.clone(),
            nodes: drill.nodes,
            expectation: expectation.describe(),
            conclusion,
            evidence: why.to_owned(),
        })
        .collect()
}

fn judge_one(expectation: &Expectation, observed: &Observed) -> (Conclusion, String) {
    let found = |ok: bool, evidence: String| {
        if ok {
            (Conclusion::Confirmed, evidence)
        } else {
            (Conclusion::EvidenceMissing, evidence)
        }
    };
    let named_list = || {
        if observed.named.is_empty() {
            "nothing was named".to_owned()
        } else {
            let names: Vec<String> = observed
                .named
                .iter()
                .map(|(entity, lane)| format!("{entity} ({lane})"))
                .collect();
            format!("named: {}", names.join(", "))
        }
    };
    match expectation {
        Expectation::NothingNamed => found(
            observed.named.is_empty() && observed.explanation.first_error.is_none(),
            named_list(),
        ),
        Expectation::FirstError { node, lane } => {
            let node = if node.is_empty() {
                &observed.coordinator
            } else {
                node
            };
            match &observed.explanation.first_error {
                Some(first) => {
                    let what = match &first.what {
                        What::Incident { incident } => incident.words().to_owned(),
                        What::Finding {
                            entity, verdict, ..
                        } => {
                            format!("{entity} {}", crate::timeline::verdict_word(*verdict))
                        }
                        What::RuntimeFinding { check, xid, .. } => match xid {
                            Some(xid) => format!("XID {xid}"),
                            None => check.to_string(),
                        },
                        _ => first.detail.clone(),
                    };
                    let lane_found = first.lane.map_or("unknown", Lane::as_str);
                    found(
                        first.node == *node && first.lane == Some(*lane),
                        format!("first error: `{}` {what}, lane {lane_found}", first.node),
                    )
                }
                None => (Conclusion::EvidenceMissing, "no first error".to_owned()),
            }
        }
        Expectation::Named { entity, lane } => found(
            observed
                .named
                .iter()
                .any(|(named, named_lane)| same_entity(named, entity) && named_lane == lane),
            named_list(),
        ),
        Expectation::OnlyNamed { nodes } => found(
            !observed.named.is_empty()
                && observed.named.iter().all(|(entity, _)| {
                    entity
                        .split("<->")
                        .all(|end| nodes.iter().any(|n| end.split('/').next() == Some(n)))
                }),
            named_list(),
        ),
        Expectation::AllDegraded { gpus } => {
            let host = observed
                .degraded
                .iter()
                .filter(|(_, lane)| *lane == Lane::Host)
                .map(|(entity, _)| entity.as_str())
                .collect::<std::collections::BTreeSet<_>>();
            found(
                host.len() == *gpus as usize,
                format!(
                    "{} of {gpus} GPUs named degraded{}",
                    host.len(),
                    host.iter()
                        .next()
                        .map(|first| format!(", e.g. `{first}`"))
                        .unwrap_or_default()
                ),
            )
        }
        Expectation::FlaggedAt { after, .. } => {
            let at = observed.flagged.iter().position(|f| *f).map(|i| i + 1);
            let words: Vec<&str> = observed
                .flagged
                .iter()
                .map(|f| if *f { "flagged" } else { "not flagged" })
                .collect();
            found(
                at == Some(*after as usize),
                format!("starts: {}", words.join(", ")),
            )
        }
        Expectation::StaysQuarantined { .. } => {
            let early = observed.untaint_tries.first();
            found(
                early.is_some_and(|t| !t.lifted),
                early.map_or_else(
                    || "no try to lift the quarantine".to_owned(),
                    |t| format!("after {}: {}", t.after, t.why),
                ),
            )
        }
        Expectation::ComesBack { .. } => {
            let last = observed
                .untaint_tries
                .last()
                .filter(|_| observed.untaint_tries.len() >= 2);
            found(
                last.is_some_and(|t| t.lifted),
                last.map_or_else(
                    || "no try after a passing run".to_owned(),
                    |t| format!("after {}: {}", t.after, t.why),
                ),
            )
        }
        Expectation::Acts { action } => {
            let (ok, what) = match action {
                Action::Start => (
                    observed.events.contains(&EventKind::InstanceStarted)
                        && !observed.events.contains(&EventKind::InstanceStartupFailed),
                    "InstanceStarted",
                ),
                Action::RefuseStart => (
                    observed.events.contains(&EventKind::InstanceStartupFailed)
                        && !observed.events.contains(&EventKind::InstanceStarted),
                    "InstanceStartupFailed",
                ),
                Action::StopApp => (observed.app_stopped, "the app stopped by the runtime check"),
            };
            let events: Vec<String> = observed.events.iter().map(|e| e.to_string()).collect();
            found(
                ok,
                if ok {
                    what.to_owned()
                } else {
                    format!("events: {}", events.join(", "))
                },
            )
        }
    }
}

/// The proof table for people: one row an expectation.
pub fn render(proofs: &[Proof]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<20} {:>5}  {:<17} {:<44} {}\n",
        "scenario", "nodes", "conclusion", "expectation", "evidence"
    ));
    for proof in proofs {
        out.push_str(&format!(
            "{:<20} {:>5}  {:<17} {:<44} {}\n",
            proof.scenario,
            proof.nodes,
            proof.conclusion.as_str(),
            proof.expectation,
            proof.evidence
        ));
    }
    let confirmed = proofs
        .iter()
        .filter(|p| p.conclusion == Conclusion::Confirmed)
        .count();
    out.push_str(&format!(
        "{confirmed} of {} expectations confirmed\n",
        proofs.len()
    ));
    out
}

#[cfg(test)]
mod tests;
