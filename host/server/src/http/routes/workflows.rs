//! `/v1/workflows`: start, list, status, result, messages, cancel, history, waits, outbox.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::value::RawValue;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost::contract::Payload;
use wfhost_client::wire::{
    CancelJson, CountParams, CountsJson, ErrorBody, HistoryPage, HistoryParams, ListParams,
    OutboxPage, OutboxParams, PauseJson, SentJson, StartRequest, StartedJson, WaitJson, WaitParams,
    WaitsJson, WorkflowJson, WorkflowPage,
};

use super::{call, timed_out, wait};
use crate::http::convert;
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, QueryParams, RawBody, WorkflowId};
use crate::http::state::AppState;
use crate::http::traces::Traced;
use wfhost::store::{DEFAULT_PAGE, MAX_PAGE};
use wfhost::{ListQuery, WorkflowState};

pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(start, list))
        .routes(routes!(counts))
        .routes(routes!(status))
        .routes(routes!(result))
        .routes(routes!(send))
        .routes(routes!(cancel))
        .routes(routes!(pause))
        .routes(routes!(unpause))
        .routes(routes!(history))
        .routes(routes!(waits))
        .routes(routes!(outbox))
}

/// A module named by its hash: 64 hex digits.
pub(super) fn check_hash(hash: &str) -> Result<(), ApiError> {
    if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "module '{hash}' is not a module's SHA-256: give the 64 hex digits `POST /v1/modules` \
         answered with"
    )))
}

/// Starts a workflow; with `wait`, also waits up to that long for it to end (one request where
/// a start and a result would be two): `201` (started) or `200` (it existed) with the result
/// when it ended in time, `202` with where it stands when it had not.
#[utoipa::path(post, path = "/v1/workflows", operation_id = "startWorkflow", tag = "workflows",
    request_body = StartRequest,
    params(WaitParams),
    responses(
        (status = 201, description = "Started (and, with `wait`, ended in time: its result is in it)", body = StartedJson),
        (status = 200, description = "It existed with the same module, entry point and input: nothing started (with `wait`, it ended in time)", body = StartedJson),
        (status = 202, description = "With `wait`: started, or it existed, and still running at the deadline", body = StartedJson),
        (status = 400, description = "Bad JSON, id, entry point, input or wait", body = ErrorBody),
        (status = 404, description = "No module with that hash or name (or that version of it)", body = ErrorBody),
        (status = 409, description = "The id exists with another module, entry point or input", body = ErrorBody),
        (status = 503, description = "With `wait`: too many requests wait already (nothing was started)", body = ErrorBody),
    ))]
async fn start(
    State(state): State<Arc<AppState>>,
    traced: Option<Extension<Traced>>,
    QueryParams(params): QueryParams<WaitParams>,
    JsonBody(start): JsonBody<StartRequest>,
) -> Result<(StatusCode, Json<StartedJson>), ApiError> {
    if let Some(why) = wfhost::bad_module_reference(&start.module) {
        return Err(ApiError::bad_request(why));
    }
    let wait = wait(&state, params.wait.as_deref())?;
    // The place among the requests that wait is taken before the start: a refusal starts
    // nothing.
    let place = if wait.is_zero() {
        None
    } else {
        Some(waiting(&state)?)
    };
    let input = Payload::json_bytes(start.input.get().as_bytes().to_vec());
    let started = call(&state, Default::default(), move |client| {
        // The run is a child of the request's span.
        let client = match &traced {
            Some(Extension(Traced(parent))) => client.traced(parent),
            None => client,
        };
        client.start_named(start.id.as_deref(), &start.module, &start.entry, &input)
    })
    .await?;
    let mut workflow = started.workflow;
    if place.is_some() && !workflow.is_finished() {
        // Started: whatever becomes of the wait (the server stopping, a store that does not
        // answer, the request's time up), the answer is the workflow as it stands, with its id:
        // the caller's only handle on a start without one.
        let limit = state.request_timeout + wait;
        if let Ok(client) = state.client() {
            let ended = client.result_async(&workflow.id, Some(wait));
            if let Ok(Ok(ended)) = tokio::time::timeout(limit, ended).await {
                workflow = ended;
            }
        }
    }
    drop(place);
    let status = if ran_past_the_wait(wait, &workflow) {
        StatusCode::ACCEPTED
    } else if started.new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(StartedJson {
            new: started.new,
            workflow: convert::workflow(&workflow),
        }),
    ))
}

