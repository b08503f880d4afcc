//! What recovery reads back for each workflow before it starts any: its module, its snapshot, its
//! journal and its input. A workflow any of them cannot be read back for is damaged: it and the
//! rest of its tree (its top-level ancestor and everything that spawned from it) are left as they
//! are, marked damaged in the store with why, so that a repaired store or a fixed build resumes
//! them later. Nothing in such a tree runs, is failed, or is cancelled.

use std::collections::{HashMap, HashSet};

use rustc_hash::FxHashMap;
use std::sync::Arc;

use wfcontract::Payload;

use super::process::Standing;
use super::record::StepRecord;
use super::snapshot::SavedWorkflow;
use super::snapshot::Whose;
use super::store::{Step, Workflow};
use super::{store_error, Durable};
use crate::error::Result;
use crate::grants::Grants;
use crate::wasm::Loaded;
use crate::wasm::WasmRuntime;

/// A workflow a recovery found it cannot read back, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Damage {
    /// The workflow's id.
    pub id: String,
    /// What cannot be read back (the step, the input, the module), or, for the others of its
    /// tree, which workflow of the tree is damaged.
    pub why: String,
}

/// A workflow with everything it needs to start again: where it stands (it starts dormant),
/// or, when it has taken no step (or its last ended it), its snapshot and journal.
pub(crate) struct Ready {
    pub(crate) workflow: Workflow,
    pub(crate) loaded: Loaded,
    pub(crate) standing: Option<Standing>,
    pub(crate) saved: Option<SavedWorkflow>,
    pub(crate) records: Vec<StepRecord>,
    pub(crate) input: Payload,
}

/// The name a module kept in the store is loaded under to recover its workflows (their children
/// without a module name run it too).
pub(crate) fn stored_name(hash: &str) -> String {
    format!("wfhost:{hash}")
}

/// What a recovery found for one workflow.
pub(crate) enum Resolved {
    /// Everything it needs to start again.
    Ready(Box<Ready>),
    /// Something it needs cannot be read back: why.
    Damaged(Workflow, String),
    /// Its module is not loaded in this host, and no grants were given for modules that are
    /// not: it waits for a host that loads it.
    Unloaded(Workflow),
}

impl Durable {
    /// Reads back what each of `workflows` needs to start again (see [`Resolved`]), in their
    /// order; `Err` when the store could not be read at all. `grants` are for a module this
    /// host has not loaded (`None`: its workflows wait for a host that loads it). The journals
    /// are read in one pass over the store (`Read::tails`), each checked and reduced to where
    /// its workflow stands as it comes.
    pub(crate) fn resolve_all_of(
        &self,
        wasm: &Arc<WasmRuntime>,
        grants: Option<&Grants>,
        workflows: Vec<Workflow>,
    ) -> Result<Vec<Resolved>> {
        // Each module once.
        let mut modules: HashMap<String, Option<std::result::Result<Loaded, String>>> =
            HashMap::new();
        for workflow in &workflows {
            let hash = &workflow.start.module;
            if !modules.contains_key(hash) {
                let module = match self.grants_for(grants, hash) {
                    Some(grants) => Some(self.stored_module(wasm, &grants, hash)?),
                    None => None,
                };
                modules.insert(hash.clone(), module);
            }
        }
        let mut resolved: Vec<Option<Resolved>> = Vec::with_capacity(workflows.len());
        let mut waiting: Vec<Option<(Workflow, Loaded)>> = Vec::with_capacity(workflows.len());
        let mut at = FxHashMap::default();
        for (index, workflow) in workflows.into_iter().enumerate() {
            match &modules[&workflow.start.module] {
                None => {
                    resolved.push(Some(Resolved::Unloaded(workflow)));
                    waiting.push(None);
                }
                Some(Err(why)) => {
                    resolved.push(Some(Resolved::Damaged(workflow, why.clone())));
                    waiting.push(None);
                }
                Some(Ok(loaded)) => {
                    at.insert(workflow.start.num, index);
                    resolved.push(None);
                    waiting.push(Some((workflow, loaded.clone())));
                }
            }
        }
        let mut nums: Vec<u64> = at.keys().copied().collect();
        nums.sort_unstable();
        let max_memory = wasm.limits.max_memory_bytes;
        // Those whose snapshot is not used: their whole journal is read after the pass.
        let mut whole = Vec::new();
        self.reader
            .lock()
            .tails(&nums, &mut |num, snapshot, steps| {
                let index = at[&num];
                let Some((workflow, loaded)) = waiting[index].take() else {
                    return Ok(());
                };
                let after = snapshot.as_ref().map_or(0, |s| s.seq);
                let saved = snapshot.and_then(|snapshot| {
                    self.saved_from(Whose::of(&workflow), snapshot, &loaded.compiled, max_memory)
                });
                if saved.is_none() && after > 0 {
                    whole.push((index, workflow, loaded));
                    return Ok(());
                }
                resolved[index] = Some(resolve_one(workflow, loaded, saved, &steps));
                Ok(())
            })
            .map_err(store_error)?;
        for (index, workflow, loaded) in whole {
            let steps = self
                .reader
                .lock()
                .steps(workflow.start.num, 0)
                .map_err(store_error)?;
            resolved[index] = Some(resolve_one(workflow, loaded, None, &steps));
        }
        // Every workflow accounted for: one the store's pass skipped is an error, not a
        // workflow left claimed and not running.
        let mut all = Vec::with_capacity(resolved.len());
        for (index, resolved) in resolved.into_iter().enumerate() {
            match resolved {
                Some(resolved) => all.push(resolved),
                None => {
                    let num = at.iter().find(|(_, i)| **i == index).map_or(0, |(n, _)| *n);
                    return Err(crate::Error::new(
                        crate::ErrorKind::Store,
                        format!(
                            "the store's read of the journals to recover skipped workflow {num}"
                        ),
                    ));
                }
            }
        }
        Ok(all)
    }

