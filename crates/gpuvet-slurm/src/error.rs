//! The one error type of this crate: what failed, in the repository's style (lowercase,
//! values in backticks), with a `hint:` where there is a next step.

use std::time::Duration;

/// What went wrong running Slurm's commands.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The program could not be started (not installed, not executable).
    #[error("cannot run `{program}`")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// The command did not finish in time and was killed: a hung controller is a fault
    /// to report, never a way to wait forever.
    #[error("`{command}` did not finish within {} s and was killed", timeout.as_secs_f64())]
    TimedOut { command: String, timeout: Duration },
    /// The command ran and failed; `stderr` is what it said (its last line).
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    /// The command's output is not what gpuvet reads.
    #[error("cannot read the output of `{command}`: {detail}")]
    Unreadable { command: String, detail: String },
    /// A node named on the command line is not in the cluster.
    #[error("node `{0}` is not a node of this Slurm cluster")]
    NoSuchNode(String),
}

impl SlurmError {
    /// The message and its causes on one line, `: `-separated: for warnings and records.
    pub fn with_causes(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(err) = cause {
            text.push_str(": ");
            text.push_str(&err.to_string());
            cause = err.source();
        }
        text
    }

    /// What to do about it, when there is something to do.
    pub fn hint(&self) -> Option<&str> {
        match self {
            SlurmError::Spawn { .. } => Some(
                "install Slurm's client commands on the node (Debian: `apt-get install \
                 slurm-client`) and put them on `PATH`, or turn Slurm off with \
                 `gpuvet.slurm.enabled: \"off\"`",
            ),
            SlurmError::TimedOut { .. } => {
                Some("check that `slurmctld` is up and reachable from this node (`scontrol ping`)")
            }
            SlurmError::Failed { .. } => Some(
                "check that `slurmctld` answers (`scontrol ping`); draining, resuming and \
                 requeueing also need a Slurm operator or administrator (`sacctmgr modify \
                 user NAME set adminlevel=operator`), or root",
            ),
            SlurmError::Unreadable { .. } => None,
            SlurmError::NoSuchNode(_) => Some("`sinfo --Node` lists the cluster's nodes"),
        }
    }
}
