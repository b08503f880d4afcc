//! A process to start, with its options ([`Spawn`]).

use std::sync::Arc;
use std::time::Duration;

use wfcontract::{Payload, Pid};

use crate::outbox::Outbox;
use crossbeam_channel::Sender;

use crate::process::{Process, ProcessResult};
use crate::slot::{Notice, Slot, SlotOf};

/// The largest process [`Spawn::new`] keeps in the slot's own allocation.
const INLINE_PROCESS_BYTES: usize = 128;

/// A process to start, with its options. See [`SchedulerHandle::spawn_with`](crate::SchedulerHandle::spawn_with).
pub struct Spawn {
    /// The process, already in the slot it will run in (one allocation for both), which this
    /// spawn holds the only reference to until it is spawned.
    pub(crate) slot: Arc<Slot>,
    pub(crate) method: String,
    pub(crate) input: Payload,
    pub(crate) parent: Option<Pid>,
    pub(crate) notices: Vec<Notice>,
    pub(crate) confined: bool,
    pub(crate) outbox: Option<Outbox>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) pid: Option<Pid>,
    pub(crate) survives_stop: bool,
    pub(crate) held: bool,
}

impl std::fmt::Debug for Spawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawn")
            .field("method", &self.method)
            .field("parent", &self.parent)
            .finish_non_exhaustive()
    }
}

impl Spawn {
    /// Entry point `method` of `process`, with `input`.
    pub fn new<P: Process>(process: P, method: impl Into<String>, input: Payload) -> Spawn {
        // A small process lives in its slot's allocation (one allocation a process); a large one
        // (a wasm or durable process, a few hundred bytes) in a box of its own, freed when the
        // process ends, so that a slot kept after its process (for a join, in a cache of send
        // targets) stays small.
        let slot = if std::mem::size_of::<P>() <= INLINE_PROCESS_BYTES {
            SlotOf::unspawned(process)
        } else {
            SlotOf::unspawned(Box::new(process) as Box<dyn Process>)
        };
        Spawn::of(slot, method.into(), input)
    }

    /// As [`Spawn::new`], for an already boxed process.
    pub fn boxed(process: Box<dyn Process>, method: impl Into<String>, input: Payload) -> Spawn {
        Spawn::of(SlotOf::unspawned(process), method.into(), input)
    }

    fn of(slot: Arc<Slot>, method: String, input: Payload) -> Spawn {
        Spawn {
            slot,
            method,
            input,
            parent: None,
            notices: Vec::new(),
            confined: false,
            outbox: None,
            timeout: None,
            pid: None,
            survives_stop: false,
            held: false,
        }
    }

    /// Spawns the process waiting: it takes no turn (its `init` included) until a [`Waker`](crate::Waker)
    /// from [`SchedulerHandle::waker`](crate::SchedulerHandle::waker) wakes it, or it is terminated; what is sent to it waits
    /// in its inbox meanwhile. For starting many processes that must not run before all of
    /// them exist (a durable host's recovery), without a turn each to find that out. Default:
    /// runnable at once.
    pub fn held(mut self) -> Spawn {
        self.held = true;
        self
    }

    /// Starts the process under `pid`, one [`SchedulerHandle::reserve_pid`](crate::SchedulerHandle::reserve_pid) gave, or one a
    /// durable host recorded (see [`SchedulerHandle::reserve_pids_through`](crate::SchedulerHandle::reserve_pids_through)). A pid in use fails
    /// the spawn with [`Error::PidInUse`](crate::Error::PidInUse). Default: the next free pid.
    pub fn pid(mut self, pid: Pid) -> Spawn {
        self.pid = Some(pid);
        self
    }

    /// A stop neither cancels the process nor waits for it: it is closed where it stands when
    /// the workers stop, as a durable host's workflows are, to go on after a restart. Default:
    /// cancelled and waited for, as every process.
    pub fn survives_stop(mut self, survives: bool) -> Spawn {
        self.survives_stop = survives;
        self
    }

    /// Where the new process's messages to [`Pid::HOST`] go (see [`outbox`](crate::outbox)). A
    /// process spawned by another inherits its parent's outbox unless given its own. Default:
    /// none, and a message to the host completes with `no-such-process`.
    pub fn outbox(mut self, outbox: Outbox) -> Spawn {
        self.outbox = Some(outbox);
        self
    }

    /// Ends the process, if it is still running `timeout` after it was spawned: it fails with
    /// [`FailureKind::Timeout`](crate::FailureKind::Timeout) at its next turn, without another step. Default: none.
    pub fn timeout(mut self, timeout: Duration) -> Spawn {
        self.timeout = Some(timeout);
        self
    }

    /// Confines the new process to its own children: its `cancel` and `join` of any other
    /// process complete with a `not-allowed` error. (`send` reaches any pid.) For processes
    /// running code nobody vouched for. Default: not confined.
    pub fn confined(mut self, confined: bool) -> Spawn {
        self.confined = confined;
        self
    }

    /// Links the new process to `parent`: its result is kept after it ends until the parent joins
    /// it, and when the parent ends first, the child is cancelled.
    pub fn parent(mut self, parent: Pid) -> Spawn {
        self.parent = Some(parent);
        self
    }

    /// Sends `(pid, result)` on `sender` when the process ends. The send never blocks the
    /// finishing thread: give the channel room (an unbounded channel, or one slot per process).
    pub fn notify(mut self, sender: Sender<(Pid, ProcessResult)>) -> Spawn {
        self.notices.push(Notice::Channel(sender));
        self
    }
}
