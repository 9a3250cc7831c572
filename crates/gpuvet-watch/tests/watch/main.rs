//! gpuvet-watch through its public API: the health sources and their watchdog, the
//! XID catalog and policy, the kernel-log reader, NCCL RAS against a fake server,
//! flight-recorder dumps, and the Prometheus metrics. One test binary, so the suite
//! links once.

mod fr_fixtures;
mod health_nvml;
mod health_rules;
mod health_watchdog;
mod metrics_render;
mod metrics_server;
mod policy_restart;
mod ras_fake_server;
mod xid_catalog;
mod xid_kmsg;
mod xid_policy;
