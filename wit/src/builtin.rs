//! The host functions every host knows by name, and the values they take and give: outbound HTTP
//! ([`HTTP_FUNCTION`]) and the operator's retry policies ([`RETRY_POLICY_FUNCTION`]). They travel
//! as the input and output payloads of an ordinary `call`, so they are journaled and replayed as
//! every call is.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ErrorKind;

/// Names beginning with this are the host's own: an application cannot register one.
pub const RESERVED_PREFIX: &str = "wfhost.";

/// The built-in HTTP client: input [`HttpRequest`], output [`HttpResponse`]. A module reaches it
/// only if the host grants it (`--allow-http`), and only the URLs the host's allowlist names.
pub const HTTP_FUNCTION: &str = "wfhost.http";

/// The host's retry policy for a function: input the function's name (a string), output an
/// `option<retry-policy>` (none when the host sets no default). Every module may call it.
pub const RETRY_POLICY_FUNCTION: &str = "wfhost.retry-policy";

/// One HTTP header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The header's name, such as `content-type`.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// An HTTP request a workflow asks the host to make.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// An absolute `http` or `https` URL.
    pub url: String,
    /// Headers to send. The host adds `idempotency-key` and refuses those it sets itself
    /// (`host`, `content-length`, `transfer-encoding`, `connection`).
    pub headers: Vec<Header>,
    /// The body (empty for none).
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// How long the whole exchange may take; the host's default (and ceiling) when none.
    pub timeout: Option<Duration>,
}

