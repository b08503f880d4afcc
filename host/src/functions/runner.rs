//! Running host functions: the `call` handler. Each call becomes a task on a tokio runtime (the
//! host's own, or the embedder's); a blocking function runs on the runtime's blocking pool,
//! holding one of `threads` permits, and an async one runs as a task of its own. Either way the
//! worker that dispatched the call goes straight back to running processes.
//!
//! A call past its timeout completes with `timeout`. An async function's future is then dropped;
//! a blocking function cannot be stopped, so its thread finishes on its own and its permit goes
//! back at once, so that hung functions do not hold every permit. Those abandoned threads are
//! counted: past [`MAX_ABANDONED`] of them, blocking calls are refused (`unavailable`) until some
//! return. At shutdown, queued and running tasks are dropped and the host's runtime is given a
//! moment, not more, to finish.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::runtime::{Handle, Runtime};
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use wfcontract::{Command, CommandError, ErrorKind, Payload};
use wfhost_scheduler::{Completer, Context, Handler, Request};

use super::{Body, CallInfo, HostFunction};

/// Blocking calls that overran their timeout and still hold a thread, at most; more and blocking
/// calls are refused until some return.
pub(crate) const MAX_ABANDONED: usize = 64;

/// How long shutdown waits for the host's own runtime to wind down: its tasks are dropped, and
/// threads still inside a blocking function are left behind.
const SHUTDOWN_WAIT: Duration = Duration::from_millis(100);

/// How host functions run.
#[derive(Clone, Debug)]
pub(crate) struct FunctionSettings {
    /// Blocking functions running at once.
    pub(crate) threads: usize,
    /// Calls in flight (running or waiting for a permit) at once.
    pub(crate) queue: usize,
    /// A call's timeout unless its function says otherwise.
    pub(crate) timeout: Option<Duration>,
    /// The embedder's runtime, if calls run there rather than on one of the host's own.
    pub(crate) runtime: Option<Handle>,
}

/// A running blocking call's state, shared with its thread.
const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// The `call` handler.
pub(crate) struct Functions {
    functions: HashMap<String, (Arc<str>, HostFunction)>,
    timeout: Option<Duration>,
    queue: usize,
    /// Where calls run; `None` when no function is registered.
    handle: Option<Handle>,
    /// The host's own runtime, when it has one; taken at shutdown.
    own: Mutex<Option<Runtime>>,
    permits: Arc<Semaphore>,
    in_flight: Arc<AtomicUsize>,
    abandoned: Arc<AtomicUsize>,
    stopping: Arc<AtomicBool>,
    /// Every call's task, to drop them at shutdown (the embedder's runtime lives on).
    tasks: Arc<Mutex<HashMap<u64, AbortHandle>>>,
    next_task: AtomicU64,
}

impl Functions {
    /// The handler for `functions`; starts the host's runtime if there is a function and no
    /// runtime of the embedder's.
    pub(crate) fn start(
        functions: HashMap<String, HostFunction>,
        settings: FunctionSettings,
    ) -> std::io::Result<Functions> {
        let (handle, own) = match (functions.is_empty(), settings.runtime) {
            (true, _) => (None, None),
            (false, Some(handle)) => (Some(handle), None),
            (false, None) => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .max_blocking_threads(settings.threads.max(1) + MAX_ABANDONED)
                    .thread_name("wfhost-function")
                    .enable_time()
                    .build()?;
                (Some(runtime.handle().clone()), Some(runtime))
            }
        };
        Ok(Functions {
            functions: functions
                .into_iter()
                .map(|(name, function)| {
                    let shared: Arc<str> = Arc::from(name.as_str());
                    (name, (shared, function))
                })
                .collect(),
            timeout: settings.timeout,
            queue: settings.queue.max(1),
            handle,
            own: Mutex::new(own),
            permits: Arc::new(Semaphore::new(settings.threads.max(1))),
            in_flight: Arc::new(AtomicUsize::new(0)),
            abandoned: Arc::new(AtomicUsize::new(0)),
            stopping: Arc::new(AtomicBool::new(false)),
            tasks: Arc::default(),
            next_task: AtomicU64::new(0),
        })
    }

    fn unknown(&self, name: &str) -> CommandError {
        let mut known: Vec<&str> = self.functions.keys().map(String::as_str).collect();
        known.sort_unstable();
        CommandError::new(
            ErrorKind::UnknownCommand,
            format!(
                "no host function named '{name}' (registered: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        )
    }
}

impl Handler for Functions {
    fn handle(&self, request: Request, cx: &Context<'_>) {
        let Command::Call(call) = request.command else {
            return;
        };
        let Some((name, function)) = self.functions.get(&call.name) else {
            return cx.complete(request.tag, Err(self.unknown(&call.name)));
        };
        let Some(handle) = self.handle.clone() else {
            return cx.complete(request.tag, Err(self.unknown(&call.name)));
        };
        if self.stopping.load(Ordering::Acquire) {
            return cx.complete(request.tag, Err(shutting_down()));
        }
        // Never queue without bound, nor block a worker: a call past the bound is refused, and
        // the workflow sees why.
        let in_flight = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if in_flight >= self.queue {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            let error = CommandError::new(
                ErrorKind::LimitReached,
                format!(
                    "{} host-function calls are in flight, the host's limit \
                     (HostBuilder::function_queue); retry later",
                    self.queue
                ),
            );
            return cx.complete(request.tag, Err(error));
        }
        let call = Call {
            info: CallInfo {
                pid: request.pid,
                name: Arc::clone(name),
            },
            input: call.input,
            body: function.body.clone(),
            timeout: function.timeout.unwrap_or(self.timeout),
            completer: cx.completer(request.tag),
            handle: handle.clone(),
            permits: Arc::clone(&self.permits),
            abandoned: Arc::clone(&self.abandoned),
        };
        let id = self.next_task.fetch_add(1, Ordering::Relaxed);
        let tasks = Arc::clone(&self.tasks);
        let in_flight = Arc::clone(&self.in_flight);
        // The task's entry is made before the task can end (under the lock), so its own removal
        // never comes first.
        let mut registry = self.tasks.lock();
        let task = handle.spawn(async move {
            let (pid, name) = (call.info.pid, Arc::clone(&call.info.name));
            let (completer, result) = call.run().await;
            in_flight.fetch_sub(1, Ordering::AcqRel);
            tasks.lock().remove(&id);
            if let Err(error) = &result {
                if error.kind == ErrorKind::Timeout {
                    tracing::warn!(%pid, function = %name, "a host-function call timed out");
                }
            }
            completer.complete(result);
        });
        registry.insert(id, task.abort_handle());
    }

    fn shutdown(&self) {
        // Calls still queued or running are dropped: their processes are being closed.
        self.stopping.store(true, Ordering::Release);
        for (_, task) in self.tasks.lock().drain() {
            task.abort();
        }
        if let Some(runtime) = self.own.lock().take() {
            // Waiting is not allowed inside another runtime (an embedder's async code).
            if Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                runtime.shutdown_timeout(SHUTDOWN_WAIT);
            }
        }
    }
}

