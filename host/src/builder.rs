//! Configuring and starting a [`Host`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use wfcontract::{CommandKind, Payload};
use wfhost_scheduler::{Handler, Scheduler, DEFAULT_BUDGET};
use wfhost_store::Open as _;

use crate::durable::snapshot::Snapshots;
use crate::durable::store::{HostStore, Location, SyncMode};
use crate::durable::{store_error, Durable, DurableJoin, DurableLog, DurableSend};
use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::functions::http::HttpClient;
use crate::functions::HttpSettings;
use crate::functions::{
    CallInfo, FunctionSettings, Functions, HostFunction, DEFAULT_FUNCTION_CALLS_PER_PROCESS,
    DEFAULT_FUNCTION_QUEUE, DEFAULT_FUNCTION_THREADS, DEFAULT_FUNCTION_TIMEOUT,
};
use crate::host::Host;
use crate::ids::Ids;
use crate::metrics::Metrics;
use crate::modules::Modules;
use crate::observe::{Adapter, Observer};
use crate::spawner::GuestSpawner;
use crate::tasks::Tasks;
use crate::wasm::capacity::{Capacity, MemoryImages, Slots};
use crate::wasm::{EngineSettings, Hibernation, Instances, Limits, WasmRuntime};
use wfcontract::builtin::{HTTP_FUNCTION, RESERVED_PREFIX};
use wfcontract::RetryPolicy;

/// How long a cancelled process may clean up before it is terminated, unless
/// [`HostBuilder::cancel_grace`] says otherwise.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(10);

/// How long a host's lease on its workflows lasts on a shared store ([`HostBuilder::lease`]).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

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

/// Configures a [`Host`]. Every option has a default; see each method.
pub struct HostBuilder {
    workers: Option<usize>,
    budget: usize,
    pooling: Option<u32>,
    on_demand: bool,
    page_scan_reset: bool,
    limits: Limits,
    cancel_grace: Option<Duration>,
    functions: HashMap<String, HostFunction>,
    duplicate_functions: Vec<String>,
    function_threads: usize,
    function_queue: usize,
    function_calls_per_process: usize,
    function_timeout: Option<Duration>,
    runtime: Option<tokio::runtime::Handle>,
    observer: Option<Arc<dyn Observer>>,
    max_processes: Option<usize>,
    mailbox_limit: Option<usize>,
    mailbox_bytes: Option<usize>,
    max_children: Option<usize>,
    max_sleeps: usize,
    memory_images: MemoryImages,
    hibernation: Hibernation,
    module_cache: Option<PathBuf>,
    store: Option<(Location, SyncMode)>,
    /// The store is only read ([`HostBuilder::read_store`]).
    read_only: bool,
    store_limit: Option<u64>,
    snapshots: Snapshots,
    lease: Duration,
    metrics: Option<Metrics>,
    /// Spans of durable workflows' runs, steps and calls ([`HostBuilder::tracer`]).
    traces: Option<Arc<crate::trace::Traces>>,
    /// The built-in HTTP client's settings, once anything is allowed.
    http: Option<HttpSettings>,
    retry_policies: HashMap<String, RetryPolicy>,
    tasks: Option<Tasks>,
    worker_functions: Vec<String>,
    /// Names registered that the host keeps for itself.
    reserved_functions: Vec<String>,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut functions: Vec<&String> = self.functions.keys().collect();
        functions.sort();
        f.debug_struct("HostBuilder")
            .field("workers", &self.workers)
            .field("budget", &self.budget)
            .field("pooling", &self.pooling)
            .field("on_demand", &self.on_demand)
            .field("page_scan_reset", &self.page_scan_reset)
            .field("limits", &self.limits)
            .field("cancel_grace", &self.cancel_grace)
            .field("functions", &functions)
            .field("function_threads", &self.function_threads)
            .field("function_queue", &self.function_queue)
            .field(
                "function_calls_per_process",
                &self.function_calls_per_process,
            )
            .field("function_timeout", &self.function_timeout)
            .field("max_processes", &self.max_processes)
            .field("mailbox_limit", &self.mailbox_limit)
            .field("mailbox_bytes", &self.mailbox_bytes)
            .field("max_children", &self.max_children)
            .field("max_sleeps", &self.max_sleeps)
            .field("memory_images", &self.memory_images)
            .field("hibernation", &self.hibernation)
            .field("module_cache", &self.module_cache)
            .field("store", &self.store)
            .field("read_only", &self.read_only)
            .field("store_limit", &self.store_limit)
            .field("snapshots", &self.snapshots)
            .field("metrics", &self.metrics.is_some())
            .field("http", &self.http)
            .field("retry_policies", &self.retry_policies)
            .field("worker_functions", &self.worker_functions)
            .finish_non_exhaustive()
    }
}

