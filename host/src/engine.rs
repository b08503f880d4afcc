//! What a host's processes run on: its scheduler, its WebAssembly runtime, the modules loaded
//! in it and how many processes it holds. The [`Host`](crate::Host) and its durable layer both
//! start processes through it; neither reaches into the other.

use std::sync::Arc;

use crossbeam_channel::Receiver;
use wfcontract::{Payload, Pid};
use wfhost_scheduler::{
    Error as Refusal, OutboxReceiver, Process, ProcessError, ProcessResult, SchedulerHandle, Spawn,
};

use crate::error::{Error, ErrorKind, Result};
use crate::modules::Modules;
use crate::wasm::capacity::Capacity;
use crate::wasm::Loaded;
use crate::wasm::{Limits, WasmProcess, WasmRuntime};

/// The scheduler, the runtime and the modules of one host.
pub(crate) struct Engine {
    pub(crate) handle: SchedulerHandle,
    pub(crate) wasm: Arc<WasmRuntime>,
    pub(crate) modules: Arc<Modules>,
    pub(crate) capacity: Capacity,
    /// The bounds of what a process started here may send the host: messages, bytes.
    pub(crate) outbox: (usize, usize),
}

/// A process started (or followed) on the engine: what a [`Run`](crate::Run) is made of.
pub(crate) struct Spawned {
    pub(crate) pid: Pid,
    /// Where its result comes.
    pub(crate) result: Receiver<(Pid, ProcessResult)>,
    /// What it sends the host.
    pub(crate) messages: OutboxReceiver,
}

impl Spawned {
    /// A process that has ended already, with `outcome`.
    pub(crate) fn finished(pid: Pid, outcome: ProcessResult) -> Spawned {
        let (result, receiver) = crossbeam_channel::bounded(1);
        let (_, messages) = wfhost_scheduler::outbox(1, 1);
        let _ = result.send((pid, outcome));
        Spawned {
            pid,
            result: receiver,
            messages,
        }
    }
}

impl Engine {
    /// Refuses work once a shutdown has begun.
    pub(crate) fn running(&self) -> Result<()> {
        if self.handle.is_stopping() {
            return Err(Error::new(
                ErrorKind::ShuttingDown,
                "the host is shutting down and accepts no new processes or modules",
            ));
        }
        Ok(())
    }

    /// The module loaded as `name`, which must have entry point `entry`.
    pub(crate) fn entry(&self, name: &str, entry: &str) -> Result<Loaded> {
        let loaded = self.modules.get(name)?;
        if !loaded.compiled.info.has_entry(entry) {
            return Err(loaded.compiled.info.unknown_entry(entry));
        }
        Ok(loaded)
    }

    /// A process of `loaded` with its module's grants and the host's limits, not started.
    pub(crate) fn process(&self, loaded: &Loaded) -> WasmProcess {
        WasmProcess::new(
            Arc::clone(&self.wasm),
            loaded.spec(None, Arc::clone(&self.wasm.limits)),
        )
    }

    /// Whether entry point `entry` of `loaded` takes `input`: its start runs in an instance of
    /// its own, which is then dropped (see [`Host::check_input`](crate::Host::check_input)).
    pub(crate) fn check_input(&self, loaded: &Loaded, entry: &str, input: &Payload) -> Result<()> {
        use wfhost_scheduler::InitContext;
        check_payload(&self.wasm.limits, "the input", input)?;
        let mut process = self.process(loaded);
        // Whatever its start prints belongs to the workflow's real start.
        process.mute(true);
        let ctx = InitContext::new(self.handle.reserve_pid(), None);
        let started = process.init(&ctx, entry, input.clone());
        process.close();
        match started.map_err(refused_start) {
            Ok(()) | Err(None) => Ok(()),
            Err(Some(refused)) => Err(refused),
        }
    }

    /// Starts `spawn`, which the caller has given its pid, parent or outbox and result channel.
    pub(crate) fn spawn(&self, spawn: Spawn) -> Result<Pid> {
        self.handle.spawn_with(spawn).map_err(|e| match e {
            Refusal::TooManyProcesses(_) => Error::new(ErrorKind::Limit, self.capacity.refusal()),
            other => Error::refused(other),
        })
    }

    /// Starts `process` (entry point `entry`, with `input`) as a workflow under its recorded
    /// `pid`: it survives the host's stop (a restart resumes it), and is linked to `parent` or,
    /// top-level, sends the host what it sends. `held`: it takes no turn until
    /// [`SchedulerHandle::waker`](wfhost_scheduler::SchedulerHandle::waker)'s waker wakes it
    /// (see [`Spawn::held`]).
    pub(crate) fn spawn_workflow(
        &self,
        process: crate::durable::process::DurableProcess,
        pid: Pid,
        parent: Option<Pid>,
        entry: &str,
        input: Payload,
        held: bool,
    ) -> Result<Spawned> {
        let (result, receiver) = crossbeam_channel::bounded(1);
        let (outbox, messages) = wfhost_scheduler::outbox(self.outbox.0, self.outbox.1);
        // As its module's grants say, whether it starts here or is recovered: one that may not
        // reach any process cancels and joins only its own children.
        let confined = !process.reaches_any_process();
        let mut spawn = Spawn::new(process, entry, input)
            .pid(pid)
            .survives_stop(true)
            .confined(confined)
            .notify(result);
        spawn = match parent {
            Some(parent) => spawn.parent(parent),
            None => spawn.outbox(outbox),
        };
        if held {
            spawn = spawn.held();
        }
        self.spawn(spawn)?;
        Ok(Spawned {
            pid,
            result: receiver,
            messages,
        })
    }

    /// Follows process `pid`, which runs here: its result, and nothing it sends.
    pub(crate) fn follow(&self, pid: Pid) -> Result<Spawned> {
        let (result, receiver) = crossbeam_channel::bounded(1);
        let (_, messages) = wfhost_scheduler::outbox(1, 1);
        self.handle.watch(pid, result).map_err(|_| {
            Error::new(
                ErrorKind::Unavailable,
                "the workflow is being started or has just ended: ask again",
            )
        })?;
        Ok(Spawned {
            pid,
            result: receiver,
            messages,
        })
    }
}

/// What a start that failed says about its input: `Some` error when the entry point refused
/// it (it does not decode as its type, or its start traps), `None` when the start could not run
/// now (no instance free): the input is then taken, and checked when the process starts.
pub(crate) fn refused_start(error: ProcessError) -> Option<Error> {
    use wfhost_scheduler::FailureKind;
    match error.kind() {
        FailureKind::InvalidInput | FailureKind::Trap | FailureKind::Refused => {
            Some(Error::failed(&error))
        }
        _ => {
            tracing::debug!(
                "a start could not run now ({}): its input is checked later",
                error.message()
            );
            None
        }
    }
}

/// `payload` within `limits`' payload limit, or an [`ErrorKind::Limit`] error about `what`.
pub(crate) fn check_payload(limits: &Limits, what: &str, payload: &Payload) -> Result<()> {
    let len = payload.bytes.len();
    match limits.over_payload(len) {
        Some(over) => Err(Error::new(
            ErrorKind::Limit,
            format!("{what} is {len} bytes, {over}"),
        )),
        None => Ok(()),
    }
}
