//! A WebAssembly instance as a scheduler [`Process`]: its life from `init` to `close`, and its
//! sleep in between (hibernation).
//!
//! | File | What |
//! |---|---|
//! | `mod.rs` | The life cycle: start, wake, step, hibernate, close. |
//! | `live.rs` | A live instance and its store. |
//! | `call.rs` | One call into the guest: input into its memory, the answer out, within the limits. |
//! | `saved.rs` | A process saved for a durable store between steps, and started again from it. |
//! | `trap.rs` | What a failed call means: a limit, a trap, a panic, an exit. |

mod call;
mod live;
mod saved;
#[cfg(test)]
mod tests;
mod trap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Global, Instance, Store};
use wfcontract::abi::InitResponse;
use wfcontract::{
    Command, CommandError, ErrorKind, Event, InitRequest, Payload, Pid, Status, StepOutput,
};
use wfhost_scheduler::{
    Events, FailureKind, InitContext, Process, ProcessError, Readiness, WakerSource,
};

pub(crate) use live::Live;
pub(crate) use saved::SavedProcess;

use crate::grants::Grants;
use crate::wasm::hibernate::Snapshot;
use crate::wasm::instances::TicketState;
use crate::wasm::limits::ticks;
use crate::wasm::reads::{ReadState, Reads};
use crate::wasm::wasi::Logs;
use crate::wasm::{Compiled, GuestState, InstanceSlot, Limits, Ticket, WasmRuntime};
use call::Export;

/// What a process runs, and within what.
#[derive(Clone)]
pub(crate) struct ProcessSpec {
    /// Its module, held for as long as the process lives: a child spawned with no module name
    /// runs this one (see `lineage`).
    pub(crate) module: crate::wasm::Loaded,
    /// The commands the process may use.
    pub(crate) grants: Arc<Grants>,
    /// Whether `grants` are narrower than its module's (given to this process, or inherited):
    /// then they also bound its children's.
    pub(crate) bound: bool,
    /// Its limits: the host's, or its own from `SpawnOptions`.
    pub(crate) limits: Arc<Limits>,
}

/// Which bound the running call's epoch deadline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deadline {
    /// The step time limit.
    Step,
    /// What is left of the process's CPU time.
    Cpu,
}

/// One process: a module, the entry point it runs, and (between `init` and `close`) its instance,
/// or, hibernated, its saved state.
pub(crate) struct WasmProcess {
    runtime: Arc<WasmRuntime>,
    spec: ProcessSpec,
    pid: Pid,
    entry: String,
    /// Boxed, as its state when hibernated and its streams: a process without an instance (a
    /// dormant durable workflow, a hibernated one) is small.
    live: Option<Box<Live>>,
    /// While hibernated: its state, and no instance.
    snapshot: Option<Box<Snapshot>>,
    /// While hibernated (or, started late, before its `init`) and waiting for an instance: its
    /// place in the queue.
    ticket: Option<Arc<Ticket>>,
    /// An instance taken for its `init` ([`reserve_instance`](Self::reserve_instance)).
    reserved: Option<InstanceSlot>,
    /// Its stdout and stderr, from `init` on.
    logs: Option<Box<Logs>>,
    /// Its workflow id, for a durable workflow: its log lines carry it.
    workflow: Option<Arc<str>>,
    /// What the guest writes is not logged (see [`WasmProcess::mute`]).
    muted: bool,
    /// Time spent running its code so far, and which bound the current call's deadline is.
    cpu: Duration,
    deadline: Deadline,
    /// Encoded input for the next call; reused, and given up when it hibernates.
    scratch: Vec<u8>,
    /// How its WASI clock and random reads are answered (in its instance's state during a call).
    reads: ReadState,
    /// Keeps its instance between steps whatever the policy (a durable replay steps it again at
    /// once).
    pinned: bool,
}

impl WasmProcess {
    pub(crate) fn new(runtime: Arc<WasmRuntime>, spec: ProcessSpec) -> WasmProcess {
        WasmProcess {
            runtime,
            spec,
            pid: Pid::HOST,
            entry: String::new(),
            live: None,
            snapshot: None,
            ticket: None,
            reserved: None,
            logs: None,
            workflow: None,
            muted: false,
            cpu: Duration::ZERO,
            deadline: Deadline::Step,
            scratch: Vec::new(),
            reads: ReadState::default(),
            pinned: false,
        }
    }

