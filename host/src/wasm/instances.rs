//! The host's wasm instances: how many may be live, who waits for one, and what the host holds
//! (the figures behind [`Residency`]).
//!
//! Every live instance (a running process's, or a warm one kept for reuse) is counted against the
//! capacity. A new process that finds none free fails at once with `Limit`: the host is full. A
//! hibernated process woken by an event when none is free waits for one in a queue instead,
//! without being stepped: the scheduler parks it (`Readiness::NotReady`) with its events queued,
//! and the instance given back next is handed straight to the longest waiter, which the scheduler
//! then runs. While anyone waits, a new process finds no instance free: it never overtakes them. If no instance at all is given back for a while (twice the step time limit: a
//! running process gives its instance back within a step time limit when it hibernates), the
//! instances are all held by processes that do not hibernate, and the waiters fail with `Limit`
//! rather than wait for ever.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wfhost_scheduler::Waker;

use crate::wasm::hibernate::Hibernation;

/// What the host holds for its wasm processes and modules: [`Host::residency`].
///
/// [`Host::residency`]: crate::Host::residency
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Residency {
    /// Processes holding a live wasm instance.
    pub live_instances: usize,
    /// Instances kept for reuse: given up by hibernating or finished processes, taken by the next
    /// restore or start of a process of the same module instead of a new instantiation. At most 16 per module, only
    /// while the instance capacity has room for them, and given up first when a process needs an
    /// instance and none is free. They count against the capacity.
    pub warm_instances: usize,
    /// Processes hibernated: waiting, with no instance.
    pub hibernated: usize,
    /// Bytes the hibernated processes' saved state takes on the host's heap.
    pub hibernated_bytes: usize,
    /// Hibernated processes woken by an event that wait for a free instance.
    pub waiting_for_instance: usize,
    /// Compiled modules in memory: loaded under a name, or still run by some process after being
    /// replaced or unloaded.
    pub modules: usize,
    /// Bytes the compiled modules' initial memory images take on the host's heap (kept to
    /// hibernate their processes).
    pub module_image_bytes: usize,
    /// Bytes of the buffers processes keep for their next call's input (a hibernated process
    /// keeps none).
    pub buffer_bytes: usize,
    /// Hibernations since the host started.
    pub hibernations: u64,
    /// Restores from hibernation since the host started.
    pub restores: u64,
    /// Processes started in a warm instance since the host started.
    pub warm_starts: u64,
    /// Pooled memory slots (one per instance with one memory) that held an instance and hold
    /// none now, kept for the next instance (see
    /// [`HostBuilder::page_scan_reset`](crate::HostBuilder::page_scan_reset)). 0 when memory is
    /// allocated on demand.
    pub pooled_idle_slots: u32,
    /// Bytes of memory and tables those idle slots keep resident.
    pub pooled_resident_bytes: usize,
    /// Modules compiled since the host started (loads of bytes compiled already, in memory or
    /// in the module cache, compile nothing).
    pub compiles: u64,
}

/// A ticket's states.
const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const EXPIRED: u8 = 2;
const WITHDRAWN: u8 = 3;

/// A hibernated process's place in the queue for an instance.
#[derive(Debug)]
pub(crate) struct Ticket {
    state: AtomicU8,
    waker: Waker,
    since: Instant,
}

/// Where a ticket stands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TicketState {
    /// Still in the queue (or withdrawn, which only its withdrawer sees, and it looks no more).
    Waiting,
    /// An instance was counted for it: take it with [`Instances::redeem`].
    Granted,
    /// No instance was given back for too long.
    Expired,
}

impl Ticket {
    pub(crate) fn state(&self) -> TicketState {
        // Acquire: pairs with the release in `grant`, after which the count is the ticket's.
        match self.state.load(Ordering::Acquire) {
            GRANTED => TicketState::Granted,
            EXPIRED => TicketState::Expired,
            _ => TicketState::Waiting,
        }
    }
}

