//! The store's one error type, with a hint for the user where there is something
//! specific to say.
//!
//! Each message carries its cause, so callers print it once with `{}`; the cause is
//! also kept in a field (not as `source()`, which would print it twice in a chain) for
//! callers that want to inspect it.

use std::error::Error;
use std::path::PathBuf;

use rusqlite::ErrorCode;

/// What the store could not do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store file or its directory could not be created, opened or prepared.
    #[error("cannot open the store at `{}`: {cause}", path.display())]
    Open {
        path: PathBuf,
        cause: Box<dyn Error + Send + Sync>,
    },
    /// The file is an SQLite database of some other program.
    #[error("cannot open the store at `{}`: the file is not a gpuvet store", path.display())]
    NotAStore { path: PathBuf },
    /// A newer gpuvet wrote the store with a schema this one does not know.
    #[error(
        "cannot open the store at `{}`: its schema version is {found}, newer than the {supported} this gpuvet knows",
        path.display()
    )]
    TooNew {
        path: PathBuf,
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

impl StoreError {
    /// What the user could do next, when there is something specific to say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            StoreError::Open { cause, .. } => {
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
            StoreError::NotAStore { .. } => {
                Some("set `gpuvet.store` / `--store` to a file gpuvet creates and owns")
            }
            StoreError::TooNew { .. } => Some(
                "use the gpuvet version that wrote the store, or set `gpuvet.store` / `--store` to another file",
            ),
            StoreError::Sqlite { error, .. } => error.sqlite_error_code().and_then(sqlite_hint),
            StoreError::Decode { .. } => Some(
                "the row was written by an incompatible gpuvet or changed by hand; narrow the query to skip it, or move the store file aside to start a new one",
            ),
            StoreError::IdConflict { .. } => Some(
                "gpuvet gives each report and event its own id; one id on two different contents means the sender reused it (a bug in the sender, or a file edited by hand)",
            ),
            StoreError::Encode { .. } | StoreError::Mismatch { .. } => None,
        }
    }

    /// Whether SQLite gave up waiting for another process's lock (after the busy
    /// timeout); the operation can be retried.
    pub fn is_busy(&self) -> bool {
        let error = match self {
            StoreError::Sqlite { error, .. } => Some(error),
            StoreError::Open { cause, .. } => cause.downcast_ref::<rusqlite::Error>(),
            _ => None,
        };
        matches!(
            error.and_then(rusqlite::Error::sqlite_error_code),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        )
    }
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

/// Attaches what the store was doing to a SQLite error.
pub(crate) trait During<T> {
    fn during(self, action: &'static str) -> Result<T, StoreError>;
}

impl<T> During<T> for rusqlite::Result<T> {
    fn during(self, action: &'static str) -> Result<T, StoreError> {
        self.map_err(|error| StoreError::Sqlite { action, error })
    }
}
