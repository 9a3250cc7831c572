//! `gpuvet undrain NODE`: lifts the drain `fail_action: rebuild` put on a Slurm node,
//! once the node has proven healthy (`crate::proven`): a passing run on it recorded
//! after the drain, in the store (run it on the node, after `gpuvet check` there, or
//! point `--store` at a store with the node's runs). `--force --reason` lifts it without
//! one. A lifted drain is recorded as `NodeUntainted`, as `gpuvet untaint` records a
//! lifted taint: who, why, and the proof or `forced`.

use gpuvet_model::exit_codes;
use gpuvet_slurm::nodes::REASON_PREFIX;
use gpuvet_slurm::{Slurm, SlurmError};
use serde_json::json;

use super::events::open_existing;
use crate::cli::{NodeSourceArgs, UndrainArgs};
use crate::failure::{Failure, note};
use crate::identity::load_config;
use crate::proven::proven_healthy;
use crate::{node_runs, output};

pub fn undrain(args: UndrainArgs, slurm: &dyn Slurm) -> Result<i32, Failure> {
    let nodes = slurm.nodes().map_err(slurm_failure)?;
    let Some(node) = nodes.iter().find(|n| n.name == args.node) else {
        return Err(Failure::new(
            exit_codes::USAGE,
            SlurmError::NoSuchNode(args.node.clone()),
        ));
    };
    if !node.drained_by_gpuvet() {
        let why = match (&node.reason, node.is_drained()) {
            (Some(reason), true) => format!(
                "node `{}` is drained, but not by gpuvet (its reason, `{reason}`, does not \
                 start with `{REASON_PREFIX}`); nothing of gpuvet's to lift\n",
                node.name
            ),
            _ => format!(
                "node `{}` is not drained (`{}`); nothing to lift\n",
                node.name, node.state
            ),
        };
        output::stdout(&why)?;
        return Ok(exit_codes::SUCCESS);
    }
    // Read before the drain is lifted, so a config that cannot be read lifts nothing.
    let config = load_config(args.config.as_deref())?;
    let who = node_runs::who();
    let name = &node.name;
    let (message, details) = if args.force {
        note(format!(
            "`--force`: lifting the drain of node `{name}` without a passing run after it"
        ));
        (
            format!(
                "lifted gpuvet's drain from node `{name}` without proof, forced by `{who}`: {}",
                args.reason.as_deref().unwrap_or("")
            ),
            json!({
                "forced": true, "by": who, "reason": args.reason,
                "drained_at_ms": node.reason_at_ms,
            }),
        )
    } else {
        let store = open_existing(args.config.as_deref(), args.store.store.as_deref())?;
        match proven_healthy(&store, name, node.reason_at_ms)? {
            Ok(proof) => {
                let passed = format!(
                    "node `{name}` passed job `{}` attempt {} after the drain",
                    proof.attempt.job_id, proof.attempt.attempt
                );
                note(&passed);
                (
                    format!("lifted gpuvet's drain from node `{name}`: {passed}"),
                    json!({
                        "forced": false, "by": who, "reason": args.reason,
                        "drained_at_ms": node.reason_at_ms,
                        "proof": { "job_id": proof.attempt.job_id, "attempt": proof.attempt.attempt },
                    }),
                )
            }
            Err(why) => {
                return Err(Failure::new(
                    exit_codes::NOT_PROVEN,
                    anyhow::anyhow!("node `{name}` is not proven healthy: {why}"),
                )
                .with_hint(
                    "run `gpuvet check` on the node (e.g. over ssh: a drained node takes no \
                     jobs) and then `gpuvet undrain` there, or pass `--force --reason TEXT`",
                ));
            }
        }
    };
    slurm.resume(name).map_err(slurm_failure)?;
    output::stdout(&format!("lifted gpuvet's drain from node `{name}`\n"))?;
    let (attempt, event) = node_runs::untainted_event(name, message, details);
    let source = NodeSourceArgs {
        config: args.config.clone(),
        store: args
            .store
            .store
            .as_ref()
            .map(|path| path.display().to_string()),
        server: None,
    };
    node_runs::record_and_send(&source, &config, &attempt, &event);
    Ok(exit_codes::SUCCESS)
}

/// A failure of Slurm's commands: exit 82 (2 for a node Slurm does not have), with the
/// error's hint.
fn slurm_failure(err: SlurmError) -> Failure {
    let code = match err {
        SlurmError::NoSuchNode(_) => exit_codes::USAGE,
        _ => exit_codes::SLURM_ERROR,
    };
    Failure::new(code, err)
}