/// The host's instances: how many may be live, when a waiting process hibernates, the queue of
/// processes waiting for one, and the counts behind [`Residency`].
#[derive(Debug)]
pub(crate) struct Instances {
    /// The most live instances (the capacity); one more is refused.
    max: usize,
    /// The policy.
    policy: Hibernation,
    /// Under [`Hibernation::WhenFull`], hibernate when more than this many are live: the capacity
    /// less an eighth of it, and less at least one per worker, so that the processes running at
    /// once always find an instance.
    above: usize,
    /// Why an instance past `max` is refused.
    refusal: String,
    /// Worker threads: processes that may be running, each with an instance, at once.
    workers: usize,
    /// How long the queue may go without an instance given back before its waiters fail.
    stall: Duration,
    /// Live instances, including warm ones and those granted to waiters not yet woken.
    live: AtomicUsize,
    /// Of `live`, the instances kept warm for reuse.
    warm: AtomicUsize,
    /// Processes waiting for an instance, oldest first. Tickets no longer waiting (withdrawn)
    /// are skipped when reached, and swept out when they outnumber the waiting ones.
    queue: Mutex<VecDeque<Arc<Ticket>>>,
    /// The tickets in the queue still waiting, read without the lock by whoever gives an
    /// instance back. Whoever moves a ticket out of `WAITING` (a grant, a withdrawal, an expiry)
    /// counts it out.
    queued: AtomicUsize,
    /// When an instance was last given back, in nanoseconds after `base`.
    last_release: AtomicU64,
    base: Instant,
    hibernated: AtomicUsize,
    hibernated_bytes: AtomicUsize,
    modules: AtomicUsize,
    image_bytes: AtomicUsize,
    buffer_bytes: AtomicUsize,
    hibernations: AtomicU64,
    restores: AtomicU64,
    warm_starts: AtomicU64,
}

/// A live instance, counted until dropped; dropping it hands the count to the longest waiter.
#[derive(Debug)]
pub(crate) struct InstanceSlot(Arc<Instances>);

impl Drop for InstanceSlot {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Instances {
    /// At most `max` live instances, used by `workers` worker threads; `refusal` says why one
    /// more is refused; waiters fail after `stall` without an instance given back.
    pub(crate) fn new(
        max: usize,
        workers: usize,
        policy: Hibernation,
        refusal: String,
        stall: Duration,
    ) -> Instances {
        Instances {
            max,
            policy,
            above: max.saturating_sub((max / 8).max(workers)),
            refusal,
            workers,
            stall,
            live: AtomicUsize::new(0),
            warm: AtomicUsize::new(0),
            queue: Mutex::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
            last_release: AtomicU64::new(0),
            base: Instant::now(),
            hibernated: AtomicUsize::new(0),
            hibernated_bytes: AtomicUsize::new(0),
            modules: AtomicUsize::new(0),
            image_bytes: AtomicUsize::new(0),
            buffer_bytes: AtomicUsize::new(0),
            hibernations: AtomicU64::new(0),
            restores: AtomicU64::new(0),
            warm_starts: AtomicU64::new(0),
        }
    }

    /// Why a new instance is refused when none is free.
    pub(crate) fn refusal(&self) -> &str {
        &self.refusal
    }

    /// Counts one more live instance if the capacity allows.
    fn count_one(&self) -> bool {
        // SeqCst: with `release`, a store-buffering pair over `live` and `queued` (see there).
        self.live
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |live| {
                (live < self.max).then_some(live + 1)
            })
            .is_ok()
    }

    /// One more live instance, for a new process; `None` when every one is taken, or when a
    /// woken process waits for one: a new process never overtakes it (between an instance's
    /// release and its grant to the waiter, a spawn could otherwise take it, and a neighbour
    /// spawning without pause could keep a waiter waiting for ever).
    pub(crate) fn take(self: &Arc<Self>) -> Option<InstanceSlot> {
        // SeqCst: as in `take_or_queue`, against `release`.
        if self.queued.load(Ordering::SeqCst) > 0 {
            return None;
        }
        self.count_one().then(|| InstanceSlot(Arc::clone(self)))
    }

