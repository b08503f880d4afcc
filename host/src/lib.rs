//! wfhost: a WebAssembly workflow engine.
//!
//! An application embedding the host: it registers a native `inventory.reserve` command, loads the
//! order workflow (`examples/order`), runs orders that call the command, sends a message to a
//! running workflow, cancels another, and shuts down (this is `examples/embed/src/main.rs`):
//!
//! ```no_run
#![doc = include_str!("../../examples/embed/src/main.rs")]
//! ```
//!
//! # Core concepts
//!
//! A **module** is a WebAssembly module built for `wasm32-wasip1` with the `wfguest` SDK. It
//! declares its **entry points** in a manifest the host reads without running it.
//!
//! A **process** is one running entry point: its own wasmtime instance, driven by the host's
//! scheduler one **step** at a time. Each step hands the process the events that happened to it
//! (completions, messages, a cancel) and collects the **yields**: **commands** it wants carried
//! out (sleep, log, send a message, spawn a child, call a host function...). Their completions come
//! back as events for a later step. Thousands of processes share one worker thread per core.
//!
//! A [`Host`] owns all of that: build one with [`Host::builder`] (every option documents its
//! default), register host functions (native functions workflows call by name, blocking or
//! async, run off the workers with a timeout: [`HostFunction`]), load modules under names, spawn
//! entry points ([`SpawnOptions`] for per-process grants, limits and a timeout), send them
//! messages, cancel them, wait for their results ([`Run`]) and read what they send the host, shut
//! down. A `Host` is cheap to clone and share between threads. Building workflow crates is the
//! CLI's job (`wfhost build`, crate `wfhost-cli`).
//!
//! The sandbox holds for code nobody trusts: a module may import only WASI preview 1 (and
//! `wfhost::patched`, a journaled flag), which is
//! linked with no files, no environment and no arguments; what it may ask the host to do is decided
//! by its [`Grants`] (every built-in, no host function, unless the embedder says otherwise);
//! memory, time per step and over a process's life, stack, yields and payload sizes are capped
//! ([`Limits`], and the host-wide limits on [`HostBuilder`]); a message waits in its receiver's
//! bounded mailbox until the receiver asks for it; a trap, a panic or a runaway step fails that
//! process only, with an [`ErrorKind`] saying which. `SECURITY.md` in the repository has the
//! threat model.
#![deny(missing_docs)]

mod builder;
mod client;
mod durable;
mod engine;
mod error;
mod functions;
mod grants;
mod host;
mod ids;
mod metrics;
mod modules;
mod observe;
mod run;
pub mod schedules;
mod spawner;
pub mod tasks;
pub mod testing;
pub mod trace;
mod wasm;

