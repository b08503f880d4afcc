//! What lets workflows act on the world: the URLs the built-in HTTP client may reach
//! (`--allow-http`), the retry policies of functions (`--retry`), and, for `wfhost serve`, the
//! functions that activity workers serve (`--worker-function`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use wfhost::contract::builtin::HTTP_FUNCTION;
use wfhost::store::Location;
use wfhost::tasks::{TaskSettings, Tasks};
use wfhost::{CommandErrorKind, Grants, HostBuilder, HttpSettings, RetryPolicy};

use super::units::{parse_duration, parse_size};

/// Outbound HTTP and retries.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Workflows that act")]
pub struct ActArgs {
    /// Let workflows request URLs matching PATTERN with the built-in HTTP client (ctx.http):
    /// SCHEME://HOST[:PORT][/PATH], such as 'https://api.example.com/v1/*' or
    /// 'https://*.example.com/*'. Repeatable; nothing by default. Addresses that are not public
    /// (loopback, private, link-local) are reached only through a pattern naming the address
    /// ('http://127.0.0.1:8080/*'). Grants wfhost.http to the workflows (--deny wfhost.http
    /// withdraws it).
    #[arg(long, value_name = "PATTERN")]
    allow_http: Vec<String>,

    /// Let allowed URLs reach private addresses too (hosts on your own network, by name).
    #[arg(long)]
    allow_private_http: bool,

    /// The largest HTTP response body a workflow receives; a larger one fails the call.
    #[arg(long, value_name = "SIZE", default_value = "2MiB", value_parser = parse_size)]
    http_max_response: usize,

    /// An HTTP request's time limit when the workflow gives none.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    http_timeout: Duration,

    /// How calls of FUNCTION (wfhost.http, or a worker function) are retried when the workflow
    /// names no policy: FUNCTION=attempts:5,initial:200ms,backoff:2,max:30s,elapsed:10m
    /// (each part optional; attempts:0 for no limit). Every attempt of a call carries the first
    /// one's idempotency key. For wfhost.http, on:5xx (or on:503, on:5xx+429) fails a call on
    /// those response statuses, so that they are retried too; by default every response is the
    /// call's answer. Repeatable.
    #[arg(long, value_name = "FUNCTION=POLICY", value_parser = parse_retry)]
    retry: Vec<Retry>,

    /// The most calls of functions (HTTP requests, worker tasks) in flight on the host at once;
    /// past it a call fails with limit-reached (which a retry policy retries). One workflow may
    /// have a tenth of it.
    #[arg(long, value_name = "N", default_value_t = wfhost::DEFAULT_FUNCTION_QUEUE)]
    max_calls: usize,
}

impl ActArgs {
    /// The builder with the HTTP client and the retry policies.
    pub fn apply(&self, mut builder: HostBuilder) -> HostBuilder {
        builder = builder
            .function_queue(self.max_calls.max(1))
            .function_calls_per_process((self.max_calls / 10).max(1));
        if !self.allow_http.is_empty() {
            builder = builder.http(HttpSettings {
                allow: self.allow_http.clone(),
                allow_private: self.allow_private_http,
                max_response_bytes: self.http_max_response,
                timeout: self.http_timeout,
                fail_statuses: self
                    .retry
                    .iter()
                    .flat_map(|retry| retry.on.iter().cloned())
                    .collect(),
                ..HttpSettings::default()
            });
        }
        for retry in &self.retry {
            builder = builder.retry_policy(&retry.function, retry.policy.clone());
        }
        builder
    }

    /// `grants` with the HTTP client granted, when it allows anything.
    pub fn grant(&self, grants: Grants) -> Grants {
        if self.allow_http.is_empty() {
            grants
        } else {
            grants.allow_function(HTTP_FUNCTION)
        }
    }
}

