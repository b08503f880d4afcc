//! `/v1/prune`: finished workflows removed from the store (retention).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::{ErrorBody, PruneRequest, PrunedJson};

use super::call;
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::state::AppState;
use wfhost::{PruneQuery, WorkflowState};

/// How long one request prunes before it answers with what it did (and `more`).
const WORK: Duration = Duration::from_secs(10);

pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new().routes(routes!(prune))
}

/// Removes finished top-level workflows, each with its whole tree and everything of theirs
/// (steps, snapshots, messages, what they sent the host, and modules no workflow left uses); a
/// tree part of which still runs is left. Answers after about ten seconds with what it did so
/// far and `more` if some are left: ask again with the `finished_before` it answered.
#[utoipa::path(post, path = "/v1/prune", operation_id = "prune", tag = "workflows",
    request_body = PruneRequest,
    responses(
        (status = 200, description = "What was removed", body = PrunedJson),
        (status = 400, description = "The request is wrong", body = ErrorBody),
    ))]
async fn prune(
    State(state): State<Arc<AppState>>,
    JsonBody(request): JsonBody<PruneRequest>,
) -> Result<Json<PrunedJson>, ApiError> {
    let finished_before = cutoff(&request)?;
    let status = match request.status.as_deref() {
        None => None,
        Some("completed") => Some(WorkflowState::Completed),
        Some("failed") => Some(WorkflowState::Failed),
        Some("cancelled") => Some(WorkflowState::Cancelled),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "status '{other}' is not one a finished workflow has: give completed, failed \
                 or cancelled (or none, for all three)"
            )))
        }
    };
    let mut query = PruneQuery::finished_before(finished_before);
    query.status = status;
    let pruned = call(&state, Default::default(), move |client| {
        client.prune_until(&query, Some(Instant::now() + WORK))
    })
    .await?;
    Ok(Json(PrunedJson {
        trees: pruned.trees,
        workflows: pruned.workflows,
        left: pruned.left,
        finished_before,
        more: pruned.more,
    }))
}

/// The cutoff a request gives: `finished_before`, or now less `older_than`.
fn cutoff(request: &PruneRequest) -> Result<u64, ApiError> {
    match (&request.older_than, request.finished_before) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "give older_than or finished_before, not both",
        )),
        (None, None) => Err(ApiError::bad_request(
            "say which finished workflows to remove: older_than (e.g. \"30d\") or \
             finished_before (milliseconds since the Unix epoch)",
        )),
        (None, Some(millis)) => Ok(millis),
        (Some(age), None) => {
            let age = wfhost_client::duration::parse(age)
                .map_err(|e| ApiError::bad_request(format!("older_than: {e}")))?;
            Ok(PruneQuery::finished_more_than(age).finished_before)
        }
    }
}