/// Whether a start that waited (`wait` given) left the workflow still running at its deadline.
fn ran_past_the_wait(wait: std::time::Duration, workflow: &wfhost::WorkflowStatus) -> bool {
    !wait.is_zero() && !workflow.is_finished()
}

/// A page of workflows, oldest first.
#[utoipa::path(get, path = "/v1/workflows", operation_id = "listWorkflows", tag = "workflows",
    params(ListParams),
    responses(
        (status = 200, description = "A page, and the cursor of the next", body = WorkflowPage),
        (status = 400, description = "A parameter is wrong", body = ErrorBody),
    ))]
async fn list(
    State(state): State<Arc<AppState>>,
    QueryParams(params): QueryParams<ListParams>,
) -> Result<Json<WorkflowPage>, ApiError> {
    let mut query = ListQuery::new().limit(page_limit(params.limit, "workflows")?);
    if let Some(status) = &params.status {
        let state = WorkflowState::parse(status).ok_or_else(|| {
            ApiError::bad_request(format!(
                "status={status} is not a status: give one of {}",
                WorkflowState::ALL.map(WorkflowState::name).join(", ")
            ))
        })?;
        query = query.state(state);
    }
    query = narrowed(
        query,
        CountParams {
            entry: params.entry,
            prefix: params.prefix,
            started_before: params.started_before,
            started_after: params.started_after,
            top_level: params.top_level,
            parent: params.parent,
        },
    );
    if let Some(after) = params.after {
        query = query.after(after);
    }
    let page = call(&state, Default::default(), move |client| {
        client.list(&query)
    })
    .await?;
    Ok(Json(WorkflowPage {
        workflows: page.items.iter().map(convert::workflow).collect(),
        next: page.next,
    }))
}

/// How many of the store's workflows stand each way, of those the filters let through (a
/// listing's filters, but the status). Counts of all workflows or of one entry point come from
/// counts the store keeps as workflows start and end (a few rows read); other filters read the
/// workflows they leave.
#[utoipa::path(get, path = "/v1/workflow-counts", operation_id = "countWorkflows", tag = "workflows",
    params(CountParams),
    responses(
        (status = 200, description = "The counts", body = CountsJson),
        (status = 400, description = "A parameter is wrong", body = ErrorBody),
    ))]
async fn counts(
    State(state): State<Arc<AppState>>,
    QueryParams(params): QueryParams<CountParams>,
) -> Result<Json<CountsJson>, ApiError> {
    let query = narrowed(ListQuery::new(), params);
    let counts = call(&state, Default::default(), move |client| {
        client.counts(&query)
    })
    .await?;
    Ok(Json(CountsJson {
        running: counts.running,
        paused: counts.paused,
        damaged: counts.damaged,
        completed: counts.completed,
        failed: counts.failed,
        cancelled: counts.cancelled,
    }))
}

/// `query` narrowed by the filters a listing and the counts share.
fn narrowed(mut query: ListQuery, filters: CountParams) -> ListQuery {
    if let Some(entry) = filters.entry {
        query = query.entry(entry);
    }
    if let Some(prefix) = filters.prefix {
        query = query.prefix(prefix);
    }
    if let Some(before) = filters.started_before {
        query = query.started_before(before);
    }
    if let Some(after) = filters.started_after {
        query = query.started_after(after);
    }
    if filters.top_level == Some(true) {
        query = query.top_level();
    }
    if let Some(parent) = filters.parent {
        query = query.parent(parent);
    }
    query
}

/// Where a workflow stands.
#[utoipa::path(get, path = "/v1/workflows/{id}", operation_id = "getWorkflow", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    responses(
        (status = 200, description = "The workflow", body = WorkflowJson),
        (status = 404, description = "No such workflow", body = ErrorBody),
    ))]
async fn status(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
) -> Result<Json<WorkflowJson>, ApiError> {
    let status = call(&state, Default::default(), move |client| client.status(&id)).await?;
    Ok(Json(convert::workflow(&status)))
}

/// Waits up to `wait` for the workflow to end.
#[utoipa::path(get, path = "/v1/workflows/{id}/result", operation_id = "getWorkflowResult", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded"), WaitParams),
    responses(
        (status = 200, description = "It has ended", body = WorkflowJson),
        (status = 202, description = "Still running at the deadline", body = WorkflowJson),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 500, description = "Damaged: it goes no further until the store is repaired", body = ErrorBody),
        (status = 503, description = "Too many requests wait already", body = ErrorBody),
    ))]
