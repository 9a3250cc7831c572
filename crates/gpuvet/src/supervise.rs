//! Starting and supervising the app: spawn it, forward termination signals, wait, and
//! return its exit status as a shell would. Also runs the rebuild hook under a timeout.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use gpuvet_model::exit_codes;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::Cause;

/// Signals passed on to the app. SIGKILL and SIGSTOP cannot be caught.
const FORWARDED: [i32; 6] = [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// How long the rebuild hook may run before it is killed: a hung hook must not keep
/// the instance from being rebuilt.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the app did not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot install signal handlers")]
    Signals(#[source] std::io::Error),
    #[error("cannot start `{program}`")]
    Program {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

impl SpawnError {
    /// The exit code a shell would give: 127 for a command not found, 126 for one that
    /// cannot be executed; a bug (70) when the signal handlers cannot be installed.
    pub fn code(&self) -> i32 {
        match self {
            SpawnError::Signals(_) => exit_codes::INTERNAL,
            SpawnError::Program { source, .. } if source.kind() == ErrorKind::NotFound => {
                exit_codes::APP_NOT_FOUND
            }
            SpawnError::Program { .. } => exit_codes::APP_NOT_EXECUTABLE,
        }
    }
}

/// A started app whose signals are being forwarded.
#[derive(Debug)]
pub struct Supervised {
    child: Child,
    signals: signal_hook::iterator::Handle,
    forwarder: std::thread::JoinHandle<()>,
}

impl Supervised {
    /// Starts the app. Signal handlers are installed first, so a SIGTERM that arrives
    /// while it starts is delivered to it rather than lost.
    pub fn start(command: &[OsString]) -> Result<Supervised, SpawnError> {
        let (program, args) = command.split_first().expect("clap requires a command");
        let mut signals = SignalsInfo::<WithOrigin>::new(FORWARDED).map_err(SpawnError::Signals)?;
        let child =
            Command::new(program)
                .args(args)
                .spawn()
                .map_err(|source| SpawnError::Program {
                    program: program.to_string_lossy().into_owned(),
                    source,
                })?;
        let pid = child.id() as libc::pid_t;
        let handle = signals.handle();
        let forwarder = std::thread::Builder::new()
            .name("forward-signals".into())
            .spawn(move || {
                for origin in signals.forever() {
                    // A terminal's Ctrl-C already reached the app through its process
                    // group; forwarding it again would interrupt the app twice.
                    if origin.cause == Cause::Kernel {
                        continue;
                    }
                    // SAFETY: kill(2) with a pid we spawned and a valid signal number.
                    unsafe {
                        libc::kill(pid, origin.signal);
                    }
                }
            })
            .expect("spawning the signal forwarder");
        Ok(Supervised {
            child,
            signals: handle,
            forwarder,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the app to exit and stops forwarding.
    pub fn wait(mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait();
        self.signals.close();
        let _ = self.forwarder.join();
        status
    }
}

/// The exit code a shell would report: the code, or 128 + the signal that killed it.
pub fn shell_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(exit_codes::INTERNAL)
}

/// How the rebuild hook ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    Exited(i32),
    TimedOut,
    NotStarted(String),
}

/// Runs a hook command with extra environment, killing it after `timeout`.
pub fn run_hook(argv: &[String], env: &[(String, String)], timeout: Duration) -> HookOutcome {
    let Some((program, args)) = argv.split_first() else {
        return HookOutcome::NotStarted("the hook command is empty".into());
    };
    let mut child = match Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .spawn()
    {
        Ok(child) => child,
        Err(err) => return HookOutcome::NotStarted(format!("cannot start `{program}`: {err}")),
    };
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return HookOutcome::Exited(shell_code(status)),
            Ok(None) if started.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return HookOutcome::TimedOut;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(err) => {
                return HookOutcome::NotStarted(format!("cannot wait for `{program}`: {err}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn hook_exit_codes_env_and_timeouts() {
        let env = vec![("GPUVET_TEST_VALUE".to_owned(), "7".to_owned())];
        assert_eq!(
            run_hook(
                &argv(&["sh", "-c", "exit $GPUVET_TEST_VALUE"]),
                &env,
                HOOK_TIMEOUT
            ),
            HookOutcome::Exited(7)
        );
        assert_eq!(
            run_hook(&argv(&["sleep", "30"]), &[], Duration::from_millis(200)),
            HookOutcome::TimedOut
        );
        assert!(matches!(
            run_hook(&argv(&["/nonexistent/hook"]), &[], HOOK_TIMEOUT),
            HookOutcome::NotStarted(_)
        ));
        assert!(matches!(
            run_hook(&[], &[], HOOK_TIMEOUT),
            HookOutcome::NotStarted(_)
        ));
    }

    #[test]
    fn shell_codes_follow_the_shell() {
        let status = Command::new("sh").args(["-c", "exit 3"]).status().unwrap();
        assert_eq!(shell_code(status), 3);
        let status = Command::new("sh")
            .args(["-c", "kill -TERM $$"])
            .status()
            .unwrap();
        assert_eq!(shell_code(status), 128 + SIGTERM);
    }

    #[test]
    fn a_missing_program_is_127_and_a_directory_is_126() {
        let err = Supervised::start(&[OsString::from("/nonexistent/app")]).unwrap_err();
        assert_eq!(err.code(), exit_codes::APP_NOT_FOUND);
        assert_eq!(err.to_string(), "cannot start `/nonexistent/app`");
        // The OS's reason is the cause, printed after the message.
        let source = std::error::Error::source(&err).expect("the OS's reason");
        assert_eq!(
            source.to_string(),
            std::io::Error::from_raw_os_error(libc::ENOENT).to_string()
        );
        let err = Supervised::start(&[OsString::from("/")]).unwrap_err();
        assert_eq!(err.code(), exit_codes::APP_NOT_EXECUTABLE);
    }
}
