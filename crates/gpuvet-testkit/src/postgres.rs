//! Throwaway PostgreSQL databases for tests, on the server `GPUVET_TEST_POSTGRES_URL`
//! names (`.ci/run` starts one). Each test gets a database of its own, dropped at the
//! end, so tests run in parallel; a missing variable fails the test, never skips it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable that names the test server, as a URL whose user may create databases.
pub const POSTGRES_URL: &str = "GPUVET_TEST_POSTGRES_URL";

/// A database name no other test (in this process or another) uses.
fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "gpuvet_test_{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A database on the test server, created for one test and dropped after it.
pub struct TestDatabase {
    admin_url: String,
    name: String,
    /// The URL of the new database.
    pub url: String,
}

/// Names the database; never the URLs, which hold the password.
impl std::fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDatabase")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TestDatabase {
    /// Creates a database of its own on the test server; panics naming the variable
    /// when it is not set.
    pub fn create() -> TestDatabase {
        let admin_url = std::env::var(POSTGRES_URL).unwrap_or_else(|_| {
            panic!(
                "set {POSTGRES_URL} to a PostgreSQL URL whose user may create databases \
                 (`.ci/run` starts such a server)"
            )
        });
        let name = unique_name();
        // With a locale whose order of text is not by byte (`B` after `b`, `_` before
        // `-`), as a server's may be: the store's lists must not depend on it.
        connect(&admin_url)
            .batch_execute(&format!(
                "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8'
                 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
            ))
            .unwrap();
        let url = with_database(&admin_url, &name);
        TestDatabase {
            admin_url,
            name,
            url,
        }
    }

    /// A plain connection to the database.
    pub fn client(&self) -> postgres::Client {
        connect(&self.url)
    }

    /// The test server's URL, for what only it may do.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // FORCE: a store a failed test left open does not keep its database.
        if let Ok(mut admin) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

pub fn connect(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to the test server ({POSTGRES_URL}): {e}"))
}

/// `url` naming database `name` instead of its own.
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host_start = rest.rfind('@').map_or(0, |at| at + 1);
    let query_start = rest[host_start..]
        .find('?')
        .map_or(rest.len(), |q| host_start + q);
    let host_end = rest[host_start..query_start]
        .find('/')
        .map_or(query_start, |slash| host_start + slash);
    format!(
        "{scheme}://{}/{name}{}",
        &rest[..host_end],
        &rest[query_start..]
    )
}
