//! The host: a scheduler, a WebAssembly runtime, and the modules loaded into it.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use wfcontract::{Payload, Pid};
use wfhost_scheduler::{
    Counters, Error as Refusal, Scheduler, SchedulerHandle, ShutdownReport, Spawn, DEFAULT_GRACE,
};

use crate::builder::HostBuilder;
use crate::capacity::Capacity;
use crate::durable::store::Op;
use crate::durable::Durable;
use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::modules::Modules;
use crate::run::{Run, SpawnOptions};
use crate::wasm::{Limits, ModuleInfo, Residency, WasmProcess, WasmRuntime};

/// Runs workflow modules: loads them, spawns their entry points as processes, and lets the
/// embedding application talk to those processes.
///
/// A `Host` is a handle: cloning it is cheap, and every clone drives the same host, from any
/// thread. [`shutdown`](Self::shutdown) stops it for all of them; when the last clone is dropped
/// without one, the host shuts down with a grace period of 5 seconds. A clone held by one of the
/// host's own functions keeps the host alive until `shutdown` is called.
#[derive(Clone)]
pub struct Host {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) handle: SchedulerHandle,
    /// Taken by the first shutdown.
    scheduler: Mutex<Option<Scheduler>>,
    report: OnceLock<ShutdownReport>,
    pub(crate) wasm: Arc<WasmRuntime>,
    pub(crate) modules: Arc<Modules>,
    pub(crate) capacity: Capacity,
    /// The bounds of what a process started here may send the host: messages, bytes.
    pub(crate) outbox: (usize, usize),
    /// The journal and the store, when the host is durable.
    pub(crate) durable: Option<Arc<Durable>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("workers", &self.inner.handle.workers())
            .field("live", &self.live())
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A builder with the defaults.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    pub(crate) fn new(
        scheduler: Scheduler,
        wasm: Arc<WasmRuntime>,
        modules: Arc<Modules>,
        capacity: Capacity,
        outbox: (usize, usize),
        durable: Option<Arc<Durable>>,
    ) -> Host {
        Host {
            inner: Arc::new(Inner {
                handle: scheduler.handle().clone(),
                scheduler: Mutex::new(Some(scheduler)),
                report: OnceLock::new(),
                wasm,
                modules,
                capacity,
                outbox,
                durable,
            }),
        }
    }

    /// Loads the module at `path` under `name`, with the default [`Grants`]: every built-in
    /// command, no host function. A module already loaded under `name` is replaced for
    /// processes spawned from now on (those running it go on with it). Compiles it unless an
    /// identical module is already compiled (or in the module cache).
    pub fn load_module(&self, name: &str, path: impl AsRef<Path>) -> Result<ModuleInfo> {
        self.load_module_with(name, path, Grants::default())
    }

    /// Loads a module from its bytes under `name`, with the default [`Grants`].
    pub fn load_module_bytes(&self, name: &str, bytes: &[u8]) -> Result<ModuleInfo> {
        self.load_module_bytes_with(name, bytes, Grants::default())
    }

    /// Loads the module at `path` under `name`; its processes may use the commands `grants`
    /// allows (a child spawned from it runs with its own module's grants).
    pub fn load_module_with(
        &self,
        name: &str,
        path: impl AsRef<Path>,
        grants: Grants,
    ) -> Result<ModuleInfo> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot read module {}: {e}", path.display()),
            )
        })?;
        self.load_module_bytes_with(name, &bytes, grants)
            .map_err(|e| Error::new(e.kind(), format!("{}: {}", path.display(), e.message())))
    }

    /// Loads a module from its bytes under `name`, with `grants`.
    pub fn load_module_bytes_with(
        &self,
        name: &str,
        bytes: &[u8],
        grants: Grants,
    ) -> Result<ModuleInfo> {
        self.inner.running()?;
        let compiled = self.inner.wasm.compile(bytes)?;
        let info = compiled.info.clone();
        if let Some(durable) = &self.inner.durable {
            // Kept by hash before anything runs it: a workflow recovers with the module it
            // started with, whatever the file on disk holds by then.
            durable.keep_module(&info.sha256, bytes)?;
        }
        self.inner.modules.insert(name, compiled, grants);
        Ok(info)
    }

    /// Unloads the module loaded under `name`: nothing can be spawned from it any more. Processes
    /// running it go on; once the last has finished, its compiled code, its memory image and its
    /// warm instances are freed.
    pub fn unload_module(&self, name: &str) -> Result<()> {
        self.inner.modules.remove(name)
    }

    /// What the module loaded under `name` declares.
    pub fn module_info(&self, name: &str) -> Result<ModuleInfo> {
        Ok(self.inner.modules.get(name)?.compiled.info.clone())
    }

    /// Whether entry point `entry` of module `module` takes `input`: within the host's payload
    /// limit, and decoded by the guest as the entry point's type. The entry point's start runs in
    /// an instance of its own, which is then dropped: nothing else runs and nothing is written.
    /// [`Host::start`] checks this before it writes a start; a tool that writes starts for hosts
    /// to run (`wfhost start`) checks it too.
    ///
    /// An input the guest refuses is an [`ErrorKind::InvalidInput`] error (a start that traps is
    /// a [`ErrorKind::Trap`]); an input past the limit, [`ErrorKind::Limit`]. When the host has
    /// no instance to spare for the check (it is full), the input is taken unchecked: the
    /// workflow then fails at its start as it would have.
    pub fn check_input(&self, module: &str, entry: &str, input: &Payload) -> Result<()> {
        use wfhost_scheduler::{InitContext, Process};
        let inner = &self.inner;
        inner.running()?;
        let loaded = inner.modules.get(module)?;
        if !loaded.compiled.info.has_entry(entry) {
            return Err(loaded.compiled.info.unknown_entry(entry));
        }
        check_payload(&inner.wasm.limits, "the input", input)?;
        let mut process = WasmProcess::new(
            Arc::clone(&inner.wasm),
            loaded.spec(None, Arc::clone(&inner.wasm.limits)),
        );
        // Whatever its start prints belongs to the workflow's real start.
        process.mute(true);
        let ctx = InitContext::new(inner.handle.reserve_pid(), None);
        let started = process.init(&ctx, entry, input.clone());
        process.close();
        match started.map_err(refused_start) {
            Ok(()) | Err(None) => Ok(()),
            Err(Some(refused)) => Err(refused),
        }
    }

    /// Starts entry point `entry` of module `module` with `input`, with the host's settings.
    pub fn spawn(&self, module: &str, entry: &str, input: Payload) -> Result<Run> {
        self.spawn_with(module, entry, input, &SpawnOptions::default())
    }

    /// Starts entry point `entry` of module `module` with `input`, with `options`.
    pub fn spawn_with(
        &self,
        module: &str,
        entry: &str,
        input: Payload,
        options: &SpawnOptions,
    ) -> Result<Run> {
        let inner = &self.inner;
        inner.running()?;
        let loaded = inner.modules.get(module)?;
        if !loaded.compiled.info.has_entry(entry) {
            return Err(loaded.compiled.info.unknown_entry(entry));
        }
        let limits: Arc<Limits> = match &options.limits {
            Some(limits) => {
                inner.wasm.admit(limits)?;
                Arc::new(limits.clone())
            }
            None => Arc::clone(&inner.wasm.limits),
        };
        check_payload(&limits, "the input", &input)?;
        let grants = options.grants.clone().map(Arc::new);
        let confined = !grants
            .as_deref()
            .unwrap_or(&loaded.grants)
            .reaches_any_process();
        let process = WasmProcess::new(Arc::clone(&inner.wasm), loaded.spec(grants, limits));
        let (result, receiver) = crossbeam_channel::bounded(1);
        let (outbox, messages) = wfhost_scheduler::outbox(inner.outbox.0, inner.outbox.1);
        let mut spawn = Spawn::new(process, entry, input)
            .confined(confined)
            .notify(result)
            .outbox(outbox);
        if let Some(timeout) = options.timeout {
            spawn = spawn.timeout(timeout);
        }
        let pid = inner.handle.spawn_with(spawn).map_err(|e| match e {
            Refusal::TooManyProcesses(_) => Error::new(ErrorKind::Limit, inner.capacity.refusal()),
            other => Error::refused(other),
        })?;
        Ok(Run::new(pid, receiver, messages))
    }

    /// How many processes this host can hold at once, and what bounds that (worked out at
    /// start-up from the process limit, the pooling slots and the OS's memory-mapping limit).
    pub fn capacity(&self) -> Capacity {
        self.inner.capacity
    }

    /// What the host holds: processes with an instance and hibernated ones, warm instances,
    /// compiled modules, buffers. The counts move as processes run; read them when the host is
    /// quiet for exact figures.
    pub fn residency(&self) -> Residency {
        let mut residency = self.inner.wasm.instances.residency();
        if let Some(pool) = self.inner.wasm.engine.pooling_allocator_metrics() {
            residency.pooled_idle_slots = pool.unused_warm_memories();
            residency.pooled_resident_bytes =
                pool.unused_memory_bytes_resident() + pool.unused_table_bytes_resident();
        }
        residency
    }

    /// Sends `message` to process `pid`, from the host ([`Pid::HOST`]). It waits in the
    /// process's mailbox until the process receives; a full mailbox refuses it
    /// ([`ErrorKind::Limit`]).
    pub fn send(&self, pid: Pid, message: Payload) -> Result<()> {
        check_payload(&self.inner.wasm.limits, "the message", &message)?;
        if let Some(durable) = self.inner.durable.as_ref().filter(|d| d.ids.contains(pid)) {
            return durable.send_from_host(&self.inner.handle, pid, message);
        }
        self.inner.handle.send(pid, message).map_err(Error::refused)
    }

    /// Asks process `pid` to stop: a cancel, delivered ahead of its queued messages. It may clean
    /// up, within the cancel grace period.
    pub fn cancel(&self, pid: Pid) -> Result<()> {
        if let Some(durable) = self.inner.durable.as_ref().filter(|d| d.ids.contains(pid)) {
            // Kept before it is delivered: a restart delivers it again if no step took it.
            durable.write(vec![Op::Cancel { num: pid.0 }])?;
        }
        self.inner.handle.cancel(pid).map_err(Error::refused)
    }

    /// Ends process `pid` at its next turn without stepping it again: it fails with
    /// [`ErrorKind::Terminated`] and `reason`. A step in progress is not interrupted.
    pub fn terminate(&self, pid: Pid, reason: &str) -> Result<()> {
        self.inner
            .handle
            .terminate(pid, reason)
            .map_err(Error::refused)
    }

    /// Processes that have not finished.
    ///
    /// A process is counted out before its result reaches anyone (a joining parent, a `wait`),
    /// so once a result is in hand its process no longer counts here.
    pub fn live(&self) -> usize {
        self.inner.handle.live()
    }

    /// The scheduler's activity counters.
    pub fn counters(&self) -> Counters {
        self.inner.handle.counters()
    }

    /// Cancels every live process, waits up to `grace` for them to finish, then interrupts the
    /// steps still running, closes the rest, and stops every thread (a host function still
    /// running is left to finish on its own thread). Returns within `grace` plus a short bound
    /// whatever the processes and host functions do. Later calls, from any clone, return the
    /// first one's report.
    pub fn shutdown(&self, grace: Duration) -> ShutdownReport {
        self.inner.shutdown(grace)
    }
}

impl Inner {
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

    fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let mut scheduler = self.scheduler.lock();
        if let Some(scheduler) = scheduler.take() {
            // What ends from here on is the host stopping, not the workflows: a durable host
            // journals no end for them, and a restart resumes them.
            if let Some(durable) = &self.durable {
                durable.stop();
            }
            // The wasm runtime and the modules are stopped by the scheduler's `on_stopped` hook.
            let report = scheduler.shutdown(grace);
            if let Some(durable) = &self.durable {
                // Whatever was handed to the journal is written before the host returns; then,
                // on a shared store, what this host owned is given back to the others.
                durable.writer.stop();
                if let Some(lease) = durable.lease.get() {
                    lease.end(durable.writer.failed().is_some());
                }
            }
            let _ = self.report.set(report);
        }
        self.report.get().cloned().unwrap_or_default()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown(DEFAULT_GRACE);
    }
}

/// What a start that failed says about its input: `Some` error when the entry point refused
/// it (it does not decode as its type, or its start traps), `None` when the start could not run
/// now (no instance free): the input is then taken, and checked when the process starts.
pub(crate) fn refused_start(error: wfhost_scheduler::ProcessError) -> Option<Error> {
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
