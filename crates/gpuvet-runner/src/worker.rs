//! The runner's side of the worker process that does the checks' device work: start
//! it, send it rounds of units, read its answers on a thread, and end it — SIGKILL,
//! then reap — when a unit hangs, the deadline passes or the run is over, so no work a
//! check started outlives the run and a hung device's memory is freed before the app
//! starts. Between checks an idle worker is kept, so the backend starts once per run.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use gpuvet_backend::{Backend, BackendError, Sample, WorkSpec, with_causes};
use gpuvet_model::catalog::CheckName;

use crate::RunnerError;
use crate::protocol::{self, FromWorker, PROTOCOL, Request, WireWork};

/// How long a worker whose input was closed may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the kernel to reap a killed worker. One stuck in a driver call
/// (state D) dies only when the call returns; the run does not wait for that.
const REAP_WAIT: Duration = Duration::from_secs(5);
/// A longer line is not the protocol.
const MAX_LINE: u64 = protocol::MAX_LINE_BYTES as u64;

/// How the runner starts a check's worker process: a program that speaks the pipe
/// protocol (`gpuvet worker ...`, which calls [`serve_worker`](crate::serve_worker)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLauncher {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// What arrives from the units of one round.
#[derive(Debug)]
pub(crate) enum Event {
    Unit {
        slot: usize,
        result: Result<Sample, BackendError>,
    },
    /// The worker broke the protocol or could not do the work. `blame_units`: it had
    /// started, so the units still running fail with this message; otherwise the
    /// check fails without blaming a device.
    Broken { message: String, blame_units: bool },
    /// Its output ended: the process exited or is exiting. `ready`: after its hello.
    Ended { ready: bool },
}

/// A run's worker processes, one at a time: a round goes to the live one, or to a new
/// one when there is none (the first round, or after a kill).
#[derive(Debug)]
pub(crate) struct Workers {
    launcher: WorkerLauncher,
    backend: String,
    devices: Vec<u32>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Set once the run is over: no new worker starts.
    stopped: bool,
    live: Option<Live>,
    rounds: u64,
    /// The check that may use the worker now ([`Workers::for_check`]); a check that
    /// was abandoned at its deadline can no longer start, kill or reap one.
    check: u64,
}

/// One check's use of a run's [`Workers`]: everything it does is refused once a newer
/// check has begun or this one was abandoned.
#[derive(Debug, Clone)]
pub(crate) struct CheckWorker {
    workers: Arc<Workers>,
    check: u64,
}

impl CheckWorker {
    pub(crate) fn round(
        &self,
        check: CheckName,
        work: &WorkSpec,
        units: Vec<Vec<u32>>,
    ) -> Result<mpsc::Receiver<Event>, RunnerError> {
        self.workers.round(self.check, check, work, units)
    }

    /// SIGKILLs the live worker, if any, and reaps it; says how it ended. The next
    /// round starts a new worker.
    pub(crate) fn kill(&self) -> Option<String> {
        let live = self.workers.take_live(self.check, false)?;
        Some(end(live, false))
    }

    /// Like [`CheckWorker::kill`], but first gives a worker whose output ended a moment
    /// to exit on its own, so its own exit status is what is reported.
    pub(crate) fn reap(&self) -> Option<String> {
        let live = self.workers.take_live(self.check, false)?;
        Some(end(live, true))
    }

    /// At the deadline: kills the live worker and refuses anything this check's thread
    /// still tries, so it cannot disturb the next check's worker; says how it ended.
    pub(crate) fn abandon(&self) -> Option<String> {
        let live = self.workers.take_live(self.check, true)?;
        Some(end(live, false))
    }
}

#[derive(Debug)]
struct Live {
    child: Child,
    stdin: Option<ChildStdin>,
    sink: Arc<Mutex<Sink>>,
}

