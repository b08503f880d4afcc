//! The owner of a scheduler's threads: start and shut down.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::{Config, Hooks};
use crate::error::BuildError;
use crate::handle::SchedulerHandle;
use crate::handlers::Handlers;
use crate::observe::Observer;
use crate::process::{FailureKind, ProcessError};
use crate::queue::{Local, Queues};
use crate::shared::Shared;
use crate::slot::Slot;
use crate::{current, worker};

/// Runs processes on a fixed pool of worker threads. Dereferences to [`SchedulerHandle`] for the
/// operations; dropping it shuts down with a grace period of [`DEFAULT_GRACE`].
pub struct Scheduler {
    handle: SchedulerHandle,
    /// Its command handlers (the workers hold them too), stopped by its shutdown.
    handlers: Arc<Handlers>,
    threads: Vec<JoinHandle<()>>,
    hooks: Hooks,
    done: bool,
}

/// The grace period of an implicit shutdown (on drop).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// What a shutdown did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Processes live when the shutdown began.
    pub live_at_start: usize,
    /// Processes that finished within the grace period.
    pub finished_in_grace: usize,
    /// Processes still live at the deadline, closed without finishing.
    pub closed: usize,
    /// True when shutdown was called from a worker thread of this scheduler, which cannot wait for
    /// itself: a thread of its own carries the shutdown out (grace period, closing, joining), and
    /// the other figures in this report are not known yet.
    pub detached: bool,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle.fmt(f)
    }
}

impl std::ops::Deref for Scheduler {
    type Target = SchedulerHandle;

    fn deref(&self) -> &SchedulerHandle {
        &self.handle
    }
}

impl Scheduler {
    pub(crate) fn start(
        config: Config,
        handlers: Handlers,
        observer: Option<Arc<dyn Observer>>,
        hooks: Hooks,
    ) -> Result<Scheduler, BuildError> {
        let locals: Vec<Local> = (0..config.workers)
            .map(|_| Local::new(config.budget))
            .collect();
        let queues = Queues::new(locals.iter().map(Local::stealers).collect());
        let shared = Arc::new(Shared::new(config, queues, observer, handlers.watchers()));
        let handlers = Arc::new(handlers);
        shared
            .timer
            .attach(Arc::downgrade(&shared) as std::sync::Weak<dyn crate::timer::Fire>);
        let mut scheduler = Scheduler {
            handle: SchedulerHandle {
                shared: Arc::clone(&shared),
            },
            handlers: Arc::clone(&handlers),
            threads: Vec::with_capacity(locals.len()),
            hooks,
            done: false,
        };
        for (index, local) in locals.into_iter().enumerate() {
            let shared = Arc::clone(&shared);
            let handlers = Arc::clone(&handlers);
            let mut thread =
                std::thread::Builder::new().name(format!("{}-{index}", shared.config.thread_name));
            if let Some(bytes) = shared.config.stack_size {
                thread = thread.stack_size(bytes);
            }
            let thread = thread.spawn(move || worker::run(shared, handlers, index, local));
            match thread {
                Ok(thread) => scheduler.threads.push(thread),
                // Dropping `scheduler` stops the workers already started.
                Err(error) => return Err(BuildError::Thread(error)),
            }
        }
        Ok(scheduler)
    }

    /// A cloneable handle, for other threads and for handlers.
    pub fn handle(&self) -> &SchedulerHandle {
        &self.handle
    }

    /// Blocks until some thread calls [`SchedulerHandle::request_stop`], or `timeout` passes.
    /// Returns true if a stop was requested.
    pub fn wait_for_stop(&self, timeout: Option<Duration>) -> bool {
        let shared = &self.handle.shared;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut guard = shared.stop_signal.lock();
        while !shared.stopping.load(Ordering::Acquire) {
            match deadline {
                Some(deadline) => {
                    if shared
                        .stop_condvar
                        .wait_until(&mut guard, deadline)
                        .timed_out()
                    {
                        return shared.stopping.load(Ordering::Acquire);
                    }
                }
                None => shared.stop_condvar.wait(&mut guard),
            }
        }
        true
    }