    /// The grants a workflow of module `hash` runs with when the embedder has not loaded those
    /// bytes: `grants` given for modules not loaded, or those the host gave the store's copy of
    /// them before. `None`: neither, and the workflow waits for a host that loads its module.
    /// A module loaded with the same bytes needs none (it runs with its own grants).
    ///
    /// Never those of a module loaded under the name the workflow started with: a client
    /// names its start's module as it likes, and must not get an embedder's host functions for
    /// bytes of its own.
    fn grants_for(&self, grants: Option<&Grants>, hash: &str) -> Option<Grants> {
        match (self.modules.by_hash(hash), grants) {
            (Some(loaded), None) if *loaded.name == stored_name(hash) => {
                Some((*loaded.grants).clone())
            }
            (Some(_), None) => Some(Grants::default()),
            (_, Some(grants)) => Some(grants.clone()),
            // Loaded before and let go when nothing used it: the grants it had.
            (None, None) => self.modules.remembered(&stored_name(hash)),
        }
    }

    /// The module with SHA-256 `hash`: one loaded with the same bytes, or the bytes the store
    /// kept, compiled and loaded under [`stored_name`] with `grants`. `Ok(Err(why))` when the
    /// store lacks the bytes or they are not that module.
    fn stored_module(
        &self,
        wasm: &Arc<WasmRuntime>,
        grants: &Grants,
        hash: &str,
    ) -> Result<std::result::Result<Loaded, String>> {
        let name = stored_name(hash);
        if let Some(loaded) = self.modules.by_hash(hash) {
            if *loaded.name != name || *loaded.grants == *grants {
                return Ok(Ok(loaded));
            }
            // The store's copy, loaded before with other grants: these apply from now on.
            return Ok(Ok(self.modules.insert_stored(
                &name,
                Arc::clone(&loaded.compiled),
                grants.clone(),
            )));
        }
        let bytes: Option<Vec<u8>> = self.reader.lock().module(hash).map_err(store_error)?;
        let Some(bytes) = bytes else {
            return Ok(Err(format!("the store lacks its module {hash}")));
        };
        let compiled = match wasm.compile(&bytes) {
            Ok(compiled) => compiled,
            Err(error) => {
                return Ok(Err(format!(
                    "its module {hash}, as the store kept it, cannot be loaded: {}",
                    error.message()
                )))
            }
        };
        if compiled.info.sha256 != hash {
            return Ok(Err(format!(
                "the store's bytes for its module {hash} are another module's ({})",
                compiled.info.sha256
            )));
        }
        Ok(Ok(self.modules.insert_stored(
            &name,
            compiled,
            grants.clone(),
        )))
    }

    /// Notes what a recovery found damaged, in the store (so that `wfhost list` and `status`
    /// show it) and for [`Host::damaged`](crate::Host::damaged).
    pub(crate) fn note_damage(&self, damaged: Vec<(Workflow, String)>) -> Result<()> {
        if damaged.is_empty() {
            return Ok(());
        }
        let mut ops = Vec::with_capacity(damaged.len());
        let mut found = self.damaged.lock();
        for (workflow, why) in damaged {
            tracing::error!(
                workflow = %workflow.start.id,
                "left as it was, not resumed: {why}; once the store is repaired (or the build \
                 fixed), a host resumes it"
            );
            if workflow.damaged.as_deref() != Some(why.as_str()) {
                ops.push(super::store::Op::Damaged {
                    num: workflow.start.num,
                    why: Some(why.clone()),
                });
            }
            if let Some(known) = found.iter_mut().find(|d| d.id == workflow.start.id) {
                known.why = why;
            } else {
                found.push(Damage {
                    id: workflow.start.id,
                    why,
                });
            }
        }
        drop(found);
        if ops.is_empty() {
            return Ok(());
        }
        self.write(ops)
    }
}

