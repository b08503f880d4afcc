//! Run queues: one local queue per worker, one global injector, and stealing between them.
//!
//! Each worker owns two crossbeam-deque [`Worker`]s that it pushes to and pops from, plus a
//! one-entry `next` slot holding the process it woke most recently. The slot is the LIFO end: a
//! process woken by the one that just ran (the receiver of a message, say) runs next, while its
//! data is still in cache. The `deque` is FIFO for the owner, so a process that used up its budget
//! goes to the tail and its peers get their turn; a LIFO deque would hand the same process straight
//! back. The `spawned` deque, LIFO for the owner, holds the processes that this worker's processes
//! spawned and that have not run yet: the newest first, depth first, as work-stealing schedulers
//! run a tree of tasks. A tree of a million processes then has a few dozen alive at once on each
//! worker instead of all of them (the native skynet bench peaked at 830 MB breadth first, and at
//! 4 MB this way), its processes run while the spawn that made them is still in cache, and thieves
//! take the oldest, the largest subtrees. The worker prefers its spawns, up to as many in a row as
//! a turn's budget of events, then takes one process from the other deque: a process that spawns
//! a child at every step runs again only after the children of its last turn (at most a budget's
//! worth), so its spawns cannot pile up unstarted, and a wake waits behind at most that many.
//!
//! The global [`Injector`] takes wakes from outside the workers (by the timer or other threads); a
//! second one, `fresh`, takes new processes spawned from outside. Workers serve wakes first: a
//! process whose timer fired or whose message arrived runs before processes not yet started, so a
//! burst of spawns (a hundred thousand from an embedding app, each instantiated on its first turn)
//! does not make every waiting process late. Fresh processes are taken one at a time, after each
//! of which the wakes are looked at again, and first on a worker's every 61st turn, so wakes cannot
//! starve them either. Thieves take from the head of other workers' deques.

use std::sync::Arc;

use crossbeam_deque::{Injector, Steal, Stealer, Worker};

use crate::slot::Slot;

/// A process ready to run.
pub(crate) type Task = Arc<Slot>;

/// A worker runs its `next` slot at most this many times in a row before taking from its deque, so
/// two processes that keep waking each other cannot starve the rest of the queue.
const MAX_NEXT_STREAK: u32 = 3;

/// Taking from the global queue moves one process plus up to this many more into the local deque,
/// so a worker that found the global queue non-empty does not come back for each item.
pub(crate) const GLOBAL_BATCH: usize = 16;

/// A worker's own queue. Lives on the worker thread (see `worker.rs`).
pub(crate) struct Local {
    pub(crate) deque: Worker<Task>,
    /// Processes spawned from this worker and not yet run: LIFO (see the module's notes).
    pub(crate) spawned: Worker<Task>,
    next: Option<Task>,
    next_streak: u32,
    /// Spawns taken in a row since the last look at `deque`.
    spawned_streak: usize,
    /// At most this many in a row (the scheduler's budget).
    spawned_limit: usize,
}

impl Local {
    /// A worker's queues; it takes up to `spawned_limit` spawns in a row (see the module's notes).
    pub(crate) fn new(spawned_limit: usize) -> Local {
        Local {
            deque: Worker::new_fifo(),
            spawned: Worker::new_lifo(),
            next: None,
            next_streak: 0,
            spawned_streak: 0,
            spawned_limit: spawned_limit.max(1),
        }
    }

    /// What other workers steal through: from `deque`, and from `spawned`.
    pub(crate) fn stealers(&self) -> (Stealer<Task>, Stealer<Task>) {
        (self.deque.stealer(), self.spawned.stealer())
    }

    /// Queues a process spawned from this worker, to run before those spawned earlier.
    pub(crate) fn push_spawned(&mut self, task: Task) {
        self.spawned.push(task);
    }

    /// Makes `task` the next to run. Returns true if another task was displaced into the deque,
    /// where idle workers could steal it (so the caller should wake one).
    pub(crate) fn push_next(&mut self, task: Task) -> bool {
        match self.next.replace(task) {
            Some(displaced) => {
                self.deque.push(displaced);
                true
            }
            None => false,
        }
    }

    /// Queues `task` behind everything already queued here.
    pub(crate) fn push_back(&mut self, task: Task) {
        self.deque.push(task);
    }

