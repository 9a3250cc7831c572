//! `gpuvet undrain NODE`: lifts the drain `fail_action: rebuild` put on a Slurm node,
//! once the node has proven healthy (`crate::proven`): a passing run on it recorded
//! after the drain, in the store (run it on the node, after `gpuvet check` there, or
//! point `--store` at a store with the node's runs). `--force` lifts it without one.

use gpuvet_model::exit_codes;
use gpuvet_slurm::nodes::REASON_PREFIX;
use gpuvet_slurm::{Slurm, SlurmError};

use super::events::open_existing;
use crate::cli::UndrainArgs;
use crate::failure::{Failure, note};
use crate::output;
use crate::proven::proven_healthy;

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
    if args.force {
        note(format!(
            "`--force`: lifting the drain of node `{}` without a passing run after it",
            node.name
        ));
    } else {
        let store = open_existing(args.config.as_deref(), args.store.store.as_deref())?;
        match proven_healthy(&store, &node.name, node.reason_at_ms)? {
            Ok(proof) => note(format!(
                "node `{}` passed job `{}` attempt {} after the drain",
                node.name, proof.attempt.job_id, proof.attempt.attempt
            )),
            Err(why) => {
                return Err(Failure::new(
                    exit_codes::NOT_PROVEN,
                    anyhow::anyhow!("node `{}` is not proven healthy: {why}", node.name),
                )
                .with_hint(
                    "run `gpuvet check` on the node (e.g. over ssh: a drained node takes no \
                     jobs) and then `gpuvet undrain` there, or pass `--force`",
                ));
            }
        }
    }
    slurm.resume(&node.name).map_err(slurm_failure)?;
    output::stdout(&format!(
        "lifted gpuvet's drain from node `{}`\n",
        node.name
    ))?;
    Ok(exit_codes::SUCCESS)
}

/// A failure of Slurm's commands: exit 81, with the error's hint.
fn slurm_failure(err: SlurmError) -> Failure {
    let code = match err {
        SlurmError::NoSuchNode(_) => exit_codes::USAGE,
        _ => exit_codes::SLURM_ERROR,
    };
    Failure::new(code, err)
}
