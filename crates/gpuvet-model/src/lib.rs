//! gpuvet's model: the words every other crate speaks. The check catalog, the config
//! and its validation, results and verdicts, incidents, deployment events and their
//! typed details, what is kept of an attempt ([`record`]), each node's inventory and
//! the one model of GPU health ([`gpu_health`]) that the inventory, the NVML reader and
//! the runtime watch share; and the pure rules a run is judged by while it runs
//! (`analysis`, `baselines`, `localize`, `pairing`), which the runner and the
//! coordinator apply. What is made of a record after the fact (its timeline, its
//! explanation, drills, the report as text) is `gpuvet-analysis`'s.
//!
//! Nothing here does I/O or spawns threads, so every piece is a plain function that
//! tests call directly. Backends, the runner, the store and the binary build on it.

pub mod analysis;
pub mod baselines;
pub mod bounds;
pub mod catalog;
pub mod config;
pub mod diagnosis;
pub mod diagnostics;
pub mod env_vars;
pub mod event_fold;
pub mod events;
pub mod exit_codes;
pub mod fleet;
pub mod gpu_health;
pub mod hex;
pub mod history;
pub mod ids;
pub mod inventory;
pub mod inventory_check;
pub mod localize;
pub mod node_history;
pub mod node_list;
pub mod offenders;
pub mod overview;
pub mod pairing;
pub mod prometheus;
pub mod quarantine;
pub mod record;
pub mod redact;
pub mod repeats;
pub mod results;
pub mod runtime;
pub mod slurm;
pub mod stats;
pub mod time;
