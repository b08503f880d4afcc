//! The built-in HTTP client, `wfhost.http`: a workflow's requests to the URLs the operator allows
//! (`--allow-http`, [`HostBuilder::allow_http`](crate::HostBuilder::allow_http)). Its answers are
//! completions like any other, journaled, so a replay never sends a request again.
//!
//! Each request, and each redirect it is sent on, is checked against the allowlist and the
//! addresses its host resolves to (see [`allow`]); bodies are bounded both ways, and the whole
//! exchange by a time limit. The request carries the call's idempotency key (`Idempotency-Key`).

mod allow;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use url::{Host, Url};
use wfcontract::{CommandError, ErrorKind, Header, HttpRequest, HttpResponse, Payload};

use self::allow::{is_public, Pattern};
use super::{CallInfo, HostFunction};

/// How `wfhost.http` behaves: what it may reach, and its limits.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// The allowlist patterns (see [`HostBuilder::allow_http`](crate::HostBuilder::allow_http)).
    pub allow: Vec<String>,
    /// Lets every allowed URL reach addresses that are not public (for hosts on a private
    /// network). Off by default: only a pattern naming an address reaches a private one.
    pub allow_private: bool,
    /// The largest request body.
    pub max_request_bytes: usize,
    /// The largest response body; a longer one fails the call (`limit-reached`).
    pub max_response_bytes: usize,
    /// A request's time limit when the workflow gives none.
    pub timeout: Duration,
    /// The longest time limit a workflow may ask for.
    pub max_timeout: Duration,
    /// Redirects followed, at most; each is checked as the first request was.
    pub max_redirects: u32,
    /// The response bytes all calls may hold at once (each up to `max_response_bytes`); a call
    /// whose response would go past it fails with `limit-reached`.
    pub max_response_memory: usize,
    /// Response statuses that fail the call (`failed`, with the status and the start of the
    /// body) instead of answering it, so that a retry policy tries again: `500..=599` for
    /// "retry on 5xx" (`--retry wfhost.http=...,on:5xx`). None by default: every response is
    /// the call's answer.
    pub fail_statuses: Vec<std::ops::RangeInclusive<u16>>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            allow: Vec::new(),
            allow_private: false,
            max_request_bytes: 2 << 20,
            max_response_bytes: 2 << 20,
            timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(300),
            max_redirects: 5,
            max_response_memory: 256 << 20,
            fail_statuses: Vec::new(),
        }
    }
}

/// The checked settings and the client they made.
pub(crate) struct HttpClient {
    settings: HttpSettings,
    patterns: Vec<Pattern>,
    client: reqwest::Client,
    /// The response bytes all calls hold at once, in KiB.
    memory: Arc<tokio::sync::Semaphore>,
}

/// Name lookups at once (each holds a thread of the blocking pool while it runs).
const MAX_LOOKUPS: usize = 16;

impl HttpClient {
    /// The client for `settings`, or what is wrong with them.
    pub(crate) fn new(settings: HttpSettings) -> Result<HttpClient, String> {
        let patterns = settings
            .allow
            .iter()
            .map(|text| Pattern::parse(text))
            .collect::<Result<Vec<_>, _>>()?;
        let localhost = patterns.iter().any(|p| p.names_address());
        let memory = Arc::new(tokio::sync::Semaphore::new(
            (settings.max_response_memory >> 10).min(tokio::sync::Semaphore::MAX_PERMITS),
        ));
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(Resolver {
                allow_private: settings.allow_private,
                localhost,
                lookups: Arc::new(tokio::sync::Semaphore::new(MAX_LOOKUPS)),
            }))
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("wfhost/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("the HTTP client did not start: {e}"))?;
        Ok(HttpClient {
            settings,
            patterns,
            client,
            memory,
        })
    }

    /// The host function.
    pub(crate) fn function(self) -> HostFunction {
        let client = Arc::new(self);
        // Its own time limits are the request's; the call's timeout is off.
        HostFunction::future(move |info: CallInfo, input: Payload| {
            let client = Arc::clone(&client);
            async move {
                let request: HttpRequest = input.decode().map_err(|e| {
                    CommandError::new(
                        ErrorKind::InvalidInput,
                        format!("wfhost.http takes an HttpRequest: {e}"),
                    )
                })?;
                let response = client
                    .send(
                        request,
                        info.idempotency_key,
                        info.attempt,
                        info.traceparent,
                    )
                    .await?;
                Payload::encode(input.encoding, &response).map_err(|e| {
                    CommandError::new(
                        ErrorKind::Failed,
                        format!("the response did not encode: {e}"),
                    )
                })
            }
        })
        .timeout(None)
    }

