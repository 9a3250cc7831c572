//! gpuvet's control plane: how the nodes of a group find each other, prove who they
//! are, stay in touch, share one timeline, and how a node that never joins, crashes or
//! stops answering gets named.
//!
//! - [`Rendezvous`] resolves rank, group size, coordinator address, port and token from
//!   flags and the environment launchers already set (torchrun, LeaderWorkerSet).
//! - [`Coordinator`] (on rank 0) admits agents over TCP after an HMAC challenge, tracks
//!   their heartbeats and phases, measures their clock offsets, and reports everything
//!   as [`CoordinatorEvent`]s. Commands and reports are JSON values in the binary's own
//!   vocabulary.
//! - [`Agent`] (on every node, rank 0 included) joins, retrying until its deadline,
//!   heartbeats its phase, and fails fast when the coordinator goes away.
//! - [`diagnose`] names the first error among the incidents of a run.
//!
//! - [`transport`] carries the bytes: TCP, or an in-memory network that runs a whole
//!   group in one process.
//!
//! Std threads and sockets only: the control plane handles a few messages per second
//! per node, and blocking I/O with deadlines keeps every wait bounded and readable.
//! The one exception is the coordinator's reading of admitted members: one thread
//! woken by epoll (or the in-memory network) reads them all, so a group of thousands
//! does not keep a thread per member waiting.

mod agent;
pub mod auth;
pub mod clock;
mod connection;
mod coordinator;
mod error;
pub mod events;
pub mod first_error;
mod links;
mod members;
pub mod protocol;
pub mod rendezvous;
pub mod transport;

pub use agent::{
    Agent, AgentIdentity, AgentOptions, Command, CoordinatorScope, Identify, LinkEndGuard,
    OnInbound, PhaseHandle, Received,
};
pub use auth::Token;
pub use clock::{ClockOffset, PingSample, estimate_offset};
pub use coordinator::{Broadcast, Coordinator, CoordinatorOptions};
pub use error::ClusterError;
pub use events::{
    CoordinatorEvent, MemberEvent, MemberEventKind, MemberInfo, MemberState, MemberStatus,
    Membership, Refusal, RefusedPeer,
};
pub use first_error::{Diagnosis, Incident, IncidentKind, diagnose};
pub use links::AgentLinks;
pub use protocol::{Body, PROTOCOL_VERSION, RosterEntry};
pub use rendezvous::{DEFAULT_PORT, Endpoint, Rendezvous, RendezvousFlags};