/// Where the reader thread delivers: the current round's channel.
#[derive(Debug, Default)]
struct Sink {
    round: Option<(u64, mpsc::Sender<Event>)>,
    /// The output ended or broke: this worker takes no more rounds.
    done: bool,
    /// What came while no round listened (a worker that died before its first round
    /// was sent, or between rounds); the next round gets it first.
    undelivered: Vec<Event>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Workers {
    /// Workers that must build the same backend as `backend`, or are refused.
    pub(crate) fn new(launcher: WorkerLauncher, backend: &dyn Backend) -> Self {
        Workers {
            launcher,
            backend: backend.name().to_owned(),
            devices: backend.devices().iter().map(|d| d.index).collect(),
            state: Mutex::new(State::default()),
        }
    }

    /// The next check's use of the workers: from now on, only it may use them.
    pub(crate) fn for_check(self: &Arc<Self>) -> CheckWorker {
        let mut state = lock(&self.state);
        state.check += 1;
        CheckWorker {
            workers: Arc::clone(self),
            check: state.check,
        }
    }

    /// The live worker, for check `check` only; when `retire`, that check may use the
    /// workers no more.
    fn take_live(&self, check: u64, retire: bool) -> Option<Live> {
        let mut state = lock(&self.state);
        if state.check != check {
            return None;
        }
        if retire {
            state.check += 1;
        }
        state.live.take()
    }

    /// Sends one round of units to the worker, starting one when none is live, and
    /// returns where their answers arrive. `Err`: no worker could take it, or the
    /// check `for_check` numbered is no longer the current one.
    fn round(
        &self,
        for_check: u64,
        check: CheckName,
        work: &WorkSpec,
        units: Vec<Vec<u32>>,
    ) -> Result<mpsc::Receiver<Event>, RunnerError> {
        let mut state = lock(&self.state);
        if state.stopped || state.check != for_check {
            return Err(RunnerError::CheckOver);
        }
        if state
            .live
            .as_ref()
            .is_some_and(|live| lock(&live.sink).done)
            && let Some(live) = state.live.take()
        {
            end(live, true);
        }
        if state.live.is_none() {
            state.live = Some(self.spawn()?);
        }
        state.rounds += 1;
        let round = state.rounds;
        let live = state.live.as_mut().expect("a live worker was just ensured");
        let (tx, rx) = mpsc::channel();
        {
            let mut sink = lock(&live.sink);
            for event in std::mem::take(&mut sink.undelivered) {
                let _ = tx.send(event);
            }
            sink.round = Some((round, tx));
        }
        let line = protocol::encode(&Request {
            round,
            check,
            work: WireWork::from(work),
            units,
        }) + "\n";
        if let Some(stdin) = live.stdin.as_mut() {
            // A worker that cannot take it has died; its reader reports how.
            let _ = stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.flush());
        }
        Ok(rx)
    }

    /// Ends the live worker (by closing its input when `graceful`, else with SIGKILL)
    /// and refuses new rounds.
    pub(crate) fn stop(&self, graceful: bool) -> Option<String> {
        let live = {
            let mut state = lock(&self.state);
            state.stopped = true;
            state.live.take()
        }?;
        Some(end(live, graceful))
    }

    fn spawn(&self) -> Result<Live, RunnerError> {
        let mut command = Command::new(&self.launcher.program);
        command
            .args(&self.launcher.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // A dying gpuvet takes its worker along. The signal follows the thread that
        // spawned the worker, which outlives every round it runs.
        gpuvet_backend::child::die_with_parent(&mut command);
        let mut child = command.spawn().map_err(|source| RunnerError::StartWorker {
            program: self.launcher.program.clone(),
            source,
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take();
        let sink = Arc::new(Mutex::new(Sink::default()));
        let reader = Reader {
            sink: Arc::clone(&sink),
            backend: self.backend.clone(),
            devices: self.devices.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("worker-{}", child.id()))
            .spawn(move || reader.read(stdout));
        if let Err(source) = spawned {
            let _ = child.kill();
            let _ = child.wait();
            return Err(RunnerError::StartReader { source });
        }
        Ok(Live { child, stdin, sink })
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // A backstop: the runner stops its workers itself.
        self.stop(false);
    }
}

/// Ends a worker and reaps it; says how it ended. Graceful: its own exit status, when
/// it exits within the grace. Otherwise always "was killed", even if it died a moment
/// earlier (at the deadline the spawning thread's exit may SIGKILL it first).
fn end(mut live: Live, graceful: bool) -> String {
    drop(live.stdin.take());
    if graceful && let Some(status) = wait_for(&mut live.child, EXIT_GRACE) {
        return describe(status);
    }
    // Harmless on a process that has exited but is not reaped yet.
    let _ = live.child.kill();
    if wait_for(&mut live.child, REAP_WAIT).is_some() {
        return "was killed".to_owned();
    }
    let pid = live.child.id();
    // Reaped whenever the kernel lets it go; nothing waits on this thread.
    let _ = std::thread::Builder::new()
        .name(format!("reap-{pid}"))
        .spawn(move || live.child.wait());
    format!(
        "did not end within {}s of SIGKILL (pid {pid}, probably stuck in a driver call), so it may still hold device memory",
        REAP_WAIT.as_secs()
    )
}

/// The child's status once it exits, polling for at most `limit`.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + limit;
    let mut pause = Duration::from_micros(200);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < until => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            // An error here means there is no such child left to wait for.
            Ok(None) | Err(_) => return None,
        }
    }
}

