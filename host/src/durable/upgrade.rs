//! New code for a running workflow. The workflow's whole journal is replayed against the new
//! module first (in an instance of its own, touching nothing); only if every step does what the
//! journal says is the switch written, and the workflow goes on with the new module from where
//! it stands. A workflow that runs here switches between two of its steps: the request waits
//! for its process (`DurableProcess::prepare` takes it), which checks and switches itself, so no
//! step of the old code can slip in between the check and the switch. One that runs nowhere
//! (on a store of this host's own: waiting for its module; on a store hosts share: owned by
//! none) is checked and switched in the store, on the condition that its journal has not moved.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use wfcontract::{Payload, Pid};
use wfhost_scheduler::{FailureKind, InitContext};

use super::process::DurableProcess;
use super::record::StepRecord;
use super::resolve::stored_name;
use super::store::{self, State, Workflow};
use super::{store_error, Durable};
use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::wasm::Loaded;

/// How often a workflow that has not taken its upgrade yet is woken again.
const WAKE_AGAIN: Duration = Duration::from_millis(50);

/// How long an upgrade waits for a workflow that runs here to take it (it takes it between two
/// steps: at once, unless a step of its runs long).
const TAKE_WITHIN: Duration = Duration::from_secs(30);

/// What an upgrade did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upgraded {
    /// The module's hash the workflow ran.
    pub from: String,
    /// The module's hash it runs from now on.
    pub to: String,
    /// The steps of its journal the new module replayed the same (0 when it already ran it).
    pub steps: u64,
    /// It already ran this module: nothing changed.
    pub already: bool,
}

/// An upgrade for a workflow that runs here, waiting for its process to take it.
pub(crate) struct Request {
    /// The new module, as loaded here: its name is what its spawns of "this module" run.
    pub(crate) loaded: Loaded,
    pub(crate) bytes: Arc<[u8]>,
    pub(crate) reply: Sender<Result<u64>>,
}

/// The upgrades waiting for their processes, by workflow number, and how many (a turn of a
/// process looks at the count only).
#[derive(Default)]
pub(crate) struct Upgrades {
    waiting: Mutex<HashMap<u64, Request>>,
    count: AtomicUsize,
}

impl Upgrades {
    /// The upgrade waiting for workflow `num`, if any.
    pub(crate) fn take(&self, num: u64) -> Option<Request> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut waiting = self.waiting.lock();
        let request = waiting.remove(&num);
        self.count.store(waiting.len(), Ordering::Release);
        request
    }

    /// Puts `request` for workflow `num`, unless one waits for it already.
    fn put(&self, num: u64, request: Request) -> bool {
        let mut waiting = self.waiting.lock();
        if waiting.contains_key(&num) {
            return false;
        }
        waiting.insert(num, request);
        self.count.store(waiting.len(), Ordering::Release);
        true
    }

    /// Takes back the request for `num` that nothing took: whether it was still there.
    fn withdraw(&self, num: u64) -> bool {
        let mut waiting = self.waiting.lock();
        let found = waiting.remove(&num).is_some();
        self.count.store(waiting.len(), Ordering::Release);
        found
    }
}

