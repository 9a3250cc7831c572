//! The store's one error type, with a hint for the user where there is something
//! specific to say.
//!
//! Each message carries its cause, so callers print it once with `{}`; the cause is
//! also kept in a field (not as `source()`, which would print it twice in a chain) for
//! callers that want to inspect it. A store is named by its location as shown
//! ([`Store::location_display`](crate::Store::location_display)): a file's path, or a
//! PostgreSQL URL without its password.

use std::error::Error;
use std::fmt;

use postgres::error::SqlState;
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
    #[error("cannot {action}: {}", postgres_message(error))]
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

/// Why opening a PostgreSQL store failed: the `cause` of [`StoreError::Open`].
#[derive(Debug)]
pub(crate) enum PostgresOpenError {
    /// The URL does not parse.
    Url(postgres::Error),
    /// Connecting, or preparing the schema, failed.
    Server(postgres::Error),
}

impl fmt::Display for PostgresOpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostgresOpenError::Url(error) => {
                write!(f, "the URL does not parse: {}", postgres_message(error))
            }
            PostgresOpenError::Server(error) => f.write_str(&postgres_message(error)),
        }
    }
}

impl Error for PostgresOpenError {}

/// A PostgreSQL error on one line: the server's message (and its detail) for what the
/// server refused, else what the client was doing and why it failed.
/// (`postgres::Error` displays only its kind, e.g. "db error", and keeps the rest in
/// its sources.)
fn postgres_message(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let mut message = db.message().to_owned();
        if let Some(detail) = db.detail() {
            message.push_str(" (");
            message.push_str(detail);
            message.push(')');
        }
        return message;
    }
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

impl StoreError {
    /// What the user could do next, when there is something specific to say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            StoreError::Open { cause, .. } => {
                if let Some(error) = cause.downcast_ref::<PostgresOpenError>() {
                    return Some(match error {
                        PostgresOpenError::Url(_) => URL_HINT,
                        PostgresOpenError::Server(error) => {
                            error.code().and_then(postgres_hint).unwrap_or(CONNECT_HINT)
                        }
                    });
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
            StoreError::Postgres { error, .. } => match error.code() {
                Some(code) => postgres_hint(code),
                None if error.is_closed()
                    || error.source().is_some_and(|e| e.is::<std::io::Error>()) =>
                {
                    Some(
                        "the connection to PostgreSQL broke; check that the server runs and is reachable, then retry",
                    )
                }
                None => None,
            },
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
            StoreError::Postgres { error, .. } => matches!(
                error.code(),
                Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED
                    || *code == SqlState::LOCK_NOT_AVAILABLE
            ),
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

const URL_HINT: &str = "write the store as `postgres://USER:PASSWORD@HOST:PORT/DATABASE`, with the password's special characters percent-encoded";

const CONNECT_HINT: &str = "check that PostgreSQL runs and accepts connections at the URL's host and port; gpuvet connects without TLS, so the server must accept plain connections: keep it on a private network or a local socket";

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

fn postgres_hint(code: &SqlState) -> Option<&'static str> {
    Some(match code {
        c if *c == SqlState::INVALID_PASSWORD
            || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            "check the user and password in the URL, and that the server's `pg_hba.conf` lets that user in from this host without TLS"
        }
        c if *c == SqlState::INVALID_CATALOG_NAME => {
            "create the database first (`createdb -O USER NAME`), or name an existing one in the URL"
        }
        c if *c == SqlState::INSUFFICIENT_PRIVILEGE => {
            "the user needs to own the database, or the CREATE privilege on the schema gpuvet's tables go in (PostgreSQL 15 no longer grants it on `public`)"
        }
        c if *c == SqlState::INVALID_SCHEMA_NAME => {
            "no schema on the connection's `search_path` exists: create the one the URL's `options=-csearch_path%3DNAME` names (`CREATE SCHEMA NAME`), or leave the option out to use `public`"
        }
        c if *c == SqlState::TOO_MANY_CONNECTIONS || *c == SqlState::CANNOT_CONNECT_NOW => {
            "the server is starting, or has no connection to spare; retry in a moment"
        }
        c if *c == SqlState::ADMIN_SHUTDOWN || *c == SqlState::CRASH_SHUTDOWN => {
            "the server ended the connection (it is stopping, or an administrator ended it); retry once it runs"
        }
        c if *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
            || *c == SqlState::LOCK_NOT_AVAILABLE =>
        {
            "another writer held a lock this one needed; retry"
        }
        c if *c == SqlState::READ_ONLY_SQL_TRANSACTION => {
            "the server is a read-only standby; point the URL at the primary"
        }
        c if *c == SqlState::DISK_FULL => "check the free space of the PostgreSQL server's disk",
        _ => return None,
    })
}

/// Attaches what the store was doing to a database error.
pub(crate) trait During<T> {
    fn during(self, action: &'static str) -> Result<T, StoreError>;
}

impl<T, E: Into<DbError>> During<T> for Result<T, E> {
    fn during(self, action: &'static str) -> Result<T, StoreError> {
        self.map_err(|error| match error.into() {
            DbError::Sqlite(error) => StoreError::Sqlite { action, error },
            DbError::Postgres(error) => StoreError::Postgres { action, error },
            DbError::Data(message) => StoreError::Data { action, message },
            DbError::TooLarge(value) => StoreError::OutOfRange { action, value },
        })
    }
}
