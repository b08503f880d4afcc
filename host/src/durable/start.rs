//! Starting durable workflows under ids, and reading where they stand: what
//! [`Host::start`](crate::Host::start), [`Host::result`](crate::Host::result) and
//! [`Host::replay`](crate::Host::replay) do beneath the host.

use std::sync::Arc;

use wfcontract::{Payload, Pid};
use wfhost_scheduler::{FailureKind, InitContext, ProcessError};

use super::process::DurableProcess;
use super::record::StepRecord;
use super::store::{Ending, NewWorkflow, Op, State, Workflow};
use super::{now_millis, store_error, Durable};
use crate::engine::{check_payload, refused_start, Engine, Spawned};
use crate::error::{Error, ErrorKind, Result};
use crate::ids::bad_id;
use crate::wasm::Loaded;

/// Where a durable workflow stands, as [`Host::result`](crate::Host::result) reads it from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkflowResult {
    /// It has not finished (it runs, or waits for a restart to resume it).
    Running,
    /// It finished with this result.
    Done(Payload),
    /// It failed: the kind (as the scheduler names it: "failed", "trap", "nondeterminism", ...)
    /// and what happened.
    Failed {
        /// The failure's kind.
        kind: String,
        /// What happened.
        message: String,
    },
}

impl Durable {
    /// On a store hosts share, this host's number there.
    pub(crate) fn store_host(&self) -> Option<u64> {
        self.lease.get().map(|lease| lease.host)
    }

    /// Why the store takes nothing more from this host, if it does not.
    pub(crate) fn store_failure(&self) -> Option<Error> {
        self.writer.failed().map(store_error)
    }

    /// Starts entry point `entry` of module `module` with `input` as durable workflow `id`
    /// (see [`Host::start`](crate::Host::start)).
    pub(crate) fn start(
        self: &Arc<Self>,
        engine: &Engine,
        id: &str,
        module: &str,
        entry: &str,
        input: Payload,
    ) -> Result<Spawned> {
        self.start_new(engine, id, module, entry, input)
            .map(|(spawned, _)| spawned)
    }

    /// As [`start`](Self::start), and the start this wrote: `None` when the workflow existed,
    /// with the same module, entry point and input.
    pub(crate) fn start_new(
        self: &Arc<Self>,
        engine: &Engine,
        id: &str,
        module: &str,
        entry: &str,
        input: Payload,
    ) -> Result<(Spawned, Option<NewWorkflow>)> {
        let loaded = engine.entry(module, entry)?;
        self.start_loaded(engine, id, (&loaded, None), entry, (input, None))
    }

