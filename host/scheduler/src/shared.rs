//! The state every thread of one scheduler shares, and the operations on it that everything else
//! is built from: deliver an event, schedule a process, finish a process.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use dashmap::DashMap;
use wfcontract::{CommandError, ErrorKind, Event, Payload, Pid, Tag};

use crate::config::Config;
use crate::counters::{Counter, CounterSet};
use crate::current;
use crate::error::Error;
use crate::inbox::Refused;
use crate::observe::Observer;
use crate::park::Idle;
use crate::process::{FailureKind, ProcessError, ProcessResult};
use crate::queue::{Queues, Task};
use crate::slot::{Body, Notice, Slot, Start, TableHash};
use crate::spawn::Spawn;
use crate::state::{Notify, Wake};
use crate::timer::{Action, Fire, Timer};
use crate::wake::Wakes;

/// Shards of the pid table. Spawns and exits write to it from every worker; with this many shards two
/// workers rarely contend for one, and each shard stays small enough to resize quickly.
const TABLE_SHARDS: usize = 256;

pub(crate) struct Shared {
    pub(crate) config: Config,
    /// Every process that has not ended, plus ended ones whose result is retained for a parent.
    pub(crate) table: DashMap<Pid, Arc<Slot>, TableHash>,
    /// The counters every spawn and exit writes, from every worker, each on a cache line of its
    /// own, away from the fields each turn only reads (`shutdown`, the configuration), so that
    /// those reads do not share a line other workers keep writing.
    pub(crate) next_pid: CachePadded<AtomicU64>,
    /// Processes that have not ended.
    pub(crate) live: CachePadded<AtomicUsize>,
    /// Live processes that survive a stop (`Spawn::survives_stop`): a stop does not wait for them.
    pub(crate) surviving: CachePadded<AtomicUsize>,
    pub(crate) queues: Queues,
    /// Written by searching and parking workers, read at every wake-up.
    pub(crate) idle: CachePadded<Idle>,
    pub(crate) counters: CounterSet,
    /// Set once a stop is requested: no new processes, every live one is cancelled.
    pub(crate) stopping: AtomicBool,
    /// Set when the workers must exit.
    pub(crate) shutdown: AtomicBool,
    /// Signalled when a stop is requested, and when `live` drops to zero while stopping.
    pub(crate) stop_signal: parking_lot::Mutex<()>,
    pub(crate) stop_condvar: parking_lot::Condvar,
    /// Serves `sleep` and ends processes that outlive their cancel grace period.
    pub(crate) timer: Timer,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// The handlers told of a watched process's end and forgotten commands (`call`, `retry`).
    pub(crate) watchers: Vec<Arc<dyn crate::handlers::Handler>>,
}

impl Fire for Shared {
    fn fire(&self, pid: Pid, action: Action) {
        // The process may have ended meanwhile; then there is nothing to do.
        let Some(slot) = self.slot(pid) else {
            return;
        };
        match action {
            Action::Complete(tag) => {
                let _ = self.deliver(&slot, Event::completion(tag, Ok(Payload::empty())));
            }
            Action::Terminate(kind, reason, armed_for) => {
                // A cancel's grace timer is armed from another thread, and may be armed just
                // after its process ended (too late for `forget_all`): it must not end the
                // pid's next one.
                if std::ptr::eq(Arc::as_ptr(&slot), armed_for.as_ptr()) {
                    let _ = self.request_termination(&slot, kind, reason);
                }
            }
        }
    }
}

impl Wakes for Shared {
    fn wake(&self, pid: Pid) {
        if let Some(slot) = self.slot(pid) {
            Shared::wake(self, &slot);
        }
    }

    fn release(&self, pid: Pid) {
        let Some(slot) = self.slot(pid) else {
            return;
        };
        slot.released.store(true, Ordering::Release);
        // A Dekker pair with `resume_held`: the flag is stored and then the state read (by the
        // wake), the worker stores the state and then reads the flag. Without a fence on each
        // side both reads may see the old values (the flag still in this core's store buffer):
        // the worker misses the release while the wake finds the process `Ready` and does
        // nothing, and the process then parks `Waiting` for good.
        fence(Ordering::SeqCst);
        Shared::wake(self, &slot);
    }
}

