//! The crate's own error type, for what is not a collective's failure: why a probe
//! attempt failed, and why a connection was turned away while a group connected. A
//! collective's work fails with the backend's [`BackendError`], as the runner expects.
//!
//! Both end up as text (a probe's result crosses to the coordinator, turned-away
//! connections are logged), written with [`gpuvet_backend::with_causes`].

use std::net::SocketAddr;
use std::time::Duration;

use gpuvet_backend::IoCause;

use crate::BackendError;
use crate::tcp::Refusal;

/// Errors of this crate. `Clone` and `Eq`, as the probe results that hold them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataPlaneError {
    /// A probe could not open its connection.
    #[error("connect")]
    Connect(#[source] IoCause),
    /// A probe's echo failed on the connection.
    #[error("echo")]
    Echo(#[source] IoCause),
    #[error("echo: no answer within the timeout")]
    EchoTimedOut,
    #[error("echo: the target closed the connection (no gpuvet probe responder there?)")]
    EchoClosed,
    #[error("echo: the answer is not a gpuvet probe reply")]
    NotAProbeReply,
    #[error("could not start a probing thread")]
    ProbeThread(#[source] IoCause),
    #[error("the probing thread panicked")]
    ProbePanicked,

    /// A connection could not be accepted.
    #[error("accept failed")]
    Accept(#[source] IoCause),
    /// The handshake with an accepted connection failed.
    #[error("`{from}`: handshake failed")]
    Handshake {
        from: SocketAddr,
        #[source]
        source: IoCause,
    },
    #[error("`{from}` arrived at the deadline")]
    AtDeadline { from: SocketAddr },
    /// No nonce could be drawn to challenge it.
    #[error("`{from}`")]
    NoNonce {
        from: SocketAddr,
        #[source]
        source: BackendError,
    },
    #[error("`{from}` closed the connection before saying who it is")]
    ClosedBeforeHello { from: SocketAddr },
    #[error("`{from}` did not say who it is within {:.1} s", .wait.as_secs_f64())]
    Silent { from: SocketAddr, wait: Duration },
    #[error("`{from}` sent something that is not a gpuvet data-plane hello")]
    NotAHello { from: SocketAddr },
    /// Its hello does not prove the run's key: whatever it claims is unproven.
    #[error(
        "`{from}` was refused: its hello does not prove this run's data-plane key (a \
         different `GPUVET_TOKEN`, or not gpuvet)"
    )]
    Unproven { from: SocketAddr },
    /// A member of the run, refused for what its hello brought.
    #[error(
        "`{from}` calling itself rank {rank} of round `{round}` was refused: it brought {refusal}"
    )]
    Refused {
        from: SocketAddr,
        rank: u32,
        round: u64,
        refusal: Refusal,
    },
}