    /// One more live instance for a hibernated process, or its place in the queue (behind those
    /// already waiting), from which `waker` runs it once an instance is counted for it.
    pub(crate) fn take_or_queue(
        self: &Arc<Self>,
        waker: impl FnOnce() -> Waker,
    ) -> Result<InstanceSlot, Arc<Ticket>> {
        let mut queue = self.queue.lock();
        if self.queued.load(Ordering::SeqCst) == 0 && self.count_one() {
            return Ok(InstanceSlot(Arc::clone(self)));
        }
        let ticket = Arc::new(Ticket {
            state: AtomicU8::new(WAITING),
            waker: waker(),
            since: Instant::now(),
        });
        queue.push_back(Arc::clone(&ticket));
        // SeqCst: see `release`.
        self.queued.fetch_add(1, Ordering::SeqCst);
        self.serve(&mut queue);
        drop(queue);
        match ticket.state() {
            TicketState::Granted => Ok(self.redeem(&ticket)),
            _ => Err(ticket),
        }
    }

    /// The instance a granted ticket stands for.
    pub(crate) fn redeem(self: &Arc<Self>, ticket: &Ticket) -> InstanceSlot {
        debug_assert_eq!(ticket.state(), TicketState::Granted);
        InstanceSlot(Arc::clone(self))
    }

    /// Leaves the queue (the process ended, or found an instance another way). A ticket granted
    /// meanwhile gives its instance back, to the next waiter.
    pub(crate) fn withdraw(self: &Arc<Self>, ticket: &Ticket) {
        // Under the lock, so that the sweep below and `serve` agree on what waits.
        let mut queue = self.queue.lock();
        let withdrawn =
            ticket
                .state
                .compare_exchange(WAITING, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire);
        match withdrawn {
            Ok(_) => {
                let waiting = self.queued.fetch_sub(1, Ordering::SeqCst) - 1;
                // Swept when stale tickets are the larger part: each costs a withdrawal, so the
                // sweeps cost O(1) per withdrawal, and the queue stays within twice its waiters.
                if queue.len() > 2 * waiting + 16 {
                    queue.retain(|t| t.state.load(Ordering::Acquire) == WAITING);
                }
            }
            Err(GRANTED) => {
                drop(queue);
                drop(InstanceSlot(Arc::clone(self)));
            }
            Err(_) => {}
        }
    }

    /// Grants instances to the oldest waiters while the capacity allows. Under the queue lock.
    fn serve(&self, queue: &mut VecDeque<Arc<Ticket>>) {
        while let Some(ticket) = queue.front() {
            // Withdrawn: counted out already. (Only `serve`, `withdraw` and `expire_stalled`
            // move a ticket out of `WAITING`, all under the queue lock.)
            if ticket.state.load(Ordering::Acquire) != WAITING {
                queue.pop_front();
                continue;
            }
            if !self.count_one() {
                return;
            }
            let ticket = queue.pop_front().expect("looked at above");
            // Release: the count is the ticket's from here on.
            ticket.state.store(GRANTED, Ordering::Release);
            self.queued.fetch_sub(1, Ordering::SeqCst);
            ticket.waker.wake();
        }
    }

    /// An instance was given back: counted out, then handed to the longest waiter, if any.
    fn release(&self) {
        // A store-buffering pair with `take_or_queue`: this decrements `live` then reads
        // `queued`; a waiter increments `queued` then tries `live`. With all four SeqCst, at
        // least one sees the other: the waiter finds the instance free, or this finds the waiter
        // queued and serves it. So no waiter is left queued beside a free instance.
        self.live.fetch_sub(1, Ordering::SeqCst);
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_release.store(now, Ordering::Relaxed);
        if self.queued.load(Ordering::SeqCst) > 0 {
            self.serve(&mut self.queue.lock());
        }
    }

