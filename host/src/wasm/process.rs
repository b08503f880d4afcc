//! A WebAssembly instance as a [`Process`].

use std::sync::Arc;

use serde::Serialize;
use wasmtime::{Memory, Store, StoreLimitsBuilder, Trap, TypedFunc};
use wasmtime_wasi::I32Exit;
use wfcontract::abi::{self, InitResponse};
use wfcontract::{Command, Event, InitRequest, Payload, Pid, Status, StepOutput, Yield};
use wfhost_scheduler::{Events, InitContext, Process, ProcessError};

use crate::wasm::wasi::{wasi_for, LogStream};
use crate::wasm::{Compiled, Forbidden, GuestState, WasmRuntime};

/// One process: a module, the entry point it runs, and (between `init` and `close`) its instance.
pub(crate) struct WasmProcess {
    runtime: Arc<WasmRuntime>,
    module: Arc<Compiled>,
    /// The name the module was loaded under: a child spawned with no module name runs this one.
    module_name: Arc<str>,
    pid: Pid,
    entry: String,
    live: Option<Live>,
    /// Encoded input for the next call; reused.
    scratch: Vec<u8>,
}

struct Live {
    store: Store<GuestState>,
    memory: Memory,
    reserve: TypedFunc<u32, u32>,
    init: TypedFunc<u32, u64>,
    step: TypedFunc<u32, u64>,
    panic_message: TypedFunc<(), u64>,
    stdout: LogStream,
    stderr: LogStream,
}

#[derive(Clone, Copy)]
enum Export {
    Init,
    Step,
}

impl WasmProcess {
    pub(crate) fn new(
        runtime: Arc<WasmRuntime>,
        module: Arc<Compiled>,
        module_name: Arc<str>,
    ) -> WasmProcess {
        WasmProcess {
            runtime,
            module,
            module_name,
            pid: Pid::HOST,
            entry: String::new(),
            live: None,
            scratch: Vec::new(),
        }
    }

    /// "process <7> (entry point 'greet') <what>".
    fn fail(&self, what: impl std::fmt::Display) -> ProcessError {
        ProcessError::new(format!(
            "process {} (entry point '{}') {what}",
            self.pid, self.entry
        ))
    }