    /// Whether `url` may be requested, or the `not-allowed` error saying why not.
    fn check(&self, url: &Url) -> Result<(), CommandError> {
        let refused = |why: String| CommandError::new(ErrorKind::NotAllowed, why);
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refused(format!(
                "{url}: only http and https URLs may be requested"
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refused(format!(
                "{}: a URL with user information is not requested (send credentials in a header)",
                url.host_str().unwrap_or("the URL")
            )));
        }
        let matched: Vec<&Pattern> = self.patterns.iter().filter(|p| p.matches(url)).collect();
        if matched.is_empty() {
            return Err(refused(format!(
                "{url} is not in the host's HTTP allowlist ({}); the operator allows URLs with \
                 --allow-http",
                if self.patterns.is_empty() {
                    "which is empty".to_string()
                } else {
                    self.patterns
                        .iter()
                        .map(Pattern::text)
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )));
        }
        let explicit = self.settings.allow_private || matched.iter().any(|p| p.names_address());
        let address = match url.host() {
            Some(Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            Some(Host::Domain(name)) if name == "localhost" && !explicit => {
                return Err(refused(format!(
                    "{url}: localhost is reached only through a pattern that names it"
                )))
            }
            _ => None,
        };
        if let Some(address) = address {
            if !is_public(address) && !explicit {
                return Err(refused(format!(
                    "{url}: {address} is not a public address, and no allowlist pattern names \
                     it (write one with the address itself, such as http://{address}/*, to allow it)"
                )));
            }
        }
        Ok(())
    }

    async fn send(
        &self,
        request: HttpRequest,
        key: Option<String>,
        attempt: u32,
        traceparent: Option<String>,
    ) -> Result<HttpResponse, CommandError> {
        let invalid = |why: String| CommandError::new(ErrorKind::InvalidInput, why);
        let mut url = Url::parse(&request.url)
            .map_err(|e| invalid(format!("'{}' is not an absolute URL: {e}", request.url)))?;
        let mut method = match request.method.to_ascii_uppercase().as_str() {
            "GET" => Method::GET,
            "HEAD" => Method::HEAD,
            "POST" => Method::POST,
            "PUT" => Method::PUT,
            "PATCH" => Method::PATCH,
            "DELETE" => Method::DELETE,
            "OPTIONS" => Method::OPTIONS,
            _ => {
                return Err(invalid(format!(
                    "'{}' is not a method workflows may use: GET, HEAD, POST, PUT, PATCH, \
                     DELETE or OPTIONS",
                    request.method
                )))
            }
        };
        if request.body.len() > self.settings.max_request_bytes {
            return Err(CommandError::new(
                ErrorKind::LimitReached,
                format!(
                    "the request body is {} bytes, over the host's limit of {}",
                    request.body.len(),
                    self.settings.max_request_bytes
                ),
            ));
        }
        let mut headers = headers(&request.headers)?;
        // The call's key, unless the workflow gives one of its own (one key for every attempt
        // of a retried request, say).
        let name = HeaderName::from_static("idempotency-key");
        if let Some(key) = key.filter(|_| !headers.contains_key(&name)) {
            if let Ok(value) = HeaderValue::from_str(&key) {
                headers.insert(name, value);
                // Which attempt at the call under that one key this is (1, 2, ... as the
                // workflow's retry policy tries again).
                headers.insert(
                    HeaderName::from_static("wfhost-attempt"),
                    HeaderValue::from(attempt),
                );
            }
        }
        // The call's span, as the parent of what the server does with it (W3C Trace Context),
        // unless the workflow gives a trace of its own.
        let name = HeaderName::from_static("traceparent");
        if let Some(parent) = traceparent.filter(|_| !headers.contains_key(&name)) {
            if let Ok(value) = HeaderValue::from_str(&parent) {
                headers.insert(name, value);
            }
        }
        let limit = request
            .timeout
            .unwrap_or(self.settings.timeout)
            .min(self.settings.max_timeout);
        let mut body = request.body;
        let exchange = async {
            let mut redirects = 0;
            loop {
                self.check(&url)?;
                let response = self
                    .client
                    .request(method.clone(), url.clone())
                    .headers(headers.clone())
                    .body(body.clone())
                    .send()
                    .await
                    .map_err(|e| failed(&url, e))?;
                let status = response.status();
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .map(str::to_string);
                let redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
                let Some(location) = location.filter(|_| redirect) else {
                    let response = self.read(response).await?;
                    return self.failing(&url, response);
                };
                redirects += 1;
                if redirects > self.settings.max_redirects {
                    return Err(CommandError::new(
                        ErrorKind::Failed,
                        format!("{url}: more than {} redirects", self.settings.max_redirects),
                    ));
                }
                let next = url.join(&location).map_err(|e| {
                    CommandError::new(
                        ErrorKind::Failed,
                        format!("{url} redirected to '{location}', which is not a URL: {e}"),
                    )
                })?;
                if next.origin() != url.origin() {
                    // Credentials go to the origin they were meant for only.
                    for name in ["authorization", "cookie", "proxy-authorization"] {
                        headers.remove(name);
                    }
                }
                let see_other = status == StatusCode::SEE_OTHER
                    || (matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
                        && method == Method::POST);
                if see_other && method != Method::HEAD {
                    method = Method::GET;
                    body = Vec::new();
                    headers.remove(reqwest::header::CONTENT_TYPE);
                }
                url = next;
            }
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => Err(CommandError::new(
                ErrorKind::Timeout,
                format!("{} did not answer within {limit:?}", request.url),
            )),
        }
    }

    /// The response, its body read up to the limit.
    /// `response`, or the failure it is when its status is one the settings fail on.
    fn failing(&self, url: &Url, response: HttpResponse) -> Result<HttpResponse, CommandError> {
        let status = response.status;
        if !self
            .settings
            .fail_statuses
            .iter()
            .any(|s| s.contains(&status))
        {
            return Ok(response);
        }
        let body =
            String::from_utf8_lossy(&response.body[..response.body.len().min(200)]).into_owned();
        Err(CommandError::new(
            ErrorKind::Failed,
            format!("{url} answered {status} ({body}), a status this host fails calls on"),
        ))
    }

    async fn read(&self, mut response: reqwest::Response) -> Result<HttpResponse, CommandError> {
        let limit = self.settings.max_response_bytes;
        let over = |url: &Url| {
            CommandError::new(
                ErrorKind::LimitReached,
                format!("{url}: the response body is over the host's limit of {limit} bytes"),
            )
        };
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(over(response.url()));
        }
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| Header {
                name: name.as_str().to_string(),
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            })
            .collect();
        let url = response.url().clone();
        let mut body = Vec::new();
        // The bytes held count against the host's budget until this call's answer is made.
        let mut held = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(&url, e))? {
            if body.len() + chunk.len() > limit {
                return Err(over(&url));
            }
            let kib = u32::try_from(chunk.len().div_ceil(1024)).unwrap_or(u32::MAX);
            match Arc::clone(&self.memory).try_acquire_many_owned(kib) {
                Ok(permit) => held.push(permit),
                Err(_) => {
                    return Err(CommandError::new(
                        ErrorKind::LimitReached,
                        format!(
                            "{url}: the host holds {} MiB of HTTP responses already, its limit; \
                             retry later",
                            self.settings.max_response_memory >> 20
                        ),
                    ))
                }
            }
            body.extend_from_slice(&chunk);
        }
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

/// The workflow's headers, refusing those the host sets itself.
fn headers(given: &[Header]) -> Result<HeaderMap, CommandError> {
    let mut headers = HeaderMap::new();
    for Header { name, value } in given {
        let invalid = |why: &str| {
            CommandError::new(ErrorKind::InvalidInput, format!("header '{name}': {why}"))
        };
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("not a name"))?;
        if matches!(
            name.as_str(),
            "host" | "content-length" | "transfer-encoding" | "connection" | "upgrade" | "te"
        ) {
            return Err(invalid("the host sets it itself"));
        }
        let value = HeaderValue::from_str(value).map_err(|_| invalid("not a header value"))?;
        headers.append(name, value);
    }
    Ok(headers)
}

