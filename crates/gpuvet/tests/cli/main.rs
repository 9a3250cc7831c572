//! The `gpuvet` binary end to end: each module runs the real binary (and the groups,
//! workers and scripts it starts) for one area. One test binary, so the suite links
//! once.

mod common;

mod check;
mod config_errors;
mod cuda_wheels;
mod drill;
mod explain;
mod fr;
mod gpu_smoke_script;
mod group;
mod group_in_process;
mod group_local;
mod html_report;
mod input_bombs;
mod local_faults;
mod loopback;
mod offenders;
mod orphans;
mod output_snapshots;
mod redaction;
mod replicas;
mod run;
mod runtime;
mod serve_cli;
mod serve_push;
mod slurm;
mod slurm_cluster;
mod slurm_prolog;
mod tls_push;
mod torch_gloo;
mod verdict_output;
mod worker;
