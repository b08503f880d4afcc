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
//! out (sleep, log, send a message, spawn a child, call a host command...). Their completions come
//! back as events for a later step. Thousands of processes share one worker thread per core.
//!
//! A [`Host`] owns all of that: build one with [`Host::builder`] (every option documents its
//! default), register host commands (native functions workflows call by name, run on a thread pool
//! off the workers), load modules under names, spawn entry points, send them messages, cancel them,
//! wait for their results, shut down. [`build::build_workflow`] compiles a workflow crate, as
//! `wfhost build` does.
//!
//! The sandbox holds for code nobody trusts: a module may import only WASI preview 1, which is
//! linked with no files, no environment and no arguments; what it may ask the host to do is decided
//! by its [`Grants`] (every built-in, no host command, unless the embedder says otherwise); memory,
//! time, stack, yields and payload sizes are capped ([`Limits`], and the host-wide limits on
//! [`HostBuilder`]); a trap, a panic or a runaway step fails that process only, with an
//! [`ErrorKind`] saying which. `SECURITY.md` in the repository has the threat model.
#![deny(missing_docs)]

pub mod build;
mod calls;
mod capacity;
mod commands;
mod error;
mod grants;
mod host;
mod wasm;

pub use calls::CallInfo;
pub use capacity::{Capacity, CapacityLimit, MemoryImages};
pub use error::{Error, ErrorKind, Result};
pub use grants::Grants;
pub use host::{
    Host, HostBuilder, Run, DEFAULT_CALL_QUEUE, DEFAULT_CALL_THREADS, DEFAULT_CANCEL_GRACE,
    DEFAULT_MAILBOX_BYTES, DEFAULT_MAILBOX_LIMIT, DEFAULT_MAX_CHILDREN, DEFAULT_MAX_PROCESSES,
};
pub use wasm::{Hibernation, Limits, ModuleInfo, Residency};
pub use wfcontract as contract;
pub use wfcontract::{
    CommandError, CommandKind, Encoding, ErrorKind as CommandErrorKind, Payload, Pid,
};
pub use wfhost_scheduler as scheduler;
pub use wfhost_scheduler::{FailureKind, ShutdownReport, DEFAULT_MAX_SLEEPS};

/// Hooks for the benchmarks. Not a stable API.
#[doc(hidden)]
pub use wasm::bench as __bench;
