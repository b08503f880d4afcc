//! What operators and tools ask: `/healthz` (alive), `/readyz` (ready to take work),
//! `/metrics` (Prometheus), `/v1/openapi.json` (this API, described).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::{ErrorBody, Health};

use super::call;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use wfhost::{OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};

/// The routes that need the token.
pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi))
}

/// The route that needs no token.
pub(crate) fn open_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new().routes(routes!(healthz))
}

/// Alive: the server answers. Needs no token.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "operations", security(()),
    responses((status = 200, description = "Alive", body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Ready: the store answers, takes this host's writes, and (on a store hosts share) its lease
/// holds.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, description = "Not ready, and why", body = ErrorBody),
    ))]
async fn readyz(State(state): State<Arc<AppState>>) -> Result<Json<Health>, ApiError> {
    call(&state, Default::default(), |client| client.ready()).await?;
    Ok(Json(Health {
        status: "ok".into(),
    }))
}

/// How long a scrape waits for the tasks' counts.
const TASKS_READ: std::time::Duration = std::time::Duration::from_secs(2);

/// The metrics: OpenMetrics when asked for (`Accept: application/openmetrics-text`, as
/// Prometheus asks), Prometheus' text format otherwise.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "operations",
    responses(
        (status = 200, description = "The metrics", content_type = "text/plain"),
        (status = 404, description = "This server counts nothing", body = ErrorBody),
    ))]
async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let Some(metrics) = &state.metrics else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server counts nothing: its host was built without metrics",
        )
        .into_response();
    };
    // The task gauges, read now (a store that does not answer in time leaves them as they were).
    if state.tasks.is_some() {
        let _ = tokio::time::timeout(TASKS_READ, super::workers::view(&state)).await;
    }
    let open = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("application/openmetrics-text"));
    let (content_type, body) = if open {
        (OPENMETRICS_CONTENT_TYPE, metrics.encode())
    } else {
        (TEXT_CONTENT_TYPE, metrics.encode_text())
    };
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// This API, as an OpenAPI 3 document.
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "openapi", tag = "operations",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
async fn openapi(Extension(document): Extension<Arc<utoipa::openapi::OpenApi>>) -> Response {
    Json(document.as_ref().clone()).into_response()
}