async fn result(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
    QueryParams(params): QueryParams<WaitParams>,
) -> Result<(StatusCode, Json<WorkflowJson>), ApiError> {
    let wait = wait(&state, params.wait.as_deref())?;
    let client = state.client()?;
    let status = if wait.is_zero() {
        call(&state, wait, move |client| client.result(&id, None)).await?
    } else {
        waited(&state, wait, client.result_async(&id, Some(wait))).await?
    };
    let code = if status.is_finished() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((code, Json(convert::workflow(&status))))
}

/// A place among the requests that wait, counted in the metrics while held.
pub(super) struct Waiting {
    _permit: tokio::sync::OwnedSemaphorePermit,
    state: Arc<AppState>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(metrics) = &self.state.metrics {
            metrics.http_waiting(-1);
        }
    }
}

/// A page's size as asked (default [`DEFAULT_PAGE`]), or a `400` for one out of bounds.
fn page_limit(limit: Option<usize>, what: &str) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit={limit} is out of bounds: a page holds 1 to {MAX_PAGE} {what}"
        )));
    }
    Ok(limit)
}

/// What `waiting` (a wait of up to `wait`) gives, in a place among the requests that wait,
/// within the request's time.
async fn waited<T>(
    state: &Arc<AppState>,
    wait: std::time::Duration,
    waiting: impl std::future::Future<Output = wfhost::Result<T>>,
) -> Result<T, ApiError> {
    let _place = self::waiting(state)?;
    let limit = state.request_timeout + wait;
    let answer = tokio::time::timeout(limit, waiting).await;
    Ok(answer.map_err(|_| timed_out(limit))??)
}

pub(super) fn waiting(state: &Arc<AppState>) -> Result<Waiting, ApiError> {
    let permit = Arc::clone(&state.waiting)
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_waiting",
                format!(
                "{} requests wait already, as many as this server lets wait (--max-waiting): ask \
                 again, or without wait=",
                state.max_waiting
            ),
            )
        })?;
    if let Some(metrics) = &state.metrics {
        metrics.http_waiting(1);
    }
    Ok(Waiting {
        _permit: permit,
        state: Arc::clone(state),
    })
}

/// Sends the workflow a message (any JSON).
#[utoipa::path(post, path = "/v1/workflows/{id}/messages", operation_id = "sendMessage", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    request_body(content = Value, description = "The message: any JSON value"),
    responses(
        (status = 202, description = "Written for the workflow's host to deliver", body = SentJson),
        (status = 400, description = "Not JSON", body = ErrorBody),
        (status = 404, description = "No running workflow of that id", body = ErrorBody),
        (status = 429, description = "Its mailbox is full, or the message is past the payload limit", body = ErrorBody),
    ))]
async fn send(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<SentJson>), ApiError> {
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::bad_request("the message is not UTF-8 JSON"))?;
    let json: Box<RawValue> = serde_json::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("the message is not JSON: {e}")))?;
    let message = Payload::json_bytes(json.get().as_bytes().to_vec());
    let number = call(&state, Default::default(), move |client| {
        client.send(&id, &message)
    })
    .await?;
    Ok((StatusCode::ACCEPTED, Json(SentJson { message: number })))
}

/// Asks the workflow to cancel.
#[utoipa::path(post, path = "/v1/workflows/{id}/cancel", operation_id = "cancelWorkflow", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    responses(
        (status = 202, description = "Asked (or asked before, or it had ended)", body = CancelJson),
        (status = 404, description = "No such workflow", body = ErrorBody),
    ))]
async fn cancel(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
) -> Result<(StatusCode, Json<CancelJson>), ApiError> {
    let cancelled = call(&state, Default::default(), move |client| client.cancel(&id)).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(convert::cancel(cancelled, WorkflowState::Running.name())),
    ))
}

/// Pauses the workflow: it takes no step until unpaused. What reaches it meanwhile (messages,
/// timers that fire, answers, a cancel) waits, and it stays paused across restarts.
#[utoipa::path(post, path = "/v1/workflows/{id}/pause", operation_id = "pauseWorkflow", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    responses(
        (status = 200, description = "Paused (or it was, or it had ended)", body = PauseJson),
        (status = 404, description = "No such workflow", body = ErrorBody),
    ))]
