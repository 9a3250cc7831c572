//! Slurm, for the binary's fail actions: `rebuild` drains the culprit nodes
//! (`scontrol update NodeName=… State=DRAIN Reason="gpuvet: …"`) behind the circuit
//! breaker the Kubernetes quarantine shares (`gpuvet_model::quarantine`) and requeues
//! the job (`scontrol requeue`), so it restarts on other nodes; `gpuvet undrain` lifts
//! a drain of gpuvet's.
//!
//! The cluster sits behind the [`Slurm`] trait: [`Scontrol`] runs Slurm's commands as
//! child processes (arguments as a vector, no shell; a command that hangs past its
//! timeout is killed and is an error), and tests use a fake. Deciding is pure
//! ([`nodes::parse_sinfo`], and [`drain::drain`] over the trait); only [`Scontrol`] does I/O.

pub mod drain;
pub mod error;
pub mod nodes;
pub mod scontrol;

pub use drain::{DrainOutcome, drain};
pub use error::SlurmError;
pub use nodes::SlurmNode;
pub use scontrol::{Scontrol, Slurm};
