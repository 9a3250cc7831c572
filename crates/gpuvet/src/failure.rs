//! Errors that end a command, sorted into the user's mistakes and gpuvet's, each with
//! its exit code and, where we know one, a `hint:` line saying what to do next.

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
    pub fn new(code: i32, error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code,
            error: error.into(),
            hint: None,
        }
    }

    /// A usage or configuration mistake: exit code 2.
    pub fn usage(message: impl Display) -> Self {
        Failure::new(exit_codes::USAGE, anyhow::anyhow!("{message}"))
    }

    /// Something that should not fail did (a bug in gpuvet or its machine): exit 70.
    pub fn bug(message: impl Display) -> Self {
        Failure::new(exit_codes::INTERNAL, anyhow::anyhow!("{message}"))
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Prints the error (and its causes, and the hint) to stderr; returns the exit code.
    pub fn report(self) -> i32 {
        let error: &(dyn std::error::Error + 'static) = self.error.as_ref();
        write_stderr(&gpuvet_model::diagnostics::render_error(
            error,
            self.hint.as_deref(),
        ));
        self.code
    }
}

impl From<gpuvet_model::config::ConfigError> for Failure {
    fn from(error: gpuvet_model::config::ConfigError) -> Self {
        let hint = error.hint().map(str::to_owned);
        Failure {
            code: exit_codes::USAGE,
            error: error.into(),
            hint,
        }
    }
}

impl From<gpuvet_store::StoreError> for Failure {
    fn from(error: gpuvet_store::StoreError) -> Self {
        let hint = error.hint().map(str::to_owned);
        Failure {
            code: exit_codes::STORE_ERROR,
            error: error.into(),
            hint,
        }
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
