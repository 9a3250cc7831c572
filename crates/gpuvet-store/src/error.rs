//! The store's one error type, with a hint for the user where there is something
//! specific to say.
//!
//! Each message carries its cause, so callers print it once with `{}`; the cause is
//! also kept in a field (not as `source()`, which would print it twice in a chain) for
//! callers that want to inspect it. A store is named by its location as shown
//! ([`Store::location_display`](crate::Store::location_display)): a file's path, or a
//! PostgreSQL URL without its password.

use std::error::Error;

use rusqlite::ErrorCode;

use crate::value::DbError;

/// What the store could not do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be created, opened, connected to or prepared.
    #[error("cannot open the store at `{location}`: {cause}")]
    Open {
        location: String,
        cause: Box<dyn Error + Send + Sync>,
    },
    /// The file is an SQLite database of some other program, or the PostgreSQL
    /// database (its schema on the search path) holds tables that are not gpuvet's.
    #[error("cannot open the store at `{location}`: {}", not_a_store(location))]
    NotAStore { location: String },
    /// A PostgreSQL store named where this build has no PostgreSQL client (a node's
    /// binary: PostgreSQL is the fleet server's store).
    #[error("cannot open the store at `{location}`: this program reads no PostgreSQL store")]
    PostgresNotBuilt { location: String },
    /// A newer gpuvet wrote the store with a schema this one does not know.
    #[error(
        "cannot open the store at `{location}`: its schema version is {found}, newer than the {supported} this gpuvet knows"
    )]
    TooNew {
        location: String,
        found: u32,
        supported: u32,
    },
    /// SQLite refused a read or a write.
    #[error("cannot {action}: {error}")]
    Sqlite {
        /// What the store was doing, e.g. "record an event in the store".
        action: &'static str,
        error: rusqlite::Error,
    },
    /// PostgreSQL refused a read or a write, or the connection to it broke.
    #[cfg(feature = "postgres")]
    #[error("cannot {action}: {}", crate::pg::error::postgres_message(error))]
    Postgres {
        /// What the store was doing, e.g. "record an event in the store".
        action: &'static str,
        error: postgres::Error,
    },
    /// The database returned a value the store cannot use: an integer out of range, a
    /// column of another type (a row changed by hand or by another program).
    #[error("cannot {action}: {message}")]
    Data {
        action: &'static str,
        message: String,
    },
    /// A value (a time, a count) larger than the largest integer the store holds,
    /// `i64::MAX`; nothing was written.
    #[error(
        "cannot {action}: `{value}` is larger than the largest integer the store holds (`{}`)",
        i64::MAX
    )]
    OutOfRange { action: &'static str, value: u64 },
    /// An item the caller named by its id is not in the store.
    #[error("the store has no {what} with id `{id}`")]
    NotFound { what: &'static str, id: String },
    /// A value could not be written as JSON that reads back.
    #[error("cannot store the {what}: {message}")]
    Encode { what: &'static str, message: String },
    /// A stored JSON value (or name) no longer decodes.
    #[error("row {id} of table `{table}` in the store no longer decodes: {message}")]
    Decode {
        table: &'static str,
        id: i64,
        message: String,
    },
    /// A report or event arrived again under its id with different content: two
    /// writers gave one id to different things, which the store never hides.
    #[error("the store already holds a {what} with id `{id}` whose content differs")]
    IdConflict { what: &'static str, id: String },
    /// A report was recorded under an attempt it does not belong to.
    #[error("the report's {field} is `{report}` but the attempt's is `{attempt}`")]
    Mismatch {
        field: &'static str,
        attempt: String,
        report: String,
    },
}

fn not_a_store(location: &str) -> &'static str {
    if is_postgres(location) {
        "the database holds tables that are not a gpuvet store"
    } else {
        "the file is not a gpuvet store"
    }
}

fn is_postgres(location: &str) -> bool {
    crate::StoreLocation::parse(location).is_postgres()
}

impl StoreError {
    /// What the user could do next, when there is something specific to say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            StoreError::Open { cause, .. } => {
                #[cfg(feature = "postgres")]
                if let Some(error) = cause.downcast_ref::<crate::pg::error::PostgresOpenError>() {
                    return Some(error.hint());
                }
                match cause
                    .downcast_ref::<rusqlite::Error>()
                    .and_then(|e| e.sqlite_error_code())
                {
                    Some(ErrorCode::NotADatabase) => Some(
                        "the file is not an SQLite database; set `gpuvet.store` / `--store` to another path",
                    ),
                    Some(code) => sqlite_hint(code).or(Some(OPEN_HINT)),
                    None => Some(OPEN_HINT),
                }
            }
            StoreError::NotAStore { location } => Some(if is_postgres(location) {
                "give gpuvet a database (or a schema, with `options=-csearch_path%3DNAME` in the URL) of its own: an empty one, or one gpuvet created"
            } else {
                "set `gpuvet.store` / `--store` to a file gpuvet creates and owns"
            }),
            StoreError::TooNew { .. } => Some(
                "use the gpuvet version that wrote the store, or set `gpuvet.store` / `--store` to another store",
            ),
            StoreError::Sqlite { error, .. } => error.sqlite_error_code().and_then(sqlite_hint),
            #[cfg(feature = "postgres")]
            StoreError::Postgres { error, .. } => crate::pg::error::hint(error),
            StoreError::PostgresNotBuilt { .. } => Some(
                "PostgreSQL is a fleet server's store: serve it with `gpuvet serve --store postgres://…` (the `gpuvet-server` program), and read it from a node with `--server URL`",
            ),
            StoreError::Decode { .. } => Some(
                "the row was written by an incompatible gpuvet or changed by hand; narrow the query to skip it, or move the store file aside to start a new one",
            ),
            StoreError::IdConflict { .. } => Some(
                "gpuvet gives each report and event its own id; one id on two different contents means the sender reused it (a bug in the sender, or a file edited by hand)",
            ),
            StoreError::Data { .. } => Some(
                "the database holds a value gpuvet did not write (changed by hand, or by another program); fix or remove that row",
            ),
            StoreError::Encode { .. }
            | StoreError::Mismatch { .. }
            | StoreError::OutOfRange { .. }
            | StoreError::NotFound { .. } => None,
        }
    }

    /// Whether the store gave up waiting for another writer's lock (SQLite, after its
    /// busy timeout) or was made to step back from one (PostgreSQL: a deadlock or a
    /// serialization failure); the operation can be retried.
    pub fn is_busy(&self) -> bool {
        match self {
            StoreError::Sqlite { error, .. } => sqlite_busy(error),
            StoreError::Open { cause, .. } => cause
                .downcast_ref::<rusqlite::Error>()
                .is_some_and(sqlite_busy),
            #[cfg(feature = "postgres")]
            StoreError::Postgres { error, .. } => crate::pg::error::is_busy(error),
            _ => false,
        }
    }
}

