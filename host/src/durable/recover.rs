//! Recovery: every unfinished workflow of the store starts again under its pid, from its latest
//! snapshot and the journal after it, and goes on; the messages waiting for them are delivered
//! again.

use std::collections::HashSet;

use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;

use wfcontract::{Payload, Pid};

use super::process::DurableProcess;
use super::resolve::{hold_damaged_trees, Damage, Ready, Resolved};
use super::store::{Cancel, Op, State, StoredMessage, Workflow};
use super::{store_error, Durable};
use crate::engine::{Engine, Spawned};
use crate::error::Result;
use crate::grants::Grants;

impl Durable {
    /// Notes the run of the top-level workflow whose tree holds workflow `id` (a child's id
    /// starts with it), for the idempotency keys of a tree whose top-level workflow does not run.
    fn note_root_run(&self, id: &str) {
        let Some((root, _)) = id.split_once('/') else {
            return;
        };
        if let Ok(Some(workflow)) = self.reader.lock().workflow(root) {
            if workflow.start.parent.is_none() {
                self.ids.set_run(root, workflow.run);
            }
        }
    }
}

/// Which workflows a claim takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Which<'a> {
    /// Up to this many trees (on a store of this host's own: every unfinished workflow).
    Any(usize),
    /// The tree of the unfinished top-level workflow of this id, which has no children yet.
    Tree(&'a str),
}

/// What a recovery started: the top-level workflows (children are followed by their parents),
/// the numbers of all, and the cancels owed once the gate opens.
struct Started {
    runs: Vec<(String, Spawned)>,
    recovered: FxHashSet<u64>,
    cancels: Vec<Pid>,
    /// The module hashes of those started, each shared by all its workflows.
    modules: FxHashMap<String, Arc<str>>,
}

/// Opens the gate when a recovery ends, however it ends.
struct Gate<'a>(&'a Durable);

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        self.0.open_gate();
    }
}

impl Durable {
    /// On a store hosts share: how many unfinished workflows no other host is known to run
    /// (see [`Host::claimable`](crate::Host::claimable)); 0 on a store of this host's own.
    pub(crate) fn claimable(&self) -> Result<u64> {
        match self.lease.get() {
            Some(lease) => lease.store.lock().claimable().map_err(store_error),
            None => Ok(0),
        }
    }

    /// On a store hosts share: calls `wake` whenever there is work to take (see
    /// [`Host::on_new_work`](crate::Host::on_new_work)).
    pub(crate) fn on_new_work(&self, wake: impl Fn() + Send + Sync + 'static) -> Result<()> {
        match self.lease.get() {
            Some(lease) => lease
                .store
                .lock()
                .listen(Arc::new(wake), Arc::clone(&lease.listening))
                .map_err(store_error),
            None => Ok(()),
        }
    }

    /// Claims up to `limit` trees (on a store of this host's own: every unfinished workflow)
    /// and starts them on `engine`, recovered (see [`Host::claim_with`](crate::Host::claim_with)):
    /// the top-level workflows started, with their ids.
    /// As [`claim`](Self::claim), with `grants` for the workflows whose module is not loaded.
    pub(crate) fn claim(
        self: &Arc<Self>,
        engine: &Engine,
        grants: Option<Grants>,
        limit: usize,
    ) -> Result<Vec<(String, Spawned)>> {
        self.claim_which(engine, grants, Which::Any(limit))
    }

    /// As [`claim`](Self::claim), of the workflows `which` names.
    pub(crate) fn claim_which(
        self: &Arc<Self>,
        engine: &Engine,
        grants: Option<Grants>,
        which: Which<'_>,
    ) -> Result<Vec<(String, Spawned)>> {
        let mut claimed = Vec::new();
        let mut handled = FxHashSet::default();
        let result = self.claim_and_start(engine, grants, which, &mut claimed, &mut handled);
        if result.is_err() {
            // What was claimed and not started goes back, for this host or another to claim.
            let left: Vec<u64> = claimed
                .iter()
                .filter(|n| !handled.contains(*n))
                .copied()
                .collect();
            if let (false, Some(lease)) = (left.is_empty(), self.lease.get()) {
                if let Err(error) = lease.store.lock().unclaim(&left, true) {
                    tracing::warn!(
                        "{} claimed workflow(s) could not be given back ({error}): they wait \
                         for this host's lease to run out",
                        left.len()
                    );
                }
            }
        }
        result
    }

