//! Configuration and construction.

use std::sync::Arc;
use std::time::Duration;

use wfcontract::CommandKind;

use crate::config::{Config, Hooks};
use crate::error::BuildError;
use crate::handlers::{Handler, Handlers, SpawnHandler, Spawner};
use crate::observe::Observer;
use crate::scheduler::Scheduler;

/// The default throughput budget: events a process may consume in one turn before its peers get
/// theirs. 32 balances latency and throughput for mixed workloads; 8-16 favour latency with many
/// small processes, 64-128 favour throughput for message-heavy ones.
pub const DEFAULT_BUDGET: usize = 32;

/// The most pending sleeps per process, unless [`Builder::max_sleeps`] says otherwise.
pub const DEFAULT_MAX_SLEEPS: usize = 10_000;

/// The most joins waiting on one process, unless [`Builder::max_watchers`] says otherwise.
pub const DEFAULT_MAX_WATCHERS: usize = 1_000;

/// The most completions of its own yields a process may leave untaken, unless
/// [`Builder::max_waiting_completions`] says otherwise.
pub const DEFAULT_MAX_WAITING_COMPLETIONS: usize = 50_000;

/// Configures and starts a [`Scheduler`].
pub struct Builder {
    config: Config,
    handlers: Handlers,
    observer: Option<Arc<dyn Observer>>,
    hooks: Hooks,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("handlers", &self.handlers.registered().collect::<Vec<_>>())
            .field("observer", &self.observer.is_some())
            .field("interrupt", &self.hooks.interrupt.is_some())
            .field("on_stopped", &self.hooks.stopped.is_some())
            .finish()
    }
}

impl Scheduler {
    /// A builder with the defaults.
    pub fn builder() -> Builder {
        Builder::new()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// Defaults: one worker per core, a budget of [`DEFAULT_BUDGET`] events, and the built-in
    /// handlers for `sleep`, `sleep-until`, `forget`, `now`, `random`, `log`, `send`, `join` and
    /// `cancel`.
    pub fn new() -> Builder {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let handlers = Handlers::builtin();
        Builder {
            config: Config {
                workers,
                budget: DEFAULT_BUDGET,
                thread_name: "wfhost-worker".into(),
                cancel_grace: None,
                max_processes: None,
                mailbox_limit: None,
                mailbox_bytes: None,
                max_children: None,
                stack_size: None,
                max_sleeps: DEFAULT_MAX_SLEEPS,
                max_watchers: DEFAULT_MAX_WATCHERS,
                max_waiting_completions: DEFAULT_MAX_WAITING_COMPLETIONS,
                step_bytes: usize::MAX,
            },
            handlers,
            observer: None,
            hooks: Hooks::default(),
        }
    }

    /// Worker threads. Default: the number of cores (`std::thread::available_parallelism`).
    pub fn workers(mut self, workers: usize) -> Builder {
        self.config.workers = workers;
        self
    }

    /// Events a process may consume per turn before it goes to the back of the queue (a step with
    /// no events counts as one). Default: [`DEFAULT_BUDGET`].
    pub fn budget(mut self, events: usize) -> Builder {
        self.config.budget = events;
        self
    }

    /// Name prefix of the worker threads (`<prefix>-<index>`). Default: `wfhost-worker`.
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Builder {
        self.config.thread_name = prefix.into();
        self
    }

    /// The most sleeps one process may have pending; one more completes with a `limit-reached`
    /// error. A sleep with the tag of a pending one replaces it. Default: [`DEFAULT_MAX_SLEEPS`].
    pub fn max_sleeps(mut self, sleeps: usize) -> Builder {
        self.config.max_sleeps = sleeps;
        self
    }

    /// The most joins that may wait on one running process; one more completes with a
    /// `limit-reached` error (each waiting join gets its own copy of the result). The parent's
    /// joins are counted apart, against the same number, so others cannot crowd them out.
    /// Default: [`DEFAULT_MAX_WATCHERS`].
    pub fn max_watchers(mut self, joins: usize) -> Builder {
        self.config.max_watchers = joins;
        self
    }

    /// The most completions of its own yields a process may have waiting to be taken. Yields that
    /// complete at once (`now`, `random`, `send`, `spawn`, refused ones) queue their completions
    /// in the host, and a step takes at most a budget of events: a process that yields faster
    /// than it takes would grow the host's memory without bound. Past this it fails with a
    /// `Limit` failure. Default: [`DEFAULT_MAX_WAITING_COMPLETIONS`]; keep it well above the most
    /// yields one step may make.
    pub fn max_waiting_completions(mut self, completions: usize) -> Builder {
        self.config.max_waiting_completions = completions;
        self
    }

    /// The most event bytes (payloads) one step takes in, whatever the budget says: a step always
    /// gets at least one event, and stops before the event that would go past this. Keeps a
    /// process's input within what its memory can hold when many large messages are queued.
    /// Default: no limit.
    pub fn step_bytes(mut self, bytes: usize) -> Builder {
        self.config.step_bytes = bytes;
        self
    }

    /// The stack size of each worker thread, in bytes: processes run on it. Default: `None`, the
    /// platform's default for spawned threads (2 MiB for Rust).
    pub fn stack_size(mut self, bytes: Option<usize>) -> Builder {
        self.config.stack_size = bytes;
        self
    }

    /// How long a cancelled process may keep running (to clean up) before it is terminated: it then
    /// fails without another step. Default: `None`, never terminated.
    pub fn cancel_grace(mut self, grace: Option<Duration>) -> Builder {
        self.config.cancel_grace = grace;
        self
    }

    /// The most processes that may be live at once; spawning more fails with
    /// [`Error::TooManyProcesses`](crate::Error::TooManyProcesses). Default: `None`, no limit.
    pub fn max_processes(mut self, limit: Option<usize>) -> Builder {
        self.config.max_processes = limit;
        self
    }

    /// The most messages a process's mailbox holds; sending more fails with
    /// [`Error::MailboxFull`](crate::Error::MailboxFull). Cancels and completions are never
    /// refused. Default: `None`, no limit.
    pub fn mailbox_limit(mut self, messages: Option<usize>) -> Builder {
        self.config.mailbox_limit = messages;
        self
    }

    /// The most payload bytes a process's mailbox holds, summed over its queued messages; sending
    /// more fails with [`Error::MailboxFull`](crate::Error::MailboxFull). Default: `None`, no limit.
    pub fn mailbox_bytes(mut self, bytes: Option<usize>) -> Builder {
        self.config.mailbox_bytes = bytes;
        self
    }

    /// The most children a process may have at once: running ones, and finished ones whose result
    /// is kept for a join that has not happened yet. Spawning more fails with
    /// [`Error::TooManyChildren`](crate::Error::TooManyChildren); joining a finished child makes
    /// room (a cancelled child counts until it has finished and been joined). Processes spawned from outside (no parent) are bounded by
    /// [`max_processes`](Self::max_processes) only. Default: `None`, no limit.
    pub fn max_children(mut self, limit: Option<usize>) -> Builder {
        self.config.max_children = limit;
        self
    }

    /// Tells `observer` about every spawn, event, yield and exit. Default: none.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Builder {
        self.observer = Some(observer);
        self
    }