    /// Refuses a command whose payload is over the limits (a log record's is dropped).
    pub(crate) fn check_size(&self, command: &Command) -> Result<(), CommandError> {
        let (what, len) = match command {
            Command::Send(send) => ("message", send.message.bytes.len()),
            Command::Spawn(spawn) => ("child's input", spawn.input.bytes.len()),
            Command::Call(call) | Command::Retry(wfcontract::RetryRequest { call, .. }) => {
                ("host function's input", call.input.bytes.len())
            }
            Command::Log(record) => {
                let len = record.message.len()
                    + record
                        .fields
                        .iter()
                        .map(|f| f.key.len() + f.value.len())
                        .sum::<usize>();
                ("log record", len)
            }
            _ => return Ok(()),
        };
        let Some(over) = self.limits().over_payload(len) else {
            return Ok(());
        };
        if matches!(command, Command::Log(_)) {
            tracing::warn!(pid = %self.pid, "dropped a log record of {len} bytes, {over}");
        }
        Err(CommandError::new(
            ErrorKind::LimitReached,
            format!("the {what} is {len} bytes, {over}"),
        ))
    }

    /// Keeps its instance between steps (`true`), or lets it hibernate as the host's policy says.
    pub(crate) fn pin(&mut self, pinned: bool) {
        self.pinned = pinned;
    }

    /// Moves the process's read state into its instance for a call, or back out after it.
    fn swap_reads(&mut self) {
        if let Some(live) = self.live.as_mut() {
            std::mem::swap(&mut self.reads, &mut live.store.data_mut().reads);
        }
    }

    /// A process with this one's limits, not started, of module `loaded` with its grants: what
    /// an upgraded workflow runs.
    pub(crate) fn sibling(&self, loaded: &crate::wasm::Loaded) -> WasmProcess {
        let mut sibling = WasmProcess::new(
            Arc::clone(&self.runtime),
            loaded.spec(None, Arc::clone(&self.spec.limits)),
        );
        sibling.workflow = self.workflow.clone();
        sibling
    }

    /// Whether its grants let it reach any process, not only its own children.
    pub(crate) fn reaches_any_process(&self) -> bool {
        self.spec.grants.reaches_any_process()
    }

    /// Its module's SHA-256, in hex.
    pub(crate) fn sha256(&self) -> Arc<str> {
        Arc::from(self.spec.module.compiled.info.sha256.as_str())
    }

    /// The name its module was loaded under (what its spawns without a module name run).
    pub(crate) fn module_name(&self) -> &str {
        &self.spec.module.name
    }

    /// Names the durable workflow this process runs: what it writes to stdout and stderr is
    /// logged with its id.
    pub(crate) fn set_workflow(&mut self, id: Arc<str>) {
        self.workflow = Some(id);
    }

    /// Stops (or starts again) logging what the guest writes to stdout and stderr: a durable
    /// workflow replaying its journal wrote it once already.
    pub(crate) fn mute(&mut self, muted: bool) {
        self.muted = muted;
        if let Some(logs) = &self.logs {
            logs.mute(muted);
        }
    }

    /// How its WASI reads are answered from now on; returns how they were.
    pub(crate) fn set_reads(&mut self, reads: Reads) -> Reads {
        std::mem::replace(&mut self.reads.reads, reads)
    }

    /// Makes its WASI clocks read `clock` instead of the machine's (a test's virtual clock).
    pub(crate) fn set_virtual_clock(&mut self, clock: crate::wasm::reads::VirtualClock) {
        self.reads.virtual_clock = Some(clock);
    }

    /// Makes its monotonic clock read `nanos` now (a process replayed in a new host goes on from
    /// the last value its journal gave it).
    pub(crate) fn set_monotonic(&mut self, nanos: u64) {
        let elapsed = std::time::Duration::from_nanos(nanos);
        if let Some(origin) = Instant::now().checked_sub(elapsed) {
            self.reads.origin = origin;
        }
    }

    fn limits(&self) -> &Limits {
        &self.spec.limits
    }

