//! Activity counters: written on the hot path without contention, summed when read.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// What the scheduler has done since it started. Each figure is a sum over workers, read without
/// stopping them, so figures read together may be a few events apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Calls to `Process::step`.
    pub steps: u64,
    /// Successful steals from another worker's queue.
    pub steals: u64,
    /// Successful takes from the global queue.
    pub global_pops: u64,
    /// Times a worker parked.
    pub parks: u64,
    /// Processes spawned.
    pub spawns: u64,
    /// Processes that finished (done, failed, terminated or closed at shutdown).
    pub completions: u64,
}

/// One writer's counters, on their own cache line.
#[derive(Debug, Default)]
pub(crate) struct Cell {
    steps: AtomicU64,
    steals: AtomicU64,
    global_pops: AtomicU64,
    parks: AtomicU64,
    spawns: AtomicU64,
    completions: AtomicU64,
}

/// Which counter to bump.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    Step,
    Steal,
    GlobalPop,
    Park,
    Spawn,
    Completion,
}

impl Cell {
    fn get(&self, counter: Counter) -> &AtomicU64 {
        match counter {
            Counter::Step => &self.steps,
            Counter::Steal => &self.steals,
            Counter::GlobalPop => &self.global_pops,
            Counter::Park => &self.parks,
            Counter::Spawn => &self.spawns,
            Counter::Completion => &self.completions,
        }
    }
}

/// Per-worker cells plus one shared cell for threads that are not workers.
#[derive(Debug)]
pub(crate) struct CounterSet {
    workers: Box<[CachePadded<Cell>]>,
    others: CachePadded<Cell>,
}

impl CounterSet {
    pub(crate) fn new(workers: usize) -> CounterSet {
        CounterSet {
            workers: (0..workers).map(|_| CachePadded::default()).collect(),
            others: CachePadded::default(),
        }
    }

    /// Bumps `counter` for worker `index`, or for the shared cell when `None`. A worker's cell has
    /// a single writer (its thread), so a plain load and store suffices there: no locked
    /// instruction on the hot path.
    pub(crate) fn bump(&self, worker: Option<usize>, counter: Counter) {
        match worker {
            Some(index) => {
                let cell = self.workers[index].get(counter);
                cell.store(cell.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
            None => {
                self.others.get(counter).fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn sum(&self) -> Counters {
        let mut total = Counters::default();
        for cell in self.workers.iter().map(|c| &**c).chain([&*self.others]) {
            let read = |c: Counter| cell.get(c).load(Ordering::Relaxed);
            total.steps += read(Counter::Step);
            total.steals += read(Counter::Steal);
            total.global_pops += read(Counter::GlobalPop);
            total.parks += read(Counter::Park);
            total.spawns += read(Counter::Spawn);
            total.completions += read(Counter::Completion);
        }
        total
    }
}