/// Activity workers: functions that programs outside the host serve over the HTTP API.
#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "Activity workers")]
pub struct WorkerFunctionArgs {
    /// A function activity workers serve (they poll POST /v1/tasks/poll for its tasks; see
    /// `wfhost worker`). Granted to the workflows this host runs (--deny NAME withdraws it).
    /// Repeatable.
    #[arg(long, value_name = "NAME")]
    worker_function: Vec<String>,

    /// How long a worker holds a task without completing or heartbeating it before the task
    /// goes to another worker.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    task_timeout: Duration,

    /// A token of a worker's own, good for the task routes of the functions named only:
    /// FUNCTION[,FUNCTION...]=PATH (the file holds the token). Repeatable.
    #[arg(long, value_name = "FUNCTIONS=PATH", value_parser = parse_worker_token)]
    worker_token_file: Vec<(Vec<String>, PathBuf)>,
}

impl WorkerFunctionArgs {
    /// The board the worker functions' tasks go on, if there are any: in memory for a SQLite
    /// store, in the store for PostgreSQL (a worker may poll any host).
    pub fn tasks(&self, store: &Location) -> anyhow::Result<Option<Tasks>> {
        if self.worker_function.is_empty() {
            return Ok(None);
        }
        let settings = TaskSettings {
            timeout: self.task_timeout,
            ..TaskSettings::default()
        };
        Ok(Some(match store {
            Location::Postgres(url) => Tasks::postgres(url, settings)?,
            _ => Tasks::new(settings),
        }))
    }

    /// The builder with the worker functions on `tasks`.
    pub fn apply(&self, mut builder: HostBuilder, tasks: Option<&Tasks>) -> HostBuilder {
        if let Some(tasks) = tasks {
            builder = builder.tasks(tasks.clone());
            for name in &self.worker_function {
                builder = builder.worker_function(name);
            }
        }
        builder
    }

    /// `grants` with the worker functions granted.
    pub fn grant(&self, grants: Grants) -> Grants {
        self.worker_function
            .iter()
            .fold(grants, |grants, name| grants.allow_function(name.clone()))
    }

    /// The API with the task routes and the workers' tokens.
    pub fn api(
        &self,
        mut api: wfhost_server::http::Api,
        tasks: &Tasks,
    ) -> anyhow::Result<wfhost_server::http::Api> {
        api = api
            .tasks(tasks.clone())
            .worker_functions(&self.worker_function);
        for (functions, path) in &self.worker_token_file {
            let token = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the worker token file {}", path.display()))?;
            api = api
                .worker_token(&token, functions)
                .with_context(|| format!("--worker-token-file {}", path.display()))?;
        }
        Ok(api)
    }

    /// Whether there are worker functions.
    pub fn any(&self) -> bool {
        !self.worker_function.is_empty()
    }
}

fn parse_worker_token(text: &str) -> Result<(Vec<String>, PathBuf), String> {
    let (functions, path) = text
        .split_once('=')
        .filter(|(f, p)| !f.is_empty() && !p.is_empty())
        .ok_or_else(|| {
            format!("'{text}' is not FUNCTIONS=PATH (e.g. payments.charge,email.send=worker.token)")
        })?;
    Ok((
        functions.split(',').map(|f| f.trim().to_string()).collect(),
        PathBuf::from(path),
    ))
}

/// A function's retry policy, as `--retry` gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Retry {
    /// The function.
    pub function: String,
    /// Its policy.
    pub policy: RetryPolicy,
    /// For wfhost.http: the response statuses that fail a call, so that it is retried.
    pub on: Vec<std::ops::RangeInclusive<u16>>,
}

