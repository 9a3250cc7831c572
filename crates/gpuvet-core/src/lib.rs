//! gpuvet's pure domain: the check catalog, configuration, results, analysis, events,
//! report rendering, each node's inventory and the one model of GPU health
//! ([`gpu_health`]) that the inventory, the NVML reader and the runtime watch share.
//!
//! Nothing here does I/O or spawns threads, so every piece is a plain function that
//! tests call directly. Backends, the runner, the store and the binary build on it.

pub mod analysis;
pub mod baselines;
pub mod bounds;
pub mod catalog;
pub mod config;
pub mod diagnostics;
pub mod drill;
pub mod env_vars;
pub mod events;
pub mod exit_codes;
pub mod explain;
pub mod gpu_health;
pub mod hex;
pub mod ids;
pub mod inventory;
pub mod inventory_check;
pub mod localize;
pub mod node_list;
pub mod overview;
pub mod pairing;
pub mod prometheus;
pub mod redact;
pub mod render;
pub mod repeats;
pub mod results;
pub mod stats;
pub mod time;
pub mod timeline;
