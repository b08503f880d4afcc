//! The timer thread: a deadline heap serving `sleep` and the termination of processes that
//! outlive their cancel grace period. Timers never occupy a worker.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use wfcontract::{Command, CommandError, ErrorKind, Event, Payload, Pid, Tag};

use crate::dispatch::{Context, Handler, Request};
use crate::shared::Shared;

/// Durations longer than this are clamped to it, so a deadline always fits in an `Instant`.
const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// What to do when a deadline passes.
#[derive(Debug)]
pub(crate) enum Action {
    /// Complete the process's yield `Tag` (a `sleep`).
    Complete(Tag),
    /// End the process, if it still runs, with this reason.
    Terminate(String),
}

#[derive(Debug)]
struct Entry {
    deadline: Instant,
    /// Breaks ties in arrival order.
    seq: u64,
    pid: Pid,
    action: Action,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so the `BinaryHeap` (a max-heap) pops the earliest deadline first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

#[derive(Default)]
struct Timers {
    heap: BinaryHeap<Entry>,
    seq: u64,
    /// The scheduler whose processes the timers act on. Weak, so pending timers do not keep a
    /// scheduler alive.
    scheduler: Weak<Shared>,
    thread: Option<JoinHandle<()>>,
    shutdown: bool,
}

/// The timer. Its thread starts with the first timer, so a scheduler that never sleeps has none.
#[derive(Default)]
pub(crate) struct Timer {
    inner: Arc<(Mutex<Timers>, Condvar)>,
}

impl Timer {
    /// Binds the timer to its scheduler (once, at start).
    pub(crate) fn attach(&self, scheduler: Weak<Shared>) {
        self.inner.0.lock().scheduler = scheduler;
    }

    /// Acts on `pid` after `delay`.
    pub(crate) fn schedule(&self, delay: Duration, pid: Pid, action: Action) -> Result<(), String> {
        let deadline = Instant::now() + delay.min(MAX_DELAY);
        let (lock, condvar) = &*self.inner;
        let mut timers = lock.lock();
        if timers.shutdown {
            return Err("the scheduler is shutting down".into());
        }
        if timers.thread.is_none() {
            let inner = Arc::clone(&self.inner);
            let thread = std::thread::Builder::new()
                .name("wfhost-timer".into())
                .spawn(move || run(&inner))
                .map_err(|e| format!("could not start the timer thread: {e}"))?;
            timers.thread = Some(thread);
        }
        let seq = timers.seq;
        timers.seq += 1;
        let earliest = timers.heap.peek().is_none_or(|top| deadline < top.deadline);
        timers.heap.push(Entry {
            deadline,
            seq,
            pid,
            action,
        });
        if earliest {
            condvar.notify_one();
        }
        Ok(())
    }

    /// Stops the thread and drops every pending timer.
    pub(crate) fn shutdown(&self) {
        let (lock, condvar) = &*self.inner;
        let thread = {
            let mut timers = lock.lock();
            timers.shutdown = true;
            timers.heap.clear();
            timers.thread.take()
        };
        condvar.notify_all();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn run(inner: &(Mutex<Timers>, Condvar)) {
    let (lock, condvar) = inner;
    let mut due = Vec::new();
    let mut timers = lock.lock();
    loop {
        if timers.shutdown {
            return;
        }
        let now = Instant::now();
        while timers.heap.peek().is_some_and(|top| top.deadline <= now) {
            due.push(timers.heap.pop().expect("peeked"));
        }
        if !due.is_empty() {
            let scheduler = timers.scheduler.upgrade();
            drop(timers);
            if let Some(shared) = scheduler {
                for entry in due.drain(..) {
                    fire(&shared, entry);
                }
            }
            due.clear();
            timers = lock.lock();
            continue;
        }
        match timers.heap.peek().map(|top| top.deadline) {
            Some(deadline) => {
                condvar.wait_until(&mut timers, deadline);
            }
            None => condvar.wait(&mut timers),
        }
    }
}

fn fire(shared: &Shared, entry: Entry) {
    // The process may have ended meanwhile; then there is nothing to do.
    let Some(slot) = shared.table.get(&entry.pid).map(|e| Arc::clone(e.value())) else {
        return;
    };
    match entry.action {
        Action::Complete(tag) => {
            let _ = shared.deliver(&slot, Event::completion(tag, Ok(Payload::empty())));
        }
        Action::Terminate(reason) => {
            let _ = shared.request_termination(&slot, reason);
        }
    }
}

/// The handler for [`Command::Sleep`].
pub(crate) struct Sleep;

impl Handler for Sleep {
    fn handle(&self, request: Request, cx: &Context<'_>) {
        let Command::Sleep(duration) = request.command else {
            return;
        };
        let timer = &cx.scheduler().shared.timer;
        if let Err(reason) = timer.schedule(duration, request.pid, Action::Complete(request.tag)) {
            cx.complete(
                request.tag,
                Err(CommandError::new(ErrorKind::Unavailable, reason)),
            );
        }
    }
}
