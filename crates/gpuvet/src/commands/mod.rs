//! One module per subcommand; `dispatch` picks it.

mod bundle;
mod catalog;
mod check;
mod drill;
mod epilog;
mod events;
mod explain;
mod fr;
mod history;
mod push;
mod results;
mod run;
mod serve;
mod timeline;
mod undrain;
mod watch;
mod worker;

use crate::cli::{Cli, Command};
use crate::failure::Failure;
use crate::sanity::group;

/// Runs the chosen subcommand; `Ok` carries the exit code.
pub fn dispatch(cli: Cli) -> Result<i32, Failure> {
    // Only the agent itself: its `gpuvet worker` children inherit the environment, and
    // their stdin carries the worker protocol.
    if matches!(cli.command, Command::Check(_) | Command::Run(_)) {
        group::exit_with_local_parent();
    }
    match cli.command {
        Command::Check(args) => check::check(args),
        Command::Run(args) => run::run(args),
        Command::Events(args) => events::events(args),
        Command::Results(args) => results::results(args),
        Command::Checks(args) => catalog::catalog(args),
        Command::Watch(args) => watch::watch(args),
        Command::Fr(args) => fr::fr(args),
        Command::Timeline(args) => timeline::timeline(args),
        Command::Bundle(args) => bundle::bundle(args),
        Command::Explain(args) => explain::explain(args),
        Command::Drill(args) => drill::drill(args),
        Command::Serve(args) => serve::serve(args),
        Command::Push(args) => push::push(args),
        Command::History(args) => history::history(args),
        Command::Untaint(args) => crate::cluster::untaint(args),
        Command::Undrain(args) => undrain::undrain(args, &gpuvet_slurm::Scontrol::default()),
        Command::Epilog(args) => epilog::epilog(args),
        Command::Worker(args) => worker::worker(args),
    }
}
