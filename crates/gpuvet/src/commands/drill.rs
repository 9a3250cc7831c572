//! `gpuvet drill [SCENARIO...|--all] [--nodes N|--local-nodes N] [--scale 2,4,8]`:
//! rehearse faults and print the proof table, one row per expectation with its
//! conclusion.

use gpuvet_analysis::drill::{GroupKind, Proof, SCENARIOS, drill as scenario_drill, render};
use gpuvet_analysis::explain::Conclusion;
use gpuvet_model::exit_codes;

use crate::cli::DrillArgs;
use crate::failure::{Failure, note};
use crate::{drill, output};

/// The most agent processes a drill's group has, as for `check --local-nodes`.
const MAX_LOCAL_NODES: u32 = 64;
/// The most nodes of a drill's group in one process: the size the scale benchmark
/// proves.
const MAX_SIM_NODES: u32 = 4096;

pub fn drill(args: DrillArgs) -> Result<i32, Failure> {
    let (group, size, max, size_flag) = match args.local_nodes {
        Some(n) => (GroupKind::Processes, n, MAX_LOCAL_NODES, "--local-nodes"),
        None => (GroupKind::InProcess, args.nodes, MAX_SIM_NODES, "--nodes"),
    };
    if args.list {
        let mut text = String::new();
        for name in SCENARIOS {
            let spec = scenario_drill(name, size.max(2), group).expect("a listed scenario");
            text.push_str(&format!("{name:<20} {}\n", spec.fault));
        }
        return output::stdout(&text).map(|()| exit_codes::SUCCESS);
    }
    let scenarios: Vec<String> = if args.all {
        SCENARIOS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.scenarios.clone()
    };
    if scenarios.is_empty() {
        return Err(Failure::usage("name the scenarios to run, or pass `--all`")
            .with_hint("`gpuvet drill --list` names them"));
    }
    for name in &scenarios {
        if scenario_drill(name, 2, group).is_none() {
            return Err(Failure::usage(format!("unknown scenario `{name}`"))
                .with_hint(format!("expected one of {}", SCENARIOS.join(", "))));
        }
    }
    let sizes = if args.scale.is_empty() {
        vec![size]
    } else {
        args.scale.clone()
    };
    for &size in &sizes {
        if !(2..=max).contains(&size) {
            let flag = if args.scale.is_empty() {
                size_flag
            } else {
                "--scale"
            };
            return Err(Failure::usage(format!(
                "`{flag}` has `{size}` nodes; expected 2 to {max}"
            ))
            .with_hint("a drill compares nodes, so a group has two at least"));
        }
    }
    let store = match &args.store {
        Some(store) => store.clone(),
        None => drill::default_store(args.config.as_deref())?,
    };
    let mut proofs: Vec<Proof> = Vec::new();
    for &size in &sizes {
        for name in &scenarios {
            let spec = scenario_drill(name, size, group).expect("checked above");
            let job = drill::job_id(name, size);
            note(format!(
                "drill `{name}` on {size} nodes: {} (job `{job}`)",
                spec.fault
            ));
            proofs.extend(drill::run(&spec, &store, &job)?);
        }
    }
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&proofs).expect("proofs serialize");
        text.push('\n');
        text
    } else {
        render(&proofs)
    };
    output::stdout(&text)?;
    let all_confirmed = proofs
        .iter()
        .all(|p| p.conclusion != Conclusion::EvidenceMissing);
    Ok(if all_confirmed {
        exit_codes::SUCCESS
    } else {
        exit_codes::CHECK_FAILED
    })
}
