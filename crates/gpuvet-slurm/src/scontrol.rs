//! The cluster behind a trait: [`Slurm`] is what gpuvet asks of it, [`Scontrol`] asks
//! Slurm's own commands, as child processes with their arguments as a vector (no shell,
//! so a reason or a name is never read as shell syntax) under a timeout.

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::SlurmError;
use crate::nodes::{SINFO_FORMAT, SlurmNode, parse_sinfo};

/// What gpuvet asks of a Slurm cluster.
pub trait Slurm {
    /// Every node, with its state and reason.
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError>;
    /// Drains `node` with `reason`: no new jobs land on it.
    fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError>;
    /// Lifts a drain: the node takes jobs again.
    fn resume(&self, node: &str) -> Result<(), SlurmError>;
    /// Puts a batch job back in the queue, to start again on nodes Slurm picks.
    fn requeue(&self, job_id: &str) -> Result<(), SlurmError>;
}

/// Slurm through `scontrol` and `sinfo`.
#[derive(Debug, Clone)]
pub struct Scontrol {
    /// The programs, found on `PATH` unless a path is given.
    pub scontrol: String,
    pub sinfo: String,
    /// How long one command may take before it is killed.
    pub timeout: Duration,
}

/// Long enough for a busy controller (Slurm's own `MessageTimeout` defaults to 10 s);
/// short enough that a hung one does not hold the job.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for Scontrol {
    fn default() -> Self {
        Scontrol {
            scontrol: "scontrol".to_owned(),
            sinfo: "sinfo".to_owned(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl Slurm for Scontrol {
    fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        let format = format!("--format={SINFO_FORMAT}");
        let args = ["--noheader", "--Node", format.as_str()];
        // The reason's time in UTC and one format, whatever the site's settings.
        let env = [("TZ", "UTC"), ("SLURM_TIME_FORMAT", "standard")];
        let stdout = run(&self.sinfo, &args, &env, self.timeout)?;
        parse_sinfo(&stdout).map_err(|detail| SlurmError::Unreadable {
            command: command_line(&self.sinfo, &args),
            detail,
        })
    }

    fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        plain_name(node)?;
        let args = [
            "update".to_owned(),
            format!("NodeName={node}"),
            "State=DRAIN".to_owned(),
            format!("Reason={reason}"),
        ];
        run(&self.scontrol, &args, &[], self.timeout).map(drop)
    }

    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        plain_name(node)?;
        let args = [
            "update".to_owned(),
            format!("NodeName={node}"),
            "State=RESUME".to_owned(),
        ];
        run(&self.scontrol, &args, &[], self.timeout).map(drop)
    }

    fn requeue(&self, job_id: &str) -> Result<(), SlurmError> {
        run(&self.scontrol, &["requeue", job_id], &[], self.timeout).map(drop)
    }
}

/// One node's name, never a hostlist: `NodeName=a,b` or `gpu-[1-4]` would act on
/// several nodes.
fn plain_name(node: &str) -> Result<(), SlurmError> {
    let plain = !node.is_empty()
        && !node.contains(['[', ']', ',', '='])
        && !node.contains(char::is_whitespace);
    if plain {
        Ok(())
    } else {
        Err(SlurmError::NoSuchNode(node.to_owned()))
    }
}

fn command_line<S: AsRef<str>>(program: &str, args: &[S]) -> String {
    let mut line = program.to_owned();
    for arg in args {
        line.push(' ');
        line.push_str(arg.as_ref());
    }
    line
}

/// Runs `program` with `args` (and `env` added), and returns its stdout; an exit other
/// than 0, or a run past `timeout` (then the child is killed), is an error.
pub fn run<S: AsRef<str>>(
    program: &str,
    args: &[S],
    env: &[(&str, &str)],
    timeout: Duration,
) -> Result<String, SlurmError> {
    let command = command_line(program, args);
    let mut child = Command::new(program)
        .args(args.iter().map(AsRef::as_ref))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| SlurmError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    // Read both pipes while waiting, so a child that writes much never blocks on them.
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SlurmError::TimedOut { command, timeout });
            }
            Ok(None) => thread::sleep(Duration::from_millis(10)),
            Err(source) => {
                let _ = child.kill();
                return Err(SlurmError::Spawn {
                    program: program.to_owned(),
                    source,
                });
            }
        }
    };
    let stdout = String::from_utf8_lossy(&stdout.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
    if !status.success() {
        let said = stderr
            .lines()
            .chain(stdout.lines())
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("no message")
            .to_owned();
        return Err(SlurmError::Failed {
            command,
            status: status.to_string(),
            stderr: said,
        });
    }
    Ok(stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_reach_scontrol() {
        for name in ["gpu-01", "node.example", "n_7"] {
            assert!(plain_name(name).is_ok(), "{name}");
        }
        for name in ["", "gpu-[01-04]", "a,b", "a b", "a=b"] {
            assert!(
                matches!(plain_name(name), Err(SlurmError::NoSuchNode(n)) if n == name),
                "{name}"
            );
        }
    }
}