    /// Claims (on a shared store) and starts what was claimed, as a pipeline: gather what to
    /// recover, resolve and decode it, spawn it, redeliver its messages, open the gate.
    /// `claimed` and `handled` say which workflows were claimed and which were started or left
    /// (damaged), whatever the outcome.
    fn claim_and_start(
        self: &Arc<Self>,
        engine: &Engine,
        grants: Option<Grants>,
        which: Which<'_>,
        claimed: &mut Vec<u64>,
        handled: &mut FxHashSet<u64>,
    ) -> Result<Vec<(String, Spawned)>> {
        engine.running()?;
        self.writable()?;
        // One claim or take at a time: what one takes, the other must not take again.
        let _taking = self.taking.lock();
        // No recovered workflow steps before every one of them is there and has its messages.
        self.close_gate();
        let gate = Gate(self);
        let Some((unfinished, messages)) = self.gather(which, claimed)? else {
            drop(gate);
            self.take_waiting();
            return Ok(Vec::new());
        };
        self.set_refused(
            messages
                .iter()
                .filter_map(|m| m.refused.clone().map(|why| (m.message.id, why)))
                .collect(),
        );
        // A host that shares the store numbers from a range of its own, which workflows of
        // other ranges leave alone.
        if let (Some(last), false) = (unfinished.iter().map(|w| w.start.num).max(), self.shared()) {
            engine.handle.reserve_pids_through(Pid(last));
        }
        let ready = self.resolve_all(engine, grants.as_ref(), unfinished, handled)?;
        let Started {
            runs,
            recovered,
            cancels,
            ..
        } = self.start_recovered(engine, ready, handled)?;
        self.redeliver(engine, messages, &recovered);
        drop(gate);
        for pid in cancels {
            let _ = engine.handle.cancel(pid);
        }
        if self.shared() {
            self.take_waiting();
        }
        Ok(runs)
    }

    /// The unfinished workflows to recover, parents first, and the messages the store holds for
    /// them: on a shared store, those of up to `limit` trees this host claims now (`None` when
    /// there are none); on a store of its own, every one.
    fn gather(
        &self,
        which: Which<'_>,
        claimed_out: &mut Vec<u64>,
    ) -> Result<Option<(Vec<Workflow>, Vec<StoredMessage>)>> {
        let Some(lease) = self.lease.get() else {
            let mut reader = self.reader.lock();
            return Ok(Some(match which {
                Which::Any(_) => {
                    let unfinished = reader.workflows(true).map_err(store_error)?;
                    let messages = reader.messages().map_err(store_error)?;
                    (parents_first(unfinished), messages)
                }
                Which::Tree(id) => {
                    // A top-level workflow that has not spawned yet (a reset's new run).
                    let workflow = reader.workflow(id).map_err(store_error)?;
                    let Some(workflow) = workflow.filter(|w| w.state == State::Running) else {
                        return Ok(None);
                    };
                    let num = workflow.start.num;
                    let mut messages = reader.messages().map_err(store_error)?;
                    messages.retain(|m| m.message.receiver == num || m.message.sender == num);
                    (vec![workflow], messages)
                }
            }));
        };
        let (limit, id) = match which {
            Which::Any(limit) => (limit, None),
            Which::Tree(id) => (1, Some(id)),
        };
        let claimed = lease.store.lock().claim(limit, id).map_err(store_error)?;
        claimed_out.extend(&claimed);
        if claimed.is_empty() {
            return Ok(None);
        }
        let taken = lease
            .store
            .lock()
            .take_messages(Some(&claimed))
            .map_err(store_error)?;
        let mut reader = self.reader.lock();
        let mut unfinished = Vec::with_capacity(claimed.len());
        for num in claimed {
            if let Some(workflow) = reader.workflow_by_num(num).map_err(store_error)? {
                unfinished.push(workflow);
            }
        }
        if let Some(metrics) = &self.metrics {
            metrics.core.claimed.inc_by(unfinished.len() as u64);
            // A workflow with a journal ran on a host before: this one takes it over.
            let taken_over = unfinished.iter().filter(|w| w.steps > 0).count();
            metrics.core.takeovers.inc_by(taken_over as u64);
        }
        // Refused messages say why to the senders that had not heard; the waiting ones were
        // taken for this host alone.
        let mut messages: Vec<StoredMessage> =
            reader.refused_from(claimed_out).map_err(store_error)?;
        messages.extend(taken.into_iter().map(|message| StoredMessage {
            message,
            refused: None,
        }));
        Ok(Some((parents_first(unfinished), messages)))
    }