impl Shared {
    /// This scheduler's identity on its worker threads (`current.rs`): its address.
    pub(crate) fn id(&self) -> usize {
        self as *const Shared as usize
    }

    pub(crate) fn new(
        config: Config,
        queues: Queues,
        observer: Option<Arc<dyn Observer>>,
        watchers: Vec<Arc<dyn crate::handlers::Handler>>,
    ) -> Shared {
        Shared {
            counters: CounterSet::new(config.workers),
            config,
            table: DashMap::with_hasher_and_shard_amount(TableHash::default(), TABLE_SHARDS),
            next_pid: CachePadded::new(AtomicU64::new(1)),
            live: CachePadded::new(AtomicUsize::new(0)),
            surviving: CachePadded::new(AtomicUsize::new(0)),
            queues,
            idle: CachePadded::new(Idle::new()),
            stopping: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            stop_signal: parking_lot::Mutex::new(()),
            stop_condvar: parking_lot::Condvar::new(),
            timer: Timer::default(),
            observer,
            watchers,
        }
    }

    /// Tells the watchers that process `slot` forgot the command of `tag`, if it is watched.
    pub(crate) fn forgot(&self, slot: &Slot, tag: wfcontract::Tag) {
        if slot.watched.load(Ordering::Relaxed) {
            for watcher in &self.watchers {
                watcher.forgot(slot.pid, tag);
            }
        }
    }

    /// Live processes a stop waits for: all but those that survive it.
    pub(crate) fn stoppable(&self) -> usize {
        let live = self.live.load(Ordering::Acquire);
        live.saturating_sub(self.surviving.load(Ordering::Acquire))
    }

    pub(crate) fn next_pid(&self) -> Pid {
        Pid(self.next_pid.fetch_add(1, Ordering::Relaxed))
    }

