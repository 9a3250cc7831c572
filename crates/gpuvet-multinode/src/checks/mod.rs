//! The coordinator's runner for each scope of check: how a check is planned across the
//! group, which directives the agents get, and how their replies are judged.
//!
//! - [`node_scope`]: checks every node runs on its own devices, judged against the group;
//! - [`pairs`]: the `_2` checks, node pairs over the data plane, localized;
//! - [`whole_group`]: one ring over every node, its bottleneck named;
//! - [`connectivity`]: `network_connectivity`, every pair probed up to 64 nodes,
//!   about 2·log2 N partners per node above;
//! - [`native`]: collectives on the backend's own transport (NCCL) instead of the data plane;
//! - [`host_engine`]: which engine `pytorch_gloo_2` runs.

pub(crate) mod connectivity;
pub(crate) mod host_engine;
pub(crate) mod native;
pub(crate) mod node_scope;
pub(crate) mod pairs;
pub(crate) mod whole_group;
