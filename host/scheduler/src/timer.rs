//! The timer: a deadline queue serving `sleep` and `sleep-until` and the termination of processes
//! that outlive their cancel grace period or their timeout. Workers fire due timers themselves
//! between turns (one atomic load when none is due), so a busy host wakes its sleepers on time; the
//! timer thread sleeps until the earliest deadline and fires whatever is due then, so timers fire
//! on time when the workers are busy elsewhere or parked. No timer occupies a worker while it
//! waits.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use wfcontract::{CommandError, ErrorKind, Pid, Tag};

/// Durations longer than this are clamped to it, so a deadline always fits in an `Instant`.
const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// What the timer acts on: the scheduler, which does what a due timer says to process `pid`.
pub(crate) trait Fire: Send + Sync {
    /// Acts on `pid` as `action` says; a process that ended meanwhile is left alone.
    fn fire(&self, pid: Pid, action: Action);
}

/// What to do when a deadline passes.
#[derive(Debug)]
pub(crate) enum Action {
    /// Complete the process's yield `Tag` (a `sleep`).
    Complete(Tag),
    /// End the process, if it still runs, with this kind and reason. The slot is the process it
    /// was armed for: by the time it fires, the pid may name another (a durable host starts a
    /// workflow again under the pid it had), which it must leave alone.
    Terminate(
        crate::process::FailureKind,
        String,
        std::sync::Weak<crate::slot::Slot>,
    ),
}

#[derive(Debug)]
struct Armed {
    pid: Pid,
    action: Action,
}

/// Orders timers by deadline, then by arrival.
type Key = (Instant, u64);

#[derive(Default)]
struct Timers {
    queue: BTreeMap<Key, Armed>,
    /// Where each pending sleep is, so that `forget` can drop it; by pid, so that a finished
    /// process's sleeps can all go at once.
    sleeps: BTreeMap<(Pid, Tag), Key>,
    /// Pending sleeps per process, to hold each to the limit.
    per_pid: HashMap<Pid, usize>,
    /// Where each process's pending terminations are (its timeout, its cancel grace period: at
    /// most a few), so a finished process's go with it rather than wait for their deadlines.
    terminations: HashMap<Pid, Vec<Key>>,
    seq: u64,
    /// The scheduler whose processes the timers act on. Weak, so pending timers do not keep a
    /// scheduler alive.
    scheduler: Option<Weak<dyn Fire>>,
    thread: Option<JoinHandle<()>>,
    shutdown: bool,
}

/// The timer. Its thread starts with the first timer, so a scheduler that never sleeps has none.
pub(crate) struct Timer {
    inner: Arc<(Mutex<Timers>, Condvar)>,
    /// The earliest deadline, in nanoseconds after `base`; `u64::MAX` when there is none. Read
    /// by workers between turns without the lock.
    next_due: Arc<NextDue>,
}

/// The earliest deadline, readable without the timers' lock.
struct NextDue {
    base: Instant,
    nanos: AtomicU64,
}

impl NextDue {
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Records the queue's first deadline (under the timers' lock).
    fn update(&self, timers: &Timers) {
        let next = timers
            .queue
            .first_key_value()
            .map_or(u64::MAX, |((deadline, _), _)| self.nanos(*deadline));
        self.nanos.store(next, Ordering::Release);
    }
}

impl Default for Timer {
    fn default() -> Timer {
        Timer {
            inner: Arc::default(),
            next_due: Arc::new(NextDue {
                base: Instant::now(),
                nanos: AtomicU64::new(u64::MAX),
            }),
        }
    }
}

impl Timer {
    /// Fires the timers that are due, if any and if no other thread is firing them: called by
    /// workers between turns.
    pub(crate) fn fire_due(&self, scheduler: &dyn Fire) {
        let next = self.next_due.nanos.load(Ordering::Acquire);
        if next == u64::MAX {
            return;
        }
        let now = Instant::now();
        if self.next_due.nanos(now) < next {
            return;
        }
        let Some(mut timers) = self.inner.0.try_lock() else {
            return;
        };
        let mut due = Vec::new();
        timers.take_due(now, &mut due);
        self.next_due.update(&timers);
        drop(timers);
        for entry in due {
            scheduler.fire(entry.pid, entry.action);
        }
    }

