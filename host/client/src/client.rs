//! [`Client`]: the HTTP API of a `wfhost serve`, one method per route, blocking.

use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::wire::{
    CancelJson, CompleteRequest, CountParams, CountsJson, ErrorBody, Health, HeartbeatJson,
    HistoryPage, HistoryParams, HostList, ListParams, ModuleJson, ModuleList, OutboxPage,
    OutboxParams, PauseJson, PollRequest, PruneRequest, PrunedJson, ScheduleChangeJson,
    ScheduleJson, ScheduleList, ScheduleRequest, SentJson, StartRequest, StartedJson, TaskJson,
    UpgradeJson, UpgradeRequest, WaitsJson, WorkflowJson, WorkflowPage,
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
        })
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

    /// The server's address, as given.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Stores a module (its `.wasm` bytes): what the server knows of it, and whether it was
    /// new (`false`: the store had it).
    pub fn put_module(&self, wasm: &[u8]) -> Result<(ModuleJson, bool)> {
        let request = self
            .post("/v1/modules")
            .header("content-type", "application/wasm");
        let (status, module) = answer(request.send(wasm), self.timeout)?;
        Ok((module, status == 201))
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
        self.post_json("/v1/workflows", start)
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

    /// Sends the JSON `message` to workflow `id`.
    pub fn send(&self, id: &str, message: &RawValue) -> Result<SentJson> {
        let path = format!("/v1/workflows/{}/messages", segment(id));
        let request = self.post(&path).header("content-type", "application/json");
        answer(request.send(message.get()), self.timeout).map(|(_, sent)| sent)
    }

    /// Asks workflow `id` to cancel.
    pub fn cancel(&self, id: &str) -> Result<CancelJson> {
        let path = format!("/v1/workflows/{}/cancel", segment(id));
        answer(self.post(&path).send_empty(), self.timeout).map(|(_, c)| c)
    }

    /// Removes finished workflows (see [`PruneRequest`]).
    pub fn prune(&self, request: &PruneRequest) -> Result<PrunedJson> {
        self.post_json("/v1/prune", request)
    }

    /// Pauses workflow `id`: it takes no step until unpaused.
    pub fn pause(&self, id: &str) -> Result<PauseJson> {
        let path = format!("/v1/workflows/{}/pause", segment(id));
        answer(self.post(&path).send_empty(), self.timeout).map(|(_, p)| p)
    }

    /// Unpauses workflow `id`: it takes what waited for it, and goes on.
    pub fn unpause(&self, id: &str) -> Result<PauseJson> {
        let path = format!("/v1/workflows/{}/unpause", segment(id));
        answer(self.post(&path).send_empty(), self.timeout).map(|(_, p)| p)
    }

    /// Gives running workflow `id` the module `module` (a SHA-256 the store keeps: see
    /// [`put_module`](Self::put_module)) if its journal replays the same with it; a 409 names
    /// the step that differs otherwise, and nothing changed.
    pub fn upgrade(&self, id: &str, module: &str) -> Result<UpgradeJson> {
        let path = format!("/v1/workflows/{}/upgrade", segment(id));
        let body = UpgradeRequest {
            module: module.to_string(),
        };
        self.post_json(&path, &body)
    }

    /// Creates a schedule.
    pub fn create_schedule(&self, request: &ScheduleRequest) -> Result<ScheduleJson> {
        self.post_json("/v1/schedules", request)
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
        let path = format!("/v1/schedules/{}/{verb}", segment(id));
        answer(self.post(&path).send_empty(), self.timeout).map(|(_, c)| c)
    }

    /// Deletes schedule `id` (the workflows it started stay).
    pub fn delete_schedule(&self, id: &str) -> Result<ScheduleChangeJson> {
        let url = format!("{}/v1/schedules/{}", self.base, segment(id));
        let mut request = self
            .agent
            .delete(&url)
            .config()
            .timeout_global(Some(self.timeout))
            .build();
        if let Some(token) = &self.token {
            request = request.header("authorization", &format!("Bearer {token}"));
        }
        answer(request.call(), self.timeout).map(|(_, body)| body)
    }

    /// Fires schedule `id` now: the workflow it started.
    pub fn trigger_schedule(&self, id: &str) -> Result<StartedJson> {
        let path = format!("/v1/schedules/{}/trigger", segment(id));
        answer(self.post(&path).send_empty(), self.timeout).map(|(_, s)| s)
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
        let mut request = self
            .agent
            .get(format!("{}/metrics", self.base))
            .config()
            .timeout_global(Some(self.timeout))
            .build();
        if let Some(token) = &self.token {
            request = request.header("authorization", &format!("Bearer {token}"));
        }
        let mut response = request.call().map_err(|e| transport(e, self.timeout))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE)
            .read_to_string()
            .map_err(|e| transport(e, self.timeout))?;
        if status >= 400 {
            return Err(refusal(status, body.as_bytes()));
        }
        Ok(body)
    }

    /// The next task for one of `functions`, waiting up to `wait` for one (`None`: none came).
    pub fn poll_task(&self, functions: &[String], wait: Duration) -> Result<Option<TaskJson>> {
        let body = PollRequest {
            functions: functions.to_vec(),
            wait: Some(crate::duration::format(wait)),
        };
        let timeout = self.timeout.saturating_add(wait);
        let (status, body) = self.post_raw("/v1/tasks/poll", &body, timeout)?;
        if status == 204 {
            return Ok(None);
        }
        decode(status, &body).map(Some)
    }

    /// Completes task `task` with its result or error. A task that moved on (given to another
    /// worker after its deadline) is refused with status 409 (code `task_moved_on`).
    pub fn complete_task(&self, task: &str, completion: &CompleteRequest) -> Result<()> {
        let path = format!("/v1/tasks/{}/complete", segment(task));
        self.post_raw(&path, completion, self.timeout).map(|_| ())
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
            }),
            ..completion
        };
        let timeout = self.timeout.saturating_add(wait);
        let (status, body) = self.post_raw(&path, &completion, timeout)?;
        if status == 204 {
            return Ok(None);
        }
        decode(status, &body).map(Some)
    }

    /// Moves task `task`'s deadline on.
    pub fn heartbeat_task(&self, task: &str) -> Result<HeartbeatJson> {
        let path = format!("/v1/tasks/{}/heartbeat", segment(task));
        let (status, body) = self.post_raw(&path, &serde_json::json!({}), self.timeout)?;
        decode(status, &body)
    }

    /// The OpenAPI document of the API.
    pub fn openapi(&self) -> Result<serde_json::Value> {
        self.get("/v1/openapi.json", None)
    }

    fn post(&self, path: &str) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        self.post_within(path, self.timeout)
    }

    /// A POST of `path` that may take `timeout`.
    fn post_within(
        &self,
        path: &str,
        timeout: Duration,
    ) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let url = format!("{}{path}", self.base);
        let request = self
            .agent
            .post(&url)
            .config()
            .timeout_global(Some(timeout))
            .build();
        match &self.token {
            Some(token) => request.header("authorization", &format!("Bearer {token}")),
            None => request,
        }
    }

    fn get<T: DeserializeOwned>(&self, path: &str, wait: Option<Duration>) -> Result<T> {
        let url = format!("{}{path}", self.base);
        let timeout = self.timeout.saturating_add(wait.unwrap_or_default());
        let mut request = self
            .agent
            .get(&url)
            .config()
            .timeout_global(Some(timeout))
            .build();
        if let Some(token) = &self.token {
            request = request.header("authorization", &format!("Bearer {token}"));
        }
        answer(request.call(), timeout).map(|(_, body)| body)
    }

    /// Posts `body` as JSON; the status and the body of an answer that is not a refusal.
    fn post_raw<B: Serialize>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>)> {
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::local("bad_request", format!("cannot write the request: {e}")))?;
        let request = self
            .post_within(path, timeout)
            .header("content-type", "application/json");
        received(request.send(&body[..]), timeout)
    }

    fn post_json<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T> {
        let (status, body) = self.post_raw(path, body, self.timeout)?;
        decode(status, &body)
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

/// The status and the decoded body of an answer, or the error it carries.
fn answer<T: DeserializeOwned>(
    response: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    timeout: Duration,
) -> Result<(u16, T)> {
    let (status, body) = received(response, timeout)?;
    decode(status, &body).map(|body| (status, body))
}

/// The status and the body of an answer that is not a refusal, or the error a refusal carries.
fn received(
    response: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>)> {
    let mut response = response.map_err(|e| transport(e, timeout))?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE)
        .read_to_vec()
        .map_err(|e| transport(e, timeout))?;
    if status >= 400 {
        return Err(refusal(status, &body));
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