    /// Reads back and decodes everything each of `unfinished` needs before anything starts: a
    /// tree with damage stays as it is (marked so, and counted `handled`); a tree with a
    /// workflow whose module this host does not load (and has no `grants` for) waits for a host
    /// that does (given back on a shared store, and counted `handled`). The rest, ready.
    fn resolve_all(
        &self,
        engine: &Engine,
        grants: Option<&Grants>,
        unfinished: Vec<Workflow>,
        handled: &mut FxHashSet<u64>,
    ) -> Result<Vec<Ready>> {
        let mut ready = Vec::with_capacity(unfinished.len());
        let mut damaged = Vec::new();
        let mut unloaded = Vec::new();
        // Those running here already (a claim of a tree this host runs part of) stay as they are.
        let unfinished: Vec<Workflow> = unfinished
            .into_iter()
            .filter(|w| !self.ids.contains(Pid(w.start.num)))
            .collect();
        for resolved in self.resolve_all_of(&engine.wasm, grants, unfinished)? {
            match resolved {
                Resolved::Ready(resolved) => ready.push(*resolved),
                Resolved::Damaged(workflow, why) => damaged.push((workflow, why)),
                Resolved::Unloaded(workflow) => {
                    let why = format!(
                        "its module '{}' is not loaded in this host",
                        workflow.start.module_name
                    );
                    unloaded.push((workflow, why));
                }
            }
        }
        let parent_of = |num| {
            let workflow = self.reader.lock().workflow_by_num(num).ok().flatten();
            workflow.and_then(|w: Workflow| w.start.parent)
        };
        let (ready, held) = hold_damaged_trees(ready, damaged, parent_of);
        handled.extend(held.iter().map(|(w, _)| w.start.num));
        self.note_damage(held)?;
        let (ready, waiting) = hold_damaged_trees(ready, unloaded, parent_of);
        handled.extend(waiting.iter().map(|(w, _)| w.start.num));
        self.wait_for_modules(waiting);
        Ok(ready)
    }

    /// Leaves `waiting` (trees with a workflow whose module this host does not load) for a
    /// host that loads it: never run without the grants their module name has.
    fn wait_for_modules(&self, waiting: Vec<(Workflow, String)>) {
        if waiting.is_empty() {
            return;
        }
        let mut warned = self.waiting_warned.lock();
        for (workflow, why) in &waiting {
            // Once per workflow and host: a tree given back is claimed again at the next poll.
            if !why.contains("of its tree") && warned.insert(workflow.start.num) {
                tracing::warn!(
                    workflow = %workflow.start.id,
                    "not resumed here: {why} (load it under that name, or recover with grants \
                     for modules not loaded); it waits for a host that does"
                );
            }
        }
        drop(warned);
        if let Some(lease) = self.lease.get() {
            // Without waking the hosts that listen: a host that loads the module takes it at
            // its next poll, and this one does not claim it again at once.
            let nums: Vec<u64> = waiting.iter().map(|(w, _)| w.start.num).collect();
            if let Err(error) = lease.store.lock().unclaim(&nums, false) {
                tracing::warn!(
                    "{} workflow(s) waiting for their module could not be given back ({error}): \
                     they wait for this host's lease to run out",
                    nums.len()
                );
            }
        }
    }

