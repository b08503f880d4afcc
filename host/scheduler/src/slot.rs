//! The shared record of one process: everything the scheduler keeps about it.

use std::sync::Arc;

use crossbeam_channel::Sender;

use wfcontract::{Payload, Pid, Tag};

use crate::inbox::{Inbox, Inline, MailboxLimit};
use crate::outbox::Outbox;
use crate::process::{Process, ProcessResult};
use crate::state::State;
use crate::sync::Mutex;

/// One process, shared by the pid table, the run queues and whoever holds a completer for it.
pub(crate) type Slot = SlotOf<dyn Process>;

/// A slot with its process `P` stored in the same allocation: one allocation a process, the
/// record and the process together (its body's last field). Built as `SlotOf<T>` for the
/// concrete process and used everywhere as [`Slot`], `SlotOf<dyn Process>`, through an `Arc`.
pub(crate) struct SlotOf<P: ?Sized> {
    pub(crate) pid: Pid,
    /// The process that spawned it with a parent link. The parent may join it after it finished.
    pub(crate) parent: Option<Pid>,
    pub(crate) state: State,
    pub(crate) inbox: Mutex<Inbox>,
    pub(crate) exit: parking_lot::Mutex<Exit>,
    /// Set by the first cancel, which arms the grace-period timer; later cancels do not.
    pub(crate) cancel_armed: std::sync::atomic::AtomicBool,
    /// Nanoseconds its turns have taken since it last went to the overrun queue: see
    /// `worker::TURN_SLICE`. Written by the worker running it, before handing it on.
    pub(crate) charge: std::sync::atomic::AtomicU64,
    /// Set when it parked with its charge paid: whoever wakes it queues it behind the others (the
    /// overrun queue). Taken by `Shared::schedule`.
    pub(crate) behind: std::sync::atomic::AtomicBool,
    /// Set by the first `sleep`: the timer may hold entries to drop when the process ends.
    pub(crate) has_timers: std::sync::atomic::AtomicBool,
    /// Set by a handler that runs something for the process ([`Context::watch_end`]): the
    /// call handlers hear of its end and its forgotten commands.
    pub(crate) watched: std::sync::atomic::AtomicBool,
    /// May cancel and join only its own children (see `Spawn::confined`).
    pub(crate) confined: bool,
    /// Not cancelled by a stop, nor waited for (see `Spawn::survives_stop`).
    pub(crate) survives_stop: bool,
    /// Set by the [`Release`](crate::Release) of a held step; taken by the turn that acts on it.
    pub(crate) released: std::sync::atomic::AtomicBool,
    /// Where its messages to `Pid::HOST` go: its own outbox, or the one it inherited from its
    /// parent. `None`: nobody outside listens.
    pub(crate) outbox: Option<Outbox>,
    /// Touched only by the worker that holds the process `Running`, or by shutdown once the
    /// workers have stopped: the state byte is its lock (see [`BodyCell`]). Last: it ends in the
    /// process, the one field whose size only the spawner knows.
    pub(crate) body: BodyCell<P>,
}

impl<P: ?Sized> std::fmt::Debug for SlotOf<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("pid", &self.pid)
            .field("state", &self.state.load())
            .finish_non_exhaustive()
    }
}

/// The process itself, and how to start it.
pub(crate) type Body = BodyOf<dyn Process>;

/// [`Body`] with its process's type still known (while the slot is built).
pub(crate) struct BodyOf<P: ?Sized> {
    /// Present until the first turn calls `init`.
    pub(crate) start: Option<Start>,
    /// The process asked to run again (`Continue`) when its turn's budget was spent: its next
    /// turn steps it even with no events.
    pub(crate) step_due: bool,
    /// What the last step asked to receive ([`StepOutput::receive`](wfcontract::StepOutput)), as
    /// given to the inbox.
    pub(crate) accepting: u32,
    /// A step whose yields and status wait for its release (see `Process::journal`). Boxed:
    /// only a durable process's steps are held, and the body of every process stays small.
    pub(crate) held: Option<Box<Held>>,
    /// Completions its handlers gave at once ([`Context::complete`](crate::Context::complete)),
    /// not yet taken by a step: the next drain takes them ahead of the inbox's completions. They
    /// never go through the inbox's lock: only whoever holds the process `Running` touches them,
    /// as all of the body. A process that parks with some waits for what wakes it, as with the
    /// completions in its inbox (they wake `Blocked`, so it does not park `Blocked` on them).
    pub(crate) completed: std::cell::RefCell<Inline>,
    /// Ended (closed and dropped) exactly once, when the process ends. Last: it is unsized.
    pub(crate) process: Resident<P>,
}

