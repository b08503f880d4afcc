//! `/v1/workflows/{id}/reset` and `/v1/workflows/{id}/runs`: a finished workflow run again from
//! one of its steps, and the runs of one id.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::{ErrorBody, ResetJson, ResetRequest, RunsJson};

use super::call;
use crate::http::convert;
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, WorkflowId};
use crate::http::state::AppState;

pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(reset))
        .routes(routes!(runs))
}

/// Resets a finished top-level workflow: a new run keeps its journal up to `to_step` (left out:
/// the step before the one that ended it, or took its cancel), replayed, and goes on from there
/// under the same id, with the module it ran or `module` (stored first with
/// `POST /v1/modules`; it must replay the steps kept). What the run did after that step is done
/// again, with idempotency keys of the new run's; messages it took after it are sent again. The
/// run before is kept whole as `<id>/run-<n>`.
#[utoipa::path(post, path = "/v1/workflows/{id}/reset", operation_id = "resetWorkflow", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    request_body = ResetRequest,
    responses(
        (status = 200, description = "Reset: the new run runs", body = ResetJson),
        (status = 400, description = "A child, a step past the last that may be kept, a kept step that spawned a child, or a module without its entry point", body = ErrorBody),
        (status = 404, description = "No such workflow, or no such module in the store", body = ErrorBody),
        (status = 409, description = "It has not finished, a child of it has not, or the new module does not replay the steps kept (the message names the step)", body = ErrorBody),
    ))]
async fn reset(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
    JsonBody(request): JsonBody<ResetRequest>,
) -> Result<Json<ResetJson>, ApiError> {
    let module = match &request.module {
        Some(module) => {
            if let Some(why) = wfhost::bad_module_reference(module) {
                return Err(ApiError::bad_request(why));
            }
            Some(module.clone())
        }
        None => None,
    };
    let to_step = request.to_step;
    let reset = call(&state, Default::default(), move |client| {
        client.reset_stored(&id, to_step, module.as_deref())
    })
    .await?;
    Ok(Json(ResetJson {
        id: reset.id,
        run: reset.run,
        previous: reset.previous,
        steps: reset.steps,
        module: reset.module,
        messages: reset.messages,
    }))
}

/// The runs of a workflow's id, first to last: those resets ended (kept as `<id>/run-1`, ...)
/// and the one the id names now.
#[utoipa::path(get, path = "/v1/workflows/{id}/runs", operation_id = "workflowRuns", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    responses(
        (status = 200, description = "Its runs", body = RunsJson),
        (status = 404, description = "No such workflow", body = ErrorBody),
    ))]
async fn runs(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
) -> Result<Json<RunsJson>, ApiError> {
    let runs = call(&state, Default::default(), move |client| client.runs(&id)).await?;
    Ok(Json(RunsJson {
        runs: runs.iter().map(convert::workflow).collect(),
    }))
}
