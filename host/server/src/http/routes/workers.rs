//! `/v1/workers`: who serves each worker function, and how its tasks stand.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::{ErrorBody, WorkersJson};

use crate::http::error::ApiError;
use crate::http::state::AppState;

pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new().routes(routes!(workers))
}

/// For each worker function: the workers polling this server for it (name, machine, last
/// poll), the tasks waiting and the oldest one's age, the tasks in flight, and the completions
/// this server took. A task nobody polls for shows here as waiting, with no pollers.
#[utoipa::path(get, path = "/v1/workers", operation_id = "listWorkers", tag = "tasks",
    responses(
        (status = 200, description = "Each function's workers and tasks", body = WorkersJson),
        (status = 404, description = "This server has no activity workers", body = ErrorBody),
        (status = 503, description = "The tasks' store could not be reached", body = ErrorBody),
    ))]
async fn workers(State(state): State<Arc<AppState>>) -> Result<Json<WorkersJson>, ApiError> {
    Ok(Json(view(&state).await?))
}

/// The workers and tasks now; the metrics' gauges set from them.
pub(crate) async fn view(state: &AppState) -> Result<WorkersJson, ApiError> {
    let tasks = super::tasks::board(state)?;
    let summary = tasks.summary().await.map_err(super::tasks::task_error)?;
    let view = state.workers.view(summary);
    if let Some(metrics) = &state.metrics {
        for function in &view.functions {
            metrics.task_levels(
                &function.function,
                function.waiting,
                crate::http::workers::Workers::recent(function),
            );
        }
        // A function that had tasks (on a store hosts share, another host's) and has none
        // now: its gauges say so, rather than their last value.
        let now: Vec<String> = view.functions.iter().map(|f| f.function.clone()).collect();
        for gone in state.workers.gauges(&now) {
            metrics.task_levels(&gone, 0, 0);
        }
    }
    Ok(view)
}
