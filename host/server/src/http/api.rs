//! [`Api`]: the routes, the state they share, and the layers around them (the token, limits,
//! timeouts, metrics).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use parking_lot::RwLock;
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::routes;
use super::state::{AppState, WorkerScope};
use wfhost::tasks::Tasks;
use wfhost::Client;
use wfhost::Metrics;

/// The largest JSON body a route takes unless [`Api::max_body`] says otherwise: 8 MiB, above
/// the default payload limit (4 MiB) and what wraps it.
pub const DEFAULT_MAX_BODY: usize = 8 << 20;

/// The largest module `POST /v1/modules` takes unless [`Api::max_module`] says otherwise.
pub const DEFAULT_MAX_MODULE: usize = 64 << 20;

/// The longest a `wait=` may last unless [`Api::max_wait`] says otherwise: a client that wants
/// longer asks again.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(300);

/// Requests that may wait at once (`result?wait=`, `outbox?wait=`) unless [`Api::max_waiting`]
/// says otherwise; more are refused with `503` until some end. A waiter holds no thread, but a
/// connection: this is below the connections a server holds
/// ([`DEFAULT_MAX_CONNECTIONS`](super::DEFAULT_MAX_CONNECTIONS)), so that waiters leave room
/// for the rest.
pub const DEFAULT_MAX_WAITING: usize = 16_000;

/// Calls to the store (or the host) that run at once unless [`Api::max_store_calls`] says
/// otherwise; the others wait for a turn (without a thread) within their request's time. Each
/// running call holds a thread and a connection to the store.
pub const DEFAULT_MAX_STORE_CALLS: usize = 16;

/// How long a request that does not wait may take unless [`Api::request_timeout`] says
/// otherwise; past it, `504`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The HTTP API over a [`Client`]: every route parses its request, calls one of the client's
/// methods, and maps the answer (or the error) to JSON. Mount [`Api::router`] in an axum
/// application, or serve it with [`Api::serve`](super::Api::serve).
///
/// The client can change while the API serves ([`Api::set_client`]): a server whose host lost
/// its store builds another, and the API answers `503` between the two.
#[derive(Clone)]
pub struct Api {
    pub(crate) state: Arc<AppState>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("token", &self.state.token.is_some())
            .finish_non_exhaustive()
    }
}

