//! The PostgreSQL side of the store, built only with the feature `postgres` (the fleet
//! server's store; a node keeps SQLite and links no PostgreSQL client): a client
//! session with its prepared statements, the conversion of [`Value`]s to and from
//! PostgreSQL's types, the placeholders and advisory-lock keys PostgreSQL needs, TLS
//! as libpq's `sslmode` asks for it (`tls.rs`), and the errors of opening one
//! (`error.rs`).

pub(crate) mod error;
pub(crate) mod tls;

use std::collections::HashMap;

use postgres::types::{ToSql, Type};

use crate::value::{DbError, Row, Value};

/// A PostgreSQL client and the statements it has prepared, by their SQL.
pub(crate) struct PgSession {
    client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
}

impl PgSession {
    pub(crate) fn new(client: postgres::Client) -> PgSession {
        PgSession {
            client,
            statements: HashMap::new(),
        }
    }

    /// The prepared statement of `sql` (written with `?` placeholders).
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(&numbered_placeholders(sql))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    pub(crate) fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        let statement = self.statement(sql)?;
        let bound = bind(statement.params(), params)?;
        Ok(self.client.execute(&statement, &refs(&bound))?)
    }

    pub(crate) fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, DbError> {
        let statement = self.statement(sql)?;
        let bound = bind(statement.params(), params)?;
        let rows = self.client.query(&statement, &refs(&bound))?;
        rows.iter().map(Row::from_postgres).collect()
    }

    /// Runs SQL without parameters or rows (transaction control).
    pub(crate) fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        Ok(self.client.batch_execute(sql)?)
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
pub(crate) fn id_hash(id: &str) -> i32 {
    let hash = id.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash as i32
}

impl Value {
    /// This value as what PostgreSQL's client sends for a parameter of type `ty`.
    /// PostgreSQL infers each parameter's type from the statement: an integer column
    /// (`BIGINT`) takes an `i64`, a function's `integer` argument an `i32`, and so on.
    pub(crate) fn to_postgres(&self, ty: &Type) -> Result<Box<dyn ToSql + Sync>, DbError> {
        let mismatch = || {
            DbError::Data(format!(
                "cannot pass {self:?} as a PostgreSQL `{ty}` parameter"
            ))
        };
        let int = |n: i64| -> Result<Box<dyn ToSql + Sync>, DbError> {
            Ok(match *ty {
                Type::INT8 => Box::new(n),
                Type::INT4 => Box::new(i32::try_from(n).map_err(|_| mismatch())?),
                Type::INT2 => Box::new(i16::try_from(n).map_err(|_| mismatch())?),
                Type::FLOAT8 => Box::new(n as f64),
                _ => return Err(mismatch()),
            })
        };
        Ok(match self {
            Value::Null => match *ty {
                Type::INT8 => Box::new(None::<i64>),
                Type::INT4 => Box::new(None::<i32>),
                Type::INT2 => Box::new(None::<i16>),
                Type::FLOAT8 => Box::new(None::<f64>),
                Type::FLOAT4 => Box::new(None::<f32>),
                Type::BOOL => Box::new(None::<bool>),
                _ if <String as ToSql>::accepts(ty) => Box::new(None::<String>),
                _ => return Err(mismatch()),
            },
            Value::Int(n) => int(*n)?,
            Value::Real(x) => match *ty {
                Type::FLOAT8 => Box::new(*x),
                Type::FLOAT4 => Box::new(*x as f32),
                _ => return Err(mismatch()),
            },
            Value::Text(s) if <String as ToSql>::accepts(ty) => Box::new(s.clone()),
            Value::Text(_) | Value::TooLarge(_) => return Err(mismatch()),
        })
    }
}

impl Value {
    fn from_int(n: impl Into<i64>) -> Value {
        Value::Int(n.into())
    }

    fn from_float(x: f32) -> Value {
        Value::from(f64::from(x))
    }
}

impl Row {
    /// Reads each column by its PostgreSQL type. The store's schema uses `BIGINT`,
    /// `DOUBLE PRECISION` and `TEXT`, and its queries cast what would come out as
    /// another type (`SUM` of a `BIGINT` is a `NUMERIC`).
    pub(crate) fn from_postgres(row: &postgres::Row) -> Result<Row, DbError> {
        row.columns()
            .iter()
            .enumerate()
            .map(|(i, column)| {
                let ty = column.type_();
                Ok(match *ty {
                    Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
                    Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(Value::from_int),
                    Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(Value::from_int),
                    Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::from),
                    Type::FLOAT4 => row.try_get::<_, Option<f32>>(i)?.map(Value::from_float),
                    Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(Value::from_int),
                    _ if <String as postgres::types::FromSql>::accepts(ty) => {
                        row.try_get::<_, Option<String>>(i)?.map(Value::Text)
                    }
                    _ => {
                        return Err(DbError::Data(format!(
                            "column {i} (`{}`) has the PostgreSQL type `{ty}`, which the store does not read",
                            column.name()
                        )));
                    }
                }
                .unwrap_or(Value::Null))
            })
            .collect::<Result<_, _>>()
            .map(Row)
    }
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

    #[test]
    fn postgres_parameters_follow_the_inferred_type() {
        assert!(Value::Int(1).to_postgres(&Type::INT8).is_ok());
        assert!(Value::Int(1).to_postgres(&Type::INT4).is_ok());
        assert!(Value::Int(i64::MAX).to_postgres(&Type::INT4).is_err());
        assert!(Value::Null.to_postgres(&Type::TEXT).is_ok());
        assert!(Value::Text("x".into()).to_postgres(&Type::INT8).is_err());
        assert!(Value::Real(1.0).to_postgres(&Type::TEXT).is_err());
    }
}
