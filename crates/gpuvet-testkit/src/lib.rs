//! Helpers that several crates' tests share. Nothing here ships in the binary. The
//! workspace-wide test of the crate layering (`tests/layering.rs`) lives here too.

pub mod postgres;
pub mod tls;

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The lowest port handed out, well above the well-known and registered services
/// a test machine is likely to run.
const LOWEST: u16 = 20_000;

/// Where the kernel's ephemeral range starts when `/proc` does not say.
const DEFAULT_EPHEMERAL_LOW: u16 = 32_768;

/// A loopback port that was free a moment ago, for a listener another process or
/// thread binds later.
///
/// It comes from below the kernel's ephemeral range, never from `bind(0)`: a port
/// from there can be taken by any outgoing connection on the machine between the
/// moment the test learns it and the moment the listener binds it, which made a
/// group test's coordinator fail to start now and then under CI's load.
pub fn free_port() -> u16 {
    let highest = highest_port(ephemeral_low());
    let span = u32::from(highest - LOWEST) + 1;
    let start = seed() % span;
    for step in 0..span {
        let port = LOWEST + u16::try_from((start + step) % span).expect("below u16::MAX");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {LOWEST} and {highest}");
}

/// The top of the search: just below the ephemeral range, unless that range starts so
/// low that nothing would be left, where the usual range's start is used instead.
fn highest_port(ephemeral_low: u16) -> u16 {
    if ephemeral_low > LOWEST + 1_000 {
        ephemeral_low - 1
    } else {
        DEFAULT_EPHEMERAL_LOW - 1
    }
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`).
fn ephemeral_low() -> u16 {
    parse_port_range_low(
        &std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default(),
    )
    .unwrap_or(DEFAULT_EPHEMERAL_LOW)
}

fn parse_port_range_low(text: &str) -> Option<u16> {
    text.split_whitespace().next()?.parse().ok()
}

/// Differs between processes and between calls in one process, so tests running
/// side by side start their search at different ports.
fn seed() -> u32 {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(nanos)
        .wrapping_add(call.wrapping_mul(7_919))
}

/// Makes this test binary a child process instead of a test run when the environment
/// variable `$var` is set: it calls `$entry` with the variable's value and exits, 0
/// when `$entry` returns and 101 (a failed test's code) when it panics. A test that
/// needs real processes (to stop or kill one, or to race them) starts
/// `std::env::current_exe()` with `$var` set.
///
/// The check runs before `main`, from the binary's `.init_array`, so the entry point is
/// not a `#[test]`: libtest and nextest never list, run or count it.
#[macro_export]
macro_rules! child_process_entry {
    ($var:expr, $entry:path) => {
        const _: () = {
            extern "C" fn run_child_process_entry_if_asked() {
                $crate::run_child_if_asked($var, $entry);
            }
            // The loader calls every function in `.init_array` before `main`.
            #[used]
            #[unsafe(link_section = ".init_array")]
            static CHILD_PROCESS_ENTRY: extern "C" fn() = run_child_process_entry_if_asked;
        };
    };
}

/// What [`child_process_entry!`] runs before `main`: nothing unless `var` is set.
#[doc(hidden)]
pub fn run_child_if_asked(var: &str, entry: fn(String)) {
    let Ok(value) = std::env::var(var) else {
        return;
    };
    // Rust's runtime ignores SIGPIPE before it calls `main`, which never runs here: a
    // write to a parent that has gone is then an error, as in a test, not a kill.
    // SAFETY: signal(2) with a valid signal number and SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let code = match std::panic::catch_unwind(|| entry(value)) {
        Ok(()) => 0,
        Err(_) => 101,
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_low_is_read_from_procs_format() {
        assert_eq!(parse_port_range_low("32768\t60999\n"), Some(32_768));
        assert_eq!(parse_port_range_low("1024 65000"), Some(1_024));
        assert_eq!(parse_port_range_low(""), None);
        assert_eq!(parse_port_range_low("x 1"), None);
    }

    #[test]
    fn the_search_stays_below_the_ephemeral_range() {
        assert_eq!(highest_port(32_768), 32_767);
        assert_eq!(highest_port(50_000), 49_999);
        assert_eq!(highest_port(1_024), 32_767);
    }

    #[test]
    fn a_port_comes_from_below_the_ephemeral_range_and_can_be_bound() {
        let port = free_port();
        assert!(
            (LOWEST..=highest_port(ephemeral_low())).contains(&port),
            "{port}"
        );
        TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    }

    #[test]
    fn calls_side_by_side_get_different_ports() {
        let ports: std::collections::HashSet<u16> = (0..8).map(|_| free_port()).collect();
        assert!(ports.len() > 1, "{ports:?}");
    }
}
