//! The host: a scheduler, a WebAssembly runtime, and the modules loaded into it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use wfcontract::{CommandKind, Payload, Pid};
use wfhost_scheduler::{
    Counters, ProcessHandle, Scheduler, SchedulerHandle, ShutdownReport, Spawn, DEFAULT_BUDGET,
};

use crate::error::{Error, ErrorKind, Result};
use crate::wasm::{Compiled, Limits, ModuleInfo, WasmProcess, WasmRuntime};

/// Configures a [`Host`]. Every option has a default; see each method.
#[derive(Debug)]
pub struct HostBuilder {
    workers: Option<usize>,
    budget: usize,
    pooling: Option<u32>,
    limits: Limits,
}

impl Default for HostBuilder {
    fn default() -> Self {
        HostBuilder {
            workers: None,
            budget: DEFAULT_BUDGET,
            pooling: None,
            limits: Limits::default(),
        }
    }
}

impl HostBuilder {
    /// Worker threads that run processes. Default: one per core.
    pub fn workers(mut self, workers: usize) -> HostBuilder {
        self.workers = Some(workers);
        self
    }

    /// Events a process may consume per turn before its peers get a turn. Default: 32.
    pub fn budget(mut self, events: usize) -> HostBuilder {
        self.budget = events;
        self
    }

    /// Pre-allocates `instances` instance slots with wasmtime's pooling allocator: instantiation
    /// gets cheaper, and at most that many processes can be live at once. Use it when many
    /// processes are expected. Default: off (memory is allocated per instance on demand).
    pub fn pooling(mut self, instances: u32) -> HostBuilder {
        self.pooling = Some(instances);
        self
    }

    /// Per-process sandbox limits. Default: [`Limits::default`].
    pub fn limits(mut self, limits: Limits) -> HostBuilder {
        self.limits = limits;
        self
    }

    /// Starts the host: the engine, the epoch ticker and the worker threads.
    pub fn build(self) -> Result<Host> {
        let wasm = Arc::new(WasmRuntime::new(self.limits, self.pooling)?);
        let modules = Arc::new(Modules::default());
        let mut scheduler = Scheduler::builder()
            .budget(self.budget)
            .thread_name("wfhost-worker");
        if let Some(workers) = self.workers {
            scheduler = scheduler.workers(workers);
        }
        let scheduler = scheduler
            .handler(
                CommandKind::Spawn,
                crate::commands::SpawnHandler::new(Arc::clone(&wasm), Arc::clone(&modules)),
            )
            .build()
            .map_err(|e| Error::new(ErrorKind::Config, e.to_string()))?;
        Ok(Host {
            scheduler,
            wasm,
            modules,
        })
    }
}

/// Modules loaded into a host, by name.
#[derive(Default)]
pub(crate) struct Modules {
    by_name: RwLock<HashMap<String, (Arc<str>, Arc<Compiled>)>>,
}

impl Modules {
    pub(crate) fn get(&self, name: &str) -> Result<(Arc<str>, Arc<Compiled>)> {
        self.by_name.read().get(name).cloned().ok_or_else(|| {
            let mut known: Vec<String> = self.by_name.read().keys().cloned().collect();
            known.sort();
            Error::new(
                ErrorKind::UnknownModule,
                format!(
                    "no module is loaded under the name '{name}' (loaded: {})",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }
}

/// Runs workflow modules: loads them, spawns their entry points as processes, and lets the
/// embedding application talk to those processes.
pub struct Host {
    scheduler: Scheduler,
    wasm: Arc<WasmRuntime>,
    modules: Arc<Modules>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

/// A running process started by [`Host::spawn`]: wait for its result.
#[derive(Debug)]
pub struct Run {
    handle: ProcessHandle,
}

impl Run {
    /// The process's pid.
    pub fn pid(&self) -> Pid {
        self.handle.pid()
    }

    /// Blocks until the process finishes; its result, or why it failed.
    pub fn wait(self) -> Result<Payload> {
        self.handle.wait().map_err(failed)
    }

    /// Waits at most `timeout`: `None` while the process is still running.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Payload>> {
        self.handle.wait_timeout(timeout).map(|r| r.map_err(failed))
    }

    /// The channel the result arrives on, for `crossbeam_channel::select!`.
    pub fn receiver(&self) -> &crossbeam_channel::Receiver<(Pid, wfhost_scheduler::ProcessResult)> {
        self.handle.receiver()
    }
}

fn failed(error: wfhost_scheduler::ProcessError) -> Error {
    Error::new(ErrorKind::Failed, error.message())
}

impl Host {
    /// A builder with the defaults.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// Loads the module at `path` under `name` (replacing any module of that name for processes
    /// spawned from now on). Compiles it unless an identical module is already compiled.
    pub fn load_module(&self, name: &str, path: impl AsRef<Path>) -> Result<ModuleInfo> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot read module {}: {e}", path.display()),
            )
        })?;
        self.load_module_bytes(name, &bytes)
            .map_err(|e| Error::new(e.kind(), format!("{}: {}", path.display(), e.message())))
    }

    /// Loads a module from its bytes under `name`.
    pub fn load_module_bytes(&self, name: &str, bytes: &[u8]) -> Result<ModuleInfo> {
        let compiled = self.wasm.compile(bytes)?;
        let info = compiled.info.clone();
        self.modules
            .by_name
            .write()
            .insert(name.to_string(), (Arc::from(name), compiled));
        Ok(info)
    }

    /// What the module loaded under `name` declares.
    pub fn module_info(&self, name: &str) -> Result<ModuleInfo> {
        Ok(self.modules.get(name)?.1.info.clone())
    }

    /// Starts entry point `entry` of module `module` with `input`.
    pub fn spawn(&self, module: &str, entry: &str, input: Payload) -> Result<Run> {
        let (name, compiled) = self.modules.get(module)?;
        if !compiled.info.has_entry(entry) {
            return Err(compiled.info.unknown_entry(entry));
        }
        let process = WasmProcess::new(Arc::clone(&self.wasm), compiled, name);
        let handle = self
            .scheduler
            .spawn_handle_with(Spawn::new(process, entry, input))?;
        Ok(Run { handle })
    }

    /// Sends `message` to process `pid` (from the host, [`Pid::HOST`]).
    pub fn send(&self, pid: Pid, message: Payload) -> Result<()> {
        Ok(self.scheduler.send(pid, message)?)
    }

    /// Asks process `pid` to stop: a cancel, delivered ahead of its queued messages.
    pub fn cancel(&self, pid: Pid) -> Result<()> {
        Ok(self.scheduler.cancel(pid)?)
    }

    /// Processes that have not finished.
    pub fn live(&self) -> usize {
        self.scheduler.live()
    }

    /// The scheduler's activity counters.
    pub fn counters(&self) -> Counters {
        self.scheduler.counters()
    }

    /// The scheduler underneath, for what this type does not wrap.
    pub fn scheduler(&self) -> &SchedulerHandle {
        self.scheduler.handle()
    }

    /// Cancels every live process, waits up to `grace` for them to finish, closes the rest, and
    /// stops every thread.
    pub fn shutdown(self, grace: Duration) -> ShutdownReport {
        let report = self.scheduler.shutdown(grace);
        self.wasm.stop();
        report
    }
}