impl Api {
    /// An API over `client` (none yet: every route but the health checks and the metrics
    /// answers `503` until [`set_client`](Self::set_client)), with no token and the default
    /// limits.
    pub fn new(client: Option<Client>) -> Api {
        Api {
            state: Arc::new(AppState {
                client: RwLock::new(client),
                token: None,
                metrics: None,
                max_body: DEFAULT_MAX_BODY,
                max_module: DEFAULT_MAX_MODULE,
                max_wait: DEFAULT_MAX_WAIT,
                waiting: Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_WAITING)),
                max_waiting: DEFAULT_MAX_WAITING,
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
                store_calls: Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_STORE_CALLS)),
                tasks: None,
                worker_tokens: Vec::new(),
                workers: Arc::default(),
                tracer: None,
            }),
        }
    }

    fn with(self, change: impl FnOnce(&mut AppState)) -> Api {
        let mut state = Arc::try_unwrap(self.state).unwrap_or_else(|shared| AppState {
            client: RwLock::new(shared.client.read().clone()),
            token: shared.token,
            metrics: shared.metrics.clone(),
            max_body: shared.max_body,
            max_module: shared.max_module,
            max_wait: shared.max_wait,
            waiting: Arc::clone(&shared.waiting),
            max_waiting: shared.max_waiting,
            request_timeout: shared.request_timeout,
            store_calls: Arc::clone(&shared.store_calls),
            tasks: shared.tasks.clone(),
            worker_tokens: shared.worker_tokens.clone(),
            workers: Arc::clone(&shared.workers),
            tracer: shared.tracer.clone(),
        });
        change(&mut state);
        Api {
            state: Arc::new(state),
        }
    }

    /// Requires `token` as `Authorization: Bearer <token>` on every route but `/healthz`
    /// (`401` without it). Default: none required. The token is kept only as its SHA-256 and
    /// compared in constant time. An empty token is an [`ErrorKind::Config`](wfhost::ErrorKind)
    /// error: it would let in anyone who sends `Bearer ` and nothing.
    pub fn token(self, token: &str) -> wfhost::Result<Api> {
        let token = token.trim();
        if token.is_empty() {
            return Err(wfhost::Error::new(
                wfhost::ErrorKind::Config,
                "the API's token is empty: give one, or none at all",
            ));
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        Ok(self.with(|state| state.token = Some(digest)))
    }

    /// Serves the `/v1/tasks` routes that activity workers poll, from `tasks` (the board the
    /// hosts' worker functions put their tasks on: [`HostBuilder::tasks`](wfhost::HostBuilder::tasks)).
    /// Default: none (`404`).
    pub fn tasks(self, tasks: Tasks) -> Api {
        self.with(|state| state.tasks = Some(tasks))
    }

    /// The functions the hosts serve through workers (`--worker-function`): `GET /v1/workers`
    /// shows each, also before any worker polled for it.
    pub fn worker_functions(self, functions: &[String]) -> Api {
        let workers = Arc::new(super::workers::Workers::new(functions.to_vec()));
        self.with(|state| state.workers = workers)
    }

    /// Also admits `token` on the `/v1/tasks` routes, for the workers of `functions` only: a
    /// worker given it can take, complete and heartbeat those functions' tasks, and nothing
    /// else. An [`ErrorKind::Config`](wfhost::ErrorKind) error when the token is empty, or when
    /// the API has no token of its own ([`token`](Self::token) first): without one every
    /// request is let in, and a worker token would restrict nothing.
    pub fn worker_token(self, token: &str, functions: &[String]) -> wfhost::Result<Api> {
        if self.state.token.is_none() {
            return Err(wfhost::Error::new(
                wfhost::ErrorKind::Config,
                "worker tokens restrict nothing on an API without a token of its own: give the \
                 server a token (--token-file) too",
            ));
        }
        let token = token.trim();
        if token.is_empty() {
            return Err(wfhost::Error::new(
                wfhost::ErrorKind::Config,
                "a worker token is empty: give one",
            ));
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let scope = WorkerScope(Arc::new(functions.iter().cloned().collect()));
        Ok(self.with(|state| state.worker_tokens.push((digest, scope))))
    }

    /// Serves `metrics` at `GET /metrics`, and counts the API's requests into them.
    /// Default: no metrics (`/metrics` answers `404`).
    pub fn metrics(self, metrics: &Metrics) -> Api {
        let metrics = metrics.clone();
        self.with(|state| state.metrics = Some(metrics))
    }

    /// Records a span of `tracer`'s for each request to `/v1/` (`POST /v1/workflows`, of kind
    /// server), a child of the request's W3C `traceparent` if it has one: the runs of the
    /// workflows a request starts are children of its span (with the host's
    /// [`HostBuilder::tracer`](wfhost::HostBuilder::tracer)). Default: none.
    pub fn tracer<T>(self, tracer: T) -> Api
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        let tracer = Arc::new(opentelemetry::global::BoxedTracer::new(Box::new(tracer)));
        self.with(|state| state.tracer = Some(tracer))
    }

    /// The largest JSON body a route takes, in bytes ([`DEFAULT_MAX_BODY`]); past it, `413`.
    pub fn max_body(self, bytes: usize) -> Api {
        self.with(|state| state.max_body = bytes)
    }

    /// The largest module `POST /v1/modules` takes, in bytes ([`DEFAULT_MAX_MODULE`]).
    pub fn max_module(self, bytes: usize) -> Api {
        self.with(|state| state.max_module = bytes)
    }

    /// The longest a `wait=` may last ([`DEFAULT_MAX_WAIT`]); longer asks wait this long.
    pub fn max_wait(self, wait: Duration) -> Api {
        self.with(|state| state.max_wait = wait)
    }

    /// Requests that may wait at once ([`DEFAULT_MAX_WAITING`]).
    pub fn max_waiting(self, requests: usize) -> Api {
        let requests = requests.max(1);
        self.with(|state| {
            state.waiting = Arc::new(tokio::sync::Semaphore::new(requests));
            state.max_waiting = requests;
        })
    }

    /// Calls to the store that run at once ([`DEFAULT_MAX_STORE_CALLS`]; at least 1).
    pub fn max_store_calls(self, calls: usize) -> Api {
        let calls = calls.max(1);
        self.with(|state| state.store_calls = Arc::new(tokio::sync::Semaphore::new(calls)))
    }

    /// How long a request that does not wait may take ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub fn request_timeout(self, timeout: Duration) -> Api {
        self.with(|state| state.request_timeout = timeout)
    }

    /// Serves through `client` from now on (`None`: `503` until another is set).
    pub fn set_client(&self, client: Option<Client>) {
        *self.state.client.write() = client;
    }

    /// The routes, with the token check, the limits and the metrics around them.
    pub fn router(&self) -> Router {
        let state = Arc::clone(&self.state);
        let (guarded, guarded_doc) = routes::guarded(&state).split_for_parts();
        let (open, open_doc) = routes::open_routes().split_for_parts();
        let document = openapi_of(guarded_doc, open_doc);
        Router::new()
            .merge(open)
            .merge(guarded)
            .merge(super::ui::routes())
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(Extension(Arc::new(document)))
            // One layer, one boxed future a request: a request that waits holds each layer's
            // future for as long as it waits.
            .layer(middleware::from_fn_with_state(Arc::clone(&state), gate))
            .with_state(state)
    }

    /// The OpenAPI document of the routes ([`router`](Self::router) serves it at
    /// `/v1/openapi.json`).
    pub fn openapi() -> utoipa::openapi::OpenApi {
        let state = Api::new(None).state;
        let (_, guarded) = routes::guarded(&state).split_for_parts();
        let (_, open) = routes::open_routes().split_for_parts();
        openapi_of(guarded, open)
    }
}

