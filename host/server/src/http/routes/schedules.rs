//! `/v1/schedules`: workflows started on a cron expression or an interval, each firing once
//! across hosts (its workflow's id is the schedule's and the firing's time).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::{
    self, ErrorBody, ScheduleChangeJson, ScheduleJson, ScheduleList, ScheduleRequest, StartedJson,
};

use super::call;
use crate::http::convert;
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::state::AppState;
use wfhost::schedules::{NewSchedule, When};

pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get, delete))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(trigger))
}

/// The schedule a request describes, checked.
fn new_schedule(request: ScheduleRequest) -> Result<NewSchedule, ApiError> {
    let zone = request.time_zone.as_deref().unwrap_or("UTC");
    let when =
        match (&request.cron, &request.every) {
            (Some(cron), None) => When::cron(cron, zone)?,
            (None, Some(every)) => {
                if request.time_zone.is_some() {
                    return Err(ApiError::bad_request(
                        "time_zone goes with cron: an interval is the same in every zone",
                    ));
                }
                When::every(duration(every, "every")?)?
            }
            _ => return Err(ApiError::bad_request(
                "say when it fires: cron (\"0 */5 * * * *\", seconds first) or every (\"10m\"), \
                 one of them",
            )),
        };
    super::workflows::check_hash(&request.module)?;
    let input = wire::payload_of(&request.input, None).map_err(ApiError::bad_request)?;
    let mut schedule = NewSchedule::new(
        &request.id,
        when,
        &request.module.to_ascii_lowercase(),
        &request.entry,
        input,
    );
    if let Some(overlap) = &request.overlap {
        schedule = schedule.overlap(overlap.parse()?);
    }
    if let Some(catch_up) = &request.catch_up {
        schedule = schedule.catch_up(catch_up.parse()?);
    }
    if let Some(jitter) = &request.jitter {
        schedule = schedule.jitter(duration(jitter, "jitter")?);
    }
    Ok(schedule)
}

fn duration(text: &str, what: &str) -> Result<Duration, ApiError> {
    wfhost_client::duration::parse(text).map_err(|e| ApiError::bad_request(format!("{what}: {e}")))
}

/// Creates a schedule. Its first firing is the first of its times after now.
#[utoipa::path(post, path = "/v1/schedules", operation_id = "createSchedule", tag = "schedules",
    request_body = ScheduleRequest,
    responses(
        (status = 201, description = "Created", body = ScheduleJson),
        (status = 400, description = "The request is wrong (the message says what)", body = ErrorBody),
        (status = 404, description = "No such module in the store", body = ErrorBody),
        (status = 409, description = "A schedule of that id exists", body = ErrorBody),
    ))]
async fn create(
    State(state): State<Arc<AppState>>,
    JsonBody(request): JsonBody<ScheduleRequest>,
) -> Result<(StatusCode, Json<ScheduleJson>), ApiError> {
    let schedule = new_schedule(request)?;
    let created = call(&state, Duration::ZERO, move |client| {
        client.create_schedule(&schedule)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(convert::schedule(&created))))
}

/// Every schedule, by id.
#[utoipa::path(get, path = "/v1/schedules", operation_id = "listSchedules", tag = "schedules",
    responses((status = 200, description = "Every schedule", body = ScheduleList)))]
async fn list(State(state): State<Arc<AppState>>) -> Result<Json<ScheduleList>, ApiError> {
    let schedules = call(&state, Duration::ZERO, |client| client.schedules()).await?;
    Ok(Json(ScheduleList {
        schedules: schedules.iter().map(convert::schedule).collect(),
    }))
}

/// One schedule.
#[utoipa::path(get, path = "/v1/schedules/{id}", operation_id = "getSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleJson),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleJson>, ApiError> {
    let schedule = call(&state, Duration::ZERO, move |client| client.schedule(&id)).await?;
    Ok(Json(convert::schedule(&schedule)))
}

/// Deletes a schedule; the workflows it started stay.
#[utoipa::path(delete, path = "/v1/schedules/{id}", operation_id = "deleteSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses((status = 200, description = "Deleted (changed: false if there was none)", body = ScheduleChangeJson)))]
async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleChangeJson>, ApiError> {
    let changed = call(&state, Duration::ZERO, move |client| {
        client.delete_schedule(&id)
    })
    .await?;
    Ok(Json(ScheduleChangeJson { changed }))
}

/// Pauses a schedule: it does not fire until resumed.
#[utoipa::path(post, path = "/v1/schedules/{id}/pause", operation_id = "pauseSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "Paused (changed: false if it was)", body = ScheduleChangeJson),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
async fn pause(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleChangeJson>, ApiError> {
    let changed = call(&state, Duration::ZERO, move |client| {
        client.pause_schedule(&id)
    })
    .await?;
    Ok(Json(ScheduleChangeJson { changed }))
}

/// Resumes a schedule from its next time after now (what it skipped is not caught up).
#[utoipa::path(post, path = "/v1/schedules/{id}/resume", operation_id = "resumeSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "Resumed (changed: false if it was not paused)", body = ScheduleChangeJson),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
async fn resume(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleChangeJson>, ApiError> {
    let changed = call(&state, Duration::ZERO, move |client| {
        client.resume_schedule(&id)
    })
    .await?;
    Ok(Json(ScheduleChangeJson { changed }))
}

/// Fires a schedule now, whatever its times and overlap policy: workflow `<id>@<now>`.
#[utoipa::path(post, path = "/v1/schedules/{id}/trigger", operation_id = "triggerSchedule", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 201, description = "The workflow it started", body = StartedJson),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
async fn trigger(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<StartedJson>), ApiError> {
    let started = call(&state, Duration::ZERO, move |client| {
        client.trigger_schedule(&id)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(convert::started(&started))))
}
