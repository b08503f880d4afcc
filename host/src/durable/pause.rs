//! Workflows paused by an operator. A paused workflow takes no step: its process says it is not
//! ready (`DurableProcess::prepare`), and the scheduler holds it, its events (messages, timers
//! that fire, answers) queued, until it is unpaused and woken. The pause is in the store
//! (`workflows.paused`), so a host that recovers or claims the workflow holds it too; on a
//! store hosts share, the owner learns of pauses written by others at each look for messages
//! and cancels (`inbox.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use wfcontract::Pid;
use wfhost_scheduler::Waker;

use super::{store, Durable};

/// The paused workflows this host runs, by number, each with the waker of its process once it
/// has been held; and how many there are, so that a turn of a process that is not paused (all
/// of them, mostly) looks at one atomic, not the lock.
#[derive(Default)]
pub(crate) struct Paused {
    held: Mutex<HashMap<u64, Option<Waker>>>,
    count: AtomicUsize,
}

impl Paused {
    fn lock(&self) -> Guard<'_> {
        Guard {
            held: self.held.lock(),
            count: &self.count,
        }
    }
}

/// The paused workflows, locked; their count follows them when the lock is let go.
struct Guard<'a> {
    held: parking_lot::MutexGuard<'a, HashMap<u64, Option<Waker>>>,
    count: &'a AtomicUsize,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.count.store(self.held.len(), Ordering::Release);
    }
}

impl Durable {
    /// Whether workflow `num` is paused; if so, `waker` wakes it when it is unpaused.
    pub(crate) fn held_paused(&self, num: u64, waker: impl FnOnce() -> Waker) -> bool {
        if self.paused.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut paused = self.paused.lock();
        match paused.held.get_mut(&num) {
            Some(held) => {
                *held = Some(waker());
                true
            }
            None => false,
        }
    }

    /// Marks workflow `num` paused here (its process is held at its next turn), or unpaused
    /// (a held process is woken to take what waited).
    pub(crate) fn mark_paused(&self, num: u64, paused: bool) {
        let mut held = self.paused.lock();
        if paused {
            held.held.entry(num).or_insert(None);
        } else if let Some(Some(waker)) = held.held.remove(&num) {
            drop(held);
            waker.wake();
        }
    }

    /// Marks workflow `num` paused here if it runs here, checked under the lock its end takes
    /// it out under (`forget_paused`): a workflow that ended meanwhile leaves nothing behind.
    /// Whether it was marked.
    fn mark_paused_if_running(&self, num: u64) -> bool {
        let mut held = self.paused.lock();
        if !self.ids.contains(Pid(num)) {
            return false;
        }
        held.held.entry(num).or_insert(None);
        true
    }

    /// Pauses (`paused`) or unpauses durable workflow `pid`, which runs here: in the store
    /// first, so that a restart finds it so.
    pub(crate) fn pause(&self, pid: Pid, paused: bool) -> crate::Result<()> {
        if paused {
            // Held from now: no step begins after the pause is on disk. (A workflow that ended
            // meanwhile needs no pause; its row no longer takes one either.)
            let marked = self.mark_paused_if_running(pid.0);
            if let Err(error) = self.write(vec![store::Op::Pause { num: pid.0, paused }]) {
                if marked {
                    self.mark_paused(pid.0, false);
                }
                return Err(error);
            }
        } else {
            self.write(vec![store::Op::Pause { num: pid.0, paused }])?;
            self.mark_paused(pid.0, false);
        }
        Ok(())
    }

    /// On a store hosts share: takes the pauses and unpauses others wrote for this host's
    /// workflows, from the paused ones the store lists for it.
    pub(crate) fn follow_pauses(&self, paused_in_store: &[u64]) {
        let in_store: std::collections::HashSet<u64> = paused_in_store.iter().copied().collect();
        let mut held = self.paused.lock();
        let unpaused: Vec<u64> = held
            .held
            .keys()
            .filter(|num| !in_store.contains(num))
            .copied()
            .collect();
        let mut wake = Vec::new();
        for num in unpaused {
            if let Some(Some(waker)) = held.held.remove(&num) {
                wake.push(waker);
            }
        }
        for &num in paused_in_store {
            if self.ids.contains(Pid(num)) {
                held.held.entry(num).or_insert(None);
            }
        }
        drop(held);
        for waker in wake {
            waker.wake();
        }
    }

    /// Forgets workflow `num` (it ended here, or this host gave it up).
    pub(crate) fn forget_paused(&self, num: u64) {
        self.paused.lock().held.remove(&num);
    }
}
