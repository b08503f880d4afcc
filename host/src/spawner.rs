//! What a guest's `spawn` starts: a process of a loaded module, with its grants (bounded by its
//! parent's, when those were narrowed) and its parent's limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wfcontract::{CommandError, ErrorKind, Pid, SpawnRequest};
use wfhost_scheduler::{Error, Spawn, Spawner};

use crate::capacity::Capacity;
use crate::modules::Modules;
use crate::wasm::{WasmProcess, WasmRuntime};

/// Makes the wasm processes guests spawn.
pub(crate) struct GuestSpawner {
    pub(crate) wasm: Arc<WasmRuntime>,
    pub(crate) modules: Arc<Modules>,
    pub(crate) capacity: Capacity,
    /// Set once the operator has been told the host is full.
    pub(crate) warned: AtomicBool,
}

impl Spawner for GuestSpawner {
    fn process(&self, parent: Pid, request: SpawnRequest) -> Result<Spawn, CommandError> {
        let invalid = |message: String| CommandError::new(ErrorKind::InvalidInput, message);
        let module = request.module.ok_or_else(|| {
            invalid("spawn names no module, and the spawner is not a wasm process".into())
        })?;
        let loaded = self
            .modules
            .get(&module)
            .map_err(|e| invalid(e.message().to_string()))?;
        let info = &loaded.compiled.info;
        if !info.has_entry(&request.entry) {
            return Err(invalid(
                info.unknown_entry(&request.entry).message().to_string(),
            ));
        }
        // Within its parent's limits, and its parent's grants if they were narrowed.
        let inherited = self.wasm.inherited(parent);
        let grants = inherited
            .bound
            .map(|bound| Arc::new(loaded.grants.intersection(&bound)));
        let spec = loaded.spec(grants, inherited.limits);
        let confined = !spec.grants.reaches_any_process();
        let process = WasmProcess::new(Arc::clone(&self.wasm), spec);
        Ok(Spawn::new(process, request.entry, request.input).confined(confined))
    }

    fn refused(&self, error: Error) -> CommandError {
        match error {
            Error::TooManyProcesses(_) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!("a guest's spawn was refused: {}", self.capacity.refusal());
                }
                CommandError::new(ErrorKind::LimitReached, self.capacity.guest_refusal())
            }
            other => other.into_command_error(),
        }
    }
}