    /// Binds the timer to its scheduler (once, at start).
    pub(crate) fn attach(&self, scheduler: Weak<dyn Fire>) {
        self.inner.0.lock().scheduler = Some(scheduler);
    }

    /// Acts on `pid` after `delay`. A sleep is refused when `pid` already has `max_sleeps` pending;
    /// a sleep with the tag of a pending one replaces it.
    pub(crate) fn schedule(
        &self,
        delay: Duration,
        pid: Pid,
        action: Action,
        max_sleeps: usize,
    ) -> Result<(), CommandError> {
        let deadline = Instant::now() + delay.min(MAX_DELAY);
        let (lock, condvar) = &*self.inner;
        let mut timers = lock.lock();
        if timers.shutdown {
            return Err(CommandError::new(
                ErrorKind::Unavailable,
                "the scheduler is shutting down",
            ));
        }
        if let Action::Complete(tag) = action {
            if let Some(old) = timers.sleeps.remove(&(pid, tag)) {
                timers.queue.remove(&old);
                timers.uncount(pid);
            }
            let pending = timers.per_pid.get(&pid).copied().unwrap_or(0);
            if pending >= max_sleeps {
                return Err(CommandError::new(
                    ErrorKind::LimitReached,
                    format!(
                        "process {pid} already has its limit of {max_sleeps} pending sleeps; \
                         await or drop some first"
                    ),
                ));
            }
        }
        if timers.thread.is_none() {
            let inner = Arc::clone(&self.inner);
            let next_due = Arc::clone(&self.next_due);
            let thread = std::thread::Builder::new()
                .name("wfhost-timer".into())
                .spawn(move || run(&inner, &next_due))
                .map_err(|e| {
                    CommandError::new(
                        ErrorKind::Unavailable,
                        format!("could not start the timer thread: {e}"),
                    )
                })?;
            timers.thread = Some(thread);
        }
        let key = (deadline, timers.seq);
        timers.seq += 1;
        match action {
            Action::Complete(tag) => {
                timers.sleeps.insert((pid, tag), key);
                *timers.per_pid.entry(pid).or_insert(0) += 1;
            }
            Action::Terminate(..) => timers.terminations.entry(pid).or_default().push(key),
        }
        timers.queue.insert(key, Armed { pid, action });
        if timers
            .queue
            .first_key_value()
            .is_some_and(|(first, _)| *first == key)
        {
            self.next_due.update(&timers);
            condvar.notify_one();
        }
        Ok(())
    }

    /// Drops `pid`'s pending sleep `tag`, if there is one: its completion will not be sent.
    pub(crate) fn forget(&self, pid: Pid, tag: Tag) {
        let mut timers = self.inner.0.lock();
        if let Some(key) = timers.sleeps.remove(&(pid, tag)) {
            timers.queue.remove(&key);
            timers.uncount(pid);
            self.next_due.update(&timers);
        }
    }

    /// Drops every pending timer of `pid` (which has finished).
    pub(crate) fn forget_all(&self, pid: Pid) {
        let mut timers = self.inner.0.lock();
        let tags: Vec<(Pid, Tag)> = timers
            .sleeps
            .range((pid, Tag(0))..=(pid, Tag(u64::MAX)))
            .map(|(key, _)| *key)
            .collect();
        for tag in tags {
            if let Some(key) = timers.sleeps.remove(&tag) {
                timers.queue.remove(&key);
            }
        }
        timers.per_pid.remove(&pid);
        for key in timers.terminations.remove(&pid).unwrap_or_default() {
            timers.queue.remove(&key);
        }
        self.next_due.update(&timers);
    }

