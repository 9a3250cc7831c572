//! Errors that end a command, sorted into the user's mistakes, the environment's and
//! gpuvet's, each with its exit code, its causes and, where we know one, a `hint:` line
//! saying what to do next.
//!
//! A failure that has a cause keeps it: `Failure::usage_from`, `Failure::io` and
//! `Failure::bug_from` put a message over a typed error, which stays the source, so the
//! user sees `error: <message>`, then one `caused by:` line per cause. A typed error
//! that knows what to do next (`StoreError::hint` and its like) gives the failure its
//! hint, wherever it is in the chain, unless the call site gives its own.

use std::fmt::Display;

use gpuvet_model::exit_codes;

/// An error that ends the command.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub error: anyhow::Error,
    pub hint: Option<String>,
}

impl Failure {
    /// `error`, with its causes, ending the command with `code`; the hint is the first
    /// one a typed error in its chain has.
    pub fn new(code: i32, error: impl Into<anyhow::Error>) -> Self {
        let error = error.into();
        let hint = hint_in_chain(&error);
        Failure { code, error, hint }
    }

    /// `message` over `cause`, which stays the source: `error: message`, then
    /// `caused by:` the cause and its own causes.
    pub fn with_cause(code: i32, message: impl Display, cause: impl Into<anyhow::Error>) -> Self {
        Failure::new(code, cause.into().context(message.to_string()))
    }

    /// A usage or configuration mistake: exit code 2.
    pub fn usage(message: impl Display) -> Self {
        Failure::new(exit_codes::USAGE, anyhow::anyhow!("{message}"))
    }

    /// A usage mistake with its cause (a file the user named that is not there).
    pub fn usage_from(message: impl Display, cause: impl Into<anyhow::Error>) -> Self {
        Failure::with_cause(exit_codes::USAGE, message, cause)
    }

    /// A file or directory that could not be created, written or read: the
    /// environment's problem (a missing or read-only directory, a full disk), not a
    /// bug. Exit 73; the message names the path.
    pub fn io(message: impl Display, cause: impl Into<anyhow::Error>) -> Self {
        Failure::with_cause(exit_codes::IO_ERROR, message, cause)
    }

    /// Something that should not fail did, with its cause: a bug in gpuvet, or a
    /// machine out of threads or processes. Exit 70; never for a file or directory
    /// that could not be made, written or read (that is [`Failure::io`]).
    pub fn bug_from(message: impl Display, cause: impl Into<anyhow::Error>) -> Self {
        Failure::with_cause(exit_codes::INTERNAL, message, cause)
    }

    /// Says what to do next, instead of any hint a typed cause had.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Prints the error (and its causes, and the hint) to stderr; returns the exit code.
    pub fn report(self) -> i32 {
        write_stderr(&self.render());
        self.code
    }

    /// What [`Failure::report`] prints.
    pub fn render(&self) -> String {
        let error: &(dyn std::error::Error + 'static) = self.error.as_ref();
        gpuvet_model::diagnostics::render_error(error, self.hint.as_deref())
    }
}

/// The hint of the outermost error in `error`'s chain that has one: each library's
/// error type that says what to do next is named here.
fn hint_in_chain(error: &anyhow::Error) -> Option<String> {
    error.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<gpuvet_store::StoreError>() {
            return e.hint().map(str::to_owned);
        }
        if let Some(e) = cause.downcast_ref::<gpuvet_push::PushError>() {
            return e.hint().map(str::to_owned);
        }
        if let Some(e) = cause.downcast_ref::<gpuvet_model::config::ConfigError>() {
            return e.hint().map(str::to_owned);
        }
        if let Some(e) = cause.downcast_ref::<gpuvet_control::ClusterError>() {
            return e.hint().map(str::to_owned);
        }
        if let Some(e) = cause.downcast_ref::<gpuvet_bundle::BundleError>() {
            return e.hint().map(str::to_owned);
        }
        if let Some(e) = cause.downcast_ref::<gpuvet_slurm::SlurmError>() {
            return e.hint().map(str::to_owned);
        }
        #[cfg(feature = "k8s")]
        if let Some(e) = cause.downcast_ref::<gpuvet_kube::KubeError>() {
            return e.hint().map(str::to_owned);
        }
        None
    })
}

impl From<gpuvet_model::config::ConfigError> for Failure {
    fn from(error: gpuvet_model::config::ConfigError) -> Self {
        Failure::new(exit_codes::USAGE, error)
    }
}

