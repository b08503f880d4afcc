//! `/v1/tasks`: activity workers take the tasks of the functions they serve, complete them, and
//! heartbeat the long ones.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost::contract::{CommandError, ErrorKind, Payload};
use wfhost_client::wire::{self, CompleteRequest, ErrorBody, HeartbeatJson, PollRequest, TaskJson};

use super::workflows::{waiting, Waiting};
use super::{millis, rfc3339};
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::state::{AppState, WorkerScope};
use wfhost::tasks::{Task, TaskError, Tasks};

/// The most functions one poll may name.
const MAX_FUNCTIONS: usize = 64;

/// The longest function name a poll may give.
const MAX_NAME: usize = 256;

pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(poll))
        .routes(routes!(complete))
        .routes(routes!(heartbeat))
        .routes(routes!(release))
}

/// The next task for one of the functions a worker serves, waiting up to `wait` for one.
#[utoipa::path(post, path = "/v1/tasks/poll", operation_id = "pollTask", tag = "tasks",
    request_body = PollRequest,
    responses(
        (status = 200, description = "A task: the worker holds it until its deadline", body = TaskJson),
        (status = 204, description = "No task came within the wait"),
        (status = 400, description = "No functions, or a bad wait", body = ErrorBody),
        (status = 403, description = "A worker token that does not serve one of the functions", body = ErrorBody),
        (status = 404, description = "This server has no activity workers", body = ErrorBody),
        (status = 503, description = "Too many requests wait already", body = ErrorBody),
    ))]
async fn poll(
    State(state): State<Arc<AppState>>,
    scope: Option<Extension<WorkerScope>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    JsonBody(request): JsonBody<PollRequest>,
) -> Result<Response, ApiError> {
    let tasks = board(&state)?;
    let poll = Poll::check(&state, scope.as_ref(), peer.as_ref(), request)?;
    poll.run(&tasks).await
}

/// A poll checked, with its place among the requests that wait (when it waits).
struct Poll {
    functions: Vec<String>,
    wait: std::time::Duration,
    _place: Option<Waiting>,
    state: Arc<AppState>,
    /// Who polls: its name and machine.
    worker: (String, String),
}

impl Poll {
    /// `request` checked: its functions (and the worker token's scope), its wait, a place.
    fn check(
        state: &Arc<AppState>,
        scope: Option<&Extension<WorkerScope>>,
        peer: Option<&Extension<ConnectInfo<SocketAddr>>>,
        request: PollRequest,
    ) -> Result<Poll, ApiError> {
        if request.functions.is_empty() || request.functions.len() > MAX_FUNCTIONS {
            return Err(ApiError::bad_request(format!(
                "a poll names 1 to {MAX_FUNCTIONS} functions, the ones this worker serves: \
                 {{\"functions\": [\"payments.charge\"]}}"
            )));
        }
        if let Some(long) = request.functions.iter().find(|f| f.len() > MAX_NAME) {
            return Err(ApiError::bad_request(format!(
                "a function's name is at most {MAX_NAME} bytes; one is {}",
                long.len()
            )));
        }
        if let Some(Extension(scope)) = scope {
            if let Some(other) = request.functions.iter().find(|f| !scope.serves(f)) {
                return Err(forbidden(other));
            }
        }
        let wait = super::wait(state, request.wait.as_deref())?;
        let place = if wait.is_zero() {
            None
        } else {
            Some(waiting(state)?)
        };
        let address = peer.map_or_else(|| "unknown".to_string(), |p| p.0 .0.ip().to_string());
        let name = named(request.worker).unwrap_or_else(|| address.clone());
        let host = named(request.host).unwrap_or(address);
        Ok(Poll {
            functions: request.functions,
            wait,
            _place: place,
            state: Arc::clone(state),
            worker: (name, host),
        })
    }

    /// The next task, or `204`.
    async fn run(self, tasks: &Tasks) -> Result<Response, ApiError> {
        let (name, host) = self.worker.clone();
        let polling = self.state.workers.polling(&self.functions, name, host);
        let task = tasks
            .poll(&self.functions, self.wait)
            .await
            .map_err(task_error)?;
        drop(polling);
        Ok(match task {
            Some(task) => {
                if let Some(metrics) = &self.state.metrics {
                    metrics.task_delivered(&task.function, task.waited);
                }
                Json(task_json(task)).into_response()
            }
            None => StatusCode::NO_CONTENT.into_response(),
        })
    }
}

/// A worker's own name or machine, as it gave it: at most 128 printable characters, or none.
fn named(given: Option<String>) -> Option<String> {
    let given = given?;
    let given = given.trim();
    if given.is_empty() {
        return None;
    }
    Some(
        given
            .chars()
            .filter(|c| !c.is_control())
            .take(128)
            .collect(),
    )
}

/// Completes a task with the function's result or error, and, if `next` asks, takes the next
/// task. Refused (`409`) when the task has moved on: given to another worker after its
/// deadline, or finished.
#[utoipa::path(post, path = "/v1/tasks/{task}/complete", operation_id = "completeTask", tag = "tasks",
    params(("task" = String, Path, description = "The task's name, as the poll gave it")),
    request_body = CompleteRequest,
    responses(
        (status = 200, description = "Applied, and the next task (with `next`)", body = TaskJson),
        (status = 204, description = "Applied: the workflow has the outcome (and no next task came)"),
        (status = 400, description = "Neither or both of result and error", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task moved on: this completion was not applied", body = ErrorBody),
    ))]
