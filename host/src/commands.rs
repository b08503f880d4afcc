//! The host's command handlers, beyond the scheduler's built-in ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wfcontract::{Command, CommandError, ErrorKind, Payload};
use wfhost_scheduler::{Context, Error, Handler, Request, Spawn};

use crate::capacity::Capacity;
use crate::host::Modules;
use crate::wasm::{WasmProcess, WasmRuntime};

/// `spawn`: starts an entry point of a loaded module as a child of the requesting process.
pub(crate) struct SpawnHandler {
    wasm: Arc<WasmRuntime>,
    modules: Arc<Modules>,
    capacity: Capacity,
    /// Set once the operator has been told the host is full.
    warned: AtomicBool,
}

impl SpawnHandler {
    pub(crate) fn new(
        wasm: Arc<WasmRuntime>,
        modules: Arc<Modules>,
        capacity: Capacity,
    ) -> SpawnHandler {
        SpawnHandler {
            wasm,
            modules,
            capacity,
            warned: AtomicBool::new(false),
        }
    }

    /// Tells the operator, once, why guests' spawns are refused and what to do about it.
    fn warn_operator(&self) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!("a guest's spawn was refused: {}", self.capacity.refusal());
        }
    }

    fn spawn(
        &self,
        request: wfcontract::SpawnRequest,
        cx: &Context<'_>,
    ) -> Result<Payload, CommandError> {
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
        let confined = !loaded.grants.reaches_any_process();
        let process = WasmProcess::new(Arc::clone(&self.wasm), loaded);
        let pid = cx
            .spawn_child(Spawn::new(process, request.entry, request.input).confined(confined))
            .map_err(|e| match e {
                Error::TooManyProcesses(_) => {
                    self.warn_operator();
                    CommandError::new(ErrorKind::LimitReached, self.capacity.guest_refusal())
                }
                other => other.into_command_error(),
            })?;
        Payload::to_postcard(&pid).map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string()))
    }
}

impl Handler for SpawnHandler {
    fn handle(&self, request: Request, cx: &Context<'_>) {
        if let Command::Spawn(spawn) = request.command {
            let result = self.spawn(spawn, cx);
            cx.complete(request.tag, result);
        }
    }
}
