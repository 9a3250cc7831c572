//! The server's errors: [`ServerError`] for starting and running it, and [`ApiError`],
//! the JSON error every API request can answer with.
//!
//! An API error's body is `{"error": {"status": 404, "message": "...", "hint": "..."}}`.
//! Store errors are sorted into the caller's mistakes (400, 409), the server's state
//! (503 when the store is busy) and the server's bugs or broken data (500).

use std::net::SocketAddr;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gpuvet_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on `{addr}`: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("the server stopped: {0}")]
    Io(std::io::Error),
    /// A TLS certificate or key file that cannot be served.
    #[error("cannot use `{}` for TLS: {reason}", path.display())]
    Tls {
        path: std::path::PathBuf,
        reason: String,
    },
}

/// An error answer of the API.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub hint: Option<String>,
    /// Seconds for a `Retry-After` header (a `429`).
    pub retry_after_secs: Option<u64>,
}

/// The JSON body of an error.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// The HTTP status, repeated.
    pub status: u16,
    pub message: String,
    /// What to do next, when there is something specific to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            hint: None,
            retry_after_secs: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let status = match &error {
            StoreError::IdConflict { .. } => StatusCode::CONFLICT,
            StoreError::Encode { .. } | StoreError::Mismatch { .. } => StatusCode::BAD_REQUEST,
            _ if error.is_busy() => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            hint: error.hint().map(str::to_owned),
            message: error.to_string(),
            retry_after_secs: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                status: self.status.as_u16(),
                message: self.message,
                hint: self.hint,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs),
            );
        }
        response
    }
}
