//! [`Sender`]: drains the outbox on a thread of its own until it is stopped.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use gpuvet_model::time::unix_now_ms;
use gpuvet_store::{Store, StoreError};

use crate::{Pusher, drain};

/// The longest the thread sleeps between looks at the outbox: entries queued by other
/// handles (another process on the node) are seen within this.
const POLL: Duration = Duration::from_secs(2);

/// A thread that sends due entries, then sleeps until the next one is due.
#[derive(Debug)]
pub struct Sender {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Sender {
    /// Starts the thread with its own store handle from `open`. `on_error` hears each
    /// failure (a failed send, or a store that could not be read) once per change of
    /// message, so that a server that is down is reported once, not every try.
    pub fn start(
        open: impl Fn() -> Result<Store, StoreError> + Send + 'static,
        pusher: Pusher,
        on_error: impl Fn(&str) + Send + 'static,
    ) -> Sender {
        let (stop, stopped) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("gpuvet-push".to_owned())
            .spawn(move || {
                let mut last_reported: Option<String> = None;
                let mut report = |message: String| {
                    if last_reported.as_ref() != Some(&message) {
                        on_error(&message);
                        last_reported = Some(message);
                    }
                };
                let mut store: Option<Store> = None;
                loop {
                    if store.is_none() {
                        match open() {
                            Ok(handle) => store = Some(handle),
                            Err(error) => {
                                report(format!("cannot open the store to send its outbox: {error}"))
                            }
                        }
                    }
                    let wait = match store.as_mut() {
                        Some(handle) => send_due(handle, &pusher, &mut report),
                        None => POLL,
                    };
                    match stopped.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {}
                        // Stopped: one last round for what became due meanwhile.
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                            if let Some(handle) = store.as_mut() {
                                send_due(handle, &pusher, &mut report);
                            }
                            return;
                        }
                    }
                }
            })
            .expect("the push thread starts");
        Sender { stop, thread }
    }

    /// Stops the thread after one last round, and waits for it (at most one send's
    /// timeout per entry that is due, and it stops at the first failure).
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// One round of sending; returns how long to sleep before the next.
fn send_due(store: &mut Store, pusher: &Pusher, report: &mut impl FnMut(String)) -> Duration {
    match drain(store, pusher, unix_now_ms, false) {
        Ok(drained) => {
            if let Some(error) = drained.last_error {
                report(format!(
                    "cannot send to `{}` ({} waiting in the outbox, retried with backoff): {error}",
                    pusher.base_url(),
                    drained.waiting
                ));
            }
        }
        Err(error) => report(format!("cannot send the outbox: {error}")),
    }
    let next = store.outbox_next_try_ms().ok().flatten();
    next.map_or(POLL, |at| {
        Duration::from_millis(at.saturating_sub(unix_now_ms()))
            .clamp(Duration::from_millis(50), POLL)
    })
}
