//! The `sleep` command: a timer thread with a deadline heap. Timers never occupy a worker.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use wfcontract::{Command, Payload, Pid, Tag};

use crate::dispatch::{Context, Handler, Request};
use crate::shared::Shared;

/// Sleeps longer than this are clamped to it, so a deadline always fits in an `Instant`.
const MAX_SLEEP: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    deadline: Instant,
    /// Breaks ties in arrival order.
    seq: u64,
    pid: Pid,
    tag: Tag,
}

#[derive(Default)]
struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    /// Completes fired timers; set when the thread starts. Weak, so pending timers do not keep a
    /// scheduler alive.
    scheduler: Weak<Shared>,
    thread: Option<JoinHandle<()>>,
    shutdown: bool,
}

/// The handler for [`Command::Sleep`]. Its thread starts with the first sleep.
#[derive(Default)]
pub(crate) struct Timer {
    inner: Arc<(Mutex<Timers>, Condvar)>,
}

impl Handler for Timer {
    fn handle(&self, request: Request, cx: &Context<'_>) {
        let Command::Sleep(duration) = request.command else {
            return;
        };
        let deadline = Instant::now() + duration.min(MAX_SLEEP);
        let (lock, condvar) = &*self.inner;
        let mut timers = lock.lock();
        if timers.shutdown {
            return;
        }
        if timers.thread.is_none() {
            timers.scheduler = Arc::downgrade(&cx.scheduler().shared);
            let inner = Arc::clone(&self.inner);
            let thread = std::thread::Builder::new()
                .name("wfhost-timer".into())
                .spawn(move || run(&inner));
            match thread {
                Ok(thread) => timers.thread = Some(thread),
                Err(error) => {
                    drop(timers);
                    cx.complete(
                        request.tag,
                        Err(wfcontract::CommandError::new(
                            wfcontract::ErrorKind::Unavailable,
                            format!("could not start the timer thread: {error}"),
                        )),
                    );
                    return;
                }
            }
        }
        let seq = timers.seq;
        timers.seq += 1;
        let earliest = timers
            .heap
            .peek()
            .is_none_or(|Reverse(top)| deadline < top.deadline);
        timers.heap.push(Reverse(Entry {
            deadline,
            seq,
            pid: request.pid,
            tag: request.tag,
        }));
        if earliest {
            condvar.notify_one();
        }
    }

    fn shutdown(&self) {
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
        while timers
            .heap
            .peek()
            .is_some_and(|Reverse(top)| top.deadline <= now)
        {
            let Reverse(entry) = timers.heap.pop().expect("peeked");
            due.push((entry.pid, entry.tag));
        }
        if !due.is_empty() {
            let scheduler = timers.scheduler.upgrade();
            drop(timers);
            if let Some(shared) = scheduler {
                for (pid, tag) in due.drain(..) {
                    // The process may have ended meanwhile; then there is nobody to wake.
                    let _ = shared.deliver_to(
                        pid,
                        wfcontract::Event::completion(tag, Ok(Payload::empty())),
                    );
                }
            }
            due.clear();
            timers = lock.lock();
            continue;
        }
        match timers.heap.peek().map(|Reverse(top)| top.deadline) {
            Some(deadline) => {
                condvar.wait_until(&mut timers, deadline);
            }
            None => condvar.wait(&mut timers),
        }
    }
}