/// A process stored in place, until it is dropped in place when it ends (the memory stays with
/// the slot, which may outlive the process: kept for a join, or in a worker's cache).
pub(crate) struct Resident<P: ?Sized> {
    present: bool,
    value: std::mem::ManuallyDrop<P>,
}

impl<P> Resident<P> {
    pub(crate) fn new(process: P) -> Resident<P> {
        Resident {
            present: true,
            value: std::mem::ManuallyDrop::new(process),
        }
    }
}

impl<P: ?Sized> Resident<P> {
    /// The process, until it is dropped.
    pub(crate) fn get_mut(&mut self) -> Option<&mut P> {
        // Not `then_some`: that would make the reference to a dropped value before the test.
        if self.present {
            Some(&mut *self.value)
        } else {
            None
        }
    }

    pub(crate) fn is_some(&self) -> bool {
        self.present
    }

    /// Drops the process where it is; from then on there is none. Marked gone first, so that a
    /// `Drop` that panics is not run a second time when the slot goes.
    pub(crate) fn drop_in_place(&mut self) {
        if std::mem::take(&mut self.present) {
            // SAFETY: `present` was set, so the value has not been dropped, and it is now clear,
            // so nothing reads or drops the value again.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.value) }
        }
    }
}

impl<P: ?Sized> Drop for Resident<P> {
    fn drop(&mut self) {
        self.drop_in_place();
    }
}

/// The process body, owned by whoever holds the process `Running` (see `state.rs`): the worker
/// that took it from a run queue and made it `Running`, until its park, requeue or finish hands
/// the process on; or, once every worker has stopped, the shutdown that closes what is left. The
/// hand-offs are a release and an acquire each: the park or requeue (a release on the state
/// byte, read by whoever makes the process `Ready` again), then the run queue's push and pop. So
/// the body needs no lock of its own (a mutex here cost two atomic read-modify-writes on every
/// turn, never contended).
///
/// Debug builds check the rule: a second borrow while one is live panics instead of aliasing.
pub(crate) struct BodyCell<P: ?Sized = dyn Process> {
    #[cfg(debug_assertions)]
    borrowed: std::sync::atomic::AtomicBool,
    body: std::cell::UnsafeCell<BodyOf<P>>,
}

// SAFETY: the body is only reached through `BodyCell::borrow`, whose contract gives one thread at a
// time exclusive access, with a happens-before edge (the hand-offs above) from each holder to the
// next; `Body` is `Send`, so handing it from thread to thread that way is sound.
unsafe impl<P: ?Sized> Sync for BodyCell<P> where BodyOf<P>: Send {}

impl<P> BodyCell<P> {
    pub(crate) fn new(body: BodyOf<P>) -> BodyCell<P> {
        BodyCell {
            body: std::cell::UnsafeCell::new(body),
            #[cfg(debug_assertions)]
            borrowed: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl<P: ?Sized> BodyCell<P> {
    /// The body, through the one reference there is (a slot not yet shared).
    pub(crate) fn get_mut(&mut self) -> &mut BodyOf<P> {
        self.body.get_mut()
    }

    /// Exclusive access to the body.
    ///
    /// # Safety
    /// The caller holds the process `Running` (it won `State::start_running` and has not yet
    /// parked, requeued or completed it), or every worker of the scheduler has stopped; and it
    /// holds no other borrow of this body.
    pub(crate) unsafe fn borrow(&self) -> BodyGuard<'_, P> {
        #[cfg(debug_assertions)]
        assert!(
            !self
                .borrowed
                .swap(true, std::sync::atomic::Ordering::Acquire),
            "a process body borrowed twice at once"
        );
        BodyGuard { cell: self }
    }
}

/// A borrow of a [`BodyCell`], ended when dropped.
pub(crate) struct BodyGuard<'a, P: ?Sized = dyn Process> {
    cell: &'a BodyCell<P>,
}

impl<P: ?Sized> std::ops::Deref for BodyGuard<'_, P> {
    type Target = BodyOf<P>;