impl HttpRequest {
    /// A request with `method` to `url`, without headers or body.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> HttpRequest {
        HttpRequest {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// A `GET` of `url`.
    pub fn get(url: impl Into<String>) -> HttpRequest {
        HttpRequest::new("GET", url)
    }

    /// A `POST` of `body` to `url`.
    pub fn post(url: impl Into<String>, body: impl Into<Vec<u8>>) -> HttpRequest {
        HttpRequest::new("POST", url).body(body)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> HttpRequest {
        self.headers.push(Header {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> HttpRequest {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, with `content-type: application/json`.
    pub fn json<T: Serialize + ?Sized>(
        self,
        value: &T,
    ) -> Result<HttpRequest, crate::PayloadError> {
        let body =
            serde_json::to_vec(value).map_err(|e| crate::PayloadError::Json(e.to_string()))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sets how long the whole exchange may take (the host caps it).
    pub fn timeout(mut self, timeout: Duration) -> HttpRequest {
        self.timeout = Some(timeout);
        self
    }
}

/// The answer to an [`HttpRequest`]: any status, 4xx and 5xx included (they are answers, not
/// failures of the call).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The response's headers, names in lower case.
    pub headers: Vec<Header>,
    /// The body.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    /// The body as JSON, decoded as `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, crate::PayloadError> {
        serde_json::from_slice(&self.body).map_err(|e| crate::PayloadError::Json(e.to_string()))
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// How a failed call is tried again: the wait before attempt `n + 1` is
/// `initial_interval × backoff^(n − 1)`, at most `max_interval`; attempts stop at `max_attempts`
/// (zero: no limit) or once `max_elapsed` has passed since the first failed, and at once on an
/// error of
/// a kind that is never retried (`rejected`, `invalid-input`, `not-allowed`, `unknown-command`,
/// `cancelled`) or one listed in `non_retryable`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// The wait before the second attempt.
    pub initial_interval: Duration,
    /// What each wait is multiplied by for the next (at least 1).
    pub backoff: f64,
    /// The longest wait.
    pub max_interval: Duration,
    /// The most attempts, the first included; zero for no limit.
    pub max_attempts: u32,
    /// No attempt starts once this much time has passed since the first failed (by the host's
    /// clock, which the journal keeps).
    pub max_elapsed: Option<Duration>,
    /// Error kinds not retried, besides those never retried.
    pub non_retryable: Vec<ErrorKind>,
}

impl Default for RetryPolicy {
    /// 1 s, doubling, at most 100 s apart, 10 attempts: a call that keeps failing gives up after
    /// about 8 minutes.
    fn default() -> Self {
        RetryPolicy {
            initial_interval: Duration::from_secs(1),
            backoff: 2.0,
            max_interval: Duration::from_secs(100),
            max_attempts: 10,
            max_elapsed: None,
            non_retryable: Vec::new(),
        }
    }
}

impl RetryPolicy {
    /// One attempt: the call's first error is its outcome.
    pub fn never() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Sets the wait before the second attempt.
    pub fn initial_interval(mut self, interval: Duration) -> RetryPolicy {
        self.initial_interval = interval;
        self
    }

    /// Sets what each wait is multiplied by (values under 1, and NaN, count as 1).
    pub fn backoff(mut self, coefficient: f64) -> RetryPolicy {
        self.backoff = coefficient;
        self
    }

    /// Sets the longest wait.
    pub fn max_interval(mut self, interval: Duration) -> RetryPolicy {
        self.max_interval = interval;
        self
    }

    /// Sets the most attempts, the first included (zero: no limit).
    pub fn max_attempts(mut self, attempts: u32) -> RetryPolicy {
        self.max_attempts = attempts;
        self
    }

    /// Stops retrying once `elapsed` has passed since the first attempt failed.
    pub fn max_elapsed(mut self, elapsed: Duration) -> RetryPolicy {
        self.max_elapsed = Some(elapsed);
        self
    }

    /// Never retries errors of `kind`.
    pub fn non_retryable(mut self, kind: ErrorKind) -> RetryPolicy {
        if !self.non_retryable.contains(&kind) {
            self.non_retryable.push(kind);
        }
        self
    }

    /// Whether an error of `kind` may be tried again under this policy.
    pub fn retries(&self, kind: ErrorKind) -> bool {
        !matches!(
            kind,
            ErrorKind::Rejected
                | ErrorKind::InvalidInput
                | ErrorKind::NotAllowed
                | ErrorKind::UnknownCommand
                | ErrorKind::Cancelled
        ) && !self.non_retryable.contains(&kind)
    }

    /// The wait after failed attempt `attempt` (1 for the first), before the next.
    pub fn delay(&self, attempt: u32) -> Duration {
        let coefficient = if self.backoff >= 1.0 {
            self.backoff
        } else {
            1.0
        };
        let cap = self.max_interval.as_secs_f64();
        let mut delay = self.initial_interval.as_secs_f64();
        for _ in 1..attempt {
            if delay >= cap {
                break;
            }
            delay *= coefficient;
        }
        let delay = if delay > cap { cap } else { delay };
        // Finite and at most `max_interval` here, so the conversion holds.
        Duration::try_from_secs_f64(delay).unwrap_or(self.max_interval)
    }

    /// Whether attempt `attempt` (1 for the first) may be followed by another, `elapsed` after
    /// the first failed, once the wait before it is counted.
    pub fn allows_another(&self, attempt: u32, elapsed: Duration) -> bool {
        if self.max_attempts != 0 && attempt >= self.max_attempts {
            return false;
        }
        match self.max_elapsed {
            Some(limit) => elapsed.saturating_add(self.delay(attempt)) < limit,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_by_the_coefficient_up_to_the_cap() {
        let policy = RetryPolicy::default()
            .initial_interval(Duration::from_millis(100))
            .backoff(3.0)
            .max_interval(Duration::from_secs(2));
        let delays: Vec<u128> = (1..=5).map(|n| policy.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 300, 900, 2000, 2000]);
        assert_eq!(policy.clone().backoff(f64::NAN).delay(4).as_millis(), 100);
        assert!(!policy.allows_another(10, Duration::ZERO));
        assert!(policy.allows_another(9, Duration::ZERO));
        let timed = policy.max_attempts(0).max_elapsed(Duration::from_secs(1));
        assert!(timed.allows_another(1, Duration::from_millis(850)));
        assert!(!timed.allows_another(2, Duration::from_millis(750)));
        assert!(RetryPolicy::never().retries(ErrorKind::Failed));
        assert!(!RetryPolicy::never().allows_another(1, Duration::ZERO));
        assert!(!RetryPolicy::default().retries(ErrorKind::Rejected));
        assert!(!RetryPolicy::default()
            .non_retryable(ErrorKind::Timeout)
            .retries(ErrorKind::Timeout));
    }
}
