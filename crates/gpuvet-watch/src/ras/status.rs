//! The JSON status document of NCCL RAS (`SET FORMAT json`, NCCL 2.28.7+).
//!
//! Field names follow `jsonWriteHeader`, `jsonStartCommunicator`, `jsonWriteRankData`,
//! `jsonWriteMissingRank` and `jsonWriteFooter` in NCCL's `src/ras/client_support.cc`.
//! The format "varies from release to release", so every field is optional, unknown
//! fields are ignored, and numbers written as strings (or strings as numbers) are
//! accepted.

use std::collections::BTreeMap;

use gpuvet_model::bounds::json_values_at_most;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::RasError;

/// One status report: the job's communicators as seen by every reachable process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RasStatus {
    #[serde(deserialize_with = "opt_string")]
    pub nccl_version: Option<String>,
    #[serde(deserialize_with = "opt_i64")]
    pub cuda_runtime_version: Option<i64>,
    #[serde(deserialize_with = "opt_i64")]
    pub cuda_driver_version: Option<i64>,
    /// Local time of the RAS thread that answered, `%F %T`.
    #[serde(deserialize_with = "opt_string")]
    pub timestamp: Option<String>,
    #[serde(deserialize_with = "opt_u64")]
    pub communicators_count: Option<u64>,
    pub communicators: Vec<RasCommunicator>,
    pub ras: Option<RasCollection>,
}

/// One communicator: the ranks that answered and the ranks that did not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RasCommunicator {
    /// `0x...`; not unique on its own, see `secondary_hash`.
    #[serde(deserialize_with = "string")]
    pub hash: String,
    /// `0x<host hash>:0x<pid hash>` of rank 0; with `hash`, a unique identifier.
    #[serde(deserialize_with = "opt_string")]
    pub secondary_hash: Option<String>,
    /// Ranks in the communicator.
    #[serde(deserialize_with = "opt_u64")]
    pub size: Option<u64>,
    #[serde(deserialize_with = "opt_u64")]
    pub ranks_count: Option<u64>,
    #[serde(deserialize_with = "opt_u64")]
    pub missing_ranks_count: Option<u64>,
    pub ranks: Vec<RasRank>,
    pub missing_ranks: Vec<RasMissingRank>,
}

impl RasCommunicator {
    /// The identifier NCCL guarantees unique: `hash` plus `secondary_hash`.
    pub fn id(&self) -> String {
        match &self.secondary_hash {
            Some(secondary) => format!("{}/{secondary}", self.hash),
            None => self.hash.clone(),
        }
    }
}

/// A rank that reported its state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RasRank {
    #[serde(deserialize_with = "u32_value")]
    pub rank: u32,
    /// IP address of the node; `unknown` when NCCL could not map it.
    #[serde(default, deserialize_with = "opt_string")]
    pub host: Option<String>,
    /// `-1` when unknown.
    #[serde(default, deserialize_with = "opt_i64")]
    pub pid: Option<i64>,
    #[serde(default, deserialize_with = "opt_i64")]
    pub cuda_dev: Option<i64>,
    #[serde(default, deserialize_with = "opt_i64")]
    pub nvml_dev: Option<i64>,
    #[serde(default)]
    pub status: RasRankStatus,
    /// Collectives launched so far, per operation (`AllReduce`, `Broadcast`, ...).
    #[serde(default, deserialize_with = "counts")]
    pub collective_counts: BTreeMap<String, u64>,
}

/// A rank's communicator state; the codes are `ncclResult_t` values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RasRankStatus {
    /// `0` initialized, `7` (`ncclInProgress`) still initializing, anything else failed.
    #[serde(deserialize_with = "i64_value")]
    pub init_state: i64,
    /// What `ncclCommGetAsyncError` would return.
    #[serde(deserialize_with = "i64_value")]
    pub async_error: i64,
    #[serde(deserialize_with = "flag")]
    pub finalize_called: bool,
    #[serde(deserialize_with = "flag")]
    pub destroy_flag: bool,
    #[serde(deserialize_with = "flag")]
    pub abort_flag: bool,
}