impl Default for HostBuilder {
    fn default() -> Self {
        HostBuilder {
            workers: None,
            budget: DEFAULT_BUDGET,
            pooling: None,
            on_demand: false,
            page_scan_reset: false,
            limits: Limits::default(),
            cancel_grace: Some(DEFAULT_CANCEL_GRACE),
            functions: HashMap::new(),
            duplicate_functions: Vec::new(),
            function_threads: DEFAULT_FUNCTION_THREADS,
            function_queue: DEFAULT_FUNCTION_QUEUE,
            function_calls_per_process: DEFAULT_FUNCTION_CALLS_PER_PROCESS,
            function_timeout: Some(DEFAULT_FUNCTION_TIMEOUT),
            runtime: None,
            observer: None,
            max_processes: Some(DEFAULT_MAX_PROCESSES),
            mailbox_limit: Some(DEFAULT_MAILBOX_LIMIT),
            mailbox_bytes: Some(DEFAULT_MAILBOX_BYTES),
            max_children: Some(DEFAULT_MAX_CHILDREN),
            max_sleeps: wfhost_scheduler::DEFAULT_MAX_SLEEPS,
            memory_images: MemoryImages::Auto,
            hibernation: Hibernation::WhenFull,
            module_cache: None,
            store: None,
            read_only: false,
            store_limit: None,
            snapshots: Snapshots::default(),
            lease: DEFAULT_LEASE,
            metrics: None,
            traces: None,
            http: None,
            retry_policies: HashMap::new(),
            tasks: None,
            worker_functions: Vec::new(),
            reserved_functions: Vec::new(),
        }
    }
}

impl Host {
    /// A builder with the defaults.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
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

    /// Pre-allocates `instances` instance slots with wasmtime's pooling allocator, and lets at
    /// most that many processes be live at once. Default: as many slots as the host's
    /// [capacity](Host::capacity) has live instances, when its memories are compact (the default
    /// `max_processes` makes them so); see [`HostBuilder::on_demand`].
    pub fn pooling(mut self, instances: u32) -> HostBuilder {
        self.pooling = Some(instances);
        self.on_demand = false;
        self
    }

    /// Maps each instance's memory when it is created and unmaps it when it goes, instead of
    /// reusing pooled slots (the default with compact memories). A pooled slot's memory is given
    /// back to the OS in batches when its instance goes, with no `munmap` or `mprotect`; on
    /// demand costs a `mmap` and a `munmap` for each instance.
    pub fn on_demand(mut self) -> HostBuilder {
        self.on_demand = true;
        self.pooling = None;
        self
    }

