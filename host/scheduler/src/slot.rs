//! The shared record of one process: everything the scheduler keeps about it.

use std::sync::Arc;

use crossbeam_channel::Sender;
use rustc_hash::FxHashSet;
use wfcontract::{Payload, Pid, Tag};

use crate::inbox::Inbox;
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
    pub(crate) children: FxHashSet<Pid>,
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

impl Slot {
    pub(crate) fn new(
        pid: Pid,
        parent: Option<Pid>,
        process: Box<dyn Process>,
        start: Start,
        watchers: Vec<Notice>,
    ) -> Arc<Slot> {
        Arc::new(Slot {
            pid,
            parent,
            state: State::new(),
            inbox: Mutex::new(Inbox::default()),
            body: parking_lot::Mutex::new(Body {
                process: Some(process),
                start: Some(start),
            }),
            exit: parking_lot::Mutex::new(Exit {
                retained: parent.is_some(),
                watchers,
                ..Exit::default()
            }),
        })
    }
}