    /// "process <7> (entry point 'greet') <what>", of `kind`.
    fn fail(&self, kind: FailureKind, what: impl std::fmt::Display) -> ProcessError {
        ProcessError::with_kind(
            kind,
            format!("process {} (entry point '{}') {what}", self.pid, self.entry),
        )
    }

    /// Refuses to start a call into the guest once the host has interrupted every guest to shut
    /// down: a call armed after that would get a whole step's time again, so a process stepping
    /// again and again (or queued behind one that was interrupted) could hold the shutdown.
    fn refuse_if_shut_down(&self, during: &str) -> Result<(), ProcessError> {
        if self
            .runtime
            .interrupted
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(self.fail(
                FailureKind::Terminated,
                format_args!("was stopped {during}: the host shut down"),
            ));
        }
        Ok(())
    }

    /// Sets the budgets of one call into the guest: its time (the step time limit, or what is
    /// left of its CPU time if less), and its fuel when fuel is on.
    fn arm(&mut self) {
        let limits = &self.spec.limits;
        let step = limits.deadline_ticks();
        let (ticks, deadline) = match limits.max_cpu_time {
            Some(cpu) => {
                let left = ticks(cpu.saturating_sub(self.cpu));
                if left < step {
                    (left, Deadline::Cpu)
                } else {
                    (step, Deadline::Step)
                }
            }
            None => (step, Deadline::Step),
        };
        let fuel = limits.fuel_per_step;
        self.deadline = deadline;
        if let Some(live) = self.live.as_mut() {
            arm_store(&mut live.store, ticks, fuel);
        }
    }

    /// Counts `since`'s time against the process's CPU time.
    fn spent(&mut self, since: Instant) {
        self.cpu += since.elapsed();
    }

    /// The failure of a process whose CPU time is used up.
    fn out_of_cpu(&self) -> ProcessError {
        let limit = self.limits().max_cpu_time.unwrap_or_default();
        self.fail(
            FailureKind::Limit,
            format_args!(
                "used up its CPU time limit of {limit:?} over its life and was stopped \
                 (Limits::max_cpu_time, --max-cpu)"
            ),
        )
    }

    /// A new instance of the process's module, counted by `slot`. `initialize`: run the module's
    /// `_initialize` (not when restoring from hibernation, whose memory has it done already).
    fn instantiate(&mut self, initialize: bool, slot: InstanceSlot) -> Result<Live, ProcessError> {
        self.refuse_if_shut_down("before it was instantiated")?;
        let mut store = self.new_store();
        let compiled = Arc::clone(&self.spec.module.compiled);
        let instance = self.start_instance(&compiled, &mut store)?;
        if initialize {
            self.run_initialize(&compiled, instance, &mut store)?;
        }
        self.bind_exports(&compiled, instance, store, slot)
    }

    /// A store for a new instance, with the process's WASI (its logs made at the first) and the
    /// budgets of a step: instantiation runs the module's start function.
    fn new_store(&mut self) -> Store<GuestState> {
        let muted = self.muted;
        let logs = self.logs.get_or_insert_with(|| {
            let logs = Logs::new(self.pid, self.workflow.clone());
            logs.mute(muted);
            Box::new(logs)
        });
        let mut store = Live::store(&self.spec.module.compiled, logs.wasi(), &self.spec.limits);
        // Instantiation runs the module's start function: it gets the same budgets as a step.
        arm_store(
            &mut store,
            self.spec.limits.deadline_ticks(),
            self.spec.limits.fuel_per_step,
        );
        store
    }

    /// Instantiates `compiled` in `store`, running its start function; a failure is the
    /// guest's (a trap, an exit) or a resource the instance could not get.
    fn start_instance(
        &self,
        compiled: &Compiled,
        store: &mut Store<GuestState>,
    ) -> Result<Instance, ProcessError> {
        match compiled.pre.instantiate(&mut *store) {
            Ok(instance) => Ok(instance),
            Err(error) if trap::is_guest_fault(&error) => Err(self.classify(
                error,
                store.data().limits.refused,
                None,
                "in its start function",
            )),
            // Everything else is a resource the instance could not get: its memory or table
            // (over a limit, or refused by the OS), or a slot in the instance pool.
            Err(error) => Err(self.fail(
                FailureKind::Limit,
                format_args!("could not be instantiated: {error:#}"),
            )),
        }
    }

    /// Runs the module's `_initialize`, if it exports one (a WASI reactor), with the process's
    /// reads.
    fn run_initialize(
        &mut self,
        compiled: &Compiled,
        instance: Instance,
        store: &mut Store<GuestState>,
    ) -> Result<(), ProcessError> {
        let Some(export) = compiled.exports.initialize.as_ref() else {
            return Ok(());
        };
        let initialize = instance
            .get_module_export(&mut *store, export)
            .and_then(|e| e.into_func())
            .and_then(|f| f.typed::<(), ()>(&*store).ok())
            .ok_or_else(|| {
                self.fail(
                    FailureKind::BadOutput,
                    "exports an _initialize that is not a function () -> ()",
                )
            })?;
        std::mem::swap(&mut self.reads, &mut store.data_mut().reads);
        let initialized = initialize.call(&mut *store, ());
        std::mem::swap(&mut self.reads, &mut store.data_mut().reads);
        initialized.map_err(|error| {
            self.classify(
                error,
                store.data().limits.refused,
                None,
                "while initializing",
            )
        })
    }

    /// The live instance: `instance` in `store`, with the ABI's exports and the globals
    /// hibernation saves found and typed.
    fn bind_exports(
        &self,
        compiled: &Compiled,
        instance: Instance,
        mut store: Store<GuestState>,
        slot: InstanceSlot,
    ) -> Result<Live, ProcessError> {
        let exports = &compiled.exports;
        // The exports and their signatures were checked when the module was loaded.
        let mut func = |export| {
            instance
                .get_module_export(&mut store, export)
                .and_then(|e| e.into_func())
                .ok_or_else(|| {
                    self.fail(
                        FailureKind::BadOutput,
                        "lacks an ABI export it was loaded with",
                    )
                })
        };
        let reserve = func(&exports.reserve)?;
        let init = func(&exports.init)?;
        let step = func(&exports.step)?;
        let panic_message = func(&exports.panic_message)?;
        let memory = instance
            .get_module_export(&mut store, &exports.memory)
            .and_then(|e| e.into_memory())
            .ok_or_else(|| {
                self.fail(
                    FailureKind::BadOutput,
                    "exports a 'memory' that is not a memory",
                )
            })?;
        let globals = self.bind_globals(compiled, instance, &mut store)?;
        let wrong = |e: wasmtime::Error| {
            self.fail(
                FailureKind::BadOutput,
                format_args!("has a mistyped export: {e:#}"),
            )
        };
        Ok(Live {
            reserve: reserve.typed(&store).map_err(wrong)?,
            init: init.typed(&store).map_err(wrong)?,
            step: step.typed(&store).map_err(wrong)?,
            panic_message: panic_message.typed(&store).map_err(wrong)?,
            memory,
            store,
            globals,
            _slot: slot,
        })
    }

    /// The module's mutable globals in `instance`, when its processes can hibernate (none
    /// otherwise).
    fn bind_globals(
        &self,
        compiled: &Compiled,
        instance: Instance,
        store: &mut Store<GuestState>,
    ) -> Result<Vec<Global>, ProcessError> {
        let Ok(hibernating) = &compiled.hibernation else {
            return Ok(Vec::new());
        };
        hibernating
            .globals
            .iter()
            .map(|export| {
                instance
                    .get_module_export(&mut *store, export)
                    .and_then(|e| e.into_global())
                    .ok_or_else(|| {
                        self.fail(
                            FailureKind::BadOutput,
                            "lacks a global export it was loaded with",
                        )
                    })
            })
            .collect()
    }

    /// Gives the instance back, keeping what differs from a fresh one, when the host's
    /// [`Hibernation`](crate::Hibernation) policy says so and the module allows it.
    fn hibernate_if_due(&mut self) {
        let compiled = Arc::clone(&self.spec.module.compiled);
        let Ok(hibernating) = &compiled.hibernation else {
            return;
        };
        if !self.runtime.instances.should_hibernate() {
            return;
        }
        let Some(mut live) = self.live.take() else {
            return;
        };
        // Saving is work done for the process, as restoring is: it counts as its CPU time.
        let started = Instant::now();
        let snapshot = Snapshot::take(
            &mut live.store,
            live.memory,
            &live.globals,
            &hibernating.plan.image,
        );
        let fresh = fresh_bytes(hibernating);
        self.runtime
            .warm
            .offer(compiled.id, fresh, *live, &self.runtime.instances);
        self.set_scratch(Vec::new());
        let bytes = snapshot.size();
        tracing::debug!(pid = %self.pid, saved = bytes, "process hibernated");
        self.runtime.instances.hibernated(bytes);
        self.snapshot = Some(Box::new(snapshot));
        self.spent(started);
    }

    /// A warm instance of the module, reset to what a fresh one holds before `init`, if one is
    /// kept and the module's fresh state is known. Only for modules whose instantiation runs no
    /// code that could read WASI (no start function, which hibernation refuses anyway, and no
    /// `_initialize`): a process started warm must read what one started fresh reads, or its
    /// journal would not replay in a fresh instance.
    fn start_warm(&mut self) -> Option<Live> {
        let compiled = Arc::clone(&self.spec.module.compiled);
        let hibernating = compiled.hibernation.as_ref().ok()?;
        if compiled.exports.initialize.is_some() {
            return None;
        }
        let fresh = hibernating.fresh.get()?;
        let mut live =
            self.runtime
                .warm
                .take(compiled.id, fresh.memory_bytes(), &self.runtime.instances)?;
        self.adopt(&mut live);
        match fresh.restore_over(
            &mut live.store,
            live.memory,
            &live.globals,
            &hibernating.plan.image,
        ) {
            Ok(true) => {
                self.runtime.instances.started_warm();
                Some(live)
            }
            // A memory that grew, or no page map: a fresh instance instead (this one is given
            // back as it goes).
            Ok(false) => None,
            Err(error) => {
                tracing::warn!(
                    pid = %self.pid,
                    "could not reset a warm instance ({error:#}); starting in a fresh one"
                );
                None
            }
        }
    }

    /// Keeps what the fresh instance `live` holds, before its `init`, as the module's fresh
    /// state, if none is kept yet (see [`start_warm`](Self::start_warm)).
    fn keep_fresh(&self, live: &mut Live) {
        let compiled = &self.spec.module.compiled;
        let Ok(hibernating) = &compiled.hibernation else {
            return;
        };
        if compiled.exports.initialize.is_some() || hibernating.fresh.get().is_some() {
            return;
        }
        let fresh = Snapshot::take(
            &mut live.store,
            live.memory,
            &live.globals,
            &hibernating.plan.image,
        );
        let _ = hibernating.fresh.set(fresh);
    }

    /// Makes a warm instance, another process's before, this process's: its own WASI (its
    /// logs), its limits, no reads of the last one's.
    fn adopt(&mut self, live: &mut Live) {
        let muted = self.muted;
        let logs = self.logs.get_or_insert_with(|| {
            let logs = Logs::new(self.pid, self.workflow.clone());
            logs.mute(muted);
            Box::new(logs)
        });
        let state = live.store.data_mut();
        state.wasi = logs.wasi();
        state.limits = crate::wasm::GuestLimiter::new(&self.spec.limits);
        state.reads = ReadState::default();
    }

    /// Restores the snapshot into a warm instance of the module, if one is kept and fits.
    fn wake_warm(&mut self) -> bool {
        let compiled = Arc::clone(&self.spec.module.compiled);
        let Ok(hibernating) = &compiled.hibernation else {
            return false;
        };
        let Some(bytes) = self
            .snapshot
            .as_ref()
            .map(|snapshot| snapshot.memory_bytes())
        else {
            return false;
        };
        if self.logs.is_none() {
            return false;
        }
        let Some(mut live) = self
            .runtime
            .warm
            .take(compiled.id, bytes, &self.runtime.instances)
        else {
            return false;
        };
        // The instance was its last process's: this one gets its own WASI and limits.
        self.adopt(&mut live);
        let Some(snapshot) = &self.snapshot else {
            return false;
        };
        match snapshot.restore_over(
            &mut live.store,
            live.memory,
            &live.globals,
            &hibernating.plan.image,
        ) {
            Ok(true) => {}
            // A memory of another size, or no page map: a fresh instance instead.
            Ok(false) => return false,
            Err(error) => {
                tracing::warn!(
                    pid = %self.pid,
                    "could not restore into a warm instance ({error:#}); trying a fresh one"
                );
                return false;
            }
        }
        self.woken(live, "a warm instance");
        true
    }

    /// Restores the snapshot into a fresh instance counted by `slot`.
    fn wake_fresh(&mut self, slot: InstanceSlot) -> Result<(), ProcessError> {
        let mut live = self.instantiate(false, slot)?;
        let Some(snapshot) = &self.snapshot else {
            return Ok(());
        };
        if let Err(error) = snapshot.restore(&mut live.store, live.memory, &live.globals) {
            return Err(self.fail(
                FailureKind::Limit,
                format_args!("could not be restored from hibernation: {error:#}"),
            ));
        }
        self.woken(live, "a fresh instance");
        Ok(())
    }

    /// The process runs in `live` from now on: its snapshot is spent.
    fn woken(&mut self, live: Live, into: &str) {
        if let Some(snapshot) = self.snapshot.take() {
            tracing::debug!(pid = %self.pid, saved = snapshot.size(), "process restored into {into}");
            self.runtime.instances.woken(snapshot.size(), true);
        }
        self.live = Some(Box::new(live));
    }

    /// The failure of a hibernated process that waited for an instance while none was given back.
    fn no_instance(&self) -> ProcessError {
        self.fail(
            FailureKind::Limit,
            format_args!(
                "could not be woken: no instance was given back for {:?} (every instance is held \
                 by a process that does not hibernate); {}",
                self.runtime.instances.stall(),
                self.runtime.instances.refusal()
            ),
        )
    }

    /// Swaps the input buffer, keeping the host's count of buffer bytes.
    fn set_scratch(&mut self, scratch: Vec<u8>) {
        self.runtime
            .instances
            .buffer(self.scratch.capacity(), scratch.capacity());
        self.scratch = scratch;
    }

    /// Gives back what the process holds outside its instance: its saved state, its place in
    /// the queue for an instance, its buffer. Idempotent.
    fn release(&mut self) {
        if self.pid != Pid::HOST && self.runtime.passes_on(&self.spec) {
            self.runtime.note_process(self.pid, None);
        }
        if let Some(snapshot) = self.snapshot.take() {
            self.runtime.instances.woken(snapshot.size(), false);
        }
        if let Some(ticket) = self.ticket.take() {
            self.runtime.instances.withdraw(&ticket);
        }
        self.set_scratch(Vec::new());
    }
}