    /// Stops the thread and drops every pending timer.
    pub(crate) fn shutdown(&self) {
        let (lock, condvar) = &*self.inner;
        let thread = {
            let mut timers = lock.lock();
            timers.shutdown = true;
            timers.queue.clear();
            timers.sleeps.clear();
            timers.per_pid.clear();
            timers.terminations.clear();
            self.next_due.update(&timers);
            timers.thread.take()
        };
        condvar.notify_all();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Timers {
    /// Moves the entries due at `now` into `due`.
    fn take_due(&mut self, now: Instant, due: &mut Vec<Armed>) {
        while self
            .queue
            .first_key_value()
            .is_some_and(|((deadline, _), _)| *deadline <= now)
        {
            let (key, entry) = self.queue.pop_first().expect("checked");
            match entry.action {
                Action::Complete(tag) => {
                    self.sleeps.remove(&(entry.pid, tag));
                    self.uncount(entry.pid);
                }
                Action::Terminate(..) => {
                    if let Some(keys) = self.terminations.get_mut(&entry.pid) {
                        keys.retain(|pending| *pending != key);
                        if keys.is_empty() {
                            self.terminations.remove(&entry.pid);
                        }
                    }
                }
            }
            due.push(entry);
        }
    }

    /// One pending sleep of `pid` fewer.
    fn uncount(&mut self, pid: Pid) {
        if let Some(count) = self.per_pid.get_mut(&pid) {
            *count -= 1;
            if *count == 0 {
                self.per_pid.remove(&pid);
            }
        }
    }
}

fn run(inner: &(Mutex<Timers>, Condvar), next_due: &NextDue) {
    let (lock, condvar) = inner;
    let mut due = Vec::new();
    let mut timers = lock.lock();
    loop {
        if timers.shutdown {
            return;
        }
        timers.take_due(Instant::now(), &mut due);
        next_due.update(&timers);
        if !due.is_empty() {
            let scheduler = timers.scheduler.as_ref().and_then(Weak::upgrade);
            drop(timers);
            if let Some(scheduler) = scheduler {
                for entry in due.drain(..) {
                    scheduler.fire(entry.pid, entry.action);
                }
            }
            due.clear();
            timers = lock.lock();
            continue;
        }
        match timers
            .queue
            .first_key_value()
            .map(|((deadline, _), _)| *deadline)
        {
            Some(deadline) => {
                condvar.wait_until(&mut timers, deadline);
            }
            None => condvar.wait(&mut timers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::FailureKind;

    /// A finished process's timers all go with it, terminations included: a day-long timeout must
    /// not sit in the queue for a day after its process ended.
    #[test]
    fn a_finished_process_leaves_no_timer_behind() {
        let timer = Timer::default();
        let (pid, other) = (Pid(7), Pid(8));
        let day = Duration::from_secs(24 * 3600);
        let terminate = || {
            Action::Terminate(
                FailureKind::Timeout,
                "timed out".into(),
                crate::slot::Slot::dangling(),
            )
        };
        timer.schedule(day, pid, terminate(), usize::MAX).unwrap();
        timer.schedule(day, pid, terminate(), usize::MAX).unwrap();
        timer
            .schedule(day, pid, Action::Complete(Tag(1)), 10)
            .unwrap();
        timer.schedule(day, other, terminate(), usize::MAX).unwrap();
        timer.forget_all(pid);
        {
            let timers = timer.inner.0.lock();
            assert_eq!(timers.queue.len(), 1);
            assert_eq!(timers.queue.values().next().unwrap().pid, other);
            assert!(timers.sleeps.is_empty());
            assert!(timers.per_pid.is_empty());
            assert_eq!(timers.terminations.keys().collect::<Vec<_>>(), [&other]);
        }
        timer.forget_all(other);
        assert_eq!(timer.next_due.nanos.load(Ordering::Acquire), u64::MAX);
        timer.shutdown();
    }
}
