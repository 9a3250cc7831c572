//! One run of `rank.py` as a child process: its JSON lines read as they come, its
//! stderr kept for the error message, and the process killed on drop, so no script
//! outlives the work it was started for.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{BackendError, CancelToken};

const SCRIPT: &str = include_str!("rank.py");
/// How often a wait looks at the cancel token, the deadline and the peers.
const POLL: Duration = Duration::from_millis(50);
/// Lines of stderr kept: a Python traceback ends with the line that explains it.
const STDERR_LINES: usize = 20;
/// How long a script whose stdout closed gets to exit before it is killed.
const EXIT_WAIT: Duration = Duration::from_secs(2);

pub(super) struct PythonRun {
    python: String,
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl PythonRun {
    /// Starts `python -c rank.py ARGS` with `env` added to this process's environment.
    pub(super) fn spawn(
        python: &Path,
        args: &Value,
        env: &[(&str, &str)],
    ) -> Result<PythonRun, BackendError> {
        let shown = format!("`{}`", python.display());
        let mut command = Command::new(python);
        command
            .arg("-c")
            .arg(SCRIPT)
            .arg(args.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        // The rank lives inside this call's scope (dropping the run kills it), so the
        // spawning thread outlives it unless the whole agent dies.
        crate::child::die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|err| BackendError::io(format!("cannot run {shown}"), err))?;
        let (stdout, stderr_pipe) = (child.stdout.take(), child.stderr.take());
        let (sender, lines) = mpsc::channel();
        if let Some(stdout) = stdout {
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if sender.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(pipe) = stderr_pipe {
            let tail = Arc::clone(&stderr);
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                    if tail.len() == STDERR_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            });
        }
        Ok(PythonRun {
            python: shown,
            child,
            lines,
            stderr,
        })
    }

    /// The next JSON object the script prints, before `deadline`. `stop_early` is
    /// asked between polls; a reason it returns ends the wait as the error.
    pub(super) fn next_message(
        &mut self,
        deadline: Instant,
        cancel: &CancelToken,
        awaited: &str,
        stop_early: &mut dyn FnMut() -> Option<String>,
    ) -> Result<Value, BackendError> {
        loop {
            cancel.check()?;
            match self.lines.recv_timeout(POLL) {
                Ok(line) => match serde_json::from_str::<Value>(&line) {
                    Ok(value) if value.is_object() => return Ok(value),
                    // Something else wrote to stdout (a library's print): not ours.
                    _ => continue,
                },
                Err(RecvTimeoutError::Disconnected) => return Err(self.exited(awaited)),
                Err(RecvTimeoutError::Timeout) => {}
            }
            if let Some(reason) = stop_early() {
                return Err(BackendError::Failed(reason));
            }
            if Instant::now() >= deadline {
                return Err(BackendError::Failed(format!(
                    "{} printed no {awaited} before the deadline; it hung and was killed{}",
                    self.python,
                    self.stderr_suffix()
                )));
            }
        }
    }

    /// Why the script stopped printing: its exit status and its last stderr line.
    fn exited(&mut self, awaited: &str) -> BackendError {
        let waited = Instant::now() + EXIT_WAIT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < waited => thread::sleep(POLL),
                _ => break None,
            }
        };
        // The stderr reader may still hold the last lines for a moment.
        thread::sleep(POLL);
        BackendError::Failed(format!(
            "{} {} before printing its {awaited}{}",
            self.python,
            describe(status),
            self.stderr_suffix()
        ))
    }

    fn stderr_suffix(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        match tail.iter().rev().find(|line| !line.trim().is_empty()) {
            Some(line) => format!(": {}", line.trim()),
            None => String::new(),
        }
    }
}

impl Drop for PythonRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn describe(status: Option<ExitStatus>) -> String {
    match status {
        Some(status) if status.success() => "exited".to_owned(),
        Some(status) => format!("exited with {status}"),
        None => "closed its output".to_owned(),
    }
}
