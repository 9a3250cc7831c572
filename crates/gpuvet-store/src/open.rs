//! Opening a store: where it is ([`StoreLocation`]: an SQLite file, or a PostgreSQL
//! URL), connecting and preparing the schema, and the location as shown to users,
//! which never includes a password.
//!
//! PostgreSQL is opened only in a build with the feature `postgres` (the fleet server's);
//! elsewhere a `postgres://` location is refused with [`StoreError::PostgresNotBuilt`].
//! Its connections are made without TLS: a central store's server belongs on a private
//! network or behind a local socket (`postgres://USER@%2Fvar%2Frun%2Fpostgresql/DATABASE`),
//! not on the open internet.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use crate::db::Db;
use crate::{Store, StoreError, schema};

/// How long connecting to PostgreSQL may take when the URL sets no `connect_timeout`.
#[cfg(feature = "postgres")]
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a store is: what `--store` and `gpuvet.store` name.
///
/// Its `Display` and `Debug` show a PostgreSQL URL without its password.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// An SQLite file, created with its missing parent directories.
    Sqlite(PathBuf),
    /// A PostgreSQL URL, `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (or
    /// `postgresql://…`), with the options of the `postgres` crate's `Config`.
    Postgres(String),
}

impl StoreLocation {
    /// A value that starts with `postgres://` or `postgresql://` is a PostgreSQL URL;
    /// anything else a file path.
    pub fn parse(value: &str) -> StoreLocation {
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            StoreLocation::Postgres(value.to_owned())
        } else {
            StoreLocation::Sqlite(PathBuf::from(value))
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, StoreLocation::Postgres(_))
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "{}", path.display()),
            StoreLocation::Postgres(url) => f.write_str(&redact_url(url)),
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            StoreLocation::Postgres(url) => {
                f.debug_tuple("Postgres").field(&redact_url(url)).finish()
            }
        }
    }
}

/// What replaces a password.
const REDACTED: &str = "***";

/// `url` with its password, in the user part or as a `password` parameter, replaced.
///
/// Errs towards hiding: everything up to the URL's last `@` counts as its user part
/// (a password may hold an unescaped `@`, `/` or `?`), so a URL that uses `@`
/// elsewhere may show less than it could, never the password.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (credentials, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let mut out = format!("{scheme}://");
    if let Some(credentials) = credentials {
        match credentials.split_once(':') {
            Some((user, password)) if !password.is_empty() => {
                out.push_str(user);
                out.push(':');
                out.push_str(REDACTED);
            }
            _ => out.push_str(credentials),
        }
        out.push('@');
    }
    let Some((place, query)) = rest.split_once('?') else {
        out.push_str(rest);
        return out;
    };
    out.push_str(place);
    out.push('?');
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((key, _)) if percent_decode(key).eq_ignore_ascii_case("password") => {
                format!("{key}={REDACTED}")
            }
            _ => param.to_owned(),
        })
        .collect();
    out.push_str(&params.join("&"));
    out
}