    /// Fails the waiters if no instance was given back for the stall period (counted from when
    /// the oldest began to wait, if later): every instance is then held by processes that do not
    /// hibernate. Called by the epoch ticker, so that a stall ends without anybody stepping.
    pub(crate) fn expire_stalled(&self) {
        if self.queued.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut queue = self.queue.lock();
        let Some(oldest) = queue
            .iter()
            .find(|t| t.state.load(Ordering::Acquire) == WAITING)
        else {
            return;
        };
        let released = self.base + Duration::from_nanos(self.last_release.load(Ordering::Relaxed));
        if released.max(oldest.since).elapsed() < self.stall {
            return;
        }
        for ticket in queue.drain(..) {
            if ticket.state.load(Ordering::Acquire) == WAITING {
                ticket.state.store(EXPIRED, Ordering::Release);
                self.queued.fetch_sub(1, Ordering::SeqCst);
                ticket.waker.wake();
            }
        }
    }

    /// How long waiters may go without an instance given back.
    pub(crate) fn stall(&self) -> Duration {
        self.stall
    }

    /// Whether an instance given up by a process may be kept for reuse: only while nobody waits
    /// for one and the processes that can run at once (one per worker) still find instances.
    pub(crate) fn may_keep_warm(&self) -> bool {
        self.queued.load(Ordering::Relaxed) == 0
            && self.live.load(Ordering::Relaxed) + self.workers <= self.max
    }

    /// Whether a process that has just stepped and waits should hibernate now.
    pub(crate) fn should_hibernate(&self) -> bool {
        match self.policy {
            Hibernation::Off => false,
            Hibernation::Always => true,
            Hibernation::WhenFull => {
                self.live.load(Ordering::Relaxed) > self.above
                    || self.queued.load(Ordering::Relaxed) > 0
            }
        }
    }

    pub(crate) fn hibernated(&self, bytes: usize) {
        self.hibernated.fetch_add(1, Ordering::Relaxed);
        self.hibernated_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.hibernations.fetch_add(1, Ordering::Relaxed);
    }

