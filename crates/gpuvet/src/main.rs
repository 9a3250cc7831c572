//! `gpuvet`: vets the GPUs and links of a multi-node GPU service before it starts.
//!
//! A thin entry point: parse the command line, dispatch to one module per
//! subcommand, and turn the outcome into a documented exit code.

mod bundle;
mod cli;
mod cluster;
mod commands;
mod drill;
mod failure;
mod identity;
// Only `untaint` of the feature `k8s` uses it; its tests run in both builds.
#[cfg_attr(not(feature = "k8s"), allow(dead_code))]
mod node_runs;
mod output;
mod proven;
mod push;
mod record;
mod runtime;
mod sanity;
mod settings;
mod supervise;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let code = match commands::dispatch(cli) {
        Ok(code) => code,
        Err(failure) => failure.report(),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}