/// What `workflow` needs to start again, from its module, its snapshot (`saved`, if one is
/// used) and its journal after it (`steps`): where it stands, once every step and its input
/// decode.
fn resolve_one(
    workflow: Workflow,
    loaded: Loaded,
    saved: Option<SavedWorkflow>,
    steps: &[Step],
) -> Resolved {
    let mut records = Vec::with_capacity(steps.len());
    for step in steps {
        match StepRecord::decode(&step.record) {
            Ok(record) => records.push(record),
            Err(e) => {
                let why = format!("step {} of its journal does not decode ({e})", step.seq);
                return Resolved::Damaged(workflow, why);
            }
        }
    }
    let input: Payload = match postcard::from_bytes(&workflow.start.input) {
        Ok(input) => input,
        Err(e) => {
            let why = format!("its input does not decode ({e})");
            return Resolved::Damaged(workflow, why);
        }
    };
    // Checked: where it stands is all it keeps until its first event.
    let standing = Standing::of(saved.as_ref(), &records);
    let (saved, records) = match standing {
        Some(_) => (None, Vec::new()),
        None => (saved, records),
    };
    Resolved::Ready(Box::new(Ready {
        workflow,
        loaded,
        standing,
        saved,
        records,
        input,
    }))
}

/// Of `ready` and `damaged`, which workflows a recovery must leave: the damaged ones and every
/// other workflow of their trees (a tree is a top-level workflow and what spawned from it).
/// `parent_of` gives the parent of a workflow this recovery does not have (one that ended): a
/// tree is followed through them to its top. Returns the `ready` ones to start, and the damaged
/// with why, the others of their trees included.
pub(crate) fn hold_damaged_trees(
    ready: Vec<Ready>,
    damaged: Vec<(Workflow, String)>,
    parent_of: impl FnMut(u64) -> Option<u64>,
) -> (Vec<Ready>, Vec<(Workflow, String)>) {
    if damaged.is_empty() {
        return (ready, damaged);
    }
    let known: Vec<(u64, Option<u64>)> = ready
        .iter()
        .map(|r| &r.workflow)
        .chain(damaged.iter().map(|(w, _)| w))
        .map(|w| (w.start.num, w.start.parent))
        .collect();
    let broken: Vec<u64> = damaged.iter().map(|(w, _)| w.start.num).collect();
    let held_by = held_trees(&known, &broken, parent_of);
    let ids: HashMap<u64, String> = damaged
        .iter()
        .map(|(w, _)| (w.start.num, w.start.id.clone()))
        .collect();
    let mut held = damaged;
    let mut start = Vec::with_capacity(ready.len());
    for r in ready {
        match held_by
            .get(&r.workflow.start.num)
            .and_then(|num| ids.get(num))
        {
            Some(damaged_id) => {
                let why = format!(
                    "workflow '{damaged_id}' of its tree is damaged, and the tree is left as it \
                     is"
                );
                held.push((r.workflow, why));
            }
            None => start.push(r),
        }
    }
    (start, held)
}

/// For each workflow of `known` (number, parent) in the tree of one of `damaged`, that damaged
/// workflow's number. A tree is found by following parents to the top, through workflows not in
/// `known` with `parent_of`.
fn held_trees(
    known: &[(u64, Option<u64>)],
    damaged: &[u64],
    mut parent_of: impl FnMut(u64) -> Option<u64>,
) -> HashMap<u64, u64> {
    let mut parents: HashMap<u64, Option<u64>> = known.iter().copied().collect();
    let mut root = |mut num: u64| {
        let mut seen = HashSet::new();
        while seen.insert(num) {
            let parent = *parents.entry(num).or_insert_with(|| parent_of(num));
            match parent {
                Some(parent) => num = parent,
                None => break,
            }
        }
        num
    };
    let mut damaged_root: HashMap<u64, u64> = HashMap::new();
    for &num in damaged {
        damaged_root.entry(root(num)).or_insert(num);
    }
    known
        .iter()
        .filter_map(|(num, _)| damaged_root.get(&root(*num)).map(|d| (*num, *d)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_tree_is_held_whole_through_workflows_that_ended() {
        // 1 is damaged; 2 (its child) ended, so 3 (2's child) is found in 1's tree through the
        // store. 10 and 11 are a tree of their own; 20 a workflow alone; 30's parent loops.
        let known = [
            (1, None),
            (3, Some(2)),
            (10, None),
            (11, Some(10)),
            (20, None),
            (30, Some(31)),
        ];
        let ended = |num| match num {
            2 => Some(1),
            31 => Some(30),
            _ => None,
        };
        let held = held_trees(&known, &[1], ended);
        let mut nums: Vec<(u64, u64)> = held.into_iter().collect();
        nums.sort_unstable();
        assert_eq!(nums, [(1, 1), (3, 1)]);
        // Two damaged in one tree: the tree is held once, named after the first.
        let held = held_trees(&known, &[11, 10], ended);
        assert_eq!(held.get(&10), Some(&11));
        assert_eq!(held.get(&11), Some(&11));
        assert_eq!(held.len(), 2);
        // A loop of parents ends the walk.
        assert_eq!(held_trees(&known, &[30], ended).get(&30), Some(&30));
    }
}