/// One call, on its way.
struct Call {
    info: CallInfo,
    input: Payload,
    body: Body,
    timeout: Option<Duration>,
    completer: Completer,
    handle: Handle,
    permits: Arc<Semaphore>,
    abandoned: Arc<AtomicUsize>,
}

impl Call {
    async fn run(self) -> (Completer, Result<Payload, CommandError>) {
        let Call {
            info,
            input,
            body,
            timeout,
            completer,
            handle,
            permits,
            abandoned,
        } = self;
        let name = Arc::clone(&info.name);
        let result = match body {
            Body::Async(function) => {
                let task = handle.spawn(function(info, input));
                let abort = task.abort_handle();
                match within(timeout, task).await {
                    Some(Ok(result)) => result,
                    Some(Err(error)) => Err(panicked(&name, error)),
                    None => {
                        abort.abort();
                        Err(timed_out(&name, timeout))
                    }
                }
            }
            Body::Blocking(function) => {
                if abandoned.load(Ordering::Acquire) >= MAX_ABANDONED {
                    return (completer, Err(too_many_abandoned(&name)));
                }
                let Ok(permit) = permits.acquire_owned().await else {
                    return (completer, Err(shutting_down()));
                };
                let state = Arc::new(AtomicU8::new(RUNNING));
                let on_thread = Arc::clone(&state);
                let left = Arc::clone(&abandoned);
                let task = handle.spawn_blocking(move || {
                    let result = catch_unwind(AssertUnwindSafe(|| function(info, input)));
                    if on_thread.swap(DONE, Ordering::AcqRel) == ABANDONED {
                        left.fetch_sub(1, Ordering::AcqRel);
                    }
                    result
                });
                let outcome = within(timeout, task).await;
                drop(permit);
                match outcome {
                    Some(Ok(Ok(result))) => result,
                    Some(Ok(Err(panic))) => Err(panicked_with(&name, &*panic)),
                    Some(Err(error)) => Err(panicked(&name, error)),
                    None => {
                        if state.swap(ABANDONED, Ordering::AcqRel) == RUNNING {
                            abandoned.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(timed_out(&name, timeout))
                    }
                }
            }
        };
        (completer, result)
    }
}

/// `task`'s outcome, or `None` if it overran `timeout`.
async fn within<T>(
    timeout: Option<Duration>,
    task: tokio::task::JoinHandle<T>,
) -> Option<Result<T, tokio::task::JoinError>> {
    match timeout {
        Some(timeout) => tokio::time::timeout(timeout, task).await.ok(),
        None => Some(task.await),
    }
}

fn timed_out(name: &str, timeout: Option<Duration>) -> CommandError {
    CommandError::new(
        ErrorKind::Timeout,
        format!(
            "host function '{name}' did not finish within its timeout of {:?}; whatever it was \
             doing may or may not have happened",
            timeout.unwrap_or_default()
        ),
    )
}

fn panicked(name: &str, error: tokio::task::JoinError) -> CommandError {
    match error.try_into_panic() {
        Ok(panic) => panicked_with(name, &*panic),
        Err(_) => shutting_down(),
    }
}

fn panicked_with(name: &str, panic: &(dyn std::any::Any + Send)) -> CommandError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    tracing::error!(function = %name, "host function panicked: {message}");
    CommandError::new(
        ErrorKind::Failed,
        format!("host function '{name}' panicked: {message}"),
    )
}

fn too_many_abandoned(name: &str) -> CommandError {
    CommandError::new(
        ErrorKind::Unavailable,
        format!(
            "host function '{name}' was not called: {MAX_ABANDONED} calls to blocking host \
             functions overran their timeout and still hold threads; retry later"
        ),
    )
}

fn shutting_down() -> CommandError {
    CommandError::new(ErrorKind::Unavailable, "the host is shutting down")
}
