//! `/v1/workflows/{id}/upgrade`: new code for a running workflow, if its journal replays the
//! same with it.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::{ErrorBody, UpgradeJson, UpgradeRequest};

use super::call;
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, WorkflowId};
use crate::http::state::AppState;

pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new().routes(routes!(upgrade))
}

/// Gives the running workflow a new module (stored first with `POST /v1/modules`). Its whole
/// journal is replayed against the new module; only if every step is the same does it switch,
/// between two of its steps, and go on with the new code from where it stands. Otherwise
/// nothing changes, and the 409's message names the step and what differs.
#[utoipa::path(post, path = "/v1/workflows/{id}/upgrade", operation_id = "upgradeWorkflow", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    request_body = UpgradeRequest,
    responses(
        (status = 200, description = "Upgraded (or it ran that module already)", body = UpgradeJson),
        (status = 400, description = "The workflow has ended, or the module lacks its entry point", body = ErrorBody),
        (status = 404, description = "No such workflow, or no such module in the store", body = ErrorBody),
        (status = 409, description = "The new module does not replay the journal: the message names the step", body = ErrorBody),
        (status = 503, description = "Another host runs it, or it is busy: nothing changed, try again", body = ErrorBody),
    ))]
async fn upgrade(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
    JsonBody(request): JsonBody<UpgradeRequest>,
) -> Result<Json<UpgradeJson>, ApiError> {
    if let Some(why) = wfhost::bad_module_reference(&request.module) {
        return Err(ApiError::bad_request(why));
    }
    let module = request.module;
    let upgraded = call(&state, Default::default(), move |client| {
        client.upgrade_stored(&id, &module)
    })
    .await?;
    Ok(Json(UpgradeJson {
        from: upgraded.from,
        to: upgraded.to,
        steps: upgraded.steps,
        already: upgraded.already,
    }))
}
