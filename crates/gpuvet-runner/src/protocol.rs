//! The pipe protocol between the runner and a check's worker process: one JSON object
//! per line. The worker says hello, the runner sends one request per round of units,
//! and the worker answers one line per unit as it finishes.
//!
//! The wire types mirror [`Sample`], [`WorkSpec`] and [`BackendError`] instead of
//! deriving serde on them: floats that JSON cannot carry (NaN, ±inf) survive as
//! strings, and a field added to those types breaks the build here, not the wire. An
//! error crosses as its kind and its text with every cause, which is all a check's
//! result keeps of it.

use std::collections::BTreeMap;

use gpuvet_backend::{BackendError, Sample, WorkSpec, with_causes};
use gpuvet_model::bounds::json_values_at_most;
use gpuvet_model::catalog::CheckName;
use gpuvet_model::config::Dtype;
use serde::{Deserialize, Serialize};

use crate::RunnerError;

/// Bumped when a line changes meaning; parent and worker are the same binary, so a
/// mismatch means the binary was replaced during the run.
pub(crate) const PROTOCOL: u32 = 1;

/// How much of an unreadable line an error message quotes.
const QUOTE_CHARS: usize = 120;

/// The runner's request: run these units of `check` concurrently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Request {
    pub round: u64,
    pub check: CheckName,
    pub work: WireWork,
    /// The devices of each unit, by slot.
    pub units: Vec<Vec<u32>>,
}

/// What the worker writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum FromWorker {
    /// First line: the worker built its backend and is ready.
    Hello {
        protocol: u32,
        version: String,
        backend: String,
        devices: Vec<u32>,
    },
    /// One unit of a round finished.
    Unit {
        round: u64,
        slot: usize,
        result: WireResult,
    },
    /// The worker cannot go on (no backend, an unreadable request); it exits next.
    Fatal { message: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WireResult {
    Ok(WireSample),
    Err(WireError),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireError {
    pub kind: ErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorKind {
    Cancelled,
    Unsupported,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireSample {
    value: WireF64,
    samples: Vec<WireF64>,
    wrong_result: Option<String>,
    extra: BTreeMap<String, WireF64>,
    params: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireWork {
    gemm_dtype: String,
    gemm_size: Option<u32>,
    collective_bytes: Option<u64>,
}

/// An `f64` as a JSON number, or as `"nan"`, `"inf"` or `"-inf"`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WireF64(f64);

impl PartialEq for WireF64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits() || self.0 == other.0
    }
}

impl Serialize for WireF64 {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value = self.0;
        if value.is_finite() {
            serializer.serialize_f64(value)
        } else if value.is_nan() {
            serializer.serialize_str("nan")
        } else if value > 0.0 {
            serializer.serialize_str("inf")
        } else {
            serializer.serialize_str("-inf")
        }
    }
}

impl<'de> Deserialize<'de> for WireF64 {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Number(f64),
            Word(String),
        }
        match Either::deserialize(deserializer)? {
            Either::Number(value) => Ok(WireF64(value)),
            Either::Word(word) => match word.as_str() {
                "nan" => Ok(WireF64(f64::NAN)),
                "inf" => Ok(WireF64(f64::INFINITY)),
                "-inf" => Ok(WireF64(f64::NEG_INFINITY)),
                _ => Err(serde::de::Error::custom(format!(
                    "expected a number, `nan`, `inf` or `-inf`, not `{word}`"
                ))),
            },
        }
    }
}

impl From<Sample> for WireSample {
    fn from(sample: Sample) -> Self {
        // Destructured, so a new field of `Sample` must be carried here too.
        let Sample {
            value,
            samples,
            wrong_result,
            extra,
            params,
        } = sample;
        WireSample {
            value: WireF64(value),
            samples: samples.into_iter().map(WireF64).collect(),
            wrong_result,
            extra: extra.into_iter().map(|(k, v)| (k, WireF64(v))).collect(),
            params,
        }
    }
}

impl From<WireSample> for Sample {
    fn from(wire: WireSample) -> Self {
        Sample {
            value: wire.value.0,
            samples: wire.samples.into_iter().map(|v| v.0).collect(),
            wrong_result: wire.wrong_result,
            extra: wire.extra.into_iter().map(|(k, v)| (k, v.0)).collect(),
            params: wire.params,
        }
    }
}

impl From<&WorkSpec> for WireWork {
    fn from(work: &WorkSpec) -> Self {
        let WorkSpec {
            gemm_dtype,
            gemm_size,
            collective_bytes,
        } = *work;
        WireWork {
            gemm_dtype: gemm_dtype.as_str().to_owned(),
            gemm_size,
            collective_bytes,
        }
    }
}