    /// Stops: refuses new processes, cancels every live one, waits up to `grace` for them to
    /// finish, then stops the workers and closes whatever is left (each process is closed exactly
    /// once). Safe to call from inside a step: the shutdown then goes on in a thread of its own
    /// (see [`ShutdownReport::detached`]).
    pub fn shutdown(mut self, grace: Duration) -> ShutdownReport {
        self.shutdown_inner(grace)
    }

    fn shutdown_inner(&mut self, grace: Duration) -> ShutdownReport {
        self.done = true;
        let shared = Arc::clone(&self.handle.shared);
        let threads = std::mem::take(&mut self.threads);
        let hooks = std::mem::take(&mut self.hooks);
        let handlers = Arc::clone(&self.handlers);
        if current::on_worker(shared.id()) {
            // Joining would wait for this very thread: a thread of its own finishes the job.
            let live_at_start = shared.live.load(Ordering::Acquire);
            self.handle.request_stop();
            let finisher = std::thread::Builder::new()
                .name("wfhost-shutdown".into())
                .spawn(move || stop(&shared, &handlers, threads, grace, hooks));
            if let Err(error) = finisher {
                tracing::error!("could not start the shutdown thread: {error}");
            }
            return ShutdownReport {
                live_at_start,
                detached: true,
                ..ShutdownReport::default()
            };
        }
        stop(&shared, &handlers, threads, grace, hooks)
    }
}

/// Requests the stop, waits up to `grace`, stops and joins the workers, stops the handlers and the
/// timer, closes whatever is left, and calls the `stopped` hook.
fn stop(
    shared: &Arc<Shared>,
    handlers: &Handlers,
    threads: Vec<JoinHandle<()>>,
    grace: Duration,
    hooks: Hooks,
) -> ShutdownReport {
    let live_at_start = shared.live.load(Ordering::Acquire);
    SchedulerHandle {
        shared: Arc::clone(shared),
    }
    .request_stop();
    let deadline = Instant::now() + grace;
    {
        let mut guard = shared.stop_signal.lock();
        while shared.stoppable() > 0 {
            if shared
                .stop_condvar
                .wait_until(&mut guard, deadline)
                .timed_out()
            {
                break;
            }
        }
    }
    let remaining = shared.live.load(Ordering::Acquire);

    // SeqCst: pairs with the fence in `Shared::spawn` (a spawn racing this sweep).
    shared.shutdown.store(true, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
    shared.idle.shutdown();
    // Steps still running are not waited for past the grace period.
    if let Some(interrupt) = hooks.interrupt {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| interrupt())) {
            tracing::warn!(
                "the shutdown interrupt panicked: {}",
                crate::shared::panic_message(&*panic)
            );
        }
    }
    for thread in threads {
        if thread.join().is_err() {
            tracing::error!("a worker thread panicked outside a process");
        }
    }
    handlers.shutdown_all();
    shared.timer.shutdown();

    // The workers are gone: nobody else touches a process body now.
    let leftover: Vec<Arc<Slot>> = shared.table.iter().map(|e| Arc::clone(e.value())).collect();
    let mut closed = 0;
    for slot in leftover {
        // SAFETY: every worker has been joined above, and this loop borrows one body at a time.
        let mut body = unsafe { slot.body.borrow() };
        if body.process.is_some() {
            closed += 1;
            shared.finish(
                &slot,
                &mut body,
                Err(ProcessError::with_kind(
                    FailureKind::Terminated,
                    "the host shut down before the process finished",
                )),
            );
        }
    }
    shared.table.clear();
    shared.queues.clear_global();
    if let Some(stopped) = hooks.stopped {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(stopped)) {
            tracing::warn!(
                "the stopped hook panicked: {}",
                crate::shared::panic_message(&*panic)
            );
        }
    }
    ShutdownReport {
        live_at_start,
        finished_in_grace: live_at_start.saturating_sub(remaining),
        closed,
        detached: false,
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if !self.done {
            self.shutdown_inner(DEFAULT_GRACE);
        }
    }
}