/// A rank of the communicator that did not report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RasMissingRank {
    #[serde(deserialize_with = "u32_value")]
    pub rank: u32,
    #[serde(default, deserialize_with = "opt_string")]
    pub host: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    pub pid: Option<i64>,
    #[serde(default, deserialize_with = "opt_i64")]
    pub cuda_dev: Option<i64>,
    #[serde(default, deserialize_with = "opt_i64")]
    pub nvml_dev: Option<i64>,
    #[serde(default)]
    pub status: RasMissingStatus,
}

/// Why a rank is missing. Neither flag set: the process answered but no longer (or not
/// yet) counts itself a member, which happens around init and teardown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RasMissingStatus {
    /// RAS could not reach the process while collecting data.
    #[serde(deserialize_with = "flag")]
    pub unresponsive: bool,
    /// Unreachable for 60 s or more: RAS gave up on it for good.
    #[serde(deserialize_with = "flag")]
    pub considered_dead: bool,
}

/// How the collection itself went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RasCollection {
    #[serde(deserialize_with = "opt_f64")]
    pub collection_time_sec: Option<f64>,
    /// Legs of the RAS collective that timed out: the data is incomplete.
    #[serde(deserialize_with = "u64_value")]
    pub timeouts_count: u64,
}

/// The most JSON values a status may hold (objects weighted, see
/// [`gpuvet_model::bounds`]), counted before any is built: a rank's entry counts about
/// 55, so this is 18,000 entries (a 4,096-GPU job in 4 communicators), and the decoded
/// status stays near 100 MB whatever the values are.
pub const MAX_STATUS_VALUES: usize = 1_000_000;

/// Parse a status document; `addr` names where it came from in errors. Refused unparsed
/// when over [`MAX_STATUS_VALUES`].
pub fn parse_status(text: &str, addr: &str) -> Result<RasStatus, RasError> {
    if json_values_at_most(text.as_bytes(), MAX_STATUS_VALUES).is_err() {
        return Err(RasError::TooManyValues {
            addr: addr.to_string(),
            limit: MAX_STATUS_VALUES,
        });
    }
    serde_json::from_str(text).map_err(|source| RasError::InvalidStatus {
        addr: addr.to_string(),
        excerpt: excerpt(text),
        source,
    })
}

fn excerpt(text: &str) -> String {
    const MAX_CHARS: usize = 60;
    let mut short: String = text.trim_start().chars().take(MAX_CHARS).collect();
    if text.trim_start().chars().nth(MAX_CHARS).is_some() {
        short.push_str("...");
    }
    short.escape_debug().to_string()
}

// Lenient readers: RAS writes numbers with printf, so a future version quoting them, or
// a field changing from number to string, must not lose the whole report.

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(number) => number
            .as_i64()
            .or_else(|| {
                number
                    .as_u64()
                    .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
            })
            .or_else(|| number.as_f64().filter(|f| f.is_finite()).map(|f| f as i64)),
        Value::String(text) => {
            let text = text.trim();
            text.parse()
                .ok()
                .or_else(|| {
                    let hex = text.strip_prefix("0x")?;
                    i64::from_str_radix(hex, 16).ok()
                })
                .or_else(|| text.parse::<f64>().ok().map(|f| f as i64))
        }
        Value::Bool(flag) => Some(i64::from(*flag)),
        _ => None,
    }
}

fn opt_i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    Ok(integer(&Value::deserialize(deserializer)?))
}

fn i64_value<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    Ok(opt_i64(deserializer)?.unwrap_or(0))
}

fn opt_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Ok(opt_i64(deserializer)?.and_then(|n| u64::try_from(n).ok()))
}

fn u64_value<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    Ok(opt_u64(deserializer)?.unwrap_or(0))
}

fn u32_value<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let value = Value::deserialize(deserializer)?;
    integer(&value)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| serde::de::Error::custom(format!("invalid rank `{value}`")))
}

fn opt_f64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    })
}

fn opt_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::String(text) => Some(text),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    })
}

fn string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(opt_string(deserializer)?.unwrap_or_default())
}

fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::Bool(flag) => flag,
        Value::Number(number) => number.as_f64().is_some_and(|n| n != 0.0),
        Value::String(text) => matches!(text.trim(), "true" | "True" | "1"),
        _ => false,
    })
}