/// What every request goes through, in order: counted (by route, method and status, with
/// its duration); refused if a web page could have sent it in the operator's name (another
/// origin; on a server without a token, a host name that is not loopback's); refused without
/// the token (every route but `/healthz`); refused when its announced body is past the route's
/// limit, before the body is read.
async fn gate(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(metrics) = state.metrics.clone() else {
        return admit(&state, request, next).await;
    };
    let route = match request.extensions().get::<MatchedPath>() {
        Some(path) => path.as_str().to_string(),
        None => "(unmatched)".to_string(),
    };
    // A closed set: a client may send any method.
    let method = match request.method().as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        "PATCH" => "PATCH",
        _ => "other",
    };
    let started = Instant::now();
    let response = admit(&state, request, next).await;
    metrics.http_request(
        &route,
        method,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// The request on to its route, or the refusal that [`gate`] describes.
async fn admit(state: &AppState, mut request: Request, next: Next) -> Response {
    if let Some(refusal) = web_page(state, &request) {
        return refusal.into_response();
    }
    let path = request.uri().path();
    if path != "/healthz" && !super::ui::is_ui_path(path) {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(|value| value.as_bytes());
        if !state.admits(presented) {
            // A worker's own token opens the task routes, for its functions.
            let worker = path
                .starts_with("/v1/tasks/")
                .then(|| state.worker(presented))
                .flatten();
            let Some(scope) = worker else {
                return unauthorized(presented.is_some());
            };
            request.extensions_mut().insert(scope);
        }
    }
    let path = request.uri().path();
    let limit = if path == "/v1/modules" {
        state.max_module
    } else {
        state.max_body
    };
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<u64>().ok());
    if announced.is_some_and(|length| length > limit as u64) {
        return super::extract::too_large().into_response();
    }
    // Admitted: traced from here (a refused request is no span of anyone's trace).
    let span = state
        .tracer
        .as_deref()
        .and_then(|tracer| super::traces::RequestSpan::start(tracer, &mut request));
    let response = next.run(request).await;
    if let Some(span) = span {
        span.end(&response);
    }
    response
}