/// The memory a fresh instance of the module has: what a warm instance may keep.
fn fresh_bytes(hibernating: &crate::wasm::module::Hibernating) -> usize {
    hibernating
        .fresh
        .get()
        .map_or(0, crate::wasm::hibernate::Snapshot::memory_bytes)
}

/// Sets a store's time budget (`ticks` epoch ticks) and fuel for one call.
fn arm_store(store: &mut wasmtime::Store<crate::wasm::GuestState>, ticks: u64, fuel: Option<u64>) {
    store.set_epoch_deadline(ticks);
    store.data_mut().limits.refused = None;
    if let Some(fuel) = fuel {
        // Fuel is enabled exactly when this is set, so this cannot fail.
        let _ = store.set_fuel(fuel);
    }
}

impl Drop for WasmProcess {
    fn drop(&mut self) {
        self.release();
    }
}

impl Process for WasmProcess {
    fn init(
        &mut self,
        ctx: &InitContext,
        method: &str,
        input: Payload,
    ) -> Result<(), ProcessError> {
        self.pid = ctx.pid();
        self.entry = method.to_string();
        self.runtime.note_process(self.pid, Some(&self.spec));
        let info = &self.spec.module.compiled.info;
        if !info.has_entry(method) {
            return Err(ProcessError::with_kind(
                FailureKind::Refused,
                info.unknown_entry(method).to_string(),
            ));
        }
        let started = Instant::now();
        if let Some(live) = self.start_warm() {
            // The warm instance counts against the capacity already: a slot reserved for this
            // process goes back.
            drop(self.reserved.take());
            self.spent(started);
            self.live = Some(Box::new(live));
        } else {
            let slot = match self.reserved.take() {
                Some(slot) => slot,
                None => self.runtime.take_instance().map_err(|refusal| {
                    self.fail(
                        FailureKind::Limit,
                        format_args!("could not be given an instance: {refusal}"),
                    )
                })?,
            };
            let live = self.instantiate(true, slot);
            self.spent(started);
            let mut live = live?;
            self.keep_fresh(&mut live);
            self.live = Some(Box::new(live));
        }
        let request = InitRequest {
            pid: ctx.pid(),
            parent: ctx.parent(),
            entry: method.to_string(),
            input,
            max_yields: u32::try_from(self.limits().max_yields_per_step).unwrap_or(u32::MAX),
        };
        let bytes = self.call(Export::Init, &request)?;
        let answer: InitResponse = postcard::from_bytes(&bytes).map_err(|e| self.malformed(e))?;
        answer.map_err(|message| {
            ProcessError::with_kind(FailureKind::InvalidInput, self.capped(message))
        })
    }