pub use builder::{
    HostBuilder, DEFAULT_CANCEL_GRACE, DEFAULT_LEASE, DEFAULT_MAILBOX_BYTES, DEFAULT_MAILBOX_LIMIT,
    DEFAULT_MAX_CHILDREN, DEFAULT_MAX_PROCESSES,
};
pub use client::{
    bad_module_name, bad_module_reference, utc_time, Cancelled, Client, Failure, Fired,
    HistoryStep, HostStatus, ListQuery, ModuleVersion, Narrator, OpenYield, OutboxMessage,
    OutboxPage, Page, PauseChange, PruneQuery, Pruned, Started, StoredModule, Waits,
    WorkflowCounts, WorkflowState, WorkflowStatus, SCHEDULES_LOOK_EVERY,
};
pub use durable::snapshot::Snapshots;
pub use durable::store::SyncMode;
pub use durable::{Damage, DurableCounters, Upgraded, WorkflowReset, WorkflowResult};
pub use error::{Error, ErrorKind, Result};
pub use functions::{
    CallInfo, HostFunction, HttpSettings, DEFAULT_FUNCTION_CALLS_PER_PROCESS,
    DEFAULT_FUNCTION_QUEUE, DEFAULT_FUNCTION_THREADS, DEFAULT_FUNCTION_TIMEOUT,
};
pub use grants::Grants;
pub use host::Host;
pub use ids::{bad_id, run_id};
pub use metrics::{Metrics, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
pub use observe::Observer;
pub use run::{Message, Run, SpawnOptions};
pub use wasm::capacity::{Capacity, CapacityLimit, MemoryImages};
pub use wasm::reads::Read as WasiRead;
pub use wasm::{Hibernation, Limits, ModuleInfo, Residency, DEFAULT_MAX_CPU_TIME};
pub use wfcontract as contract;
pub use wfcontract::{
    CommandError, CommandKind, Encoding, ErrorKind as CommandErrorKind, HttpRequest, HttpResponse,
    Payload, Pid, RetryPolicy,
};
pub use wfhost_scheduler::{Counters, ShutdownReport, DEFAULT_MAX_SLEEPS};

/// Where a durable host keeps its workflows: a SQLite file or a PostgreSQL database.
pub mod store {
    pub use crate::client::{new_id, DEFAULT_PAGE, MAX_PAGE};
    pub use crate::durable::store::{Holder, Location, SyncMode};

    /// `url` with the password of its user (`postgres://wf:***@db/wf`) masked, for logs.
    pub fn redact(url: &str) -> String {
        wfhost_store::redact(url)
    }

    /// Who holds the SQLite store at `path` (its one host), if one does.
    pub fn holder(path: impl AsRef<std::path::Path>) -> Option<Holder> {
        crate::durable::store::SqliteStore::holder(path)
    }

    /// Copies the SQLite store at `from` to `to` as it stands, consistent, beside the host
    /// that may run it (see `wfhost backup`).
    pub fn backup(
        from: impl AsRef<std::path::Path>,
        to: impl AsRef<std::path::Path>,
    ) -> crate::Result<()> {
        crate::durable::store::SqliteStore::backup(from.as_ref(), to.as_ref())
            .map_err(crate::durable::store_error)
    }
}

/// Hooks for wfhost's own tests and benchmarks (the `testing` feature, which embedders leave
/// off): the store's insides and the benchmarks' harness. Not a stable API.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod __testing {
    pub use crate::durable::record::StepRecord;
    pub use crate::durable::store::shape::{Shape, INDEXES, TABLES};
    pub use crate::durable::store::{
        Cancel, Ending, Filter, Held, HostMessage, Journal, Location, ModuleName, NewMessage,
        NewSnapshot, NewStep, NewWorkflow, Op, PruneCandidate, PruneFilter, Read, SqliteStore,
        State, StateCounts, Submit, SyncMode, Workflow,
    };
    pub use crate::durable::store::{Journal as Store, Open, PgStore, StoreError, StoreErrorKind};

    /// The schema of the store at `location` as it reads back (see [`Shape`]).
    pub fn shape(location: &Location) -> Result<Shape, StoreError> {
        match location {
            Location::Sqlite(path) => SqliteStore::open_existing(path)?.shape(),
            Location::Postgres(url) => PgStore::open_existing(url)?.shape(),
            Location::Server(url) => Err(StoreError::new(
                StoreErrorKind::Invalid,
                format_args!("{url} is not a store"),
            )),
        }
    }
    pub use crate::wasm::bench;
}

/// What an embedder cannot do, checked when the documentation's tests run: every one of these
/// fails to compile.
///
/// Reach the scheduler underneath, which would let it send from a spoofed pid, complete another
/// process's yield, or start processes around the payload and grant checks:
///
/// ```compile_fail
/// let host = wfhost::Host::builder().build().unwrap();
/// let _ = host.scheduler();
/// ```
///
/// ```compile_fail
/// use wfhost::scheduler::SchedulerHandle;
/// ```
///
/// Take a run's result channel, or get scheduler results from it:
///
/// ```compile_fail
/// fn result(run: &wfhost::Run) {
///     let _ = run.receiver();
/// }
/// ```
///
/// Build the option structs by struct literal, which adding a field would break:
///
/// ```compile_fail
/// let _ = wfhost::Limits { max_memory_bytes: 1 << 20, ..wfhost::Limits::default() };
/// ```
///
/// ```compile_fail
/// let _ = wfhost::Snapshots { every: 10, at_hibernation: true };
/// ```
///
/// ```compile_fail
/// fn info(info: wfhost::ModuleInfo) {
///     let wfhost::ModuleInfo { abi_version, entries, imports, exports, sha256, size, memories, tables } = info;
/// }
/// ```
mod not_exposed {}
