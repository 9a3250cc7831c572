//! Opening or using a PostgreSQL store went wrong: the cause of a failed open, the
//! server's message on one line, and what the user could do next.

use std::error::Error;
use std::fmt;

use postgres::error::SqlState;

/// Why opening a PostgreSQL store failed: the `cause` of [`StoreError::Open`].
#[derive(Debug)]
pub(crate) enum PostgresOpenError {
    /// The URL does not parse.
    Url(postgres::Error),
    /// Connecting, or preparing the schema, failed.
    Server(postgres::Error),
    /// TLS cannot be set up as the URL asks.
    Tls(super::tls::TlsSetupError),
}

impl fmt::Display for PostgresOpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostgresOpenError::Url(error) => {
                write!(f, "the URL does not parse: {}", postgres_message(error))
            }
            PostgresOpenError::Server(error) => f.write_str(&postgres_message(error)),
            PostgresOpenError::Tls(error) => write!(f, "{error}"),
        }
    }
}

impl Error for PostgresOpenError {}

/// A PostgreSQL error on one line: the server's message (and its detail) for what the
/// server refused, else what the client was doing and why it failed.
/// (`postgres::Error` displays only its kind, e.g. "db error", and keeps the rest in
/// its sources.)
pub(crate) fn postgres_message(error: &postgres::Error) -> String {
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

impl PostgresOpenError {
    /// What the user could do next.
    pub(crate) fn hint(&self) -> &'static str {
        match self {
            PostgresOpenError::Url(_) => URL_HINT,
            PostgresOpenError::Tls(_) => TLS_HINT,
            PostgresOpenError::Server(error) if is_tls_failure(error) => TLS_HINT,
            PostgresOpenError::Server(error) => {
                error.code().and_then(code_hint).unwrap_or(CONNECT_HINT)
            }
        }
    }
}

/// What the user could do after a read or write failed.
pub(crate) fn hint(error: &postgres::Error) -> Option<&'static str> {
    match error.code() {
        Some(code) => code_hint(code),
        None if error.is_closed() || error.source().is_some_and(|e| e.is::<std::io::Error>()) => {
            Some(
                "the connection to PostgreSQL broke; check that the server runs and is reachable, then retry",
            )
        }
        None => None,
    }
}

/// Whether PostgreSQL made this writer step back from a lock; the write can be retried.
pub(crate) fn is_busy(error: &postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::LOCK_NOT_AVAILABLE
    )
}

const URL_HINT: &str = "write the store as `postgres://USER:PASSWORD@HOST:PORT/DATABASE`, with the password's special characters percent-encoded";

const CONNECT_HINT: &str = "check that PostgreSQL runs and accepts connections at the URL's host and port; without `sslmode=require` or `verify-full` in the URL gpuvet connects in clear, which the server's `pg_hba.conf` must allow";

const TLS_HINT: &str = "with `sslmode=verify-full`, the server's certificate must be signed by the CA in `sslrootcert=FILE` (or the system's) and name the URL's host; `sslmode=require` only encrypts; the server needs `ssl = on`";

/// Whether connecting failed in the TLS handshake (the certificate, most often).
/// (`std::io::Error` hides the rustls error it wraps from `source`, hence the words.)
fn is_tls_failure(error: &postgres::Error) -> bool {
    let mut cause: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if error.is::<rustls::Error>() || error.to_string().contains("TLS handshake") {
            return true;
        }
        cause = error.source();
    }
    false
}

fn code_hint(code: &SqlState) -> Option<&'static str> {
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
