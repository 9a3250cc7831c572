//! Runs a source's probes on a worker thread under a timeout, because a hung NVML call
//! is itself a fault (a GPU that fell off the bus, a wedged driver) and must not hang
//! the watcher with it.
//!
//! One probe at a time: while a probe is stuck, polls report it as
//! [`HealthReading::ProbeHung`] and start nothing new (a second stuck thread would
//! help no one). When the stuck probe finally returns, its readings are delivered late
//! and normal polling resumes. A stuck thread cannot be killed; it is left behind if
//! the watchdog is dropped.

use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use super::{HealthError, HealthReading, HealthSource};

type ProbeResult = Result<Vec<HealthReading>, HealthError>;

/// What the watchdog has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchdogStats {
    /// Probes started.
    pub probes: u64,
    /// Probes that ran past the timeout.
    pub hangs: u64,
    /// Polls answered with "still hung" instead of a probe.
    pub skipped_polls: u64,
    /// Hung probes that returned after all.
    pub late_results: u64,
}

/// A [`HealthSource`] that runs another source's polls under a timeout.
#[derive(Debug)]
pub struct Watchdog {
    name: String,
    timeout: Duration,
    hung_wait: Duration,
    requests: Sender<u64>,
    results: Receiver<ProbeResult>,
    /// When the probe in flight past its timeout started, and the poll time it was for.
    stuck_since: Option<Instant>,
    stats: WatchdogStats,
}

impl Watchdog {
    /// Moves `source` to a worker thread. A probe that takes longer than `timeout` is
    /// reported as hung.
    pub fn new<S: HealthSource + 'static>(
        source: S,
        timeout: Duration,
    ) -> Result<Self, HealthError> {
        let name = source.name().to_owned();
        let (req_tx, req_rx) = mpsc::channel::<u64>();
        let (res_tx, res_rx) = mpsc::channel::<ProbeResult>();
        let worker_name = name.clone();
        thread::Builder::new()
            .name(format!("gpuvet-probe:{name}"))
            .spawn(move || {
                let mut source = source;
                // Ends when the watchdog is dropped (the request channel closes).
                for now_ms in req_rx {
                    let result = panic::catch_unwind(AssertUnwindSafe(|| source.poll(now_ms)))
                        .unwrap_or_else(|_| Err(HealthError::Panicked(worker_name.clone())));
                    if res_tx.send(result).is_err() {
                        return;
                    }
                }
            })
            .map_err(HealthError::Spawn)?;
        Ok(Watchdog {
            name,
            timeout,
            hung_wait: timeout.min(Duration::from_secs(1)),
            requests: req_tx,
            results: res_rx,
            stuck_since: None,
            stats: WatchdogStats::default(),
        })
    }

    /// How long a poll waits for a probe that is already known to hang before it
    /// answers "still hung" (default: the timeout, at most 1 s, so the watcher's other
    /// sources keep their pace).
    pub fn with_hung_wait(mut self, wait: Duration) -> Self {
        self.hung_wait = wait;
        self
    }

    pub fn stats(&self) -> WatchdogStats {
        self.stats
    }

    /// Whether a probe is stuck right now.
    pub fn is_hung(&self) -> bool {
        self.stuck_since.is_some()
    }

    fn hung_reading(&self, now_ms: u64, since: Instant) -> HealthReading {
        HealthReading::ProbeHung {
            source: self.name.clone(),
            time_ms: now_ms,
            hung_ms: since.elapsed().as_millis() as u64,
            skipped_polls: self.stats.skipped_polls,
        }
    }
}

impl HealthSource for Watchdog {
    fn name(&self) -> &str {
        &self.name
    }

    fn poll(&mut self, now_ms: u64) -> ProbeResult {
        if let Some(since) = self.stuck_since {
            return match self.results.recv_timeout(self.hung_wait) {
                Ok(result) => {
                    self.stuck_since = None;
                    self.stats.late_results += 1;
                    result
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.stats.skipped_polls += 1;
                    Ok(vec![self.hung_reading(now_ms, since)])
                }
                Err(RecvTimeoutError::Disconnected) => {
                    Err(HealthError::SourceStopped(self.name.clone()))
                }
            };
        }
        let started = Instant::now();
        if self.requests.send(now_ms).is_err() {
            return Err(HealthError::SourceStopped(self.name.clone()));
        }
        self.stats.probes += 1;
        match self.results.recv_timeout(self.timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                self.stuck_since = Some(started);
                self.stats.hangs += 1;
                Ok(vec![self.hung_reading(now_ms, started)])
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(HealthError::SourceStopped(self.name.clone()))
            }
        }
    }
}
