//! The lifecycle of one process, in one atomic byte.
//!
//! ```text
//!            start_running            park(Blocked|Idle|Waiting)
//!   Ready ─────────────────▶ Running ───────────────────▶ Blocked / Idle / Waiting
//!     ▲                        │  │                              │
//!     │        requeue         │  │ complete                     │ notify (an event, or the
//!     └────────────────────────┘  ▼                              │ resource it waits for)
//!     ▲                        Complete                          │
//!     └──────────────────────────────────────────────────────────┘
//! ```
//!
//! Invariants:
//! - A process is in a run queue exactly when it is `Ready`, and only the thread that moved it to
//!   `Ready` pushes it; so it is queued at most once, and [`State::start_running`] succeeds for the
//!   one worker that pops it. At most one worker steps a process at a time.
//! - An event pushed while the process is `Running` sets `NOTIFIED`; the worker cannot then park the
//!   process (the compare-exchange from plain `Running` fails), so it re-checks the inbox. This is
//!   the wakeup flag that keeps a completion racing a step from being lost.
//! - `Blocked` (status `Wait`) wakes for any event. `Idle` (status `Idle`: waiting for messages)
//!   wakes for messages and cancels only; a completion arriving then waits in the inbox for the next
//!   step. So a process that sent a message and waits for the reply is not stepped once more just
//!   to hear that the send went through. (A message wakes either only if the process asked for
//!   messages; the inbox decides that, see `inbox.rs`.)
//! - `Waiting` is a process that could not step because something it needs to run is taken (a
//!   wasm process waiting for an instance, see `Process::prepare`). Events leave it asleep (they
//!   wait in the inbox, inside its limits); only its resource's wake-up, or a termination, makes
//!   it `Ready`. So it waits without being stepped in vain.
//!
//! Producers always push the event into the inbox (under its mutex) before calling
//! [`State::notify`]; the worker always checks the inbox (under the same mutex) after its last step
//! and before [`State::park`]. The mutex orders those two, and the atomic orders the rest.

use crate::sync::{AtomicU8, Ordering};

const MASK: u8 = 0b0111;
pub(crate) const READY: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const BLOCKED: u8 = 2;
pub(crate) const IDLE: u8 = 3;
pub(crate) const COMPLETE: u8 = 4;
pub(crate) const WAITING: u8 = 5;
/// Set on `RUNNING` when an event arrives during the step.
const NOTIFIED: u8 = 0b1000;

/// What woke a process: which parked states it makes `Ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A completion: wakes `Blocked` only.
    Completion,
    /// A message the process asked for, or a cancel: wakes `Blocked` and `Idle`.
    Message,
    /// The resource a `Waiting` process needs, or a termination: wakes every parked state.
    All,
}

/// What a producer must do after [`State::notify`].
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Notify {
    /// The process went from `Blocked`/`Idle` to `Ready`: the caller must queue it.
    Schedule,
    /// Nothing: it is queued, running (and now flagged) or complete.
    Nothing,
}

/// The outcome of [`State::park`].
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Park {
    /// The process is now `Blocked` or `Idle`; the worker must drop it.
    Parked,
    /// An event arrived during the step: the flag is cleared, the process is still `Running`.
    Notified,
}

#[derive(Debug)]
pub(crate) struct State(AtomicU8);

impl State {
    pub(crate) fn new() -> State {
        State(AtomicU8::new(READY))
    }

    /// A process spawned held (`Spawn::held`): `Waiting` from the start, before anyone can
    /// see it, so that only a wake-up (or a termination) makes it `Ready` and queues it.
    pub(crate) fn hold(&self) {
        self.0.store(WAITING, Ordering::Relaxed);
    }

    pub(crate) fn load(&self) -> u8 {
        self.0.load(Ordering::Acquire) & MASK
    }

    /// `Ready → Running`, by the worker that popped the process. False if it was not `Ready`
    /// (which the queue invariant rules out; the caller then leaves it alone).
    pub(crate) fn start_running(&self) -> bool {
        // A plain store, not a compare-exchange: only the worker that took the process from a
        // queue gets here, and a queued process is `Ready`, a state no producer writes (`notify`
        // leaves it as it is). The store is ordered before any producer's look at the state by
        // the inbox mutex: the worker locks the inbox after this store (to drain it, or to look
        // for a termination) and unlocks it (a release), so a producer that pushes after that
        // finds `Running` at its `notify`, and one that pushed before has its event drained.
        // The previous runner's writes to the process body reach this one through the queue
        // the process was taken from (its push releases, its pop acquires), after the park or
        // requeue that released them.
        if self.0.load(Ordering::Relaxed) != READY {
            return false;
        }
        self.0.store(RUNNING, Ordering::Relaxed);
        true
    }