    /// Calls the observer, if any. A panicking observer is logged and otherwise ignored: watching
    /// must not break what is watched.
    pub(crate) fn observe(&self, f: impl FnOnce(&dyn Observer)) {
        if let Some(observer) = &self.observer {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| f(&**observer))) {
                tracing::warn!("the observer panicked: {}", panic_message(&*panic));
            }
        }
    }

    pub(crate) fn bump(&self, counter: Counter) {
        self.counters.bump(current::index(self.id()), counter);
    }

    /// Queues a process that just became `Ready`. On one of this scheduler's workers a woken
    /// process goes to the worker's `next` slot and a spawned one to its deque of spawns (run
    /// newest first, see `queue.rs`); from any other
    /// thread, a woken one to the global queue and a spawned one to the queue of new processes,
    /// which workers serve after the woken ones. A woken process that parked with its time slice
    /// used up goes to the overrun queue, wherever it is woken from.
    pub(crate) fn schedule(&self, task: Task, spawned: bool) {
        // Relaxed: the park that set it happens before the notify that made the process Ready.
        // Read before it is taken: a wake that finds it clear (nearly all) writes nothing.
        if !spawned
            && task.behind.load(Ordering::Relaxed)
            && task.behind.swap(false, Ordering::Relaxed)
        {
            self.queues.push_overrun(task);
            return self.idle.notify_one();
        }
        let task = match current::with_local_task(self.id(), task, |local, task| {
            if spawned {
                local.push_spawned(task);
                true
            } else {
                local.push_next(task)
            }
        }) {
            Ok(true) => return self.idle.notify_one(),
            Ok(false) => return,
            Err(task) => task,
        };
        if spawned {
            self.queues.push_fresh(task);
        } else {
            self.queues.push_global(task);
        }
        self.idle.notify_one();
    }

    /// Pushes `event` into the process's inbox and wakes it if it was waiting for it.
    pub(crate) fn deliver(&self, slot: &Arc<Slot>, event: Event) -> Result<(), Refused> {
        // A closed inbox's event is dropped here: nobody else can take it.
        self.deliver_or_return(slot, event)
            .unwrap_or(Err(Refused::Closed))
    }

    /// As [`deliver`](Self::deliver), but an inbox that is closed (its process ended) gives the
    /// event back, for a sender that may find the pid under another slot (`targets.rs`).
    pub(crate) fn deliver_or_return(
        &self,
        slot: &Arc<Slot>,
        event: Event,
    ) -> Result<Result<(), Refused>, Event> {
        let wake = {
            let mut inbox = slot.inbox.lock();
            if inbox.is_closed() {
                return Err(event);
            }
            match inbox.push(event) {
                Ok(wake) => wake,
                Err(refused) => return Ok(Err(refused)),
            }
        };
        if let Some(wake) = wake {
            self.notify(slot, wake);
        }
        Ok(Ok(()))
    }

    /// Tells the process something that may wake it happened; queues it if it did.
    pub(crate) fn notify(&self, slot: &Arc<Slot>, wake: Wake) {
        if slot.state.notify(wake) == Notify::Schedule {
            self.schedule(Arc::clone(slot), false);
        }
    }

    /// Makes a process that waits for a resource (`Readiness::NotReady`) runnable.
    pub(crate) fn wake(&self, slot: &Arc<Slot>) {
        self.notify(slot, Wake::All);
    }

    /// The process `pid`, if it is in the table (running, or finished and kept for a join).
    pub(crate) fn slot(&self, pid: Pid) -> Option<Arc<Slot>> {
        self.table.get(&pid).map(|entry| Arc::clone(entry.value()))
    }

    /// Delivers `event` to `pid`, or says there is no such process.
    pub(crate) fn deliver_to(&self, pid: Pid, event: Event) -> Result<(), Refused> {
        match self.table.get(&pid) {
            Some(entry) => self.deliver(entry.value(), event),
            None => Err(Refused::Closed),
        }
    }

    /// Delivers a cancel and, when the scheduler has a cancel grace period, arms the timer that
    /// terminates the process if it is still running when the period is over.
    pub(crate) fn cancel(&self, slot: &Arc<Slot>) -> Result<(), Refused> {
        self.deliver(slot, Event::cancel())?;
        if let Some(grace) = self.config.cancel_grace {
            if !slot.cancel_armed.swap(true, Ordering::AcqRel) {
                let reason =
                    format!("terminated: it did not finish within {grace:?} of being cancelled");
                let action =
                    Action::Terminate(FailureKind::Terminated, reason, Arc::downgrade(slot));
                let scheduled = self.timer.schedule(grace, slot.pid, action, usize::MAX);
                if scheduled.is_ok() {
                    slot.has_timers.store(true, Ordering::Relaxed);
                }
                if let Err(error) = scheduled {
                    // A later cancel tries again (the timer thread may start then).
                    slot.cancel_armed.store(false, Ordering::Release);
                    // Without the timer nothing ends a process that ignores the cancel. At shutdown
                    // that is the shutdown's job; otherwise someone must hear of it.
                    if self.stopping.load(Ordering::Acquire) {
                        tracing::debug!(pid = %slot.pid, "no cancel grace timer at shutdown: {error}");
                    } else {
                        tracing::error!(
                            pid = %slot.pid,
                            "the cancel grace period could not be armed ({error}); the process \
                             ends only when it stops by itself"
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Completes a yield; if the process has finished meanwhile, the result is dropped.
    pub(crate) fn complete_slot(
        &self,
        slot: &Arc<Slot>,
        tag: Tag,
        result: Result<Payload, CommandError>,
    ) {
        let _ = self.deliver(slot, Event::completion(tag, result));
    }

    /// Ends `terminate`d processes and ones whose next turn never comes: see `terminate`.
    pub(crate) fn request_termination(
        &self,
        slot: &Arc<Slot>,
        kind: FailureKind,
        reason: String,
    ) -> Result<(), Refused> {
        slot.inbox.lock().terminate(kind, reason)?;
        self.notify(slot, Wake::All);
        Ok(())
    }

    /// Ends a process: closes it (exactly once: the body gives it up), refuses further events,
    /// tells its watchers, and deals with its children. Called by the worker that owns the process
    /// (state `Running`), or at shutdown once the workers have stopped.
    pub(crate) fn finish(&self, slot: &Arc<Slot>, body: &mut Body, result: ProcessResult) {
        body.start = None;
        body.held = None;
        // What its handlers completed and no step took ends with it (the slot itself may stay
        // in memory a while: retained for a join, or in a worker's cache of send targets).
        *body.completed.get_mut() = Default::default();
        if let Some(process) = body.process.get_mut() {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| process.end(&result))) {
                tracing::warn!(pid = %slot.pid, "end panicked: {}", panic_message(&*panic));
            }
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| process.close())) {
                tracing::warn!(pid = %slot.pid, "close panicked: {}", panic_message(&*panic));
            }
            body.process.drop_in_place();
        }
        slot.inbox.lock().close();
        slot.state.complete();
        if slot.has_timers.load(Ordering::Relaxed) {
            self.timer.forget_all(slot.pid);
        }
        if slot.watched.load(Ordering::Relaxed) {
            for watcher in &self.watchers {
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| watcher.ended(slot.pid))) {
                    tracing::warn!(pid = %slot.pid, "a handler's end panicked: {}", panic_message(&*panic));
                }
            }
        }
        if let Err(error) = &result {
            tracing::debug!(pid = %slot.pid, %error, "process failed");
        }
        self.observe(|observer| observer.finished(slot.pid, &result));

        let (notices, children, keep, reaped, result) = {
            let mut exit = slot.exit.lock();
            exit.finished = true;
            let notices = std::mem::take(&mut exit.watchers);
            let reaped = notices
                .iter()
                .any(|n| matches!(n, Notice::Process { reaps: true, .. }));
            if reaped {
                exit.retained = false;
            }
            // Kept under the same lock that publishes `finished`, so a late join finds it; cloned
            // only when watchers need it too.
            let result = match (exit.retained, notices.is_empty()) {
                (true, true) => {
                    exit.result = Some(result);
                    None
                }
                (true, false) => {
                    exit.result = Some(result.clone());
                    Some(result)
                }
                (false, _) => Some(result),
            };
            let children = std::mem::take(&mut exit.children);
            (notices, children, exit.retained, reaped, result)
        };
        match (keep, reaped, slot.parent) {
            (true, _, _) => {}
            (false, true, Some(parent)) => self.reap(parent, slot.pid),
            (false, _, _) => {
                self.table.remove(&slot.pid);
            }
        }
        // Counted out before anyone hears of the exit, so whoever learns the result (a joining
        // parent, `wait` on a handle) already sees the process gone from `live` and the counters.
        // Still-running children keep `live` above zero, so a stop cannot complete under `orphan`.
        self.bump(Counter::Completion);
        if slot.survives_stop {
            self.surviving.fetch_sub(1, Ordering::AcqRel);
        }
        let left = self.live.fetch_sub(1, Ordering::AcqRel) - 1;
        if left <= self.surviving.load(Ordering::Acquire) && self.stopping.load(Ordering::Acquire) {
            let _guard = self.stop_signal.lock();
            self.stop_condvar.notify_all();
        }
        if let Some(result) = &result {
            for notice in notices {
                self.notify_exit(notice, slot.pid, result);
            }
        }
        for child in children.into_values() {
            self.orphan(&child);
        }
    }

    /// Tells one watcher that `pid` ended with `result`.
    pub(crate) fn notify_exit(&self, notice: Notice, pid: Pid, result: &ProcessResult) {
        match notice {
            Notice::Process {
                pid: watcher, tag, ..
            } => {
                let result = match result {
                    Ok(payload) => Ok(payload.clone()),
                    Err(error) => Err(child_ended(pid, error)),
                };
                let _ = self.deliver_to(watcher, Event::completion(tag, result));
            }
            Notice::Channel(sender) => {
                // Never block the finishing thread (often a worker) on someone else's channel: a
                // full one loses the notice, and says so. A closed one is the receiver's choice.
                if let Err(crossbeam_channel::TrySendError::Full(_)) =
                    sender.try_send((pid, result.clone()))
                {
                    tracing::warn!(%pid, "an exit notice was dropped: the watcher's channel is full");
                }
            }
        }
    }

    /// The parent of `child` ended: stop retaining the child's result, and cancel the child if it
    /// is still running, so no process outlives the workflow that started it.
    fn orphan(&self, child: &Arc<Slot>) {
        let finished = {
            let mut exit = child.exit.lock();
            exit.retained = false;
            exit.result = None;
            exit.finished
        };
        if finished {
            self.table.remove(&child.pid);
        } else {
            let _ = self.cancel(child);
        }
    }

    /// Reaps a finished child whose parent joined it.
    pub(crate) fn reap(&self, parent: Pid, child: Pid) {
        self.table.remove(&child);
        if let Some(entry) = self.table.get(&parent) {
            entry.value().exit.lock().children.remove(&child);
        }
    }

    /// Starts a process; `parent`, when given, is the spawning process's slot.
    pub(crate) fn spawn(&self, spawn: Spawn, parent: Option<&Arc<Slot>>) -> Result<Pid, Error> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        self.count_live()?;
        let pid = spawn.pid.unwrap_or_else(|| self.next_pid());
        let looked_up;
        let parent = match (parent, spawn.parent) {
            (Some(slot), _) => Some(slot),
            (None, Some(pid)) => {
                looked_up = self.slot(pid);
                looked_up.as_ref()
            }
            (None, None) => None,
        };
        let method_for_observer = if self.observer.is_some() {
            spawn.method.clone()
        } else {
            String::new()
        };
        let timeout = spawn.timeout;
        let survives_stop = spawn.survives_stop;
        let held = spawn.held;
        let slot = self.new_slot(spawn, pid, parent);
        if held {
            // Before it is in the table: nobody sees it `Ready` and unqueued.
            slot.state.hold();
        }
        // From here on every way out but success takes back what the spawn did so far.
        let mut undo = UndoSpawn::new(self, &slot);
        if let Some(parent) = parent {
            self.link_child(parent, &slot)?;
            undo.parent = Some(parent);
        }
        self.claim_pid(&mut undo)?;
        if survives_stop {
            self.surviving.fetch_add(1, Ordering::AcqRel);
            undo.surviving = true;
        }
        self.observe(|observer| observer.spawned(pid, slot.parent, &method_for_observer));
        // Dekker with `Scheduler::shutdown`, which sets `shutdown` and then sweeps the table:
        // either that sweep sees this process, or this sees `shutdown` and takes it back.
        fence(Ordering::SeqCst);
        if self.shutdown.load(Ordering::SeqCst) {
            return Err(Error::ShuttingDown);
        }
        if let Some(timeout) = timeout {
            self.arm_timeout(&slot, timeout)?;
        }
        undo.keep();
        self.bump(Counter::Spawn);
        // A stop that began after the check above may have missed this process: cancel it too.
        if !survives_stop && self.stopping.load(Ordering::Acquire) {
            let _ = self.cancel(&slot);
        }
        if !held {
            self.schedule(slot, true);
        }
        Ok(pid)
    }

    /// Counts a process about to be spawned as live, within `max_processes`. Counted before it
    /// exists, so concurrent spawns cannot overshoot the limit.
    fn count_live(&self) -> Result<(), Error> {
        let counted = match self.config.max_processes {
            Some(limit) => self
                .live
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < limit).then_some(n + 1)
                })
                .is_ok(),
            None => {
                self.live.fetch_add(1, Ordering::AcqRel);
                true
            }
        };
        if !counted {
            return Err(Error::TooManyProcesses(
                self.config.max_processes.unwrap_or(usize::MAX),
            ));
        }
        Ok(())
    }

    /// The slot of a process being spawned as `pid`, not yet linked or in the table.
    fn new_slot(&self, spawn: Spawn, pid: Pid, parent: Option<&Arc<Slot>>) -> Arc<Slot> {
        let Spawn {
            mut slot,
            method,
            input,
            notices,
            confined,
            outbox,
            survives_stop,
            parent: _,
            timeout: _,
            pid: _,
            held: _,
        } = spawn;
        // A process started from inside inherits its parent's way to the host.
        let outbox = outbox.or_else(|| parent.and_then(|p| p.outbox.clone()));
        Arc::get_mut(&mut slot)
            .expect("a spawn holds the only reference to its slot")
            .fill(
                pid,
                parent.map(|p| p.pid),
                Start { method, input },
                notices,
                self.config.mailbox(),
                confined,
                survives_stop,
                outbox,
            );
        slot
    }

    /// Makes `child` a child of `parent`, within `max_children`. The link exists only while the
    /// parent lives: a parent that already ended cannot join, so the child is then not retained
    /// for it.
    fn link_child(&self, parent: &Arc<Slot>, child: &Arc<Slot>) -> Result<(), Error> {
        let mut exit = parent.exit.lock();
        if exit.finished {
            child.exit.lock().retained = false;
            return Ok(());
        }
        // A pid asked for that one of its children has: refused here, before the entry is
        // touched (the spawn would fail at the table anyway, and taking it back must not unlink
        // the child that has the pid).
        if exit.children.contains_key(&child.pid) {
            return Err(Error::PidInUse(child.pid));
        }
        if let Some(limit) = self.config.max_children {
            if exit.children.len() >= limit {
                return Err(Error::TooManyChildren {
                    parent: parent.pid,
                    limit,
                });
            }
        }
        exit.children.insert(child.pid, Arc::clone(child));
        Ok(())
    }

    /// Puts the spawn's slot in the table under its pid. A pid asked for may be taken; the entry
    /// is claimed before anything else sees it.
    fn claim_pid(&self, undo: &mut UndoSpawn<'_>) -> Result<(), Error> {
        let pid = undo.slot.pid;
        match self.table.entry(pid) {
            dashmap::Entry::Occupied(_) => {
                // Still under the entry's shard lock.
                undo.roll_back();
                Err(Error::PidInUse(pid))
            }
            dashmap::Entry::Vacant(entry) => {
                entry.insert(Arc::clone(undo.slot));
                undo.claimed = true;
                Ok(())
            }
        }
    }

    /// Arms the timer that ends a process spawned with a timeout once it has run that long.
    fn arm_timeout(&self, slot: &Arc<Slot>, timeout: Duration) -> Result<(), Error> {
        let reason = format!("timed out: it ran longer than its timeout of {timeout:?}");
        let action = Action::Terminate(FailureKind::Timeout, reason, Arc::downgrade(slot));
        if let Err(error) = self.timer.schedule(timeout, slot.pid, action, usize::MAX) {
            return Err(Error::Unavailable(error.message));
        }
        slot.has_timers.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// What a spawn under way has done, taken back when it is dropped unless the spawn succeeded
/// ([`UndoSpawn::keep`]): the one way a failed spawn leaves the scheduler as it found it.
struct UndoSpawn<'a> {
    shared: &'a Shared,
    /// The process being spawned, counted live.
    slot: &'a Arc<Slot>,
    /// The parent it was linked to (or that had already ended when it tried).
    parent: Option<&'a Arc<Slot>>,
    /// It is in the table.
    claimed: bool,
    /// It is counted in `surviving`.
    surviving: bool,
    /// Nothing left to take back.
    done: bool,
}

