//! A WebAssembly instance as a [`Process`].

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use wasmtime::{Global, Memory, Store, Trap, TypedFunc};
use wasmtime_wasi::I32Exit;
use wfcontract::abi::{self, DecodeError, InitResponse};
use wfcontract::{
    Command, CommandError, ErrorKind, Event, InitRequest, Payload, Pid, Status, StepOutput,
};
use wfhost_scheduler::{Events, FailureKind, InitContext, Process, ProcessError};

use crate::grants::Grants;
use crate::host::Loaded;
use crate::wasm::hibernate::{InstanceSlot, Snapshot};
use crate::wasm::module::bytes as size;
use crate::wasm::wasi::Logs;
use crate::wasm::{Compiled, Forbidden, GuestLimiter, GuestState, Refusal, WasmRuntime};

/// Fuel for the call that reads a panic message: plenty for a copy, nothing for a loop.
const PANIC_MESSAGE_FUEL: u64 = 1_000_000;

/// A failure that is the guest's doing (a trap, an exit, a forbidden call), as opposed to a
/// resource the host could not provide.
fn is_guest_fault(error: &wasmtime::Error) -> bool {
    error.downcast_ref::<Trap>().is_some()
        || error.downcast_ref::<I32Exit>().is_some()
        || error.downcast_ref::<Forbidden>().is_some()
}

/// One process: a module, the entry point it runs, and (between `init` and `close`) its instance.
pub(crate) struct WasmProcess {
    runtime: Arc<WasmRuntime>,
    module: Arc<Compiled>,
    /// The name the module was loaded under: a child spawned with no module name runs this one.
    module_name: Arc<str>,
    /// The commands the module may use.
    grants: Arc<Grants>,
    pid: Pid,
    entry: String,
    live: Option<Live>,
    /// While hibernated: its state, and no instance.
    snapshot: Option<Snapshot>,
    /// Its stdout and stderr, from `init` on.
    logs: Option<Logs>,
    /// Events that arrived while it could not be woken (no free instance), for its next step.
    deferred: Vec<Event>,
    /// Since when it has been waiting for an instance to wake into.
    waking_since: Option<Instant>,
    /// Encoded input for the next call; reused.
    scratch: Vec<u8>,
}

pub(crate) struct Live {
    store: Store<GuestState>,
    memory: Memory,
    reserve: TypedFunc<u32, u32>,
    init: TypedFunc<u32, u64>,
    step: TypedFunc<u32, u64>,
    panic_message: TypedFunc<(), u64>,
    /// The module's mutable globals, when its processes can hibernate.
    globals: Vec<Global>,
    /// Counts this instance among the host's live ones.
    _slot: InstanceSlot,
}

/// Instances of one module given up by hibernating or finished processes, kept so that the next
/// restore rewrites a few pages of one instead of instantiating (and later unmapping) another.
#[derive(Default)]
pub(crate) struct WarmInstances(parking_lot::Mutex<Vec<Live>>);

/// Warm instances kept per module at most.
const WARM_PER_MODULE: usize = 16;

/// A warm instance's memory may be at most this large: a process that grew its memory does not
/// leave it resident for others.
const WARM_MAX_MEMORY: usize = 4 << 20;

impl WarmInstances {
    /// Keeps `live` if there is room, here and in the host's instance capacity.
    fn offer(&self, live: Live, runtime: &WasmRuntime) {
        if !runtime.instances.may_keep_warm()
            || live.memory.data_size(&live.store) > WARM_MAX_MEMORY
        {
            return;
        }
        let mut warm = self.0.lock();
        if warm.len() < WARM_PER_MODULE {
            warm.push(live);
            runtime.instances.warm(true);
        }
    }

    fn take(&self, runtime: &WasmRuntime) -> Option<Live> {
        let live = self.0.lock().pop()?;
        runtime.instances.warm(false);
        Some(live)
    }
}

