//! What the server reports while it runs, for its program to print (a library does
//! not): refusals over the connection cap, failed accepts, and what retention pruned.

use std::sync::Arc;

/// One thing the server reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// Connections were refused over the cap since the last such event.
    Refused { count: u64, max_connections: usize },
    /// Accepting failed (out of file descriptors, say); the server waits and retries.
    AcceptFailed { error: String },
    /// One round of retention deleted this much (attempts with their reports, events).
    Pruned {
        attempts: u64,
        events: u64,
        keep_days: u32,
    },
    /// A round of retention failed; the next round tries again.
    PruneFailed { error: String },
}

/// Where the server's events go; the program prints them, tests collect them.
pub type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;
