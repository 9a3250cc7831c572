//! The crate's one error type, [`BackendError`], which the data plane and the runner
//! share, and [`with_causes`], which writes an error and its causes on one line.
//!
//! A variant that wraps another error keeps it as its `source`, and its own message
//! leaves it out: the binary prints each cause on a `caused by:` line. Where an error
//! can only travel as text (a report, the worker pipe, a reply to the coordinator),
//! [`with_causes`] joins the chain with `: `, which gives the text reports have always
//! shown.

use std::error::Error;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cuda::DriverFailure;
use crate::cuda::gemm::BlasStatus;
use crate::cuda::libs::{DlError, not_found_message};
use crate::cuda::nccl::NcclStatus;

/// Errors of this crate, and of the data plane's work.
///
/// `Clone` and `Eq` so results can be cached and compared; a source that is neither
/// (an `io::Error`) is held in an [`IoCause`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The requested backend cannot run on this machine.
    #[error("the `{backend}` backend is not available: {reason}")]
    Unavailable {
        backend: &'static str,
        reason: String,
    },
    /// The work was cancelled because the overall timeout expired.
    #[error("cancelled")]
    Cancelled,
    /// The backend cannot do this kind of work (e.g. a dtype it lacks); the check is
    /// reported `skipped` with this reason.
    #[error("{0}")]
    Unsupported(String),
    /// The work itself failed: a device error, a failed allocation, a bad launch.
    #[error("{0}")]
    Failed(String),

    /// A call to the operating system failed: starting a thread or a process, a socket.
    #[error("{what}")]
    Io {
        /// What was being done, e.g. "could not start the sending thread".
        what: String,
        #[source]
        source: IoCause,
    },
    /// One rail of several failed.
    #[error("rail {rail}")]
    Rail {
        rail: usize,
        #[source]
        source: Box<BackendError>,
    },

    /// A CUDA driver call failed.
    #[error("{what} failed")]
    Driver {
        /// What was being done, e.g. "allocating the send buffer".
        what: String,
        #[source]
        source: DriverFailure,
    },
    /// A cuBLAS or cuBLASLt call failed.
    #[error("`{call}` failed")]
    Blas {
        call: &'static str,
        #[source]
        source: BlasStatus,
    },
    /// NVRTC could not compile the launch check's kernel.
    #[error("NVRTC failed")]
    Nvrtc(#[source] Box<cudarc::nvrtc::CompileError>),
    /// Neither NVRTC's kernel nor the built-in PTX loaded. Both reasons are in the
    /// message, as reports show them, so neither is a source.
    #[error(
        "the empty kernel could not be loaded ({}); NVRTC's was not usable either: {}",
        with_causes(.builtin.as_ref()),
        with_causes(.nvrtc.as_ref())
    )]
    KernelUnloadable {
        builtin: Box<BackendError>,
        nvrtc: Box<BackendError>,
    },

    /// A run-time library is in none of the places searched.
    #[error("{}", not_found_message(what, names, dirs, *alternative))]
    LibraryNotFound {
        /// The library, e.g. "cuBLAS".
        what: &'static str,
        /// The file names tried.
        names: &'static [&'static str],
        /// The directories searched.
        dirs: Vec<PathBuf>,
        /// Another way to point gpuvet at it, said after the usual one.
        alternative: Option<&'static str>,
    },
    /// The dynamic loader refused a library file.
    #[error("cannot load `{path}`")]
    LoadFailed {
        path: String,
        #[source]
        source: DlError,
    },
    /// A library lacks a function gpuvet calls.
    #[error("symbol `{symbol}` is missing")]
    SymbolMissing {
        symbol: String,
        #[source]
        source: DlError,
    },
    /// A library lacks functions the backend calls (an older release than it needs).
    #[error(
        "{what} at `{path}` lacks {}; it is older than gpuvet needs",
        symbols.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
    )]
    SymbolsMissing {
        what: &'static str,
        path: String,
        symbols: Vec<&'static str>,
    },

    /// The NCCL that `GPUVET_NCCL_LIBRARY` names could not be loaded.
    #[error(
        "NCCL could not be loaded from `{}`",
        crate::cuda::nccl::NCCL_LIBRARY_ENV
    )]
    NcclOverride {
        #[source]
        source: Box<BackendError>,
    },
    /// An NCCL call returned an error.
    #[error("`{call}` failed")]
    Nccl {
        call: &'static str,
        #[source]
        source: NcclStatus,
    },
    /// A communicator's asynchronous error. NCCL's words follow "reports", as reports
    /// show them, so they are part of the message rather than a source.
    #[error("NCCL reports {0}")]
    NcclReports(NcclStatus),
    /// Creating communicators or launching a grouped operation failed before NCCL took
    /// the work; the communicators were aborted.
    #[error("{what} failed")]
    NcclStart {
        /// E.g. "creating NCCL's communicators", "launching the all-reduce".
        what: String,
        #[source]
        source: Box<BackendError>,
    },
    /// A wait on NCCL's communicators ended with an error, and they were aborted. The
    /// cause comes before the abort in the message, so it is not a source.
    #[error(
        "{what} failed: {}; NCCL's communicators were aborted",
        with_causes(.cause.as_ref())
    )]
    NcclAborted {
        what: String,
        cause: Box<BackendError>,
    },
    /// A wait on NCCL's communicators passed its limit, and they were aborted.
    #[error("{what} did not finish within `{limit:?}`; NCCL's communicators were aborted")]
    NcclTimedOut { what: String, limit: Duration },
}