/// Why a hibernated process was not woken.
enum WakeError {
    /// No instance can be had now.
    NoInstance(ProcessError),
    /// It cannot be restored.
    Failed(ProcessError),
}

#[derive(Clone, Copy)]
enum Export {
    Init,
    Step,
}

impl WasmProcess {
    pub(crate) fn new(runtime: Arc<WasmRuntime>, loaded: Loaded) -> WasmProcess {
        WasmProcess {
            runtime,
            module: loaded.compiled,
            module_name: loaded.name,
            grants: loaded.grants,
            pid: Pid::HOST,
            entry: String::new(),
            live: None,
            snapshot: None,
            logs: None,
            deferred: Vec::new(),
            waking_since: None,
            scratch: Vec::new(),
        }
    }

    /// "process <7> (entry point 'greet') <what>", of `kind`.
    fn fail(&self, kind: FailureKind, what: impl std::fmt::Display) -> ProcessError {
        ProcessError::with_kind(
            kind,
            format!("process {} (entry point '{}') {what}", self.pid, self.entry),
        )
    }

    /// Sets the budgets of one call into the guest: its time, and its fuel when fuel is on.
    fn arm(runtime: &WasmRuntime, store: &mut Store<GuestState>) {
        store.set_epoch_deadline(runtime.deadline_ticks());
        store.data_mut().limits.refused = None;
        if let Some(fuel) = runtime.limits.fuel_per_step {
            // Fuel is enabled exactly when this is set, so this cannot fail.
            let _ = store.set_fuel(fuel);
        }
    }