impl WireWork {
    pub(crate) fn to_spec(&self) -> Result<WorkSpec, RunnerError> {
        let gemm_dtype =
            Dtype::parse(&self.gemm_dtype).ok_or_else(|| RunnerError::UnknownDtype {
                dtype: self.gemm_dtype.clone(),
            })?;
        Ok(WorkSpec {
            gemm_dtype,
            gemm_size: self.gemm_size,
            collective_bytes: self.collective_bytes,
        })
    }
}

impl From<Result<Sample, BackendError>> for WireResult {
    fn from(result: Result<Sample, BackendError>) -> Self {
        match result {
            Ok(sample) => WireResult::Ok(sample.into()),
            Err(error) => WireResult::Err(WireError {
                kind: match error {
                    BackendError::Cancelled => ErrorKind::Cancelled,
                    BackendError::Unsupported(_) => ErrorKind::Unsupported,
                    // Every failure reads the same to the runner; its text is what
                    // matters (`Unavailable` names a static backend, which cannot cross).
                    _ => ErrorKind::Failed,
                },
                message: with_causes(&error),
            }),
        }
    }
}

impl From<WireResult> for Result<Sample, BackendError> {
    fn from(wire: WireResult) -> Self {
        match wire {
            WireResult::Ok(sample) => Ok(sample.into()),
            // The worker's error arrives as text, which `Failed` carries.
            WireResult::Err(WireError { kind, message }) => Err(match kind {
                ErrorKind::Cancelled => BackendError::Cancelled,
                ErrorKind::Unsupported => BackendError::Unsupported(message),
                ErrorKind::Failed => BackendError::Failed(message),
            }),
        }
    }
}

/// One line, without its newline.
pub(crate) fn encode<T: Serialize>(message: &T) -> String {
    serde_json::to_string(message).expect("protocol messages always serialize")
}

/// The longest line either side reads (a result with every iteration's sample is well
/// under a MiB); a longer one is not the protocol.
pub(crate) const MAX_LINE_BYTES: usize = 16 << 20;

/// The most JSON values one line may hold, counted before any is built: a full line of
/// `[0,0,...]` would otherwise decode to half a gigabyte.
pub(crate) const MAX_LINE_VALUES: usize = 1 << 20;

/// A line the worker wrote, or why it cannot be read (quoting the line).
pub(crate) fn decode_from_worker(line: &str) -> Result<FromWorker, RunnerError> {
    check_values(line)?;
    serde_json::from_str(line).map_err(|error| unreadable(line, error))
}

/// A line the runner wrote, or why it cannot be read (quoting the line).
pub(crate) fn decode_request(line: &str) -> Result<Request, RunnerError> {
    check_values(line)?;
    serde_json::from_str(line).map_err(|error| unreadable(line, error))
}

fn check_values(line: &str) -> Result<(), RunnerError> {
    match json_values_at_most(line.as_bytes(), MAX_LINE_VALUES) {
        Ok(_) => Ok(()),
        Err(_) => Err(RunnerError::TooManyValues {
            max: MAX_LINE_VALUES,
        }),
    }
}

