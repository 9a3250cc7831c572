//! Request extractors that answer bad input with the API's JSON errors (axum's own
//! answer in plain text), and refuse text the stores cannot keep.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Query parameters, or a 400 that names the bad one.
#[derive(Debug)]
pub(crate) struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if parts.uri.query().is_some_and(has_nul) {
            return Err(nul_refused());
        }
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Query(value))
            .map_err(|rejection: QueryRejection| {
                ApiError::bad_request(rejection.body_text())
                    .with_hint("see the parameters each endpoint takes in /api/v1/openapi.json")
            })
    }
}

/// Path parameters, or a 400 that says which part of the path is bad.
#[derive(Debug)]
pub(crate) struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if has_nul(parts.uri.path()) {
            return Err(nul_refused());
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Path(value))
            .map_err(|rejection: PathRejection| ApiError::bad_request(rejection.body_text()))
    }
}

/// A JSON body, or a 400 (a 415 without the JSON content type) that says what is wrong.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(ApiError::new(rejection.status(), rejection.body_text())),
        }
    }
}

/// A NUL character, raw or percent-encoded. PostgreSQL cannot store one in text, so
/// neither store is given one.
fn has_nul(text: &str) -> bool {
    text.contains('\0') || text.to_ascii_lowercase().contains("%00")
}

fn nul_refused() -> ApiError {
    ApiError::bad_request("a name or value holds a NUL character, which gpuvet never stores")
}

/// Refuses a decoded JSON body that holds a NUL character in any string.
pub(crate) fn refuse_nul_in(value: &serde_json::Value) -> Result<(), ApiError> {
    let nul = match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => return items.iter().try_for_each(refuse_nul_in),
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                if key.contains('\0') {
                    return Err(nul_refused());
                }
                refuse_nul_in(item)?;
            }
            false
        }
        _ => false,
    };
    if nul { Err(nul_refused()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nul_is_found_raw_and_percent_encoded() {
        assert!(has_nul("job=a%00b"));
        assert!(has_nul("/api/v1/jobs/a%00"));
        assert!(has_nul("a\0b"));
        assert!(!has_nul("job=a%20b"));
    }

    #[test]
    fn a_nul_anywhere_in_a_json_body_is_refused() {
        assert!(refuse_nul_in(&json!({"a": ["x", {"b": "ok"}], "n": 1})).is_ok());
        assert!(refuse_nul_in(&json!({"a": ["x", {"b": "o\u{0}k"}]})).is_err());
        assert!(refuse_nul_in(&json!({"a\u{0}": 1})).is_err());
    }
}