/// `NAME=attempts:5,initial:200ms,backoff:2,max:30s,elapsed:10m,never:timeout[,on:5xx]`.
pub(super) fn parse_retry(text: &str) -> Result<Retry, String> {
    let (name, spec) = text.split_once('=').ok_or_else(|| {
        format!("'{text}' is not FUNCTION=POLICY (e.g. payments.charge=attempts:5,initial:1s)")
    })?;
    if name.is_empty() {
        return Err(format!("'{text}' names no function before '='"));
    }
    let mut policy = RetryPolicy::default();
    let mut on = Vec::new();
    if spec == "never" {
        return Ok(Retry {
            function: name.to_string(),
            policy: RetryPolicy::never(),
            on,
        });
    }
    for part in spec.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once(':').ok_or_else(|| {
            format!("'{part}' in --retry is not KEY:VALUE (attempts, initial, backoff, max, elapsed, never)")
        })?;
        let bad = |what: &str| format!("'{part}' in --retry: {value} is not {what}");
        match key {
            "attempts" => policy.max_attempts = value.parse().map_err(|_| bad("a count"))?,
            "initial" => policy.initial_interval = parse_duration(value)?,
            "max" => policy.max_interval = parse_duration(value)?,
            "elapsed" => policy.max_elapsed = Some(parse_duration(value)?),
            "backoff" => {
                let backoff: f64 = value.parse().map_err(|_| bad("a number"))?;
                if !(1.0..=100.0).contains(&backoff) {
                    return Err(bad("a coefficient from 1 to 100"));
                }
                policy.backoff = backoff;
            }
            "never" => {
                let kind = CommandErrorKind::from_name(value)
                    .ok_or_else(|| bad("an error kind (failed, timeout, unavailable, ...)"))?;
                policy.non_retryable.push(kind);
            }
            "on" if name != HTTP_FUNCTION => {
                return Err(format!(
                    "'{part}' in --retry: on: names response statuses, which only {HTTP_FUNCTION} \
                     answers with"
                ))
            }
            "on" => {
                for status in value.split('+') {
                    on.push(
                        parse_status(status).ok_or_else(|| {
                            bad("a status or a class of them (5xx, 503, 5xx+429)")
                        })?,
                    );
                }
            }
            _ => {
                return Err(format!(
                    "'{key}' in --retry is none of attempts, initial, backoff, max, elapsed, \
                     never, on"
                ))
            }
        }
    }
    Ok(Retry {
        function: name.to_string(),
        policy,
        on,
    })
}

/// `5xx` (500 to 599) or `503`.
fn parse_status(text: &str) -> Option<std::ops::RangeInclusive<u16>> {
    match text.strip_suffix("xx") {
        Some(class) => {
            let class: u16 = class.parse().ok().filter(|c| (1..=5).contains(c))?;
            Some(class * 100..=class * 100 + 99)
        }
        None => {
            let status: u16 = text.parse().ok().filter(|s| (100..=599).contains(s))?;
            Some(status..=status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_policies_parse() {
        let Retry {
            function: name,
            policy,
            on,
        } = parse_retry("payments.charge=attempts:5,initial:200ms,backoff:3,max:30s,never:timeout")
            .unwrap();
        assert_eq!(name, "payments.charge");
        assert!(on.is_empty());
        assert_eq!(policy.max_attempts, 5);
        assert_eq!(policy.initial_interval, Duration::from_millis(200));
        assert_eq!(policy.backoff, 3.0);
        assert_eq!(policy.max_interval, Duration::from_secs(30));
        assert_eq!(policy.non_retryable, [CommandErrorKind::Timeout]);
        assert_eq!(parse_retry("x=never").unwrap().policy, RetryPolicy::never());
        assert!(parse_retry("x=backoff:0.5").is_err());
        let http = parse_retry("wfhost.http=attempts:5,on:5xx+429").unwrap();
        assert_eq!(http.on, [500..=599, 429..=429]);
        assert!(parse_retry("payments.charge=on:5xx").is_err());
        assert!(parse_retry("wfhost.http=on:6xx").is_err());
        assert!(parse_retry("wfhost.http=on:teapot").is_err());
        assert!(parse_retry("x=tries:3").is_err());
        assert!(parse_retry("=attempts:3").is_err());
    }
}