/// `exited with code 3`, `was killed by signal 11 (SIGSEGV)`.
pub(crate) fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with code {code}");
    }
    match status.signal() {
        Some(signal) => {
            let name = match signal {
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGBUS => " (SIGBUS)",
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGTERM => " (SIGTERM)",
                _ => "",
            };
            format!("was killed by signal {signal}{name}")
        }
        None => format!("ended ({status})"),
    }
}

/// Reads a worker's output on its own thread and turns each line into an [`Event`].
struct Reader {
    sink: Arc<Mutex<Sink>>,
    backend: String,
    devices: Vec<u32>,
}

impl Reader {
    fn read(self, stdout: ChildStdout) {
        let mut input = BufReader::new(stdout);
        let mut ready = false;
        let mut line = String::new();
        loop {
            line.clear();
            let read = (&mut input).take(MAX_LINE).read_line(&mut line);
            let event = match read {
                Ok(0) | Err(_) => {
                    self.deliver(Event::Ended { ready }, true);
                    return;
                }
                Ok(_) if !line.ends_with('\n') && line.len() as u64 >= MAX_LINE => Event::Broken {
                    message: format!(
                        "the check's worker process wrote a line longer than {MAX_LINE} bytes"
                    ),
                    blame_units: ready,
                },
                Ok(_) => match self.event(line.trim_end(), &mut ready) {
                    Some(event) => event,
                    None => continue,
                },
            };
            let broken = matches!(event, Event::Broken { .. });
            self.deliver(event, broken);
            if broken {
                return;
            }
        }
    }

    /// The event a line makes; `None` for the hello, which only makes the worker ready.
    fn event(&self, line: &str, ready: &mut bool) -> Option<Event> {
        let broken = |message: String| {
            Some(Event::Broken {
                message,
                blame_units: *ready,
            })
        };
        match protocol::decode_from_worker(line) {
            Err(why) => broken(format!(
                "the check's worker process wrote {}",
                with_causes(&why)
            )),
            Ok(FromWorker::Fatal { message }) => Some(Event::Broken {
                message: format!("the check's worker process could not run it: {message}"),
                blame_units: false,
            }),
            Ok(FromWorker::Hello { .. }) if *ready => {
                broken("the check's worker process said hello twice".to_owned())
            }
            Ok(FromWorker::Hello {
                protocol,
                version,
                backend,
                devices,
            }) => {
                let own_version = env!("CARGO_PKG_VERSION");
                if protocol != PROTOCOL || version != own_version {
                    return broken(format!(
                        "the check's worker process is gpuvet {version} (protocol {protocol}), not \
                         {own_version} (protocol {PROTOCOL}); was gpuvet replaced during the run?"
                    ));
                }
                if backend != self.backend || devices != self.devices {
                    return broken(format!(
                        "the check's worker process built the `{backend}` backend with devices \
                         {devices:?}, not the `{}` backend with devices {:?}",
                        self.backend, self.devices
                    ));
                }
                *ready = true;
                None
            }
            Ok(FromWorker::Unit { .. }) if !*ready => {
                broken("the check's worker process answered before its hello".to_owned())
            }
            Ok(FromWorker::Unit {
                round,
                slot,
                result,
            }) => {
                let current = lock(&self.sink).round.as_ref().map(|(round, _)| *round);
                if current != Some(round) {
                    return broken(format!(
                        "the check's worker process answered round {round} during round {}",
                        current.map_or_else(|| "none".to_owned(), |r| r.to_string())
                    ));
                }
                Some(Event::Unit {
                    slot,
                    result: result.into(),
                })
            }
        }
    }