fn sqlite_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

const OPEN_HINT: &str =
    "check that the directory exists and is writable, or set `gpuvet.store` / `--store`";

fn sqlite_hint(code: ErrorCode) -> Option<&'static str> {
    match code {
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some(
            "another process held the store locked for longer than the busy timeout; retry, or give this process its own `--store`",
        ),
        ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied => Some(
            "check that the store file and its directory are writable, or set `gpuvet.store` / `--store`",
        ),
        ErrorCode::DiskFull | ErrorCode::SystemIoFailure => Some(
            "check the free space of the store's disk, or set `gpuvet.store` / `--store` to another disk",
        ),
        ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
            Some("the store file is damaged; move it aside and gpuvet starts a new one")
        }
        _ => None,
    }
}

/// Attaches what the store was doing to a database error.
pub(crate) trait During<T> {
    fn during(self, action: &'static str) -> Result<T, StoreError>;
}

impl<T, E: Into<DbError>> During<T> for Result<T, E> {
    fn during(self, action: &'static str) -> Result<T, StoreError> {
        self.map_err(|error| match error.into() {
            DbError::Sqlite(error) => StoreError::Sqlite { action, error },
            #[cfg(feature = "postgres")]
            DbError::Postgres(error) => StoreError::Postgres { action, error },
            DbError::Data(message) => StoreError::Data { action, message },
            DbError::TooLarge(value) => StoreError::OutOfRange { action, value },
        })
    }
}
