//! The host: a scheduler, a WebAssembly runtime, and the modules loaded into it.

use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use wfcontract::{Payload, Pid};
use wfhost_scheduler::{Counters, Scheduler, ShutdownReport, Spawn, DEFAULT_GRACE};

use crate::durable::{Damage, Durable, DurableCounters, WorkflowResult};
use crate::engine::{check_payload, Engine};
use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::metrics::{DurableSample, Metrics, Sample, Source};
use crate::run::{Run, SpawnOptions};
use crate::wasm::capacity::Capacity;
use crate::wasm::{Limits, ModuleInfo, Residency, WasmProcess};

/// Runs workflow modules: loads them, spawns their entry points as processes, and lets the
/// embedding application talk to those processes.
///
/// A `Host` is a handle: cloning it is cheap, and every clone drives the same host, from any
/// thread. [`shutdown`](Self::shutdown) stops it for all of them; when the last clone is dropped
/// without one, the host shuts down with a grace period of 5 seconds. A clone held by one of the
/// host's own functions keeps the host alive until `shutdown` is called.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

struct Inner {
    /// What processes run on.
    engine: Engine,
    /// Taken by the first shutdown.
    scheduler: Mutex<Option<Scheduler>>,
    report: OnceLock<ShutdownReport>,
    /// The journal and the store, when the host is durable.
    durable: Option<Arc<Durable>>,
    /// Where the host is counted, if anywhere.
    metrics: Option<Metrics>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("workers", &self.engine().handle.workers())
            .field("live", &self.live())
            .finish_non_exhaustive()
    }
}

