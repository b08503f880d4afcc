//! [`Client`]: the HTTP API of a `wfhost serve`, one method per route, blocking.

use std::time::{Duration, Instant};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::wire::{
    CancelJson, CompleteRequest, CountParams, CountsJson, ErrorBody, Health, HeartbeatJson,
    HistoryPage, HistoryParams, HostList, ListParams, ModuleJson, ModuleList, OutboxPage,
    OutboxParams, PauseJson, PollRequest, PruneRequest, PrunedJson, ResetJson, ResetRequest,
    ScheduleChangeJson, ScheduleJson, ScheduleList, ScheduleRequest, SentJson, StartRequest,
    StartedJson, TaskJson, UpgradeJson, UpgradeRequest, WaitsJson, WorkersJson, WorkflowJson,
    WorkflowPage,
};

/// How long a call may take unless it waits on purpose (a result or the outbox with `wait`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most a response body may hold: a page of 10,000 workflows with their inputs fits.
const MAX_RESPONSE: u64 = 1 << 30;

/// What a path segment keeps as it is: letters, digits, `-`, `_` and `~`. Everything else is
/// percent-encoded, `/` (children's ids hold it) and `.` (so that no id reads as `..`)
/// included.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'~');

/// A client of one `wfhost serve --http` server. Cheap to clone; every method may be called
/// from any thread, and connections are kept alive between calls.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
    timeout: Duration,
    retry_for: Duration,
    /// A worker's name and machine, sent with its polls.
    worker: Option<String>,
    machine: Option<String>,
    /// A W3C `traceparent` sent with every call: the caller's span, the parent of the server's.
    traceparent: Option<String>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the server at `url` (`http://host:port` or `https://host:port`, optionally
    /// with a path under which the API is mounted). Nothing is sent until the first call.
    pub fn new(url: &str) -> Result<Client> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::local(
                "bad_request",
                format!(
                    "'{url}' is not a server's address: give http://HOST:PORT or https://HOST:PORT"
                ),
            ));
        }
        Ok(Client {
            base,
            token: None,
            agent: agent(None),
            timeout: DEFAULT_TIMEOUT,
            retry_for: DEFAULT_RETRY_FOR,
            worker: None,
            machine: None,
            traceparent: None,
        })
    }

    /// Sends `traceparent` (W3C Trace Context: the caller's span) with every call: the server's
    /// span for the request is its child, and so are the runs of the workflows it starts.
    pub fn with_traceparent(mut self, traceparent: impl Into<String>) -> Client {
        let traceparent = traceparent.into();
        self.traceparent = (!traceparent.is_empty()).then_some(traceparent);
        self
    }

    /// Sends `token` as `Authorization: Bearer` with every call (the server's `--token-file`).
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        let token = token.into();
        self.token = (!token.is_empty()).then_some(token);
        self
    }

    /// Trusts the certificates in `pem` (and no others) for an `https://` server: for a server
    /// whose certificate no public authority signed.
    pub fn with_root_certificates(mut self, pem: &[u8]) -> Result<Client> {
        let mut certs = Vec::new();
        for item in ureq::tls::parse_pem(pem) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(cert)) => certs.push(cert),
                Ok(_) => {}
                Err(e) => {
                    return Err(Error::local(
                        "bad_request",
                        format!("the certificates are not PEM: {e}"),
                    ))
                }
            }
        }
        if certs.is_empty() {
            return Err(Error::local(
                "bad_request",
                "no certificate in the PEM given to trust",
            ));
        }
        self.agent = agent(Some(ureq::tls::RootCerts::new_with_certs(&certs)));
        Ok(self)
    }

    /// How long a call may take (its waits excepted); default [`DEFAULT_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// How long a call keeps asking again a server that is starting or restarting (a `503`
    /// that says to ask again, or a refused connection); default [`DEFAULT_RETRY_FOR`]. Zero:
    /// never asked again.
    pub fn with_retry_for(mut self, retry_for: Duration) -> Client {
        self.retry_for = retry_for;
        self
    }

    /// Names the worker this client polls for (`GET /v1/workers` shows it so), and the
    /// machine it runs on.
    pub fn with_worker_name(
        mut self,
        name: impl Into<String>,
        machine: impl Into<String>,
    ) -> Client {
        self.worker = Some(name.into());
        self.machine = Some(machine.into());
        self
    }

    /// The server's address, as given.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Stores a module (its `.wasm` bytes): what the server knows of it, and whether it was
    /// new (`false`: the store had it).
    pub fn put_module(&self, wasm: &[u8]) -> Result<(ModuleJson, bool)> {
        self.put_module_at("/v1/modules", wasm)
    }

    /// As [`put_module`](Self::put_module), under name `name`: it takes the name's next
    /// version (its `names` says which), unless it is the name's latest already.
    pub fn put_module_named(&self, wasm: &[u8], name: &str) -> Result<(ModuleJson, bool)> {
        let path = format!(
            "/v1/modules?name={}",
            utf8_percent_encode(name, NON_ALPHANUMERIC)
        );
        self.put_module_at(&path, wasm)
    }

    fn put_module_at(&self, path: &str, wasm: &[u8]) -> Result<(ModuleJson, bool)> {
        let body = Body::Bytes("application/wasm", wasm);
        // Sent again, the same bytes under the same name change nothing.
        let (status, module) = self.exchange(Method::Post, path, body, None, Repeat::Safe)?;
        Ok((decode(status, &module)?, status == 201))
    }

    /// The modules the store keeps.
    pub fn modules(&self) -> Result<ModuleList> {
        self.get("/v1/modules", None)
    }

    /// Starts a workflow: it, and whether this start made it (`false`: it existed with the
    /// same module, entry point and input). With an id, a start is safe to send again (after a
    /// timeout, say); without one, the server makes one, and each start is a workflow of its
    /// own.
    pub fn start(&self, start: &StartRequest) -> Result<StartedJson> {
        let repeat = Repeat::when(start.id.is_some());
        self.post_json("/v1/workflows", start, None, repeat)
            .map(|(_, started)| started)
    }

    /// Starts a workflow and waits up to `wait` for it to end, in one request (the server
    /// caps the wait): it as it stands then (its result when it ended) and whether this start
    /// made it. A workflow that existed is not started again: it is waited for. Give the start
    /// an id: then it is safe to send again, which a wait cut short by a restart calls for.
    pub fn start_and_wait(&self, start: &StartRequest, wait: Duration) -> Result<StartedJson> {
        let path = format!("/v1/workflows?wait={}", crate::duration::format(wait));
        let repeat = Repeat::when(start.id.is_some());
        self.post_json(&path, start, Some(wait), repeat)
            .map(|(_, started)| started)
    }

    /// Where workflow `id` stands.
    pub fn status(&self, id: &str) -> Result<WorkflowJson> {
        self.get(&format!("/v1/workflows/{}", segment(id)), None)
    }

    /// Where workflow `id` stands once it ends, waiting up to `wait` for that (the server caps
    /// the wait): still running at the deadline, it as it is.
    pub fn result(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowJson> {
        let mut path = format!("/v1/workflows/{}/result", segment(id));
        if let Some(wait) = wait {
            path.push_str(&format!("?wait={}", crate::duration::format(wait)));
        }
        self.get(&path, wait)
    }

    /// Sends the JSON `message` to workflow `id`. Not sent again after a refusal that may
    /// have been applied: a message may not be wanted twice.
    pub fn send(&self, id: &str, message: &RawValue) -> Result<SentJson> {
        let path = format!("/v1/workflows/{}/messages", segment(id));
        let body = Body::Bytes("application/json", message.get().as_bytes());
        let (status, sent) = self.exchange(Method::Post, &path, body, None, Repeat::Once)?;
        decode(status, &sent)
    }

    /// Asks workflow `id` to cancel.
    pub fn cancel(&self, id: &str) -> Result<CancelJson> {
        self.post_empty(&format!("/v1/workflows/{}/cancel", segment(id)))
    }

    /// Removes finished workflows (see [`PruneRequest`]).
    pub fn prune(&self, request: &PruneRequest) -> Result<PrunedJson> {
        self.post_json("/v1/prune", request, None, Repeat::Safe)
            .map(|(_, pruned)| pruned)
    }

    /// Pauses workflow `id`: it takes no step until unpaused.
    pub fn pause(&self, id: &str) -> Result<PauseJson> {
        self.post_empty(&format!("/v1/workflows/{}/pause", segment(id)))
    }

    /// Unpauses workflow `id`: it takes what waited for it, and goes on.
    pub fn unpause(&self, id: &str) -> Result<PauseJson> {
        self.post_empty(&format!("/v1/workflows/{}/unpause", segment(id)))
    }

    /// Gives running workflow `id` the module `module` (a SHA-256 the store keeps: see
    /// [`put_module`](Self::put_module)) if its journal replays the same with it; a 409 names
    /// the step that differs otherwise, and nothing changed.
    pub fn upgrade(&self, id: &str, module: &str) -> Result<UpgradeJson> {
        let path = format!("/v1/workflows/{}/upgrade", segment(id));
        let body = UpgradeRequest {
            module: module.to_string(),
        };
        self.post_json(&path, &body, None, Repeat::Safe)
            .map(|(_, upgraded)| upgraded)
    }

    /// Resets the finished workflow `id` (`POST /v1/workflows/{id}/reset`). Sent once: asked
    /// again after a lost answer it would find the new run running (`409`).
    pub fn reset(&self, id: &str, request: &ResetRequest) -> Result<ResetJson> {
        let path = format!("/v1/workflows/{}/reset", segment(id));
        self.post_json(&path, request, None, Repeat::Once)
            .map(|(_, reset)| reset)
    }

    /// Creates a schedule.
    pub fn create_schedule(&self, request: &ScheduleRequest) -> Result<ScheduleJson> {
        // Sent again after a lost answer it would find its own schedule: `409`.
        self.post_json("/v1/schedules", request, None, Repeat::Once)
            .map(|(_, schedule)| schedule)
    }

    /// Every schedule.
    pub fn schedules(&self) -> Result<ScheduleList> {
        self.get("/v1/schedules", None)
    }

    /// Schedule `id`.
    pub fn schedule(&self, id: &str) -> Result<ScheduleJson> {
        self.get(&format!("/v1/schedules/{}", segment(id)), None)
    }

    /// Pauses schedule `id` (`pause`) or resumes it (`resume`).
    pub fn change_schedule(&self, id: &str, verb: &str) -> Result<ScheduleChangeJson> {
        self.post_empty(&format!("/v1/schedules/{}/{verb}", segment(id)))
    }

    /// Deletes schedule `id` (the workflows it started stay).
    pub fn delete_schedule(&self, id: &str) -> Result<ScheduleChangeJson> {
        let path = format!("/v1/schedules/{}", segment(id));
        let (status, body) =
            self.exchange(Method::Delete, &path, Body::None, None, Repeat::Safe)?;
        decode(status, &body)
    }

    /// Fires schedule `id` now: the workflow it started. Not sent again after a refusal
    /// that may have been applied: each firing is a workflow of its own.
    pub fn trigger_schedule(&self, id: &str) -> Result<StartedJson> {
        let path = format!("/v1/schedules/{}/trigger", segment(id));
        let (status, body) = self.exchange(Method::Post, &path, Body::None, None, Repeat::Once)?;
        decode(status, &body)
    }

    /// A page of the store's workflows.
    pub fn list(&self, params: &ListParams) -> Result<WorkflowPage> {
        self.get(&format!("/v1/workflows{}", query(params)?), None)
    }

    /// How many of the store's workflows stand each way.
    pub fn counts(&self, params: &CountParams) -> Result<CountsJson> {
        self.get(&format!("/v1/workflow-counts{}", query(params)?), None)
    }

    /// A page of workflow `id`'s journal.
    pub fn history(&self, id: &str, params: &HistoryParams) -> Result<HistoryPage> {
        let path = format!("/v1/workflows/{}/history{}", segment(id), query(params)?);
        self.get(&path, None)
    }

    /// What workflow `id` waits for now, worked out from its journal on the server.
    pub fn waits(&self, id: &str) -> Result<WaitsJson> {
        self.get(&format!("/v1/workflows/{}/waits", segment(id)), None)
    }

    /// The messages workflow `id` sent the host after the cursor; with `wait`, waits for one
    /// when none is there yet.
    pub fn outbox(&self, id: &str, params: &OutboxParams) -> Result<OutboxPage> {
        let path = format!("/v1/workflows/{}/outbox{}", segment(id), query(params)?);
        let wait = params
            .wait
            .as_deref()
            .and_then(|text| crate::duration::parse(text).ok());
        self.get(&path, wait)
    }

    /// The store's hosts.
    pub fn hosts(&self) -> Result<HostList> {
        self.get("/v1/hosts", None)
    }

    /// Whether the server is ready: its store reachable, its lease held.
    pub fn ready(&self) -> Result<Health> {
        self.get("/readyz", None)
    }

    /// The server's metrics, in Prometheus' text format.
    pub fn metrics(&self) -> Result<String> {
        let (_, body) = self.exchange(Method::Get, "/metrics", Body::None, None, Repeat::Safe)?;
        String::from_utf8(body)
            .map_err(|_| Error::local("bad_answer", "the server's metrics are not UTF-8"))
    }

    /// The next task for one of `functions`, waiting up to `wait` for one (`None`: none came).
    /// Asked again only when the server took nothing (a task given in an answer that was lost
    /// comes back after its deadline).
    pub fn poll_task(&self, functions: &[String], wait: Duration) -> Result<Option<TaskJson>> {
        let body = PollRequest {
            functions: functions.to_vec(),
            wait: Some(crate::duration::format(wait)),
            worker: self.worker.clone(),
            host: self.machine.clone(),
        };
        let (status, body) = self.post_raw("/v1/tasks/poll", &body, Some(wait), Repeat::Once)?;
        if status == 204 {
            return Ok(None);
        }
        decode(status, &body).map(Some)
    }

    /// Completes task `task` with its result or error. A task that moved on (given to another
    /// worker after its deadline) is refused with status 409 (code `task_moved_on`).
    pub fn complete_task(&self, task: &str, completion: &CompleteRequest) -> Result<()> {
        let path = format!("/v1/tasks/{}/complete", segment(task));
        self.post_raw(&path, completion, None, Repeat::Once)
            .map(|_| ())
    }

    /// Completes task `task` and takes the next task for one of `functions`, waiting up to
    /// `wait` for one, in one request.
    pub fn complete_and_poll(
        &self,
        task: &str,
        completion: CompleteRequest,
        functions: &[String],
        wait: Duration,
    ) -> Result<Option<TaskJson>> {
        let path = format!("/v1/tasks/{}/complete", segment(task));
        let completion = CompleteRequest {
            next: Some(PollRequest {
                functions: functions.to_vec(),
                wait: Some(crate::duration::format(wait)),
                worker: self.worker.clone(),
                host: self.machine.clone(),
            }),
            ..completion
        };
        let (status, body) = self.post_raw(&path, &completion, Some(wait), Repeat::Once)?;
        if status == 204 {
            return Ok(None);
        }
        decode(status, &body).map(Some)
    }

    /// Moves task `task`'s deadline on.
    pub fn heartbeat_task(&self, task: &str) -> Result<HeartbeatJson> {
        let path = format!("/v1/tasks/{}/heartbeat", segment(task));
        let body = serde_json::json!({});
        self.post_json(&path, &body, None, Repeat::Safe)
            .map(|(_, beat)| beat)
    }

    /// Gives task `task` back, for another worker to take now (a worker that stops before
    /// it finished the task).
    pub fn release_task(&self, task: &str) -> Result<()> {
        let path = format!("/v1/tasks/{}/release", segment(task));
        // Sent again after a lost answer it would find the task moved on: `409`.
        self.exchange(Method::Post, &path, Body::None, None, Repeat::Once)
            .map(|_| ())
    }

    /// The workers the server has seen and the tasks of each function.
    pub fn workers(&self) -> Result<WorkersJson> {
        self.get("/v1/workers", None)
    }

    /// The OpenAPI document of the API.
    pub fn openapi(&self) -> Result<serde_json::Value> {
        self.get("/v1/openapi.json", None)
    }

    fn get<T: DeserializeOwned>(&self, path: &str, wait: Option<Duration>) -> Result<T> {
        let (status, body) = self.exchange(Method::Get, path, Body::None, wait, Repeat::Safe)?;
        decode(status, &body)
    }

    /// A POST without a body, of a route that is safe to repeat.
    fn post_empty<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let (status, body) = self.exchange(Method::Post, path, Body::None, None, Repeat::Safe)?;
        decode(status, &body)
    }

    /// Posts `body` as JSON; the status and the body of an answer that is not a refusal.
    fn post_raw<B: Serialize>(
        &self,
        path: &str,
        body: &B,
        wait: Option<Duration>,
        repeat: Repeat,
    ) -> Result<(u16, Vec<u8>)> {
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::local("bad_request", format!("cannot write the request: {e}")))?;
        let body = Body::Bytes("application/json", &body);
        self.exchange(Method::Post, path, body, wait, repeat)
    }

    fn post_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        wait: Option<Duration>,
        repeat: Repeat,
    ) -> Result<(u16, T)> {
        let (status, body) = self.post_raw(path, body, wait, repeat)?;
        decode(status, &body).map(|body| (status, body))
    }

    /// One call, asked again while the server says it is starting or restarting (within
    /// [`with_retry_for`](Self::with_retry_for)): the status and the body of an answer that is
    /// not a refusal, or the error a refusal carries.
    fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Body<'_>,
        wait: Option<Duration>,
        repeat: Repeat,
    ) -> Result<(u16, Vec<u8>)> {
        let timeout = self.timeout.saturating_add(wait.unwrap_or_default());
        // Counted from the first failure: a long wait that a restart cut short is asked again.
        let mut deadline = None;
        let mut pause = FIRST_PAUSE;
        loop {
            let answer = self.exchange_once(method, path, body, timeout);
            let Some(asked) = again(&answer, repeat, pause) else {
                return answer.map_err(|failed| failed.error);
            };
            let now = Instant::now();
            match *deadline.get_or_insert_with(|| now.checked_add(self.retry_for)) {
                Some(deadline) if now + asked <= deadline => {
                    std::thread::sleep(asked);
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
                _ => return answer.map_err(|failed| failed.error),
            }
        }
    }

    /// One call, once: the answer, or the error with the `Retry-After` of a `503`.
    fn exchange_once(
        &self,
        method: Method,
        path: &str,
        body: Body<'_>,
        timeout: Duration,
    ) -> std::result::Result<(u16, Vec<u8>), Failed> {
        let url = format!("{}{path}", self.base);
        let bearer = self.token.as_ref().map(|token| format!("Bearer {token}"));
        let response = match method {
            Method::Get | Method::Delete => {
                let request = if method == Method::Get {
                    self.agent.get(&url)
                } else {
                    self.agent.delete(&url)
                };
                let mut request = request.config().timeout_global(Some(timeout)).build();
                if let Some(bearer) = &bearer {
                    request = request.header("authorization", bearer);
                }
                if let Some(parent) = &self.traceparent {
                    request = request.header("traceparent", parent);
                }
                request.call()
            }
            Method::Post => {
                let mut request = self
                    .agent
                    .post(&url)
                    .config()
                    .timeout_global(Some(timeout))
                    .build();
                if let Some(bearer) = &bearer {
                    request = request.header("authorization", bearer);
                }
                if let Some(parent) = &self.traceparent {
                    request = request.header("traceparent", parent);
                }
                match body {
                    Body::None => request.send_empty(),
                    Body::Bytes(kind, bytes) => request.header("content-type", kind).send(bytes),
                }
            }
        };
        received(response, timeout)
    }
}

