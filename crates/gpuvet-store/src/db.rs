//! One way to run the store's SQL on either database: a [`Db`] is an SQLite connection
//! or a PostgreSQL client, and every query of the store is written once, against it.
//!
//! The SQL is the common dialect of both, with `?` or `?N` placeholders (rewritten to
//! PostgreSQL's `$N` here) and the [`Value`]s of `value.rs` as parameters and results.
//! Where the two databases differ, and where that is handled:
//!
//! - the schema's types (`INTEGER PRIMARY KEY` or an identity `BIGINT`, `REAL` or
//!   `DOUBLE PRECISION`, text ordered by byte): `schema.rs` and `schema_pg.rs`;
//! - values: a NaN stored as NULL, an unsigned integer above `i64::MAX` refused, each
//!   parameter sent as the type PostgreSQL inferred for it: `value.rs`;
//! - how a write transaction begins, the locks PostgreSQL needs where SQLite has one
//!   writer, and how `LIMIT` says "all": the "dialect" block below;
//! - a batch of writes in one transaction ([`Db::each_apart`]): savepoints, which both
//!   spell alike, keep one item's failure from undoing its neighbours;
//! - in the shared SQL, one spelling: `CAST(SUM(…) AS BIGINT)`, since PostgreSQL's sum
//!   of a `BIGINT` is a `NUMERIC` (`overview.rs`).

use std::fmt;

use crate::StoreError;
use crate::error::During;
pub(crate) use crate::value::{DbError, Row, Value};

/// An open connection to the store's database.
pub(crate) enum Db {
    Sqlite(rusqlite::Connection),
    /// In a `RefCell`: the client needs `&mut` for every query, the store's reads take
    /// `&self`, and a `Store` is used by one thread at a time (`Send`, not `Sync`).
    /// Boxed: the client is three times the size of an SQLite connection.
    #[cfg(feature = "postgres")]
    Postgres(Box<std::cell::RefCell<crate::pg::PgSession>>),
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Db::Sqlite(conn) => f.debug_tuple("Sqlite").field(conn).finish(),
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => f.debug_tuple("Postgres").finish_non_exhaustive(),
        }
    }
}

/// Which ids [`Db::lock_ids`] locks: reports', events' and attempts' ids are separate
/// namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum IdSpace {
    Report = 1,
    Event = 2,
    /// An attempt's job, node and number ([`crate::write::attempt_key`]).
    Attempt = 3,
    /// An event's repeat key: two repeats stored at once fold into one row.
    Repeat = 4,
}

