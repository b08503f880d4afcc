//! A process's live instance: its store, its exports, and the count it holds against the capacity.

use std::sync::Arc;

use wasmtime::{Global, Memory, Store, TypedFunc};

use crate::wasm::{Compiled, GuestLimiter, GuestState, InstanceSlot, Limits};

/// An instance and what a process calls in it.
pub(crate) struct Live {
    pub(super) store: Store<GuestState>,
    pub(super) memory: Memory,
    pub(super) reserve: TypedFunc<u32, u32>,
    pub(super) init: TypedFunc<u32, u64>,
    pub(super) step: TypedFunc<u32, u64>,
    pub(super) panic_message: TypedFunc<(), u64>,
    /// The module's mutable globals, when its processes can hibernate.
    pub(super) globals: Vec<Global>,
    /// Counts this instance among the host's live ones.
    pub(super) _slot: InstanceSlot,
}

impl Live {
    /// The size of its linear memory, in bytes.
    pub(crate) fn memory_size(&self) -> usize {
        self.memory.data_size(&self.store)
    }

    /// A store for a new instance, within `limits`.
    pub(super) fn store(
        compiled: &Arc<Compiled>,
        wasi: wasmtime_wasi::p1::WasiP1Ctx,
        limits: &Limits,
    ) -> Store<GuestState> {
        let mut store = Store::new(
            compiled.pre.module().engine(),
            GuestState {
                wasi,
                limits: GuestLimiter::new(limits),
                reads: crate::wasm::reads::ReadState::default(),
            },
        );
        store.limiter(|state| &mut state.limits);
        store
    }
}
