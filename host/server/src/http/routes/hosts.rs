//! `/v1/hosts`: the store's hosts, their leases and their work.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::HostList;

use super::call;
use crate::http::convert;
use crate::http::error::ApiError;
use crate::http::state::AppState;

pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new().routes(routes!(list))
}

/// The hosts alive or owning unfinished workflows.
#[utoipa::path(get, path = "/v1/hosts", operation_id = "listHosts", tag = "hosts",
    responses((status = 200, description = "Each host, by number", body = HostList)))]
async fn list(State(state): State<Arc<AppState>>) -> Result<Json<HostList>, ApiError> {
    let hosts = call(&state, Default::default(), |client| client.hosts()).await?;
    Ok(Json(HostList {
        hosts: hosts.iter().map(convert::host).collect(),
    }))
}