impl Db {
    pub(crate) fn sqlite(conn: rusqlite::Connection) -> Db {
        Db::Sqlite(conn)
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(client: postgres::Client) -> Db {
        Db::Postgres(Box::new(std::cell::RefCell::new(
            crate::pg::PgSession::new(client),
        )))
    }

    /// Runs one statement; returns how many rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        check_params(params)?;
        match self {
            Db::Sqlite(conn) => {
                let mut statement = conn.prepare_cached(sql)?;
                let changed = statement.execute(rusqlite::params_from_iter(params))?;
                Ok(changed as u64)
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(session) => session.borrow_mut().execute(sql, params),
        }
    }

    /// Runs one query; returns all its rows.
    pub(crate) fn query(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, DbError> {
        check_params(params)?;
        match self {
            Db::Sqlite(conn) => {
                let mut statement = conn.prepare_cached(sql)?;
                let columns = statement.column_count();
                let mut rows = statement.query(rusqlite::params_from_iter(params))?;
                let mut all = Vec::new();
                while let Some(row) = rows.next()? {
                    all.push(Row::from_sqlite(row, columns)?);
                }
                Ok(all)
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(session) => session.borrow_mut().query(sql, params),
        }
    }

    /// The first row of a query, if any.
    pub(crate) fn query_opt(&self, sql: &str, params: &[Value]) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The first row of a query that always returns one (an aggregate, `RETURNING`).
    pub(crate) fn query_one(&self, sql: &str, params: &[Value]) -> Result<Row, DbError> {
        self.query_opt(sql, params)?
            .ok_or_else(|| DbError::Data("the query returned no row".to_owned()))
    }

    /// Runs `body` in one write transaction: committed when it returns `Ok`, rolled
    /// back when it returns an error (or panics). Two writes never interleave inside
    /// SQLite's; PostgreSQL's run side by side, so `body` takes the locks it needs
    /// ([`Db::lock_attempt_numbers`], [`Db::lock_ids`]).
    pub(crate) fn write<T>(
        &self,
        action: &'static str,
        body: impl FnOnce(&Db) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.batch(self.begin_write()).during(action)?;
        let mut open = OpenTransaction {
            db: self,
            open: true,
        };
        let value = body(self)?;
        self.batch("COMMIT").during(action)?;
        open.open = false;
        Ok(value)
    }

    /// Inside a write: runs `body` on each of `items` in turn, each behind a savepoint
    /// of its own, so that an item whose body fails undoes only its own changes and
    /// the others stay in the transaction. Returns each item's outcome; an error of
    /// its own when the savepoints themselves fail (a broken connection, or a
    /// transaction the database already ended), which leaves nothing to keep.
    pub(crate) fn each_apart<I, T>(
        &self,
        action: &'static str,
        items: impl IntoIterator<Item = I>,
        mut body: impl FnMut(&Db, I) -> Result<T, StoreError>,
    ) -> Result<Vec<Result<T, StoreError>>, StoreError> {
        // One savepoint, renewed after each item that succeeds (one round trip on
        // PostgreSQL), and rolled back to (which keeps it) after each that fails.
        self.batch("SAVEPOINT item").during(action)?;
        let mut outcomes = Vec::new();
        for item in items {
            let outcome = body(self, item);
            let next = if outcome.is_ok() {
                "RELEASE SAVEPOINT item; SAVEPOINT item"
            } else {
                "ROLLBACK TO SAVEPOINT item"
            };
            self.batch(next).during(action)?;
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Runs SQL without parameters or rows (transaction control).
    fn batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            #[cfg(feature = "postgres")]
            Db::Postgres(session) => session.borrow_mut().batch(sql),
        }
    }

    // The dialect: what the two databases do differently at run time.

    /// SQLite's `BEGIN IMMEDIATE` takes the one write lock of the file at once (waiting
    /// out the busy timeout), so a write never fails halfway on a lock and two writes
    /// never interleave. PostgreSQL locks rows and tables as a transaction reaches them.
    fn begin_write(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "BEGIN IMMEDIATE",
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => "BEGIN",
        }
    }

    /// Inside a write, before reading the highest attempt number: no other writer adds
    /// an attempt until this transaction ends, so two never take the same number.
    /// (On PostgreSQL, `SHARE ROW EXCLUSIVE` conflicts with itself and with every
    /// insert into `attempts`, and not with reads.)
    pub(crate) fn lock_attempt_numbers(&self) -> Result<(), DbError> {
        match self {
            Db::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => self
                .execute("LOCK TABLE attempts IN SHARE ROW EXCLUSIVE MODE", &[])
                .map(drop),
        }
    }

    /// Inside a write, before looking up items by their own ids: a writer of the same
    /// id waits until this transaction ends, so "look it up, else insert it" holds for
    /// two servers receiving one report at once. On PostgreSQL, a transaction-level
    /// advisory lock per id (its 32-bit hash), all taken in one statement and in one
    /// order (by namespace, then hash), so that two writers, each holding some ids of
    /// a batch, never wait on each other in a circle; a collision only makes one wait.
    /// Call it once per transaction, before any item's rows: a lock taken later, after
    /// rows of other items, could close such a circle.
    #[cfg_attr(not(feature = "postgres"), expect(unused_variables))]
    pub(crate) fn lock_ids<'a>(
        &self,
        ids: impl IntoIterator<Item = (IdSpace, &'a str)>,
    ) -> Result<(), DbError> {
        match self {
            // One writer at a time: nothing to lock.
            Db::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => {
                let mut keys: Vec<(IdSpace, i32)> = ids
                    .into_iter()
                    .map(|(space, id)| (space, crate::pg::id_hash(id)))
                    .collect();
                if keys.is_empty() {
                    return Ok(());
                }
                keys.sort_unstable();
                keys.dedup();
                // The keys are numbers this function made, so they are written into
                // the text (as a simple query, which is not kept as a prepared
                // statement per list of keys).
                let rows = keys
                    .iter()
                    .map(|(space, key)| format!("({}, {key})", *space as i32))
                    .collect::<Vec<_>>()
                    .join(", ");
                self.batch(&format!(
                    "SELECT pg_advisory_xact_lock(space, key)
                     FROM (SELECT space, key FROM (VALUES {rows}) AS ids (space, key)
                           ORDER BY space, key) AS in_order"
                ))
            }
        }
    }

    /// The value of `LIMIT ?` that keeps `limit` rows, or all of them: SQLite reads a
    /// negative limit as none and refuses NULL; PostgreSQL reads NULL as `LIMIT ALL`
    /// and refuses a negative one.
    pub(crate) fn limit(&self, limit: Option<usize>) -> Value {
        match (limit, self) {
            (Some(n), _) => Value::from(n),
            (None, Db::Sqlite(_)) => Value::Int(-1),
            #[cfg(feature = "postgres")]
            (None, Db::Postgres(_)) => Value::Null,
        }
    }
}

/// Rolls an unfinished write back: after an error, or while unwinding from a panic.
struct OpenTransaction<'a> {
    db: &'a Db,
    open: bool,
}

impl Drop for OpenTransaction<'_> {
    fn drop(&mut self) {
        if self.open {
            // The error that ended the transaction is the one to report; a rollback
            // that fails leaves nothing more to do (PostgreSQL and SQLite both end a
            // transaction whose connection broke).
            let _ = self.db.batch("ROLLBACK");
        }
    }
}

/// Refuses a parameter the databases cannot hold, before either sees it.
fn check_params(params: &[Value]) -> Result<(), DbError> {
    match params.iter().find_map(|p| match p {
        Value::TooLarge(n) => Some(*n),
        _ => None,
    }) {
        Some(n) => Err(DbError::TooLarge(n)),
        None => Ok(()),
    }
}
