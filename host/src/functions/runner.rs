//! Running host functions: the `call` handler. Each call becomes a task on a tokio runtime (the
//! host's own, or the embedder's); a blocking function runs on the runtime's blocking pool,
//! holding one of `threads` permits, and an async one runs as a task of its own. Either way the
//! worker that dispatched the call goes straight back to running processes.
//!
//! A call's timeout counts from the moment the worker hands it over, so the wait for a permit is
//! part of it: a call past its timeout completes with `timeout`, and one that had not started by
//! then never starts. An async function's task is aborted (its future dropped); a blocking function
//! cannot be stopped once it runs, so its thread finishes on its own and its permit goes back at
//! once, so that hung functions do not hold every permit. Those abandoned threads are counted: past
//! [`MAX_ABANDONED`] of them, blocking calls are refused (`unavailable`) until some return.
//!
//! Every call completes, whatever happens to its task: a guard it holds completes it with an error
//! if the task panics or is dropped first, and does the bookkeeping (calls in flight, the task
//! registry) either way.
//!
//! At shutdown, queued and running tasks are aborted (an async function's own task with them),
//! the registered functions are dropped (one holding a clone of the `Host` would otherwise keep it
//! alive), and the host's runtime is given a moment, not more, to finish.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use wfcontract::builtin::RETRY_POLICY_FUNCTION;
use wfcontract::{Command, CommandError, ErrorKind, Payload, Pid, RetryPolicy, Tag};
use wfhost_scheduler::{Completer, Context, Handler, Request};

use super::call::{
    panicked_with, shutting_down, Call, CallsByProcess, CallsByTag, CatchPanic, Finish, Tasks,
    MAX_ABANDONED,
};
use super::{CallInfo, HostFunction};

/// How long shutdown waits for the host's own runtime to wind down: its tasks are dropped, and
/// threads still inside a blocking function are left behind.
const SHUTDOWN_WAIT: Duration = Duration::from_millis(100);

/// What a call with a timeout needs of the embedder's runtime, in the words its error uses.
const NO_TIMERS: &str = "the tokio runtime given to HostBuilder::runtime must have its time \
                         driver enabled (enable_time / enable_all)";

/// How host functions run.
#[derive(Clone, Debug)]
pub(crate) struct FunctionSettings {
    /// Blocking functions running at once.
    pub(crate) threads: usize,
    /// Calls in flight (running or waiting for a permit) at once.
    pub(crate) queue: usize,
    /// Calls one process may have in flight at once.
    pub(crate) per_process: usize,
    /// A call's timeout unless its function says otherwise.
    pub(crate) timeout: Option<Duration>,
    /// The embedder's runtime, if calls run there rather than on one of the host's own.
    pub(crate) runtime: Option<Handle>,
    /// The durable workflows' ids, in a durable host: each call gets an idempotency key.
    pub(crate) keys: Option<Arc<crate::ids::Ids>>,
    /// Where calls are counted, if anywhere.
    pub(crate) metrics: Option<crate::metrics::Metrics>,
    /// In a traced durable host: the spans of its workflows' runs, for their calls' spans.
    pub(crate) traces: Option<Arc<crate::trace::Traces>>,
}

/// The `call` handler.
pub(crate) struct Functions {
    /// The registered functions, by name. Emptied at shutdown: a function holding a clone of the
    /// `Host` keeps it alive through this handler (a cycle), and the host must go when it shuts
    /// down. Calls from then on are refused by `stopping` first.
    functions: RwLock<HashMap<String, (Arc<str>, HostFunction)>>,
    timeout: Option<Duration>,
    queue: usize,
    per_process: usize,
    /// Where calls run; `None` when no function is registered.
    handle: Option<Handle>,
    /// The host's own runtime, when it has one; taken at shutdown.
    own: Mutex<Option<Runtime>>,
    /// Whether `handle`'s runtime has a time driver, which every call with a timeout needs; found
    /// out at the first such call (the host's own runtime has one).
    timers: OnceLock<bool>,
    permits: Arc<Semaphore>,
    in_flight: Arc<AtomicUsize>,
    /// Each process's share of `in_flight`.
    by_process: CallsByProcess,
    /// Each call's task by its process and tag, to abort those nothing waits for any more.
    by_tag: CallsByTag,
    abandoned: Arc<AtomicUsize>,
    stopping: Arc<AtomicBool>,
    /// Every call's task, to abort them at shutdown.
    tasks: Tasks,
    next_task: AtomicU64,
    keys: Option<Arc<crate::ids::Ids>>,
    metrics: Option<crate::metrics::Metrics>,
    traces: Option<Arc<crate::trace::Traces>>,
    /// Each function's retry policy, for `wfhost.retry-policy`; kept after shutdown empties
    /// `functions` (they are plain values).
    policies: HashMap<String, RetryPolicy>,
    /// The names of the functions this host serves (those registered, and the built-in ones).
    served: Arc<HashSet<String>>,
    /// The names of functions durable workflows called and this host does not serve, logged
    /// once each.
    unserved: Mutex<HashSet<String>>,
}