/// How long a call keeps asking again a server that is starting or restarting.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(30);

/// The first pause before asking again a server that gave no `Retry-After`; it doubles up to
/// [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// The `503` codes of a server that refused before doing anything: it has no host yet (it is
/// starting, or starting again), or holds as many requests or connections as it takes. Others
/// (`unavailable`, `shutting_down`, `store`) may come after a write.
const NOTHING_DONE: [&str; 4] = [
    "not_ready",
    "too_many_waiting",
    "too_many_connections",
    "too_many_requests",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Method {
    Get,
    Post,
    Delete,
}

#[derive(Clone, Copy)]
enum Body<'a> {
    None,
    /// The content type and the bytes.
    Bytes(&'static str, &'a [u8]),
}

/// Whether a call may be sent again when it is not known whether the server did it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Repeat {
    /// Doing it twice is doing it once (a read, a start with an id, a cancel).
    Safe,
    /// Sent again only when the server surely did nothing.
    Once,
}

impl Repeat {
    fn when(safe: bool) -> Repeat {
        if safe {
            Repeat::Safe
        } else {
            Repeat::Once
        }
    }
}

/// How long to wait before asking again, when `answer` says to: a `503` the server gave
/// (after its `Retry-After`, at most [`LONGEST_PAUSE`]) when it did nothing or the call is
/// safe to repeat; a connection the server refused (nothing was sent) or, for a call safe to
/// repeat, one it dropped.
fn again(
    answer: &std::result::Result<(u16, Vec<u8>), Failed>,
    repeat: Repeat,
    pause: Duration,
) -> Option<Duration> {
    let failed = answer.as_ref().err()?;
    let error = &failed.error;
    match error.status() {
        Some(503) if repeat == Repeat::Safe || NOTHING_DONE.contains(&error.code()) => Some(
            failed
                .retry_after
                .map_or(pause, |asked| asked.clamp(FIRST_PAUSE, LONGEST_PAUSE)),
        ),
        Some(_) => None,
        None if error.code() == "refused" => Some(pause),
        None if failed.dropped && repeat == Repeat::Safe => Some(pause),
        None => None,
    }
}

