//! The routes, a file per resource: `workflows`, `modules`, `hosts`, and `ops` (health,
//! readiness, metrics, the OpenAPI document). A handler parses its request, calls one method of
//! the [`Client`], and maps the answer.

mod hosts;
mod modules;
mod ops;
mod reset;
mod retention;
mod schedules;
mod tasks;
mod upgrade;
mod workers;
mod workflows;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;

use super::error::ApiError;
use super::state::AppState;
use wfhost::Client;

pub(crate) use ops::open_routes;

/// Every route that needs the token.
pub(crate) fn guarded(state: &AppState) -> OpenApiRouter<Arc<AppState>> {
    let json = OpenApiRouter::new()
        .merge(workflows::routes())
        .merge(hosts::routes())
        .merge(ops::routes())
        .merge(tasks::routes())
        .merge(retention::routes())
        .merge(upgrade::routes())
        .merge(reset::routes())
        .merge(schedules::routes())
        .merge(workers::routes())
        .layer(axum::extract::DefaultBodyLimit::max(state.max_body));
    json.merge(modules::routes(state))
}

/// Runs `work` with the client on a thread that may block (a store's connection blocks), within
/// the request timeout, plus `wait` for a call that waits on purpose.
pub(crate) async fn call<T: Send + 'static>(
    state: &AppState,
    wait: Duration,
    work: impl FnOnce(Client) -> wfhost::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let client = state.client()?;
    let limit = state.request_timeout + wait;
    let calls = Arc::clone(&state.store_calls);
    let run = async move {
        // A turn among the calls that may run at once: what waits for one holds no thread, and
        // the turn is held until the call is over, also when the request stops waiting for it.
        let turn = calls.acquire_owned().await;
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            work(client)
        })
        .await
        .unwrap_or_else(|e| {
            Err(wfhost::Error::new(
                wfhost::ErrorKind::Unavailable,
                format!("the request's thread did not finish: {e}"),
            ))
        })
    };
    match tokio::time::timeout(limit, run).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(_) => Err(timed_out(limit)),
    }
}

/// A request that ran past its time.
pub(crate) fn timed_out(limit: Duration) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "timeout",
        format!(
            "the request took longer than {limit:?} (the server is busy, or its store slow): ask \
             again; what it asked for may have happened (a start with an id is safe to repeat)"
        ),
    )
}

/// A wait as the API writes it (`30s`, `500ms`), capped by the server; none: no wait.
pub(crate) fn wait(state: &AppState, wait: Option<&str>) -> Result<Duration, ApiError> {
    let Some(text) = wait else {
        return Ok(Duration::ZERO);
    };
    let wait = wfhost_client::duration::parse(text)
        .map_err(|e| ApiError::bad_request(format!("wait: {e}")))?;
    Ok(wait.min(state.max_wait))
}

/// `time` in milliseconds since the Unix epoch.
pub(crate) fn millis(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `time` in RFC 3339 (UTC, milliseconds); past what a date says, its milliseconds.
pub(crate) fn rfc3339(time: std::time::SystemTime) -> String {
    let ms = millis(time);
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || ms.to_string(),
            |time| time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        )
}