impl<'a> UndoSpawn<'a> {
    /// For a spawn that has counted `slot` live and done nothing else yet.
    fn new(shared: &'a Shared, slot: &'a Arc<Slot>) -> UndoSpawn<'a> {
        UndoSpawn {
            shared,
            slot,
            parent: None,
            claimed: false,
            surviving: false,
            done: false,
        }
    }

    /// The spawn succeeded: keep everything.
    fn keep(mut self) {
        self.done = true;
    }

    /// Takes back what the spawn did, in the reverse order, once.
    fn roll_back(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let shared = self.shared;
        let pid = self.slot.pid;
        if self.claimed {
            shared.table.remove(&pid);
        }
        // A sender may have found it in the table meanwhile (and cached it, `targets.rs`):
        // closed, its inbox refuses what comes next, and a cached entry is seen to be stale.
        self.slot.inbox.lock().close();
        // Taken back from its parent too, or it would count against the parent's children.
        if let Some(parent) = self.parent {
            let mut exit = parent.exit.lock();
            if exit
                .children
                .get(&pid)
                .is_some_and(|child| Arc::ptr_eq(child, self.slot))
            {
                exit.children.remove(&pid);
            }
        }
        if self.surviving {
            shared.surviving.fetch_sub(1, Ordering::AcqRel);
        }
        shared.live.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for UndoSpawn<'_> {
    fn drop(&mut self) {
        self.roll_back();
    }
}

