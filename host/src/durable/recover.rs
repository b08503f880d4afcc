//! Recovery: every unfinished workflow of the store starts again under its pid, from its latest
//! snapshot and the journal after it, and goes on; the messages waiting for them are delivered
//! again.

use std::collections::HashSet;
use std::sync::Arc;

use wfcontract::{Payload, Pid};

use super::process::DurableProcess;
use super::resolve::{hold_damaged_trees, Damage, Ready};
use super::store::{Cancel, Message, Workflow};
use super::{store_error, Durable};
use crate::error::Result;
use crate::grants::Grants;
use crate::run::Run;
use crate::wasm::WasmProcess;
use crate::Host;

/// What a recovery started: the runs of the top-level workflows, the numbers of all, and the
/// cancels owed once the gate opens.
struct Started {
    runs: Vec<(String, Run)>,
    recovered: HashSet<u64>,
    cancels: Vec<Pid>,
}

/// Opens the gate when a recovery ends, however it ends.
struct Gate<'a>(&'a Durable);

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        self.0.open_gate();
    }
}

impl Host {
    /// Starts every unfinished workflow of the store again: each starts from its latest snapshot
    /// (see [`HostBuilder::snapshots`](crate::HostBuilder::snapshots)), or a fresh instance of
    /// the module it started with (kept in the store by hash), replays the journal after that,
    /// checking that it does what the journal says, and goes on from there: its timers fire at their due time (at once
    /// if that passed while the host was down), host calls that had not answered run again with
    /// the same idempotency key, and messages that had not been taken are delivered again.
    ///
    /// A workflow runs the module loaded now with the same bytes, under that module's grants;
    /// with none loaded, the bytes kept in the store, with default grants (see
    /// [`recover_with`](Self::recover_with)).
    ///
    /// Returns a [`Run`] for each top-level workflow recovered (children are followed by their
    /// parents), with its id. Call it once, after loading modules and before starting new work.
    pub fn recover(&self) -> Result<Vec<(String, Run)>> {
        self.recover_with(Grants::default())
    }

    /// As [`recover`](Self::recover), with `grants` for the workflows whose module is not loaded
    /// (they run the bytes the store kept).
    ///
    /// On a store hosts share (PostgreSQL), only the workflows no live host owns are recovered,
    /// each tree (a top-level workflow and all it spawned) by one host: those of a host that
    /// gave them back, whose lease ran out, or that a client started.
    pub fn recover_with(&self, grants: Grants) -> Result<Vec<(String, Run)>> {
        self.claim_with(grants, usize::MAX)
    }

    /// On a store hosts share: takes up to `limit` trees of workflows that no live host owns
    /// (started by a client, given back by a host that stopped, or left by one whose lease ran
    /// out) and runs them, recovered as [`recover`](Self::recover) does. A host serving a store
    /// calls it again and again (`wfhost serve`). On a store of its own, the same as `recover`.
    pub fn claim(&self, limit: usize) -> Result<Vec<(String, Run)>> {
        self.claim_with(Grants::default(), limit)
    }

    /// On a store hosts share: how many unfinished workflows no other host is known to run
    /// (none owns them, or the host that does stopped renewing its lease or has not renewed it
    /// since this one joined). They can be claimed now or once that lease runs out: `wfhost
    /// resume` claims until none is left. 0 on a store of this host's own.
    pub fn claimable(&self) -> Result<u64> {
        let durable = self.durable()?;
        match durable.lease.get() {
            Some(lease) => lease.store.lock().claimable().map_err(store_error),
            None => Ok(0),
        }
    }

    /// On a store hosts share: calls `wake` (from a thread of its own) whenever a client or
    /// another host writes work to take (a start, a message, a cancel, workflows given back), so
    /// that a host calling [`claim`](Self::claim) in a loop need not poll often. Until the host
    /// shuts down. Nothing on a store of this host's own.
    pub fn on_new_work(&self, wake: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let durable = self.durable()?;
        match durable.lease.get() {
            Some(lease) => lease
                .store
                .lock()
                .listen(Arc::new(wake), Arc::clone(&lease.listening))
                .map_err(store_error),
            None => Ok(()),
        }
    }

