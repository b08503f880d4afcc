//! Host functions: what the embedding application registers by name for workflows to call with
//! `ctx.call(name, input)` (payments, HTTP, databases). A workflow reaches one only if its grants
//! name it.
//!
//! A function is blocking (a plain closure, run on a thread of the host's blocking pool) or async
//! (a closure returning a future, run on a tokio runtime: the host's own, or the embedder's), and
//! never runs on a worker, so a slow one holds up nothing but its caller. Each call has a timeout:
//! past it the workflow gets a `timeout` error, an async function's future is dropped, and a
//! blocking one's thread is left to finish on its own (its result dropped).

mod call;
pub(crate) mod http;
mod runner;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use wfcontract::{CommandError, ErrorKind, Payload, Pid, RetryPolicy};

pub use http::HttpSettings;
pub(crate) use runner::{how_to_serve, FunctionSettings, Functions};

/// How long a call to a host function may take unless [`HostFunction::timeout`] or
/// [`HostBuilder::function_timeout`](crate::HostBuilder::function_timeout) says otherwise.
pub const DEFAULT_FUNCTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Threads that run blocking host functions at once, unless
/// [`HostBuilder::function_threads`](crate::HostBuilder::function_threads) says otherwise.
pub const DEFAULT_FUNCTION_THREADS: usize = 4;

/// Calls that may be in flight (running or waiting for a thread) at once, unless
/// [`HostBuilder::function_queue`](crate::HostBuilder::function_queue) says otherwise.
pub const DEFAULT_FUNCTION_QUEUE: usize = 10_000;

/// Calls one process may have in flight at once, unless
/// [`HostBuilder::function_calls_per_process`](crate::HostBuilder::function_calls_per_process)
/// says otherwise: a tenth of [`DEFAULT_FUNCTION_QUEUE`], so that one process cannot take the
/// whole queue from its neighbours.
pub const DEFAULT_FUNCTION_CALLS_PER_PROCESS: usize = 1_000;

/// Who is calling a host function.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CallInfo {
    /// The calling process.
    pub pid: Pid,
    /// The function's name.
    pub name: Arc<str>,
    /// In a durable workflow: a key naming this call (the workflow's id and the call's place in
    /// it). A call whose answer the journal had not taken when the host stopped runs again after
    /// a restart, with the same key: a function with effects outside should do them once per
    /// key (pass it on as the idempotency key of the service it calls, or record it with the
    /// effect). `None` for processes that are not durable.
    pub idempotency_key: Option<String>,
    /// The tag of the process's yield that made this call.
    pub tag: u64,
    /// Which attempt at the call this is: 1, then 2 and on for the attempts the workflow's retry
    /// policy makes. Every attempt has the first one's idempotency key.
    pub attempt: u32,
    /// When the host is traced ([`HostBuilder::tracer`](crate::HostBuilder::tracer)): the W3C
    /// `traceparent` of this call's span, for what serves it to continue the trace (`wfhost.http`
    /// sends it as a header; a worker's task carries it).
    pub traceparent: Option<String>,
}

type Blocking = dyn Fn(CallInfo, Payload) -> Result<Payload, CommandError> + Send + Sync;
type Pinned = Pin<Box<dyn Future<Output = Result<Payload, CommandError>> + Send>>;
type Async = dyn Fn(CallInfo, Payload) -> Pinned + Send + Sync;

#[derive(Clone)]
pub(crate) enum Body {
    Blocking(Arc<Blocking>),
    Async(Arc<Async>),
}

/// A host function, with its options: register it with
/// [`HostBuilder::register`](crate::HostBuilder::register).
///
/// ```
/// use std::time::Duration;
/// use wfhost::{Host, HostFunction};
///
/// let host = Host::builder()
///     // Blocking: runs on a thread of the host's pool.
///     .function("inventory.count", |sku: String| -> Result<u32, String> { Ok(sku.len() as u32) })
///     // Async: runs on a tokio runtime; the future is dropped if it overruns its timeout.
///     .register(
///         "quotes.fetch",
///         HostFunction::typed_async(|symbol: String| async move {
///             Ok::<_, String>(format!("{symbol}: 42"))
///         })
///         .timeout(Some(Duration::from_secs(5))),
///     )
///     .build()
///     .unwrap();
/// host.shutdown(Duration::from_secs(1));
/// ```
#[derive(Clone)]
pub struct HostFunction {
    pub(crate) body: Body,
    /// `None`: the host's default; `Some(None)`: no timeout.
    pub(crate) timeout: Option<Option<Duration>>,
    /// How a workflow's `ctx.call` retries a failed call, unless it names a policy.
    pub(crate) retry: Option<RetryPolicy>,
}