impl Host {
    pub(crate) fn new(
        scheduler: Scheduler,
        engine: Engine,
        durable: Option<Arc<Durable>>,
        metrics: Option<Metrics>,
    ) -> Host {
        let inner = Arc::new(Inner {
            engine,
            scheduler: Mutex::new(Some(scheduler)),
            report: OnceLock::new(),
            durable,
            metrics,
        });
        if let Some(metrics) = &inner.metrics {
            let weak: Weak<dyn Source> = Arc::downgrade(&inner) as Weak<dyn Source>;
            metrics.attach(weak);
        }
        Host { inner }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The durable side, when the host has a store.
    pub(crate) fn durable_part(&self) -> Option<&Arc<Durable>> {
        self.inner.durable.as_ref()
    }

    /// The metrics the host counts into, if any.
    pub fn metrics(&self) -> Option<&Metrics> {
        self.inner.metrics.as_ref()
    }

    fn durable(&self) -> Result<&Arc<Durable>> {
        self.inner.durable.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Config,
                "this host has no store: build it with HostBuilder::store to run durable workflows",
            )
        })
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
        let bytes = crate::modules::read_module(path)?;
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
        self.engine().running()?;
        let compiled = self.engine().wasm.compile(bytes)?;
        let info = compiled.info.clone();
        if let Some(durable) = &self.inner.durable {
            // Kept by hash before anything runs it: a workflow recovers with the module it
            // started with, whatever the file on disk holds by then.
            durable.keep_module(&info.sha256, bytes)?;
        }
        self.engine().modules.insert(name, compiled, grants);
        Ok(info)
    }

    /// Loads the store's copy of a module (`bytes`, kept in the store first) under `name`
    /// (`wfhost:<hash>`), with `grants`: the module, held for the caller.
    pub(crate) fn load_stored_module(
        &self,
        name: &str,
        bytes: &[u8],
        grants: Grants,
    ) -> Result<crate::wasm::Loaded> {
        self.engine().running()?;
        let compiled = self.engine().wasm.compile(bytes)?;
        if let Some(durable) = &self.inner.durable {
            durable.keep_module(&compiled.info.sha256, bytes)?;
        }
        Ok(self.engine().modules.insert_stored(name, compiled, grants))
    }

    /// Unloads the module loaded under `name`: nothing can be spawned from it any more. Processes
    /// running it go on; once the last has finished, its compiled code, its memory image and its
    /// warm instances are freed.
    pub fn unload_module(&self, name: &str) -> Result<()> {
        self.engine().modules.remove(name)
    }

    /// What the module loaded under `name` declares.
    pub fn module_info(&self, name: &str) -> Result<ModuleInfo> {
        Ok(self.engine().modules.get(name)?.compiled.info.clone())
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
        let engine = self.engine();
        engine.running()?;
        let loaded = engine.entry(module, entry)?;
        engine.check_input(&loaded, entry, input)
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
        let inner = self.engine();
        inner.running()?;
        let loaded = inner.entry(module, entry)?;
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
        let pid = inner.spawn(spawn)?;
        Ok(Run::new(pid, receiver, messages))
    }

    /// How many processes this host can hold at once, and what bounds that (worked out at
    /// start-up from the process limit, the pooling slots and the OS's memory-mapping limit).
    pub fn capacity(&self) -> Capacity {
        self.engine().capacity
    }

    /// What the host holds: processes with an instance and hibernated ones, warm instances,
    /// compiled modules, buffers. The counts move as processes run; read them when the host is
    /// quiet for exact figures.
    pub fn residency(&self) -> Residency {
        let mut residency = self.engine().wasm.instances.residency();
        residency.compiles = self.engine().wasm.compiles();
        if let Some(pool) = self.engine().wasm.engine.pooling_allocator_metrics() {
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
        check_payload(&self.engine().wasm.limits, "the message", &message)?;
        if let Some(durable) = self.inner.durable.as_ref().filter(|d| d.ids.contains(pid)) {
            return durable
                .send_from_host(&self.engine().handle, pid, message)
                .map(drop);
        }
        self.engine()
            .handle
            .send(pid, message)
            .map_err(Error::refused)
    }

    /// Asks process `pid` to stop: a cancel, delivered ahead of its queued messages. It may clean
    /// up, within the cancel grace period.
    pub fn cancel(&self, pid: Pid) -> Result<()> {
        if let Some(durable) = self.inner.durable.as_ref().filter(|d| d.ids.contains(pid)) {
            // Kept before it is delivered: a restart delivers it again if no step took it.
            durable.keep_cancel(pid)?;
        }
        self.engine().handle.cancel(pid).map_err(Error::refused)
    }

    /// Ends process `pid` at its next turn without stepping it again: it fails with
    /// [`ErrorKind::Terminated`] and `reason`. A step in progress is not interrupted.
    pub fn terminate(&self, pid: Pid, reason: &str) -> Result<()> {
        self.engine()
            .handle
            .terminate(pid, reason)
            .map_err(Error::refused)
    }

    /// Processes that have not finished.
    ///
    /// A process is counted out before its result reaches anyone (a joining parent, a `wait`),
    /// so once a result is in hand its process no longer counts here.
    pub fn live(&self) -> usize {
        self.engine().handle.live()
    }

    /// The scheduler's activity counters.
    pub fn counters(&self) -> Counters {
        self.engine().handle.counters()
    }

    /// On a store hosts share, this host's number there (each host that joins gets a new one).
    pub fn store_host(&self) -> Option<u64> {
        self.inner.durable.as_ref()?.store_host()
    }

    /// Why the store takes nothing more from this host, if it does not: it could not be
    /// written, or (on a store hosts share) this host lost its lease. Its durable workflows have
    /// stopped where their journals end; a new host on the store goes on with them.
    pub fn store_failure(&self) -> Option<Error> {
        self.inner.durable.as_ref()?.store_failure()
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
        let durable = self.durable()?;
        durable
            .start(self.engine(), id, module, entry, input)
            .map(Run::from)
    }

    /// Where durable workflow `id` stands, from the store.
    pub fn result(&self, id: &str) -> Result<WorkflowResult> {
        self.durable()?.result(id)
    }

    /// What this host counts about snapshots and replay since it started: how many workflows
    /// recovered from a snapshot, how many journaled steps and events they replayed. Replay
    /// happens at each recovered workflow's first step, so the counts settle once those ran.
    pub fn durable_counters(&self) -> Result<DurableCounters> {
        Ok(self.durable()?.counts.read())
    }

    /// Replays the journal of durable workflow `id` with module `module` (loaded in this host),
    /// without running anything: whether a new build of a workflow's module does what the old one
    /// did, before recovering its workflows with it. Returns the steps replayed; a module that
    /// differs is an [`ErrorKind::Nondeterminism`] error naming the step and what differs.
    pub fn replay(&self, id: &str, module: &str) -> Result<u64> {
        self.durable()?.replay(self.engine(), id, module)
    }

    /// Gives the running workflow `id` new code: the module `wasm`. The workflow's whole
    /// journal is replayed against it first, in an instance of its own; only if every step
    /// does what the journal says does the workflow switch, between two of its steps, and go on
    /// with the new module from where it stands (paused, it stays paused). Otherwise nothing
    /// changes, and the error ([`ErrorKind::Conflict`]) names the step and what differs. Code
    /// that changes what a step does asks `ctx.patched("name")` (the SDK) where it parts from
    /// the old: histories the old code recorded replay the old branch.
    ///
    /// The new module is kept in the store (a restart recovers the workflow with it), and runs
    /// with the grants of a module this host loaded with the same bytes, if any, or else none
    /// (see [`upgrade_with`](Self::upgrade_with)): as a recovery would run it. Its children go
    /// on with their own modules; those it starts from now on of "this module" run the new
    /// one. A workflow that runs on no host (waiting for its module, or, on a store hosts
    /// share, owned by none) is checked and switched in the store; one another host runs is
    /// upgraded through that host.
    pub fn upgrade(&self, id: &str, wasm: &[u8]) -> Result<crate::Upgraded> {
        self.upgrade_with(id, wasm, Grants::default())
    }

    /// As [`upgrade`](Self::upgrade), with `grants` for the new module if this host has not
    /// loaded the same bytes (what a client of the host gets for the modules it stores).
    pub fn upgrade_with(&self, id: &str, wasm: &[u8], grants: Grants) -> Result<crate::Upgraded> {
        self.engine().running()?;
        self.durable()?.upgrade(self.engine(), id, wasm, grants)
    }

    /// Resets finished top-level workflow `id`: a new run of it keeps its journal up to step
    /// `to_step` (`None`: up to the step before the one that ended it, or before the one that
    /// took its cancel) and goes on from there, under the same id; with `wasm`, it runs that
    /// module in place of its own, which must replay the steps kept ([`ErrorKind::Conflict`]
    /// names the step that differs otherwise).
    ///
    /// The steps kept are replayed, not run again. What the run did after them is done again by
    /// the new run, with idempotency keys of its own (`order-7/run-2#5`: a worker or a service
    /// that deduplicates by key sees new work). Messages clients sent the run that it took after
    /// the steps kept are sent to the new run again, then those it never read; messages from
    /// workflows are not (they come again as the new run asks again). The run before is kept,
    /// with its journal, result and children, under the id `order-7/run-1`. The steps kept are
    /// replayed as the new run before anything is written ([`ErrorKind::Conflict`] if one
    /// differs, as one that used its process number does).
    ///
    /// Refused: a workflow that has not finished (cancel it first), a child (reset its
    /// top-level workflow), a run a reset ended, and a reset whose kept steps spawned a child
    /// (that child belongs to the run before; the error says to which step it may go back). The new module runs with
    /// the grants of a module this host loaded with the same bytes, if any, or else none (see
    /// [`reset_with`](Self::reset_with)).
    pub fn reset(
        &self,
        id: &str,
        to_step: Option<u64>,
        wasm: Option<&[u8]>,
    ) -> Result<crate::WorkflowReset> {
        self.reset_with(id, to_step, wasm, Grants::default())
    }

    /// As [`reset`](Self::reset), with `grants` for a module this host has not loaded (a new
    /// one, or the one the workflow ran, kept in the store).
    pub fn reset_with(
        &self,
        id: &str,
        to_step: Option<u64>,
        wasm: Option<&[u8]>,
        grants: Grants,
    ) -> Result<crate::WorkflowReset> {
        self.engine().running()?;
        self.durable()?
            .reset(self.engine(), id, to_step, wasm, grants, true)
    }

    /// As [`reset`](Self::reset), without starting the new run here: it waits in the store for
    /// whoever recovers it (what a tool's host over a store it does not serve does).
    pub fn reset_unstarted(
        &self,
        id: &str,
        to_step: Option<u64>,
        wasm: Option<&[u8]>,
    ) -> Result<crate::WorkflowReset> {
        self.engine().running()?;
        self.durable()?
            .reset(self.engine(), id, to_step, wasm, Grants::default(), false)
    }

    /// Starts every unfinished workflow of the store again: each starts from its latest snapshot
    /// (see [`HostBuilder::snapshots`](crate::HostBuilder::snapshots)), or a fresh instance of
    /// the module it started with (kept in the store by hash), replays the journal after that, checking that it does what the
    /// journal says, and goes on from there: its timers fire at their due time (at once if that
    /// passed while the host was down), host calls that had not answered run again with the same
    /// idempotency key, and messages that had not been taken are delivered again.
    ///
    /// A workflow runs the module loaded now with the same bytes, under that module's grants.
    /// With none loaded, it is not started: it waits, with the rest of its tree, for a host that
    /// loads its module (on a store hosts share, it is given back for one), and a warning says
    /// so. A workflow never runs under grants nobody gave it: not without the host functions
    /// its module was loaded with, and not with those of another build loaded under its name.
    /// [`recover_with`](Self::recover_with) runs such workflows from the bytes the store kept,
    /// under the grants it is given.
    ///
    /// Returns a [`Run`] for each top-level workflow recovered (children are followed by their
    /// parents), with its id. Call it once, after loading modules and before starting new work.
    pub fn recover(&self) -> Result<Vec<(String, Run)>> {
        self.claim_modules(None, usize::MAX)
    }

    /// As [`recover`](Self::recover), with `grants` for the workflows whose module is not loaded
    /// under the name they started with (they run the bytes the store kept): what the CLI does,
    /// with the grants its flags give.
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
        self.claim_modules(None, limit)
    }

    /// As [`claim`](Self::claim), with `grants` for the workflows whose module is not loaded.
    pub fn claim_with(&self, grants: Grants, limit: usize) -> Result<Vec<(String, Run)>> {
        self.claim_modules(Some(grants), limit)
    }

    fn claim_modules(&self, grants: Option<Grants>, limit: usize) -> Result<Vec<(String, Run)>> {
        let claimed = self.durable()?.claim(self.engine(), grants, limit)?;
        Ok(claimed
            .into_iter()
            .map(|(id, spawned)| (id, Run::from(spawned)))
            .collect())
    }

    /// On a store hosts share: how many unfinished workflows no other host is known to run
    /// (none owns them, or the host that does stopped renewing its lease or has not renewed it
    /// since this one joined). They can be claimed now or once that lease runs out: `wfhost
    /// resume` claims until none is left. 0 on a store of this host's own.
    pub fn claimable(&self) -> Result<u64> {
        self.durable()?.claimable()
    }

    /// On a store hosts share: calls `wake` (from a thread of its own) whenever a client or
    /// another host writes work to take (a start, a message, a cancel, workflows given back), so
    /// that a host calling [`claim`](Self::claim) in a loop need not poll often. Until the host
    /// shuts down. Nothing on a store of this host's own.
    pub fn on_new_work(&self, wake: impl Fn() + Send + Sync + 'static) -> Result<()> {
        self.durable()?.on_new_work(wake)
    }

    /// What recoveries by this host found damaged and left as it was: workflows whose journal,
    /// input or module cannot be read back from the store, and the others of their trees. They
    /// are marked damaged in the store (not failed), and a host started once the store is
    /// repaired, or the build fixed, resumes them.
    pub fn damaged(&self) -> Result<Vec<Damage>> {
        Ok(self.durable()?.damage())
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
            if let Some(metrics) = &self.metrics {
                metrics.detach(self);
            }
        }
        self.report.get().cloned().unwrap_or_default()
    }
}

impl Source for Inner {
    fn sample(&self) -> Sample {
        let residency = self.engine.wasm.instances.residency();
        let counters = self.engine.handle.counters();
        Sample {
            processes: self.engine.handle.live() as u64,
            hibernated: residency.hibernated as u64,
            waiting_for_instance: residency.waiting_for_instance as u64,
            live_instances: residency.live_instances as u64,
            warm_instances: residency.warm_instances as u64,
            steps: counters.steps,
            spawned: counters.spawns,
            finished: counters.completions,
            compiles: self.engine.wasm.compiles(),
            durable: self.durable.as_ref().map(|durable| {
                let store_up = durable.writer.failed().is_none();
                DurableSample {
                    running: durable.ids.len() as u64,
                    damaged: durable.damaged.lock().len() as u64,
                    pending: durable.writer.pending() as u64,
                    store_up,
                    lease_held: durable.lease.get().map(|_| store_up),
                }
            }),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown(DEFAULT_GRACE);
    }
}
