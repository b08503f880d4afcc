//! The scheduler's public operations, callable from any thread (including from handlers and from
//! inside a process's step).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use wfcontract::{CommandError, ErrorKind, Event, Payload, Pid, Tag};

use crate::counters::Counters;
use crate::error::Error;
use crate::process::{FailureKind, Process, ProcessError, ProcessResult};
use crate::shared::{child_ended, Shared};
use crate::slot::{Notice, Slot};
use crate::spawn::Spawn;
use crate::wake::{Waker, Wakes};

/// A cheap, cloneable reference to a running scheduler.
#[derive(Clone)]
pub struct SchedulerHandle {
    pub(crate) shared: Arc<Shared>,
}

/// A [`SchedulerHandle`] that does not keep the scheduler alive: for what the scheduler itself
/// holds (a handler's state), which would otherwise never be freed.
#[derive(Clone, Debug)]
pub struct WeakSchedulerHandle {
    shared: std::sync::Weak<Shared>,
}

impl WeakSchedulerHandle {
    /// The handle, while the scheduler exists.
    pub fn upgrade(&self) -> Option<SchedulerHandle> {
        self.shared
            .upgrade()
            .map(|shared| SchedulerHandle { shared })
    }
}

impl std::fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerHandle")
            .field("workers", &self.shared.config.workers)
            .field("live", &self.live())
            .finish_non_exhaustive()
    }
}

/// Waits for the result of one process.
#[derive(Debug)]
pub struct ProcessHandle {
    pid: Pid,
    receiver: Receiver<(Pid, ProcessResult)>,
}

impl ProcessHandle {
    /// The process's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Blocks until the process ends and returns its result.
    pub fn wait(self) -> ProcessResult {
        self.receiver
            .recv()
            .map(|(_, result)| result)
            .unwrap_or_else(|_| Err(lost(self.pid)))
    }

    /// Waits at most `timeout`; `None` if the process is still running.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<ProcessResult> {
        match self.receiver.recv_timeout(timeout) {
            Ok((_, result)) => Some(result),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(lost(self.pid))),
        }
    }

    /// The channel the result arrives on, for `crossbeam_channel::select!`.
    pub fn receiver(&self) -> &Receiver<(Pid, ProcessResult)> {
        &self.receiver
    }
}

fn lost(pid: Pid) -> ProcessError {
    ProcessError::new(format!("process {pid} was dropped without a result"))
}

impl SchedulerHandle {
    /// Starts entry point `method` of `process` with `input`. The process runs on the workers; its
    /// `init` runs at its first turn.
    pub fn spawn(
        &self,
        process: impl Process,
        method: impl Into<String>,
        input: Payload,
    ) -> Result<Pid, Error> {
        self.spawn_with(Spawn::new(process, method, input))
    }

    /// As [`spawn`](Self::spawn), returning a handle to wait for the result.
    pub fn spawn_handle(
        &self,
        process: impl Process,
        method: impl Into<String>,
        input: Payload,
    ) -> Result<ProcessHandle, Error> {
        self.spawn_handle_with(Spawn::new(process, method, input))
    }

    /// Starts a process with options.
    pub fn spawn_with(&self, spawn: Spawn) -> Result<Pid, Error> {
        self.shared.spawn(spawn, None)
    }

    /// Starts a process with options, returning a handle to wait for its result.
    pub fn spawn_handle_with(&self, spawn: Spawn) -> Result<ProcessHandle, Error> {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let pid = self.shared.spawn(spawn.notify(sender), None)?;
        Ok(ProcessHandle { pid, receiver })
    }

    /// Sends a message from the host ([`Pid::HOST`]) to `to`.
    pub fn send(&self, to: Pid, message: Payload) -> Result<(), Error> {
        self.send_from(Pid::HOST, to, message)
    }

