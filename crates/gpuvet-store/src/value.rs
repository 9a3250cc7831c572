//! The values that go into and come out of the store's SQL on either database, and the
//! one place they are converted: Rust types to [`Value`] for parameters, database
//! columns to [`Value`] for rows, and [`Value`] back to Rust types with [`Row::get`].
//!
//! Both databases see the same four kinds of value, as SQLite stores them: 64-bit
//! integers, doubles, text and NULL. A NaN becomes NULL on the way in (SQLite stores
//! it so; PostgreSQL would keep it), and an unsigned integer above `i64::MAX` is
//! refused rather than wrapped.

/// One parameter or column value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    /// An unsigned integer no column holds; refused when bound.
    TooLarge(u64),
}

/// What went wrong running the store's SQL.
#[derive(Debug)]
pub(crate) enum DbError {
    Sqlite(rusqlite::Error),
    #[cfg(feature = "postgres")]
    Postgres(postgres::Error),
    /// A value the database returned that the store cannot use (or a query that did
    /// not return what it always returns).
    Data(String),
    /// A parameter larger than any integer column holds.
    TooLarge(u64),
}

impl From<rusqlite::Error> for DbError {
    fn from(error: rusqlite::Error) -> Self {
        DbError::Sqlite(error)
    }
}

#[cfg(feature = "postgres")]
impl From<postgres::Error> for DbError {
    fn from(error: postgres::Error) -> Self {
        DbError::Postgres(error)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Value::Int(n.into())
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Self {
        i64::try_from(n).map_or(Value::TooLarge(n), Value::Int)
    }
}

impl From<usize> for Value {
    fn from(n: usize) -> Self {
        Value::from(n as u64)
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Self {
        if x.is_nan() {
            Value::Null
        } else {
            Value::Real(x)
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Self {
        Value::Text(s.clone())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Self {
        value.map_or(Value::Null, Into::into)
    }
}

/// The parameters of one statement, each converted with `Value::from`.
macro_rules! params {
    ($($param:expr),* $(,)?) => {
        [$($crate::value::Value::from($param)),*]
    };
}
pub(crate) use params;

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(n) => ValueRef::Integer(*n),
            Value::Real(x) => ValueRef::Real(*x),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::TooLarge(n) => {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    format!("`{n}` is larger than `i64::MAX`").into(),
                ));
            }
        }))
    }
}

/// One row of a query's result, its columns as [`Value`]s.
#[derive(Debug)]
pub(crate) struct Row(pub(crate) Vec<Value>);

impl Row {
    pub(crate) fn from_sqlite(row: &rusqlite::Row<'_>, columns: usize) -> Result<Row, DbError> {
        use rusqlite::types::ValueRef;
        (0..columns)
            .map(|i| {
                Ok(match row.get_ref(i)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::Int(n),
                    ValueRef::Real(x) => Value::Real(x),
                    ValueRef::Text(bytes) => Value::Text(
                        String::from_utf8(bytes.to_vec())
                            .map_err(|_| DbError::Data(format!("column {i} is not UTF-8")))?,
                    ),
                    ValueRef::Blob(_) => {
                        return Err(DbError::Data(format!("column {i} holds a blob")));
                    }
                })
            })
            .collect::<Result<_, _>>()
            .map(Row)
    }

    /// Takes column `index` (counting from 0) as a `T`; the column reads as NULL after.
    pub(crate) fn get<T: FromValue>(&mut self, index: usize) -> Result<T, DbError> {
        let value = self
            .0
            .get_mut(index)
            .map(|v| std::mem::replace(v, Value::Null))
            .ok_or_else(|| DbError::Data(format!("the row has no column {index}")))?;
        T::from_value(value).map_err(|wrong| DbError::Data(format!("column {index} {wrong}")))
    }
}

impl Value {
    fn describe(&self) -> String {
        match self {
            Value::Null => "NULL".to_owned(),
            Value::Int(n) => format!("the integer `{n}`"),
            Value::Real(x) => format!("the number `{x}`"),
            Value::Text(_) => "text".to_owned(),
            Value::TooLarge(n) => format!("the integer `{n}`"),
        }
    }
}