    /// A new instance of the process's module. `initialize`: run the module's `_initialize`
    /// (not when restoring from hibernation, whose memory has it done already).
    fn instantiate(&mut self, initialize: bool) -> Result<Live, ProcessError> {
        let slot = self.runtime.instances.take().map_err(|refusal| {
            self.fail(
                FailureKind::Limit,
                format_args!("could not be given an instance: {refusal}"),
            )
        })?;
        let logs = self.logs.get_or_insert_with(|| Logs::new(self.pid));
        let mut store = Store::new(
            &self.runtime.engine,
            GuestState {
                wasi: logs.wasi(),
                limits: GuestLimiter::new(&self.runtime.limits),
            },
        );
        store.limiter(|state| &mut state.limits);
        // Instantiation runs the module's start function: it gets the same budgets as a step.
        Self::arm(&self.runtime, &mut store);
        let instance = match self.module.pre.instantiate(&mut store) {
            Ok(instance) => instance,
            Err(error) if is_guest_fault(&error) => {
                return Err(self.classify(
                    error,
                    store.data().limits.refused,
                    None,
                    "in its start function",
                ))
            }
            // Everything else is a resource the instance could not get: its memory or table
            // (over a limit, or refused by the OS), or a slot in the instance pool.
            Err(error) => {
                return Err(self.fail(
                    FailureKind::Limit,
                    format_args!("could not be instantiated: {error:#}"),
                ))
            }
        };
        let exports = &self.module.exports;
        if let Some(export) = exports.initialize.as_ref().filter(|_| initialize) {
            let initialize = instance
                .get_module_export(&mut store, export)
                .and_then(|e| e.into_func())
                .and_then(|f| f.typed::<(), ()>(&store).ok())
                .ok_or_else(|| {
                    self.fail(
                        FailureKind::BadOutput,
                        "exports an _initialize that is not a function () -> ()",
                    )
                })?;
            if let Err(error) = initialize.call(&mut store, ()) {
                return Err(self.classify(
                    error,
                    store.data().limits.refused,
                    None,
                    "while initializing",
                ));
            }
        }
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
        let globals = match &self.module.hibernation {
            Ok(hibernating) => hibernating
                .globals
                .iter()
                .map(|export| {
                    instance
                        .get_module_export(&mut store, export)
                        .and_then(|e| e.into_global())
                        .ok_or_else(|| {
                            self.fail(
                                FailureKind::BadOutput,
                                "lacks a global export it was loaded with",
                            )
                        })
                })
                .collect::<Result<Vec<_>, _>>()?,
            Err(_) => Vec::new(),
        };
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

    /// Gives the instance back, keeping what differs from a fresh one, when the host's
    /// [`Hibernation`](crate::Hibernation) policy says so and the module allows it.
    fn hibernate_if_due(&mut self) {
        let module = Arc::clone(&self.module);
        let Ok(hibernating) = &module.hibernation else {
            return;
        };
        if !self.runtime.instances.should_hibernate() {
            return;
        }
        let Some(mut live) = self.live.take() else {
            return;
        };
        let snapshot = Snapshot::take(
            &mut live.store,
            live.memory,
            &live.globals,
            &hibernating.plan.image,
        );
        hibernating.warm.offer(live, &self.runtime);
        self.runtime.instances.hibernated(snapshot.size());
        self.snapshot = Some(snapshot);
    }

    /// Restores `snapshot` into a warm instance of the module, if one fits.
    fn wake_warm(&mut self, snapshot: &Snapshot) -> Option<Live> {
        let module = Arc::clone(&self.module);
        let hibernating = module.hibernation.as_ref().ok()?;
        let logs = self.logs.as_ref()?;
        let mut live = hibernating.warm.take(&self.runtime)?;
        // The instance's WASI context was its last process's: this one gets its own.
        live.store.data_mut().wasi = logs.wasi();
        match snapshot.restore_over(
            &mut live.store,
            live.memory,
            &live.globals,
            &hibernating.plan.image,
        ) {
            Ok(true) => Some(live),
            // A memory of another size, or no page map: instantiate afresh.
            Ok(false) | Err(_) => None,
        }
    }

    /// Brings a hibernated process back: a fresh instance with its saved state written in.
    /// When no instance can be had, the snapshot is kept and the error says so
    /// ([`WakeError::NoInstance`]).
    fn wake(&mut self) -> Result<(), WakeError> {
        let Some(snapshot) = self.snapshot.take() else {
            return Ok(());
        };
        if let Some(live) = self.wake_warm(&snapshot) {
            self.runtime.instances.woken(snapshot.size(), true);
            self.live = Some(live);
            return Ok(());
        }
        let mut live = match self.instantiate(false) {
            Ok(live) => live,
            Err(error) => {
                self.snapshot = Some(snapshot);
                return Err(match error.kind() {
                    FailureKind::Limit => WakeError::NoInstance(error),
                    _ => WakeError::Failed(error),
                });
            }
        };
        self.runtime.instances.woken(snapshot.size(), true);
        if let Err(error) = snapshot.restore(&mut live.store, live.memory, &live.globals) {
            return Err(WakeError::Failed(self.fail(
                FailureKind::Limit,
                format_args!("could not be restored from hibernation: {error:#}"),
            )));
        }
        self.live = Some(live);
        Ok(())
    }

    /// Encodes `request` into guest memory, calls `export`, returns the answer's bytes.
    fn call<Req: Serialize + ?Sized>(
        &mut self,
        export: Export,
        request: &Req,
    ) -> Result<Vec<u8>, ProcessError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let scratch = postcard::to_extend(request, scratch).map_err(|e| {
            self.fail(
                FailureKind::Failed,
                format_args!("could not be sent its input: {e}"),
            )
        })?;
        let result = self.call_encoded(export, &scratch);
        self.scratch = scratch;
        result
    }

    fn malformed(&self, error: impl std::fmt::Display) -> ProcessError {
        self.fail(
            FailureKind::BadOutput,
            format_args!(
                "returned a malformed answer ({error}): the module does not follow the wfhost ABI"
            ),
        )
    }

