//! Group commit: every push goes through one queue, and a writer task stores what has
//! queued in one transaction ([`gpuvet_store::Store::record_batch`]), so that the
//! pushes that arrive while a transaction commits share the next one and its commit.
//!
//! A writer takes the first push that waits, then every other one already queued, up
//! to [`MAX_BATCH_WRITES`] pushes and [`MAX_BATCH_BYTES`] of data (at least one push,
//! however large), stores them on a blocking thread, and answers each push only once
//! the transaction has committed: a push answered `200` is stored. A push refused for
//! its own content (`409`, `400`) is answered so without failing the others of its
//! batch; a batch whose transaction fails (it could not commit, the connection broke)
//! answers every push of it with that error (`503` when the store was busy, else
//! `500`), and none of them is stored.
//!
//! SQLite has one writer, so one task writes; PostgreSQL takes a few transactions at
//! once ([`StorePool::writer_tasks`]), so as many tasks take turns at the queue, each
//! taking what has queued since the last one took.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::http::StatusCode;
use gpuvet_store::{PreparedWrite, StoreError, Written};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::pool::StorePool;

/// The most pushes one transaction holds. Each push of a batch is answered only once
/// the whole batch is stored, so a larger batch makes its first pushes wait longer: in
/// `serve_load`'s burst of 64 clients on PostgreSQL, 256 gave a p99 of 42–60 ms, 32
/// 38–43 ms and 16 33–36 ms, for the same throughput (docs/benchmarks.md).
pub const MAX_BATCH_WRITES: usize = 16;

/// The most data one transaction holds (by [`PreparedWrite::size`]), unless a single
/// push is larger: a 1,024-node group report is about 3 MB.
pub const MAX_BATCH_BYTES: usize = 16 << 20;

/// Pushes that may wait in the queue; past it a push waits to be queued.
const QUEUE_LENGTH: usize = 1024;

/// The queue of pushes to store.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    queue: mpsc::Sender<Pending>,
    metrics: Arc<Metrics>,
}

/// A push waiting for its transaction, and where its answer goes.
#[derive(Debug)]
struct Pending {
    write: PreparedWrite,
    answer: oneshot::Sender<Result<Written, ApiError>>,
}

/// What the writer tasks share: the queue's end, and a push taken from it that did
/// not fit in the last batch.
struct Intake {
    queue: mpsc::Receiver<Pending>,
    held: Option<Pending>,
}

impl Writer {
    /// Starts the writer tasks on the current tokio runtime. They stop once every
    /// clone of the returned writer is dropped and the queue is empty.
    pub(crate) fn start(pool: Arc<StorePool>, metrics: Arc<Metrics>) -> Writer {
        let (sender, receiver) = mpsc::channel(QUEUE_LENGTH);
        let intake = Arc::new(Mutex::new(Intake {
            queue: receiver,
            held: None,
        }));
        for _ in 0..pool.writer_tasks() {
            tokio::spawn(write_batches(
                Arc::clone(&intake),
                Arc::clone(&pool),
                Arc::clone(&metrics),
            ));
        }
        Writer {
            queue: sender,
            metrics,
        }
    }

    /// Stores `write` in the next transaction and answers once that committed.
    pub(crate) async fn write(&self, write: PreparedWrite) -> Result<Written, ApiError> {
        let (answer, answered) = oneshot::channel();
        // Counted as waiting before it is queued (a writer may take it at once), and
        // not counted if it never was (the queue closed, or the client left while the
        // queue was full).
        let mut waiting = Waiting::count(&self.metrics);
        self.queue
            .send(Pending { write, answer })
            .await
            .map_err(|_| stopped())?;
        waiting.queued = true;
        answered.await.map_err(|_| stopped())?
    }
}

/// One push counted in `pushes_waiting` until it is queued; the writer uncounts it.
struct Waiting<'a> {
    metrics: &'a Metrics,
    queued: bool,
}

impl<'a> Waiting<'a> {
    fn count(metrics: &'a Metrics) -> Waiting<'a> {
        metrics.pushes_waiting.fetch_add(1, Ordering::Relaxed);
        Waiting {
            metrics,
            queued: false,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.queued {
            self.metrics.pushes_waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn stopped() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the server's writer stopped before storing the push",
    )
    .with_hint(
        "the server is shutting down; send it again, to this server once it is back or to another",
    )
}

/// One writer task: takes a batch, stores it, answers it; until the queue closes.
async fn write_batches(intake: Arc<Mutex<Intake>>, pool: Arc<StorePool>, metrics: Arc<Metrics>) {
    while let Some(batch) = next_batch(&intake).await {
        let taken = batch.len() as u64;
        metrics.pushes_waiting.fetch_sub(taken, Ordering::Relaxed);
        metrics.pushes_storing.fetch_add(taken, Ordering::Relaxed);
        let writes: Vec<PreparedWrite>;
        let answers: Vec<_>;
        (writes, answers) = batch.into_iter().map(|p| (p.write, p.answer)).unzip();
        let pool = Arc::clone(&pool);
        let stored =
            tokio::task::spawn_blocking(move || pool.with(|store| store.record_batch(&writes)))
                .await;
        let outcomes: Vec<Result<Written, ApiError>> = match stored {
            Ok(Ok(outcomes)) => {
                metrics.write_transactions.fetch_add(1, Ordering::Relaxed);
                outcomes
                    .into_iter()
                    .map(|outcome| outcome.map_err(ApiError::from))
                    .collect()
            }
            Ok(Err(error)) => every(answers.len(), batch_failed(error)),
            Err(join) => every(
                answers.len(),
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("storing a batch of pushes failed: {join}"),
                ),
            ),
        };
        metrics.pushes_storing.fetch_sub(taken, Ordering::Relaxed);
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            // A client that gave up no longer waits; its push is stored all the same.
            let _ = answer.send(outcome);
        }
    }
}

/// The error every push of a failed transaction is answered with.
fn batch_failed(error: StoreError) -> ApiError {
    let error = ApiError::from(error);
    let hint = "nothing of this push was stored; send it again (gpuvet's sender does)";
    ApiError {
        hint: Some(match error.hint {
            Some(own) => format!("{own}; {hint}"),
            None => hint.to_owned(),
        }),
        ..error
    }
}

fn every(count: usize, error: ApiError) -> Vec<Result<Written, ApiError>> {
    vec![Err(error); count]
}

/// The first push to come, then every other one already queued, within the bounds;
/// `None` once the queue is closed and empty.
async fn next_batch(intake: &Mutex<Intake>) -> Option<Vec<Pending>> {
    let mut intake = intake.lock().await;
    let first = match intake.held.take() {
        Some(held) => held,
        None => intake.queue.recv().await?,
    };
    let mut bytes = first.write.size();
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH_WRITES {
        let Ok(next) = intake.queue.try_recv() else {
            break;
        };
        bytes += next.write.size();
        if bytes > MAX_BATCH_BYTES {
            intake.held = Some(next);
            break;
        }
        batch.push(next);
    }
    Some(batch)
}
