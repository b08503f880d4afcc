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
//! The sandbox holds for code nobody trusts: a module may import only WASI preview 1, which is
//! linked with no files, no environment and no arguments; what it may ask the host to do is decided
//! by its [`Grants`] (every built-in, no host function, unless the embedder says otherwise);
//! memory, time per step and over a process's life, stack, yields and payload sizes are capped
//! ([`Limits`], and the host-wide limits on [`HostBuilder`]); a message waits in its receiver's
//! bounded mailbox until the receiver asks for it; a trap, a panic or a runaway step fails that
//! process only, with an [`ErrorKind`] saying which. `SECURITY.md` in the repository has the
//! threat model.
#![deny(missing_docs)]

mod builder;
mod capacity;
mod durable;
mod error;
mod functions;
mod grants;
mod host;
mod modules;
mod observe;
mod run;
mod spawner;
mod wasm;

pub use builder::{
    HostBuilder, DEFAULT_CANCEL_GRACE, DEFAULT_LEASE, DEFAULT_MAILBOX_BYTES, DEFAULT_MAILBOX_LIMIT,
    DEFAULT_MAX_CHILDREN, DEFAULT_MAX_PROCESSES,
};
pub use capacity::{Capacity, CapacityLimit, MemoryImages};
pub use durable::api::{bad_id, WorkflowResult};
pub use durable::record::StepRecord;
pub use durable::resolve::Damage;
pub use durable::snapshot::{DurableCounters, Snapshots};
pub use durable::store::{self as store, SyncMode};
pub use error::{Error, ErrorKind, Result};
pub use functions::{
    CallInfo, HostFunction, DEFAULT_FUNCTION_CALLS_PER_PROCESS, DEFAULT_FUNCTION_QUEUE,
    DEFAULT_FUNCTION_THREADS, DEFAULT_FUNCTION_TIMEOUT,
};
pub use grants::Grants;
pub use host::Host;
pub use observe::Observer;
pub use run::{Message, Run, SpawnOptions};
pub use wasm::reads::Read as WasiRead;
pub use wasm::{Hibernation, Limits, ModuleInfo, Residency, DEFAULT_MAX_CPU_TIME};
pub use wfcontract as contract;
pub use wfcontract::{
    CommandError, CommandKind, Encoding, ErrorKind as CommandErrorKind, Payload, Pid,
};
pub use wfhost_scheduler::{Counters, ShutdownReport, DEFAULT_MAX_SLEEPS};

/// Hooks for the benchmarks. Not a stable API.
#[doc(hidden)]
pub use wasm::bench as __bench;

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
/// fn info(info: wfhost::ModuleInfo) {
///     let wfhost::ModuleInfo { abi_version, entries, imports, exports, sha256, size, memories, tables } = info;
/// }
/// ```
mod not_exposed {}
