//! One host-function call, from its task's start to its completion: waiting for a permit, running
//! the function (on its own task, or a thread of the blocking pool), the timeout, and the guard
//! that completes the call whatever becomes of its task.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::{AbortHandle, JoinError, JoinHandle};
use tokio::time::Instant;
use wfcontract::{CommandError, ErrorKind, Payload, Pid, Tag};
use wfhost_scheduler::Completer;

use super::{Body, CallInfo};

/// Blocking calls that overran their timeout and still hold a thread, at most; more and blocking
/// calls are refused until some return.
pub(super) const MAX_ABANDONED: usize = 64;

/// Every call's task by id, to abort them at shutdown (the embedder's runtime lives on). `None`
/// is a mark left by a call whose task ended before the handler made its entry, so that the entry
/// is never made: the handler spawns without the lock (a runtime that has shut down drops the task
/// at once, inside the spawn, and the task's guard then takes the lock).
pub(super) type Tasks = Arc<Mutex<HashMap<u64, Option<AbortHandle>>>>;

/// How many calls each process has in flight; a process with none has no entry.
pub(super) type CallsByProcess = Arc<Mutex<HashMap<Pid, usize>>>;

/// The task of each call in flight, by its process and the tag it was yielded with: what a
/// process that ends, or forgets a call, has aborted.
pub(super) type CallsByTag = Arc<Mutex<HashMap<Pid, HashMap<Tag, u64>>>>;

/// A running blocking call's state, shared with its thread.
const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// A call's completion and bookkeeping, held by its task: done once, by [`Finish::complete`] or,
/// if the task panics or is dropped first (aborted at shutdown, dropped by a runtime that shut
/// down), by `drop`, so that no call leaves its workflow waiting or its count behind.
pub(super) struct Finish {
    /// `None` once completed.
    pub(super) completer: Option<Completer>,
    pub(super) pid: Pid,
    pub(super) tag: Tag,
    pub(super) name: Arc<str>,
    pub(super) id: u64,
    /// Whether the bookkeeping is done.
    pub(super) settled: bool,
    pub(super) in_flight: Arc<AtomicUsize>,
    pub(super) by_process: CallsByProcess,
    pub(super) by_tag: CallsByTag,
    pub(super) tasks: Tasks,
    pub(super) stopping: Arc<AtomicBool>,
    /// Where the call is counted, and when it came in.
    pub(super) metrics: Option<(crate::metrics::Metrics, std::time::Instant)>,
    /// The call's span, in a traced host: ended with the call's outcome.
    pub(super) span: Option<opentelemetry::global::BoxedSpan>,
}

impl Finish {
    /// Counts the call's outcome and duration.
    fn count(&self, result: &Result<Payload, CommandError>) {
        if let Some((metrics, started)) = &self.metrics {
            let function = Arc::clone(&self.name);
            let core = &metrics.core;
            core.calls
                .get_or_create(&crate::metrics::Call {
                    function: Arc::clone(&function),
                    outcome: crate::metrics::call_outcome(&function, result),
                })
                .inc();
            core.call_seconds
                .get_or_create(&crate::metrics::Function { function })
                .observe(started.elapsed().as_secs_f64());
        }
    }

    /// Counts the call out and removes its task's entry, once: whether its process still waited
    /// for it (false: it ended, or forgot the call, and the task was aborted for that).
    fn settle(&mut self) -> bool {
        if std::mem::replace(&mut self.settled, true) {
            return true;
        }
        let awaited = {
            let mut by_tag = self.by_tag.lock();
            let awaited = by_tag
                .get_mut(&self.pid)
                .is_some_and(|calls| calls.remove(&self.tag).is_some());
            if by_tag.get(&self.pid).is_some_and(HashMap::is_empty) {
                by_tag.remove(&self.pid);
            }
            awaited
        };
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        {
            let mut by_process = self.by_process.lock();
            if let Some(calls) = by_process.get_mut(&self.pid) {
                *calls -= 1;
                if *calls == 0 {
                    by_process.remove(&self.pid);
                }
            }
        }
        let mut tasks = self.tasks.lock();
        // No entry yet: the handler has not made it, so leave a mark that it never does. Not at
        // shutdown, when the handler makes none and nothing would remove the mark.
        if tasks.remove(&self.id).is_none() && !self.stopping.load(Ordering::Acquire) {
            tasks.insert(self.id, None);
        }
        awaited
    }

