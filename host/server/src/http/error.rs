//! [`ApiError`]: every error the API answers, as `{"error": {"code", "message"}}` with the
//! status that fits. Each kind of the library's errors maps to its status here, in one place.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use wfhost_client::wire::{ErrorBody, ErrorDetail};

use wfhost::{Error, ErrorKind};

/// An error answer.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// `400 bad_request`: the request itself is wrong (JSON, a parameter, an id).
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

/// The status a library error answers with.
pub(crate) fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadModule
        | ErrorKind::UnknownEntry
        | ErrorKind::InvalidInput
        | ErrorKind::Trap
        | ErrorKind::BadOutput => StatusCode::BAD_REQUEST,
        ErrorKind::UnknownModule
        | ErrorKind::UnknownWorkflow
        | ErrorKind::UnknownSchedule
        | ErrorKind::NoSuchProcess => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::NotAllowed => StatusCode::FORBIDDEN,
        // A full mailbox, too many processes, a payload past the limit: the request may work
        // later, or smaller.
        ErrorKind::Limit => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::ShuttingDown | ErrorKind::Unavailable | ErrorKind::Store => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        // Failed, Terminated, Cancelled, Io, Config, Nondeterminism, Damaged, and any kind a
        // newer engine adds.
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        ApiError::new(
            status_of(error.kind()),
            error.kind().name(),
            error.message(),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        // Worth asking again soon (not a 429: a full mailbox may stay full, and a payload past
        // its limit always is).
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_status_and_the_client_reads_its_code_back() {
        for kind in ErrorKind::ALL {
            let error = ApiError::from(Error::new(kind, "x"));
            assert!(error.status.is_client_error() || error.status.is_server_error());
            assert_eq!(ErrorKind::from_name(error.code), Some(kind));
        }
        assert_eq!(status_of(ErrorKind::UnknownWorkflow), StatusCode::NOT_FOUND);
        assert_eq!(status_of(ErrorKind::Conflict), StatusCode::CONFLICT);
    }
}
