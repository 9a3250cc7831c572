//! [`Sender`]: drains the outbox on a thread of its own until it is stopped, and sends
//! nothing while a server's `Retry-After` lasts.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

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
                // No send before this: the server's `Retry-After`.
                let mut held_until: Option<Instant> = None;
                loop {
                    if store.is_none() {
                        match open() {
                            Ok(handle) => store = Some(handle),
                            Err(error) => {
                                report(format!("cannot open the store to send its outbox: {error}"))
                            }
                        }
                    }
                    let held =
                        held_until.map(|until| until.saturating_duration_since(Instant::now()));
                    let wait = match (store.as_mut(), held) {
                        (_, Some(left)) if !left.is_zero() => left.min(POLL),
                        (Some(handle), _) => {
                            let round = send_due(handle, &pusher, &mut report);
                            held_until = round.retry_after.map(|wait| Instant::now() + wait);
                            round
                                .wait
                                .max(round.retry_after.unwrap_or_default())
                                .min(POLL)
                        }
                        (None, _) => POLL,
                    };
                    match stopped.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {}
                        // Stopped: one last round for what became due meanwhile, unless
                        // the server asked for a pause that still lasts.
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                            let holding = held_until.is_some_and(|until| until > Instant::now());
                            if let (Some(handle), false) = (store.as_mut(), holding) {
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

/// What one round of sending says about the next.
struct Round {
    /// Until the next entry is due (within `50 ms..=POLL`).
    wait: Duration,
    /// The server's `Retry-After`, when the round stopped on one.
    retry_after: Option<Duration>,
}

/// One round of sending.
fn send_due(store: &mut Store, pusher: &Pusher, report: &mut impl FnMut(String)) -> Round {
    let mut retry_after = None;
    match drain(store, pusher, unix_now_ms, false) {
        Ok(drained) => {
            if let Some(error) = drained.last_error {
                let servers: Vec<String> = pusher
                    .base_urls()
                    .iter()
                    .map(|url| format!("`{url}`"))
                    .collect();
                report(format!(
                    "cannot send to {} ({} waiting in the outbox, retried with backoff): {error}",
                    servers.join(" or "),
                    drained.waiting
                ));
            }
            retry_after = drained.retry_after;
        }
        Err(error) => report(format!("cannot send the outbox: {error}")),
    }
    let next = store.outbox_next_try_ms().ok().flatten();
    let wait = next.map_or(POLL, |at| {
        Duration::from_millis(at.saturating_sub(unix_now_ms()))
            .clamp(Duration::from_millis(50), POLL)
    });
    Round { wait, retry_after }
}
