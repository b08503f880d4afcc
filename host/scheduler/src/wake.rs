//! How a process that cannot step now is made runnable again: its [`Waker`].
//!
//! A waker names its process by pid and reaches the scheduler through [`Wakes`], which finds the
//! process in its table: so it holds no reference to the process's slot, and the contract with
//! processes (`process.rs`) needs nothing of the scheduler's insides.

use std::sync::{Arc, Weak};

use wfcontract::Pid;

/// What a [`Waker`] reaches: the scheduler, which finds the process by its pid (pids are never
/// reused, so a waker outliving its process finds nothing).
pub(crate) trait Wakes: Send + Sync {
    /// Makes process `pid` runnable, if it is in the table.
    fn wake(&self, pid: Pid);
    /// Lets process `pid`'s held step go on (see [`Release`](crate::Release)), then wakes it.
    fn release(&self, pid: Pid);
}

/// The process a worker's turn runs, as [`WakerSource`] and [`Hold`](crate::Hold) see it.
pub(crate) trait Turn {
    /// Its pid.
    fn pid(&self) -> Pid;
    /// The scheduler that runs it.
    fn scheduler(&self) -> Weak<dyn Wakes>;
    /// Whether it is being terminated.
    fn terminating(&self) -> bool;
}

/// Whether a process can step now: see [`Process::prepare`](crate::Process::prepare).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Readiness {
    /// It can step.
    Ready,
    /// It cannot step until the waker it was given is woken.
    NotReady,
}

/// Hands a process the [`Waker`] that makes it runnable again: see
/// [`Process::prepare`](crate::Process::prepare).
pub struct WakerSource<'a> {
    pub(crate) turn: &'a dyn Turn,
}

impl std::fmt::Debug for WakerSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakerSource")
            .field("pid", &self.turn.pid())
            .finish_non_exhaustive()
    }
}

impl WakerSource<'_> {
    /// A waker for this process.
    pub fn waker(&self) -> Waker {
        Waker::new(self.turn.scheduler(), self.turn.pid())
    }

    /// Whether the process is being terminated: this turn ends it without a step, so getting
    /// ready for one (reading state back, taking an instance) would be wasted.
    pub fn terminating(&self) -> bool {
        self.turn.terminating()
    }
}

/// Makes a process that answered [`Readiness::NotReady`] runnable again. Holds no strong
/// reference: a waker outliving its process or its scheduler does nothing.
#[derive(Clone)]
pub struct Waker {
    scheduler: Weak<dyn Wakes>,
    pid: Pid,
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// The scheduler of [`Waker::noop`]: none.
struct Nowhere;

impl Wakes for Nowhere {
    fn wake(&self, _: Pid) {}
    fn release(&self, _: Pid) {}
}

impl Waker {
    pub(crate) fn new(scheduler: Weak<dyn Wakes>, pid: Pid) -> Waker {
        Waker { scheduler, pid }
    }

    /// A waker that wakes nothing, for driving a process by hand (in tests, or in a host that is
    /// not a scheduler).
    pub fn noop() -> Waker {
        Waker {
            scheduler: Weak::<Nowhere>::new(),
            pid: Pid::HOST,
        }
    }

    /// Makes the process runnable (at once if it is waiting; after its current step if it is
    /// running). Waking a process that is not waiting does no harm.
    pub fn wake(&self) {
        if let Some(scheduler) = self.scheduler.upgrade() {
            scheduler.wake(self.pid);
        }
    }

    /// The scheduler, while it runs.
    pub(crate) fn scheduler(&self) -> Option<Arc<dyn Wakes>> {
        self.scheduler.upgrade()
    }

    pub(crate) fn pid(&self) -> Pid {
        self.pid
    }
}