    /// Starts each of `ready` (parents first) from its snapshot and journal: the top-level
    /// ones, the numbers of all, and the cancels owed once the gate opens.
    fn start_recovered(
        self: &Arc<Self>,
        engine: &Engine,
        ready: Vec<Ready>,
        handled: &mut FxHashSet<u64>,
    ) -> Result<Started> {
        let mut started = Started {
            runs: Vec::with_capacity(ready.len()),
            recovered: FxHashSet::default(),
            cancels: Vec::new(),
            modules: FxHashMap::default(),
        };
        started.recovered.reserve(ready.len());
        handled.reserve(ready.len());
        self.ids.reserve(ready.len());
        let mut repaired = Vec::new();
        for ready in ready {
            let workflow = self.spawn_recovered(engine, ready, &mut started)?;
            let start = &workflow.start;
            handled.insert(start.num);
            if !self.damaged.lock().is_empty() {
                self.damaged.lock().retain(|d| d.id != start.id);
            }
            if workflow.damaged.is_some() {
                repaired.push(Op::Damaged {
                    num: start.num,
                    why: None,
                });
            }
        }
        if !repaired.is_empty() {
            // Read back in full this time: no longer damaged.
            self.write(repaired)?;
        }
        Ok(started)
    }

    /// Spawns one recovered workflow under its pid, linked to its parent if the parent runs
    /// again too, and notes it in `started`: the workflow, as the store had it.
    fn spawn_recovered(
        self: &Arc<Self>,
        engine: &Engine,
        ready: Ready,
        started: &mut Started,
    ) -> Result<Workflow> {
        let Ready {
            workflow,
            loaded,
            standing,
            saved,
            records,
            input,
        } = ready;
        let start = &workflow.start;
        let pid = Pid(start.num);
        let id: Arc<str> = Arc::from(start.id.as_str());
        let module = Arc::clone(
            started
                .modules
                .entry(start.module.clone())
                .or_insert_with(|| Arc::from(start.module.as_str())),
        );
        let process = DurableProcess::new(
            engine.process(&loaded),
            Arc::clone(self),
            Arc::clone(&id),
            module,
        );
        let process = match standing {
            Some(standing) => process.dormant(standing),
            None => process.recovered(saved, records),
        }
        .traced(
            start.trace.as_deref(),
            &start.entry,
            (Some(start.started), workflow.steps > 0),
        );
        self.ids.insert(pid, Arc::clone(&id));
        if start.parent.is_none() {
            self.ids.set_run(&start.id, workflow.run);
        }
        if workflow.paused {
            // Held from its first turn, as it was before the restart.
            self.mark_paused(start.num, true);
        }
        // Linked to its parent if the parent runs again too; a parent that ended had
        // cancelled it.
        let parent = start
            .parent
            .map(Pid)
            .filter(|p| started.recovered.contains(&p.0));
        let orphaned = start.parent.is_some() && parent.is_none();
        if orphaned {
            // Its top-level workflow ended: its run (for the keys of this tree) is read here.
            self.note_root_run(&start.id);
        }
        // Held until the gate opens: it takes no turn before every one of them is there.
        let spawned = match engine.spawn_workflow(process, pid, parent, &start.entry, input, true) {
            Ok(spawned) => spawned,
            Err(error) => {
                self.ids.remove(pid);
                self.forget_paused(start.num);
                return Err(error);
            }
        };
        if let Some(waker) = engine.handle.waker(pid) {
            self.hold_at_gate(waker);
        }
        started.recovered.insert(start.num);
        // On a shared store, asked cancels are taken after the recovery (`take_waiting`).
        let asked = workflow.cancel == Cancel::Asked && !self.shared();
        if asked || (orphaned && workflow.cancel == Cancel::No) {
            // Once the gate is open: a cancel's grace period runs from there.
            started.cancels.push(pid);
        }
        if start.parent.is_none() {
            started.runs.push((start.id.clone(), spawned));
        }
        Ok(workflow)
    }