fn unreadable(line: &str, error: serde_json::Error) -> RunnerError {
    let mut quote: String = line.chars().take(QUOTE_CHARS).collect();
    if quote.len() < line.len() {
        quote.push('…');
    }
    RunnerError::Unreadable { quote, error }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sample {
        Sample {
            value: 700.5,
            samples: vec![1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.1 + 0.2],
            wrong_result: Some("off by one at [3, 4]".to_owned()),
            extra: BTreeMap::from([("algbw".to_owned(), 12.25), ("x".to_owned(), f64::NAN)]),
            params: BTreeMap::from([("dtype".to_owned(), "bf16".to_owned())]),
        }
    }

    #[test]
    fn a_sample_survives_the_wire_with_nan_and_infinities() {
        let line = encode(&FromWorker::Unit {
            round: 3,
            slot: 7,
            result: Ok(sample()).into(),
        });
        assert!(!line.contains('\n'), "one line: {line}");
        let FromWorker::Unit {
            round,
            slot,
            result,
        } = decode_from_worker(&line).unwrap()
        else {
            panic!("not a unit: {line}");
        };
        assert_eq!((round, slot), (3, 7));
        let back = Result::<Sample, BackendError>::from(result).unwrap();
        let expected = sample();
        assert_eq!(back.value, expected.value);
        assert_eq!(back.samples[0], 1.0);
        assert!(back.samples[1].is_nan());
        assert_eq!(back.samples[2], f64::INFINITY);
        assert_eq!(back.samples[3], f64::NEG_INFINITY);
        assert_eq!(back.samples[4], 0.1 + 0.2, "floats round-trip exactly");
        assert_eq!(back.extra["algbw"], 12.25);
        assert!(back.extra["x"].is_nan());
        assert_eq!(back.wrong_result, expected.wrong_result);
        assert_eq!(back.params, expected.params);
    }

    #[test]
    fn errors_keep_their_kind_and_text() {
        let errors = [
            BackendError::Cancelled,
            BackendError::Unsupported("no fp8 here".to_owned()),
            BackendError::Failed("device 3: illegal address".to_owned()),
        ];
        for error in errors {
            let line = encode(&WireResult::from(Err(error.clone())));
            let wire: WireResult = serde_json::from_str(&line).unwrap();
            assert_eq!(Result::<Sample, BackendError>::from(wire), Err(error));
        }
        // `Unavailable` cannot name its backend across the wire; its text survives.
        let unavailable = BackendError::Unavailable {
            backend: "cuda",
            reason: "no libcuda".to_owned(),
        };
        let wire = WireResult::from(Err(unavailable.clone()));
        assert_eq!(
            Result::<Sample, BackendError>::from(wire),
            Err(BackendError::Failed(unavailable.to_string()))
        );
        // An error with causes crosses as a failure with all of them in its text.
        let io = std::io::Error::from(std::io::ErrorKind::OutOfMemory);
        let spawn = BackendError::io("could not start the launch worker", io).on_rail(1);
        let wire = WireResult::from(Err(spawn.clone()));
        assert_eq!(
            Result::<Sample, BackendError>::from(wire),
            Err(BackendError::Failed(with_causes(&spawn)))
        );
        assert!(
            with_causes(&spawn).starts_with("rail 1: could not start the launch worker: "),
            "{}",
            with_causes(&spawn)
        );
    }

    #[test]
    fn a_request_round_trips_with_its_work() {
        let work = WorkSpec {
            gemm_dtype: Dtype::Fp8,
            gemm_size: Some(4096),
            collective_bytes: Some(1 << 20),
        };
        let request = Request {
            round: 1,
            check: CheckName::AllReduce1,
            work: WireWork::from(&work),
            units: vec![vec![0, 1, 2, 3]],
        };
        let line = encode(&request);
        let back = decode_request(&line).unwrap();
        assert_eq!(back, request);
        assert_eq!(back.work.to_spec().unwrap(), work);
    }

    #[test]
    fn the_value_bound_is_checked_before_decoding() {
        // `{"fatal": {"message": [...]}}`: two objects (8 each), two keys and the
        // array: 19 values besides the zeros.
        let line = |zeros: usize| {
            format!(
                r#"{{"fatal": {{"message": [{}]}}}}"#,
                vec!["0"; zeros].join(",")
            )
        };
        let under = decode_from_worker(&line(MAX_LINE_VALUES - 19)).unwrap_err();
        assert!(matches!(under, RunnerError::Unreadable { .. }), "{under}");
        let over = decode_from_worker(&line(MAX_LINE_VALUES - 18)).unwrap_err();
        assert!(matches!(over, RunnerError::TooManyValues { max: 1048576 }));
        assert_eq!(
            over.to_string(),
            "a line of more than `1048576` json values"
        );
        let over = decode_request(&line(MAX_LINE_VALUES - 18)).unwrap_err();
        assert_eq!(
            over.to_string(),
            "a line of more than `1048576` json values"
        );
    }

    #[test]
    fn unreadable_lines_are_quoted_and_explained() {
        let err = decode_from_worker("NCCL INFO Bootstrap : Using eth0").unwrap_err();
        // The parser's words stay in the parentheses, where results have shown them.
        let RunnerError::Unreadable { quote, error } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(quote, "NCCL INFO Bootstrap : Using eth0");
        assert_eq!(
            err.to_string(),
            format!("an unreadable line `NCCL INFO Bootstrap : Using eth0` ({error})")
        );
        assert!(std::error::Error::source(&err).is_none());
        let long = "x".repeat(1000);
        let err = decode_from_worker(&long).unwrap_err().to_string();
        assert!(
            err.contains(&format!("`{}…`", "x".repeat(QUOTE_CHARS))),
            "{err}"
        );
        // Well-formed JSON of the wrong shape is refused too, not half-read.
        assert!(decode_from_worker(r#"{"unit": {"round": 1}}"#).is_err());
        assert!(decode_from_worker(r#"{"hello": {"protocol": 1}}"#).is_err());
        let err = decode_request(r#"{"round": 1, "check": "gemm_flop", "work": {}, "units": []}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown check `gemm_flop`"), "{err}");
        let bad_dtype = WireWork {
            gemm_dtype: "fp4".to_owned(),
            gemm_size: None,
            collective_bytes: None,
        };
        let err = bad_dtype.to_spec().unwrap_err();
        assert!(
            matches!(&err, RunnerError::UnknownDtype { dtype } if dtype == "fp4"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "unknown GEMM dtype `fp4`");
        assert!(
            serde_json::from_str::<WireF64>(r#""fast""#)
                .unwrap_err()
                .to_string()
                .contains("not `fast`")
        );
    }
}