impl BackendError {
    /// A failed call to the operating system while doing `what`.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        BackendError::Io {
            what: what.into(),
            source: IoCause::from(source),
        }
    }

    /// `self` as the failure of one rail of several. Cancellation and work a backend
    /// cannot do are not a rail's: they pass through.
    pub fn on_rail(self, rail: usize) -> Self {
        match self {
            BackendError::Cancelled
            | BackendError::Unsupported(_)
            | BackendError::Unavailable { .. } => self,
            other => BackendError::Rail {
                rail,
                source: Box::new(other),
            },
        }
    }
}

/// `error` and each of its causes, joined by `: ` on one line (the one function of
/// `gpuvet_model::diagnostics`, here where most of its callers already look).
pub use gpuvet_model::diagnostics::with_causes;

/// An `io::Error` that a [`BackendError`] can hold as its source: shared, so the error
/// stays `Clone`, and equal to another of the same kind and text.
#[derive(Debug, Clone)]
pub struct IoCause(Arc<io::Error>);

impl IoCause {
    pub fn kind(&self) -> io::ErrorKind {
        self.0.kind()
    }
}

impl From<io::Error> for IoCause {
    fn from(error: io::Error) -> Self {
        IoCause(Arc::new(error))
    }
}

impl PartialEq for IoCause {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoCause {}

impl fmt::Display for IoCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Error for IoCause {
    // The `io::Error`'s own cause: its text is already this one's.
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> io::Error {
        io::Error::from(io::ErrorKind::ConnectionRefused)
    }

    #[test]
    fn an_io_failure_keeps_its_cause_out_of_its_message() {
        let error = BackendError::io("could not start the sending thread", refused());
        assert_eq!(error.to_string(), "could not start the sending thread");
        let source = error.source().expect("the io error is the source");
        assert_eq!(source.to_string(), refused().to_string());
        assert_eq!(
            with_causes(&error),
            format!("could not start the sending thread: {}", refused())
        );
        // Clones compare equal; another kind does not.
        assert_eq!(error.clone(), error);
        assert_ne!(
            error,
            BackendError::io(
                "could not start the sending thread",
                io::Error::from(io::ErrorKind::TimedOut)
            )
        );
        let BackendError::Io { source, .. } = &error else {
            unreachable!()
        };
        assert_eq!(source.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_rail_s_failure_reads_as_before_and_cancels_pass_through() {
        let failed = BackendError::Failed("peer closed".to_owned()).on_rail(2);
        assert!(matches!(failed, BackendError::Rail { rail: 2, .. }));
        assert_eq!(failed.to_string(), "rail 2");
        assert_eq!(with_causes(&failed), "rail 2: peer closed");
        assert_eq!(
            BackendError::Cancelled.on_rail(1),
            BackendError::Cancelled,
            "a cancel is nobody's rail"
        );
        let unsupported = BackendError::Unsupported("no".to_owned());
        assert_eq!(unsupported.clone().on_rail(0), unsupported);
    }

    #[test]
    fn causes_are_joined_down_the_chain() {
        let nested = BackendError::NcclStart {
            what: "launching the all-reduce".to_owned(),
            source: Box::new(BackendError::io("reading", refused())),
        };
        assert_eq!(
            with_causes(&nested),
            format!("launching the all-reduce failed: reading: {}", refused())
        );
        assert_eq!(with_causes(&BackendError::Cancelled), "cancelled");
    }

    #[test]
    fn a_timed_out_wait_says_so_and_that_nccl_was_aborted() {
        let error = BackendError::NcclTimedOut {
            what: "creating NCCL's communicators".to_owned(),
            limit: Duration::from_millis(50),
        };
        assert_eq!(
            error.to_string(),
            "creating NCCL's communicators did not finish within `50ms`; NCCL's \
             communicators were aborted"
        );
    }
}
