//! The server's command line and its settings, resolved once: flags, then the config's
//! `gpuvet.store`, then the node's default store; the tokens from the environment; TLS
//! files loaded and connection limits checked before anything listens.

use std::error::Error;
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use gpuvet_model::config::Config;
use gpuvet_model::env_vars::{READ_TOKEN, REPORT_TOKEN};
use gpuvet_model::exit_codes;
use gpuvet_server::{ConnectionLimits, EventLimits, Retention, ServerTls, TlsFiles};
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
    /// Serve HTTPS with this certificate chain (PEM, the server's first); read again on
    /// SIGHUP. Needs `--tls-key`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM); read again on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Close a connection whose request head (or TLS handshake) has not arrived within
    /// this many seconds of the server waiting for it.
    #[arg(long, value_name = "SECS", default_value_t = ConnectionLimits::DEFAULT_HEADER_TIMEOUT.as_secs_f64())]
    pub header_timeout: f64,
    /// Close a connection on which no byte has moved for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = ConnectionLimits::DEFAULT_IDLE_TIMEOUT.as_secs_f64())]
    pub idle_timeout: f64,
    /// Delete attempts (with their reports) and events older than this many days, a
    /// batch at a time while serving [default: the config's `gpuvet.keep_days`, else
    /// keep everything].
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub keep_days: Option<u32>,
    /// Events a second each node may push, sustained; past its budget an event is
    /// answered 429 with `Retry-After` and stays in the node's outbox.
    #[arg(long, value_name = "N", default_value_t = EventLimits::DEFAULT_RATE)]
    pub event_rate: f64,
    /// Events each node may push at once after a quiet spell.
    #[arg(long, value_name = "N", default_value_t = EventLimits::DEFAULT_BURST)]
    pub event_burst: f64,
    /// Connections open at once; one more is answered 503 with `Retry-After`.
    #[arg(long, value_name = "N", default_value_t = ConnectionLimits::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
}

/// File descriptors the server keeps for itself beyond its connections: the store's
/// files and pool, the listener, the runtime.
const RESERVED_FILES: u64 = 256;

/// Everything the server runs with.
#[derive(Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub store: StoreLocation,
    /// `None`: the server takes no writes.
    pub token: Option<String>,
    /// `None`: plain HTTP.
    pub tls: Option<Arc<ServerTls>>,
    pub limits: ConnectionLimits,
    /// `None`: reads are open.
    pub read_token: Option<String>,
    /// `None`: keep everything.
    pub retention: Option<Retention>,
    pub event_limits: EventLimits,
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
        let limits = ConnectionLimits {
            header_timeout: seconds("--header-timeout", args.header_timeout)?,
            idle_timeout: seconds("--idle-timeout", args.idle_timeout)?,
            max_connections: args.max_connections,
        };
        if limits.max_connections == 0 {
            return Err(Failure::new(
                exit_codes::USAGE,
                "`--max-connections 0` would refuse every client",
            )
            .with_hint("pass at least 1; the default is 8192"));
        }
        for (flag, value) in [
            ("--event-rate", args.event_rate),
            ("--event-burst", args.event_burst),
        ] {
            if !(value.is_finite() && value >= 1.0) {
                return Err(Failure::new(
                    exit_codes::USAGE,
                    format!("`{flag} {value}` is not a number of events of at least 1"),
                )
                .with_hint(format!("pass a number like `{flag} 10`")));
            }
        }
        let event_limits = EventLimits {
            rate_per_sec: args.event_rate,
            burst: args.event_burst,
        };
        let open_files = raise_open_files_limit();
        if let Some(open_files) = open_files
            && (limits.max_connections as u64).saturating_add(RESERVED_FILES) > open_files
        {
            return Err(Failure::new(
                exit_codes::USAGE,
                format!(
                    "`--max-connections {}` does not fit the process's limit of `{open_files}` open files",
                    limits.max_connections
                ),
            )
            .with_hint(format!(
                "pass at most `{}`, or raise the limit (`ulimit -n`, systemd's `LimitNOFILE=`)",
                open_files.saturating_sub(RESERVED_FILES)
            )));
        }
        let tls = match (args.tls_cert, args.tls_key) {
            (Some(cert), Some(key)) => Some(Arc::new(
                ServerTls::load(TlsFiles { cert, key }).map_err(|e| {
                    Failure::new(exit_codes::USAGE, e).with_hint(
                        "pass the PEM certificate chain with `--tls-cert` and its key with `--tls-key`",
                    )
                })?,
            )),
            _ => None,
        };
        Ok(Settings {
            listen: args.listen,
            store,
            token: env(REPORT_TOKEN).filter(|t| !t.is_empty()),
            tls,
            limits,
            read_token: env(READ_TOKEN).filter(|t| !t.is_empty()),
            retention: args
                .keep_days
                .or(config.settings.keep_days)
                .map(Retention::days),
            event_limits,
        })
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// What the user should know before the server starts.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.tls.is_none() && !self.listen.ip().is_loopback() {
            warnings.push(format!(
                "serving plain HTTP on `{}`: tokens and reports cross the network in clear; pass `--tls-cert` and `--tls-key`",
                self.listen
            ));
        }
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

/// `SECS` of `flag` as a duration: positive and finite.
fn seconds(flag: &str, secs: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            Failure::new(
                exit_codes::USAGE,
                format!("`{flag} {secs}` is not a number of seconds above zero"),
            )
            .with_hint(format!("pass a positive number, like `{flag} 10`"))
        })
}

/// Raises the soft limit on open files to the hard one, as servers that hold many
/// connections do (Go's runtime does it for every program), and returns it; `None`
/// when it cannot be read.
fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one `rlimit` we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Some(limit.rlim_cur)
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
            tls: None,
            limits: ConnectionLimits::default(),
            retention: None,
            event_limits: EventLimits::default(),
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
        // With both tokens, only the plain HTTP is left to warn about.
        let warnings = settings("0.0.0.0:9470", Some("w"), Some("r")).warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("serving plain HTTP"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_read_token_equal_to_the_write_token_is_warned_about() {
        let warnings = settings("127.0.0.1:9470", Some("same"), Some("same")).warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("is the same as"), "{warnings:?}");
    }
}
