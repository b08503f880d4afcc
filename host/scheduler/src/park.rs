//! Idle workers: spinning, parking and waking. The protocol and the argument that no wake-up is
//! lost are in this folder's README; the loom model in `loom_models.rs` checks them.

use crate::sync::{fence, AtomicUsize, Condvar, Mutex, Ordering};

/// Spin rounds below this are tight loops.
pub(crate) const SPIN_TIGHT: u32 = 4;
/// Spin rounds below this (and at or above `SPIN_TIGHT`) yield the thread; then the worker parks.
/// Waking a parked thread costs tens of microseconds on virtual machines, so a short search first
/// catches the work that arrives just after a worker runs dry.
pub(crate) const SPIN_ROUNDS: u32 = 16;

/// Whether a parked worker came back to work or to exit.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unpark {
    /// Woken (or found work before sleeping): the worker is searching again.
    Search,
    /// The scheduler is shutting down.
    Shutdown,
}

#[derive(Debug, Default)]
struct Sleepers {
    /// Wake-ups granted and not yet taken. A worker sleeps only while this is zero.
    tokens: usize,
    shutdown: bool,
}

/// The idle-worker bookkeeping shared by all workers and producers.
#[derive(Debug)]
pub(crate) struct Idle {
    /// Workers looking for work (spinning, or woken and not yet busy). Producers skip waking a
    /// sleeper while this is non-zero: a searcher will find the work, or re-check before it sleeps.
    searching: AtomicUsize,
    /// Workers inside `park`, between registering and leaving. Written under `sleepers`' mutex,
    /// read without it by producers deciding whether to take that mutex at all.
    sleeping: AtomicUsize,
    sleepers: Mutex<Sleepers>,
    condvar: Condvar,
}

impl Idle {
    pub(crate) fn new() -> Idle {
        Idle {
            searching: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            sleepers: Mutex::new(Sleepers::default()),
            condvar: Condvar::new(),
        }
    }

    /// The calling worker starts searching.
    pub(crate) fn begin_search(&self) {
        // SeqCst: part of the Dekker pair with producers' reads in `notify_one` (see README).
        self.searching.fetch_add(1, Ordering::SeqCst);
    }

    /// The calling worker found work and stops searching. Returns true if it was the last
    /// searcher, in which case the caller wakes another worker: producers may have skipped
    /// waking anyone while it searched, and the work they pushed deserves a second pair of hands.
    pub(crate) fn end_search(&self) -> bool {
        // SeqCst: as in `begin_search`.
        self.searching.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// Called by a producer after it made work visible. Wakes one sleeper, unless a worker is
    /// searching or none sleeps.
    pub(crate) fn notify_one(&self) {
        // SeqCst fence: orders the producer's push before its reads of the counters, against the
        // parking worker's counter writes before its reads of the queues (see README).
        fence(Ordering::SeqCst);
        if self.searching.load(Ordering::SeqCst) != 0 || self.sleeping.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut sleepers = self.sleepers.lock();
        if self.sleeping.load(Ordering::SeqCst) > sleepers.tokens {
            sleepers.tokens += 1;
            // The woken worker counts as searching from now on, so further producers do not wake
            // more workers for work it is about to find.
            self.searching.fetch_add(1, Ordering::SeqCst);
            self.condvar.notify_one();
        }
    }

    /// Parks the calling worker, which is searching and found nothing, until a producer wakes it
    /// or shutdown. `has_work` re-checks every queue after the worker registered as sleeping.
    pub(crate) fn park(&self, has_work: impl Fn() -> bool) -> Unpark {
        let mut sleepers = self.sleepers.lock();
        // SeqCst: see `notify_one`; the fence makes the registration visible before the re-check.
        self.sleeping.fetch_add(1, Ordering::SeqCst);
        self.searching.fetch_sub(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !sleepers.shutdown && has_work() {
            self.sleeping.fetch_sub(1, Ordering::SeqCst);
            self.searching.fetch_add(1, Ordering::SeqCst);
            return Unpark::Search;
        }
        while sleepers.tokens == 0 && !sleepers.shutdown {
            sleepers = self.condvar.wait(sleepers);
        }
        self.sleeping.fetch_sub(1, Ordering::SeqCst);
        if sleepers.shutdown {
            return Unpark::Shutdown;
        }
        // The producer that granted the token already counted this worker as searching.
        sleepers.tokens -= 1;
        Unpark::Search
    }

    /// Wakes every worker for good.
    pub(crate) fn shutdown(&self) {
        self.sleepers.lock().shutdown = true;
        self.condvar.notify_all();
    }

    /// How many workers are parked now.
    pub(crate) fn sleeping(&self) -> usize {
        self.sleeping.load(Ordering::Relaxed)
    }
}
