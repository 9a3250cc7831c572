//! Pushing to a central `gpuvet serve` (`gpuvet.report_to`): the client built from the
//! config and the environment, and the background sender that `run` and `watch` keep
//! while the app runs.

use std::path::{Path, PathBuf};

use gpuvet_model::config::{Config, ConfigError, server_addresses};
use gpuvet_model::env_vars::{REPORT_CA, REPORT_TOKEN as TOKEN_ENV};
use gpuvet_push::{Pusher, Sender, Trust};
use gpuvet_store::Store;

use crate::failure::{Failure, warn};

/// The client of the servers `to` names (`--to`, repeated for replicas), else the
/// config's `gpuvet.report_to`, with the token from `GPUVET_REPORT_TOKEN` and, for
/// `https://`, the CAs `gpuvet.report_ca` (or `GPUVET_REPORT_CA`) names; `None` when
/// nothing is to be pushed. Of several replicas, `node` picks the one it starts with.
pub fn pusher(config: &Config, to: &[String], node: &str) -> Result<Option<Pusher>, Failure> {
    let urls = if to.is_empty() {
        config.settings.report_to.clone()
    } else {
        server_addresses(to, "--to").map_err(|error| match error {
            ConfigError::Invalid {
                path,
                message,
                hint,
            } => {
                let failure = Failure::usage(format!("invalid `{path}`: {message}"));
                match hint {
                    Some(hint) => failure.with_hint(hint),
                    None => failure,
                }
            }
            other => Failure::from(other),
        })?
    };
    let token = std::env::var(TOKEN_ENV).ok();
    let Some(pusher) = Pusher::to_any_of(&urls, token.as_deref()) else {
        return Ok(None);
    };
    if token.as_deref().is_none_or(str::is_empty) {
        warn(format!(
            "`gpuvet.report_to` is set but `{TOKEN_ENV}` is not; the server will refuse what is pushed until it is"
        ));
    }
    for url in &urls {
        if let Some(warning) = cleartext_warning(url) {
            warn(warning);
        }
    }
    pusher
        .starting_with(node)
        .with_trust(&trust(config))
        .map(Some)
        .map_err(|error| Failure::new(gpuvet_model::exit_codes::USAGE, error))
}

/// The CAs a client of an `https://` server trusts.
pub fn trust(config: &Config) -> Trust {
    Trust::from_settings(
        config.settings.report_ca.as_deref(),
        std::env::var(REPORT_CA).ok(),
    )
}

/// A warning when `url` is plain HTTP to another machine: the token and every report
/// would cross the network in clear. Loopback stays quiet.
pub fn cleartext_warning(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (!loopback).then(|| {
        format!(
            "`{url}` is plain HTTP: the token and every report cross the network in clear; serve it with `--tls-cert` and push to `https://`"
        )
    })
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