    fn deliver(&self, event: Event, done: bool) {
        let mut sink = lock(&self.sink);
        sink.done |= done;
        let event = match &sink.round {
            Some((_, tx)) => match tx.send(event) {
                Ok(()) => return,
                // That round is over; the next one hears of it.
                Err(mpsc::SendError(event)) => event,
            },
            None => event,
        };
        sink.undelivered.push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_backend::sim::SimBackend;
    use gpuvet_model::config::SimScript;

    #[test]
    fn what_a_worker_says_before_its_first_round_reaches_that_round() {
        let backend = SimBackend::new(SimScript::default());
        let launcher = WorkerLauncher {
            program: "sh".into(),
            args: vec!["-c".into(), "echo garbage; read request; read never".into()],
        };
        let workers = Arc::new(Workers::new(launcher, &backend));
        // The worker starts, and its garbage is read, before any round listens.
        let live = workers.spawn().unwrap();
        lock(&workers.state).live = Some(live);
        let since = Instant::now();
        while !lock(&lock(&workers.state).live.as_ref().unwrap().sink).done {
            assert!(since.elapsed() < Duration::from_secs(30), "never read");
            std::thread::sleep(Duration::from_millis(5));
        }
        // A done worker is replaced, so reuse the sink to see the held event.
        let sink = Arc::clone(&lock(&workers.state).live.as_ref().unwrap().sink);
        lock(&sink).done = false;
        let rx = workers
            .for_check()
            .round(CheckName::GemmFlops, &WorkSpec::default(), vec![vec![0]])
            .unwrap();
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Event::Broken {
                message,
                blame_units: false,
            }) => assert!(message.contains("`garbage`"), "{message}"),
            other => panic!("{other:?}"),
        }
        assert!(workers.stop(false).is_some());
    }

    #[test]
    fn a_worker_that_cannot_start_says_which_program_and_why() {
        let backend = SimBackend::new(SimScript::default());
        let launcher = WorkerLauncher {
            program: "/nonexistent/gpuvet-worker".into(),
            args: Vec::new(),
        };
        let workers = Arc::new(Workers::new(launcher, &backend));
        let check = workers.for_check();
        let err = check
            .round(CheckName::GemmFlops, &WorkSpec::default(), vec![vec![0]])
            .unwrap_err();
        let RunnerError::StartWorker { program, source } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(program, &PathBuf::from("/nonexistent/gpuvet-worker"));
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(
            err.to_string(),
            "cannot start the check's worker process `/nonexistent/gpuvet-worker`"
        );
        assert_eq!(
            with_causes(&err),
            format!("{err}: {source}"),
            "the cause follows, as results have shown it"
        );
        // Once stopped, no worker starts.
        workers.stop(false);
        let err = workers
            .for_check()
            .round(CheckName::GemmFlops, &WorkSpec::default(), vec![vec![0]])
            .unwrap_err();
        assert!(matches!(err, RunnerError::CheckOver), "{err:?}");
        assert_eq!(
            err.to_string(),
            "the check was over before its worker process started"
        );
    }

    #[test]
    fn an_abandoned_check_cannot_start_or_kill_the_next_check_s_worker() {
        let backend = SimBackend::new(SimScript::default());
        let launcher = WorkerLauncher {
            program: "sh".into(),
            args: vec!["-c".into(), "read request; read never".into()],
        };
        let workers = Arc::new(Workers::new(launcher, &backend));
        let round = |check: &CheckWorker| {
            check.round(CheckName::GemmFlops, &WorkSpec::default(), vec![vec![0]])
        };
        let first = workers.for_check();
        assert!(round(&first).is_ok());
        assert_eq!(first.abandon().as_deref(), Some("was killed"));
        // Its thread, still running, is refused a new worker.
        assert!(matches!(round(&first), Err(RunnerError::CheckOver)));
        assert!(lock(&workers.state).live.is_none());

        let second = workers.for_check();
        assert!(round(&second).is_ok());
        // The first check's thread cannot end or abandon the second's worker.
        assert_eq!(first.kill(), None);
        assert_eq!(first.reap(), None);
        assert_eq!(first.abandon(), None);
        assert!(lock(&workers.state).live.is_some());
        // A check that merely came after is the only one that may use the worker.
        let third = workers.for_check();
        assert!(matches!(round(&second), Err(RunnerError::CheckOver)));
        assert_eq!(second.kill(), None);
        assert_eq!(third.kill().as_deref(), Some("was killed"));
        workers.stop(false);
    }
}