/// `401`, and the connection closed: a client without the token keeps none.
fn unauthorized(presented: bool) -> Response {
    let message = if presented {
        "the token is not this server's: send the token in the server's --token-file or \
         WFHOST_TOKEN as `Authorization: Bearer <token>`"
    } else {
        "this server wants a token: send `Authorization: Bearer <token>` (the token in the \
         server's --token-file or WFHOST_TOKEN)"
    };
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

/// Why `request` may have come from a web page the operator visited, if it may: it comes from
/// another origin (its `Origin` is not the server's own address), or, on a server without a
/// token, asks for another host name than loopback's (a DNS name rebound to 127.0.0.1). A
/// program that is not a browser sends no `Origin`.
fn web_page(state: &AppState, request: &Request) -> Option<ApiError> {
    // The host the request names: HTTP/2's `:authority` (a browser sends no `Host` over
    // HTTP/2), or `Host`. A `Host` that is not text names no loopback; two that disagree are
    // refused, so that neither check reads one while the router saw the other.
    let authority = request
        .uri()
        .authority()
        .map(|authority| authority.as_str().to_ascii_lowercase());
    let named = request
        .headers()
        .get(header::HOST)
        .map(|value| value.to_str().unwrap_or("(not text)").to_ascii_lowercase());
    // No browser sends a user in the host; a name with one (`127.0.0.1@evil.example`) is
    // refused rather than read one way here and another elsewhere.
    if let Some(with_user) = [&authority, &named]
        .into_iter()
        .flatten()
        .find(|host| host.contains('@'))
    {
        return Some(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the host '{with_user}' names a user: send the host alone"),
        ));
    }
    let host = match (authority, named) {
        (Some(authority), Some(named)) if authority != named => {
            return Some(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!(
                    "the request names two hosts, '{authority}' in its target and '{named}' in \
                     its Host header: send one"
                ),
            ));
        }
        (authority, named) => authority.or(named),
    };
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("").to_ascii_lowercase();
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if origin_host.is_none() || origin_host != host.as_deref() {
            return Some(ApiError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                format!(
                    "a request from {origin} to this server is refused: only programs and this \
                     server's own pages may call it"
                ),
            ));
        }
    }
    match &host {
        Some(host) if state.token.is_none() && !is_loopback_name(host) => Some(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_loopback",
            format!(
                "this server has no token and answers requests for loopback only, not for \
                 '{host}': ask for 127.0.0.1, ::1 or localhost, or give the server a token"
            ),
        )),
        _ => None,
    }
}

/// Whether `host` (a `Host` header's value: a name or an address, and a port) names this
/// machine's loopback.
fn is_loopback_name(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // [::1]:8080
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The document: its frame, and the routes' paths and schemas.
fn openapi_of(
    guarded: utoipa::openapi::OpenApi,
    open: utoipa::openapi::OpenApi,
) -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi as _;
    let mut document = super::openapi::Frame::openapi();
    document.info.version = env!("CARGO_PKG_VERSION").to_string();
    document.merge(guarded);
    document.merge(open);
    super::openapi::add_common_answers(&mut document);
    document
}

/// `405` for a route's path with another method.
async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not take {} (GET /v1/openapi.json lists what it takes)",
            request.uri().path(),
            request.method()
        ),
    )
}

/// `404` for a path no route has.
async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no route {} {} (GET /v1/openapi.json lists them)",
            request.method(),
            request.uri().path()
        ),
    )
}