    fn prepare(&mut self, waker: &WakerSource<'_>) -> Result<Readiness, ProcessError> {
        if self.snapshot.is_none() {
            return Ok(Readiness::Ready);
        }
        // Hibernated, and about to step: it needs an instance.
        let granted = match self.ticket.take() {
            Some(ticket) => match ticket.state() {
                TicketState::Granted => Some(self.runtime.instances.redeem(&ticket)),
                TicketState::Waiting => {
                    self.ticket = Some(ticket);
                    return Ok(Readiness::NotReady);
                }
                TicketState::Expired => return Err(self.no_instance()),
            },
            None => None,
        };
        let started = Instant::now();
        let woken = if self.wake_warm() {
            // A granted instance not needed after all goes to the next waiter.
            drop(granted);
            Ok(())
        } else {
            let slot = match granted {
                Some(slot) => slot,
                None => match self.runtime.take_instance_or_queue(|| waker.waker()) {
                    Ok(slot) => slot,
                    Err(ticket) => {
                        self.ticket = Some(ticket);
                        return Ok(Readiness::NotReady);
                    }
                },
            };
            self.wake_fresh(slot)
        };
        self.spent(started);
        woken.map(|()| Readiness::Ready)
    }

    fn lineage(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        Some(&self.spec.module)
    }

