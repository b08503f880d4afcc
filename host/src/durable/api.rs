//! The durable side of [`Host`]: starting workflows under ids, recovering them, reading results.

use std::sync::Arc;

use wfcontract::{Payload, Pid};
use wfhost_scheduler::{FailureKind, InitContext, ProcessError, Spawn};

use super::process::{unix_millis, DurableProcess};
use super::record::StepRecord;
use super::store::{Ending, NewWorkflow, Op, State, Workflow};
use super::{store_error, Durable};
use crate::error::{Error, ErrorKind, Result};
use crate::run::Run;
use crate::wasm::WasmProcess;
use crate::Host;

/// Why `id` cannot be a top-level workflow's id, if it cannot: 1 to 1024 characters, no control
/// character, and no `/`, which children's ids use (`order-42/3.0`: the parent's id, the step
/// and the yield that spawned them), so that no start can take a child's id.
pub fn bad_id(id: &str) -> Option<&'static str> {
    (id.is_empty() || id.len() > 1024 || id.chars().any(|c| c.is_control() || c == '/')).then_some(
        "a workflow id must be 1 to 1024 characters, none of them a control character or '/' \
         (children's ids are their parent's with '/' and where they were spawned)",
    )
}

/// Where a durable workflow stands, as [`Host::result`] reads it from the store.
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

impl Host {
    /// On a store hosts share, this host's number there (each host that joins gets a new one).
    pub fn store_host(&self) -> Option<u64> {
        self.inner
            .durable
            .as_ref()
            .and_then(|d| d.lease.get())
            .map(|lease| lease.host)
    }

    /// Why the store takes nothing more from this host, if it does not: it could not be
    /// written, or (on a store hosts share) this host lost its lease. Its durable workflows have
    /// stopped where their journals end; a new host on the store goes on with them.
    pub fn store_failure(&self) -> Option<Error> {
        let durable = self.inner.durable.as_ref()?;
        durable.writer.failed().map(store_error)
    }

