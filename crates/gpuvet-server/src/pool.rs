//! A small pool of store handles for the blocking threads that serve requests.
//!
//! A store handle is one database connection, `Send` but not `Sync`. Each request
//! takes an idle handle (or opens one), uses it on a blocking thread and gives it
//! back. At most [`MAX_IDLE`] idle handles are kept; under a burst more are opened and
//! the extra ones closed afterwards. A handle whose work failed is closed rather than
//! kept: a PostgreSQL connection that broke stays broken.

use std::fmt;
use std::sync::Mutex;

use gpuvet_store::{Store, StoreError, StoreLocation};

/// Idle handles kept between requests: enough for a burst of readers, so that few
/// requests pay for opening one.
pub const MAX_IDLE: usize = 64;

/// Transactions of pushes at once on PostgreSQL: while one waits on the database, the
/// next batch is being stored. (In `serve_load` on PostgreSQL, two gave a p99 of 26–27
/// ms; one 34–42 ms, with less throughput; four 38–42 ms, in batches of 3 pushes.)
pub const POSTGRES_WRITER_TASKS: usize = 2;

type Opener = Box<dyn Fn() -> Result<Store, StoreError> + Send + Sync>;

/// Opens store handles and keeps the idle ones.
pub struct StorePool {
    open: Opener,
    idle: Mutex<Vec<Store>>,
    writers: usize,
}

impl fmt::Debug for StorePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorePool").finish_non_exhaustive()
    }
}

impl StorePool {
    /// A pool of handles on the store at `location`. It opens one handle per writer
    /// task at once: a store that cannot be opened fails the start, not the first
    /// request, and the first burst of pushes does not wait for connections.
    pub fn new(location: StoreLocation) -> Result<StorePool, StoreError> {
        // SQLite takes one writer at a time, and more would only wait on its lock;
        // PostgreSQL locks rows and ids, so transactions of different reports overlap.
        let writers = if location.is_postgres() {
            POSTGRES_WRITER_TASKS
        } else {
            1
        };
        let idle = (0..writers)
            .map(|_| Store::open_location(&location))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StorePool {
            open: Box::new(move || Store::open_location(&location)),
            idle: Mutex::new(idle),
            writers,
        })
    }

    /// How many transactions of pushes run at once: the server's writer tasks, each
    /// storing the pushes queued since the last one took its batch.
    pub fn writer_tasks(&self) -> usize {
        self.writers
    }

    /// Runs `work` with a handle. Blocks: call it on a blocking thread.
    pub fn with<T>(
        &self,
        work: impl FnOnce(&mut Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let idle = self.lock().pop();
        let mut store = match idle {
            Some(store) => store,
            None => (self.open)()?,
        };
        let result = work(&mut store);
        let mut idle = self.lock();
        if result.is_ok() && idle.len() < MAX_IDLE {
            idle.push(store);
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Store>> {
        // A handler that panicked while holding the lock left the list itself intact.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for StorePool {
    /// Closes the idle handles on a thread of their own: a PostgreSQL handle closes
    /// by blocking on its own runtime, which tokio forbids on the threads that run
    /// the server, where the pool is dropped at shutdown.
    fn drop(&mut self) {
        let idle = std::mem::take(&mut *self.lock());
        if !idle.is_empty() {
            let _ = std::thread::spawn(move || drop(idle)).join();
        }
    }
}
