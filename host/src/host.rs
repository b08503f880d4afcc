//! The host: a scheduler, a WebAssembly runtime, and the modules loaded into it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use wfcontract::{CommandError, CommandKind, Payload, Pid};
use wfhost_scheduler::{
    Counters, Observer, ProcessHandle, Scheduler, SchedulerHandle, ShutdownReport, Spawn,
    DEFAULT_BUDGET,
};

use crate::calls::{CallInfo, Calls, HostCommand};

use crate::capacity::{Capacity, MemoryImages};
use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::wasm::{
    Compiled, Hibernation, Instances, Limits, ModuleInfo, Residency, WasmProcess, WasmRuntime,
};

/// How long a cancelled process may clean up before it is terminated, unless
/// [`HostBuilder::cancel_grace`] says otherwise.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(10);

/// Threads that run host commands, unless [`HostBuilder::call_threads`] says otherwise.
pub const DEFAULT_CALL_THREADS: usize = 4;

/// The most live processes, unless [`HostBuilder::max_processes`] says otherwise: a guest that
/// spawns without end hits this instead of exhausting the host's memory.
pub const DEFAULT_MAX_PROCESSES: usize = 1_000_000;

/// The most queued messages per process, unless [`HostBuilder::mailbox_limit`] says otherwise.
pub const DEFAULT_MAILBOX_LIMIT: usize = 100_000;

/// The most queued message bytes per process, unless [`HostBuilder::mailbox_bytes`] says
/// otherwise.
pub const DEFAULT_MAILBOX_BYTES: usize = 64 << 20;

/// The most children per process, unless [`HostBuilder::max_children`] says otherwise.
pub const DEFAULT_MAX_CHILDREN: usize = 10_000;

/// The most host-command calls waiting for a thread, unless [`HostBuilder::call_queue`] says
/// otherwise.
pub const DEFAULT_CALL_QUEUE: usize = 10_000;

/// Configures a [`Host`]. Every option has a default; see each method.
pub struct HostBuilder {
    workers: Option<usize>,
    budget: usize,
    pooling: Option<u32>,
    limits: Limits,
    cancel_grace: Option<Duration>,
    commands: HashMap<String, HostCommand>,
    duplicate_commands: Vec<String>,
    call_threads: usize,
    observer: Option<Arc<dyn Observer>>,
    max_processes: Option<usize>,
    mailbox_limit: Option<usize>,
    mailbox_bytes: Option<usize>,
    max_children: Option<usize>,
    max_sleeps: usize,
    call_queue: usize,
    memory_images: MemoryImages,
    hibernation: Hibernation,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut commands: Vec<&String> = self.commands.keys().collect();
        commands.sort();
        f.debug_struct("HostBuilder")
            .field("workers", &self.workers)
            .field("budget", &self.budget)
            .field("pooling", &self.pooling)
            .field("limits", &self.limits)
            .field("cancel_grace", &self.cancel_grace)
            .field("commands", &commands)
            .field("call_threads", &self.call_threads)
            .field("max_processes", &self.max_processes)
            .field("mailbox_limit", &self.mailbox_limit)
            .field("mailbox_bytes", &self.mailbox_bytes)
            .field("max_children", &self.max_children)
            .field("max_sleeps", &self.max_sleeps)
            .field("call_queue", &self.call_queue)
            .field("memory_images", &self.memory_images)
            .field("hibernation", &self.hibernation)
            .finish_non_exhaustive()
    }
}

