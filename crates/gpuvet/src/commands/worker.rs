//! `gpuvet worker` (hidden): one check's device work for the gpuvet that started this
//! process. The runner sends the work on stdin and reads one line per unit on stdout
//! (`gpuvet_runner::serve_worker`); stderr is the parent's. A hung check's worker is
//! killed with SIGKILL, which frees what it held on its devices.

use gpuvet_model::config::BackendChoice;
use gpuvet_model::exit_codes::{self, INTERNAL};

use crate::cli::WorkerArgs;
use crate::failure::Failure;
use crate::identity::load_config;
use crate::sanity;

pub fn worker(args: WorkerArgs) -> Result<i32, Failure> {
    // Taken first, so nothing printed while the backend loads can reach the protocol.
    let output = gpuvet_runner::protocol_output().map_err(|err| Failure::new(INTERNAL, err))?;
    let choice = BackendChoice::parse(&args.backend).expect("clap only accepts known backends");
    let built = load_config(args.config.as_deref())
        .and_then(|config| sanity::build_backend(choice, &config, args.cpu_devices, &args.node));
    let (backend, code) = match built {
        Ok(selected) => (Ok(selected), exit_codes::SUCCESS),
        Err(failure) => (Err(failure.error.into()), failure.code),
    };
    // A worker that cannot talk to its runner over the pipe it was given: a bug.
    gpuvet_runner::serve_worker(backend, std::io::stdin().lock(), output)
        .map_err(|err| Failure::new(INTERNAL, err))?;
    Ok(code)
}