impl Durable {
    /// Upgrades workflow `id` to the module `bytes` (see [`Host::upgrade`](crate::Host::upgrade)).
    pub(crate) fn upgrade(
        self: &Arc<Self>,
        engine: &Engine,
        id: &str,
        bytes: &[u8],
        grants: crate::grants::Grants,
    ) -> Result<Upgraded> {
        self.writable()?;
        let compiled = engine.wasm.compile(bytes)?;
        let to = compiled.info.sha256.clone();
        let workflow = self.running_workflow(id)?;
        let from = workflow.start.module.clone();
        if from == to {
            return Ok(Upgraded {
                from,
                to,
                steps: 0,
                already: true,
            });
        }
        if !compiled.info.has_entry(&workflow.start.entry) {
            return Err(Error::new(
                ErrorKind::UnknownEntry,
                format!(
                    "the new module has no entry point '{}', which workflow '{id}' runs: nothing \
                     changed",
                    workflow.start.entry
                ),
            ));
        }
        // The module as this host loaded those bytes, with their grants; or loaded under the
        // name the store's copy takes, with `grants`: what the workflow, and its spawns of
        // "this module", run from now on. Never the grants of the module it ran: new code
        // gets no more than a recovery would give it. Held here while the upgrade runs, and
        // then by the workflow if it switched; one that did not leaves it to the cache of
        // the store's copies, which lets it go once nothing holds it (never while another
        // upgrade or a start that came meanwhile uses it).
        let loaded = match engine.modules.by_hash(&to) {
            Some(loaded) => loaded,
            None => engine
                .modules
                .insert_stored(&stored_name(&to), Arc::clone(&compiled), grants),
        };
        let bytes: Arc<[u8]> = Arc::from(bytes);
        let steps = match self.ids.pid_of(id) {
            Some(pid) => self.upgrade_here(pid, &loaded, &bytes),
            None => self.upgrade_in_store(engine, &workflow, &loaded, &bytes),
        }?;
        Ok(Upgraded {
            from,
            to,
            steps,
            already: false,
        })
    }

