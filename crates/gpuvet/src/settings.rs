//! Settings resolved once, at the edge. A command that records a run (`check`, `run`,
//! `watch`) turns its flags, the config file and the environment into one
//! [`Recording`] here, and everything after reads that value: who is running, where
//! results go (or nowhere, with `--no-store`), and whether they are pushed.

use std::path::{Path, PathBuf};

use gpuvet_model::config::Config;
use gpuvet_model::events::Attempt;
use gpuvet_model::time::unix_now_ms;
use gpuvet_push::Pusher;
use gpuvet_store::Store;

use crate::cli::{IdentityArgs, StoreArgs};
use crate::failure::Failure;
use crate::identity::{Identity, load_config, store_path};
use crate::push;

/// Who runs, with which config, and where what it finds is kept.
#[derive(Debug)]
pub struct Recording {
    pub config: Config,
    pub identity: Identity,
    /// The store results go to; `None` with `--no-store`.
    pub store: Option<PathBuf>,
    /// Whether what the store records is also queued for a server
    /// (`gpuvet.report_to`); never without a store, whose outbox pushes go through.
    pub queue_pushes: bool,
    /// The client of that server, until [`Recording::start_sending`] takes it.
    pusher: Option<Pusher>,
}

impl Recording {
    pub fn resolve(
        config_file: Option<&Path>,
        identity: &IdentityArgs,
        store: &StoreArgs,
    ) -> Result<Recording, Failure> {
        let config = load_config(config_file)?;
        let store = (!store.no_store).then(|| store_path(store.store.as_deref(), &config));
        let identity = Identity::resolve(identity);
        let pusher = match &store {
            Some(_) => push::pusher(&config, &[], &identity.node)?,
            None => None,
        };
        Ok(Recording {
            identity,
            config,
            store,
            queue_pushes: pusher.is_some(),
            pusher,
        })
    }

    /// Opens the store, when there is one, and begins this run's attempt in it; without
    /// a store the run is attempt 1 of its job. In a requeued Slurm job the attempt is at
    /// least `SLURM_RESTART_COUNT + 1`, on every node the job lands on.
    pub fn begin(&self) -> Result<(Option<Store>, Attempt), Failure> {
        let at_least = self
            .identity
            .slurm
            .as_ref()
            .map_or(1, |slurm| slurm.first_attempt());
        let Some(path) = &self.store else {
            let attempt = Attempt {
                job_id: self.identity.job_id.clone(),
                attempt: at_least,
                node: self.identity.node.clone(),
                instance: self.identity.instance.clone(),
            };
            return Ok((None, attempt));
        };
        let mut store = push::open_store(path, self.queue_pushes)?;
        let attempt = store.begin_attempt_at_least(
            &self.identity.job_id,
            &self.identity.node,
            &self.identity.instance,
            at_least,
            unix_now_ms(),
        )?;
        Ok((Some(store), attempt))
    }

    /// The background sender of what the store queues, for as long as it is kept;
    /// nothing without a store or a server.
    pub fn start_sending(&mut self) -> Option<push::Background> {
        let path = self.store.as_ref()?;
        let pusher = self.pusher.take()?;
        Some(push::Background::start(path, Some(pusher)))
    }
}