    /// A process starts hibernated, from `bytes` of saved state a durable store kept.
    pub(crate) fn restored(&self, bytes: usize) {
        self.hibernated.fetch_add(1, Ordering::Relaxed);
        self.hibernated_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A snapshot of `bytes` is gone: restored (`restored`) or dropped with its process.
    pub(crate) fn woken(&self, bytes: usize, restored: bool) {
        self.hibernated.fetch_sub(1, Ordering::Relaxed);
        self.hibernated_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if restored {
            self.restores.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A process started in a warm instance.
    pub(crate) fn started_warm(&self) {
        self.warm_starts.fetch_add(1, Ordering::Relaxed);
    }

    /// One more instance kept warm (`true`) or one taken back (`false`).
    pub(crate) fn warm(&self, kept: bool) {
        if kept {
            self.warm.fetch_add(1, Ordering::Relaxed);
        } else {
            self.warm.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A compiled module with an initial image of `image` bytes is in memory (`true`) or gone.
    pub(crate) fn module(&self, image: usize, present: bool) {
        if present {
            self.modules.fetch_add(1, Ordering::Relaxed);
            self.image_bytes.fetch_add(image, Ordering::Relaxed);
        } else {
            self.modules.fetch_sub(1, Ordering::Relaxed);
            self.image_bytes.fetch_sub(image, Ordering::Relaxed);
        }
    }

    /// A process's input buffer went from `before` to `after` bytes.
    pub(crate) fn buffer(&self, before: usize, after: usize) {
        if after > before {
            self.buffer_bytes
                .fetch_add(after - before, Ordering::Relaxed);
        } else if before > after {
            self.buffer_bytes
                .fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    pub(crate) fn residency(&self) -> Residency {
        let warm = self.warm.load(Ordering::Relaxed);
        let waiting = self.queued.load(Ordering::Relaxed);
        Residency {
            live_instances: self.live.load(Ordering::Relaxed).saturating_sub(warm),
            warm_instances: warm,
            hibernated: self.hibernated.load(Ordering::Relaxed),
            hibernated_bytes: self.hibernated_bytes.load(Ordering::Relaxed),
            waiting_for_instance: waiting,
            modules: self.modules.load(Ordering::Relaxed),
            module_image_bytes: self.image_bytes.load(Ordering::Relaxed),
            buffer_bytes: self.buffer_bytes.load(Ordering::Relaxed),
            hibernations: self.hibernations.load(Ordering::Relaxed),
            restores: self.restores.load(Ordering::Relaxed),
            warm_starts: self.warm_starts.load(Ordering::Relaxed),
            pooled_idle_slots: 0,
            pooled_resident_bytes: 0,
            compiles: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instances(max: usize) -> Arc<Instances> {
        Arc::new(Instances::new(
            max,
            1,
            Hibernation::WhenFull,
            "full".into(),
            Duration::from_secs(3600),
        ))
    }

    #[test]
    fn a_new_process_never_takes_the_instance_a_waiter_is_owed() {
        let instances = instances(1);
        let held = instances.take().expect("one free");
        let ticket = instances.take_or_queue(Waker::noop).expect_err("none free");
        // The moment inside `release` after the count went down and before the waiter is
        // served: a spawn then must not take the instance.
        std::mem::forget(held);
        instances.live.fetch_sub(1, Ordering::SeqCst);
        assert!(instances.take().is_none());
        instances.serve(&mut instances.queue.lock());
        assert_eq!(ticket.state(), TicketState::Granted);
        let slot = instances.redeem(&ticket);
        assert!(instances.take().is_none());
        drop(slot);
        assert!(instances.take().is_some());
    }

    #[test]
    fn a_withdrawn_ticket_stops_counting_as_a_waiter_at_once() {
        let instances = instances(1);
        let held = instances.take().expect("one free");
        let first = instances.take_or_queue(Waker::noop).expect_err("none free");
        let second = instances.take_or_queue(Waker::noop).expect_err("none free");
        // The first is withdrawn while the second waits behind it.
        instances.withdraw(&first);
        assert_eq!(instances.residency().waiting_for_instance, 1);
        assert_eq!(instances.queued.load(Ordering::SeqCst), 1);
        instances.withdraw(&second);
        assert_eq!(instances.queued.load(Ordering::SeqCst), 0);
        // Nobody waits: warm instances may be kept again (one worker, one instance free after
        // `held` goes), and `WhenFull` does not hibernate for a waiter that left.
        drop(held);
        assert!(instances.may_keep_warm());
        assert!(!instances.should_hibernate());
        // Nothing was granted to the withdrawn tickets: the instance is free.
        assert_eq!(instances.live.load(Ordering::SeqCst), 0);
        assert!(instances.take().is_some());
    }

    #[test]
    fn withdrawn_tickets_do_not_pile_up_behind_a_waiter() {
        let instances = instances(1);
        let _held = instances.take().expect("one free");
        let oldest = instances.take_or_queue(Waker::noop).expect_err("none free");
        for _ in 0..10_000 {
            let ticket = instances.take_or_queue(Waker::noop).expect_err("none free");
            instances.withdraw(&ticket);
        }
        assert_eq!(instances.queued.load(Ordering::SeqCst), 1);
        assert!(instances.queue.lock().len() <= 2 + 16);
        assert_eq!(oldest.state(), TicketState::Waiting);
    }

    #[test]
    fn a_ticket_granted_as_it_is_withdrawn_gives_its_instance_to_the_next() {
        let instances = instances(1);
        let held = instances.take().expect("one free");
        let first = instances.take_or_queue(Waker::noop).expect_err("none free");
        let second = instances.take_or_queue(Waker::noop).expect_err("none free");
        drop(held);
        assert_eq!(first.state(), TicketState::Granted);
        instances.withdraw(&first);
        assert_eq!(second.state(), TicketState::Granted);
        assert_eq!(instances.live.load(Ordering::SeqCst), 1);
        drop(instances.redeem(&second));
        assert_eq!(instances.live.load(Ordering::SeqCst), 0);
    }
}
