//! The server's command line and its settings, resolved once: flags, then the config's
//! `gpuvet.store`, then the node's default store; the tokens from the environment.

use std::error::Error;
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use gpuvet_model::config::Config;
use gpuvet_model::env_vars::{READ_TOKEN, REPORT_TOKEN};
use gpuvet_model::exit_codes;
use gpuvet_store::{StoreError, StoreLocation};

/// Serves a gpuvet store over HTTP: a JSON API under /api/v1, web pages and /metrics.
/// Writes (pushed reports and events) need `GPUVET_REPORT_TOKEN`; reads (the API, the
/// pages, /metrics) need `GPUVET_READ_TOKEN` when it is set.
#[derive(Debug, Parser)]
#[command(name = "gpuvet-server", version)]
pub struct Args {
    /// Config file; only its `gpuvet.store` is used.
    #[arg(long, short, env = "GPUVET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on; loopback unless told otherwise.
    #[arg(long, value_name = "IP:PORT", default_value = gpuvet_server::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// The store to serve: an SQLite file, or `postgres://USER:PASSWORD@HOST:PORT/DB`
    /// for a fleet's server [default: the config's `gpuvet.store`, else the node's file].
    #[arg(long, env = "GPUVET_STORE", value_name = "FILE|URL")]
    pub store: Option<String>,
}

/// Everything the server runs with.
#[derive(Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub store: StoreLocation,
    /// `None`: the server takes no writes.
    pub token: Option<String>,
    /// `None`: reads are open.
    pub read_token: Option<String>,
}

impl Settings {
    pub fn resolve(args: Args) -> Result<Settings, Failure> {
        let config = match &args.config {
            Some(path) => load_config(path)?,
            None => Config::default(),
        };
        let env = |name: &str| std::env::var(name).ok();
        let store = match (&args.store, &config.settings.store) {
            (Some(value), _) | (None, Some(value)) => StoreLocation::parse(value),
            (None, None) => StoreLocation::Sqlite(gpuvet_store::default_path(
                env("XDG_STATE_HOME").as_deref(),
                env("HOME").as_deref(),
            )),
        };
        Ok(Settings {
            listen: args.listen,
            store,
            token: env(REPORT_TOKEN).filter(|t| !t.is_empty()),
            read_token: env(READ_TOKEN).filter(|t| !t.is_empty()),
        })
    }

    /// What the user should know before the server starts.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.token.is_none() {
            warnings.push(format!(
                "`{REPORT_TOKEN}` is not set: the server takes no pushed reports or events"
            ));
        }
        if self.read_token.is_none() && !self.listen.ip().is_loopback() {
            warnings.push(format!(
                "listening on `{}`, reachable from other machines, and `{READ_TOKEN}` is not set: anyone who reaches it can read every node name, GPU serial and finding",
                self.listen
            ));
        }
        if self.read_token.is_some() && self.read_token == self.token {
            warnings.push(format!(
                "`{READ_TOKEN}` is the same as `{REPORT_TOKEN}`: every node that pushes can read the whole fleet; give reads a token of their own"
            ));
        }
        warnings
    }
}

fn load_config(path: &std::path::Path) -> Result<Config, Failure> {
    let file = File::open(path).map_err(|err| {
        Failure::new(
            exit_codes::USAGE,
            format!("cannot read the config file `{}`: {err}", path.display()),
        )
        .with_hint("pass an existing file with `--config`, or leave it out to use the defaults")
    })?;
    Config::from_reader(file).map_err(|err| {
        let hint = err.hint().map(str::to_owned);
        Failure {
            code: exit_codes::USAGE,
            error: format!("`{}`: {err}", path.display()).into(),
            hint,
        }
    })
}

/// An error that ends the server, with its exit code and what to do next.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub error: Box<dyn Error + Send + Sync>,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(code: i32, error: impl Into<Box<dyn Error + Send + Sync>>) -> Failure {
        Failure {
            code,
            error: error.into(),
            hint: None,
        }
    }

    pub fn store(error: StoreError) -> Failure {
        let hint = error.hint().map(str::to_owned);
        Failure {
            code: exit_codes::STORE_ERROR,
            error: Box::new(error),
            hint,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Failure {
        self.hint = Some(hint.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(listen: &str, token: Option<&str>, read_token: Option<&str>) -> Settings {
        Settings {
            listen: listen.parse().unwrap(),
            store: StoreLocation::Sqlite("server.db".into()),
            token: token.map(str::to_owned),
            read_token: read_token.map(str::to_owned),
        }
    }

    #[test]
    fn a_reachable_server_without_a_read_token_warns_whatever_its_write_token() {
        let reachable = |warnings: &[String]| {
            warnings
                .iter()
                .any(|w| w.contains("reachable from other machines") && w.contains(READ_TOKEN))
        };
        assert!(reachable(
            &settings("0.0.0.0:9470", Some("w"), None).warnings()
        ));
        assert!(reachable(&settings("10.0.0.5:9470", None, None).warnings()));
        assert!(!reachable(
            &settings("0.0.0.0:9470", Some("w"), Some("r")).warnings()
        ));
        assert!(!reachable(
            &settings("127.0.0.1:9470", Some("w"), None).warnings()
        ));
        assert!(!reachable(
            &settings("[::1]:9470", Some("w"), None).warnings()
        ));
        assert!(
            settings("0.0.0.0:9470", Some("w"), Some("r"))
                .warnings()
                .is_empty()
        );
    }

    #[test]
    fn a_read_token_equal_to_the_write_token_is_warned_about() {
        let warnings = settings("127.0.0.1:9470", Some("same"), Some("same")).warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("is the same as"), "{warnings:?}");
    }
}