impl Default for HostBuilder {
    fn default() -> Self {
        HostBuilder {
            workers: None,
            budget: DEFAULT_BUDGET,
            pooling: None,
            limits: Limits::default(),
            cancel_grace: Some(DEFAULT_CANCEL_GRACE),
            commands: HashMap::new(),
            duplicate_commands: Vec::new(),
            call_threads: DEFAULT_CALL_THREADS,
            observer: None,
            max_processes: Some(DEFAULT_MAX_PROCESSES),
            mailbox_limit: Some(DEFAULT_MAILBOX_LIMIT),
            mailbox_bytes: Some(DEFAULT_MAILBOX_BYTES),
            max_children: Some(DEFAULT_MAX_CHILDREN),
            max_sleeps: wfhost_scheduler::DEFAULT_MAX_SLEEPS,
            call_queue: DEFAULT_CALL_QUEUE,
            memory_images: MemoryImages::Auto,
            hibernation: Hibernation::WhenFull,
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

    /// How long a cancelled process may run on (to clean up) before it is terminated: it then fails
    /// without another step. `None`: never. Default: [`DEFAULT_CANCEL_GRACE`] (10 s).
    pub fn cancel_grace(mut self, grace: Option<Duration>) -> HostBuilder {
        self.cancel_grace = grace;
        self
    }

    /// Registers host command `name`, which workflows call with `ctx.call(name, input)`. The input
    /// is decoded into `I` from whichever encoding it came in and the output encoded back the same
    /// way; an `Err` reaches the workflow as a `failed` command error with its text. It runs on the
    /// host-command pool (see [`call_threads`](Self::call_threads)), never on a worker, so it may
    /// block. Registering a name twice is an error at [`build`](Self::build).
    pub fn command<I, O, E, F>(self, name: &str, command: F) -> HostBuilder
    where
        I: serde::de::DeserializeOwned,
        O: serde::Serialize,
        E: std::fmt::Display,
        F: Fn(I) -> std::result::Result<O, E> + Send + Sync + 'static,
    {
        self.register(name, crate::calls::typed(command))
    }

    /// Registers host command `name` working on raw payloads, with the caller's pid.
    pub fn command_raw<F>(self, name: &str, command: F) -> HostBuilder
    where
        F: Fn(CallInfo, Payload) -> std::result::Result<Payload, CommandError>
            + Send
            + Sync
            + 'static,
    {
        self.register(name, Arc::new(command))
    }

    fn register(mut self, name: &str, command: HostCommand) -> HostBuilder {
        if self.commands.insert(name.to_string(), command).is_some() {
            self.duplicate_commands.push(name.to_string());
        }
        self
    }

    /// Threads that run host commands. Default: [`DEFAULT_CALL_THREADS`] (4); none are started
    /// when no command is registered.
    pub fn call_threads(mut self, threads: usize) -> HostBuilder {
        self.call_threads = threads;
        self
    }

    /// How many host-command calls may wait for a free thread; a call beyond it completes with a
    /// `limit-reached` error at once, so a flood of calls cannot exhaust the host's memory.
    /// Default: [`DEFAULT_CALL_QUEUE`] (10,000).
    pub fn call_queue(mut self, calls: usize) -> HostBuilder {
        self.call_queue = calls;
        self
    }

    /// How instances get their module's initial memory: copy-on-write images (less resident
    /// memory) or copies (fewer memory mappings, so more live processes under the OS limit).
    /// Default: [`MemoryImages::Auto`], which picks what fits; see [`Host::capacity`].
    pub fn memory_images(mut self, images: MemoryImages) -> HostBuilder {
        self.memory_images = images;
        self
    }

    /// When a process waiting for events gives its instance back, keeping only the memory pages
    /// and globals that differ from a fresh instance, to be restored at its next event. With
    /// hibernation, the OS's memory-mapping limit bounds the instances that are live at once,
    /// not the processes. Default: [`Hibernation::WhenFull`]. CLI: `--hibernate`.
    pub fn hibernation(mut self, hibernation: Hibernation) -> HostBuilder {
        self.hibernation = hibernation;
        self
    }

    /// The most processes live at once; spawning more fails (for a guest, with a
    /// `limit-reached` error). `None`: no limit. Default: [`DEFAULT_MAX_PROCESSES`] (1,000,000).
    /// The host may hold fewer: its [capacity](Host::capacity) also counts the pooling slots and
    /// the OS's memory-mapping limit. CLI: `--max-processes`.
    pub fn max_processes(mut self, limit: Option<usize>) -> HostBuilder {
        self.max_processes = limit;
        self
    }

    /// The most messages a process's mailbox holds; a send beyond it fails (for a guest, with a
    /// `mailbox-full` error), so a fast sender cannot exhaust the host's memory through a slow
    /// receiver. Cancels and completions are never refused. `None`: no limit. Default:
    /// [`DEFAULT_MAILBOX_LIMIT`] (100,000). CLI: `--mailbox-limit`.
    pub fn mailbox_limit(mut self, messages: Option<usize>) -> HostBuilder {
        self.mailbox_limit = messages;
        self
    }

    /// The most payload bytes a process's mailbox holds, summed over its queued messages; a send
    /// beyond it fails as with [`mailbox_limit`](Self::mailbox_limit). `None`: no limit.
    /// Default: [`DEFAULT_MAILBOX_BYTES`] (64 MiB). CLI: `--mailbox-bytes`.
    pub fn mailbox_bytes(mut self, bytes: Option<usize>) -> HostBuilder {
        self.mailbox_bytes = bytes;
        self
    }

    /// The most children one process may have at once (running, or finished and not yet joined);
    /// a spawn beyond it completes with a `limit-reached` error, so a spawn bomb stops there.
    /// `None`: no limit. Default: [`DEFAULT_MAX_CHILDREN`] (10,000). CLI: `--max-children`.
    pub fn max_children(mut self, limit: Option<usize>) -> HostBuilder {
        self.max_children = limit;
        self
    }

    /// The most sleeps one process may have pending; one more completes with a `limit-reached`
    /// error. Default: [`DEFAULT_MAX_SLEEPS`](wfhost_scheduler::DEFAULT_MAX_SLEEPS) (10,000).
    /// CLI: `--max-sleeps`.
    pub fn max_sleeps(mut self, sleeps: usize) -> HostBuilder {
        self.max_sleeps = sleeps;
        self
    }

    /// Tells `observer` about every spawn, event, yield and exit (as `wfhost run --events` does).
    /// Default: none.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> HostBuilder {
        self.observer = Some(observer);
        self
    }

    /// Starts the host: the engine, the epoch ticker, the worker threads and the host-command
    /// pool.
    pub fn build(self) -> Result<Host> {
        let config = |message: String| Error::new(ErrorKind::Config, message);
        if let Some(name) = self.duplicate_commands.first() {
            return Err(config(format!("host command '{name}' is registered twice")));
        }
        if self.call_threads == 0 && !self.commands.is_empty() {
            return Err(config(
                "call_threads must be at least 1 when commands are registered".into(),
            ));
        }
        if self.call_queue == 0 && !self.commands.is_empty() {
            return Err(config(
                "call_queue must be at least 1 when commands are registered".into(),
            ));
        }
        let stack = self.limits.worker_stack_bytes();
        // A step's input must fit in the guest's memory beside everything else it holds.
        let step_bytes = self
            .limits
            .max_payload_bytes
            .max(self.limits.max_memory_bytes / 4);
        if self.max_processes == Some(0) || self.pooling == Some(0) {
            return Err(config(
                "max_processes and pooling must be at least 1 (a host that can run nothing)".into(),
            ));
        }
        let workers = self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        let capacity = Capacity::plan(
            self.max_processes,
            self.pooling,
            self.memory_images,
            self.hibernation,
            self.limits.max_memories,
            self.limits.max_memory_bytes,
            Capacity::os_mappings(),
        );
        tracing::info!("capacity: {capacity}");
        let wasm = Arc::new(WasmRuntime::new(
            self.limits,
            self.pooling,
            capacity.copy_on_write,
            capacity.compact_memories,
            Instances::new(
                capacity.instances,
                workers,
                capacity.hibernation,
                capacity.instance_refusal(),
            ),
        )?);
        let modules = Arc::new(Modules::default());
        let calls = Calls::start(self.commands, self.call_threads, self.call_queue)
            .map_err(|e| config(format!("could not start the host-command threads: {e}")))?;
        let mut scheduler = Scheduler::builder()
            .budget(self.budget)
            .thread_name("wfhost-worker")
            .cancel_grace(self.cancel_grace)
            .max_processes((capacity.processes != usize::MAX).then_some(capacity.processes))
            .mailbox_limit(self.mailbox_limit)
            .mailbox_bytes(self.mailbox_bytes)
            .max_children(self.max_children)
            .max_sleeps(self.max_sleeps)
            .step_bytes(step_bytes)
            .stack_size(Some(stack));
        scheduler = scheduler.workers(workers);
        if let Some(observer) = self.observer {
            scheduler = scheduler.observer(observer);
        }
        let scheduler = scheduler
            .handler(
                CommandKind::Spawn,
                crate::commands::SpawnHandler::new(
                    Arc::clone(&wasm),
                    Arc::clone(&modules),
                    capacity,
                ),
            )
            .handler(CommandKind::Call, calls)
            .handler(CommandKind::Now, crate::calls::now)
            .handler(CommandKind::Random, crate::calls::random)
            .build()
            .map_err(|e| config(e.to_string()))?;
        Ok(Host {
            scheduler,
            wasm,
            modules,
            capacity,
        })
    }
}

/// A loaded module: the name it was loaded under, its compiled form, and what it may do.
#[derive(Clone)]
pub(crate) struct Loaded {
    pub(crate) name: Arc<str>,
    pub(crate) compiled: Arc<Compiled>,
    pub(crate) grants: Arc<Grants>,
}

/// Modules loaded into a host, by name.
#[derive(Default)]
pub(crate) struct Modules {
    by_name: RwLock<HashMap<String, Loaded>>,
}

impl Modules {
    pub(crate) fn get(&self, name: &str) -> Result<Loaded> {
        let by_name = self.by_name.read();
        by_name.get(name).cloned().ok_or_else(|| {
            let mut known: Vec<&str> = by_name.keys().map(String::as_str).collect();
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
    capacity: Capacity,
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
    Error::from(error)
}

impl Host {
    /// A builder with the defaults.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// Loads the module at `path` under `name` (replacing any module of that name for processes
    /// spawned from now on), with the default [`Grants`]: every built-in command, no host
    /// command. Compiles it unless an identical module is already compiled.
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
        let compiled = self.wasm.compile(bytes)?;
        let info = compiled.info.clone();
        self.modules.by_name.write().insert(
            name.to_string(),
            Loaded {
                name: Arc::from(name),
                compiled,
                grants: Arc::new(grants),
            },
        );
        Ok(info)
    }

    /// What the module loaded under `name` declares.
    pub fn module_info(&self, name: &str) -> Result<ModuleInfo> {
        Ok(self.modules.get(name)?.compiled.info.clone())
    }

    /// Starts entry point `entry` of module `module` with `input`.
    pub fn spawn(&self, module: &str, entry: &str, input: Payload) -> Result<Run> {
        let loaded = self.modules.get(module)?;
        if !loaded.compiled.info.has_entry(entry) {
            return Err(loaded.compiled.info.unknown_entry(entry));
        }
        self.check_payload("the input", &input)?;
        let confined = !loaded.grants.reaches_any_process();
        let process = WasmProcess::new(Arc::clone(&self.wasm), loaded);
        let handle = self
            .scheduler
            .spawn_handle_with(Spawn::new(process, entry, input).confined(confined))
            .map_err(|e| match e {
                wfhost_scheduler::Error::TooManyProcesses(_) => {
                    Error::new(ErrorKind::Limit, self.capacity.refusal())
                }
                other => Error::from(other),
            })?;
        Ok(Run { handle })
    }

    /// How many processes this host can hold at once, and what bounds that (worked out at
    /// start-up from the process limit, the pooling slots and the OS's memory-mapping limit).
    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// How many processes hold an instance and how many are hibernated, with what the hibernated
    /// ones hold. The counts move as processes run; read them when the host is quiet for exact
    /// figures.
    pub fn residency(&self) -> Residency {
        self.wasm.instances.residency()
    }

    /// Sends `message` to process `pid` (from the host, [`Pid::HOST`]).
    pub fn send(&self, pid: Pid, message: Payload) -> Result<()> {
        self.check_payload("the message", &message)?;
        Ok(self.scheduler.send(pid, message)?)
    }

    fn check_payload(&self, what: &str, payload: &Payload) -> Result<()> {
        let len = payload.bytes.len();
        match self.wasm.limits.over_payload(len) {
            Some(over) => Err(Error::new(
                ErrorKind::Limit,
                format!("{what} is {len} bytes, {over}"),
            )),
            None => Ok(()),
        }
    }

    /// Asks process `pid` to stop: a cancel, delivered ahead of its queued messages.
    pub fn cancel(&self, pid: Pid) -> Result<()> {
        Ok(self.scheduler.cancel(pid)?)
    }

    /// Processes that have not finished.
    ///
    /// A process is counted out before its result reaches anyone (a joining parent, a `wait`),
    /// so once a result is in hand its process no longer counts here.
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