impl std::fmt::Debug for HostFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostFunction")
            .field(
                "kind",
                &match self.body {
                    Body::Blocking(_) => "blocking",
                    Body::Async(_) => "async",
                },
            )
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

impl HostFunction {
    /// A blocking function on raw payloads, told who calls. It runs on a thread of the host's
    /// blocking pool and may block.
    pub fn blocking<F>(function: F) -> HostFunction
    where
        F: Fn(CallInfo, Payload) -> Result<Payload, CommandError> + Send + Sync + 'static,
    {
        HostFunction {
            body: Body::Blocking(Arc::new(function)),
            timeout: None,
            retry: None,
        }
    }

    /// An async function on raw payloads, told who calls. Its future runs on a tokio runtime and
    /// must not block it.
    pub fn future<F, Fut>(function: F) -> HostFunction
    where
        F: Fn(CallInfo, Payload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Payload, CommandError>> + Send + 'static,
    {
        HostFunction {
            body: Body::Async(Arc::new(move |info, input| Box::pin(function(info, input)))),
            timeout: None,
            retry: None,
        }
    }

    /// A blocking function on typed values: the input is decoded from whatever encoding it came
    /// in, the output encoded the same way, and an `Err` reaches the workflow as a `failed` error
    /// with its text (a `invalid-input` error when the input does not decode).
    pub fn typed<I, O, E, F>(function: F) -> HostFunction
    where
        I: DeserializeOwned,
        O: Serialize,
        E: std::fmt::Display,
        F: Fn(I) -> Result<O, E> + Send + Sync + 'static,
    {
        HostFunction::blocking(move |_, input: Payload| {
            let value = decode_input(&input)?;
            encode_output(&input, function(value))
        })
    }

    /// An async function on typed values, as [`typed`](Self::typed) is for blocking ones.
    pub fn typed_async<I, O, E, F, Fut>(function: F) -> HostFunction
    where
        I: DeserializeOwned,
        O: Serialize,
        E: std::fmt::Display,
        F: Fn(I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        let function = Arc::new(function);
        HostFunction::future(move |_, input: Payload| {
            let function = Arc::clone(&function);
            async move {
                let value = decode_input(&input)?;
                encode_output(&input, function(value).await)
            }
        })
    }

    /// A blocking function on typed values, told who calls (the idempotency key is in the
    /// [`CallInfo`]).
    pub fn typed_with_info<I, O, E, F>(function: F) -> HostFunction
    where
        I: DeserializeOwned,
        O: Serialize,
        E: std::fmt::Display,
        F: Fn(CallInfo, I) -> Result<O, E> + Send + Sync + 'static,
    {
        HostFunction::blocking(move |info, input: Payload| {
            let value = decode_input(&input)?;
            encode_output(&input, function(info, value))
        })
    }

    /// An async function on typed values, told who calls.
    pub fn typed_async_with_info<I, O, E, F, Fut>(function: F) -> HostFunction
    where
        I: DeserializeOwned,
        O: Serialize,
        E: std::fmt::Display,
        F: Fn(CallInfo, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        let function = Arc::new(function);
        HostFunction::future(move |info, input: Payload| {
            let function = Arc::clone(&function);
            async move {
                let value = decode_input(&input)?;
                encode_output(&input, function(info, value).await)
            }
        })
    }

    /// How a workflow's `ctx.call` of this function retries a failure, unless the call names a
    /// policy of its own (`ctx.call_with`). Default: no retries.
    pub fn retry(mut self, policy: RetryPolicy) -> HostFunction {
        self.retry = Some(policy);
        self
    }

    /// How long one call may take: past it, the workflow gets a `timeout` error. `None`: no
    /// limit. Default: the host's ([`DEFAULT_FUNCTION_TIMEOUT`], 60 s, unless
    /// [`HostBuilder::function_timeout`](crate::HostBuilder::function_timeout) says otherwise).
    pub fn timeout(mut self, timeout: Option<Duration>) -> HostFunction {
        self.timeout = Some(timeout);
        self
    }
}

fn decode_input<I: DeserializeOwned>(input: &Payload) -> Result<I, CommandError> {
    input
        .decode()
        .map_err(|e| CommandError::new(ErrorKind::InvalidInput, format!("bad input: {e}")))
}

fn encode_output<O: Serialize, E: std::fmt::Display>(
    input: &Payload,
    output: Result<O, E>,
) -> Result<Payload, CommandError> {
    let output = output.map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string()))?;
    Payload::encode(input.encoding, &output)
        .map_err(|e| CommandError::new(ErrorKind::Failed, format!("bad output: {e}")))
}
