//! The store against real databases: SQLite files in a temporary directory, and
//! PostgreSQL databases created for each test on the server `GPUVET_TEST_POSTGRES_URL`
//! names.
//!
//! `behaviour.rs` holds the tests of what a store does, each a function of a
//! [`common::Fixture`] (those of batches of writes in `batch.rs`, of repeats counted on one
//! row in `fold.rs`); `sqlite.rs` and `postgres.rs` run each one against their
//! database (`sqlite::NAME`, `postgres::NAME`) and add the tests only one database has.
//! The PostgreSQL tests are ignored unless asked for (`--include-ignored`), and then
//! fail, never skip, when the variable is missing.

mod batch;
mod behaviour;
mod common;
mod fold;
// PostgreSQL is the feature `postgres` (on in `cargo test --workspace`, which builds
// the server that turns it on; alone: `cargo test -p gpuvet-store --features postgres`).
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_tls;
mod sqlite;

/// A `gpuvet serve` hands each handle to a blocking thread of its own.
const _: () = {
    const fn send<T: Send>() {}
    send::<gpuvet_store::Store>();
};
