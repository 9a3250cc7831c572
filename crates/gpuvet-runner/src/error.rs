//! The crate's one error type. A check's own failures end up in its result, as text
//! (see [`gpuvet_backend::with_causes`]); these are the errors of starting and talking
//! to a worker process, on either side of the pipe.

use std::io;
use std::path::PathBuf;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A call to the operating system failed on the worker's side of the pipe.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },

    /// The worker could not read a request; it told the runner why and exits.
    #[error("the worker cannot read the runner's request")]
    BadRequest {
        #[source]
        source: Box<RunnerError>,
    },
    /// A line longer than the protocol allows.
    #[error("a line longer than `{max}` bytes")]
    LineTooLong { max: usize },
    /// A line with more JSON values than the protocol allows, refused before decoding.
    #[error("a line of more than `{max}` json values")]
    TooManyValues { max: usize },
    /// A line that is not a message of the protocol. The parser's words are in the
    /// parentheses, as a check's result has always shown them, so they are not also a
    /// source.
    #[error("an unreadable line `{quote}` ({error})")]
    Unreadable {
        /// The start of the line.
        quote: String,
        error: serde_json::Error,
    },
    /// A request naming a GEMM dtype this gpuvet does not know.
    #[error("unknown GEMM dtype `{dtype}`")]
    UnknownDtype { dtype: String },

    /// The check ended before it needed a worker.
    #[error("the check was over before its worker process started")]
    CheckOver,
    #[error("cannot start the check's worker process `{}`", program.display())]
    StartWorker {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start a thread to read the check's worker process")]
    StartReader {
        #[source]
        source: io::Error,
    },
    #[error("cannot start a thread for the check's work")]
    StartThread {
        #[source]
        source: io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuvet_backend::with_causes;

    #[test]
    fn a_thread_that_cannot_start_reads_as_before() {
        // Only an exhausted machine refuses a thread, so these are made here; a
        // check's result shows them with their cause, as before.
        let refused = || io::Error::from(io::ErrorKind::OutOfMemory);
        let reader = RunnerError::StartReader { source: refused() };
        assert_eq!(
            with_causes(&reader),
            format!(
                "cannot start a thread to read the check's worker process: {}",
                refused()
            )
        );
        let work = RunnerError::StartThread { source: refused() };
        assert_eq!(
            work.to_string(),
            "cannot start a thread for the check's work"
        );
        assert_eq!(
            with_causes(&work),
            format!("cannot start a thread for the check's work: {}", refused())
        );
    }
}
