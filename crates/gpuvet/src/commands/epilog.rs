//! `gpuvet epilog`: Slurm's `Epilog` records the end of a job on each of its nodes as a
//! `JobEnded` event, on the node's latest attempt of the job in its store, so the
//! timeline, the server and a bundle show when (and, where Slurm says, how) the job
//! ended: also one that was cancelled, or whose app gpuvet never started. A job gpuvet
//! did not run on this node is not recorded: the Epilog runs after every job.

use gpuvet_model::events::{EventKind, NewEvent};
use gpuvet_model::exit_codes;
use gpuvet_model::ids::new_id;
use gpuvet_model::slurm::env::SLURM_JOB_ID;
use gpuvet_model::time::unix_now_ms;
use gpuvet_store::Store;
use serde_json::{Map, Value};

use crate::cli::{EpilogArgs, NodeSourceArgs};
use crate::failure::Failure;
use crate::identity::{load_config, non_empty_env, store_path, this_node, with_slurm_names};
use crate::{node_runs, output};

/// What Slurm may say of a job's end in an Epilog's environment, each kept as it is
/// given: the exit code as `exit:signal`, the raw wait status, and the highest exit
/// code of any of its steps. Which ones a node's Epilog gets depends on Slurm's
/// version; none is required.
const EXIT_VARIABLES: [&str; 3] = [
    "SLURM_JOB_EXIT_CODE2",
    "SLURM_JOB_EXIT_CODE",
    "SLURM_JOB_DERIVED_EC",
];

pub fn epilog(args: EpilogArgs) -> Result<i32, Failure> {
    let job_id = args
        .job_id
        .clone()
        .or_else(|| non_empty_env(SLURM_JOB_ID))
        .ok_or_else(|| {
            Failure::usage("no job to record: `SLURM_JOB_ID` is not set and no `--job-id` given")
                .with_hint(
                    "run `gpuvet epilog` as Slurm's `Epilog` (deploy/slurm/epilog.sh), or name \
                     the job with `--job-id`",
                )
        })?;
    let node = this_node();
    let config = load_config(args.config.as_deref())?;
    let path = store_path(args.store.store.as_deref(), &config);
    if !path.exists() {
        output::stdout(&format!(
            "gpuvet has no store at `{}`; nothing recorded\n",
            path.display()
        ))?;
        return Ok(exit_codes::SUCCESS);
    }
    let instance = Store::open(&path)?.instance(&job_id, &node, None)?;
    let Some(instance) = instance else {
        output::stdout(&format!(
            "gpuvet did not run job `{job_id}` on node `{node}`; nothing recorded\n"
        ))?;
        return Ok(exit_codes::SUCCESS);
    };
    let mut event = job_ended_event(&job_id, &node, non_empty_env);
    event.details = with_slurm_names(event.details);
    let source = NodeSourceArgs {
        config: args.config.clone(),
        store: Some(path.display().to_string()),
        server: None,
    };
    node_runs::record_and_send(&source, &config, &instance.attempt, &event);
    output::stdout(&format!(
        "recorded the end of job `{job_id}` attempt {} on node `{node}`\n",
        instance.attempt.attempt
    ))?;
    Ok(exit_codes::SUCCESS)
}

/// The `JobEnded` event of `job_id` on `node`, with what `env` says of the exit.
fn job_ended_event(job_id: &str, node: &str, env: impl Fn(&str) -> Option<String>) -> NewEvent {
    let said: Map<String, Value> = EXIT_VARIABLES
        .iter()
        .filter_map(|name| Some(((*name).to_owned(), Value::String(env(name)?))))
        .collect();
    let given = |name: &str| said.get(name).and_then(Value::as_str);
    let how = if let Some(code) = given(EXIT_VARIABLES[0]) {
        format!("exit code `{code}`")
    } else if let Some(code) = given(EXIT_VARIABLES[2]) {
        format!("highest step exit code `{code}`")
    } else {
        "Slurm gave this node's Epilog no exit code".to_owned()
    };
    NewEvent {
        event_id: new_id(),
        time_ms: unix_now_ms(),
        kind: EventKind::JobEnded,
        lane: None,
        message: format!("Slurm job `{job_id}` ended on node `{node}`: {how}"),
        details: serde_json::json!({ "exit": said }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_event_says_the_exit_slurm_gave_or_that_it_gave_none() {
        let event = job_ended_event(
            "42",
            "gv-node1",
            from(&[
                ("SLURM_JOB_EXIT_CODE2", "1:0"),
                ("SLURM_JOB_DERIVED_EC", "2"),
                ("SLURM_JOB_USER", "alice"),
            ]),
        );
        assert_eq!(event.kind, EventKind::JobEnded);
        assert_eq!(event.lane, None);
        assert_eq!(
            event.message,
            "Slurm job `42` ended on node `gv-node1`: exit code `1:0`"
        );
        assert_eq!(
            event.details,
            serde_json::json!({ "exit": {
                "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_DERIVED_EC": "2"
            } })
        );
        assert!(!event.event_id.is_empty());

        let derived = job_ended_event("42", "n", from(&[("SLURM_JOB_DERIVED_EC", "0")]));
        assert_eq!(
            derived.message,
            "Slurm job `42` ended on node `n`: highest step exit code `0`"
        );
        let none = job_ended_event("42", "n", from(&[]));
        assert_eq!(
            none.message,
            "Slurm job `42` ended on node `n`: Slurm gave this node's Epilog no exit code"
        );
        assert_eq!(none.details, serde_json::json!({ "exit": {} }));
    }
}