    fn deref(&self) -> &BodyOf<P> {
        // SAFETY: `BodyCell::borrow`'s contract makes this guard the body's only user.
        unsafe { &*self.cell.body.get() }
    }
}

impl<P: ?Sized> std::ops::DerefMut for BodyGuard<'_, P> {
    fn deref_mut(&mut self) -> &mut BodyOf<P> {
        // SAFETY: as for `deref`; `&mut self` keeps this the only reference through the guard.
        unsafe { &mut *self.cell.body.get() }
    }
}

impl<P: ?Sized> Drop for BodyGuard<'_, P> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        self.cell
            .borrowed
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// What a held step answered.
pub(crate) struct Held {
    pub(crate) status: wfcontract::Status,
    pub(crate) receive: u32,
    pub(crate) yields: Vec<wfcontract::Yield>,
    /// The journal's notes on those yields, in order (boxed: most held steps have none, and a
    /// process's body stays small).
    pub(crate) notes: Option<Box<crate::hold::Notes>>,
    /// The position of the first of `yields` in the step's output (those before went early).
    pub(crate) offset: usize,
}

pub(crate) struct Start {
    pub(crate) method: String,
    pub(crate) input: Payload,
}

/// Who hears about the end of a process, and what is kept for them.
#[derive(Default)]
pub(crate) struct Exit {
    /// Set once the process has ended.
    pub(crate) finished: bool,
    /// While the process has a parent that has not joined it, its result stays in the pid table
    /// (here) after it ends, so the parent can join it late. Cleared when the parent joins it or
    /// ends itself.
    pub(crate) retained: bool,
    /// The result, kept only while `retained`.
    pub(crate) result: Option<ProcessResult>,
    pub(crate) watchers: Vec<Notice>,
    /// Children spawned with this process as parent and not yet joined by it.
    pub(crate) children: std::collections::HashMap<Pid, Arc<Slot>, PidHash>,
}

/// How one watcher hears that a process ended.
#[derive(Debug)]
pub(crate) enum Notice {
    /// Complete yield `tag` of process `pid` with the result. `reaps` is set when `pid` is the
    /// parent: the result is then no longer retained.
    Process { pid: Pid, tag: Tag, reaps: bool },
    /// Send `(pid, result)` here.
    Channel(Sender<(Pid, ProcessResult)>),
}

impl Notice {
    /// Whether this is the parent's join, which releases the retained result.
    pub(crate) fn reaps(&self) -> bool {
        matches!(self, Notice::Process { reaps: true, .. })
    }
}

impl<P: Process> SlotOf<P> {
    /// The slot of `process`, not yet spawned: what only the spawn knows (its pid, parent,
    /// entry point, limits) is filled in by [`Slot::fill`], while the spawn still holds the only
    /// reference.
    pub(crate) fn unspawned(process: P) -> Arc<Slot> {
        let slot: Arc<SlotOf<P>> = Arc::new(SlotOf {
            pid: Pid::HOST,
            parent: None,
            state: State::new(),
            inbox: Mutex::new(Inbox::with_limit(MailboxLimit::NONE)),
            exit: parking_lot::Mutex::new(Exit::default()),
            cancel_armed: std::sync::atomic::AtomicBool::new(false),
            charge: std::sync::atomic::AtomicU64::new(0),
            behind: std::sync::atomic::AtomicBool::new(false),
            has_timers: std::sync::atomic::AtomicBool::new(false),
            watched: std::sync::atomic::AtomicBool::new(false),
            confined: false,
            survives_stop: false,
            released: std::sync::atomic::AtomicBool::new(false),
            outbox: None,
            body: BodyCell::new(BodyOf {
                start: None,
                step_due: false,
                accepting: 0,
                held: None,
                completed: Default::default(),
                process: Resident::new(process),
            }),
        });
        slot
    }
}