    /// Completes the call with `result`, the bookkeeping done first so that a workflow calling
    /// again at once finds its slot free.
    pub(super) fn complete(mut self, result: Result<Payload, CommandError>) {
        self.settle();
        self.count(&result);
        if let Some(span) = self.span.take() {
            crate::trace::end(span, result.as_ref().err());
        }
        if let Err(error) = &result {
            if error.kind == ErrorKind::Timeout {
                tracing::warn!(
                    pid = %self.pid,
                    function = %self.name,
                    "a host-function call timed out"
                );
            }
        }
        if let Some(completer) = self.completer.take() {
            completer.complete(result);
        }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let awaited = self.settle();
        let Some(completer) = self.completer.take() else {
            return;
        };
        let name = &self.name;
        let error = if !awaited {
            // Aborted on purpose: nothing waits for the answer.
            CommandError::new(
                ErrorKind::Cancelled,
                format!(
                    "host function '{name}' was abandoned: its process ended, or stopped waiting                      for it"
                ),
            )
        } else if std::thread::panicking() {
            tracing::error!(
                pid = %self.pid,
                function = %name,
                "a host-function call's task panicked"
            );
            CommandError::new(
                ErrorKind::Failed,
                format!(
                    "host function '{name}' panicked: the task running the call panicked (see the \
                     host's log); whatever it was doing may or may not have happened"
                ),
            )
        } else if self.stopping.load(Ordering::Acquire) {
            shutting_down()
        } else {
            tracing::warn!(
                pid = %self.pid,
                function = %name,
                "a host-function call's task was dropped"
            );
            CommandError::new(
                ErrorKind::Unavailable,
                format!(
                    "host function '{name}' did not finish: the tokio runtime running it dropped \
                     its task (was it shut down?); whatever it was doing may or may not have \
                     happened"
                ),
            )
        };
        if let Some(span) = self.span.take() {
            crate::trace::end(span, Some(&error));
        }
        let result = Err(error);
        self.count(&result);
        completer.complete(result);
    }
}

/// One call, on its way.
pub(super) struct Call {
    pub(super) info: CallInfo,
    pub(super) input: Payload,
    pub(super) body: Body,
    /// For the error message; `deadline` is what counts.
    pub(super) timeout: Option<Duration>,
    /// When the call times out, counted from its start; `None`: never.
    pub(super) deadline: Option<Instant>,
    pub(super) handle: Handle,
    pub(super) permits: Arc<Semaphore>,
    pub(super) abandoned: Arc<AtomicUsize>,
}