    fn check(&self, command: &Command) -> Result<(), CommandError> {
        self.spec.grants.permits(command)?;
        self.check_size(command)
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        let events: &[Event] = events.as_slice();
        if let Some(logs) = &self.logs {
            logs.new_call();
        }
        let bytes = self.call(Export::Step, events)?;
        let mut output = self.decode_step(&bytes)?;
        if let Status::Failed(message) | Status::Cancelled(message) = &mut output.status {
            *message = self.capped(std::mem::take(message));
        }
        if let Status::Done(result) = &output.status {
            let len = result.bytes.len();
            if let Some(over) = self.limits().over_payload(len) {
                return Err(self.fail(
                    FailureKind::Limit,
                    format_args!("finished with a result of {len} bytes, {over}"),
                ));
            }
        }
        if !output.status.is_final()
            && self
                .limits()
                .max_cpu_time
                .is_some_and(|limit| self.cpu >= limit)
        {
            return Err(self.out_of_cpu());
        }
        // Waiting for messages, or for commands that take a while: worth giving the instance up.
        // Not while the answer to one of its commands is coming straight back.
        let waiting = match output.status {
            Status::Idle => true,
            Status::Wait => !output.yields.iter().any(|y| {
                matches!(
                    y.command,
                    Command::Now
                        | Command::Random
                        | Command::Send(_)
                        | Command::Spawn(_)
                        | Command::Cancel(_)
                )
            }),
            _ => false,
        };
        out.status = output.status;
        out.yields = output.yields;
        out.receive = output.receive;
        if waiting && !self.pinned {
            self.hibernate_if_due();
        }
        Ok(())
    }

    fn close(&mut self) {
        if let (Some(live), Ok(hibernating)) =
            (self.live.take(), &self.spec.module.compiled.hibernation)
        {
            self.runtime.warm.offer(
                self.spec.module.compiled.id,
                fresh_bytes(hibernating),
                *live,
                &self.runtime.instances,
            );
        }
        self.release();
        if let Some(logs) = &self.logs {
            logs.finish();
        }
    }
}
