//! A scripted health source for tests, demos and the overhead benchmark: each poll
//! plays the next step (readings, an error, a hang, a panic).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;

use super::{HealthError, HealthReading, HealthSource};

/// One scripted poll.
#[derive(Debug)]
pub enum FakeStep {
    Readings(Vec<HealthReading>),
    /// The poll fails as a whole.
    Error(String),
    /// The poll blocks until the sender sends or is dropped (a hung NVML call), then
    /// returns the readings.
    HangUntil(Receiver<()>, Vec<HealthReading>),
    /// The poll panics (the watchdog must survive it).
    Panic,
}

/// Plays [`FakeStep`]s in order; when the script is done, it repeats `idle` (no
/// readings by default).
#[derive(Debug)]
pub struct FakeSource {
    name: String,
    steps: VecDeque<FakeStep>,
    idle: Vec<HealthReading>,
    restamp: bool,
    calls: Arc<AtomicU64>,
}

impl FakeSource {
    pub fn new(name: &str) -> Self {
        FakeSource {
            name: name.to_owned(),
            steps: VecDeque::new(),
            idle: Vec::new(),
            restamp: false,
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Appends a step.
    pub fn then(mut self, step: FakeStep) -> Self {
        self.steps.push_back(step);
        self
    }

    /// What every poll after the script returns (e.g. a healthy sample at 1 Hz).
    pub fn idle(mut self, readings: Vec<HealthReading>) -> Self {
        self.idle = readings;
        self
    }

    /// Stamp readings with the poll's `now_ms` instead of their scripted times.
    pub fn stamp_with_poll_time(mut self) -> Self {
        self.restamp = true;
        self
    }

    /// Counts the polls that started (a watchdog must not start a second one while the
    /// first hangs).
    pub fn call_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.calls)
    }
}

impl HealthSource for FakeSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn poll(&mut self, now_ms: u64) -> Result<Vec<HealthReading>, HealthError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut readings = match self.steps.pop_front() {
            None => self.idle.clone(),
            Some(FakeStep::Readings(r)) => r,
            Some(FakeStep::Error(message)) => {
                return Err(HealthError::Probe {
                    source_name: self.name.clone(),
                    message,
                });
            }
            Some(FakeStep::HangUntil(release, r)) => {
                // Either a message or a dropped sender ends the hang.
                let _ = release.recv();
                r
            }
            Some(FakeStep::Panic) => panic!("scripted panic in fake source {}", self.name),
        };
        if self.restamp {
            for r in &mut readings {
                restamp(r, now_ms);
            }
        }
        Ok(readings)
    }
}

fn restamp(r: &mut HealthReading, now_ms: u64) {
    match r {
        HealthReading::Xid(o) => o.time_ms = now_ms,
        HealthReading::Gpu(s) => s.time_ms = now_ms,
        HealthReading::GpuError { time_ms, .. } | HealthReading::ProbeHung { time_ms, .. } => {
            *time_ms = now_ms
        }
        HealthReading::Finding(f) => {
            f.first_ms = now_ms;
            f.last_ms = now_ms;
        }
        HealthReading::Inventory { .. } => {}
    }
}
