//! Pushing to a central `gpuvet serve` (`gpuvet.report_to`): the client built from the
//! config and the environment, and the background sender that `run` and `watch` keep
//! while the app runs.

use std::path::{Path, PathBuf};

use gpuvet_model::config::Config;
use gpuvet_model::env_vars::REPORT_TOKEN as TOKEN_ENV;
use gpuvet_push::{Pusher, Sender};
use gpuvet_store::Store;

use crate::failure::warn;

/// The client of `to` (else the config's `gpuvet.report_to`), with the token from
/// `GPUVET_REPORT_TOKEN`; `None` when nothing is to be pushed.
pub fn pusher(config: &Config, to: Option<&str>) -> Option<Pusher> {
    let base = to.or(config.settings.report_to.as_deref())?;
    let token = std::env::var(TOKEN_ENV).ok();
    if token.as_deref().is_none_or(str::is_empty) {
        warn(format!(
            "`gpuvet.report_to` is set but `{TOKEN_ENV}` is not; the server will refuse what is pushed until it is"
        ));
    }
    Some(Pusher::new(base, token.as_deref()))
}

/// Opens the store, queueing what it records when pushing is on.
pub fn open_store(path: &Path, queue: bool) -> Result<Store, gpuvet_store::StoreError> {
    let mut store = Store::open(path)?;
    store.queue_pushes(queue);
    Ok(store)
}

/// A background sender that stops (after one last round) when dropped, on every way
/// out of a command.
#[derive(Debug)]
pub struct Background(Option<Sender>);

impl Background {
    /// Starts sending the outbox of the store at `path`; does nothing without a client.
    pub fn start(path: &Path, pusher: Option<Pusher>) -> Background {
        Background(pusher.map(|pusher| {
            let path: PathBuf = path.to_owned();
            Sender::start(
                move || Store::open(&path),
                pusher,
                |message| {
                    warn(format!("push: {message}"));
                },
            )
        }))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(sender) = self.0.take() {
            sender.stop();
        }
    }
}