fn counts<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<String, u64>, D::Error> {
    let Value::Object(map) = Value::deserialize(deserializer)? else {
        return Ok(BTreeMap::new());
    };
    Ok(map
        .into_iter()
        .filter_map(|(op, count)| Some((op, u64::try_from(integer(&count)?).ok()?)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample from NCCL's `ras.rst` ("JSON Output").
    const DOCUMENTED_SAMPLE: &str = r#"{
      "nccl_version": "2.29.1",
      "cuda_runtime_version": 13000,
      "cuda_driver_version": 13000,
      "timestamp": "2025-12-19 13:06:53",
      "communicators_count": 1,
      "communicators": [
        {
          "hash": "0xae94423cfbb2ef4a",
          "secondary_hash": "0xb7e7187447156001:0xb8242ed28a71381e",
          "size": 2,
          "ranks_count": 1,
          "missing_ranks_count": 1,
          "ranks": [
            {
              "rank": 0, "host": "172.16.64.245", "pid": 1524344, "cuda_dev": 0, "nvml_dev": 0,
              "status": {"init_state": 0, "async_error": 0, "finalize_called": false,
                         "destroy_flag": false, "abort_flag": false},
              "collective_counts": {"Broadcast": 0, "Reduce": 0, "AllGather": 0,
                                    "ReduceScatter": 0, "AllReduce": 0}
            }
          ],
          "missing_ranks": [
            {
              "rank": 1, "host": "172.16.64.245", "pid": 1524345, "cuda_dev": 1, "nvml_dev": 1,
              "status": {"unresponsive": true, "considered_dead": false}
            }
          ]
        }
      ],
      "ras": {"collection_time_sec": 0.000, "timeouts_count": 0}
    }"#;

    #[test]
    fn parses_the_documented_sample() {
        let status = parse_status(DOCUMENTED_SAMPLE, "test").unwrap();
        assert_eq!(status.nccl_version.as_deref(), Some("2.29.1"));
        assert_eq!(status.communicators.len(), 1);
        let comm = &status.communicators[0];
        assert_eq!(comm.hash, "0xae94423cfbb2ef4a");
        assert_eq!(comm.size, Some(2));
        assert_eq!(comm.ranks[0].collective_counts["AllReduce"], 0);
        assert_eq!(comm.ranks[0].pid, Some(1_524_344));
        assert!(comm.missing_ranks[0].status.unresponsive);
        assert!(!comm.missing_ranks[0].status.considered_dead);
        assert_eq!(status.ras.unwrap().timeouts_count, 0);
    }

    #[test]
    fn tolerates_unknown_fields_and_quoted_numbers() {
        let text = r#"{"communicators": [{"hash": 12, "new_field": {"x": 1},
            "ranks": [{"rank": "3", "pid": "42", "status": {"async_error": "6", "abort_flag": 1},
                       "collective_counts": {"AllReduce": "7", "Odd": "n/a"}}]}],
            "future": [1, 2]}"#;
        let status = parse_status(text, "test").unwrap();
        let rank = &status.communicators[0].ranks[0];
        assert_eq!(status.communicators[0].hash, "12");
        assert_eq!(rank.rank, 3);
        assert_eq!(rank.pid, Some(42));
        assert_eq!(rank.status.async_error, 6);
        assert!(rank.status.abort_flag);
        assert_eq!(rank.collective_counts.len(), 1);
    }

    #[test]
    fn garbage_names_the_address_and_shows_the_start() {
        let error = parse_status("NCCL version 2.24.3\nJob summary", "127.0.0.1:28028")
            .unwrap_err()
            .to_string();
        assert!(error.contains("`127.0.0.1:28028`"), "{error}");
        assert!(
            error.contains("NCCL version 2.24.3\\nJob summary"),
            "{error}"
        );
    }

    #[test]
    fn the_value_bound_is_checked_before_parsing() {
        // The object (8), `future` and the array: 10 values besides the zeros.
        let document = |count: usize| format!(r#"{{"future":[{}]}}"#, vec!["0"; count].join(","));
        assert!(parse_status(&document(MAX_STATUS_VALUES - 10), "test").is_ok());
        let error = parse_status(&document(MAX_STATUS_VALUES - 9), "127.0.0.1:1")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "the status from nccl ras at `127.0.0.1:1` holds more than `1000000` json values"
        );
    }
}