    /// Called by a producer after pushing an event into the inbox (or after freeing the resource
    /// a `Waiting` process needs); `wake` says which parked states it ends.
    pub(crate) fn notify(&self, wake: Wake) -> Notify {
        // A plain read first: under many producers the line stays shared while the process is
        // already queued or flagged, instead of bouncing for a compare-exchange that changes nothing.
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let next = match current & MASK {
                BLOCKED => READY,
                IDLE if wake != Wake::Completion => READY,
                WAITING if wake == Wake::All => READY,
                RUNNING if current & NOTIFIED == 0 => RUNNING | NOTIFIED,
                _ => return Notify::Nothing,
            };
            // AcqRel: pairs with the worker's `park`, so whichever of the two comes second in the
            // atomic's order sees the other's transition.
            match self
                .0
                .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if next == READY => return Notify::Schedule,
                Ok(_) => return Notify::Nothing,
                Err(actual) => current = actual,
            }
        }
    }

    /// `Running → target` (`BLOCKED`, `IDLE` or `WAITING`) unless an event arrived during the
    /// step.
    pub(crate) fn park(&self, target: u8) -> Park {
        debug_assert!(target == BLOCKED || target == IDLE || target == WAITING);
        // Release: publishes the step's writes to the next worker that runs the process.
        match self
            .0
            .compare_exchange(RUNNING, target, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Park::Parked,
            Err(actual) => {
                debug_assert_eq!(actual, RUNNING | NOTIFIED);
                // Only this worker moves the process out of RUNNING|NOTIFIED, and producers never
                // touch it in that state, so a plain store is enough to clear the flag.
                self.0.store(RUNNING, Ordering::Release);
                Park::Notified
            }
        }
    }

    /// `Running → Ready`, before the worker pushes the process back onto a run queue.
    pub(crate) fn requeue(&self) {
        // Release: publishes the step's writes to whichever worker pops it next.
        self.0.store(READY, Ordering::Release);
    }

    /// `Running → Complete`. Final: producers find nothing to do from here on.
    pub(crate) fn complete(&self) {
        self.0.store(COMPLETE, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_completion_wakes_blocked_but_not_idle() {
        let s = State::new();
        assert!(s.start_running());
        assert_eq!(s.park(BLOCKED), Park::Parked);
        assert_eq!(s.notify(Wake::Completion), Notify::Schedule);
    }

    #[test]
    fn a_waiting_process_wakes_only_for_its_resource() {
        let s = State::new();
        assert!(s.start_running());
        assert_eq!(s.park(WAITING), Park::Parked);
        assert_eq!(s.notify(Wake::Completion), Notify::Nothing);
        assert_eq!(s.notify(Wake::Message), Notify::Nothing);
        assert_eq!(s.load(), WAITING);
        assert_eq!(s.notify(Wake::All), Notify::Schedule);
        assert_eq!(s.load(), READY);
    }

    #[test]
    fn an_event_during_a_step_prevents_parking_once() {
        let s = State::new();
        assert!(s.start_running());
        assert_eq!(s.notify(Wake::Completion), Notify::Nothing);
        assert_eq!(s.notify(Wake::Message), Notify::Nothing);
        assert_eq!(s.park(BLOCKED), Park::Notified);
        assert_eq!(s.park(IDLE), Park::Parked);
        assert_eq!(s.load(), IDLE);
        assert_eq!(s.notify(Wake::Completion), Notify::Nothing);
        assert_eq!(s.notify(Wake::Message), Notify::Schedule);
        assert_eq!(s.notify(Wake::Message), Notify::Nothing);
        assert_eq!(s.load(), READY);
        assert!(s.start_running());
        assert!(!s.start_running());
        s.complete();
        assert_eq!(s.notify(Wake::All), Notify::Nothing);
        assert_eq!(s.load(), COMPLETE);
    }
}
