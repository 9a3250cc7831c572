//! Writes need the server's bearer token (`Authorization: Bearer TOKEN`).

use axum::http::{HeaderMap, StatusCode, header};
use gpuvet_model::env_vars::REPORT_TOKEN as TOKEN_ENV;

use crate::error::ApiError;

/// `Ok` when `headers` carry `token`; a 401 that says what is missing otherwise.
pub(crate) fn require_token(headers: &HeaderMap, token: Option<&str>) -> Result<(), ApiError> {
    let unauthorized = |message: &str, hint: String| {
        ApiError::new(StatusCode::UNAUTHORIZED, message).with_hint(hint)
    };
    let Some(token) = token else {
        return Err(unauthorized(
            "this server takes no writes: it was started without a token",
            format!(
                "start `gpuvet serve` with `{TOKEN_ENV}` set to take pushed reports and events"
            ),
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match given {
        None => Err(unauthorized(
            "a write needs the server's token in an `Authorization: Bearer` header",
            format!("set `{TOKEN_ENV}` on the node to the server's token"),
        )),
        Some(given) if !same_secret(given.as_bytes(), token.as_bytes()) => Err(unauthorized(
            "the token does not match the server's",
            format!("set `{TOKEN_ENV}` on the node to the token the server was started with"),
        )),
        Some(_) => Ok(()),
    }
}

/// Compares in time that depends only on the lengths, so that a wrong guess does not
/// tell how much of it was right.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(value: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = value {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn the_right_bearer_token_passes_and_anything_else_is_a_401_with_a_hint() {
        assert!(require_token(&headers(Some("Bearer s3cret")), Some("s3cret")).is_ok());
        for (given, expected) in [
            (None, "needs the server's token"),
            (Some("Bearer wrong!"), "does not match"),
            (Some("Bearer s3cre"), "does not match"),
            (Some("s3cret"), "needs the server's token"),
            (Some("Basic s3cret"), "needs the server's token"),
        ] {
            let error = require_token(&headers(given), Some("s3cret")).unwrap_err();
            assert_eq!(error.status, StatusCode::UNAUTHORIZED);
            assert!(
                error.message.contains(expected),
                "{given:?}: {}",
                error.message
            );
            assert!(error.hint.unwrap().contains(TOKEN_ENV));
        }
    }

    #[test]
    fn a_server_without_a_token_refuses_every_write() {
        let error = require_token(&headers(Some("Bearer anything")), None).unwrap_err();
        assert_eq!(error.status, StatusCode::UNAUTHORIZED);
        assert!(
            error.message.contains("takes no writes"),
            "{}",
            error.message
        );
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(same_secret(b"", b""));
    }
}
