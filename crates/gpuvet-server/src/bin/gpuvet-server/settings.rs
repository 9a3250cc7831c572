//! The server's command line and its settings, resolved once: flags, then the config's
//! `gpuvet.store`, then the node's default store; the token from the environment.

use std::error::Error;
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use gpuvet_model::config::Config;
use gpuvet_model::env_vars::REPORT_TOKEN;
use gpuvet_model::exit_codes;
use gpuvet_store::{StoreError, StoreLocation};

/// Serves a gpuvet store over HTTP: a JSON API under /api/v1, web pages and /metrics.
/// Writes (pushed reports and events) need `GPUVET_REPORT_TOKEN`.
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
        })
    }

    /// What the user should know before the server starts.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.token.is_none() {
            warnings.push(format!(
                "`{REPORT_TOKEN}` is not set: the server takes no pushed reports or events"
            ));
            if !self.listen.ip().is_loopback() {
                warnings.push(format!(
                    "listening on `{}`, reachable from other machines: its data can be read there",
                    self.listen
                ));
            }
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