async fn complete(
    State(state): State<Arc<AppState>>,
    scope: Option<Extension<WorkerScope>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Path(task): Path<String>,
    JsonBody(request): JsonBody<CompleteRequest>,
) -> Result<Response, ApiError> {
    let tasks = board(&state)?;
    let function = check_scope(&tasks, scope.as_ref(), &task).await?;
    // A worker that writes every field sends `"result": null` beside its error: the error.
    let result = request
        .result
        .filter(|result| request.error.is_none() || result.get().trim() != "null");
    let outcome = match (result, request.error) {
        (Some(result), None) => Ok(Payload::json_bytes(result.get().as_bytes().to_vec())),
        (None, Some(error)) => Err(CommandError::new(
            if error.retryable {
                ErrorKind::Failed
            } else {
                ErrorKind::Rejected
            },
            error.message,
        )),
        _ => {
            return Err(ApiError::bad_request(
                "a completion has a result or an error, not both and not neither: \
                 {\"result\": ...} or {\"error\": {\"message\": \"...\", \"retryable\": false}}",
            ))
        }
    };
    // The next poll is checked (and has its place) before the completion is applied: an
    // error answer always means nothing was applied.
    let next = match request.next {
        Some(next) => Some(Poll::check(&state, scope.as_ref(), peer.as_ref(), next)?),
        None => None,
    };
    let ok = outcome.is_ok();
    let completed = tasks.complete(&task, outcome).await;
    if let Some(function) = &function {
        let outcome = match &completed {
            Ok(()) if ok => "result",
            Ok(()) => "error",
            Err(_) => "moved_on",
        };
        if completed.is_ok() {
            state.workers.completed(function, ok);
        }
        if let Some(metrics) = &state.metrics {
            metrics.task_completed(function, outcome);
        }
    }
    completed.map_err(task_error)?;
    match next {
        // Applied either way: a poll that fails now answers as one that found nothing.
        Some(next) => Ok(next
            .run(&tasks)
            .await
            .unwrap_or_else(|_| StatusCode::NO_CONTENT.into_response())),
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// Moves a task's deadline on, for a worker still at it.
#[utoipa::path(post, path = "/v1/tasks/{task}/heartbeat", operation_id = "heartbeatTask", tag = "tasks",
    params(("task" = String, Path, description = "The task's name, as the poll gave it")),
    responses(
        (status = 200, description = "The new deadline", body = HeartbeatJson),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task moved on: stop working on it", body = ErrorBody),
    ))]
async fn heartbeat(
    State(state): State<Arc<AppState>>,
    scope: Option<Extension<WorkerScope>>,
    Path(task): Path<String>,
) -> Result<Json<HeartbeatJson>, ApiError> {
    let tasks = board(&state)?;
    check_scope(&tasks, scope.as_ref(), &task).await?;
    let deadline = tasks.heartbeat(&task).await.map_err(task_error)?;
    let ms = millis(deadline);
    Ok(Json(HeartbeatJson {
        deadline: rfc3339(deadline),
        deadline_ms: ms,
        lease_ms: lease_ms(deadline),
    }))
}

/// Gives a task back, for another worker to take now rather than at its deadline: a worker
/// that stops before it finished the task. The next delivery counts its attempt on.
#[utoipa::path(post, path = "/v1/tasks/{task}/release", operation_id = "releaseTask", tag = "tasks",
    params(("task" = String, Path, description = "The task's name, as the poll gave it")),
    responses(
        (status = 204, description = "Given back"),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task moved on: nothing to give back", body = ErrorBody),
    ))]
async fn release(
    State(state): State<Arc<AppState>>,
    scope: Option<Extension<WorkerScope>>,
    Path(task): Path<String>,
) -> Result<StatusCode, ApiError> {
    let tasks = board(&state)?;
    check_scope(&tasks, scope.as_ref(), &task).await?;
    tasks.release(&task).await.map_err(task_error)?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) fn board(state: &AppState) -> Result<Tasks, ApiError> {
    state.tasks.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_workers",
            "this server has no activity workers: start it with --worker-function NAME",
        )
    })
}

/// With a worker's own token, the task must be of a function it serves. The task's function,
/// if it is on the board.
async fn check_scope(
    tasks: &Tasks,
    scope: Option<&Extension<WorkerScope>>,
    task: &str,
) -> Result<Option<String>, ApiError> {
    let function = tasks.function_of(task).await.map_err(task_error)?;
    match (scope, &function) {
        (Some(Extension(scope)), Some(function)) if !scope.serves(function) => {
            Err(forbidden(function))
        }
        _ => Ok(function),
    }
}

fn forbidden(function: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "this worker token does not serve '{function}': use the server's token, or the \
             token given for that function"
        ),
    )
}

pub(super) fn task_error(error: TaskError) -> ApiError {
    let (status, code) = match error {
        TaskError::Unknown(_) => (StatusCode::NOT_FOUND, "no_such_task"),
        TaskError::MovedOn { .. } => (StatusCode::CONFLICT, "task_moved_on"),
        TaskError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    };
    ApiError::new(status, code, error.to_string())
}

fn task_json(task: Task) -> TaskJson {
    let (input, input_encoding) = wire::payload_json(&task.input);
    let ms = millis(task.deadline);
    TaskJson {
        task: task.task,
        function: task.function,
        input,
        input_encoding,
        idempotency_key: task.idempotency_key,
        attempt: task.attempt,
        deadline: rfc3339(task.deadline),
        deadline_ms: ms,
        lease_ms: lease_ms(task.deadline),
        traceparent: task.traceparent,
    }
}

/// How long from now to `deadline`, in milliseconds.
fn lease_ms(deadline: std::time::SystemTime) -> u64 {
    deadline
        .duration_since(std::time::SystemTime::now())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