/// The error a watcher sees when the process it watched did not finish with a result:
/// `child-cancelled` when it was cancelled or ended from outside, `child-failed` otherwise. The
/// text names the process once.
pub(crate) fn child_ended(pid: Pid, error: &ProcessError) -> CommandError {
    let kind = match error.kind() {
        FailureKind::Cancelled | FailureKind::Terminated | FailureKind::Timeout => {
            ErrorKind::ChildCancelled
        }
        _ => ErrorKind::ChildFailed,
    };
    let message = error.message();
    let named = message
        .strip_prefix("process ")
        .and_then(|rest| rest.strip_prefix(&pid.to_string()))
        .is_some_and(|rest| rest.starts_with(' '));
    let message = if named {
        message.to_string()
    } else {
        let verb = match kind {
            ErrorKind::ChildCancelled => "was stopped",
            _ => "failed",
        };
        format!("process {pid} {verb}: {message}")
    };
    CommandError::new(kind, message)
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use wfcontract::{Payload, Status, StepOutput};

    use crate::process::{Events, InitContext, Process, ProcessError};
    use crate::spawn::Spawn;
    use crate::{Error, Scheduler};

    /// Waits for messages for ever.
    struct Idle;

    impl Process for Idle {
        fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
            Ok(())
        }

        fn step(&mut self, _: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
            out.status = Status::Idle;
            Ok(())
        }
    }

    /// A spawn that loses the race with a shutdown takes its child back from the parent too, so
    /// that it does not count against the parent's children limit.
    #[test]
    fn a_spawn_that_races_shutdown_leaves_no_phantom_child() {
        let scheduler = Scheduler::builder().workers(1).build().unwrap();
        let shared = Arc::clone(&scheduler.handle().shared);
        let parent = scheduler.spawn(Idle, "parent", Payload::empty()).unwrap();
        let parent = shared.slot(parent).unwrap();
        // The shutdown's sweep has begun, but the spawn passed the `stopping` check before it.
        shared
            .shutdown
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let refused = shared.spawn(Spawn::new(Idle, "child", Payload::empty()), Some(&parent));
        assert_eq!(refused, Err(Error::ShuttingDown));
        assert!(parent.exit.lock().children.is_empty());
        assert_eq!(shared.live.load(std::sync::atomic::Ordering::SeqCst), 1);
        scheduler.shutdown(std::time::Duration::ZERO);
    }

    /// Every way a spawn fails after it counted the process live (a full parent, a pid in use, a
    /// timeout that cannot be armed) leaves the scheduler as it found it: nothing in the table,
    /// no child on the parent, `live` and `surviving` as they were.
    #[test]
    fn a_failed_spawn_takes_back_what_it_did() {
        use std::sync::atomic::Ordering::SeqCst;

        let scheduler = Scheduler::builder()
            .workers(1)
            .max_children(Some(1))
            .build()
            .unwrap();
        let shared = Arc::clone(&scheduler.handle().shared);
        let full = scheduler.spawn(Idle, "full", Payload::empty()).unwrap();
        let full = shared.slot(full).unwrap();
        let child = shared
            .spawn(Spawn::new(Idle, "child", Payload::empty()), Some(&full))
            .unwrap();
        let other = scheduler.spawn(Idle, "other", Payload::empty()).unwrap();
        let other = shared.slot(other).unwrap();
        let before = (shared.live.load(SeqCst), shared.surviving.load(SeqCst));
        assert_eq!(before, (3, 0));
        let unchanged = |pid: Option<wfcontract::Pid>| {
            assert_eq!(
                (shared.live.load(SeqCst), shared.surviving.load(SeqCst)),
                before
            );
            assert_eq!(full.exit.lock().children.len(), 1);
            assert!(other.exit.lock().children.is_empty());
            if let Some(pid) = pid {
                assert!(shared.slot(pid).is_none());
            }
        };

        let refused = shared.spawn(Spawn::new(Idle, "child", Payload::empty()), Some(&full));
        assert_eq!(
            refused,
            Err(Error::TooManyChildren {
                parent: full.pid,
                limit: 1
            })
        );
        unchanged(None);

        let spawn = Spawn::new(Idle, "child", Payload::empty()).pid(child);
        let refused = shared.spawn(spawn.parent(other.pid), None);
        assert_eq!(refused, Err(Error::PidInUse(child)));
        unchanged(None);
        // Under the parent that has the child with that pid: the child stays linked to it.
        let first = Arc::clone(full.exit.lock().children.get(&child).unwrap());
        let spawn = Spawn::new(Idle, "child", Payload::empty()).pid(child);
        let refused = shared.spawn(spawn.parent(full.pid), None);
        assert_eq!(refused, Err(Error::PidInUse(child)));
        unchanged(None);
        assert!(Arc::ptr_eq(
            full.exit.lock().children.get(&child).unwrap(),
            &first
        ));
        // The process that has the pid keeps it, and stays its parent's child.
        assert!(shared.slot(child).is_some());
        assert!(full.exit.lock().children.contains_key(&child));

        shared.timer.shutdown();
        let pid = scheduler.reserve_pid();
        let spawn = Spawn::new(Idle, "child", Payload::empty())
            .pid(pid)
            .survives_stop(true)
            .timeout(std::time::Duration::from_secs(60));
        let refused = shared.spawn(spawn, Some(&other));
        assert!(matches!(refused, Err(Error::Unavailable(_))), "{refused:?}");
        unchanged(Some(pid));
        scheduler.shutdown(std::time::Duration::ZERO);
    }

    /// A termination timer armed for a process that has ended (a cancel's grace timer armed
    /// just after the end) leaves alone the process started again under its pid, as a durable
    /// host does; armed for that one, it ends it.
    #[test]
    fn a_termination_timer_ends_only_the_process_it_was_armed_for() {
        use crate::process::FailureKind;
        use crate::timer::{Action, Fire};

        let scheduler = Scheduler::builder().workers(1).build().unwrap();
        let shared = Arc::clone(&scheduler.handle().shared);
        let pid = scheduler.reserve_pid();
        let first = scheduler
            .spawn_handle_with(Spawn::new(Idle, "first", Payload::empty()).pid(pid))
            .unwrap();
        let armed_for_first = Arc::downgrade(&shared.slot(pid).unwrap());
        scheduler.terminate(pid, "ended").unwrap();
        assert!(first.wait().is_err());
        let second = scheduler
            .spawn_handle_with(Spawn::new(Idle, "second", Payload::empty()).pid(pid))
            .unwrap();
        let stale = Action::Terminate(FailureKind::Terminated, "stale".into(), armed_for_first);
        shared.fire(pid, stale);
        assert!(scheduler.exists(pid));
        let armed_for_second = Arc::downgrade(&shared.slot(pid).unwrap());
        let timer = Action::Terminate(FailureKind::Terminated, "due".into(), armed_for_second);
        shared.fire(pid, timer);
        let ended = second.wait().unwrap_err();
        assert!(ended.to_string().contains("due"), "{ended}");
        scheduler.shutdown(std::time::Duration::ZERO);
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A cancel whose grace-period timer cannot be armed says so in the log (nothing else would
    /// end a process that ignores the cancel), and the next cancel tries again.
    #[test]
    fn a_grace_timer_that_cannot_be_armed_is_logged() {
        let scheduler = Scheduler::builder()
            .workers(1)
            .cancel_grace(Some(std::time::Duration::from_secs(10)))
            .build()
            .unwrap();
        let shared = Arc::clone(&scheduler.handle().shared);
        let pid = scheduler.spawn(Idle, "idle", Payload::empty()).unwrap();
        shared.timer.shutdown();
        let cancel = || {
            let captured = Captured::default();
            let writer = captured.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .finish();
            tracing::subscriber::with_default(subscriber, || scheduler.cancel(pid).unwrap());
            let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
            assert!(
                log.contains("the cancel grace period could not be armed"),
                "{log}"
            );
        };
        cancel();
        // Not marked as armed: the next cancel tries again (and says so again).
        let slot = shared.slot(pid).unwrap();
        assert!(!slot.cancel_armed.load(std::sync::atomic::Ordering::Acquire));
        cancel();
        scheduler.shutdown(std::time::Duration::ZERO);
    }
}