/// A call that failed, with what says whether to ask again.
struct Failed {
    error: Error,
    /// A `503`'s `Retry-After`.
    retry_after: Option<Duration>,
    /// The server closed the connection (it stopped, or a kept-alive connection had gone):
    /// the call may or may not have been done.
    dropped: bool,
}

impl Failed {
    fn transport(error: ureq::Error, timeout: Duration) -> Failed {
        let dropped = matches!(&error, ureq::Error::Io(e) if matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof
        ));
        Failed {
            error: transport(error, timeout),
            retry_after: None,
            dropped,
        }
    }
}

/// An agent: connections kept alive, statuses read as answers (not errors), `roots` trusted
/// for TLS when given.
fn agent(roots: Option<ureq::tls::RootCerts>) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("wfhost-client/", env!("CARGO_PKG_VERSION")));
    if let Some(roots) = roots {
        config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
    }
    config.build().into()
}

/// `id` as one path segment.
pub fn segment(id: &str) -> String {
    utf8_percent_encode(id, SEGMENT).to_string()
}

/// `params` as a query string (`?a=1&b=2`, or nothing).
fn query<T: Serialize>(params: &T) -> Result<String> {
    let value = serde_json::to_value(params)
        .map_err(|e| Error::local("bad_request", format!("cannot write the query: {e}")))?;
    let mut pairs = Vec::new();
    if let serde_json::Value::Object(map) = value {
        for (key, value) in map {
            let text = match value {
                serde_json::Value::Null => continue,
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
            pairs.push(format!("{key}={}", segment(&text)));
        }
    }
    Ok(if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    })
}

