//! `pytorch_gloo_2` through PyTorch: each rank of a pair runs `rank.py` with the
//! node's own Python, so the figure is what the user's torch and Gloo get on this path.
//!
//! The pair is first connected by the data plane ([`TcpGroup`]). Rank 0's script opens
//! a `TCPStore` on a port the kernel picks and prints it; the agent passes the port to
//! the other rank over the group, so no port is guessed or raced for. While the script
//! runs, the agent watches the group's connection: a peer whose side failed closes it,
//! and this side stops at once instead of waiting for Gloo's timeout. The script is
//! killed when the deadline passes or the work is cancelled: a hung Gloo run is a
//! finding, never a hang of gpuvet.

mod python;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use gpuvet_model::stats::median;
use serde::Deserialize;
use serde_json::json;

use self::python::PythonRun;
use crate::tcp::{CollectiveSpec, TcpGroup, windowed_rates};
use crate::{BackendError, CancelToken, Sample, all_reduce_busbw};

/// `params.engine` when this engine ran.
pub const ENGINE: &str = "torch-gloo";
/// The least S when none is configured: Gloo's per-call cost dominates smaller
/// buffers (loopback, 2 cores: 0.36 GB/s at 1 MiB, 0.89 GB/s at 16 MiB).
const MIN_DEFAULT_BYTES: u64 = 16 << 20;
/// The small all-reduce whose median time is the latency.
const LATENCY_BYTES: u64 = 4 << 10;
/// How long a rank whose peer has left waits for its own script's result: both finish
/// the last all-reduce together, so the first to leave is normally milliseconds ahead.
const PEER_GONE_GRACE: Duration = Duration::from_secs(5);
/// The environment variable that picks Gloo's interface; a user's own setting wins.
const GLOO_IFNAME: &str = "GLOO_SOCKET_IFNAME";

/// How one rank runs the engine.
#[derive(Debug, Clone)]
pub struct GlooRank<'a> {
    /// The Python that has torch.
    pub python: &'a Path,
    /// Rank 0's data-plane IP: its store listens there.
    pub store_ip: IpAddr,
    /// The interface of this rank's data-plane address, for Gloo's own connections.
    pub interface: Option<String>,
}

/// The torch version `python` imports, or why it cannot run the engine.
pub fn probe(
    python: &Path,
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<String, BackendError> {
    let mut run = PythonRun::spawn(python, &json!({"op": "probe"}), &[])?;
    let message = run.next_message(deadline, cancel, "torch version", &mut || None)?;
    message
        .get("torch")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            BackendError::Failed(format!(
                "`{}` answered the probe with `{message}`",
                python.display()
            ))
        })
}

/// A Gloo all-reduce across `group`, sized and timed like the built-in engine's.
pub fn all_reduce(
    group: &mut TcpGroup,
    rank: &GlooRank<'_>,
    spec: &CollectiveSpec,
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<Sample, BackendError> {
    let (world, this_rank) = (group.world(), group.rank());
    let bytes = spec
        .bytes
        .unwrap_or_else(|| CollectiveSpec::default_bytes(world).max(MIN_DEFAULT_BYTES))
        .max(4)
        / 4
        * 4;
    let timeout_s = deadline
        .saturating_duration_since(Instant::now())
        .as_secs_f64()
        .max(1.0);
    let args = |port: u64| {
        json!({
            "op": "all_reduce",
            "rank": this_rank,
            "world": world,
            "store_host": rank.store_ip.to_string(),
            "store_port": port,
            "timeout_s": timeout_s,
            "bytes": bytes,
            "latency_bytes": LATENCY_BYTES,
            "warmup_iterations": spec.warmup_iterations,
            "min_iterations": spec.min_iterations,
            "max_iterations": spec.max_iterations,
            "min_seconds": spec.min_seconds,
        })
    };
    let interface = match (&rank.interface, std::env::var_os(GLOO_IFNAME)) {
        (Some(name), None) => Some(name.clone()),
        _ => None,
    };
    let env: Vec<(&str, &str)> = interface
        .as_deref()
        .map(|name| (GLOO_IFNAME, name))
        .into_iter()
        .collect();
    let mut run = if this_rank == 0 {
        let mut run = PythonRun::spawn(rank.python, &args(0), &env)?;
        let message = run.next_message(deadline, cancel, "store port", &mut || None)?;
        let port = message
            .get("port")
            .and_then(|p| p.as_u64())
            .ok_or_else(|| {
                BackendError::Failed(format!("expected the store's port, got `{message}`"))
            })?;
        group.share_from_first(port, deadline, cancel)?;
        run
    } else {
        let port = group.share_from_first(0, deadline, cancel)?;
        PythonRun::spawn(rank.python, &args(port), &env)?
    };
    let mut gone: Option<(String, Instant)> = None;
    let mut peer_failed = || {
        if gone.is_none() {
            gone = group.peer_gone().map(|peer| (peer, Instant::now()));
        }
        let (peer, since) = gone.as_ref()?;
        (since.elapsed() >= PEER_GONE_GRACE).then(|| {
            format!(
                "{peer} closed the data-plane connection while the PyTorch Gloo all-reduce \
                 ran, and this rank's script gave no result within {} s: its side failed",
                PEER_GONE_GRACE.as_secs()
            )
        })
    };
    let message = run.next_message(deadline, cancel, "result", &mut peer_failed)?;
    let result: RankResult = message
        .get("result")
        .cloned()
        .ok_or_else(|| format!("expected a result, got `{message}`"))
        .and_then(|value| serde_json::from_value(value).map_err(|e| e.to_string()))
        .map_err(|why| BackendError::Failed(format!("cannot read the engine's result: {why}")))?;
    Ok(result.to_sample(this_rank, world, interface.as_deref()))
}

/// What `rank.py` measured on one rank.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct RankResult {
    torch: String,
    bytes: u64,
    seconds: Vec<f64>,
    latency_bytes: u64,
    latency_seconds: Vec<f64>,
    wrong_result: Option<String>,
}

