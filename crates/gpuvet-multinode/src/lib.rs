//! Runs gpuvet's sanity checks across a group of nodes.
//!
//! The control plane (`gpuvet-control`) connects the nodes; this crate decides what
//! they do over it:
//! - [`run_group`] (the coordinator, on rank 0) waits for the group, runs each check
//!   across it, judges it, names the first error when a node never joins, crashes or
//!   stops answering, and hands every node the verdict;
//! - [`serve`] (every agent, rank 0's included) binds the data plane and carries out
//!   the coordinator's directives: a local check with the node's own runner, a
//!   collective with other agents over TCP, a reachability probe.
//!
//! - [`in_process::run_simulated`] runs a whole group in this process, over an
//!   in-memory network with a simulated data plane ([`fabric`]), for drills and scale
//!   benchmarks.
//!
//! Node-scope checks run on each node and are judged against the whole group; the
//! `_2` checks are planned in pairs and localized (`gpuvet_model::pairing`,
//! `gpuvet_model::localize`); whole-group collectives run as one ring whose bottleneck
//! is named; `network_connectivity` probes every pair up to 64 nodes, about 2·log2 N
//! partners per node above; `pytorch_gloo_2` runs
//! PyTorch's Gloo when every node's Python imports torch, else the built-in TCP
//! all-reduce, and says which ran.

mod agent;
mod checks;
mod conversation;
mod coordinator;
mod error;
pub mod fabric;
pub mod in_process;
mod interfaces;
mod time;
pub mod wire;

pub use agent::{DataPlane, NodeSetup, data_plane_ip, serve};
pub use checks::whole_group::{BOTTLENECK_FACTOR, BOTTLENECK_SHARE, SHARE_FLOOR};
pub use conversation::GroupEvent;
pub use coordinator::{GroupPlan, run_group, wait_for_goodbyes};
pub use error::GroupError;
