//! The data plane between nodes: the traffic the multi-node checks measure.
//!
//! - [`tcp`]: rank-addressed collectives over plain TCP with an authenticated greeting
//!   (all-reduce, all-gather, all-to-all, one all-reduce per rail at once), the
//!   host-network fallback of `pytorch_gloo_2`, and the reachability probes of
//!   `network_connectivity`;
//! - [`torch_gloo`]: `pytorch_gloo_2` through the node's own PyTorch and Gloo.
//!
//! These are not [`Backend`](gpuvet_backend::Backend) implementations: a backend measures
//! one node's hardware, the data plane measures what flows between nodes. Both report
//! through the same [`Sample`] and [`BackendError`], since the agent hands their results
//! to the same runner and analysis. Only `gpuvet-multinode`'s agent uses this crate.

mod error;
pub mod tcp;
pub mod torch_gloo;

pub use error::DataPlaneError;

use gpuvet_backend::{
    BackendError, CancelToken, Sample, WorkSpec, all_gather_busbw, all_reduce_busbw, child,
    chunk_ranges,
};