    /// As [`start_new`](Self::start_new), of module `loaded`, which the caller holds (so that
    /// no unload of its name comes between the look and the start), shown (`wfhost list`, the
    /// workflow's `module_name`) under the name it was started by if given (a stored module's
    /// name: never the name the engine loads it under, whose grants it does not get); `trace`:
    /// the span its runs are children of (a W3C `traceparent`), if any.
    pub(crate) fn start_loaded(
        self: &Arc<Self>,
        engine: &Engine,
        id: &str,
        (loaded, shown): (&Loaded, Option<&str>),
        entry: &str,
        (input, trace): (Payload, Option<&str>),
    ) -> Result<(Spawned, Option<NewWorkflow>)> {
        engine.running()?;
        self.writable()?;
        if let Some(why) = bad_id(id) {
            return Err(Error::new(ErrorKind::InvalidInput, why));
        }
        if !loaded.compiled.info.has_entry(entry) {
            return Err(loaded.compiled.info.unknown_entry(entry));
        }
        check_payload(&engine.wasm.limits, "the input", &input)?;
        let hash = loaded.compiled.info.sha256.clone();
        let encoded = postcard::to_allocvec(&input)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the input: {e}")))?;
        let id: Arc<str> = Arc::from(id);
        let pid = engine.handle.reserve_pid();
        if let Some(running) = self.ids.claim(pid, &id) {
            if let Some(stored) = self.same_start(running, &id, &hash, entry, &encoded)? {
                return Ok((stored, None));
            }
            return engine.follow(running).map(|spawned| (spawned, None));
        }
        let claimed = Claim(self, pid);
        // On the host's own file, a start of an id the store has is found by a read first (a
        // local one), and nothing runs. On a store hosts share, where a read is a round trip to
        // the database, the start is written as one that gives way to a workflow of the same
        // id, and its commit says whether it did: the read comes only then.
        let shared = self.shared();
        if !shared {
            if let Some(existing) = self.stored_start(&id, &hash, entry, &encoded)? {
                return Ok((existing, None));
            }
        }
        // Its start runs now, before anything is written: nothing is written for an input the
        // entry point does not take.
        let started = now_millis();
        let process = match self.started_process(engine, loaded, pid, &id, entry, &input) {
            Ok(process) => process,
            // A start of an id the store has follows that workflow (or conflicts with it), as
            // it does where the read comes first, whatever this input does.
            Err(refused) if shared => {
                let stored = self.reader.lock().workflow(&id);
                return match stored {
                    Ok(Some(workflow)) => self
                        .existing(workflow, &hash, entry, &encoded)
                        .map(|existing| (existing, None)),
                    // None under the id, or the store could not say: the refusal.
                    Ok(None) | Err(_) => Err(refused),
                };
            }
            Err(refused) => return Err(refused),
        }
        .traced(trace, entry, (Some(started), false));
        let start = NewWorkflow {
            num: pid.0,
            id: id.to_string(),
            parent: None,
            module: hash.clone(),
            module_name: shown.map_or_else(|| loaded.name.to_string(), str::to_string),
            entry: entry.to_string(),
            input: encoded.clone(),
            started,
            // As `Client::traced` wrote it (version 00).
            trace: trace.map(str::to_string),
        };
        // On a shared store, what clients write for it is taken once it runs here: until then
        // the inbox leaves its messages in the store and keeps its cancels (without holding
        // up other starts, whose commits this one's shares).
        let in_flight = self.lease.get().map(|_| InFlight::new(self, pid));
        let record = start.clone();
        if !self.write_start(start)? {
            return match self.stored_start(&id, &hash, entry, &encoded)? {
                Some(existing) => Ok((existing, None)),
                None => Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("workflow '{id}' was being started elsewhere: ask again"),
                )),
            };
        }
        // A first run: keys of its own, whatever ran under its id before (runs pruned since).
        self.ids.set_run(&id, 1);
        let spawned = match engine.spawn_workflow(process, pid, None, entry, input, false) {
            Ok(spawned) => spawned,
            Err(error) => {
                // Started in the store and not here: another host (or this one, later) claims
                // it.
                if let Some(lease) = self.lease.get() {
                    let _ = lease.store.lock().unclaim(&[pid.0], true);
                }
                return Err(error);
            }
        };
        std::mem::forget(claimed);
        if let Some(in_flight) = in_flight {
            in_flight.running(engine);
        }
        Ok((spawned, Some(record)))
    }

    /// Writes a new workflow's start: whether it was written (on a store hosts share, another
    /// start of its id may have been written first).
    fn write_start(&self, start: NewWorkflow) -> Result<bool> {
        match self.lease.get() {
            // Hosts share the store: the start is written once whoever asks, and the host that
            // wrote it owns the workflow.
            // Written by the journal's writer, in a commit shared with others, which says
            // whether it was written or gave way.
            Some(_) => {
                let (id, num) = (start.id.clone(), start.num);
                let committed = self
                    .writer
                    .write(vec![Op::StartOnce(start)])
                    .map_err(store_error)?;
                // Every start of the commit written: this one too. Otherwise (some gave way, or
                // the commit's answer was lost) the row under the id says whose start won.
                let won = committed.every_start_written || {
                    let stored = self.reader.lock().workflow(&id).map_err(store_error)?;
                    stored.is_some_and(|w| w.start.num == num)
                };
                if let (true, Some(metrics)) = (won, &self.metrics) {
                    let kind = crate::metrics::Kind { kind: "top_level" };
                    metrics.core.started.get_or_create(&kind).inc();
                }
                Ok(won)
            }
            None => {
                self.write(vec![Op::Start(start)])?;
                Ok(true)
            }
        }
    }

    /// The process of a new durable workflow `id` under `pid`, its entry point started (its
    /// `init` run here, on the caller's thread) so that an input it does not take is refused
    /// before anything is written ([`ErrorKind::InvalidInput`], or [`ErrorKind::Trap`] for a
    /// start that traps). When no instance is free to start it now, it starts on a worker as
    /// any process does.
    fn started_process(
        self: &Arc<Self>,
        engine: &Engine,
        loaded: &Loaded,
        pid: Pid,
        id: &Arc<str>,
        entry: &str,
        input: &Payload,
    ) -> Result<DurableProcess> {
        let hash: Arc<str> = Arc::from(loaded.compiled.info.sha256.as_str());
        let new = || {
            DurableProcess::new(
                engine.process(loaded),
                Arc::clone(self),
                Arc::clone(id),
                Arc::clone(&hash),
            )
        };
        let mut process = new();
        let ctx = InitContext::new(pid, None);
        match process
            .start_now(&ctx, entry, input.clone())
            .map_err(refused_start)
        {
            Ok(()) => Ok(process),
            Err(Some(refused)) => Err(refused),
            // No instance free now: it starts on a worker, as any process does.
            Err(None) => Ok(new()),
        }
    }

    /// A start of workflow `id` as the store has it, if it does: its run if it started with
    /// the same module, entry point and input (see [`existing`](Self::existing)).
    fn stored_start(
        &self,
        id: &str,
        hash: &str,
        entry: &str,
        input: &[u8],
    ) -> Result<Option<Spawned>> {
        let stored = self.reader.lock().workflow(id).map_err(store_error)?;
        stored
            .map(|workflow| self.existing(workflow, hash, entry, input))
            .transpose()
    }

    /// A start of workflow `id`, which the store has already: its run if it started with the
    /// same module, entry point and input (finished: its stored result), a conflict otherwise.
    fn existing(
        &self,
        workflow: Workflow,
        hash: &str,
        entry: &str,
        input: &[u8],
    ) -> Result<Spawned> {
        let id = workflow.start.id.clone();
        workflow.start.may_follow(hash, entry, input)?;
        if let (None, Some(why)) = (&workflow.ending, &workflow.damaged) {
            return Err(Error::new(
                ErrorKind::Store,
                format!(
                    "workflow '{id}' is damaged ({why}): it is left as it was, and goes on once \
                     the store is repaired (or the build fixed) and a host recovers it"
                ),
            ));
        }
        match workflow.ending {
            Some(ending) => Ok(finished(Pid(workflow.start.num), ending)),
            None if self.shared() => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "workflow '{id}' runs on another host of the store, or waits for one to \
                     claim it: read its result from the store (`wfhost result --wait`)"
                ),
            )),
            None => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "workflow '{id}' is unfinished in the store but does not run in this host: \
                     recover it first (Host::recover, or `wfhost resume`)"
                ),
            )),
        }
    }

    /// Whether a start of `id`, which runs here as `running` (or is being started as it),
    /// names what it started with. `Some`: the store has another workflow under the id (on a
    /// store hosts share, the start under way here will give way to it), whose start this is.
    fn same_start(
        &self,
        running: Pid,
        id: &str,
        hash: &str,
        entry: &str,
        input: &[u8],
    ) -> Result<Option<Spawned>> {
        let stored = self.reader.lock().workflow(id).map_err(store_error)?;
        match stored {
            Some(workflow) if self.shared() && workflow.start.num != running.0 => {
                self.existing(workflow, hash, entry, input).map(Some)
            }
            Some(workflow) => {
                workflow.start.may_follow(hash, entry, input)?;
                Ok(None)
            }
            // Its start is being written: it is this one's twin or not, as the store will say.
            None => Ok(None),
        }
    }

    /// Where durable workflow `id` stands, from the store.
    pub(crate) fn result(&self, id: &str) -> Result<WorkflowResult> {
        let workflow = self.reader.lock().workflow(id).map_err(store_error)?;
        let Some(workflow) = workflow else {
            return Err(Error::new(
                ErrorKind::UnknownWorkflow,
                format!("no workflow '{id}' in the store"),
            ));
        };
        Ok(match (workflow.state, workflow.ending) {
            (State::Running, _) | (_, None) => WorkflowResult::Running,
            (_, Some(Ending::Done(bytes))) => {
                WorkflowResult::Done(postcard::from_bytes(&bytes).map_err(|e| {
                    Error::new(
                        ErrorKind::Store,
                        format!("the stored result of '{id}': {e}"),
                    )
                })?)
            }
            (_, Some(Ending::Failed { kind, message })) => WorkflowResult::Failed { kind, message },
        })
    }

    /// Replays the journal of durable workflow `id` with module `module` (see
    /// [`Host::replay`](crate::Host::replay)): the steps replayed.
    pub(crate) fn replay(self: &Arc<Self>, engine: &Engine, id: &str, module: &str) -> Result<u64> {
        let loaded = engine.modules.get(module)?;
        let (workflow, steps) = {
            let mut reader = self.reader.lock();
            let workflow = reader.workflow(id).map_err(store_error)?.ok_or_else(|| {
                Error::new(
                    ErrorKind::UnknownWorkflow,
                    format!("no workflow '{id}' in the store"),
                )
            })?;
            let steps = reader.steps(workflow.start.num, 0).map_err(store_error)?;
            (workflow, steps)
        };
        let records = steps
            .iter()
            .map(|s| StepRecord::decode(&s.record))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::new(ErrorKind::Store, format!("the journal of '{id}': {e}")))?;
        let input: Payload = postcard::from_bytes(&workflow.start.input).map_err(|e| {
            Error::new(ErrorKind::Store, format!("the stored input of '{id}': {e}"))
        })?;
        let start = &workflow.start;
        let process = DurableProcess::new(
            engine.process(&loaded),
            Arc::clone(self),
            Arc::from(id),
            Arc::from(start.module.as_str()),
        )
        .checking(records);
        let ctx = InitContext::new(Pid(start.num), start.parent.map(Pid));
        process
            .check_replay(&ctx, &start.entry, input)
            .map_err(|e| match e.kind() {
                wfhost_scheduler::FailureKind::Limit => Error::new(
                    ErrorKind::Limit,
                    format!("the replay could not run now: {}", e.message()),
                ),
                _ => Error::new(ErrorKind::Nondeterminism, e.message()),
            })
    }
}