    /// Workflow `id` as the store has it, or an [`ErrorKind::UnknownWorkflow`] error.
    pub(crate) fn stored_workflow(&self, id: &str) -> Result<Workflow> {
        self.reader
            .lock()
            .workflow(id)
            .map_err(store_error)?
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::UnknownWorkflow,
                    format!("no workflow '{id}' in the store"),
                )
            })
    }

    /// The unfinished workflow `id`, or why there is nothing to upgrade.
    fn running_workflow(&self, id: &str) -> Result<Workflow> {
        let workflow = self.stored_workflow(id)?;
        if workflow.state != State::Running {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("workflow '{id}' has ended: there is nothing to upgrade"),
            ));
        }
        Ok(workflow)
    }

    /// Hands the upgrade to the process of `pid`, which runs here, and waits for its answer.
    fn upgrade_here(&self, pid: Pid, loaded: &Loaded, bytes: &Arc<[u8]>) -> Result<u64> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        let request = Request {
            loaded: loaded.clone(),
            bytes: Arc::clone(bytes),
            reply,
        };
        if !self.upgrades.put(pid.0, request) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "another upgrade of this workflow is under way; try again once it has ended",
            ));
        }
        self.answer(pid, &answer)
    }

    /// The answer of the process of `pid` to its upgrade. It is woken to take it, even if it
    /// waits (or is paused), and woken again while it has not: a wake that reaches it in the
    /// middle of its turn (its step held until the journal has it) ends in that turn, which
    /// does not look for upgrades. Not taken in time, the request is withdrawn and nothing has
    /// changed; taken, its answer comes however long it takes.
    fn answer(&self, pid: Pid, answer: &Receiver<Result<u64>>) -> Result<u64> {
        let deadline = std::time::Instant::now() + TAKE_WITHIN;
        let received = loop {
            if let Some(waker) = self.scheduler().and_then(|s| s.waker(pid)) {
                waker.wake();
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match answer.recv_timeout(left.min(WAKE_AGAIN)) {
                Err(RecvTimeoutError::Timeout) if !left.is_zero() => continue,
                other => break other,
            }
        };
        match received {
            Ok(answered) => answered,
            Err(RecvTimeoutError::Timeout) if self.upgrades.withdraw(pid.0) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "the workflow took no turn in {} s (a long step, or a host short of \
                     instances): nothing changed; try again",
                    TAKE_WITHIN.as_secs()
                ),
            )),
            Err(_) => answer.recv().unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::ShuttingDown,
                    "the workflow ended or its host stopped before it answered: look at its \
                     status to see which module it runs",
                ))
            }),
        }
    }

    /// Upgrades a workflow that runs on no host: checked against its journal, then switched
    /// in the store if its journal has not moved meanwhile (and, on a store hosts share, no
    /// host took it).
    fn upgrade_in_store(
        self: &Arc<Self>,
        engine: &Engine,
        workflow: &Workflow,
        loaded: &Loaded,
        bytes: &Arc<[u8]>,
    ) -> Result<u64> {
        let compiled = &loaded.compiled;
        let start = &workflow.start;
        let shared = self.lease.get().is_some();
        if shared && workflow.owner.is_some() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "workflow '{}' runs on host {} (or did last): upgrade it through that host \
                     (`wfhost upgrade --server` at its HTTP address), or once no host owns it",
                    start.id,
                    workflow.owner.unwrap_or_default()
                ),
            ));
        }
        let records = self.journal_of(start.num, &start.id)?;
        let steps = records.len() as u64;
        self.check_upgrade(engine.process(loaded), workflow, records)?;
        self.write(vec![
            store::Op::Module {
                hash: compiled.info.sha256.clone(),
                bytes: Arc::clone(bytes),
            },
            store::Op::Upgrade {
                num: start.num,
                from: start.module.clone(),
                to: compiled.info.sha256.clone(),
                steps,
                unowned: shared,
            },
        ])?;
        let now = self.running_workflow(&start.id)?;
        if now.start.module != compiled.info.sha256 {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "workflow '{}' moved on while it was checked (a host took it, or it took a \
                     step): nothing changed; try again",
                    start.id
                ),
            ));
        }
        Ok(steps)
    }

    /// Workflow `num`'s whole journal, decoded.
    pub(crate) fn journal_of(&self, num: u64, id: &str) -> Result<Vec<StepRecord>> {
        let steps = self.reader.lock().steps(num, 0).map_err(store_error)?;
        steps
            .iter()
            .map(|s| StepRecord::decode(&s.record))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::new(ErrorKind::Store, format!("the journal of '{id}': {e}")))
    }

    /// Replays `records` (workflow `workflow`'s whole journal) in `process` (of the new
    /// module, not started), which is then closed: the steps replayed, or at which step and why
    /// the new module differs.
    pub(crate) fn check_upgrade(
        self: &Arc<Self>,
        process: crate::wasm::WasmProcess,
        workflow: &Workflow,
        records: Vec<StepRecord>,
    ) -> Result<u64> {
        let id = &workflow.start.id;
        self.replays(process, workflow, records)?
            .map_err(|why| refused(id, &why))
    }

    /// Replays `records` (the first steps of workflow `workflow`'s journal) in `process` (of
    /// another module, not started), which is then closed: the steps replayed, or why the
    /// module differs (`Ok(Err(why))`, naming the step). An error: the check could not run.
    pub(crate) fn replays(
        self: &Arc<Self>,
        process: crate::wasm::WasmProcess,
        workflow: &Workflow,
        records: Vec<StepRecord>,
    ) -> Result<std::result::Result<u64, String>> {
        let start = &workflow.start;
        let input = stored_input(workflow)?;
        let hash = process.sha256();
        // What it prints was printed when the steps ran.
        let mut process = process;
        process.mute(true);
        let process = DurableProcess::new(
            process,
            Arc::clone(self),
            Arc::from(start.id.as_str()),
            hash,
        )
        .checking(records);
        let ctx = InitContext::new(Pid(start.num), start.parent.map(Pid));
        match process.check_replay(&ctx, &start.entry, input) {
            Ok(steps) => Ok(Ok(steps)),
            Err(e) if e.kind() == FailureKind::Nondeterminism => Ok(Err(e.message().to_string())),
            // The check could not run (no instance, no memory for it now): nothing is known
            // against the new module, and nothing changed.
            Err(e) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "workflow '{}' could not be checked against the new module now ({}): \
                         nothing changed; try again",
                    start.id,
                    e.message()
                ),
            )),
        }
    }
}

/// A workflow's input, as the store keeps it.
pub(crate) fn stored_input(workflow: &Workflow) -> Result<Payload> {
    postcard::from_bytes(&workflow.start.input).map_err(|e| {
        Error::new(
            ErrorKind::Store,
            format!("the stored input of '{}': {e}", workflow.start.id),
        )
    })
}

/// An upgrade refused because the new module does not replay the journal: a conflict between
/// the new code and the history, which names the step.
pub(crate) fn refused(id: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!("workflow '{id}' was not upgraded (it runs the module it ran): {why}"),
    )
}