/// Why a value does not read as the type asked for: what it holds and what was
/// wanted ("holds text, not an integer"). [`Row::get`] names the column before it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("holds {held}, not {wanted}")]
pub(crate) struct WrongType {
    held: String,
    wanted: &'static str,
}

/// A Rust type a column reads as.
pub(crate) trait FromValue: Sized {
    /// The value as `Self`, or what is wrong with it.
    fn from_value(value: Value) -> Result<Self, WrongType>;
}

fn wrong(value: &Value, wanted: &'static str) -> WrongType {
    WrongType {
        held: value.describe(),
        wanted,
    }
}

impl FromValue for i64 {
    fn from_value(value: Value) -> Result<Self, WrongType> {
        match value {
            Value::Int(n) => Ok(n),
            other => Err(wrong(&other, "an integer")),
        }
    }
}

impl FromValue for u64 {
    fn from_value(value: Value) -> Result<Self, WrongType> {
        match value {
            Value::Int(n) if n >= 0 => Ok(n as u64),
            other => Err(wrong(&other, "an integer from 0 up")),
        }
    }
}

impl FromValue for u32 {
    fn from_value(value: Value) -> Result<Self, WrongType> {
        match value {
            Value::Int(n) if u32::try_from(n).is_ok() => Ok(n as u32),
            other => Err(wrong(&other, "an integer from 0 to 4294967295")),
        }
    }
}

impl FromValue for f64 {
    fn from_value(value: Value) -> Result<Self, WrongType> {
        match value {
            Value::Real(x) => Ok(x),
            Value::Int(n) => Ok(n as f64),
            other => Err(wrong(&other, "a number")),
        }
    }
}

impl FromValue for String {
    fn from_value(value: Value) -> Result<Self, WrongType> {
        match value {
            Value::Text(s) => Ok(s),
            other => Err(wrong(&other, "text")),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: Value) -> Result<Self, WrongType> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<T: FromValue>(value: Value) -> Result<T, DbError> {
        Row(vec![value]).get(0)
    }

    #[test]
    fn parameters_keep_what_both_databases_hold() {
        assert_eq!(Value::from(f64::NAN), Value::Null);
        assert_eq!(Value::from(1.5), Value::Real(1.5));
        assert_eq!(Value::from(u64::MAX), Value::TooLarge(u64::MAX));
        assert_eq!(Value::from(i64::MAX as u64), Value::Int(i64::MAX));
        assert_eq!(Value::from(None::<&str>), Value::Null);
        assert_eq!(Value::from(Some("a")), Value::Text("a".into()));
        assert_eq!(Value::from(7_u32), Value::Int(7));
    }

    #[test]
    fn columns_convert_to_rust_types_or_say_why_not() {
        assert_eq!(get::<u64>(Value::Int(5)).unwrap(), 5);
        assert_eq!(get::<f64>(Value::Int(2)).unwrap(), 2.0);
        assert_eq!(get::<Option<String>>(Value::Null).unwrap(), None);
        let message = |e: DbError| match e {
            DbError::Data(message) => message,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            message(get::<u64>(Value::Int(-1)).unwrap_err()),
            "column 0 holds the integer `-1`, not an integer from 0 up"
        );
        assert_eq!(
            message(get::<u32>(Value::Int(1 << 40)).unwrap_err()),
            "column 0 holds the integer `1099511627776`, not an integer from 0 to 4294967295"
        );
        assert_eq!(
            message(get::<String>(Value::Real(1.0)).unwrap_err()),
            "column 0 holds the number `1`, not text"
        );
        assert_eq!(
            message(get::<i64>(Value::Null).unwrap_err()),
            "column 0 holds NULL, not an integer"
        );
        assert_eq!(
            message(Row(vec![]).get::<i64>(2).unwrap_err()),
            "the row has no column 2"
        );
    }
}
