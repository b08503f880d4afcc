//! `/v1/prune`: finished workflows removed from the store (retention).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wfhost_client::wire::{ErrorBody, PruneRequest, PrunedJson};

use super::call;
use crate::client::{PruneQuery, WorkflowState};
use crate::http::api::AppState;
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;

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
            let age = age_of(age).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "older_than '{age}' is not an age: give a number and a unit, e.g. 30d, 12h, \
                     90m or 45s"
                ))
            })?;
            Ok(crate::durable::now_millis().saturating_sub(age.as_millis() as u64))
        }
    }
}

/// `30d`, `12h`, `90m`, `45s`, `500ms`.
pub(crate) fn age_of(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => return Some(Duration::from_millis(number)),
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return None,
    };
    number.checked_mul(seconds).map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::age_of;
    use std::time::Duration;

    #[test]
    fn ages_read_in_the_units_people_write() {
        assert_eq!(age_of("30d"), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(age_of("12h"), Some(Duration::from_secs(12 * 3_600)));
        assert_eq!(age_of("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(age_of("45s"), Some(Duration::from_secs(45)));
        assert_eq!(age_of("30"), None);
        assert_eq!(age_of("d"), None);
        assert_eq!(age_of("3w"), None);
        assert_eq!(age_of("99999999999999999999d"), None);
    }
}
