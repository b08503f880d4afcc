//! wfhost's scheduler: many thousands of processes multiplexed over one worker thread per core.
//!
//! # Core concepts
//!
//! A [`Process`] is a state machine with `init`, `step` and `close`. The scheduler calls `step`
//! with a batch of [`Event`]s (completions of commands it yielded, messages, cancels) and reads a
//! [`StepOutput`]: the process's [`Status`] and the [`Yield`]s it produced. A process never blocks
//! a thread: between steps it is just data.
//!
//! A [`Scheduler`] owns the worker threads. Each worker has its own run queue and steals from the
//! others when it runs dry; new submissions from outside enter through a global queue; idle workers
//! spin briefly, then park. A process consumes at most a budget of events per turn, so one busy
//! process cannot hold a worker; a cancel overtakes any backlog of messages.
//!
//! After each step every yield goes to the [`Handler`] registered for its [`CommandKind`]. Handlers
//! answer at once or pass a [`Completer`] to another thread (the timer, a pool) that completes
//! the yield later; the completion wakes the process. `sleep`, `sleep-until`, `forget`, `now`,
//! `random`, `log`, `send`, `join` and `cancel` are built in, and `spawn` with a [`Spawner`]; a
//! command with no handler completes with an `unknown-command` error.
//!
//! A [`SchedulerHandle`] (the scheduler dereferences to one) spawns processes, sends messages,
//! cancels and waits for results, from any thread.
//!
//! ```
//! use wfhost_scheduler::{Events, InitContext, Process, ProcessError, Scheduler};
//! use wfcontract::{Payload, Status, StepOutput};
//!
//! /// Doubles its input.
//! struct Double(u64);
//!
//! impl Process for Double {
//!     fn init(&mut self, _: &InitContext, _: &str, input: Payload) -> Result<(), ProcessError> {
//!         self.0 = input.decode().map_err(|e| ProcessError::new(e.to_string()))?;
//!         Ok(())
//!     }
//!     fn step(&mut self, _: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
//!         out.status = Status::Done(Payload::to_postcard(&(self.0 * 2)).unwrap());
//!         Ok(())
//!     }
//! }
//!
//! let scheduler = Scheduler::builder().workers(2).build().unwrap();
//! let handle = scheduler
//!     .spawn_handle(Double(0), "double", Payload::to_postcard(&21u64).unwrap())
//!     .unwrap();
//! assert_eq!(handle.wait().unwrap().decode::<u64>().unwrap(), 42);
//! scheduler.shutdown(std::time::Duration::from_secs(1));
//! ```
#![deny(missing_docs)]

mod builder;
mod clock;
mod config;
mod counters;
mod current;
mod error;
mod handle;
mod handlers;
mod hold;
mod inbox;
#[cfg(all(test, loom))]
mod loom_models;
mod observe;
mod outbox;
mod park;
mod process;
mod queue;
mod scheduler;
mod shared;
mod slot;
mod spawn;
mod state;
mod sync;
mod targets;
mod timer;
mod wake;
mod worker;

pub use builder::{
    Builder, DEFAULT_BUDGET, DEFAULT_MAX_SLEEPS, DEFAULT_MAX_WAITING_COMPLETIONS,
    DEFAULT_MAX_WATCHERS,
};
pub use counters::Counters;
pub use error::{BuildError, Error};
pub use handle::{ProcessHandle, SchedulerHandle, WeakSchedulerHandle};
pub use handlers::{
    emit as emit_guest_log, join_handler, offer_to_host, send_handler, Completer, Context, Handler,
    HostOffer, Request, Spawner,
};
pub use hold::{Hold, Note, Release};
pub use observe::Observer;
pub use outbox::{outbox, Outbox, OutboxReceiver, Queued};
pub use process::{Events, FailureKind, InitContext, Process, ProcessError, ProcessResult};
pub use scheduler::{Scheduler, ShutdownReport, DEFAULT_GRACE};
pub use spawn::Spawn;
pub use wake::{Readiness, Waker, WakerSource};
pub use wfcontract::{
    Command, CommandError, CommandKind, Event, EventKind, Payload, Pid, Status, StepOutput, Tag,
    Yield,
};