    /// Decodes a step's answer within the yield limit (see [`abi::decode_step_output`]).
    fn decode_step(&self, bytes: &[u8]) -> Result<StepOutput, ProcessError> {
        let max = self.runtime.limits.max_yields_per_step;
        abi::decode_step_output(bytes, max).map_err(|error| match error {
            DecodeError::TooManyYields { count, limit } => self.fail(
                FailureKind::Limit,
                format_args!(
                    "yielded {count} commands in one step, more than the limit of {limit} \
                     (Limits::max_yields_per_step, --max-yields)"
                ),
            ),
            DecodeError::Malformed(e) => self.malformed(e),
            DecodeError::TrailingBytes(n) => {
                self.malformed(format_args!("{n} bytes left over after it"))
            }
        })
    }

    fn call_encoded(&mut self, export: Export, input: &[u8]) -> Result<Vec<u8>, ProcessError> {
        let max_output = self.runtime.limits.max_output_bytes;
        let Some(live) = self.live.as_mut() else {
            return Err(self.fail(FailureKind::Failed, "has no instance"));
        };
        let Ok(len) = u32::try_from(input.len()) else {
            return Err(self.fail(
                FailureKind::Limit,
                "cannot be sent an input larger than 4 GiB",
            ));
        };
        let ptr = match live.reserve.call(&mut live.store, len) {
            Ok(ptr) => ptr,
            Err(error) => return Err(self.trapped(error)),
        };
        if live
            .memory
            .write(&mut live.store, ptr as usize, input)
            .is_err()
        {
            return Err(self.fail(
                FailureKind::BadOutput,
                format_args!(
                    "reserved an input buffer outside its memory ({len} bytes at {ptr:#x}): \
                     the module does not follow the wfhost ABI"
                ),
            ));
        }
        let func = match export {
            Export::Init => &live.init,
            Export::Step => &live.step,
        };
        let packed = match func.call(&mut live.store, len) {
            Ok(packed) => packed,
            Err(error) => return Err(self.trapped(error)),
        };
        let (ptr, len) = abi::unpack(packed);
        if len as usize > max_output {
            return Err(self.fail(
                FailureKind::Limit,
                format_args!(
                    "returned an answer of {}, more than the limit of {} \
                     (Limits::max_output_bytes, --max-output)",
                    size(u64::from(len)),
                    size(max_output as u64)
                ),
            ));
        }
        let live = self.live.as_ref().expect("checked above");
        let start = ptr as usize;
        start
            .checked_add(len as usize)
            .and_then(|end| live.memory.data(&live.store).get(start..end))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| {
                self.fail(
                    FailureKind::BadOutput,
                    format_args!(
                        "returned an answer outside its memory ({len} bytes at {ptr:#x}): the \
                         module does not follow the wfhost ABI"
                    ),
                )
            })
    }

    /// Turns a failed call into the process's failure, naming the cause.
    fn trapped(&mut self, error: wasmtime::Error) -> ProcessError {
        // Read before the panic-message call runs guest code of its own.
        let refused = self
            .live
            .as_ref()
            .and_then(|live| live.store.data().limits.refused);
        // A guest panic traps (as `unreachable`, say); the SDK kept its message.
        let panic = match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt | Trap::OutOfFuel | Trap::StackOverflow) | None => None,
            Some(_) => self.panic_message(),
        };
        self.classify(error, refused, panic, "")
    }

    /// Names the cause of a failed call into the guest: a limit it hit, a forbidden call, an exit,
    /// or the trap itself (with its last words on stderr, if any). `during` says where, when that
    /// is not a plain step ("in its start function").
    fn classify(
        &self,
        error: wasmtime::Error,
        refused: Option<Refusal>,
        panic: Option<String>,
        during: &str,
    ) -> ProcessError {
        let during = if during.is_empty() {
            String::new()
        } else {
            format!(" {during}")
        };
        let limits = &self.runtime.limits;
        if let Some(exit) = error.downcast_ref::<I32Exit>() {
            return self.fail(
                FailureKind::Failed,
                format_args!("exited{during} with code {}", exit.0),
            );
        }
        if let Some(forbidden) = error.downcast_ref::<Forbidden>() {
            return self.fail(FailureKind::Trap, forbidden);
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => self.fail(
                FailureKind::Limit,
                format_args!(
                    "ran longer than the step time limit of {:?}{during} and was stopped \
                     (Limits::step_time_limit, --step-limit)",
                    limits.step_time_limit
                ),
            ),
            Some(Trap::OutOfFuel) => self.fail(
                FailureKind::Limit,
                format_args!(
                    "used up its fuel of {}{during} and was stopped (Limits::fuel_per_step, \
                     --fuel)",
                    limits.fuel_per_step.unwrap_or(0)
                ),
            ),
            Some(Trap::StackOverflow) => self.fail(
                FailureKind::Limit,
                format_args!(
                    "overflowed its stack{during}: its wasm frames may use {} \
                     (Limits::max_stack_bytes, --max-stack)",
                    size(limits.max_stack_bytes as u64)
                ),
            ),
            Some(trap) => match (panic, refused, trap) {
                (Some(message), _, _) => self.fail(
                    FailureKind::Trap,
                    format_args!("panicked{during}: {message}"),
                ),
                // Rust's allocator (and others) abort with `unreachable` when the memory they
                // asked for is refused.
                (None, Some(Refusal::Memory(wanted)), Trap::UnreachableCodeReached) => self.fail(
                    FailureKind::Limit,
                    format_args!(
                        "ran out of memory{during}: it asked to grow its memory to {}, past the \
                         limit of {} (Limits::max_memory_bytes, --max-memory), and then \
                         trapped ({trap}){}",
                        size(wanted as u64),
                        size(limits.max_memory_bytes as u64),
                        self.last_words()
                    ),
                ),
                (None, Some(Refusal::Table(wanted)), Trap::UnreachableCodeReached) => self.fail(
                    FailureKind::Limit,
                    format_args!(
                        "ran out of table space{during}: it asked to grow a table to {wanted} \
                         elements, past the limit of {} (Limits::max_table_elements, \
                         --max-table-elements), and then trapped ({trap})",
                        limits.max_table_elements
                    ),
                ),
                (None, refused, trap) => {
                    let note = match refused {
                        Some(Refusal::Memory(wanted)) => {
                            format!(" (after a refused memory.grow to {})", size(wanted as u64))
                        }
                        Some(Refusal::Table(wanted)) => {
                            format!(" (after a refused table.grow to {wanted} elements)")
                        }
                        None => String::new(),
                    };
                    self.fail(
                        FailureKind::Trap,
                        format_args!("trapped{during}: {trap}{note}{}", self.last_words()),
                    )
                }
            },
            None => self.fail(
                FailureKind::Trap,
                format_args!("failed{during}: {error:#}{}", self.last_words()),
            ),
        }
    }

    /// " (its last words on stderr: ...)", or nothing.
    fn last_words(&self) -> String {
        self.logs
            .as_ref()
            .map(|logs| logs.stderr.last_line())
            .filter(|line| !line.is_empty())
            .map(|line| format!(" (its last words on stderr: {line})"))
            .unwrap_or_default()
    }

    /// The guest's last panic message, if it recorded one. The guest gets one epoch tick (and
    /// a little fuel) to answer: the call is not a second chance at the step's budget.
    fn panic_message(&mut self) -> Option<String> {
        let live = self.live.as_mut()?;
        live.store.set_epoch_deadline(1);
        if self.runtime.limits.fuel_per_step.is_some() {
            let _ = live.store.set_fuel(PANIC_MESSAGE_FUEL);
        }
        let packed = live.panic_message.call(&mut live.store, ()).ok()?;
        let (ptr, len) = abi::unpack(packed);
        if len == 0 || len as usize > 64 * 1024 {
            return None;
        }
        let start = ptr as usize;
        let bytes = live
            .memory
            .data(&live.store)
            .get(start..start.checked_add(len as usize)?)?;
        Some(String::from_utf8_lossy(bytes).into_owned())
    }

    /// `message` cut to the payload limit: a failure's text is kept and copied like a result.
    fn capped(&self, mut message: String) -> String {
        let limit = self.runtime.limits.max_payload_bytes;
        if message.len() > limit {
            let mut cut = limit;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" [cut at the payload limit]");
        }
        message
    }
}

