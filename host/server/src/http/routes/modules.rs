//! `/v1/modules`: store a module by its SHA-256, and list those stored.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::{ErrorBody, ModuleJson, ModuleList, ModuleParams};

use super::call;
use crate::http::convert;
use crate::http::error::ApiError;
use crate::http::extract::{QueryParams, RawBody};
use crate::http::state::AppState;

pub(crate) fn routes(state: &AppState) -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(put, list))
        // A module is larger than a JSON body.
        .layer(DefaultBodyLimit::max(state.max_module))
}

/// Stores a module (the `.wasm` bytes as the body) by its SHA-256; with `name`, under that name
/// too: it takes the name's next version (unless it is the name's latest already), which its
/// `names` says, and a start may name it by the name (its latest version) or `name@version`.
#[utoipa::path(post, path = "/v1/modules", operation_id = "putModule", tag = "modules",
    params(ModuleParams),
    request_body(content = Vec<u8>, content_type = "application/wasm", description = "The module's bytes"),
    responses(
        (status = 201, description = "Stored", body = ModuleJson),
        (status = 200, description = "The store had it", body = ModuleJson),
        (status = 400, description = "Not a module wfhost can run (the reason `wfhost inspect` gives), or not a name", body = ErrorBody),
        (status = 413, description = "Larger than the server takes", body = ErrorBody),
    ))]
async fn put(
    State(state): State<Arc<AppState>>,
    QueryParams(params): QueryParams<ModuleParams>,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<ModuleJson>), ApiError> {
    if let Some(why) = params.name.as_deref().and_then(wfhost::bad_module_name) {
        return Err(ApiError::bad_request(why.to_string()));
    }
    let stored = call(&state, Default::default(), move |client| {
        match &params.name {
            Some(name) => client.put_module_named(&body, name),
            None => client.put_module(&body),
        }
    })
    .await?;
    let status = if stored.new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(convert::module(&stored))))
}

/// The modules the store keeps, with their entry points and the names (and versions) they were
/// stored under.
#[utoipa::path(get, path = "/v1/modules", operation_id = "listModules", tag = "modules",
    responses((status = 200, description = "Every module, by hash", body = ModuleList)))]
async fn list(State(state): State<Arc<AppState>>) -> Result<Json<ModuleList>, ApiError> {
    let modules = call(&state, Default::default(), |client| client.modules()).await?;
    Ok(Json(ModuleList {
        modules: modules.iter().map(convert::module).collect(),
    }))
}