    /// Delivers again the messages that waited in the store for the workflows just recovered;
    /// refused ones tell their senders why (they were told before the restart, or are now).
    fn redeliver(&self, engine: &Engine, messages: Vec<StoredMessage>, recovered: &FxHashSet<u64>) {
        for message in messages {
            if message.refused.is_some() || !recovered.contains(&message.message.receiver) {
                continue;
            }
            let m = &message.message;
            let payload: Payload = match postcard::from_bytes(&m.payload) {
                Ok(payload) => payload,
                Err(e) => {
                    // Refused, as a full mailbox is: the sender (if it waits) hears so.
                    let why = format!("message {} in the store does not decode: {e}", m.id);
                    tracing::error!("{why}");
                    self.refuse(m.id, &why);
                    continue;
                }
            };
            if let Err(refused) =
                engine
                    .handle
                    .send_numbered(Pid(m.sender), Pid(m.receiver), m.id, payload)
            {
                self.refuse(m.id, &refused.to_string());
            }
        }
    }

    /// What recoveries by this host found damaged and left as it was (see
    /// [`Host::damaged`](crate::Host::damaged)).
    pub(crate) fn damage(&self) -> Vec<Damage> {
        self.damaged.lock().clone()
    }
}

/// `workflows` with every parent before its children (a tree taken over from another host may
/// have children numbered below their parent, in the range of the host that spawned them).
fn parents_first(mut workflows: Vec<Workflow>) -> Vec<Workflow> {
    workflows.sort_by_key(|w| w.start.num);
    if workflows.iter().all(|w| w.start.parent.is_none()) {
        return workflows;
    }
    let nums: HashSet<u64> = workflows.iter().map(|w| w.start.num).collect();
    let mut placed = HashSet::new();
    let mut ordered = Vec::with_capacity(workflows.len());
    while !workflows.is_empty() {
        let before = workflows.len();
        ordered.extend(workflows.extract_if(.., |w| {
            let ready = w
                .start
                .parent
                .is_none_or(|p| !nums.contains(&p) || placed.contains(&p));
            if ready {
                placed.insert(w.start.num);
            }
            ready
        }));
        if workflows.len() == before {
            // Parent links cannot loop; were they to, the rest go as they are.
            ordered.append(&mut workflows);
        }
    }
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::store::{Cancel, NewWorkflow};

    fn workflow(num: u64, parent: Option<u64>) -> Workflow {
        Workflow {
            start: NewWorkflow {
                num,
                id: num.to_string(),
                parent,
                module: String::new(),
                module_name: String::new(),
                entry: String::new(),
                input: Vec::new(),
                started: 0,
                trace: None,
            },
            state: State::Running,
            ending: None,
            finished: None,
            steps: 0,
            cancel: Cancel::No,
            damaged: None,
            unread: 0,
            owner: None,
            paused: false,
            run: 1,
        }
    }

    #[test]
    fn parents_come_before_children_numbered_below_them() {
        let nums = |list: Vec<Workflow>| -> Vec<u64> { list.iter().map(|w| w.start.num).collect() };
        // 50 was spawned by 900 after a takeover, and 7 by 50; 3's parent is not recovered.
        let list = vec![
            workflow(7, Some(50)),
            workflow(900, None),
            workflow(50, Some(900)),
            workflow(3, Some(1)),
        ];
        assert_eq!(nums(parents_first(list)), vec![3, 900, 50, 7]);
    }
}
