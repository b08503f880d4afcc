//! A reset: a finished top-level workflow runs again from one of its steps. The new run keeps
//! the journal up to that step (replayed, so what those steps did is not done again), takes the
//! id, and goes on from there: what the run before did after the step is done again, by the new
//! run, with idempotency keys of its own. The run before stays in the store, whole, under the id
//! of a past run (`order-7/run-1`), with its children.
//!
//! Not reset: a workflow still running (cancel it first), a child (reset its top-level
//! workflow), and a journal whose kept steps spawned a child (that child belongs to the run
//! before: reset to a step before the spawn).

use std::sync::Arc;

use wfcontract::{EventKind, Pid, Status};

use super::record::StepRecord;
use super::recover::Which;
use super::resolve::stored_name;
use super::store::{self, Filter, NewMessage, NewStep, NewWorkflow, Op, State, Workflow};
use super::{now_millis, store_error, Durable};
use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::ids::run_id;
use crate::wasm::Loaded;

/// What a reset did ([`Host::reset`](crate::Host::reset)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowReset {
    /// The workflow's id: the new run's.
    pub id: String,
    /// The new run's number among the runs of its id (the first run is 1).
    pub run: u64,
    /// The id the run before is kept under (`order-7/run-1`).
    pub previous: String,
    /// The steps of the run before's journal the new run keeps (replayed, not run again).
    pub steps: u64,
    /// The module the new run runs (its SHA-256, in hex).
    pub module: String,
    /// Messages clients sent the run before, sent again to the new run: those it took after the
    /// steps kept, then those it never read.
    pub messages: u64,
}

/// Where a reset goes back to by default, and the most it may keep with why not more: the
/// steps before the one that took a cancel, or ended the run. Of a failed run, by default, the
/// steps before the last that took a failed completion (the call whose failure failed it runs
/// again), if one did.
fn reach(records: &[StepRecord], failed: bool) -> (u64, u64, Option<&'static str>) {
    let cancel = records
        .iter()
        .position(|r| r.events.iter().any(|e| e.kind == EventKind::Cancel));
    if let Some(at) = cancel {
        return (at as u64, at as u64, Some("took the cancel"));
    }
    let (most, why) = match records.last().map(|r| &r.output.status) {
        Some(Status::Done(_) | Status::Failed(_) | Status::Cancelled(_)) => {
            (records.len() as u64 - 1, Some("ended the run"))
        }
        _ => (records.len() as u64, None),
    };
    let failed_call = records
        .iter()
        .rposition(|r| r.events.iter().any(|e| e.error.is_some()));
    let default = match failed_call {
        Some(at) if failed => (at as u64).min(most),
        _ => most,
    };
    (default, most, why)
}