    /// Sends a message to `to` on behalf of `from`. Messages from one sender to one receiver
    /// arrive in the order they were sent.
    pub fn send_from(&self, from: Pid, to: Pid, message: Payload) -> Result<(), Error> {
        self.send_numbered(from, to, 0, message)
    }

    /// As [`send_from`](Self::send_from), the message's event carrying `number` as its tag: a
    /// durable host's number for the message, which the receiver's journal records when it takes
    /// it. Guests ignore a message's tag.
    pub fn send_numbered(
        &self,
        from: Pid,
        to: Pid,
        number: u64,
        message: Payload,
    ) -> Result<(), Error> {
        let mut event = Event::message(from, message);
        event.tag = wfcontract::Tag(number);
        self.shared
            .deliver_to(to, event)
            .map_err(|refused| refused.into_send_error(to))
    }

    /// Delivers a cancel to `pid`, ahead of any queued messages. The process decides what to do;
    /// see [`terminate`](Self::terminate) for ending it regardless.
    pub fn cancel(&self, pid: Pid) -> Result<(), Error> {
        let slot = self.shared.slot(pid).ok_or(Error::NoSuchProcess(pid))?;
        self.shared
            .cancel(&slot)
            .map_err(|_| Error::NoSuchProcess(pid))
    }

    /// Ends `pid` at its next turn without stepping it again: it fails with `reason`. A step in
    /// progress is not interrupted.
    pub fn terminate(&self, pid: Pid, reason: impl Into<String>) -> Result<(), Error> {
        let slot = self.shared.slot(pid).ok_or(Error::NoSuchProcess(pid))?;
        self.shared
            .request_termination(&slot, FailureKind::Terminated, reason.into())
            .map_err(|_| Error::NoSuchProcess(pid))
    }

    /// Completes yield `tag` of process `pid`, from any thread.
    pub fn complete_yield(
        &self,
        pid: Pid,
        tag: Tag,
        result: Result<Payload, CommandError>,
    ) -> Result<(), Error> {
        self.shared
            .deliver_to(pid, Event::completion(tag, result))
            .map_err(|_| Error::NoSuchProcess(pid))
    }

    /// Completes yield `tag` of `watcher` with the result of `target` once it ends (at once if it
    /// already ended and its result is retained). A failed target completes it with a
    /// `child-failed` error; an unknown one with `no-such-process`. When `watcher` is the target's
    /// parent, this is a join: the retained result is released afterwards.
    pub fn join(&self, target: Pid, watcher: Pid, tag: Tag) {
        let shared = &self.shared;
        let slot = shared.slot(target);
        let Some(slot) = slot else {
            let error = Error::NoSuchProcess(target).into_command_error();
            let _ = shared.deliver_to(watcher, Event::completion(tag, Err(error)));
            return;
        };
        let reaps = slot.parent == Some(watcher);
        let ready = {
            let mut exit = slot.exit.lock();
            if !exit.finished {
                // The parent's joins and everyone else's are counted apart: others cannot crowd
                // the parent out, and the parent cannot pile up joins without bound either (each
                // gets its own copy of the result).
                let limit = shared.config.max_watchers;
                let waiting = exit
                    .watchers
                    .iter()
                    .filter(|notice| notice.reaps() == reaps)
                    .count();
                if waiting >= limit {
                    drop(exit);
                    let by = if reaps { " by its parent" } else { "" };
                    let error = CommandError::new(
                        ErrorKind::LimitReached,
                        format!("{limit} joins{by} already wait on process {target}"),
                    );
                    let _ = shared.deliver_to(watcher, Event::completion(tag, Err(error)));
                    return;
                }
                exit.watchers.push(Notice::Process {
                    pid: watcher,
                    tag,
                    reaps,
                });
                return;
            }
            if reaps {
                exit.retained = false;
                exit.result.take()
            } else {
                exit.result.clone()
            }
        };
        if reaps {
            shared.reap(watcher, target);
        }
        let result = match ready {
            Some(Ok(payload)) => Ok(payload),
            Some(Err(error)) => Err(child_ended(target, &error)),
            None => Err(Error::NoSuchProcess(target).into_command_error()),
        };
        let _ = shared.deliver_to(watcher, Event::completion(tag, result));
    }

