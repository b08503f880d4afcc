//! Hooks for the benchmarks: the pieces of a process, timed one by one. Not a stable API.

use std::sync::Arc;

use wasmtime::{Memory, Store, TypedFunc};
use wfcontract::{abi, Payload, Pid};
use wfhost_scheduler::{InitContext, Process, ProcessError};

use crate::error::Result;
use crate::grants::Grants;
use crate::wasm::{Compiled, GuestLimiter, GuestState, Limits, WasmProcess, WasmRuntime};

/// A compiled module and the runtime around it.
pub struct Harness {
    wasm: Arc<WasmRuntime>,
    compiled: Arc<Compiled>,
}

/// A bare instance, as raw wasmtime gives it.
pub struct RawInstance {
    store: Store<GuestState>,
    memory: Memory,
    reserve: TypedFunc<u32, u32>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for RawInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawInstance").finish_non_exhaustive()
    }
}

impl Harness {
    /// Compiles `bytes` with the default limits; `pooling` as in `HostBuilder::pooling`.
    pub fn new(bytes: &[u8], pooling: Option<u32>) -> Result<Harness> {
        Harness::with_limits(bytes, pooling, Limits::default())
    }

    /// Compiles `bytes` under `limits`.
    pub fn with_limits(bytes: &[u8], pooling: Option<u32>, limits: Limits) -> Result<Harness> {
        Harness::configured(bytes, pooling, limits, true, false)
    }

    /// Compiles `bytes` for a runtime configured as a host with this `capacity` would be.
    pub fn like_host(bytes: &[u8], capacity: &crate::Capacity) -> Result<Harness> {
        Harness::configured(
            bytes,
            capacity
                .pooled
                .then(|| u32::try_from(capacity.instances).unwrap_or(u32::MAX)),
            Limits::default(),
            capacity.copy_on_write,
            capacity.compact_memories,
        )
    }

    fn configured(
        bytes: &[u8],
        pooling: Option<u32>,
        limits: Limits,
        copy_on_write: bool,
        compact: bool,
    ) -> Result<Harness> {
        let wasm = Arc::new(WasmRuntime::standalone(
            limits,
            pooling,
            copy_on_write,
            compact,
        )?);
        let compiled = wasm.compile(bytes)?;
        Ok(Harness { wasm, compiled })
    }

    /// The runtime the harness's processes run in.
    #[cfg(test)]
    pub(crate) fn runtime(&self) -> &WasmRuntime {
        &self.wasm
    }

    /// Raw wasmtime: a store with a WASI context, instantiated from the `InstancePre`.
    pub fn instantiate_raw(&self) -> RawInstance {
        let wasi = super::wasi::Logs::new(Pid(1), None).wasi();
        let mut store = Store::new(
            &self.wasm.engine,
            GuestState {
                wasi,
                limits: GuestLimiter::new(&self.wasm.limits),
                reads: crate::wasm::reads::ReadState::default(),
            },
        );
        store.set_epoch_deadline(self.wasm.limits.deadline_ticks());
        let instance = self
            .compiled
            .pre
            .instantiate(&mut store)
            .expect("instantiates");
        let memory = instance
            .get_memory(&mut store, abi::EXPORT_MEMORY)
            .expect("memory");
        let reserve = instance
            .get_typed_func(&mut store, abi::EXPORT_RESERVE)
            .expect("reserve");
        RawInstance {
            store,
            memory,
            reserve,
        }
    }

    /// wfhost: a process of entry point `entry`, instantiated and initialised.
    pub fn spawn(
        &self,
        entry: &str,
        input: Payload,
    ) -> std::result::Result<Box<dyn Process>, ProcessError> {
        let mut process = WasmProcess::new(
            Arc::clone(&self.wasm),
            crate::wasm::Loaded {
                name: Arc::from("bench"),
                compiled: Arc::clone(&self.compiled),
                grants: Arc::new(Grants::default()),
            }
            .spec(None, Arc::clone(&self.wasm.limits)),
        );
        process.init(&InitContext::new(Pid(1), None), entry, input)?;
        Ok(Box::new(process))
    }
}

impl RawInstance {
    /// One call into the guest that reserves 32 bytes, and the write of 32 bytes there.
    pub fn write32(&mut self, bytes: &[u8; 32]) {
        let ptr = self.reserve.call(&mut self.store, 32).expect("reserve");
        self.memory
            .write(&mut self.store, ptr as usize, bytes)
            .expect("write");
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.wasm.stop();
    }
}