async fn pause(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
) -> Result<Json<PauseJson>, ApiError> {
    let change = call(&state, Default::default(), move |client| client.pause(&id)).await?;
    Ok(Json(convert::pause(change, true)))
}

/// Unpauses the workflow: it takes what waited for it and goes on where it was.
#[utoipa::path(post, path = "/v1/workflows/{id}/unpause", operation_id = "unpauseWorkflow", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    responses(
        (status = 200, description = "Unpaused (or it was not paused, or it had ended)", body = PauseJson),
        (status = 404, description = "No such workflow", body = ErrorBody),
    ))]
async fn unpause(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
) -> Result<Json<PauseJson>, ApiError> {
    let change = call(&state, Default::default(), move |client| {
        client.unpause(&id)
    })
    .await?;
    Ok(Json(convert::pause(change, false)))
}

/// A page of the workflow's journal, each step in words (as `wfhost history --json`).
#[utoipa::path(get, path = "/v1/workflows/{id}/history", operation_id = "getWorkflowHistory", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded"), HistoryParams),
    responses(
        (status = 200, description = "A page of steps, and the cursor of the next", body = HistoryPage),
        (status = 400, description = "A parameter is wrong", body = ErrorBody),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 500, description = "A step of the journal cannot be read back (damaged)", body = ErrorBody),
    ))]
async fn history(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
    QueryParams(params): QueryParams<HistoryParams>,
) -> Result<Json<HistoryPage>, ApiError> {
    let limit = page_limit(params.limit, "steps")?;
    let page = call(&state, Default::default(), move |client| {
        let (page, mut narrator) = client.history_in_words(&id, params.after.as_deref(), limit)?;
        let steps = page
            .items
            .iter()
            .map(|step| convert::step(&mut narrator, step))
            .collect();
        Ok(HistoryPage {
            steps,
            next: page.next,
        })
    })
    .await?;
    Ok(Json(page))
}

/// What the workflow waits for now: the commands it yielded that nothing has answered yet (a
/// timer and when it fires, a child it joins, a host function it called), and whether it waits
/// for a message. Read from its whole journal on the server, so that a page need not read a
/// long history to say so.
#[utoipa::path(get, path = "/v1/workflows/{id}/waits", operation_id = "getWorkflowWaits", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded")),
    responses(
        (status = 200, description = "What it waits for", body = WaitsJson),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 500, description = "A step of the journal cannot be read back (damaged)", body = ErrorBody),
    ))]
async fn waits(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
) -> Result<Json<WaitsJson>, ApiError> {
    let waits = call(&state, Default::default(), move |client| {
        let waits = client.waits(&id)?;
        let mut narrator = client.narrator();
        Ok(WaitsJson {
            steps: waits.steps,
            waits: waits
                .open
                .iter()
                .map(|open| WaitJson {
                    fires_at: open.fires_at,
                    yielded: narrator.yield_json(&open.yielded),
                    record: postcard::to_allocvec(&open.yielded)
                        .unwrap_or_default()
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect(),
                    unserved: open.unserved.clone(),
                })
                .collect(),
            message: waits.message,
        })
    })
    .await?;
    Ok(Json(waits))
}

/// The messages the workflow sent the host after the cursor; waits for one with `wait=`.
#[utoipa::path(get, path = "/v1/workflows/{id}/outbox", operation_id = "getWorkflowOutbox", tag = "workflows",
    params(("id" = String, Path, description = "The workflow's id, percent-encoded"), OutboxParams),
    responses(
        (status = 200, description = "The messages after the cursor, and the cursor of what follows", body = OutboxPage),
        (status = 400, description = "A parameter is wrong", body = ErrorBody),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 503, description = "Too many requests wait already", body = ErrorBody),
    ))]
async fn outbox(
    State(state): State<Arc<AppState>>,
    WorkflowId(id): WorkflowId,
    QueryParams(params): QueryParams<OutboxParams>,
) -> Result<Json<OutboxPage>, ApiError> {
    let wait = wait(&state, params.wait.as_deref())?;
    let limit = page_limit(params.limit, "messages")?;
    let client = state.client()?;
    let page = if wait.is_zero() {
        call(&state, wait, move |client| {
            client
                .outbox(&id, params.after.as_deref(), limit, None)
                .map(convert::outbox)
        })
        .await?
    } else {
        let waiting = client.outbox_async(&id, params.after.as_deref(), limit, Some(wait));
        convert::outbox(waited(&state, wait, waiting).await?)
    };
    Ok(Json(page))
}
