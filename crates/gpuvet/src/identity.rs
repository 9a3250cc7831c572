//! Who is running and where results go: job id, node, instance, config and store path,
//! from flags, then the environment users already have, then defaults.

use std::path::{Path, PathBuf};

use gpuvet_model::config::Config;
use gpuvet_model::slurm::SlurmNames;

use crate::cli::IdentityArgs;
use crate::failure::Failure;

/// The job id used when nothing names one.
pub const DEFAULT_JOB_ID: &str = "default";

#[derive(Debug, Clone)]
pub struct Identity {
    pub job_id: String,
    pub node: String,
    pub instance: String,
    /// Slurm's job, step and node, inside a Slurm job.
    pub slurm: Option<SlurmNames>,
}

impl Identity {
    pub fn resolve(args: &IdentityArgs) -> Identity {
        let slurm = SlurmNames::from_env(non_empty_env);
        let job_id = args
            .job_id
            .clone()
            .or_else(|| non_empty_env("TORCHELASTIC_RUN_ID"))
            .or_else(|| slurm.as_ref().map(|s| s.job_id.clone()))
            .unwrap_or_else(|| DEFAULT_JOB_ID.to_owned());
        // Slurm's name for the node, so that the culprits a rebuild drains are names
        // `scontrol` knows.
        let node = args
            .node
            .clone()
            .or_else(|| non_empty_env("NODE_NAME"))
            .or_else(|| slurm.as_ref().and_then(|s| s.node.clone()))
            .unwrap_or_else(hostname);
        let instance = args
            .instance
            .clone()
            .or_else(|| non_empty_env("POD_NAME"))
            .or_else(|| non_empty_env("HOSTNAME"))
            .unwrap_or_else(hostname);
        Identity {
            job_id,
            node,
            instance,
            slurm,
        }
    }
}

/// The secret values this process holds, which no report or bundle may contain.
pub fn known_secrets() -> Vec<String> {
    gpuvet_model::env_vars::SECRET_VARS
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .filter(|value| !value.is_empty())
        .collect()
}

/// This node's name as `--node` would default: `GPUVET_NODE`, else `NODE_NAME`, else
/// `SLURMD_NODENAME`, else the hostname.
pub fn this_node() -> String {
    non_empty_env("GPUVET_NODE")
        .or_else(|| non_empty_env("NODE_NAME"))
        .or_else(|| non_empty_env(gpuvet_model::slurm::env::SLURMD_NODENAME))
        .unwrap_or_else(hostname)
}

/// `details` with this process's Slurm names under `slurm`, inside a Slurm job: so
/// every event says which job, step and node it came from.
pub fn with_slurm_names(mut details: serde_json::Value) -> serde_json::Value {
    if let (Some(names), Some(map)) = (SlurmNames::from_env(non_empty_env), details.as_object_mut())
        && let Ok(names) = serde_json::to_value(names)
    {
        map.insert("slurm".to_owned(), names);
    }
    details
}

/// The variable's value, unless it is unset or blank.
pub fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Reads and validates the config file, or the defaults when none is given.
pub fn load_config(path: Option<&Path>) -> Result<Config, Failure> {
    let Some(path) = path else {
        return Ok(Config::default());
    };
    // A config file that cannot be opened is the user's to fix, whatever the reason:
    // exit 2, with the OS's reason on its own line.
    let file = std::fs::File::open(path).map_err(|err| {
        Failure::usage_from(
            format!("cannot read the config file `{}`", path.display()),
            err,
        )
        .with_hint("pass an existing file with `--config`, or leave it out to use the defaults")
    })?;
    Config::from_reader(file).map_err(|err| {
        let failure = Failure::from(err);
        let message = format!("`{}`: {}", path.display(), failure.error);
        Failure {
            error: anyhow::anyhow!(message),
            ..failure
        }
    })
}

/// The store path: flag or env, then the config, then the user's state directory.
pub fn store_path(flag: Option<&Path>, config: &Config) -> PathBuf {
    if let Some(path) = flag {
        return path.to_owned();
    }
    if let Some(path) = &config.settings.store {
        return PathBuf::from(path);
    }
    gpuvet_store::default_path(
        non_empty_env("XDG_STATE_HOME").as_deref(),
        non_empty_env("HOME").as_deref(),
    )
}