    /// As [`claim`](Self::claim), with `grants` for the workflows whose module is not loaded.
    pub fn claim_with(&self, grants: Grants, limit: usize) -> Result<Vec<(String, Run)>> {
        let mut claimed = Vec::new();
        let mut handled = HashSet::new();
        let result = self.claim_and_start(grants, limit, &mut claimed, &mut handled);
        if result.is_err() {
            // What was claimed and not started goes back, for this host or another to claim.
            let left: Vec<u64> = claimed
                .iter()
                .filter(|n| !handled.contains(*n))
                .copied()
                .collect();
            if let (false, Some(lease)) = (left.is_empty(), self.durable()?.lease.get()) {
                if let Err(error) = lease.store.lock().unclaim(&left) {
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

    /// Claims (on a shared store) and starts what was claimed; `claimed` and `handled` say
    /// which workflows were claimed and which were started or left (damaged), whatever the
    /// outcome.
    fn claim_and_start(
        &self,
        grants: Grants,
        limit: usize,
        claimed_out: &mut Vec<u64>,
        handled: &mut HashSet<u64>,
    ) -> Result<Vec<(String, Run)>> {
        let durable = self.durable()?.clone();
        self.inner.running()?;
        durable.writable()?;
        // One claim or take at a time: what one takes, the other must not take again.
        let _taking = durable.taking.lock();
        // No recovered workflow steps before every one of them is there and has its messages.
        durable.close_gate();
        let gate = Gate(&durable);
        let Some((unfinished, messages)) = self.gather(&durable, limit, claimed_out)? else {
            drop(gate);
            durable.take_waiting();
            return Ok(Vec::new());
        };
        durable.set_refused(
            messages
                .iter()
                .filter_map(|m| m.refused.clone().map(|why| (m.message.id, why)))
                .collect(),
        );
        // A host that shares the store numbers from a range of its own, which workflows of
        // other ranges leave alone.
        if let (Some(last), false) = (
            unfinished.iter().map(|w| w.start.num).max(),
            durable.shared(),
        ) {
            self.inner.handle.reserve_pids_through(Pid(last));
        }
        // Everything is read back before anything starts: a tree with damage stays as it is.
        let mut ready = Vec::with_capacity(unfinished.len());
        let mut damaged = Vec::new();
        for workflow in unfinished {
            if durable.ids.contains(Pid(workflow.start.num)) {
                continue;
            }
            match durable.resolve(&self.inner.wasm, &grants, workflow)? {
                Ok(resolved) => ready.push(resolved),
                Err(damage) => damaged.push(damage),
            }
        }
        let (ready, held) = hold_damaged_trees(ready, damaged, |num| {
            let workflow = durable.reader.lock().workflow_by_num(num).ok().flatten();
            workflow.and_then(|w| w.start.parent)
        });
        handled.extend(held.iter().map(|(w, _)| w.start.num));
        durable.note_damage(held)?;
        let Started {
            runs,
            recovered,
            cancels,
        } = self.start_recovered(&durable, ready, handled)?;
        self.redeliver(&durable, messages, &recovered);
        drop(gate);
        for pid in cancels {
            let _ = self.inner.handle.cancel(pid);
        }
        if durable.shared() {
            durable.take_waiting();
        }
        Ok(runs)
    }

    /// The unfinished workflows to recover, parents first, and the messages the store holds for
    /// them: on a shared store, those of up to `limit` trees this host claims now (`None` when
    /// there are none); on a store of its own, every one.
    fn gather(
        &self,
        durable: &Durable,
        limit: usize,
        claimed_out: &mut Vec<u64>,
    ) -> Result<Option<(Vec<Workflow>, Vec<Message>)>> {
        let Some(lease) = durable.lease.get() else {
            let mut reader = durable.reader.lock();
            let unfinished = reader.workflows(true).map_err(store_error)?;
            let messages = reader.messages().map_err(store_error)?;
            return Ok(Some((parents_first(unfinished), messages)));
        };
        let claimed = lease.store.lock().claim(limit, None).map_err(store_error)?;
        claimed_out.extend(&claimed);
        if claimed.is_empty() {
            return Ok(None);
        }
        let taken = lease
            .store
            .lock()
            .take_messages(Some(&claimed))
            .map_err(store_error)?;
        let mut reader = durable.reader.lock();
        let mut unfinished = Vec::with_capacity(claimed.len());
        for num in claimed {
            if let Some(workflow) = reader.workflow_by_num(num).map_err(store_error)? {
                unfinished.push(workflow);
            }
        }
        // Refused messages say why to the senders that had not heard; the waiting ones were
        // taken for this host alone.
        let mut messages: Vec<Message> = reader.refused_from(claimed_out).map_err(store_error)?;
        messages.extend(taken.into_iter().map(|message| Message {
            message,
            refused: None,
        }));
        Ok(Some((parents_first(unfinished), messages)))
    }

    /// Starts each of `ready` (parents first) from its snapshot and journal: the runs of the
    /// top-level ones, the numbers of all, and the cancels owed once the gate opens.
    fn start_recovered(
        &self,
        durable: &Arc<Durable>,
        ready: Vec<Ready>,
        handled: &mut HashSet<u64>,
    ) -> Result<Started> {
        let inner = &self.inner;
        let mut runs = Vec::new();
        let mut recovered: HashSet<u64> = HashSet::new();
        let mut cancels = Vec::new();
        let mut repaired = Vec::new();
        for Ready {
            workflow,
            loaded,
            saved,
            records,
            input,
        } in ready
        {
            let start = &workflow.start;
            let pid = Pid(start.num);
            let id: Arc<str> = Arc::from(start.id.as_str());
            let process = WasmProcess::new(
                Arc::clone(&inner.wasm),
                loaded.spec(None, Arc::clone(&inner.wasm.limits)),
            );
            let process = DurableProcess::new(
                process,
                Arc::clone(durable),
                Arc::clone(&id),
                Arc::from(start.module.as_str()),
            )
            .recovered(saved, records);
            durable.ids.insert(pid, Arc::clone(&id));
            // Linked to its parent if the parent runs again too; a parent that ended had
            // cancelled it.
            let parent = start.parent.map(Pid).filter(|p| recovered.contains(&p.0));
            let orphaned = start.parent.is_some() && parent.is_none();
            let run = match self.spawn_durable(process, pid, parent, &start.entry, input) {
                Ok(run) => run,
                Err(error) => {
                    durable.ids.remove(pid);
                    return Err(error);
                }
            };
            recovered.insert(start.num);
            handled.insert(start.num);
            if !durable.damaged.lock().is_empty() {
                durable.damaged.lock().retain(|d| d.id != start.id);
            }
            if workflow.damaged.is_some() {
                repaired.push(super::store::Op::Damaged {
                    num: start.num,
                    why: None,
                });
            }
            // On a shared store, asked cancels are taken after the recovery (`take_waiting`).
            let asked = workflow.cancel == Cancel::Asked && !durable.shared();
            if asked || (orphaned && workflow.cancel == Cancel::No) {
                // Once the gate is open: a cancel's grace period runs from there.
                cancels.push(pid);
            }
            if start.parent.is_none() {
                runs.push((start.id.clone(), run));
            }
        }
        if !repaired.is_empty() {
            // Read back in full this time: no longer damaged.
            durable.write(repaired)?;
        }
        Ok(Started {
            runs,
            recovered,
            cancels,
        })
    }

    /// Delivers again the messages that waited in the store for the workflows just recovered;
    /// refused ones tell their senders why (they were told before the restart, or are now).
    fn redeliver(&self, durable: &Durable, messages: Vec<Message>, recovered: &HashSet<u64>) {
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
                    durable.refuse(m.id, &why);
                    continue;
                }
            };
            if let Err(refused) =
                self.inner
                    .handle
                    .send_numbered(Pid(m.sender), Pid(m.receiver), m.id, payload)
            {
                durable.refuse(m.id, &refused.to_string());
            }
        }
    }

    /// What recoveries by this host found damaged and left as it was: workflows whose journal,
    /// input or module cannot be read back from the store, and the others of their trees. They
    /// are marked damaged in the store (not failed), and a host started once the store is
    /// repaired, or the build fixed, resumes them.
    pub fn damaged(&self) -> Result<Vec<Damage>> {
        Ok(self.durable()?.damaged.lock().clone())
    }
}

/// `workflows` with every parent before its children (a tree taken over from another host may
/// have children numbered below their parent, in the range of the host that spawned them).
fn parents_first(mut workflows: Vec<Workflow>) -> Vec<Workflow> {
    workflows.sort_by_key(|w| w.start.num);
    let nums: HashSet<u64> = workflows.iter().map(|w| w.start.num).collect();
    let mut placed = HashSet::new();
    let mut ordered = Vec::with_capacity(workflows.len());
    while !workflows.is_empty() {
        let before = workflows.len();
        workflows.retain(|w| {
            let ready = w
                .start
                .parent
                .is_none_or(|p| !nums.contains(&p) || placed.contains(&p));
            if ready {
                placed.insert(w.start.num);
                ordered.push(w.clone());
            }
            !ready
        });
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
    use crate::durable::store::{Cancel, NewWorkflow, State};

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
            },
            state: State::Running,
            ending: None,
            finished: None,
            steps: 0,
            cancel: Cancel::No,
            damaged: None,
            unread: 0,
            owner: None,
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
