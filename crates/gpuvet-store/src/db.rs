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
//! - in the shared SQL, one spelling: `CAST(SUM(…) AS BIGINT)`, since PostgreSQL's sum
//!   of a `BIGINT` is a `NUMERIC` (`overview.rs`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use postgres::types::{ToSql, Type};

use crate::StoreError;
use crate::error::During;
pub(crate) use crate::value::{DbError, Row, Value};

/// An open connection to the store's database.
pub(crate) enum Db {
    Sqlite(rusqlite::Connection),
    /// In a `RefCell`: the client needs `&mut` for every query, the store's reads take
    /// `&self`, and a `Store` is used by one thread at a time (`Send`, not `Sync`).
    /// Boxed: the client is three times the size of an SQLite connection.
    Postgres(Box<RefCell<PgSession>>),
}

/// A PostgreSQL client and the statements it has prepared, by their SQL.
pub(crate) struct PgSession {
    client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Db::Sqlite(conn) => f.debug_tuple("Sqlite").field(conn).finish(),
            Db::Postgres(_) => f.debug_tuple("Postgres").finish_non_exhaustive(),
        }
    }
}

/// Which ids [`Db::lock_ids`] locks: reports' and events' ids are separate namespaces.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdSpace {
    Report = 1,
    Event = 2,
}

impl Db {
    pub(crate) fn sqlite(conn: rusqlite::Connection) -> Db {
        Db::Sqlite(conn)
    }

    pub(crate) fn postgres(client: postgres::Client) -> Db {
        Db::Postgres(Box::new(RefCell::new(PgSession {
            client,
            statements: HashMap::new(),
        })))
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
            Db::Postgres(session) => {
                let mut session = session.borrow_mut();
                let statement = session.statement(sql)?;
                let bound = bind(statement.params(), params)?;
                Ok(session.client.execute(&statement, &refs(&bound))?)
            }
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
            Db::Postgres(session) => {
                let mut session = session.borrow_mut();
                let statement = session.statement(sql)?;
                let bound = bind(statement.params(), params)?;
                let rows = session.client.query(&statement, &refs(&bound))?;
                rows.iter().map(Row::from_postgres).collect()
            }
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

    /// Runs SQL without parameters or rows (transaction control).
    fn batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            Db::Postgres(session) => Ok(session.borrow_mut().client.batch_execute(sql)?),
        }
    }

    // The dialect: what the two databases do differently at run time.

    /// SQLite's `BEGIN IMMEDIATE` takes the one write lock of the file at once (waiting
    /// out the busy timeout), so a write never fails halfway on a lock and two writes
    /// never interleave. PostgreSQL locks rows and tables as a transaction reaches them.
    fn begin_write(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "BEGIN IMMEDIATE",
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
            Db::Postgres(_) => self
                .execute("LOCK TABLE attempts IN SHARE ROW EXCLUSIVE MODE", &[])
                .map(drop),
        }
    }

    /// Inside a write, before looking up items by their own ids: a writer of the same
    /// id waits until this transaction ends, so "look it up, else insert it" holds for
    /// two servers receiving one report at once. On PostgreSQL, a transaction-level
    /// advisory lock per id (its 32-bit hash, taken in order, so two writers never
    /// wait on each other in a circle; a collision only makes one wait).
    pub(crate) fn lock_ids<'a>(
        &self,
        space: IdSpace,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), DbError> {
        if let Db::Postgres(_) = self {
            let mut keys: Vec<i32> = ids.into_iter().map(id_hash).collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                self.execute(
                    "SELECT pg_advisory_xact_lock(?, ?)",
                    &[Value::Int(space as i64), Value::Int(key.into())],
                )?;
            }
        }
        Ok(())
    }

    /// The value of `LIMIT ?` that keeps `limit` rows, or all of them: SQLite reads a
    /// negative limit as none and refuses NULL; PostgreSQL reads NULL as `LIMIT ALL`
    /// and refuses a negative one.
    pub(crate) fn limit(&self, limit: Option<usize>) -> Value {
        match (limit, self) {
            (Some(n), _) => Value::from(n),
            (None, Db::Sqlite(_)) => Value::Int(-1),
            (None, Db::Postgres(_)) => Value::Null,
        }
    }
}

impl PgSession {
    /// The prepared statement of `sql` (written with `?` placeholders).
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(&numbered_placeholders(sql))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
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

/// Each parameter as the Rust type PostgreSQL's client sends for the type the server
/// inferred for it.
fn bind(types: &[Type], params: &[Value]) -> Result<Vec<Box<dyn ToSql + Sync>>, DbError> {
    if types.len() != params.len() {
        return Err(DbError::Data(format!(
            "the query takes {} parameter(s) but was given {}",
            types.len(),
            params.len()
        )));
    }
    types
        .iter()
        .zip(params)
        .map(|(ty, value)| value.to_postgres(ty))
        .collect()
}

fn refs(bound: &[Box<dyn ToSql + Sync>]) -> Vec<&(dyn ToSql + Sync)> {
    bound.iter().map(|b| b.as_ref()).collect()
}

/// `sql` with SQLite's placeholders as PostgreSQL's: `?N` becomes `$N`, and each bare
/// `?` the next number. Quoted text and names are left alone.
pub(crate) fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut next = 0;
    let mut quote = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), _) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), _) => out.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '?') => {
                out.push('$');
                if chars.peek().is_some_and(char::is_ascii_digit) {
                    while let Some(digit) = chars.next_if(char::is_ascii_digit) {
                        out.push(digit);
                    }
                } else {
                    next += 1;
                    out.push_str(&next.to_string());
                }
            }
            (None, _) => out.push(c),
        }
    }
    out
}

/// FNV-1a of an id, as the key of its advisory lock.
fn id_hash(id: &str) -> i32 {
    let hash = id.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_outside_quotes() {
        assert_eq!(
            numbered_placeholders("SELECT a FROM t WHERE a = ? AND b = ? LIMIT ?"),
            "SELECT a FROM t WHERE a = $1 AND b = $2 LIMIT $3"
        );
        assert_eq!(
            numbered_placeholders("VALUES (?1, ?2, ?12, ?2)"),
            "VALUES ($1, $2, $12, $2)"
        );
        assert_eq!(
            numbered_placeholders("SELECT '?', \"a?\" FROM t WHERE x = ? AND y = 'it''s ?'"),
            "SELECT '?', \"a?\" FROM t WHERE x = $1 AND y = 'it''s ?'"
        );
    }

    #[test]
    fn id_hashes_differ_and_are_stable() {
        assert_eq!(id_hash("") as u32, 0x811c_9dc5);
        assert_eq!(id_hash("a") as u32, 0xe40c_292c);
        assert_ne!(id_hash("r-1"), id_hash("r-2"));
    }
}