impl From<gpuvet_store::StoreError> for Failure {
    fn from(error: gpuvet_store::StoreError) -> Self {
        Failure::new(exit_codes::STORE_ERROR, error)
    }
}

impl From<gpuvet_backend::BackendError> for Failure {
    fn from(error: gpuvet_backend::BackendError) -> Self {
        match error {
            gpuvet_backend::BackendError::Unavailable { .. } => {
                Failure::new(exit_codes::BACKEND_UNAVAILABLE, error).with_hint(
                    "use `--backend auto` to run on what this machine has, or `--backend cpu`",
                )
            }
            other => Failure::new(exit_codes::INTERNAL, other),
        }
    }
}

/// Prints a warning to stderr, in the same voice as errors.
pub fn warn(message: impl Display) {
    write_stderr(&format!("warning: {message}\n"));
}

/// Prints a note to stderr: something the user may want to know, not a problem.
pub fn note(message: impl Display) {
    write_stderr(&format!("note: {message}\n"));
}

/// Writes `text` to stderr in one call. Local agents share the terminal's stderr, and
/// `eprintln!` writes a formatted line in pieces, so their lines came out interleaved
/// ("warning: warning: …"); one write of a line under the pipe's 4 KiB is never split.
fn write_stderr(text: &str) {
    use std::io::Write;
    // Nowhere left to report a failure to write to stderr.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_a_directory() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::ENOTDIR)
    }

    #[test]
    fn io_keeps_the_os_error_as_its_cause_and_exits_73() {
        let failure = Failure::io(
            "cannot write the HTML report to `a-file/report.html`",
            not_a_directory(),
        )
        .with_hint("check that the directory exists and is writable");
        assert_eq!(failure.code, exit_codes::IO_ERROR);
        assert_eq!(
            failure.render(),
            format!(
                "error: cannot write the HTML report to `a-file/report.html`\n\
                 \x20 caused by: {}\n\
                 hint: check that the directory exists and is writable\n",
                not_a_directory()
            )
        );
    }

    #[test]
    fn every_cause_of_a_nested_error_gets_its_line_once() {
        let lost = gpuvet_control::ClusterError::Io {
            context: "cannot listen for agents".to_owned(),
            source: std::io::Error::from_raw_os_error(libc::EADDRINUSE),
        };
        let failure = Failure::usage_from("cannot start the coordinator", lost);
        assert_eq!(failure.code, exit_codes::USAGE);
        let text = failure.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "error: cannot start the coordinator",
                "  caused by: cannot listen for agents",
                &format!(
                    "  caused by: {}",
                    std::io::Error::from_raw_os_error(libc::EADDRINUSE)
                ),
            ]
        );
    }

    #[test]
    fn a_typed_cause_gives_its_hint_unless_the_call_site_has_one() {
        let store = || gpuvet_store::StoreError::TooNew {
            location: "s.db".to_owned(),
            found: 99,
            supported: 1,
        };
        let expected = store().hint().unwrap();
        let failure = Failure::bug_from("cannot read the job", store());
        assert_eq!(failure.code, exit_codes::INTERNAL);
        assert_eq!(failure.hint.as_deref(), Some(expected));
        assert!(failure.render().ends_with(&format!("hint: {expected}\n")));

        let failure = Failure::usage_from("cannot read the job", store()).with_hint("do this");
        assert_eq!(failure.hint.as_deref(), Some("do this"));

        // Deeper in the chain too, and from a typed error the binary made its own.
        let failure = Failure::new(
            exit_codes::STORE_ERROR,
            anyhow::Error::new(store())
                .context("outer")
                .context("outermost"),
        );
        assert_eq!(failure.hint.as_deref(), Some(expected));
    }

    #[test]
    fn a_failure_without_a_cause_is_one_line() {
        let failure = Failure::usage("`--attempt 0` is out of range");
        assert_eq!(failure.code, exit_codes::USAGE);
        assert_eq!(failure.hint, None);
        assert_eq!(failure.render(), "error: `--attempt 0` is out of range\n");
    }

    #[test]
    fn the_conversions_keep_the_code_and_hint_of_each_library_error() {
        let failure = Failure::from(gpuvet_store::StoreError::TooNew {
            location: "s.db".to_owned(),
            found: 99,
            supported: 1,
        });
        assert_eq!(failure.code, exit_codes::STORE_ERROR);
        assert!(failure.hint.is_some());
        let failure =
            Failure::from(gpuvet_model::config::Config::from_json("{").expect_err("not JSON"));
        assert_eq!(failure.code, exit_codes::USAGE);
    }
}