/// A process type that is never run: in tests, what [`Slot::dangling`] points to and the process
/// of slots that are only queued.
#[cfg(test)]
pub(crate) struct Never;

#[cfg(test)]
impl Process for Never {
    fn init(
        &mut self,
        _: &crate::process::InitContext,
        _: &str,
        _: Payload,
    ) -> Result<(), crate::process::ProcessError> {
        Ok(())
    }

    fn step(
        &mut self,
        _: crate::process::Events<'_>,
        _: &mut wfcontract::StepOutput,
    ) -> Result<(), crate::process::ProcessError> {
        Ok(())
    }
}

impl Slot {
    /// A reference to no slot, that never upgrades (`Weak::new` needs a sized type).
    #[cfg(test)]
    pub(crate) fn dangling() -> std::sync::Weak<Slot> {
        std::sync::Weak::<SlotOf<Never>>::new()
    }

    /// Makes an unspawned slot the process `pid`, to be started with `start`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fill(
        &mut self,
        pid: Pid,
        parent: Option<Pid>,
        start: Start,
        watchers: Vec<Notice>,
        mailbox_limit: MailboxLimit,
        confined: bool,
        survives_stop: bool,
        outbox: Option<Outbox>,
    ) {
        self.pid = pid;
        self.parent = parent;
        self.inbox = Mutex::new(Inbox::with_limit(mailbox_limit));
        *self.exit.get_mut() = Exit {
            retained: parent.is_some(),
            watchers,
            ..Exit::default()
        };
        self.confined = confined;
        self.survives_stop = survives_stop;
        self.outbox = outbox;
        self.body.get_mut().start = Some(start);
    }
}

/// Hashes pids for maps other than the pid table (a parent's children): one multiplication by
/// 2^64/φ (Fibonacci hashing) spreads consecutive pids over every bit, the low bits that pick a
/// bucket and the high ones hashbrown tags with.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PidHasher(u64);

impl std::hash::Hasher for PidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached for keys other than `Pid`; fold the bytes in the same way.
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(FIBONACCI);
    }
}

/// Builds [`PidHasher`]s.
pub(crate) type PidHash = std::hash::BuildHasherDefault<PidHasher>;

/// 2^64 divided by the golden ratio.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Hashes pids for the pid table (a `DashMap`: its shard is hash bits 49..57, and within the
/// shard hashbrown places a key by the low bits and tags it with the top 7). Pids are handed out
/// in order, and the processes a worker spawns, messages and ends together have neighbouring
/// pids, so this hash keeps neighbours near: consecutive pids go to consecutive shards (spawns
/// from several workers at once take different shards' locks), and within a shard they sit in
/// consecutive buckets (a burst of spawns, or of exits, touches a few cache lines per shard).
/// The bits above 40 (a shared store's host ranges, `host << 40`) move a range to a place of its
/// own in the buckets, so that ranges with the same low bits do not pile up on the same ones.
/// Only the tag is mixed. Scattering every pid with one multiplication made each spawn, lookup
/// and exit of a million short processes a cache miss: 16% of the native skynet bench, 3% now.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TableHasher(u64);

impl std::hash::Hasher for TableHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached for keys other than `Pid`: scattered, as `PidHasher` does.
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(FIBONACCI);
        }
    }

    fn write_u64(&mut self, n: u64) {
        let n = self.0 ^ n;
        let tag = n.wrapping_mul(FIBONACCI) & (0x7F << 57);
        // Higher bits folded in, so that live pids 256 apart (one long-lived process kept out of
        // every 256 spawns) do not all share a shard's lock; consecutive pids still take
        // consecutive shards.
        let shard = ((n ^ (n >> 8) ^ (n >> 16)) & 0xFF) << 49;
        let range = (n >> 40).wrapping_mul(FIBONACCI) >> 20;
        let bucket = (n >> 8).wrapping_add(range) & ((1 << 49) - 1);
        self.0 = tag | shard | bucket;
    }
}

