//! Workflow ids: what a top-level workflow's id may be, and which durable process has which id
//! in this host.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;
use wfcontract::{Pid, Tag};

/// Why `id` cannot be a top-level workflow's id, if it cannot: 1 to 1024 characters, no control
/// character, no `..`, not `.` (a URL's path drops a `.` segment), and no `/`, which children's
/// ids use (`order-42/3.0`: the parent's id, the step
/// and the yield that spawned them), so that no start can take a child's id.
pub fn bad_id(id: &str) -> Option<&'static str> {
    (id.is_empty()
        || id.len() > 1024
        || id.contains("..")
        || id == "."
        || id.chars().any(|c| c.is_control() || c == '/'))
    .then_some(
        "a workflow id must be 1 to 1024 characters, none of them a control character or '/', \
         without '..' and not '.' (children's ids are their parent's with '/' and where they were \
         spawned; ids go into URLs, where '..' reads as a step up and '.' as nothing)",
    )
}

/// The id run `run` of top-level workflow `id` takes once a reset ends it: `order-7/run-1`. No
/// start takes it (an id has no '/'), nor a child (theirs end in where they were spawned).
pub fn run_id(id: &str, run: u64) -> String {
    format!("{id}/run-{run}")
}

/// The workflow ids of the durable processes running in this host, by pid, and back; and the
/// runs of the top-level ids a reset gave a new run, for their idempotency keys.
#[derive(Debug, Default)]
pub(crate) struct Ids(RwLock<IdMaps>, RwLock<FxHashMap<Arc<str>, u64>>);

/// Workflow ids by pid, and pids by workflow id.
/// (Pids are the host's own numbers, hashed fast; ids are a client's, hashed with a hasher
/// no client can make collide.)
type IdMaps = (FxHashMap<Pid, Arc<str>>, HashMap<Arc<str>, Pid>);

impl Ids {
    pub(crate) fn insert(&self, pid: Pid, id: Arc<str>) {
        let mut ids = self.0.write();
        ids.1.insert(Arc::clone(&id), pid);
        ids.0.insert(pid, id);
    }

    /// Makes room for `more` ids at once (a recovery's), rather than growing step by step.
    pub(crate) fn reserve(&self, more: usize) {
        let mut ids = self.0.write();
        ids.0.reserve(more);
        ids.1.reserve(more);
    }

    /// Claims `id` for `pid` unless a process has it: the pid that has it, if one does.
    pub(crate) fn claim(&self, pid: Pid, id: &Arc<str>) -> Option<Pid> {
        let mut ids = self.0.write();
        if let Some(running) = ids.1.get(id) {
            return Some(*running);
        }
        ids.1.insert(Arc::clone(id), pid);
        ids.0.insert(pid, Arc::clone(id));
        None
    }

    /// Forgets `pid`, and its id unless the id names another process now (a claim that lost
    /// to a reset's new run, say, must not take the id from it).
    pub(crate) fn remove(&self, pid: Pid) {
        let mut ids = self.0.write();
        if let Some(id) = ids.0.remove(&pid) {
            if ids.1.get(&id) == Some(&pid) {
                ids.1.remove(&id);
            }
        }
    }

    pub(crate) fn contains(&self, pid: Pid) -> bool {
        self.0.read().0.contains_key(&pid)
    }

    /// How many durable processes run.
    pub(crate) fn len(&self) -> usize {
        self.0.read().0.len()
    }

    /// The pid of workflow `id`, if it runs here.
    pub(crate) fn pid_of(&self, id: &str) -> Option<Pid> {
        self.0.read().1.get(id).copied()
    }

    /// The pids of the durable processes that run.
    pub(crate) fn pids(&self) -> Vec<Pid> {
        self.0.read().0.keys().copied().collect()
    }

    pub(crate) fn get(&self, pid: Pid) -> Option<Arc<str>> {
        self.0.read().0.get(&pid).cloned()
    }

    /// Notes that top-level workflow `id` runs as run `run` of its id: a reset's (`run` > 1),
    /// or a first one (a new start of an id whose runs were pruned), which forgets any.
    pub(crate) fn set_run(&self, id: &str, run: u64) {
        if run > 1 {
            self.1.write().insert(Arc::from(id), run);
        } else if !self.1.read().is_empty() {
            self.1.write().remove(id);
        }
    }

    /// The idempotency key of yield `tag` of `pid`: its workflow id and the yield's tag, which
    /// a replay gives the same yield again. In a run a reset started (run 2 on), and in its
    /// children, the id names the run as the run's past id will (`order-7/run-2#4`,
    /// `order-7/run-2/3.0#1`), so that what a run asks again after a reset has keys of its own.
    pub(crate) fn key(&self, pid: Pid, tag: Tag) -> Option<String> {
        let id = self.get(pid)?;
        let runs = self.1.read();
        if !runs.is_empty() {
            let root = id.split('/').next().unwrap_or(&id);
            if let Some(run) = runs.get(root) {
                let rest = &id[root.len()..];
                return Some(format!("{}{rest}#{}", run_id(root, *run), tag.0));
            }
        }
        Some(format!("{id}#{}", tag.0))
    }
}