    /// Resets a pooled slot in place when its instance goes: the pages it wrote (up to 1 MiB) are
    /// found with the kernel's page-map scan (Linux 6.7 and later; ignored elsewhere) and set back
    /// to the module's image, so that the slot's next instance makes no system call on its
    /// memory and faults in no page. Spawning is several times faster, and scales with cores.
    /// Default: off, because of the caveat in SECURITY.md ("Reused memory"): wasmtime's scan
    /// skips a written page that is swapped out, or being migrated, at that moment, so the next
    /// process in the slot could read it. Turn it on where processes do not need to be kept from
    /// one another's data, or where the host has no swap and memory is not compacted or
    /// migrated (no NUMA balancing).
    pub fn page_scan_reset(mut self, on: bool) -> HostBuilder {
        self.page_scan_reset = on;
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

    /// Registers blocking host function `name`, which workflows call with `ctx.call(name, input)`
    /// (see [`HostFunction::typed`]). It runs on a thread of the host's blocking pool, never on a
    /// worker, so it may block. Registering a name twice is an error at [`build`](Self::build).
    pub fn function<I, O, E, F>(self, name: &str, function: F) -> HostBuilder
    where
        I: serde::de::DeserializeOwned,
        O: serde::Serialize,
        E: std::fmt::Display,
        F: Fn(I) -> std::result::Result<O, E> + Send + Sync + 'static,
    {
        self.register(name, HostFunction::typed(function))
    }

    /// Registers async host function `name` (see [`HostFunction::typed_async`]): its future runs
    /// on a tokio runtime (the one given to [`runtime`](Self::runtime), or the host's own), so an
    /// HTTP call in flight holds no thread.
    pub fn function_async<I, O, E, F, Fut>(self, name: &str, function: F) -> HostBuilder
    where
        I: serde::de::DeserializeOwned,
        O: serde::Serialize,
        E: std::fmt::Display,
        F: Fn(I) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<O, E>> + Send + 'static,
    {
        self.register(name, HostFunction::typed_async(function))
    }

    /// Registers blocking host function `name` working on raw payloads, told who calls.
    pub fn function_raw<F>(self, name: &str, function: F) -> HostBuilder
    where
        F: Fn(CallInfo, Payload) -> std::result::Result<Payload, wfcontract::CommandError>
            + Send
            + Sync
            + 'static,
    {
        self.register(name, HostFunction::blocking(function))
    }

    /// Registers host function `name`, with its options.
    ///
    /// A function that holds a clone of the [`Host`] (to spawn or send from inside a call) keeps
    /// the host alive through its own handler: dropping every other clone then does not stop it.
    /// Call [`Host::shutdown`], which drops the functions and so ends the cycle.
    pub fn register(mut self, name: &str, function: HostFunction) -> HostBuilder {
        if name.starts_with(RESERVED_PREFIX) {
            self.reserved_functions.push(name.to_string());
            return self;
        }
        if self.functions.insert(name.to_string(), function).is_some() {
            self.duplicate_functions.push(name.to_string());
        }
        self
    }

    /// Lets workflows reach the URLs `pattern` names through the built-in HTTP client
    /// (`ctx.http` in the guest SDK, the host function `wfhost.http`), which modules then need
    /// granted ([`Grants::allow_http`](crate::Grants::allow_http)). Repeatable; nothing is
    /// allowed by default.
    ///
    /// A pattern is `SCHEME://HOST[:PORT][/PATH]`: `https://api.example.com/v1/*`,
    /// `https://*.example.com/*` (any name under it), `http://*:*/*` (anything public),
    /// `http://127.0.0.1:8080/*`. A path ending in `*` is a prefix. An address that is not public
    /// (loopback, private, link-local, ...) is reached only through a pattern that names it as an
    /// address (or `localhost`), unless [`HttpSettings::allow_private`] says otherwise: neither a
    /// DNS answer nor a redirect takes a request there. A bad pattern is an error at
    /// [`build`](Self::build).
    pub fn allow_http(mut self, pattern: &str) -> HostBuilder {
        self.http
            .get_or_insert_with(HttpSettings::default)
            .allow
            .push(pattern.to_string());
        self
    }

    /// The built-in HTTP client's settings: its limits, and the allowlist (which
    /// [`allow_http`](Self::allow_http) adds to).
    pub fn http(mut self, settings: HttpSettings) -> HostBuilder {
        self.http = Some(settings);
        self
    }

    /// How a workflow's `ctx.call` of function `name` (registered, a worker function, or
    /// `wfhost.http`) retries a failure when the call names no policy of its own. Overrides
    /// [`HostFunction::retry`].
    pub fn retry_policy(mut self, name: &str, policy: RetryPolicy) -> HostBuilder {
        self.retry_policies.insert(name.to_string(), policy);
        self
    }

    /// The board that activity workers take tasks from: share it with the HTTP API that they
    /// poll (`Api::tasks` of crate `wfhost-server`), and with the hosts that replace this one.
    pub fn tasks(mut self, tasks: Tasks) -> HostBuilder {
        self.tasks = Some(tasks);
        self
    }

    /// Makes `name` a function that activity workers serve: a call puts a task on the board
    /// given to [`tasks`](Self::tasks), and the worker's completion is the call's. A call waits
    /// for a worker as long as it takes ([`function_timeout`](Self::function_timeout) does not
    /// apply); each delivery to a worker is bounded by the board's task timeout, after which the
    /// task goes to another worker. Modules need it granted like any host function, and a
    /// [`retry_policy`](Self::retry_policy) for it retries the errors workers report.
    pub fn worker_function(mut self, name: &str) -> HostBuilder {
        self.worker_functions.push(name.to_string());
        self
    }

    /// Blocking host functions that may run at once; more calls wait for one to finish (a call
    /// that overran its timeout stops counting). Default: [`DEFAULT_FUNCTION_THREADS`] (4).
    pub fn function_threads(mut self, threads: usize) -> HostBuilder {
        self.function_threads = threads;
        self
    }

    /// How many host-function calls may be in flight (running or waiting for a thread); a call
    /// beyond it completes with a `limit-reached` error at once, so a flood of calls cannot
    /// exhaust the host's memory. Default: [`DEFAULT_FUNCTION_QUEUE`] (10,000).
    pub fn function_queue(mut self, calls: usize) -> HostBuilder {
        self.function_queue = calls;
        self
    }

    /// How many host-function calls one process may have in flight; a call beyond it completes
    /// with a `limit-reached` error at once, so one process cannot fill the host's queue
    /// ([`function_queue`](HostBuilder::function_queue)) and keep its neighbours' calls out.
    /// Default: [`DEFAULT_FUNCTION_CALLS_PER_PROCESS`] (1,000).
    pub fn function_calls_per_process(mut self, calls: usize) -> HostBuilder {
        self.function_calls_per_process = calls;
        self
    }

    /// How long a host-function call may take unless its [`HostFunction::timeout`] says
    /// otherwise: past it the workflow gets a `timeout` error. `None`: no limit. Default:
    /// [`DEFAULT_FUNCTION_TIMEOUT`] (60 s).
    pub fn function_timeout(mut self, timeout: Option<Duration>) -> HostBuilder {
        self.function_timeout = timeout;
        self
    }

    /// Runs host functions on the embedder's tokio runtime (async ones as its tasks, blocking ones
    /// on its blocking pool) instead of a small runtime of the host's own. Default: the host's
    /// own (two threads, plus the blocking pool), started only when a function is registered.
    /// Calls with a timeout need the runtime's time driver (`enable_time` or `enable_all`);
    /// without it they fail at once, saying so. At shutdown the host aborts the calls it still
    /// runs there.
    pub fn runtime(mut self, runtime: tokio::runtime::Handle) -> HostBuilder {
        self.runtime = Some(runtime);
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

    /// Keeps compiled modules in `dir` (created if missing), by module and engine settings, so
    /// that loading the same module in a later run does not compile it again. Compiled code is
    /// native code: the directory is used only if it belongs to the user the host runs as and
    /// nobody else may write to it (otherwise the host warns and compiles). Default: none. CLI:
    /// on, in `$XDG_CACHE_HOME/wfhost/modules` (or `~/.cache/wfhost/modules`); `--module-cache`.
    pub fn module_cache(mut self, dir: impl Into<PathBuf>) -> HostBuilder {
        self.module_cache = Some(dir.into());
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
    /// receiver. Messages stay in the mailbox until the process asks for them. The same bound
    /// holds for a process's messages to the host, until [`Run::recv_message`] reads them.
    /// Cancels and completions are never refused. `None`: no limit. Default:
    /// [`DEFAULT_MAILBOX_LIMIT`] (100,000). CLI: `--mailbox-limit`.
    ///
    /// [`Run::recv_message`]: crate::Run::recv_message
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
    /// error. Default: 10,000. CLI: `--max-sleeps`.
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

    /// Makes the host durable, with its journal at `location`: the path of a SQLite file
    /// (created if need be), or a PostgreSQL URL (`postgres://user:password@host/database`; its
    /// tables are created in the schema `wfhost`); see [`Location`]. Synced as `sync` says
    /// ([`SyncMode::Full`], the default, syncs every commit). Workflows started with
    /// [`Host::start`] are journaled there, and [`Host::recover`] resumes the unfinished ones
    /// after a restart. Processes started with [`Host::spawn`] stay in memory.
    pub fn store(mut self, location: impl Into<Location>, sync: SyncMode) -> HostBuilder {
        self.store = Some((location.into(), sync));
        self.read_only = false;
        self
    }

    /// Reads the store at `location` without hosting it, beside the host that runs it (a
    /// SQLite file is held by one host; this one does not take it): [`Host::replay`] and
    /// [`Host::result`] work, and nothing is written. Starting, recovering or claiming
    /// workflows is refused, with an error that says so. The store must exist.
    pub fn read_store(mut self, location: impl Into<Location>) -> HostBuilder {
        self.store = Some((location.into(), SyncMode::Full));
        self.read_only = true;
        self
    }

    /// Caps a SQLite store's file at about `bytes` (building fails for a PostgreSQL store). At the cap a commit fails as on a full disk: the
    /// host takes no new work, nothing already acknowledged is lost, and a host started again
    /// with room resumes every workflow. Default: no cap (the disk is the limit).
    pub fn store_limit(mut self, bytes: u64) -> HostBuilder {
        self.store_limit = Some(bytes);
        self
    }

    /// When durable workflows save their state to the store (a snapshot: the pages and globals of
    /// their instance that differ from a fresh one, and what they wait for), so that recovery
    /// replays only the steps after it. Default ([`Snapshots::default`]): every 1,000 events,
    /// and when a step leaves a workflow hibernated. [`Snapshots::off`]: recovery replays every
    /// journal from its start. A module whose processes cannot hibernate never snapshots.
    pub fn snapshots(mut self, snapshots: Snapshots) -> HostBuilder {
        self.snapshots = snapshots;
        self
    }

    /// On a store hosts share (PostgreSQL), how long this host's lease on its workflows lasts
    /// unless renewed (it renews it every third of that). A host that stops renewing (killed,
    /// paused, cut off from the database) loses its workflows to the other hosts this long after
    /// its last renewal, and its own writes are refused from then on. Default: 10 s. Shorter
    /// means faster failover and more renewals; a host that cannot renew in time (a pause, a
    /// slow database) loses its workflows.
    ///
    /// At least 30 ms (building fails otherwise).
    pub fn lease(mut self, length: Duration) -> HostBuilder {
        self.lease = length;
        self
    }

    /// Counts what the host does into `metrics` (see [`Metrics`]): its processes, steps,
    /// journal commits, host function calls and lease, for Prometheus to scrape. Default: none,
    /// and nothing is counted. A host built later with the same `metrics` (a server that lost
    /// its store starts again) counts on into the same counters.
    pub fn metrics(mut self, metrics: &Metrics) -> HostBuilder {
        self.metrics = Some(metrics.clone());
        self
    }

    /// Records what durable workflows do as OpenTelemetry spans of `tracer`'s (from a tracer
    /// provider of the embedder's: `provider.tracer("wfhost")`): a span for each run (its
    /// parent: what [`Client::traced`](crate::Client::traced) names for a start, or the spawning
    /// workflow's run), each step taken live and each call made (host functions, `wfhost.http`,
    /// worker tasks: what serves the call gets its `traceparent` in [`CallInfo`]). Default:
    /// none, and no span is made. See the [`trace`](crate::trace) module.
    pub fn tracer<T>(mut self, tracer: T) -> HostBuilder
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        self.traces = Some(crate::trace::Traces::new(Box::new(tracer)));
        self
    }

    /// Starts the host: the engine, the epoch ticker, the worker threads and, when a host function
    /// is registered, the runtime that runs host functions.
    pub fn build(mut self) -> Result<Host> {
        self.validate()?;
        let workers = self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        let (capacity, wasm) = self.wasm_runtime(workers)?;
        let wasm = Arc::new(wasm);
        let modules = Arc::new(Modules::default());
        let ids = Arc::new(Ids::default());
        let durable = self.open_durable(&ids, &modules)?;
        let scheduler = self.scheduler(workers, capacity, &wasm, &modules, &ids, &durable)?;
        if let Some(durable) = &durable {
            start_durable(durable, &scheduler)?;
        }
        if let (Some(tasks), Some(durable)) = (&self.tasks, &durable) {
            if !durable.shared() {
                tasks.keep_outcomes(Arc::clone(durable) as Arc<dyn crate::tasks::Outcomes>);
            }
        }
        if let Some(tasks) = &self.tasks {
            match durable.as_ref().and_then(|d| d.store_host()) {
                Some(host) => tasks.joined(host),
                None if tasks.is_shared() => {
                    return Err(config(
                        "a task board in a PostgreSQL store (Tasks::postgres) needs a host on \
                         that store (HostBuilder::store with the same URL)"
                            .into(),
                    ))
                }
                None => {}
            }
        }
        let engine = Engine {
            handle: scheduler.handle().clone(),
            wasm,
            modules,
            capacity,
            outbox: (
                self.mailbox_limit.unwrap_or(usize::MAX),
                self.mailbox_bytes.unwrap_or(usize::MAX),
            ),
        };
        let host = Host::new(scheduler, engine, durable, self.metrics.take());
        Ok(host)
    }

    /// Refuses settings that cannot work together, before anything starts.
    fn validate(&self) -> Result<()> {
        if self.lease < Duration::from_millis(30) {
            return Err(config(format!(
                "a lease of {:?} is too short to renew: give at least 30 ms (seconds, in \
                 practice: a host that cannot renew in time loses its workflows)",
                self.lease
            )));
        }
        if let Some(name) = self.reserved_functions.first() {
            return Err(config(format!(
                "host function '{name}': names beginning with '{RESERVED_PREFIX}' are the host's \
                 own; choose another"
            )));
        }
        if !self.worker_functions.is_empty() && self.tasks.is_none() {
            return Err(config(
                "worker functions need a task board for workers to take their tasks from: give \
                 one with HostBuilder::tasks"
                    .into(),
            ));
        }
        if let Some(name) = self.duplicate_functions.first() {
            return Err(config(format!(
                "host function '{name}' is registered twice"
            )));
        }
        if self.function_threads == 0 && !self.functions.is_empty() {
            return Err(config(
                "function_threads must be at least 1 when functions are registered".into(),
            ));
        }
        if self.function_queue == 0 && !self.functions.is_empty() {
            return Err(config(
                "function_queue must be at least 1 when functions are registered".into(),
            ));
        }
        if self.max_processes == Some(0) || self.pooling == Some(0) {
            return Err(config(
                "max_processes and pooling must be at least 1 (a host that can run nothing)".into(),
            ));
        }
        Ok(())
    }

    /// Plans the host's capacity and starts the WebAssembly runtime for it: pooled where the
    /// OS lets the pool reserve its slots, on demand otherwise (unless slots were asked for).
    fn wasm_runtime(&mut self, workers: usize) -> Result<(Capacity, WasmRuntime)> {
        let slots = match (self.pooling, self.on_demand) {
            (Some(slots), _) => Slots::Pooled(slots),
            (None, true) => Slots::OnDemand,
            (None, false) => Slots::Auto,
        };
        let mut capacity = Capacity::plan(
            self.max_processes,
            slots,
            self.memory_images,
            self.hibernation,
            self.limits.max_memories,
            self.limits.max_memory_bytes,
            Capacity::os_mappings(),
        );
        tracing::info!("capacity: {capacity}");
        // A running process gives its instance back within a step time limit when it
        // hibernates; twice that without one given back means none will be.
        let stall = self.limits.step_time_limit.saturating_mul(2);
        let planned = capacity;
        let instances = move || {
            Instances::new(
                planned.instances,
                workers,
                planned.hibernation,
                planned.instance_refusal(),
                stall,
            )
        };
        // Pooled: one slot per live instance, unless told how many.
        let pooling = match slots {
            Slots::Pooled(slots) => Some(slots),
            _ if capacity.pooled => Some(u32::try_from(capacity.instances).unwrap_or(u32::MAX)),
            _ => None,
        };
        let settings = EngineSettings {
            pooling,
            copy_on_write: capacity.copy_on_write,
            compact: capacity.compact_memories,
            cache_dir: self.module_cache.take(),
            page_scan: self.page_scan_reset,
            metrics: self.metrics.clone(),
        };
        let wasm = match WasmRuntime::new(self.limits.clone(), settings.clone(), instances()) {
            // The pool reserves its slots up front; where the OS refuses that (strict
            // overcommit, an address-space limit), a host that did not ask for slots maps
            // memory on demand instead.
            Err(e) if slots == Slots::Auto && settings.pooling.is_some() => {
                tracing::warn!(
                    "could not reserve {} pooled instance slots ({e}); mapping memory on demand",
                    capacity.instances
                );
                capacity.pooled = false;
                let settings = EngineSettings {
                    pooling: None,
                    ..settings
                };
                WasmRuntime::new(self.limits.clone(), settings, instances())?
            }
            runtime => runtime?,
        };
        Ok((capacity, wasm))
    }

    /// The durable side of the host, when it has a store: one it holds (and, shared, has
    /// joined), or one it only reads.
    fn open_durable(&self, ids: &Arc<Ids>, modules: &Arc<Modules>) -> Result<Option<Arc<Durable>>> {
        let Some((location, sync)) = &self.store else {
            return Ok(None);
        };
        let (store, lease) = if self.read_only {
            let journal = location.open_existing().map_err(store_error)?;
            (
                HostStore {
                    journal,
                    cluster: None,
                },
                None,
            )
        } else {
            let store = location
                .open_host(*sync, self.store_limit)
                .map_err(store_error)?;
            (store, Some(self.lease))
        };
        let durable = Durable::open(
            store,
            Arc::clone(ids),
            Arc::clone(modules),
            self.snapshots,
            lease,
            self.metrics.clone(),
            location,
        )?;
        Ok(Some(Arc::new(durable)))
    }

    /// The registered functions, the worker functions and the HTTP client, each with its retry
    /// policy.
    fn all_functions(&mut self) -> Result<HashMap<String, HostFunction>> {
        let mut functions = std::mem::take(&mut self.functions);
        if let Some(settings) = self.http.take() {
            let client = HttpClient::new(settings).map_err(config)?;
            functions.insert(HTTP_FUNCTION.to_string(), client.function());
        }
        if let Some(tasks) = &self.tasks {
            for name in &self.worker_functions {
                if name.starts_with(RESERVED_PREFIX) || functions.contains_key(name) {
                    return Err(config(format!(
                        "worker function '{name}' has the name of a host function"
                    )));
                }
                let tasks = tasks.clone();
                let function = HostFunction::future(move |info: CallInfo, input: Payload| {
                    let tasks = tasks.clone();
                    let call = info
                        .idempotency_key
                        .is_some()
                        .then_some((info.pid.0, info.tag));
                    async move {
                        tasks
                            .call(
                                info.name,
                                input,
                                (info.idempotency_key, info.traceparent),
                                call,
                            )
                            .await
                    }
                })
                .timeout(None);
                functions.insert(name.clone(), function);
            }
        }
        for (name, policy) in &self.retry_policies {
            let Some(function) = functions.get_mut(name) else {
                return Err(config(format!(
                    "a retry policy for '{name}', which is no function of this host's"
                )));
            };
            function.retry = Some(policy.clone());
        }
        Ok(functions)
    }

    /// The scheduler: its workers, its limits, the spawner of guests' children and the
    /// handlers of commands (host functions; durable send, join and log).
    #[allow(clippy::too_many_arguments)]
    fn scheduler(
        &mut self,
        workers: usize,
        capacity: Capacity,
        wasm: &Arc<WasmRuntime>,
        modules: &Arc<Modules>,
        ids: &Arc<Ids>,
        durable: &Option<Arc<Durable>>,
    ) -> Result<Scheduler> {
        let functions = Functions::start(
            self.all_functions()?,
            FunctionSettings {
                threads: self.function_threads,
                queue: self.function_queue,
                per_process: self.function_calls_per_process,
                timeout: self.function_timeout,
                runtime: self.runtime.take(),
                keys: durable.as_ref().map(|_| Arc::clone(ids)),
                metrics: self.metrics.clone(),
                traces: durable.as_ref().and(self.traces.clone()),
            },
        )
        .map_err(|e| config(format!("could not start the host-function runtime: {e}")))?;
        if let Some(durable) = durable {
            durable.set_served(functions.served());
            if let Some(traces) = &self.traces {
                durable.set_traces(Arc::clone(traces));
            }
        }
        let functions: Arc<dyn Handler> = Arc::new(functions);
        // A step's input must fit in the guest's memory beside everything else it holds.
        let step_bytes = self
            .limits
            .max_payload_bytes
            .max(self.limits.max_memory_bytes / 4);
        // A step of the host's limits may yield its most commands with no room to spare.
        let waiting_completions = wfhost_scheduler::DEFAULT_MAX_WAITING_COMPLETIONS
            .max(self.limits.max_yields_per_step.saturating_mul(4));
        let mut scheduler = Scheduler::builder()
            .workers(workers)
            .budget(self.budget)
            .thread_name("wfhost-worker")
            .cancel_grace(self.cancel_grace)
            .max_processes((capacity.processes != usize::MAX).then_some(capacity.processes))
            .mailbox_limit(self.mailbox_limit)
            .mailbox_bytes(self.mailbox_bytes)
            .max_children(self.max_children)
            .max_sleeps(self.max_sleeps)
            .max_waiting_completions(waiting_completions)
            .step_bytes(step_bytes)
            .stack_size(Some(self.limits.worker_stack_bytes()))
            .spawner(GuestSpawner {
                wasm: Arc::clone(wasm),
                modules: Arc::clone(modules),
                capacity,
                warned: AtomicBool::new(false),
                durable: durable.clone(),
            })
            // A retry is a call again: the same handler, shut down once per kind (which the
            // second time finds nothing left to do).
            .handler_arc(CommandKind::Call, Arc::clone(&functions))
            .handler_arc(CommandKind::Retry, functions);
        if let Some(durable) = durable {
            scheduler = scheduler
                .handler(CommandKind::Send, DurableSend(Arc::clone(durable)))
                .handler(CommandKind::Join, DurableJoin(Arc::clone(durable)))
                .handler(CommandKind::Log, DurableLog(Arc::clone(durable)));
        }
        let interrupted = Arc::clone(wasm);
        scheduler = scheduler.interrupt(move || interrupted.interrupt_all());
        // Once every process is closed (also when the shutdown was called from a worker and goes
        // on in a thread of its own): until then the epoch ticker still enforces step limits.
        let (stopped, unloaded) = (Arc::clone(wasm), Arc::clone(modules));
        scheduler = scheduler.on_stopped(move || {
            stopped.stop();
            unloaded.clear();
        });
        if let Some(observer) = self.observer.take() {
            scheduler = scheduler.observer(Arc::new(Adapter(observer)));
        }
        scheduler.build().map_err(|e| config(e.to_string()))
    }
}

/// Starts what a durable host runs beside its scheduler: the lease, the inbox, the journal's
/// failure hook; and numbers new processes above every workflow of the store.
fn start_durable(durable: &Arc<Durable>, scheduler: &Scheduler) -> Result<()> {
    durable.set_scheduler(scheduler.handle());
    durable.start_lease()?;
    durable.start_inbox().map_err(|e| {
        config(format!(
            "could not start the thread that takes messages and cancels: {e}"
        ))
    })?;
    let weak = Arc::downgrade(durable);
    durable.writer.on_failure(Box::new(move |error, lost| {
        if let Some(durable) = weak.upgrade() {
            durable.store_failed(error, lost);
        }
    }));
    let (workflows, _) = durable.reader.lock().high_water().map_err(store_error)?;
    scheduler
        .handle()
        .reserve_pids_through(wfcontract::Pid(workflows));
    Ok(())
}

/// A setting that cannot work.
fn config(message: String) -> Error {
    Error::new(ErrorKind::Config, message)
}