    pub(crate) fn durable(&self) -> Result<&Arc<Durable>> {
        self.inner.durable.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Config,
                "this host has no store: build it with HostBuilder::store to run durable workflows",
            )
        })
    }

    /// Starts entry point `entry` of module `module` with `input` as durable workflow `id`: its
    /// start is on disk before this returns, every step is journaled before its effects happen,
    /// and a host started on the same store after a crash resumes it ([`Host::recover`]).
    ///
    /// The input is checked before anything is written: past the payload limit it is an
    /// [`ErrorKind::Limit`] error, and one the entry point does not take (see
    /// [`Host::check_input`]) an [`ErrorKind::InvalidInput`] error.
    ///
    /// Idempotent: if workflow `id` runs in this host, the returned [`Run`] follows it; if it has
    /// finished, the run has its stored result at once. An id that exists with another module,
    /// entry point or input is an [`ErrorKind::Conflict`] error naming what differs. An
    /// unfinished workflow of the store that does not run here (the host was not
    /// [`recover`](Host::recover)ed) is an error.
    pub fn start(&self, id: &str, module: &str, entry: &str, input: Payload) -> Result<Run> {
        let inner = &self.inner;
        let durable = self.durable()?;
        inner.running()?;
        durable.writable()?;
        if let Some(why) = bad_id(id) {
            return Err(Error::new(ErrorKind::InvalidInput, why));
        }
        let loaded = inner.modules.get(module)?;
        if !loaded.compiled.info.has_entry(entry) {
            return Err(loaded.compiled.info.unknown_entry(entry));
        }
        crate::host::check_payload(&inner.wasm.limits, "the input", &input)?;
        let hash = loaded.compiled.info.sha256.clone();
        let encoded = postcard::to_allocvec(&input)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the input: {e}")))?;
        let id: Arc<str> = Arc::from(id);
        let pid = inner.handle.reserve_pid();
        if let Some(running) = durable.ids.claim(pid, &id) {
            self.same_start(&id, &hash, entry, &encoded)?;
            return self.follow(running);
        }
        let claimed = Claim(durable, pid);
        let stored = durable.reader.lock().workflow(&id).map_err(store_error)?;
        if let Some(workflow) = stored {
            return self.existing(workflow, &hash, entry, &encoded);
        }
        // Its start runs now, before anything is written: nothing is written for an input the
        // entry point does not take.
        let process = self.started_process(&loaded, durable, pid, &id, &hash, entry, &input)?;
        let start = NewWorkflow {
            num: pid.0,
            id: id.to_string(),
            parent: None,
            module: hash.clone(),
            module_name: loaded.name.to_string(),
            entry: entry.to_string(),
            input: encoded.clone(),
            started: unix_millis(),
        };
        // On a shared store, what clients write for it is taken once it runs here.
        let _taking = durable.lease.get().map(|_| durable.taking.lock());
        if let Some(lease) = durable.lease.get() {
            // Hosts share the store: the start is written once whoever asks, and the host that
            // wrote it owns the workflow.
            let started = lease
                .store
                .lock()
                .start_once(None, &start)
                .map_err(store_error)?;
            if started.is_none() {
                let stored = durable.reader.lock().workflow(&id).map_err(store_error)?;
                return match stored {
                    Some(workflow) => self.existing(workflow, &hash, entry, &encoded),
                    None => Err(Error::new(
                        ErrorKind::Unavailable,
                        format!("workflow '{id}' was being started elsewhere: ask again"),
                    )),
                };
            }
        } else {
            durable.write(vec![Op::Start(start)])?;
        }
        let run = match self.spawn_durable(process, pid, None, entry, input) {
            Ok(run) => run,
            Err(error) => {
                // Started in the store and not here: another host (or this one, later) claims
                // it.
                if let Some(lease) = durable.lease.get() {
                    let _ = lease.store.lock().unclaim(&[pid.0]);
                }
                return Err(error);
            }
        };
        std::mem::forget(claimed);
        Ok(run)
    }

    /// The process of a new durable workflow `id` under `pid`, its entry point started (its
    /// `init` run here, on the caller's thread) so that an input it does not take is refused
    /// before anything is written ([`ErrorKind::InvalidInput`], or [`ErrorKind::Trap`] for a
    /// start that traps). When no instance is free to start it now, it starts on a worker as
    /// any process does.
    #[allow(clippy::too_many_arguments)]
    fn started_process(
        &self,
        loaded: &crate::modules::Loaded,
        durable: &Arc<Durable>,
        pid: Pid,
        id: &Arc<str>,
        hash: &str,
        entry: &str,
        input: &Payload,
    ) -> Result<DurableProcess> {
        let inner = &self.inner;
        let new = || {
            let process = WasmProcess::new(
                Arc::clone(&inner.wasm),
                loaded.spec(None, Arc::clone(&inner.wasm.limits)),
            );
            DurableProcess::new(process, Arc::clone(durable), Arc::clone(id), hash.into())
        };
        let mut process = new();
        let ctx = InitContext::new(pid, None);
        match process
            .start_now(&ctx, entry, input.clone())
            .map_err(crate::host::refused_start)
        {
            Ok(()) => Ok(process),
            Err(Some(refused)) => Err(refused),
            // No instance free now: it starts on a worker, as any process does.
            Err(None) => Ok(new()),
        }
    }

    /// A start of workflow `id`, which the store has already: its run if it started with the
    /// same module, entry point and input (finished: its stored result), a conflict otherwise.
    fn existing(&self, workflow: Workflow, hash: &str, entry: &str, input: &[u8]) -> Result<Run> {
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
            Some(ending) => Ok(finished_run(Pid(workflow.start.num), ending)),
            None if self.durable()?.shared() => Err(Error::new(
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

    /// Whether a start of `id`, which runs here, names what it started with.
    fn same_start(&self, id: &str, hash: &str, entry: &str, input: &[u8]) -> Result<()> {
        let stored = self
            .durable()?
            .reader
            .lock()
            .workflow(id)
            .map_err(store_error)?;
        match stored {
            Some(workflow) => workflow.start.may_follow(hash, entry, input),
            // Its start is being written: it is this one's twin or not, as the store will say.
            None => Ok(()),
        }
    }

    /// Spawns a durable process under its recorded pid, with a run to follow it.
    pub(crate) fn spawn_durable(
        &self,
        process: DurableProcess,
        pid: Pid,
        parent: Option<Pid>,
        entry: &str,
        input: Payload,
    ) -> Result<Run> {
        let inner = &self.inner;
        let (result, receiver) = crossbeam_channel::bounded(1);
        let (outbox, messages) = wfhost_scheduler::outbox(inner.outbox.0, inner.outbox.1);
        let mut spawn = Spawn::new(process, entry, input)
            .pid(pid)
            .survives_stop(true)
            .notify(result);
        spawn = match parent {
            Some(parent) => spawn.parent(parent),
            None => spawn.outbox(outbox),
        };
        inner.handle.spawn_with(spawn).map_err(|e| match e {
            wfhost_scheduler::Error::TooManyProcesses(_) => {
                Error::new(ErrorKind::Limit, inner.capacity.refusal())
            }
            other => Error::refused(other),
        })?;
        Ok(Run::new(pid, receiver, messages))
    }

    /// A run following process `pid`, which runs here.
    fn follow(&self, pid: Pid) -> Result<Run> {
        let (result, receiver) = crossbeam_channel::bounded(1);
        let (_, messages) = wfhost_scheduler::outbox(1, 1);
        self.inner.handle.watch(pid, result).map_err(|_| {
            Error::new(
                ErrorKind::Unavailable,
                "the workflow is being started or has just ended: ask again",
            )
        })?;
        Ok(Run::new(pid, receiver, messages))
    }

    /// Where durable workflow `id` stands, from the store.
    pub fn result(&self, id: &str) -> Result<WorkflowResult> {
        let durable = self.durable()?;
        let workflow = durable.reader.lock().workflow(id).map_err(store_error)?;
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
}

impl Host {
    /// What this host counts about snapshots and replay since it started: how many workflows
    /// recovered from a snapshot, how many journaled steps and events they replayed. Replay
    /// happens at each recovered workflow's first step, so the counts settle once those ran.
    pub fn durable_counters(&self) -> Result<crate::DurableCounters> {
        Ok(self.durable()?.counts.read())
    }

    /// Replays the journal of durable workflow `id` with module `module` (loaded in this host),
    /// without running anything: whether a new build of a workflow's module does what the old one
    /// did, before recovering its workflows with it. Returns the steps replayed; a module that
    /// differs is an [`ErrorKind::Nondeterminism`] error naming the step and what differs.
    pub fn replay(&self, id: &str, module: &str) -> Result<u64> {
        let inner = &self.inner;
        let durable = self.durable()?;
        let loaded = inner.modules.get(module)?;
        let (workflow, steps) = {
            let mut reader = durable.reader.lock();
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
        let process = WasmProcess::new(
            Arc::clone(&inner.wasm),
            loaded.spec(None, Arc::clone(&inner.wasm.limits)),
        );
        let start = &workflow.start;
        let process = DurableProcess::new(
            process,
            Arc::clone(durable),
            Arc::from(id),
            Arc::from(start.module.as_str()),
        )
        .checking(records);
        let ctx = InitContext::new(Pid(start.num), start.parent.map(Pid));
        process
            .check_replay(&ctx, &start.entry, input)
            .map_err(|e| Error::new(ErrorKind::Nondeterminism, e.message()))
    }
}

/// Takes a claimed id back unless forgotten (the start went through).
struct Claim<'a>(&'a Durable, Pid);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.ids.remove(self.1);
    }
}

/// A run that has ended already, with `ending`.
pub(crate) fn finished_run(pid: Pid, ending: Ending) -> Run {
    let (result, receiver) = crossbeam_channel::bounded(1);
    let (_, messages) = wfhost_scheduler::outbox(1, 1);
    let outcome = match ending {
        Ending::Done(bytes) => postcard::from_bytes(&bytes).map_err(|e| {
            ProcessError::with_kind(FailureKind::Failed, format!("its stored result: {e}"))
        }),
        Ending::Failed { kind, message } => {
            Err(ProcessError::with_kind(kind_named(&kind), message))
        }
    };
    let _ = result.send((pid, outcome));
    Run::new(pid, receiver, messages)
}

/// The failure kind named `name` (as `FailureKind::name` writes it).
pub(crate) fn kind_named(name: &str) -> FailureKind {
    [
        FailureKind::Failed,
        FailureKind::Trap,
        FailureKind::Limit,
        FailureKind::BadOutput,
        FailureKind::Refused,
        FailureKind::Terminated,
        FailureKind::Cancelled,
        FailureKind::Timeout,
        FailureKind::InvalidInput,
        FailureKind::Nondeterminism,
    ]
    .into_iter()
    .find(|kind| kind.name() == name)
    .unwrap_or(FailureKind::Failed)
}