fn failed(url: &Url, error: reqwest::Error) -> CommandError {
    let kind = if error.is_timeout() {
        ErrorKind::Timeout
    } else if error.is_connect() {
        ErrorKind::Unavailable
    } else {
        ErrorKind::Failed
    };
    // The error's sources say why (a refused address says so through the resolver's error).
    let mut message = format!("{url}: {error}");
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    if message.contains(REFUSED) {
        return CommandError::new(ErrorKind::NotAllowed, message);
    }
    CommandError::new(kind, message)
}

/// What the resolver's refusals say, to tell them from other failures.
const REFUSED: &str = "resolves only to addresses that are not public";

/// Name resolution that drops addresses a workflow may not reach: a name that resolves to a
/// private address only is refused, so neither a pattern of `*` nor a DNS answer reaches the
/// host's own network.
struct Resolver {
    allow_private: bool,
    /// Some pattern names `localhost` (or an address): `localhost` may resolve to loopback.
    localhost: bool,
    /// Turns for lookups: the system's resolver blocks a thread of the runtime's blocking
    /// pool, which blocking host functions share.
    lookups: Arc<tokio::sync::Semaphore>,
}

impl Resolve for Resolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let localhost = self.localhost && name.as_str().eq_ignore_ascii_case("localhost");
        let lookups = Arc::clone(&self.lookups);
        Box::pin(async move {
            let host = name.as_str().to_string();
            let _turn = lookups.acquire_owned().await?;
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| {
                    allow_private || is_public(a.ip()) || (localhost && a.ip().is_loopback())
                })
                .collect();
            if kept.is_empty() {
                let addresses: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                return Err(format!("{host} {REFUSED} ({})", addresses.join(", ")).into());
            }
            let addrs: Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}