/// A call let in: its function, the runtime it runs on, and when it times out.
struct Admitted {
    name: Arc<str>,
    function: HostFunction,
    handle: Handle,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
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
                    // Timers for timeouts; IO for the built-in HTTP client.
                    .enable_all()
                    .build()?;
                (Some(runtime.handle().clone()), Some(runtime))
            }
        };
        let timers = OnceLock::new();
        if own.is_some() {
            // Built above with timers: nothing to find out.
            let _ = timers.set(true);
        }
        let policies = functions
            .iter()
            .filter_map(|(name, function)| Some((name.clone(), function.retry.clone()?)))
            .collect();
        let served = functions
            .keys()
            .cloned()
            .chain([RETRY_POLICY_FUNCTION.to_string()])
            .collect();
        Ok(Functions {
            policies,
            served: Arc::new(served),
            unserved: Mutex::new(HashSet::new()),
            functions: RwLock::new(
                functions
                    .into_iter()
                    .map(|(name, function)| {
                        let shared: Arc<str> = Arc::from(name.as_str());
                        (name, (shared, function))
                    })
                    .collect(),
            ),
            timeout: settings.timeout,
            queue: settings.queue.max(1),
            per_process: settings.per_process.max(1),
            handle,
            own: Mutex::new(own),
            timers,
            permits: Arc::new(Semaphore::new(settings.threads.max(1))),
            in_flight: Arc::new(AtomicUsize::new(0)),
            by_process: Arc::default(),
            by_tag: Arc::default(),
            abandoned: Arc::new(AtomicUsize::new(0)),
            stopping: Arc::new(AtomicBool::new(false)),
            tasks: Arc::default(),
            next_task: AtomicU64::new(0),
            keys: settings.keys,
            metrics: settings.metrics,
            traces: settings.traces,
        })
    }

    /// The names of the functions this host serves: what a durable workflow's call to any other
    /// waits for (see [`Functions::wait_for_a_host`]).
    pub(crate) fn served(&self) -> Arc<HashSet<String>> {
        Arc::clone(&self.served)
    }

    /// Leaves a durable workflow's call to `name`, which this host does not serve, unanswered:
    /// answering it would journal a failure that comes of how this host was started (without
    /// `--worker-function`, `--allow-http`, `HostBuilder::register`), and fail the workflow for
    /// good. It waits, pending in its journal, until a host that serves the call runs the
    /// workflow; what it waits for says so (`Client::waits`), and the host's log and metrics.
    fn wait_for_a_host(&self, pid: Pid, name: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.core.unserved.inc();
        }
        let first = {
            // A guest names functions freely: at most so many names are remembered.
            let mut unserved = self.unserved.lock();
            unserved.len() < 1_000 && unserved.insert(name.into())
        };
        if first {
            tracing::warn!(
                %pid,
                "a durable workflow calls '{name}', which this host does not serve: the call \
                 waits until a host that serves it runs the workflow ({})",
                how_to_serve(name)
            );
        }
    }

    /// The answer to `wfhost.retry-policy`: the named function's policy, if it has one.
    fn policy(&self, input: &Payload) -> Result<Payload, CommandError> {
        let name: String = input.decode().map_err(|e| {
            CommandError::new(
                ErrorKind::InvalidInput,
                format!("{RETRY_POLICY_FUNCTION} takes a function's name: {e}"),
            )
        })?;
        Payload::encode(input.encoding, &self.policies.get(&name)).map_err(|e| {
            CommandError::new(ErrorKind::Failed, format!("the policy did not encode: {e}"))
        })
    }

    /// Counts a call refused before it ran, under its function's name if one is registered so
    /// (a guest names functions freely: the label stays within those registered).
    fn count_refused(&self, name: &str, error: &CommandError) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let function = self.functions.read().get(name).map_or_else(
            || Arc::from("(unregistered)"),
            |(shared, _)| Arc::clone(shared),
        );
        metrics
            .core
            .calls
            .get_or_create(&crate::metrics::Call {
                function,
                outcome: error.kind.name(),
            })
            .inc();
    }

    fn unknown(&self, name: &str) -> CommandError {
        let functions = self.functions.read();
        let mut known: Vec<&str> = functions.keys().map(String::as_str).collect();
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

    /// Lets a call of `pid`'s to the function `name` in, counted in flight, or says why not.
    #[inline]
    fn admit(&self, pid: Pid, name: &str) -> Result<Admitted, CommandError> {
        let (name, function, handle) = self.find(name)?;
        let timeout = function.timeout.unwrap_or(self.timeout);
        let deadline = self.deadline(&handle, &name, timeout)?;
        self.count_in(pid)?;
        Ok(Admitted {
            name,
            function,
            handle,
            timeout,
            deadline,
        })
    }

    /// The function named `name`, its name shared, and the runtime it runs on; or why there is
    /// none (the host is shutting down, or no such function is registered).
    #[inline]
    fn find(&self, name: &str) -> Result<(Arc<str>, HostFunction, Handle), CommandError> {
        // First: once the host has shut down its functions are gone, and the caller should hear
        // why rather than that the function does not exist.
        if self.stopping.load(Ordering::Acquire) {
            return Err(shutting_down());
        }
        // Cloned out (two `Arc`s) so that the lock is not held past this statement.
        let found = self
            .functions
            .read()
            .get(name)
            .map(|(name, function)| (Arc::clone(name), function.clone()));
        let Some((shared, function)) = found else {
            return Err(if self.stopping.load(Ordering::Acquire) {
                shutting_down()
            } else {
                self.unknown(name)
            });
        };
        let Some(handle) = self.handle.clone() else {
            return Err(self.unknown(name));
        };
        Ok((shared, function, handle))
    }

    /// When a call to `name` with `timeout` times out. The deadline counts from here: the wait
    /// for the runtime and for a permit is part of the call. A timeout too large for the clock is
    /// no deadline at all, as with tokio's own.
    #[inline]
    fn deadline(
        &self,
        handle: &Handle,
        name: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<Instant>, CommandError> {
        let Some(timeout) = timeout else {
            return Ok(None);
        };
        // Without a time driver tokio panics when the timer is made; better to say so.
        if !*self.timers.get_or_init(|| has_timers(handle)) {
            return Err(no_timers(name));
        }
        Ok(Instant::now().checked_add(timeout))
    }

    /// Counts a call of `pid`'s in flight, or refuses it past the host's bound or the process's
    /// share of it.
    #[inline]
    fn count_in(&self, pid: Pid) -> Result<(), CommandError> {
        // Never queue without bound, nor block a worker: a call past the bound is refused, and
        // the workflow sees why.
        let in_flight = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if in_flight >= self.queue {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(CommandError::new(
                ErrorKind::LimitReached,
                format!(
                    "{} host-function calls are in flight, the host's limit \
                     (HostBuilder::function_queue); retry later",
                    self.queue
                ),
            ));
        }
        // Nor may one process take the whole queue from its neighbours.
        let mut by_process = self.by_process.lock();
        let calls = by_process.entry(pid).or_insert(0);
        if *calls >= self.per_process {
            drop(by_process);
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(CommandError::new(
                ErrorKind::LimitReached,
                format!(
                    "this process has {} host-function calls in flight, the most one process \
                     may have (HostBuilder::function_calls_per_process); await some first",
                    self.per_process
                ),
            ));
        }
        *calls += 1;
        Ok(())
    }

    /// The guard of call `id` of `pid`'s, which completes it through `completer`.
    #[inline]
    fn finish(
        &self,
        id: u64,
        (pid, tag): (Pid, Tag),
        name: &Arc<str>,
        completer: Completer,
    ) -> Finish {
        self.by_tag.lock().entry(pid).or_default().insert(tag, id);
        Finish {
            completer: Some(completer),
            pid,
            tag,
            name: Arc::clone(name),
            id,
            settled: false,
            in_flight: Arc::clone(&self.in_flight),
            by_process: Arc::clone(&self.by_process),
            by_tag: Arc::clone(&self.by_tag),
            tasks: Arc::clone(&self.tasks),
            stopping: Arc::clone(&self.stopping),
            metrics: self
                .metrics
                .clone()
                .map(|metrics| (metrics, std::time::Instant::now())),
            span: None,
        }
    }

    /// The call `pid` yielded with `tag`, with `input`, ready to run.
    #[inline]
    /// The call `pid` yielded with `tag`, attempt `attempt` of the one it first made with tag
    /// `first`, with `input`, ready to run.
    fn call(
        &self,
        pid: Pid,
        (tag, first, attempt): (Tag, Tag, u32),
        input: Payload,
        admitted: Admitted,
        finish: &mut Finish,
    ) -> Call {
        let idempotency_key = self.keys.as_ref().and_then(|ids| ids.key(pid, first));
        let attempt = attempt.max(1);
        let traced = self.traces.as_ref().and_then(|traces| {
            traces.call(pid, &admitted.name, attempt, idempotency_key.as_deref())
        });
        let traceparent = traced.map(|(span, parent)| {
            finish.span = Some(span);
            parent
        });
        Call {
            info: CallInfo {
                pid,
                name: admitted.name,
                idempotency_key,
                tag: tag.0,
                attempt,
                traceparent,
            },
            input,
            body: admitted.function.body,
            timeout: admitted.timeout,
            deadline: admitted.deadline,
            handle: admitted.handle,
            permits: Arc::clone(&self.permits),
            abandoned: Arc::clone(&self.abandoned),
        }
    }

    /// Aborts the tasks of `calls` (nothing waits for them), those that have not ended. A task
    /// aborted before it ran its function never runs it; an async one running is dropped where
    /// it waits; a blocking one runs to its end on its thread, its answer going nowhere.
    fn abort(&self, calls: impl IntoIterator<Item = u64>) {
        // Taken under the lock, aborted outside it: a task dropped at once takes the lock in its
        // guard.
        let tasks: Vec<AbortHandle> = {
            let tasks = self.tasks.lock();
            calls
                .into_iter()
                .filter_map(|id| tasks.get(&id).cloned().flatten())
                .collect()
        };
        for task in tasks {
            task.abort();
        }
    }

    /// Enters call `id`'s task in the registry, for shutdown to abort; unless the task has ended
    /// already, or shutdown has swept the registry (then the task is aborted here).
    #[inline]
    fn register(&self, id: u64, abort: AbortHandle) {
        let mut tasks = self.tasks.lock();
        if tasks.remove(&id).is_some() {
            // The task has ended already and left its mark: there is nothing to abort.
            return;
        }
        if self.stopping.load(Ordering::Acquire) {
            // Shutdown has swept the registry already (it sets `stopping` before taking the
            // lock, so this sees it): abort the task here, as the sweep would have.
            drop(tasks);
            abort.abort();
            return;
        }
        tasks.insert(id, Some(abort));
    }
}

impl Handler for Functions {
    fn handle(&self, request: Request, cx: &Context<'_>) {
        // A retry is the call again: the first attempt's key, this attempt's number.
        let (call, first, attempt) = match request.command {
            Command::Call(call) => (call, request.tag, 1),
            // An attempt again of a call made before: a later attempt, under an earlier tag.
            Command::Retry(retry) if retry.attempt < 2 || retry.first >= request.tag => {
                return cx.complete(
                    request.tag,
                    Err(CommandError::new(
                        ErrorKind::InvalidInput,
                        format!(
                            "a retry is attempt 2 or later of a call made under an earlier tag: \
                             this one is attempt {} of tag {} under tag {}",
                            retry.attempt, retry.first.0, request.tag.0
                        ),
                    )),
                )
            }
            Command::Retry(retry) => (retry.call, retry.first, retry.attempt),
            _ => return,
        };
        if call.name == RETRY_POLICY_FUNCTION {
            return cx.complete(request.tag, self.policy(&call.input));
        }
        let durable = self
            .keys
            .as_ref()
            .is_some_and(|ids| ids.contains(request.pid));
        if durable && !self.served.contains(&call.name) && !self.stopping.load(Ordering::Acquire) {
            return self.wait_for_a_host(request.pid, &call.name);
        }
        let admitted = match self.admit(request.pid, &call.name) {
            Ok(admitted) => admitted,
            Err(error) => {
                self.count_refused(&call.name, &error);
                return cx.complete(request.tag, Err(error));
            }
        };
        let id = self.next_task.fetch_add(1, Ordering::Relaxed);
        // From here on the guard owns the completion and the bookkeeping, whatever becomes of
        // the task (which may be dropped inside `spawn` itself, if the runtime has shut down).
        // Told when the process ends or forgets the call: its task is aborted then.
        cx.watch_end();
        let mut finish = self.finish(
            id,
            (request.pid, request.tag),
            &admitted.name,
            cx.completer(request.tag),
        );
        let handle = admitted.handle.clone();
        let call = self.call(
            request.pid,
            (request.tag, first, attempt),
            call.input,
            admitted,
            &mut finish,
        );
        self.register(id, spawn(&handle, call, finish));
    }

    fn ended(&self, pid: Pid) {
        let calls = self.by_tag.lock().remove(&pid).unwrap_or_default();
        self.abort(calls.into_values());
    }

    fn forgot(&self, pid: Pid, tag: Tag) {
        let call = {
            let mut by_tag = self.by_tag.lock();
            let call = by_tag.get_mut(&pid).and_then(|calls| calls.remove(&tag));
            if by_tag.get(&pid).is_some_and(HashMap::is_empty) {
                by_tag.remove(&pid);
            }
            call
        };
        self.abort(call);
    }

    fn shutdown(&self) {
        // Calls still queued or running are dropped: their processes are being closed.
        self.stopping.store(true, Ordering::Release);
        // Taken under the lock, aborted outside it: a task dropped at once takes the lock in its
        // guard.
        let tasks: Vec<AbortHandle> = self
            .tasks
            .lock()
            .drain()
            .filter_map(|(_, task)| task)
            .collect();
        for task in tasks {
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
        // Last, outside the lock: dropping a function runs the embedder's code, which may drop
        // the last clone of the `Host` (and so shut it down) or anything else.
        let functions = std::mem::take(&mut *self.functions.write());
        drop(functions);
    }
}

/// Runs `call` as a task on `handle`'s runtime, `finish` completing it however the task ends;
/// the task is reached through the abort handle returned.
#[inline]
fn spawn(handle: &Handle, call: Call, finish: Finish) -> AbortHandle {
    let task = handle.spawn(async move {
        let run = std::pin::pin!(call.run());
        let result = match CatchPanic(run).await {
            Ok(result) => result,
            Err(panic) => Err(panicked_with(&finish.name, &*panic)),
        };
        finish.complete(result);
    });
    let abort = task.abort_handle();
    // Dropping the `JoinHandle` detaches the task; it is reached through `abort` from now on.
    drop(task);
    abort
}

/// Whether `handle`'s runtime has a time driver. A `Handle` cannot be asked, and tokio panics
/// when a timer is made on a runtime without one; so one is made here (a timer is only registered
/// when first polled, so this one costs nothing) and the panic caught. The panic hook still
/// reports that panic, once; a process built with `panic = "abort"` aborts there, as it would have
/// at the call's timer.
fn has_timers(handle: &Handle) -> bool {
    let made = catch_unwind(AssertUnwindSafe(|| {
        let _entered = handle.enter();
        let _sleep = tokio::time::sleep(Duration::ZERO);
    }));
    if made.is_err() {
        tracing::error!("{NO_TIMERS}: host functions with a timeout cannot be called");
    }
    made.is_ok()
}

fn no_timers(name: &str) -> CommandError {
    CommandError::new(
        ErrorKind::Failed,
        format!("host function '{name}' was not called: it has a timeout, and {NO_TIMERS}"),
    )
}

/// What serves a function: `wfhost.http` an allowlist, any other a worker (or an embedder's
/// registration).
pub(crate) fn how_to_serve(name: &str) -> String {
    if name == wfcontract::builtin::HTTP_FUNCTION {
        "start it with --allow-http, HostBuilder::http".to_string()
    } else {
        format!("start it with --worker-function {name}, or register it: HostBuilder::register")
    }
}
