//! How much of a measurement other work took on a shared host, from the kernel's
//! per-thread schedstat (`/proc/thread-self/schedstat`: time on a core, time waiting on
//! the run queue, and time slices, in that order) and per-core times (`/proc/stat`).
//!
//! - A lone measuring thread (GEMM): the time it spent runnable but waiting for a core.
//! - Threads that take turns on one pinned core (launch latency): each waits for the
//!   other at every hand-off, so their run-queue wait is their own. What other work
//!   took is the core's time that was neither theirs nor idle.
//!
//! A cpu device is a core. When a neighbour's busy loop holds that core, the device
//! measures slow without anything being wrong with it; the share reported here lets
//! the runner tell a neighbour's load from a slow device (see
//! `gpuvet_model::analysis::CONTENTION_EXTRA`).

use std::time::Instant;

/// Nanoseconds the calling thread has spent runnable, waiting for a core; `None` where
/// the kernel does not keep schedstats.
pub(super) fn runqueue_wait_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    parse_wait_ns(&text)
}

/// Nanoseconds the calling thread has run on a core.
pub(super) fn on_core_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    parse_field(&text, 0)
}

fn parse_wait_ns(schedstat: &str) -> Option<u64> {
    parse_field(schedstat, 1)
}

fn parse_field(schedstat: &str, index: usize) -> Option<u64> {
    schedstat.split_whitespace().nth(index)?.parse().ok()
}

/// Nanoseconds core `core` has been idle (idle and iowait) since boot; at the
/// kernel's clock tick (10 ms here), which a measurement of a second resolves to 1 %.
pub(super) fn core_idle_ns(core: usize) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks_per_second = u64::try_from(ticks_per_second).ok().filter(|&t| t > 0)?;
    Some(parse_core_idle_ticks(&stat, core)? * (1_000_000_000 / ticks_per_second))
}

/// `cpuN user nice system idle iowait …`: idle + iowait of core `core`, in ticks.
fn parse_core_idle_ticks(stat: &str, core: usize) -> Option<u64> {
    let label = format!("cpu{core}");
    let line = stat
        .lines()
        .find(|line| line.split_whitespace().next() == Some(label.as_str()))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    Some(fields.get(3)? + fields.get(4).copied().unwrap_or(0))
}

/// What other work took of core `core` between two readings: the wall time less what
/// the measuring threads ran and what the core idled, as a percentage of wall time.
pub(super) fn others_share_pct(wall_ns: u64, ours_ns: u64, idle_ns: u64) -> Option<f64> {
    if wall_ns == 0 {
        return None;
    }
    let others = wall_ns.saturating_sub(ours_ns).saturating_sub(idle_ns);
    Some((others as f64 / wall_ns as f64 * 100.0).min(100.0))
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
    fn a_core_s_idle_time_is_idle_plus_iowait() {
        let stat = "cpu  10 0 5 1000 7 0 0 0 0 0\n\
                    cpu0 4 0 2 400 3 0 0 0 0 0\n\
                    cpu1 6 0 3 600 4 0 0 0 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(parse_core_idle_ticks(stat, 0), Some(403));
        assert_eq!(parse_core_idle_ticks(stat, 1), Some(604));
        assert_eq!(parse_core_idle_ticks(stat, 2), None);
        assert_eq!(parse_core_idle_ticks("cpu0 1 2 x 4", 0), None);
        // This machine has a core 0 to read.
        assert!(core_idle_ns(0).is_some());
        assert!(on_core_ns().is_some());
    }

    #[test]
    fn others_take_what_is_neither_ours_nor_idle() {
        assert_eq!(others_share_pct(1000, 300, 500), Some(20.0));
        // Tick rounding can make ours + idle exceed the wall time: nobody else ran.
        assert_eq!(others_share_pct(1000, 600, 500), Some(0.0));
        assert_eq!(others_share_pct(0, 0, 0), None);
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
