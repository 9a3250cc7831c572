//! A small pool of store handles for the blocking threads that serve requests.
//!
//! A store handle is one database connection, `Send` but not `Sync`. Each request
//! takes an idle handle (or opens one), uses it on a blocking thread and gives it
//! back. At most [`MAX_IDLE`] idle handles are kept; under a burst more are opened and
//! the extra ones closed afterwards.

use std::fmt;
use std::sync::Mutex;

use gpuvet_store::{Store, StoreError};

/// Idle handles kept between requests: enough for a burst of readers, so that few
/// requests pay for opening one.
pub const MAX_IDLE: usize = 64;

type Opener = Box<dyn Fn() -> Result<Store, StoreError> + Send + Sync>;

/// Opens store handles and keeps the idle ones.
pub struct StorePool {
    open: Opener,
    idle: Mutex<Vec<Store>>,
}

impl fmt::Debug for StorePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorePool").finish_non_exhaustive()
    }
}

impl StorePool {
    /// A pool whose handles come from `open`. It opens one handle at once, so that a
    /// store that cannot be opened fails the start, not the first request.
    pub fn new(
        open: impl Fn() -> Result<Store, StoreError> + Send + Sync + 'static,
    ) -> Result<StorePool, StoreError> {
        let first = open()?;
        Ok(StorePool {
            open: Box::new(open),
            idle: Mutex::new(vec![first]),
        })
    }

    /// How many writes may run at once. SQLite takes one writer at a time; more would
    /// only wait on its lock.
    pub fn concurrent_writers(&self) -> usize {
        1
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
        if idle.len() < MAX_IDLE {
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
