//! Detached threads, reused between jobs: for the runner's device work and the
//! coordinator's handshakes.
//!
//! Device work runs on a detached thread so that a backend that hangs for good leaves
//! only that thread behind; a handshake, so that a peer that goes quiet holds up only
//! its own. Starting a thread per job costs little on a real node (8 devices, 13
//! checks, one handshake per member), but a group in one process runs thousands of
//! nodes' checks and handshakes, and there thread starts and exits (stack and
//! signal-stack maps, guard pages, the TLB shootdowns they cause) were a third of all
//! CPU. So a finished job's thread waits a while for the next one instead of exiting.
//! A job that never returns keeps its thread; the pool then starts another.

use std::collections::VecDeque;
use std::io;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How long a thread with nothing to do waits for a job before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Jobs handed to threads that are waiting.
struct Pool {
    state: Mutex<State>,
    job_ready: Condvar,
}

/// Every waiting thread either takes a queued job or is `idle` (unclaimed):
/// waiting threads = `idle` + `queue.len()`, so a queued job always has a taker.
struct State {
    queue: VecDeque<(String, Job)>,
    idle: usize,
}

static POOL: Pool = Pool {
    state: Mutex::new(State {
        queue: VecDeque::new(),
        idle: 0,
    }),
    job_ready: Condvar::new(),
};

/// Runs `job` on a detached thread named `name` (as the OS shows it): a waiting
/// thread of the pool when there is one, else a new one. Fails only when no thread
/// can be started.
pub fn spawn_detached(name: String, job: impl FnOnce() + Send + 'static) -> io::Result<()> {
    let job: Job = Box::new(job);
    {
        let mut state = POOL.lock();
        if state.idle > 0 {
            state.idle -= 1;
            state.queue.push_back((name, job));
            drop(state);
            POOL.job_ready.notify_one();
            return Ok(());
        }
    }
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            job();
            let mut current = None;
            while let Some((name, job)) = POOL.next_job() {
                // Jobs of one check mostly come back to a thread under the same name.
                if current.as_ref() != Some(&name) {
                    set_os_thread_name(&name);
                    current = Some(name);
                }
                job();
            }
        })
        .map(drop)
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits up to [`IDLE_EXIT`] for a job; `None`: the thread should exit.
    fn next_job(&self) -> Option<(String, Job)> {
        let mut state = self.lock();
        state.idle += 1;
        loop {
            if let Some(job) = state.queue.pop_front() {
                return Some(job);
            }
            let (next, timeout) = self
                .job_ready
                .wait_timeout(state, IDLE_EXIT)
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
            if timeout.timed_out() && state.queue.is_empty() {
                state.idle -= 1;
                return None;
            }
        }
    }
}

/// Renames the calling thread as `ps`, `top -H` and `perf` show it (15 bytes at most).
fn set_os_thread_name(name: &str) {
    // On the stack: a pool thread is renamed for most jobs it takes.
    let mut bytes = [0u8; 16];
    for (slot, byte) in bytes[..15].iter_mut().zip(name.bytes().filter(|&b| b != 0)) {
        *slot = byte;
    }
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    fn os_thread_name() -> String {
        std::fs::read_to_string("/proc/thread-self/comm")
            .unwrap()
            .trim()
            .to_owned()
    }

    #[test]
    fn jobs_run_and_a_finished_thread_takes_the_next_one_under_its_name() {
        let (tx, rx) = mpsc::channel();
        for round in 0..3 {
            let tx = tx.clone();
            spawn_detached(format!("pool-test-{round}"), move || {
                let _ = tx.send((os_thread_name(), std::thread::current().id()));
            })
            .unwrap();
            let (name, _) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(name, format!("pool-test-{round}"));
        }
    }

    #[test]
    fn a_job_that_never_returns_does_not_hold_up_the_next() {
        let (parked_tx, parked) = mpsc::channel::<()>();
        spawn_detached("pool-test-park".to_owned(), move || {
            // Parked until the test ends: its sender is never used.
            let _ = parked.recv();
        })
        .unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..4 {
            let tx = tx.clone();
            spawn_detached(format!("pool-test-n{i}"), move || {
                let _ = tx.send(i);
            })
            .unwrap();
        }
        let mut got: Vec<i32> = (0..4)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3]);
        drop(parked_tx);
    }

    #[test]
    fn long_names_are_cut_to_what_the_kernel_keeps() {
        let name = std::thread::spawn(|| {
            set_os_thread_name("a-very-long-thread-name");
            os_thread_name()
        })
        .join()
        .unwrap();
        assert_eq!(name, "a-very-long-thr");
    }
}