impl Durable {
    /// Resets workflow `id` to step `to_step` (`None`: the latest it may go back to), with
    /// module `wasm` in place of its own if given (see [`Host::reset`](crate::Host::reset));
    /// the new run starts here if `start`, else it waits for whoever recovers the store.
    pub(crate) fn reset(
        self: &Arc<Self>,
        engine: &Engine,
        id: &str,
        to_step: Option<u64>,
        wasm: Option<&[u8]>,
        grants: Grants,
        start: bool,
    ) -> Result<WorkflowReset> {
        engine.running()?;
        self.writable()?;
        // One reset at a time here; on a store hosts share, the store refuses the second of
        // two (its id no longer names the run it reset).
        let _one = self.resetting.lock();
        let workflow = self.finished_top_level(id)?;
        let num = workflow.start.num;
        let records = self.journal_of(num, id)?;
        let failed = workflow.state == State::Failed;
        let (default, most, why_not) = reach(&records, failed);
        let keep = to_step.unwrap_or(default);
        if keep > most {
            let why = match why_not {
                Some(why) => format!("step {} {why}", most + 1),
                None => format!("it has {most} step(s)"),
            };
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("workflow '{id}' can be reset to step {most} at most: {why}"),
            ));
        }
        let kept = &records[..keep as usize];
        if let Some(at) = kept.iter().position(|r| !r.spawned.is_empty()) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "step {} of workflow '{id}' spawned a child, which belongs to the run it \
                     reset: reset it to step {at} or before (`--to-step {at}`)",
                    at + 1
                ),
            ));
        }
        let tree = self.descendants(num)?;
        if let Some(child) = tree.iter().find(|w| w.state == State::Running) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "workflow '{id}' has a child that has not finished ('{}'): wait for it, or \
                     cancel it, and reset again",
                    child.start.id
                ),
            ));
        }
        let previous = run_id(id, workflow.run);
        if self
            .reader
            .lock()
            .workflow(&previous)
            .map_err(store_error)?
            .is_some()
        {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("the store has a workflow '{previous}' already: nothing was reset"),
            ));
        }
        let pid = engine.handle.reserve_pid();
        let (loaded, module_op) = self.reset_module(engine, &workflow, wasm, grants.clone())?;
        let module = loaded.compiled.info.sha256.clone();
        let module_name = match wasm {
            None => workflow.start.module_name.clone(),
            Some(_) => loaded.name.to_string(),
        };
        // The steps kept, replayed as the new run (its own number: a step that used it, as a
        // reply address say, would differ) before anything is written.
        let mut check = workflow.clone();
        check.start.num = pid.0;
        if let Err(why) = self.replays(engine.process(&loaded), &check, kept.to_vec())? {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "workflow '{id}' was not reset: {} does not replay the {keep} step(s) kept: \
                     {why}",
                    if wasm.is_some() {
                        "the new module"
                    } else {
                        "its new run"
                    }
                ),
            ));
        }
        let steps = self
            .reader
            .lock()
            .step_page(num, 0, Some(keep as usize))
            .map_err(store_error)?;
        // What clients sent it after the steps kept, in the order it took them, then what they
        // sent it that it never read: sent to the new run again. Messages from workflows are
        // not (its own children's, and replies to what it asked, come again as it asks again).
        let unread = self
            .reader
            .lock()
            .unread_from_clients(num)
            .map_err(store_error)?;
        let dropped: Vec<u64> = unread.iter().map(|m| m.id).collect();
        let taken = records[keep as usize..]
            .iter()
            .flat_map(|r| r.events.iter())
            .filter(|e| e.kind == EventKind::Message && e.from == Pid::HOST)
            .map(|e| postcard::to_allocvec(&e.data).unwrap_or_default());
        let messages: Vec<NewMessage> = taken
            .chain(unread.into_iter().map(|m| m.payload))
            .map(|payload| NewMessage {
                id: self.next_message(),
                receiver: pid.0,
                sender: Pid::HOST.0,
                payload,
                local: false,
            })
            .collect();
        let mut renamed = vec![(num, previous.clone())];
        for child in &tree {
            if let Some(rest) = child.start.id.strip_prefix(id) {
                renamed.push((child.start.num, format!("{previous}{rest}")));
            }
        }
        let reset = store::Reset {
            id: id.to_string(),
            from: num,
            renamed,
            workflow: NewWorkflow {
                num: pid.0,
                id: id.to_string(),
                parent: None,
                module: module.clone(),
                module_name,
                entry: workflow.start.entry.clone(),
                input: workflow.start.input.clone(),
                started: now_millis(),
                // The new run's span is in the trace of the runs before it.
                trace: workflow.start.trace.clone(),
            },
            run: workflow.run + 1,
            steps: steps
                .into_iter()
                .map(|step| NewStep {
                    num: pid.0,
                    seq: step.seq,
                    at: step.at,
                    record: step.record,
                    consumed: Vec::new(),
                    took_cancel: false,
                    calls_done: Vec::new(),
                })
                .collect(),
            messages,
            dropped,
        };
        let sent = reset.messages.len() as u64;
        self.write_reset(module_op, reset)?;
        let now = self.reader.lock().workflow(id).map_err(store_error)?;
        if now.is_none_or(|w| w.start.num != pid.0) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "workflow '{id}' was reset (or started again) elsewhere meanwhile: nothing \
                     was reset here; look at its status"
                ),
            ));
        }
        if let Some(metrics) = &self.metrics {
            metrics.core.resets.inc();
        }
        if start {
            // Started here now (on a store hosts share: claimed, unless another host was first).
            if let Err(error) = self.claim_which(engine, Some(grants), Which::Tree(id)) {
                return Err(Error::new(
                    error.kind(),
                    format!(
                        "workflow '{id}' was reset (run {}), but its new run could not start \
                         here ({}): it starts when a host next recovers the store",
                        workflow.run + 1,
                        error.message()
                    ),
                ));
            }
        }
        Ok(WorkflowReset {
            id: id.to_string(),
            run: workflow.run + 1,
            previous,
            steps: keep,
            module,
            messages: sent,
        })
    }

    /// The finished top-level workflow `id`, or why it cannot be reset.
    fn finished_top_level(&self, id: &str) -> Result<Workflow> {
        let workflow = self.stored_workflow(id)?;
        if workflow.start.parent.is_some() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("workflow '{id}' is a child: reset its top-level workflow"),
            ));
        }
        // A top-level id with '/' is a run a reset ended (no start takes one).
        if let Some((root, _)) = id.split_once('/') {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("'{id}' is a run of '{root}' a reset ended: reset '{root}'"),
            ));
        }
        if workflow.state == State::Running {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "workflow '{id}' has not finished: only a finished workflow is reset (cancel \
                     it first, `wfhost cancel {id}`, or upgrade it to new code, `wfhost upgrade`)"
                ),
            ));
        }
        Ok(workflow)
    }

    /// Every workflow under `root` (its children, theirs, ...).
    fn descendants(&self, root: u64) -> Result<Vec<Workflow>> {
        let mut tree = Vec::new();
        let mut parents = vec![root];
        while let Some(parent) = parents.pop() {
            let filter = Filter {
                parent: Some(parent),
                ..Filter::default()
            };
            let mut after = 0;
            loop {
                let page = self
                    .reader
                    .lock()
                    .page(&filter, after, 1_000)
                    .map_err(store_error)?;
                let Some(last) = page.last() else { break };
                after = last.start.num;
                parents.extend(page.iter().map(|w| w.start.num));
                tree.extend(page);
            }
        }
        Ok(tree)
    }

    /// The module a reset's new run runs, loaded: `wasm` (checked for the workflow's entry
    /// point; with the op that keeps its bytes), or the one the workflow ran, from the store.
    /// As an upgrade: the grants of a module loaded here with those bytes, else `grants`.
    fn reset_module(
        self: &Arc<Self>,
        engine: &Engine,
        workflow: &Workflow,
        wasm: Option<&[u8]>,
        grants: Grants,
    ) -> Result<(Loaded, Option<Op>)> {
        let id = &workflow.start.id;
        let stored;
        let bytes = match wasm {
            Some(bytes) => bytes,
            None => {
                let hash = &workflow.start.module;
                if let Some(loaded) = engine.modules.by_hash(hash) {
                    return Ok((loaded, None));
                }
                stored = self
                    .reader
                    .lock()
                    .module(hash)
                    .map_err(store_error)?
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::UnknownModule,
                            format!(
                                "the store no longer keeps the module workflow '{id}' ran: reset \
                                 it with a module (`--module`) that replays the steps kept"
                            ),
                        )
                    })?;
                &stored[..]
            }
        };
        let compiled = engine.wasm.compile(bytes)?;
        let hash = compiled.info.sha256.clone();
        if !compiled.info.has_entry(&workflow.start.entry) {
            return Err(Error::new(
                ErrorKind::UnknownEntry,
                format!(
                    "the new module has no entry point '{}', which workflow '{id}' runs: nothing \
                     was reset",
                    workflow.start.entry
                ),
            ));
        }
        let loaded = match engine.modules.by_hash(&hash) {
            Some(loaded) => loaded,
            None => {
                engine
                    .modules
                    .insert_stored(&stored_name(&hash), Arc::clone(&compiled), grants)
            }
        };
        let op = wasm.map(|bytes| Op::Module {
            hash,
            bytes: Arc::from(bytes),
        });
        Ok((loaded, op))
    }

    /// Writes `reset` (and `module` before it): on a store of this host's own through its
    /// journal; on a store hosts share in a transaction of its own.
    fn write_reset(&self, module: Option<Op>, reset: store::Reset) -> Result<()> {
        match self.lease.get() {
            None => self.write(
                module
                    .into_iter()
                    .chain([Op::Reset(Box::new(reset))])
                    .collect(),
            ),
            Some(lease) => {
                if let Some(module) = module {
                    self.write(vec![module])?;
                }
                lease.store.lock().reset(&reset).map_err(store_error)?;
                Ok(())
            }
        }
    }
}