impl RankResult {
    /// The result as the checks report it: busbw as nccl-tests defines it, one sample
    /// per window of back-to-back iterations, like the built-in engine.
    fn to_sample(&self, rank: usize, world: usize, interface: Option<&str>) -> Sample {
        let (algbw, samples) = windowed_rates(&self.seconds, self.bytes, |algbw| {
            all_reduce_busbw(algbw, world)
        });
        let extra = BTreeMap::from([
            ("algbw".to_owned(), median(&algbw).unwrap_or(0.0)),
            (
                "time_us".to_owned(),
                median(&self.seconds).unwrap_or(0.0) * 1e6,
            ),
            (
                "latency_us".to_owned(),
                median(&self.latency_seconds).unwrap_or(0.0) * 1e6,
            ),
        ]);
        let mut params = BTreeMap::from([
            ("engine".to_owned(), ENGINE.to_owned()),
            ("torch".to_owned(), self.torch.clone()),
            ("bytes".to_owned(), self.bytes.to_string()),
            ("ranks".to_owned(), world.to_string()),
            ("rank".to_owned(), rank.to_string()),
            ("iterations".to_owned(), self.seconds.len().to_string()),
            ("latency_bytes".to_owned(), self.latency_bytes.to_string()),
            ("dtype".to_owned(), "fp32".to_owned()),
        ]);
        if let Some(name) = interface {
            params.insert(GLOO_IFNAME.to_owned(), name.to_owned());
        }
        Sample {
            value: median(&samples).unwrap_or(0.0),
            samples,
            wrong_result: self.wrong_result.clone(),
            extra,
            params,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> RankResult {
        RankResult {
            torch: "2.15.0".to_owned(),
            bytes: 1 << 20,
            seconds: vec![0.01; 10],
            latency_bytes: LATENCY_BYTES,
            latency_seconds: vec![0.0002, 0.0001, 0.0003],
            wrong_result: None,
        }
    }

    #[test]
    fn a_result_becomes_busbw_samples_with_the_engine_named() {
        let sample = result().to_sample(1, 2, Some("eth1"));
        // 1 MiB in 10 ms is 0.105 GB/s; for two ranks busbw equals algbw.
        let expected = (1u64 << 20) as f64 / 0.01 / 1e9;
        assert!((sample.value - expected).abs() < 1e-9, "{}", sample.value);
        // 20 ms windows of two 10 ms iterations.
        assert_eq!(sample.samples.len(), 5);
        assert!((sample.extra["latency_us"] - 200.0).abs() < 1e-6);
        assert!((sample.extra["time_us"] - 10_000.0).abs() < 1e-6);
        assert_eq!(sample.params["engine"], ENGINE);
        assert_eq!(sample.params["torch"], "2.15.0");
        assert_eq!(sample.params["rank"], "1");
        assert_eq!(sample.params[GLOO_IFNAME], "eth1");
        assert_eq!(sample.wrong_result, None);
    }

    #[test]
    fn busbw_follows_nccl_tests_for_larger_groups() {
        let sample = result().to_sample(0, 4, None);
        let algbw = (1u64 << 20) as f64 / 0.01 / 1e9;
        assert!((sample.value - algbw * 1.5).abs() < 1e-9);
        assert!(!sample.params.contains_key(GLOO_IFNAME));
    }

    #[test]
    fn a_wrong_sum_is_carried_through() {
        let mut wrong = result();
        wrong.wrong_result = Some("3 of 262144 elements are wrong".to_owned());
        let sample = wrong.to_sample(0, 2, None);
        assert_eq!(
            sample.wrong_result.as_deref(),
            Some("3 of 262144 elements are wrong")
        );
    }

    #[test]
    fn the_script_output_parses() {
        let line = r#"{"torch": "2.15.0+cpu", "bytes": 1048576, "seconds": [0.01, 0.02],
            "latency_bytes": 4096, "latency_seconds": [0.001], "wrong_result": null}"#;
        let parsed: RankResult = serde_json::from_str(line).unwrap();
        assert_eq!(parsed.seconds, vec![0.01, 0.02]);
        assert_eq!(parsed.wrong_result, None);
    }
}
