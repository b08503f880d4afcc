//! What handlers take from a request, each refusal an [`ApiError`] that says what was wrong:
//! a JSON body (whatever its content type says: `curl -d` sends a form's), query parameters,
//! and a workflow's id from the path.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::state::AppState;
use std::sync::Arc;

/// A body read as JSON of type `T`.
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let RawBody(bytes) = RawBody::from_request(request, state).await?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| {
            ApiError::bad_request(format!(
                "the body is not the JSON this route takes: {e} (see GET /v1/openapi.json)"
            ))
        })
    }
}

/// A body, whole, within the route's limit.
pub(crate) struct RawBody(pub(crate) Bytes);

impl FromRequest<Arc<AppState>> for RawBody {
    type Rejection = ApiError;

    /// Read within the request timeout: a client that sends its body a byte a minute holds
    /// its connection no longer than one that sends it at once.
    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let limit = state.request_timeout;
        match tokio::time::timeout(limit, Bytes::from_request(request, state)).await {
            Ok(read) => read.map(RawBody).map_err(body_error),
            Err(_) => Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!("the body did not arrive within {limit:?}"),
            )),
        }
    }
}

/// Why a body could not be read: past the limit (`413`), or cut off.
fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return too_large();
    }
    ApiError::bad_request(format!(
        "the body could not be read: {}",
        rejection.body_text()
    ))
}

/// A body past the route's limit.
pub(crate) fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        "the body is larger than this server takes on this route (its --max-body, or \
         --max-module-size for modules)",
    )
}

/// Query parameters read as `T`.
pub(crate) struct QueryParams<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(params)| QueryParams(params))
            .map_err(|e: QueryRejection| {
                ApiError::bad_request(format!(
                    "the query parameters are not what this route takes: {} (see GET \
                     /v1/openapi.json)",
                    e.body_text()
                ))
            })
    }
}

/// A workflow's id, the path's one parameter, percent-decoded (children's ids hold `/`:
/// `order-42%2F3.0`).
pub(crate) struct WorkflowId(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for WorkflowId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e: PathRejection| {
                ApiError::bad_request(format!("the workflow's id in the path: {}", e.body_text()))
            })?;
        if id.is_empty() || id.len() > 4096 || id.chars().any(char::is_control) {
            return Err(ApiError::bad_request(
                "a workflow id in a path is 1 to 4,096 bytes with no control character (NUL \
                 included), percent-encoded",
            ));
        }
        Ok(WorkflowId(id))
    }
}
