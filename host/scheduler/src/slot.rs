//! The shared record of one process: everything the scheduler keeps about it.

use std::sync::Arc;

use crossbeam_channel::Sender;

use wfcontract::{Payload, Pid, Tag};

use crate::inbox::{Inbox, MailboxLimit};
use crate::outbox::Outbox;
use crate::process::{Process, ProcessResult};
use crate::state::State;
use crate::sync::Mutex;

/// One process, shared by the pid table, the run queues and whoever holds a completer for it.
pub(crate) struct Slot {
    pub(crate) pid: Pid,
    /// The process that spawned it with a parent link. The parent may join it after it finished.
    pub(crate) parent: Option<Pid>,
    pub(crate) state: State,
    pub(crate) inbox: Mutex<Inbox>,
    /// Locked only by the worker that won `Ready → Running`, or by shutdown once the workers have
    /// stopped; never contended.
    pub(crate) body: parking_lot::Mutex<Body>,
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
    /// May cancel and join only its own children (see `Spawn::confined`).
    pub(crate) confined: bool,
    /// Not cancelled by a stop, nor waited for (see `Spawn::survives_stop`).
    pub(crate) survives_stop: bool,
    /// Set by the [`Release`](crate::Release) of a held step; taken by the turn that acts on it.
    pub(crate) released: std::sync::atomic::AtomicBool,
    /// Where its messages to `Pid::HOST` go: its own outbox, or the one it inherited from its
    /// parent. `None`: nobody outside listens.
    pub(crate) outbox: Option<Outbox>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("pid", &self.pid)
            .field("state", &self.state.load())
            .finish_non_exhaustive()
    }
}

/// The process itself, and how to start it.
pub(crate) struct Body {
    /// Taken out (and closed) exactly once, when the process ends.
    pub(crate) process: Option<Box<dyn Process>>,
    /// Present until the first turn calls `init`.
    pub(crate) start: Option<Start>,
    /// The process asked to run again (`Continue`) when its turn's budget was spent: its next
    /// turn steps it even with no events.
    pub(crate) step_due: bool,
    /// What the last step asked to receive ([`StepOutput::receive`](wfcontract::StepOutput)), as
    /// given to the inbox.
    pub(crate) accepting: u32,
    /// A step whose yields and status wait for its release (see `Process::journal`).
    pub(crate) held: Option<Held>,
}

/// What a held step answered.
pub(crate) struct Held {
    pub(crate) status: wfcontract::Status,
    pub(crate) receive: u32,
    pub(crate) yields: Vec<wfcontract::Yield>,
    /// The journal's notes on those yields, in order (boxed: most held steps have none, and a
    /// process's body stays small).
    pub(crate) notes: Option<Box<crate::process::Notes>>,
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

impl Slot {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        pid: Pid,
        parent: Option<Pid>,
        process: Box<dyn Process>,
        start: Start,
        watchers: Vec<Notice>,
        mailbox_limit: MailboxLimit,
        confined: bool,
        survives_stop: bool,
        outbox: Option<Outbox>,
    ) -> Arc<Slot> {
        Arc::new(Slot {
            pid,
            parent,
            state: State::new(),
            inbox: Mutex::new(Inbox::with_limit(mailbox_limit)),
            body: parking_lot::Mutex::new(Body {
                process: Some(process),
                start: Some(start),
                step_due: false,
                accepting: 0,
                held: None,
            }),
            exit: parking_lot::Mutex::new(Exit {
                retained: parent.is_some(),
                watchers,
                ..Exit::default()
            }),
            cancel_armed: std::sync::atomic::AtomicBool::new(false),
            charge: std::sync::atomic::AtomicU64::new(0),
            behind: std::sync::atomic::AtomicBool::new(false),
            has_timers: std::sync::atomic::AtomicBool::new(false),
            confined,
            survives_stop,
            released: std::sync::atomic::AtomicBool::new(false),
            outbox,
        })
    }
}

/// Hashes pids for the pid table. Pids are consecutive integers, so one multiplication by 2^64/φ
/// (Fibonacci hashing) spreads them over every bit: the high bits that pick the table's shard and
/// tag, and the low bits that pick the bucket, with no collisions between neighbours.
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
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Builds [`PidHasher`]s.
pub(crate) type PidHash = std::hash::BuildHasherDefault<PidHasher>;