/// Takes a claimed id back unless forgotten (the start went through).
struct Claim<'a>(&'a Durable, Pid);

/// The top-level workflows whose start is in flight on a shared store, and the cancels the
/// inbox took for them meanwhile.
#[derive(Debug, Default)]
pub(crate) struct Starting {
    nums: rustc_hash::FxHashSet<u64>,
    cancels: Vec<u64>,
}

impl Starting {
    /// Whether workflow `num`'s start is in flight: its messages stay in the store.
    pub(crate) fn contains(&self, num: u64) -> bool {
        self.nums.contains(&num)
    }

    /// Keeps a cancel of `num` taken while its start is in flight, for when it runs. False
    /// when it is not starting (the cancel goes to it at once).
    pub(crate) fn keep_cancel(&mut self, num: u64) -> bool {
        let starting = self.nums.contains(&num);
        if starting {
            self.cancels.push(num);
        }
        starting
    }
}

/// A start in flight on a shared store: the inbox leaves what clients write for the workflow
/// until [`running`](Self::running) (or, should the start fail, its drop) says otherwise.
struct InFlight<'a>(&'a Durable, Pid);

impl<'a> InFlight<'a> {
    fn new(durable: &'a Durable, pid: Pid) -> InFlight<'a> {
        durable.starting.lock().nums.insert(pid.0);
        InFlight(durable, pid)
    }

    /// The workflow runs here: a cancel taken for it meanwhile is delivered, and its messages
    /// are taken at the inbox's next look.
    fn running(self, engine: &Engine) {
        let (cancelled, pid) = (self.end(), self.1);
        // Ended here, not again by the drop.
        std::mem::forget(self);
        if cancelled {
            let _ = engine.handle.cancel(pid);
        }
    }

    /// No longer starting: whether a cancel was taken for it meanwhile.
    fn end(&self) -> bool {
        let mut starting = self.0.starting.lock();
        starting.nums.remove(&self.1 .0);
        let before = starting.cancels.len();
        starting.cancels.retain(|n| *n != self.1 .0);
        starting.cancels.len() != before
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // A start that failed after its cancel was taken: the cancel stays asked in the store
        // for whoever runs the workflow (or it was never started).
        self.end();
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.ids.remove(self.1);
    }
}

/// A workflow that has ended already, with `ending`.
pub(crate) fn finished(pid: Pid, ending: Ending) -> Spawned {
    let outcome = match ending {
        Ending::Done(bytes) => postcard::from_bytes(&bytes).map_err(|e| {
            ProcessError::with_kind(FailureKind::Failed, format!("its stored result: {e}"))
        }),
        Ending::Failed { kind, message } => Err(ProcessError::with_kind(
            FailureKind::from_name(&kind).unwrap_or(FailureKind::Failed),
            message,
        )),
    };
    Spawned::finished(pid, outcome)
}
