//! How much of a measurement other work took on a shared host: the time the measuring
//! threads spent runnable but waiting for a core, from the kernel's per-thread
//! schedstat (`/proc/thread-self/schedstat`: time on a core, time waiting on the run
//! queue, and time slices, in that order).
//!
//! A cpu device is a core. When a neighbour's busy loop holds that core, the device
//! measures slow without anything being wrong with it; the share reported here lets
//! the runner tell a neighbour's load from a slow device (see
//! `gpuvet_core::analysis::CONTENTION_EXTRA`).

use std::time::Instant;

/// Nanoseconds the calling thread has spent runnable, waiting for a core; `None` where
/// the kernel does not keep schedstats.
pub(super) fn runqueue_wait_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    parse_wait_ns(&text)
}

fn parse_wait_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().nth(1)?.parse().ok()
}

/// The run-queue wait of the calling thread from when it was made.
#[derive(Debug, Clone, Copy)]
pub(super) struct WaitClock {
    started_ns: Option<u64>,
}

impl WaitClock {
    pub(super) fn start() -> Self {
        WaitClock {
            started_ns: runqueue_wait_ns(),
        }
    }

    /// Nanoseconds waited since `start`, on the same thread.
    pub(super) fn waited_ns(self) -> Option<u64> {
        Some(runqueue_wait_ns()?.saturating_sub(self.started_ns?))
    }
}

/// The waits of the measuring threads as a percentage of the wall time since `since`;
/// `None` when any wait is unknown.
pub(super) fn share_pct(waits_ns: &[Option<u64>], since: Instant) -> Option<f64> {
    let wall_ns = since.elapsed().as_nanos() as f64;
    if wall_ns <= 0.0 {
        return None;
    }
    let waited: u64 = waits_ns.iter().copied().sum::<Option<u64>>()?;
    Some((waited as f64 / wall_ns * 100.0).min(100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_the_second_field() {
        assert_eq!(parse_wait_ns("123 456 7\n"), Some(456));
        assert_eq!(parse_wait_ns("123"), None);
        assert_eq!(parse_wait_ns(""), None);
        assert_eq!(parse_wait_ns("1 x 2"), None);
    }

    #[test]
    fn this_machine_keeps_schedstats_and_a_clock_only_grows() {
        // Every Linux kernel since 2.6 with CONFIG_SCHED_INFO has the file; CI's does.
        let clock = WaitClock::start();
        assert!(clock.started_ns.is_some(), "no /proc/thread-self/schedstat");
        assert!(clock.waited_ns().is_some());
    }

    #[test]
    fn the_share_adds_the_threads_and_is_capped() {
        let since = Instant::now() - std::time::Duration::from_millis(100);
        let share = share_pct(&[Some(10_000_000), Some(15_000_000)], since).unwrap();
        // 25 ms of 100 ms (a little more wall time has passed since).
        assert!((20.0..=25.0).contains(&share), "{share}");
        assert_eq!(share_pct(&[Some(u64::MAX / 2)], since), Some(100.0));
        assert_eq!(share_pct(&[Some(1), None], since), None);
    }
}