/// Builds [`TableHasher`]s.
pub(crate) type TableHash = std::hash::BuildHasherDefault<TableHasher>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn cell() -> BodyCell<()> {
        BodyCell::new(BodyOf {
            start: None,
            step_due: false,
            accepting: 0,
            held: None,
            completed: Default::default(),
            process: Resident::new(()),
        })
    }

    /// One borrow at a time: a second while the first is live is the misuse the debug check
    /// catches (two workers stepping one process), instead of two aliasing `&mut Body`.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a process body borrowed twice at once")]
    fn a_body_borrowed_twice_at_once_panics() {
        let cell = cell();
        // SAFETY: the only borrow.
        let _first = unsafe { cell.borrow() };
        // SAFETY: deliberately not: the check must fire before any access aliases.
        let _second = unsafe { cell.borrow() };
    }

    fn table_hash(pid: u64) -> u64 {
        use std::hash::BuildHasher;
        TableHash::default().hash_one(Pid(pid))
    }

    /// An aligned run of 256 consecutive pids takes 256 shards, and a shard's pids consecutive
    /// buckets; pids 256 apart do not share a shard; the same offsets in two hosts' ranges land
    /// apart.
    #[test]
    fn the_table_hash_keeps_neighbours_near_and_ranges_apart() {
        let shard = |h: u64| (h << 7) >> 56;
        let bucket = |h: u64| h & ((1 << 49) - 1);
        for base in [0u64, 1024, 1 << 40, (7 << 40) + (48 << 8)] {
            let shards: std::collections::HashSet<u64> = (base..base + 256)
                .map(|pid| shard(table_hash(pid)))
                .collect();
            assert_eq!(shards.len(), 256);
            let strided: std::collections::HashSet<u64> = (0..256)
                .map(|k| shard(table_hash(base + k * 256)))
                .collect();
            assert_eq!(strided.len(), 256);
            assert_eq!(bucket(table_hash(base + 256)), bucket(table_hash(base)) + 1);
        }
        let low = |h: u64| bucket(h) & 0xFFFFF;
        let apart = (0..10_000u64)
            .filter(|k| low(table_hash(k * 256)) != low(table_hash((1 << 40) + k * 256)))
            .count();
        assert_eq!(apart, 10_000);
    }

    /// What every process costs the scheduler before it holds anything: the slot (plus the
    /// `Arc`'s two counts), in the same allocation as the process. Rare parts are boxed (a held
    /// step, a pending termination) and a cancel is a flag, so that a million waiting processes
    /// stay small; the one inline completion in place is what a process that yields one command
    /// at a time would otherwise allocate (four events' worth) on its first yield.
    #[test]
    fn a_slot_is_small() {
        let size = std::mem::size_of::<SlotOf<()>>();
        eprintln!("slot: {size} bytes");
        assert!(size <= 464, "a slot takes {size} bytes");
    }

    /// The process lives in the slot's allocation and is dropped exactly once: when the process
    /// ends (in place, the slot staying), or with the slot if it never ran.
    #[test]
    fn a_resident_process_is_dropped_once() {
        struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let drops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = || drops.load(std::sync::atomic::Ordering::Relaxed);
        let mut resident = Resident::new(Counted(std::sync::Arc::clone(&drops)));
        assert!(resident.get_mut().is_some());
        resident.drop_in_place();
        assert_eq!(count(), 1);
        assert!(resident.get_mut().is_none());
        resident.drop_in_place();
        drop(resident);
        assert_eq!(count(), 1);
        drop(Resident::new(Counted(std::sync::Arc::clone(&drops))));
        assert_eq!(count(), 2);
    }

    #[test]
    fn borrows_one_after_another_see_each_others_writes() {
        let cell = cell();
        // SAFETY: one borrow at a time, on one thread.
        unsafe { cell.borrow() }.step_due = true;
        // SAFETY: the borrow above ended with its statement.
        let body = unsafe { cell.borrow() };
        assert!(body.step_due);
        drop(body);
        let cell = std::sync::Arc::new(cell);
        let other = std::sync::Arc::clone(&cell);
        // The join orders the two threads' borrows, as a park and the next turn's start do.
        // SAFETY: this thread holds no borrow while the other runs.
        std::thread::spawn(move || unsafe { other.borrow() }.accepting = 7)
            .join()
            .unwrap();
        // SAFETY: the other thread's borrow ended before the join returned.
        assert_eq!(unsafe { cell.borrow() }.accepting, 7);
    }
}