    fn instantiate(&mut self) -> Result<Live, ProcessError> {
        let wasi = wasi_for(self.pid);
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.runtime.limits.max_memory_bytes)
            .table_elements(self.runtime.limits.max_table_elements)
            .instances(1)
            .memories(1)
            .tables(1)
            .build();
        let mut store = Store::new(
            &self.runtime.engine,
            GuestState {
                wasi: wasi.ctx,
                limits,
            },
        );
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(self.runtime.deadline_ticks());
        let instance = self
            .module
            .pre
            .instantiate(&mut store)
            .map_err(|e| self.fail(format_args!("could not be instantiated: {e:#}")))?;
        let exports = &self.module.exports;
        if let Some(export) = &exports.initialize {
            let initialize = instance
                .get_module_export(&mut store, export)
                .and_then(|e| e.into_func())
                .ok_or_else(|| self.fail("has an unusable _initialize"))?;
            if let Err(error) = initialize.call(&mut store, &[], &mut []) {
                return Err(self.fail(format_args!("trapped while initializing: {error:#}")));
            }
        }
        // The exports and their signatures were checked when the module was loaded.
        let mut func = |export| {
            instance
                .get_module_export(&mut store, export)
                .and_then(|e| e.into_func())
                .ok_or_else(|| self.fail("lacks an ABI export it was loaded with"))
        };
        let reserve = func(&exports.reserve)?;
        let init = func(&exports.init)?;
        let step = func(&exports.step)?;
        let panic_message = func(&exports.panic_message)?;
        let memory = instance
            .get_module_export(&mut store, &exports.memory)
            .and_then(|e| e.into_memory())
            .ok_or_else(|| self.fail("exports a 'memory' that is not a memory"))?;
        let wrong = |e: wasmtime::Error| self.fail(format_args!("has a mistyped export: {e:#}"));
        Ok(Live {
            reserve: reserve.typed(&store).map_err(wrong)?,
            init: init.typed(&store).map_err(wrong)?,
            step: step.typed(&store).map_err(wrong)?,
            panic_message: panic_message.typed(&store).map_err(wrong)?,
            memory,
            store,
            stdout: wasi.stdout,
            stderr: wasi.stderr,
        })
    }

    /// Encodes `request` into guest memory, calls `export`, returns the answer's bytes.
    fn call<Req: Serialize + ?Sized>(
        &mut self,
        export: Export,
        request: &Req,
    ) -> Result<Vec<u8>, ProcessError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let scratch = postcard::to_extend(request, scratch)
            .map_err(|e| self.fail(format_args!("could not be sent its input: {e}")))?;
        let result = self.call_encoded(export, &scratch);
        self.scratch = scratch;
        result
    }

    fn malformed(&self, error: impl std::fmt::Display) -> ProcessError {
        self.fail(format_args!(
            "returned a malformed answer ({error}): the module does not follow the wfhost ABI"
        ))
    }

    /// Decodes a step's answer, refusing more yields than the limit before decoding any of them,
    /// so a guest cannot make the host build millions of them from a small answer.
    fn decode_step(&self, bytes: &[u8]) -> Result<StepOutput, ProcessError> {
        let (status, rest) =
            postcard::take_from_bytes::<Status>(bytes).map_err(|e| self.malformed(e))?;
        // A sequence's length is a varint, as a u64 is.
        let (count, mut rest) =
            postcard::take_from_bytes::<u64>(rest).map_err(|e| self.malformed(e))?;
        let max = self.runtime.limits.max_yields_per_step;
        if count > max as u64 {
            return Err(self.fail(format_args!(
                "yielded {count} commands in one step, more than the limit of {max}"
            )));
        }
        let mut yields = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let (y, left) =
                postcard::take_from_bytes::<Yield>(rest).map_err(|e| self.malformed(e))?;
            yields.push(y);
            rest = left;
        }
        Ok(StepOutput { status, yields })
    }

    fn call_encoded(&mut self, export: Export, input: &[u8]) -> Result<Vec<u8>, ProcessError> {
        let ticks = self.runtime.deadline_ticks();
        let max_output = self.runtime.limits.max_output_bytes;
        let live = self
            .live
            .as_mut()
            .ok_or_else(|| ProcessError::new("the process has no instance"))?;
        let len = u32::try_from(input.len()).map_err(|_| {
            ProcessError::new("an input larger than 4 GiB cannot be sent to a guest")
        })?;
        live.store.set_epoch_deadline(ticks);
        let outcome = (|| {
            let ptr = live.reserve.call(&mut live.store, len)?;
            live.memory
                .write(&mut live.store, ptr as usize, input)
                .map_err(|_| {
                    wasmtime::Error::msg("it reserved an input buffer outside its memory")
                })?;
            let func = match export {
                Export::Init => &live.init,
                Export::Step => &live.step,
            };
            func.call(&mut live.store, len)
        })();
        let packed = match outcome {
            Ok(packed) => packed,
            Err(error) => return Err(self.trapped(error)),
        };
        let (ptr, len) = abi::unpack(packed);
        if len as usize > max_output {
            return Err(self.fail(format_args!(
                "returned {len} bytes, more than the limit of {max_output}"
            )));
        }
        let live = self.live.as_ref().expect("checked above");
        live.memory
            .data(&live.store)
            .get(ptr as usize..ptr as usize + len as usize)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| self.fail("returned an answer outside its memory"))
    }

    /// Turns a failed call into the process's failure, naming the cause.
    fn trapped(&mut self, error: wasmtime::Error) -> ProcessError {
        if let Some(exit) = error.downcast_ref::<I32Exit>() {
            return self.fail(format_args!("exited with code {}", exit.0));
        }
        if let Some(forbidden) = error.downcast_ref::<Forbidden>() {
            return self.fail(forbidden);
        }
        if let Some(Trap::Interrupt) = error.downcast_ref::<Trap>() {
            let limit = self.runtime.limits.step_time_limit;
            return self.fail(format_args!(
                "ran longer than the step time limit of {limit:?} and was stopped"
            ));
        }
        if let Some(message) = self.panic_message() {
            return self.fail(format_args!("panicked: {message}"));
        }
        let said = self
            .live
            .as_ref()
            .map(|live| live.stderr.last_line())
            .filter(|line| !line.is_empty())
            .map(|line| format!(" (its last words on stderr: {line})"))
            .unwrap_or_default();
        match error.downcast_ref::<Trap>() {
            Some(trap) => self.fail(format_args!("trapped: {trap}{said}")),
            None => self.fail(format_args!("failed: {error:#}{said}")),
        }
    }

    /// The guest's last panic message, if it recorded one.
    fn panic_message(&mut self) -> Option<String> {
        let ticks = self.runtime.deadline_ticks();
        let live = self.live.as_mut()?;
        live.store.set_epoch_deadline(ticks);
        let packed = live.panic_message.call(&mut live.store, ()).ok()?;
        let (ptr, len) = abi::unpack(packed);
        if len == 0 || len as usize > 64 * 1024 {
            return None;
        }
        let bytes = live
            .memory
            .data(&live.store)
            .get(ptr as usize..ptr as usize + len as usize)?;
        Some(String::from_utf8_lossy(bytes).into_owned())
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
            return Err(ProcessError::new(
                self.module.info.unknown_entry(method).to_string(),
            ));
        }
        self.live = Some(self.instantiate()?);
        let request = InitRequest {
            pid: ctx.pid(),
            parent: ctx.parent(),
            entry: method.to_string(),
            input,
        };
        let bytes = self.call(Export::Init, &request)?;
        let answer: InitResponse = postcard::from_bytes(&bytes).map_err(|e| self.malformed(e))?;
        answer.map_err(ProcessError::new)
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        let events: &[Event] = events.as_slice();
        let bytes = self.call(Export::Step, events)?;
        let output = self.decode_step(&bytes)?;
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
        Ok(())
    }

    fn close(&mut self) {
        if let Some(live) = self.live.take() {
            live.stdout.finish();
            live.stderr.finish();
        }
    }
}