    /// The next task: the `next` slot (within its streak limit), else the newest spawn (within
    /// its streak limit), else the head of the deque, else a spawn.
    pub(crate) fn pop(&mut self) -> Option<Task> {
        if let Some(task) = self.next.take() {
            if self.next_streak < MAX_NEXT_STREAK {
                self.next_streak += 1;
                return Some(task);
            }
            self.deque.push(task);
        }
        self.next_streak = 0;
        if self.spawned_streak < self.spawned_limit {
            if let Some(task) = self.spawned.pop() {
                self.spawned_streak += 1;
                return Some(task);
            }
        }
        self.spawned_streak = 0;
        if let Some(task) = self.deque.pop() {
            return Some(task);
        }
        let task = self.spawned.pop()?;
        self.spawned_streak = 1;
        Some(task)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.next.is_none() && self.deque.is_empty() && self.spawned.is_empty()
    }

    /// Empties the queue (at shutdown), so the tasks' references are released.
    pub(crate) fn clear(&mut self) {
        self.next = None;
        while self.deque.pop().is_some() {}
        while self.spawned.pop().is_some() {}
    }
}

/// The queues every thread can reach.
pub(crate) struct Queues {
    global: Injector<Task>,
    /// New processes spawned from outside the workers, served after `global`.
    fresh: Injector<Task>,
    /// Processes whose last turn used up its time slice: served after everything else, unless the
    /// worker has since given the others as much time as that turn took (see `worker.rs`).
    overrun: Injector<Task>,
    /// Each worker's `deque` and `spawned`, in worker order.
    stealers: Box<[(Stealer<Task>, Stealer<Task>)]>,
}

/// Outcome of a search of the shared queues.
#[must_use]
pub(crate) enum Found {
    Global(Task),
    Stolen(Task),
    Nothing,
}

impl Queues {
    pub(crate) fn new(stealers: Vec<(Stealer<Task>, Stealer<Task>)>) -> Queues {
        Queues {
            global: Injector::new(),
            fresh: Injector::new(),
            overrun: Injector::new(),
            stealers: stealers.into_boxed_slice(),
        }
    }

    pub(crate) fn push_global(&self, task: Task) {
        self.global.push(task);
    }

    /// Queues a new process spawned from outside the workers.
    pub(crate) fn push_fresh(&self, task: Task) {
        self.fresh.push(task);
    }

    /// Queues a process whose turn used up its time slice.
    pub(crate) fn push_overrun(&self, task: Task) {
        self.overrun.push(task);
    }