    /// Sends `(pid, result)` on `sender` when `pid` ends.
    pub fn watch(&self, pid: Pid, sender: Sender<(Pid, ProcessResult)>) -> Result<(), Error> {
        let slot = self.shared.slot(pid).ok_or(Error::NoSuchProcess(pid))?;
        let mut exit = slot.exit.lock();
        if exit.finished {
            return match exit.result.clone() {
                Some(result) => {
                    let _ = sender.try_send((pid, result));
                    Ok(())
                }
                None => Err(Error::NoSuchProcess(pid)),
            };
        }
        exit.watchers.push(Notice::Channel(sender));
        Ok(())
    }

    /// Begins stopping without waiting: no new processes are accepted and every live process is
    /// cancelled. Safe anywhere, including inside a step. [`Scheduler::shutdown`] finishes the job;
    /// [`Scheduler::wait_for_stop`] lets the owner learn that a stop was requested.
    ///
    /// [`Scheduler::shutdown`]: crate::Scheduler::shutdown
    /// [`Scheduler::wait_for_stop`]: crate::Scheduler::wait_for_stop
    pub fn request_stop(&self) {
        let shared = &self.shared;
        if shared.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        let live: Vec<Arc<Slot>> = shared
            .table
            .iter()
            .filter(|e| !e.value().survives_stop)
            .map(|e| Arc::clone(e.value()))
            .collect();
        for slot in live {
            let _ = shared.cancel(&slot);
        }
        let _guard = shared.stop_signal.lock();
        shared.stop_condvar.notify_all();
    }

    /// A pid nobody has: a process spawned with it ([`Spawn::pid`]) gets it.
    pub fn reserve_pid(&self) -> Pid {
        self.shared.next_pid()
    }

    /// Makes sure pids up to `last` are never handed out by [`reserve_pid`](Self::reserve_pid) or
    /// a spawn: they belong to processes a durable host recorded and will start again.
    pub fn reserve_pids_through(&self, last: Pid) {
        self.shared
            .next_pid
            .fetch_max(last.0.saturating_add(1), Ordering::Relaxed);
    }

    /// A handle that does not keep the scheduler alive.
    pub fn downgrade(&self) -> WeakSchedulerHandle {
        WeakSchedulerHandle {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// A waker for process `pid` (what starts a [`Spawn::held`] one); `None` when there is no
    /// such process.
    pub fn waker(&self, pid: Pid) -> Option<Waker> {
        self.shared.slot(pid)?;
        Some(Waker::new(
            Arc::downgrade(&self.shared) as Weak<dyn Wakes>,
            pid,
        ))
    }

    /// Whether a process with this pid is known to the scheduler: running, waiting, or ended
    /// with its result still kept for its parent's join.
    pub fn exists(&self, pid: Pid) -> bool {
        self.shared.slot(pid).is_some()
    }

    /// The parent of process `pid` if the scheduler knows it (see [`exists`](Self::exists)):
    /// `Some(None)` for a process spawned from outside.
    pub fn parent_of(&self, pid: Pid) -> Option<Option<Pid>> {
        self.shared.slot(pid).map(|slot| slot.parent)
    }

    /// True once a stop has been requested.
    pub fn is_stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::Acquire)
    }

    /// Processes that have not ended.
    ///
    /// A process is counted out before its result reaches anyone (a joining parent, a `wait`),
    /// so once a result is in hand its process no longer counts here.
    pub fn live(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.shared.config.workers
    }

    /// Activity so far.
    pub fn counters(&self) -> Counters {
        self.shared.counters.sum()
    }

    /// Workers parked right now.
    pub fn parked_workers(&self) -> usize {
        self.shared.idle.sleeping()
    }
}