/// A URL part with its `%XX` escapes decoded (leaving a malformed escape as it is).
fn percent_decode(part: &str) -> String {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a node keeps its store when nothing names one:
/// `$XDG_STATE_HOME/gpuvet/gpuvet.db`, else `$HOME/.local/state/gpuvet/gpuvet.db`, else
/// `gpuvet.db` in the working directory. The caller passes the two variables (blank
/// counts as unset), so this is the one rule every program applies.
pub fn default_path(xdg_state_home: Option<&str>, home: Option<&str>) -> PathBuf {
    let set = |value: Option<&str>| value.filter(|v| !v.trim().is_empty()).map(PathBuf::from);
    let state = set(xdg_state_home).or_else(|| set(home).map(|home| home.join(".local/state")));
    match state {
        Some(dir) => dir.join("gpuvet").join("gpuvet.db"),
        None => PathBuf::from("gpuvet.db"),
    }
}

impl Store {
    /// Opens the store at `location`: [`Store::open`] for a file, and for PostgreSQL,
    /// connects (without TLS) and migrates the database's schema to
    /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION), refusing a database that holds other
    /// tables or a newer schema.
    pub fn open_location(location: &StoreLocation) -> Result<Store, StoreError> {
        match location {
            StoreLocation::Sqlite(path) => Store::open(path),
            StoreLocation::Postgres(url) => Store::open_postgres(url),
        }
    }

    /// Opens the store at `path`, creating the file and its missing parent
    /// directories, and migrates its schema to [`SCHEMA_VERSION`](crate::SCHEMA_VERSION).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let display = path.display().to_string();
        let open_error = |cause: Box<dyn std::error::Error + Send + Sync>| StoreError::Open {
            location: display.clone(),
            cause,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| {
                if parent.is_file() {
                    open_error(format!("`{}` is a file, not a directory", parent.display()).into())
                } else {
                    open_error(Box::new(e))
                }
            })?;
        }
        // No SQLITE_OPEN_URI: a path is a path, even one that starts with `file:`.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(path, flags).map_err(|e| open_error(Box::new(e)))?;
        schema::prepare(&mut conn, &display)?;
        Ok(Store {
            db: Db::sqlite(conn),
            path: Some(path.to_owned()),
            display,
            queue_pushes: false,
        })
    }

    /// A private SQLite store that lives as long as the handle, for tests and dry runs.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let display = ":memory:".to_owned();
        let mut conn = Connection::open_in_memory().map_err(|e| StoreError::Open {
            location: display.clone(),
            cause: Box::new(e),
        })?;
        schema::prepare(&mut conn, &display)?;
        Ok(Store {
            db: Db::sqlite(conn),
            path: None,
            display,
            queue_pushes: false,
        })
    }

    #[cfg(not(feature = "postgres"))]
    fn open_postgres(url: &str) -> Result<Store, StoreError> {
        Err(StoreError::PostgresNotBuilt {
            location: redact_url(url),
        })
    }

    #[cfg(feature = "postgres")]
    fn open_postgres(url: &str) -> Result<Store, StoreError> {
        use crate::pg::error::PostgresOpenError;
        let display = redact_url(url);
        let open_error = |cause: PostgresOpenError| StoreError::Open {
            location: display.clone(),
            cause: Box::new(cause),
        };
        let (url, tls) =
            crate::pg::tls::split_url(url).map_err(|e| open_error(PostgresOpenError::Tls(e)))?;
        let tls = crate::pg::tls::client_config(&tls)
            .map_err(|e| open_error(PostgresOpenError::Tls(e)))?;
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| open_error(PostgresOpenError::Url(e)))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("gpuvet");
        }
        let connected = match tls {
            None => config.connect(postgres::NoTls),
            Some(tls) => config
                .ssl_mode(postgres::config::SslMode::Require)
                .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls)),
        };
        let mut client = connected.map_err(|e| open_error(PostgresOpenError::Server(e)))?;
        crate::schema_pg::prepare(&mut client, &display)?;
        Ok(Store {
            db: Db::postgres(client),
            path: None,
            display,
            queue_pushes: false,
        })
    }

    /// The SQLite file behind the store; `None` in memory and on PostgreSQL.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Where the store is, to show: the file's path, `:memory:`, or the PostgreSQL URL
    /// with its password replaced by `***`.
    pub fn location_display(&self) -> &str {
        &self.display
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_path_follows_xdg_then_home() {
        assert_eq!(
            default_path(Some("/state"), Some("/home/u")),
            Path::new("/state/gpuvet/gpuvet.db")
        );
        assert_eq!(
            default_path(Some(" "), Some("/home/u")),
            Path::new("/home/u/.local/state/gpuvet/gpuvet.db")
        );
        assert_eq!(default_path(None, Some("")), Path::new("gpuvet.db"));
    }

    #[test]
    fn postgres_urls_and_paths_are_told_apart() {
        assert!(StoreLocation::parse("postgres://h/db").is_postgres());
        assert!(StoreLocation::parse("postgresql://u@h/db").is_postgres());
        assert_eq!(
            StoreLocation::parse("/var/lib/gpuvet/store.db"),
            StoreLocation::Sqlite("/var/lib/gpuvet/store.db".into())
        );
        // Only the two schemes, spelled as PostgreSQL's client spells them.
        for path in [
            "postgres.db",
            "./postgres://x",
            "file:postgres://x",
            "POSTGRES://h",
        ] {
            assert_eq!(
                StoreLocation::parse(path),
                StoreLocation::Sqlite(path.into()),
                "{path}"
            );
        }
    }

    #[test]
    fn passwords_never_show() {
        let cases = [
            (
                "postgres://gpuvet:s3cret@db.internal:5432/gpuvet",
                "postgres://gpuvet:***@db.internal:5432/gpuvet",
            ),
            ("postgres://gpuvet@db/gpuvet", "postgres://gpuvet@db/gpuvet"),
            (
                "postgres://gpuvet:@db/gpuvet",
                "postgres://gpuvet:@db/gpuvet",
            ),
            ("postgresql://db/gpuvet", "postgresql://db/gpuvet"),
            // Unescaped `@`, `/` and `?` in the password.
            ("postgres://u:p@ss/w?rd@db/x", "postgres://u:***@db/x"),
            (
                "postgres://db/x?user=u&password=s3cret&sslmode=disable",
                "postgres://db/x?user=u&password=***&sslmode=disable",
            ),
            (
                "postgres://db/x?pass%77ord=s3cret",
                "postgres://db/x?pass%77ord=***",
            ),
            (
                "postgres://u:one@db/x?PASSWORD=two",
                "postgres://u:***@db/x?PASSWORD=***",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
            let location = StoreLocation::parse(url);
            assert_eq!(location.to_string(), shown);
            let debug = format!("{location:?}");
            assert!(
                !debug.contains("s3cret") && !debug.contains("one@"),
                "{debug}"
            );
        }
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn without_postgres_a_url_is_refused_with_where_postgresql_is_read() {
        let err = Store::open_location(&StoreLocation::parse(
            "postgres://gpuvet:s3cret@db:5432/gpuvet",
        ))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot open the store at `postgres://gpuvet:***@db:5432/gpuvet`: this program reads no PostgreSQL store"
        );
        assert!(err.hint().unwrap().contains("--server URL"));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_url_that_does_not_parse_is_refused_before_connecting() {
        let err = Store::open_location(&StoreLocation::parse(
            "postgres://gpuvet:s3cret@db:notaport/gpuvet",
        ))
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with(
                "cannot open the store at `postgres://gpuvet:***@db:notaport/gpuvet`: the URL does not parse: "
            ),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
        assert!(
            err.hint()
                .unwrap()
                .contains("postgres://USER:PASSWORD@HOST:PORT/DATABASE")
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_server_that_is_not_there_names_the_url_without_its_password() {
        // A port nothing listens on (reserved, and refused at once on loopback).
        let url = "postgres://gpuvet:s3cret@127.0.0.1:1/gpuvet?connect_timeout=5";
        let err = Store::open_location(&StoreLocation::parse(url)).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
        assert!(
            message.starts_with(
                "cannot open the store at `postgres://gpuvet:***@127.0.0.1:1/gpuvet?connect_timeout=5`: error connecting to server: "
            ),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
        assert!(!format!("{err:?}").contains("s3cret"));
        let hint = err.hint().unwrap();
        assert!(hint.contains("connects in clear"), "{hint}");
    }
}