impl Drop for WasmProcess {
    fn drop(&mut self) {
        if let Some(snapshot) = self.snapshot.take() {
            self.runtime.instances.woken(snapshot.size(), false);
        }
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
        if !self.module.info.has_entry(method) {
            return Err(ProcessError::with_kind(
                FailureKind::Refused,
                self.module.info.unknown_entry(method).to_string(),
            ));
        }
        self.live = Some(self.instantiate(true)?);
        let request = InitRequest {
            pid: ctx.pid(),
            parent: ctx.parent(),
            entry: method.to_string(),
            input,
        };
        let bytes = self.call(Export::Init, &request)?;
        let answer: InitResponse = postcard::from_bytes(&bytes).map_err(|e| self.malformed(e))?;
        answer.map_err(|message| ProcessError::new(self.capped(message)))
    }

    fn check(&self, command: &Command) -> Result<(), CommandError> {
        self.grants.permits(command)?;
        let limits = &self.runtime.limits;
        let (what, len) = match command {
            Command::Send(send) => ("message", send.message.bytes.len()),
            Command::Spawn(spawn) => ("child's input", spawn.input.bytes.len()),
            Command::Call(call) => ("host command's input", call.input.bytes.len()),
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
        let Some(over) = limits.over_payload(len) else {
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

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        let events: &[Event] = events.as_slice();
        match self.wake() {
            Ok(()) => self.waking_since = None,
            // Every instance is taken (by processes running at once, or ones that cannot
            // hibernate): keep the events and try again after the others have had a turn. A
            // running process gives its instance back within a step time limit; waiting longer
            // than two means the instances are held by processes that do not hibernate.
            Err(WakeError::NoInstance(error)) => {
                let since = *self.waking_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= 2 * self.runtime.limits.step_time_limit {
                    return Err(error);
                }
                self.deferred.extend_from_slice(events);
                out.status = Status::Continue;
                return Ok(());
            }
            Err(WakeError::Failed(error)) => return Err(error),
        }
        let deferred = std::mem::take(&mut self.deferred);
        let with_deferred: Vec<Event>;
        let events = if deferred.is_empty() {
            events
        } else {
            with_deferred = deferred.into_iter().chain(events.iter().cloned()).collect();
            &with_deferred[..]
        };
        if let Some(live) = self.live.as_mut() {
            Self::arm(&self.runtime, &mut live.store);
        }
        if let Some(logs) = &self.logs {
            logs.new_call();
        }
        let bytes = self.call(Export::Step, events)?;
        let mut output = self.decode_step(&bytes)?;
        if let Status::Failed(message) = &mut output.status {
            *message = self.capped(std::mem::take(message));
        }
        if let Status::Done(result) = &output.status {
            let len = result.bytes.len();
            if let Some(over) = self.runtime.limits.over_payload(len) {
                return Err(self.fail(
                    FailureKind::Limit,
                    format_args!("finished with a result of {len} bytes, {over}"),
                ));
            }
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
        for y in &mut out.yields {
            // "This module" means the module this process runs, by the name it was loaded under.
            if let Command::Spawn(spawn) = &mut y.command {
                if spawn.module.is_none() {
                    spawn.module = Some(self.module_name.to_string());
                }
            }
        }
        if waiting {
            self.hibernate_if_due();
        }
        Ok(())
    }

    fn close(&mut self) {
        if let (Some(live), Ok(hibernating)) = (self.live.take(), &self.module.hibernation) {
            hibernating.warm.offer(live, &self.runtime);
        }
        if let Some(snapshot) = self.snapshot.take() {
            self.runtime.instances.woken(snapshot.size(), false);
        }
        if let Some(logs) = &self.logs {
            logs.finish();
        }
    }
}