    /// A process whose last turn used up its time slice, if any.
    pub(crate) fn pop_overrun(&self) -> Option<Task> {
        // Looked at first: a steal from an empty injector costs a full fence, and this queue is
        // looked at every turn and nearly always empty. Missing a task pushed just now is fine:
        // its pusher woke a worker, and the next look finds it.
        if self.overrun.is_empty() {
            return None;
        }
        loop {
            match self.overrun.steal() {
                Steal::Success(task) => return Some(task),
                Steal::Empty => return None,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
    }

    /// Wakes first, then one new process; with `fresh_first`, the other way round.
    pub(crate) fn pop_shared(&self, local: &Worker<Task>, fresh_first: bool) -> Option<Task> {
        if fresh_first {
            if let Some(task) = self.pop_fresh() {
                return Some(task);
            }
        }
        self.pop_global(local).or_else(|| self.pop_fresh())
    }

    /// One new process, if any.
    fn pop_fresh(&self) -> Option<Task> {
        // As in `pop_overrun`.
        if self.fresh.is_empty() {
            return None;
        }
        loop {
            match self.fresh.steal() {
                Steal::Success(task) => return Some(task),
                Steal::Empty => return None,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
    }

    /// Takes one task from the global queue and moves a fair share of the rest into `local`: the
    /// queue's length divided among the workers, at most [`GLOBAL_BATCH`] (Go's `globrunqget`).
    fn pop_global(&self, local: &Worker<Task>) -> Option<Task> {
        // As in `pop_overrun`.
        if self.global.is_empty() {
            return None;
        }
        let share = (self.global.len() / self.stealers.len()).min(GLOBAL_BATCH);
        let wanted = local.len() + share;
        let task = loop {
            match self.global.steal_batch_with_limit_and_pop(local, share + 1) {
                Steal::Success(task) => break task,
                Steal::Empty => return None,
                Steal::Retry => std::hint::spin_loop(),
            }
        };
        // crossbeam moves about half of what is there per call; top up to the share.
        while local.len() < wanted {
            match self
                .global
                .steal_batch_with_limit(local, wanted - local.len())
            {
                Steal::Success(()) => {}
                Steal::Empty => break,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
        Some(task)
    }

    /// Steals half of the first non-empty victim's deque (from a random start; its woken
    /// processes first, then those it spawned), keeping one task to run and moving the rest into
    /// the same kind of deque of `local`. Spawned processes are taken oldest first: the largest
    /// subtrees, which the thief then runs depth first too.
    pub(crate) fn steal(&self, me: usize, local: &Local) -> Option<Task> {
        let n = self.stealers.len();
        let start = fastrand::usize(..n);
        for i in 0..n {
            let victim = (start + i) % n;
            if victim == me {
                continue;
            }
            let (woken, spawned) = &self.stealers[victim];
            for (stealer, into) in [(woken, &local.deque), (spawned, &local.spawned)] {
                loop {
                    let half = stealer.len().div_ceil(2).max(1);
                    match stealer.steal_batch_with_limit_and_pop(into, half) {
                        Steal::Success(task) => return Some(task),
                        Steal::Empty => break,
                        Steal::Retry => std::hint::spin_loop(),
                    }
                }
            }
        }
        None
    }

    /// The shared queues first (wakes, then new processes), then the other workers, then the
    /// processes that overran their time slice.
    pub(crate) fn search(&self, me: usize, local: &Local) -> Found {
        if let Some(task) = self.pop_shared(&local.deque, false) {
            return Found::Global(task);
        }
        if let Some(task) = self.steal(me, local) {
            return Found::Stolen(task);
        }
        match self.pop_overrun() {
            Some(task) => Found::Global(task),
            None => Found::Nothing,
        }
    }

    /// True when some queue that an idle worker could take from is non-empty.
    pub(crate) fn has_work(&self) -> bool {
        !self.global.is_empty()
            || !self.fresh.is_empty()
            || !self.overrun.is_empty()
            || self
                .stealers
                .iter()
                .any(|(woken, spawned)| !woken.is_empty() || !spawned.is_empty())
    }

    /// Drops every queued task (at shutdown).
    pub(crate) fn clear_global(&self) {
        while !matches!(self.global.steal(), Steal::Empty) {}
        while !matches!(self.fresh.steal(), Steal::Empty) {}
        while !matches!(self.overrun.steal(), Steal::Empty) {}
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::slot::{Never, SlotOf};
    use wfcontract::Pid;

    fn task(pid: u64) -> Task {
        let mut slot = SlotOf::unspawned(Never);
        Arc::get_mut(&mut slot).expect("not shared").pid = Pid(pid);
        slot
    }

    /// Spawns come newest first, up to the limit in a row, then one wake (oldest first), so that
    /// neither a tree of spawns nor a queue of wakes waits for the other to empty.
    #[test]
    fn spawns_go_first_newest_first_and_wakes_get_every_limit_plus_first_turn() {
        let mut local = Local::new(2);
        for pid in 1..=3 {
            local.push_back(task(pid));
        }
        for pid in 11..=15 {
            local.push_spawned(task(pid));
        }
        let order: Vec<u64> = std::iter::from_fn(|| local.pop())
            .map(|t| t.pid.0)
            .collect();
        assert_eq!(order, [15, 14, 1, 13, 12, 2, 11, 3]);
        assert!(local.is_empty());
        // With the deque empty, spawns go on; the streak starts again after the look at it.
        for pid in 21..=24 {
            local.push_spawned(task(pid));
        }
        local.push_back(task(4));
        let order: Vec<u64> = std::iter::from_fn(|| local.pop())
            .map(|t| t.pid.0)
            .collect();
        assert_eq!(order, [24, 23, 4, 22, 21]);
    }

    /// A thief takes the victim's wakes first, then its oldest spawns, into the same kind of
    /// deque of its own.
    #[test]
    fn a_thief_takes_wakes_first_then_the_oldest_spawns() {
        let mut victim = Local::new(32);
        let thief = Local::new(32);
        let queues = Queues::new(vec![victim.stealers(), thief.stealers()]);
        victim.push_spawned(task(11));
        victim.push_spawned(task(12));
        victim.push_back(task(1));
        assert_eq!(queues.steal(1, &thief).map(|t| t.pid.0), Some(1));
        assert_eq!(queues.steal(1, &thief).map(|t| t.pid.0), Some(11));
        assert_eq!(victim.pop().map(|t| t.pid.0), Some(12));
        assert!(victim.is_empty() && thief.is_empty());
    }
}