impl Call {
    pub(super) async fn run(self) -> Result<Payload, CommandError> {
        let Call {
            info,
            input,
            body,
            timeout,
            deadline,
            handle,
            permits,
            abandoned,
        } = self;
        let name = Arc::clone(&info.name);
        // Out of time already (the runtime was slow to start this task): the function never runs.
        if expired(deadline) {
            return Err(timed_out(&name, timeout));
        }
        match body {
            Body::Async(function) => {
                // The closure runs here, on this task: a panic in it is the function's.
                let future = match catch_unwind(AssertUnwindSafe(|| function(info, input))) {
                    Ok(future) => future,
                    Err(panic) => return Err(panicked_with(&name, &*panic)),
                };
                // Aborted when dropped: on timeout (inside `until`), and when this call's task is
                // aborted at shutdown or dropped, so the function never outlives its call.
                let task = AbortOnDrop(handle.spawn(future));
                match until(deadline, task).await {
                    Some(Ok(result)) => result,
                    Some(Err(error)) => Err(panicked(&name, error)),
                    None => Err(timed_out(&name, timeout)),
                }
            }
            Body::Blocking(function) => {
                if abandoned.load(Ordering::Acquire) >= MAX_ABANDONED {
                    return Err(too_many_abandoned(&name));
                }
                let permit = match until(deadline, permits.acquire_owned()).await {
                    Some(Ok(permit)) => permit,
                    Some(Err(_)) => return Err(shutting_down()),
                    None => return Err(timed_out(&name, timeout)),
                };
                // Again: calls that queued for a permit while threads were being abandoned all
                // passed the first check.
                if abandoned.load(Ordering::Acquire) >= MAX_ABANDONED {
                    return Err(too_many_abandoned(&name));
                }
                // A permit that came just as the deadline passed: the function does not start.
                if expired(deadline) {
                    return Err(timed_out(&name, timeout));
                }
                let state = Arc::new(AtomicU8::new(RUNNING));
                let running = Running {
                    state: Arc::clone(&state),
                    abandoned: Arc::clone(&abandoned),
                };
                // Aborted when dropped (on timeout, at shutdown): that stops a blocking task only
                // before it starts, which is what is wanted of a call given up on. Its closure is
                // then dropped unrun, and `running` with it.
                let task = AbortOnDrop(handle.spawn_blocking(move || {
                    let _running = running;
                    catch_unwind(AssertUnwindSafe(|| function(info, input)))
                }));
                let outcome = until(deadline, task).await;
                drop(permit);
                match outcome {
                    Some(Ok(Ok(result))) => result,
                    Some(Ok(Err(panic))) => Err(panicked_with(&name, &*panic)),
                    Some(Err(error)) => Err(panicked(&name, error)),
                    None => {
                        // Counted before the swap and uncounted if the thread was done, so the
                        // count never dips below the truth (a wrapped count would refuse all).
                        abandoned.fetch_add(1, Ordering::AcqRel);
                        if state.swap(ABANDONED, Ordering::AcqRel) != RUNNING {
                            abandoned.fetch_sub(1, Ordering::AcqRel);
                        }
                        Err(timed_out(&name, timeout))
                    }
                }
            }
        }
    }
}

/// A blocking call's claim on its thread, owned by the closure run there: dropped when the
/// function returns or when the closure is dropped unrun (its task aborted before it started),
/// it marks the call done and, if the call had been abandoned, counts it out.
struct Running {
    state: Arc<AtomicU8>,
    abandoned: Arc<AtomicUsize>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.state.swap(DONE, Ordering::AcqRel) == ABANDONED {
            self.abandoned.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A task's `JoinHandle` that aborts the task when dropped (a plain one detaches it), so that a
/// call's own task takes the function's task with it however it ends. Aborting a task that has
/// finished does nothing.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A future whose panics are caught and returned, so that a call's task completes its call with
/// the panic's message (tokio would catch it too, but only into a `JoinHandle` nobody awaits,
/// and it drops the future after unwinding, when the guard can no longer tell a panic from an
/// abort). It is not polled again after a panic.
pub(super) struct CatchPanic<F>(pub(super) F);

impl<F: Future + Unpin> Future for CatchPanic<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let future = &mut self.0;
        match catch_unwind(AssertUnwindSafe(|| Pin::new(future).poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// `future`'s output, or `None` if `deadline` came first (`future` is then dropped before this
/// returns). The runtime must have a time driver when there is a deadline: see [`has_timers`].
async fn until<F: Future>(deadline: Option<Instant>, future: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

/// Whether `deadline` has passed.
fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|deadline| Instant::now() >= deadline)
}

pub(super) fn timed_out(name: &str, timeout: Option<Duration>) -> CommandError {
    CommandError::new(
        ErrorKind::Timeout,
        format!(
            "host function '{name}' did not finish within its timeout of {:?}; whatever it was \
             doing may or may not have happened",
            timeout.unwrap_or_default()
        ),
    )
}

fn panicked(name: &str, error: JoinError) -> CommandError {
    match error.try_into_panic() {
        Ok(panic) => panicked_with(name, &*panic),
        Err(_) => shutting_down(),
    }
}

pub(super) fn panicked_with(name: &str, panic: &(dyn Any + Send)) -> CommandError {
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

pub(super) fn shutting_down() -> CommandError {
    CommandError::new(ErrorKind::Unavailable, "the host is shutting down")
}
