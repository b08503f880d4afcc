//! What every handler shares: the client (while there is one), the tokens, the limits and the
//! metrics; and who a request's token says it is.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use wfhost::tasks::Tasks;
use wfhost::{Client, Metrics};

use super::error::ApiError;

/// The code of a `503` from a server with no host (starting, or starting again): nothing was
/// done, and every client asks again.
pub(crate) const NOT_READY: &str = "not_ready";

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) client: RwLock<Option<Client>>,
    /// The token's SHA-256: compared in constant time, never kept as it was given.
    pub(crate) token: Option<[u8; 32]>,
    pub(crate) metrics: Option<Metrics>,
    pub(crate) max_body: usize,
    pub(crate) max_module: usize,
    pub(crate) max_wait: Duration,
    pub(crate) waiting: Arc<tokio::sync::Semaphore>,
    pub(crate) max_waiting: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) store_calls: Arc<tokio::sync::Semaphore>,
    pub(crate) tasks: Option<Tasks>,
    /// Workers' own tokens (their SHA-256), each with the functions it serves.
    pub(crate) worker_tokens: Vec<([u8; 32], WorkerScope)>,
    /// The workers seen polling, and how their completions went.
    pub(crate) workers: Arc<super::workers::Workers>,
    /// The tracer of the requests' spans ([`Api::tracer`](super::Api::tracer)).
    pub(crate) tracer: Option<Arc<opentelemetry::global::BoxedTracer>>,
}

/// The functions a worker's own token serves: set on a request that came with one.
#[derive(Clone, Debug)]
pub(crate) struct WorkerScope(pub(crate) Arc<std::collections::BTreeSet<String>>);

impl WorkerScope {
    pub(crate) fn serves(&self, function: &str) -> bool {
        self.0.contains(function)
    }
}

/// The SHA-256 of the token in an `Authorization: Bearer` value.
pub(crate) fn bearer_digest(value: &[u8]) -> Option<[u8; 32]> {
    // The scheme's name is case-insensitive (RFC 9110).
    let bearer = value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer ");
    bearer.then(|| Sha256::digest(value[7..].trim_ascii()).into())
}

impl AppState {
    /// The client, or `503` while there is none.
    pub(crate) fn client(&self) -> Result<Client, ApiError> {
        self.client.read().clone().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                NOT_READY,
                "the server has no host just now (it is starting, starting again after losing \
                 its store, or stopping; or it serves metrics only): ask again",
            )
        })
    }

    /// Whether `presented` (an `Authorization` header's value) carries the token.
    pub(crate) fn admits(&self, presented: Option<&[u8]>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let Some(given) = presented.and_then(bearer_digest) else {
            return false;
        };
        given.ct_eq(token).into()
    }

    /// The functions of the worker token `presented` carries, if it carries one.
    pub(crate) fn worker(&self, presented: Option<&[u8]>) -> Option<WorkerScope> {
        let given = presented.and_then(bearer_digest)?;
        let mut found = None;
        // Every token compared, in constant time each.
        for (digest, scope) in &self.worker_tokens {
            if bool::from(given.ct_eq(digest)) {
                found = Some(scope.clone());
            }
        }
        found
    }
}
