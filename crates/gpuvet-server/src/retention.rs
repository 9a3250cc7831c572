//! Retention while serving (`--keep-days N`): every so often, the attempts (with their
//! reports and check results) begun more than N days ago and the events from before
//! then are deleted, a bounded batch per write. Each batch is a short transaction of
//! its own beside the pushes' writer task (`writer.rs`), so pruning a long history
//! never holds pushes back for more than one batch at a time.

use std::time::Duration;

use gpuvet_model::time::unix_now_ms;
use gpuvet_store::Pruned;

use crate::AppState;
use crate::server_event::{EventSink, ServerEvent};

/// How long the server keeps what it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub keep_days: u32,
    /// Time between rounds.
    pub every: Duration,
    /// Rows of each table one write deletes at most.
    pub batch: usize,
}

impl Retention {
    /// A round an hour, 500 rows a write: a few milliseconds of the writer each.
    pub fn days(keep_days: u32) -> Retention {
        Retention {
            keep_days,
            every: Duration::from_secs(3_600),
            batch: 500,
        }
    }

    /// Unix milliseconds before which everything goes, at `now_ms`.
    pub fn cutoff_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(u64::from(self.keep_days) * 86_400_000)
    }
}

/// Prunes a round now, then one every `retention.every`, until the task is dropped.
pub(crate) async fn run(state: AppState, retention: Retention, events: Option<EventSink>) {
    let emit = |event: ServerEvent| {
        if let Some(events) = &events {
            events(event);
        }
    };
    loop {
        let cutoff = retention.cutoff_ms(unix_now_ms());
        match round(&state, cutoff, retention.batch).await {
            Ok(total) if total != Pruned::default() => emit(ServerEvent::Pruned {
                attempts: total.attempts,
                events: total.events,
                keep_days: retention.keep_days,
            }),
            Ok(_) => {}
            Err(error) => emit(ServerEvent::PruneFailed { error }),
        }
        tokio::time::sleep(retention.every).await;
    }
}

/// Batches until one comes back short; what they deleted together.
async fn round(state: &AppState, cutoff_ms: u64, batch: usize) -> Result<Pruned, String> {
    let mut total = Pruned::default();
    loop {
        let pruned = state
            .store(move |store| store.prune_batch(cutoff_ms, batch))
            .await
            .map_err(|error| error.message)?;
        total.attempts += pruned.attempts;
        total.events += pruned.events;
        if pruned.done(batch) {
            return Ok(total);
        }
        // Let the pushes that queued behind this batch go first.
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cutoff_is_so_many_days_before_now_and_never_below_zero() {
        let retention = Retention::days(7);
        let now = 1_700_000_000_000;
        assert_eq!(retention.cutoff_ms(now), now - 7 * 86_400_000);
        assert_eq!(retention.cutoff_ms(1_000), 0);
        assert_eq!(Retention::days(0).cutoff_ms(now), now);
    }
}