    /// Calls `interrupt` when a shutdown's grace period is over, before the workers are joined:
    /// it should make steps still running end soon (a wasm host interrupts its guests), so that
    /// a shutdown does not wait for them. Default: none; the workers finish their steps.
    pub fn interrupt(mut self, interrupt: impl Fn() + Send + Sync + 'static) -> Builder {
        self.hooks.interrupt = Some(Arc::new(interrupt));
        self
    }

    /// Calls `stopped` once, when a shutdown is over: the workers joined, the handlers and the
    /// timer stopped, every process closed. On the thread that called
    /// [`Scheduler::shutdown`](crate::Scheduler::shutdown) before it returns, or, for a
    /// shutdown called from a worker, on the thread that carries it out: what the processes use
    /// while they wind down (a wasm host's epoch ticker) must be stopped here, not after
    /// `shutdown` returns. Default: none.
    pub fn on_stopped(mut self, stopped: impl FnOnce() + Send + 'static) -> Builder {
        self.hooks.stopped = Some(Box::new(stopped));
        self
    }

    /// Handles `spawn` commands: `spawner` makes the processes they ask for. Default: none, and
    /// `spawn` completes with `unknown-command`.
    pub fn spawner(mut self, spawner: impl Spawner) -> Builder {
        self.handlers.set(
            CommandKind::Spawn,
            Arc::new(SpawnHandler(Arc::new(spawner))),
        );
        self
    }

    /// Handles commands of `kind` with `handler`, replacing any built-in one.
    pub fn handler(mut self, kind: CommandKind, handler: impl Handler) -> Builder {
        self.handlers.set(kind, Arc::new(handler));
        self
    }

    /// Handles commands of `kind` with a shared handler.
    pub fn handler_arc(mut self, kind: CommandKind, handler: Arc<dyn Handler>) -> Builder {
        self.handlers.set(kind, handler);
        self
    }

    /// Starts the worker threads.
    pub fn build(self) -> Result<Scheduler, BuildError> {
        if self.config.workers == 0 {
            return Err(BuildError::Invalid("workers must be at least 1".into()));
        }
        if self.config.budget == 0 {
            return Err(BuildError::Invalid(
                "the budget must be at least 1 event".into(),
            ));
        }
        Scheduler::start(self.config, self.handlers, self.observer, self.hooks)
    }
}
