//! The configuration file: PAI-EAS's `aimaster` JSON, accepted verbatim, plus gpuvet's
//! own settings under a `gpuvet` key.
//!
//! Parsing happens in two steps. Serde reads the file into raw structs that mirror the
//! JSON; `validate` then turns them into [`Config`], whose fields cannot hold a bad
//! value. Every error names the JSON path and says what would be accepted.

//!
//! - [`types`]: the validated configuration ([`Config`] and what it holds);
//! - `raw`: the serde structs that mirror the JSON, private to this module;
//! - `validate`: raw structs to [`Config`], with errors that name the path.

mod raw;
pub mod types;
mod validate;

use std::time::Duration;

use crate::catalog::DEFAULT_CHECKS;

use self::raw::RawFile;
pub use self::validate::server_addresses;
use self::validate::validate;

pub use types::*;

/// The defaults, written out as a config file. `Config::default()` is this file parsed.
pub const DEFAULT_CONFIG_JSON: &str = r#"{
  "aimaster": {
    "sanity_check": {
      "fail_action": "fail",
      "micro_benchmarks": "gemm_flops,all_reduce_1,all_reduce_2",
      "timeout": 5
    }
  },
  "gpuvet": {
    "backend": "auto"
  }
}"#;

/// Default overall timeout for the sanity checks, in minutes (PAI's default).
pub const DEFAULT_TIMEOUT_MINUTES: f64 = 5.0;
/// Longest accepted overall timeout, in minutes: one day.
pub const MAX_TIMEOUT_MINUTES: f64 = 24.0 * 60.0;
/// Allowed deficit against the peer median, in percent, for GPUs (SuperBench's rule).
/// Backends whose devices are noisier by nature (shared host cores) propose their own;
/// `gpuvet.tolerance_pct` overrides both.
pub const DEFAULT_TOLERANCE_PCT: f64 = 5.0;

/// The largest config accepted, checked before parsing (and by the binary before
/// reading): PAI's file is a few hundred bytes, a full `gpuvet` section a few KiB.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// A configuration error, with where it is and what would be accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("the config is not valid JSON: {message} (line {line}, column {column})")]
    Syntax {
        message: String,
        line: usize,
        column: usize,
    },
    #[error("the config has more than `{limit}` bytes")]
    TooLarge { limit: usize },
    /// The bytes could not be read, or are not UTF-8 text.
    #[error("the config cannot be read: {message}")]
    Unreadable { message: String },
    #[error("invalid config at `{path}`: {message}")]
    Invalid {
        path: String,
        message: String,
        hint: Option<String>,
    },
}

impl ConfigError {
    pub(super) fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            path: path.into(),
            message: message.into(),
            hint: None,
        }
    }

    pub(super) fn with_hint(self, hint: impl Into<String>) -> Self {
        match self {
            ConfigError::Invalid { path, message, .. } => ConfigError::Invalid {
                path,
                message,
                hint: Some(hint.into()),
            },
            other => other,
        }
    }

    /// What the user could do next, when there is something specific to say.
    pub fn hint(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { hint, .. } => hint.as_deref(),
            ConfigError::Syntax { .. } | ConfigError::Unreadable { .. } => None,
            ConfigError::TooLarge { .. } => Some(
                "a PAI config with its `gpuvet` section is a few KiB; check that the file is the config",
            ),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::from_json(DEFAULT_CONFIG_JSON).expect("the default config is valid")
    }
}

impl Config {
    /// Parses and validates a config file's text.
    /// Text over [`MAX_CONFIG_BYTES`] is refused unparsed.
    pub fn from_json(text: &str) -> Result<Config, ConfigError> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                limit: MAX_CONFIG_BYTES,
            });
        }
        let deserializer = &mut serde_json::Deserializer::from_str(text);
        let raw: RawFile = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            if inner.is_syntax() || inner.is_eof() || path == "." {
                let message = inner.to_string();
                let message = message
                    .split(" at line ")
                    .next()
                    .unwrap_or(&message)
                    .to_owned();
                ConfigError::Syntax {
                    message,
                    line: inner.line(),
                    column: inner.column(),
                }
            } else {
                let message = inner.to_string();
                let message = message
                    .split(" at line ")
                    .next()
                    .unwrap_or(&message)
                    .to_owned();
                ConfigError::invalid(path, message)
            }
        })?;
        validate(raw)
    }

    /// Reads a config file's bytes from `reader` (at most one byte past
    /// [`MAX_CONFIG_BYTES`], so an over-long file is refused unread), then parses them.
    /// Opening the file is the caller's: this crate does no I/O of its own.
    pub fn from_reader(reader: impl std::io::Read) -> Result<Config, ConfigError> {
        use std::io::Read;
        let mut bytes = Vec::new();
        reader
            .take(MAX_CONFIG_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|err| ConfigError::Unreadable {
                message: err.to_string(),
            })?;
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                limit: MAX_CONFIG_BYTES,
            });
        }
        let text = String::from_utf8(bytes).map_err(|err| ConfigError::Unreadable {
            message: format!("it is not UTF-8 text ({err})"),
        })?;
        Config::from_json(&text)
    }

    /// The sanity settings to use when checks are run by hand: the configured ones, or
    /// PAI's defaults.
    pub fn sanity_or_default(&self) -> SanityConfig {
        self.sanity.clone().unwrap_or_else(default_sanity)
    }
}

pub(super) fn default_sanity() -> SanityConfig {
    SanityConfig {
        checks: CheckList(DEFAULT_CHECKS.to_vec()),
        fail_action: FailAction::Fail,
        timeout: Timeout(Duration::from_secs_f64(DEFAULT_TIMEOUT_MINUTES * 60.0)),
    }
}

#[cfg(test)]
mod tests;
