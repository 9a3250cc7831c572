//! The runtime check `c4d`: what gpuvet watches while the app runs.
//!
//! Health sources (NVML, the kernel log) feed the XID policy, which deduplicates and
//! escalates; the NCCL RAS client and the flight-recorder analyzer find the rank that
//! stopped a collective. Everything here returns typed findings ([`finding`]); the
//! binary records them as events. NVML is read through `gpuvet-nvml`, and the health
//! readings, thresholds and severities are gpuvet-model's ([`gpuvet_model::gpu_health`]).

pub mod finding;
pub mod flight_recorder;
pub mod health;
pub mod kmsg;
pub mod metrics;
pub mod policy;
pub mod ras;
pub mod xid;