/// The status and the body of an answer that is not a refusal, or the error a refusal
/// carries (with the wait a `503`'s `Retry-After` asks for).
fn received(
    response: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    timeout: Duration,
) -> std::result::Result<(u16, Vec<u8>), Failed> {
    let mut response = response.map_err(|e| Failed::transport(e, timeout))?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE)
        .read_to_vec()
        .map_err(|e| Failed::transport(e, timeout))?;
    if status >= 400 {
        return Err(Failed {
            error: refusal(status, &body),
            retry_after,
            dropped: false,
        });
    }
    Ok((status, body))
}

/// An answer's body decoded.
fn decode<T: DeserializeOwned>(status: u16, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| {
        Error::local(
            "bad_answer",
            format!(
                "the server's answer ({status}) is not what this client expects ({e}): is it a \
                 wfhost server of the same version?"
            ),
        )
    })
}

/// The error a refusal carries (`{"error": {"code", "message"}}`), or one made from its
/// status when it carries none.
fn refusal(status: u16, body: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(body) => Error::refused(status, body.error.code, body.error.message),
        Err(_) => {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            Error::refused(
                status,
                "http".to_string(),
                format!("the server answered {status}: {text}"),
            )
        }
    }
}

/// A call that got no answer.
fn transport(error: ureq::Error, timeout: Duration) -> Error {
    match error {
        ureq::Error::Timeout(_) => Error::local(
            "timeout",
            format!("the server did not answer within {timeout:?}"),
        ),
        // Nothing was sent: safe to send again, whatever the call.
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Error::local(
            "refused",
            format!("cannot reach the server (is it running?): {e}"),
        ),
        ureq::Error::ConnectionFailed => Error::local(
            "refused",
            "cannot reach the server (is it running?): the connection failed",
        ),
        ureq::Error::Io(e) => Error::local("unreachable", format!("cannot reach the server: {e}")),
        ureq::Error::HostNotFound => Error::local(
            "unreachable",
            "cannot reach the server: its host name does not resolve",
        ),
        other => Error::local("unreachable", format!("cannot reach the server: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_one_segment() {
        assert_eq!(segment("order-42/3.0"), "order-42%2F3%2E0");
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("a b"), "a%20b");
        assert_eq!(segment("ü"), "%C3%BC");
    }

    #[test]
    fn queries_leave_out_what_is_not_given() {
        let params = ListParams {
            status: Some("running".into()),
            prefix: Some("a/b".into()),
            limit: Some(5),
            ..ListParams::default()
        };
        assert_eq!(
            query(&params).unwrap(),
            "?limit=5&prefix=a%2Fb&status=running"
        );
        assert_eq!(query(&ListParams::default()).unwrap(), "");
    }

    #[test]
    fn only_http_addresses_are_servers() {
        assert!(Client::new("http://127.0.0.1:8080/").is_ok());
        assert!(Client::new("https://wf.example").is_ok());
        let error = Client::new("wf.db").unwrap_err();
        assert_eq!(error.code(), "bad_request");
    }
}
