//! What an activity task is, as every board of them (in memory, or in a PostgreSQL store) gives
//! it to a worker, and why a board refuses a completion.

mod board;

use std::time::{Duration, Instant, SystemTime};

use wfcontract::{CommandError, Payload};

pub use board::Board;

/// How long a worker holds a task before it is offered to another, unless it heartbeats, unless
/// a board's settings say otherwise.
pub const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(60);

/// Tasks waiting for a worker at once, at most, unless the settings say otherwise; calls past it
/// fail with `limit-reached`.
pub const DEFAULT_MAX_TASKS: usize = 1_000_000;

/// How a board of tasks behaves.
#[derive(Clone, Debug)]
pub struct TaskSettings {
    /// How long a worker holds a task without a heartbeat.
    pub timeout: Duration,
    /// Tasks on the board (queued or taken) at once, at most.
    pub max_tasks: usize,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            timeout: DEFAULT_TASK_TIMEOUT,
            max_tasks: DEFAULT_MAX_TASKS,
        }
    }
}

/// A task as a worker gets it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Task {
    /// This delivery's name: completions and heartbeats give it back. Another delivery of the
    /// same call (after this one's deadline) has another name.
    pub task: String,
    /// The function it calls.
    pub function: String,
    /// The call's input.
    pub input: Payload,
    /// The call's idempotency key (the same in every attempt and after a restart); `None` for a
    /// process that is not durable.
    pub idempotency_key: Option<String>,
    /// Which delivery of the call this is, from 1.
    pub attempt: u32,
    /// When the task goes to another worker unless completed or heartbeaten.
    pub deadline: SystemTime,
    /// How long the call waited for this delivery since it was made (its earlier deliveries
    /// included).
    pub waited: Duration,
    /// The W3C `traceparent` of the call's span, when the host is traced: the worker's spans
    /// for the task are its children.
    pub traceparent: Option<String>,
}

impl Task {
    /// A delivery named `task` of a call to `function` with `input`: what a board hands a
    /// worker. For the boards (the engine's in memory, the store's); not for applications.
    #[doc(hidden)]
    pub fn new(
        task: String,
        function: String,
        input: Payload,
        idempotency_key: Option<String>,
        attempt: u32,
        deadline: SystemTime,
    ) -> Task {
        Task {
            task,
            function,
            input,
            idempotency_key,
            attempt,
            deadline,
            waited: Duration::ZERO,
            traceparent: None,
        }
    }

    /// With how long the call waited for this delivery. For the boards; not for applications.
    #[doc(hidden)]
    pub fn waited(mut self, waited: Duration) -> Task {
        self.waited = waited;
        self
    }

    /// With the call's span. For the boards; not for applications.
    #[doc(hidden)]
    pub fn traceparent(mut self, traceparent: Option<String>) -> Task {
        self.traceparent = traceparent;
        self
    }
}

/// One function's tasks on a board.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FunctionTasks {
    /// The function.
    pub function: String,
    /// Tasks waiting for a worker.
    pub waiting: u64,
    /// How long the oldest of them has waited since its call was made.
    pub oldest_waiting: Option<Duration>,
    /// Tasks workers hold.
    pub in_flight: u64,
}

impl FunctionTasks {
    /// No tasks of `function`.
    pub fn new(function: String) -> FunctionTasks {
        FunctionTasks {
            function,
            waiting: 0,
            oldest_waiting: None,
            in_flight: 0,
        }
    }
}

/// Why a completion or heartbeat was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The name is not one the board gave out.
    #[error("there is no task '{0}': its name is not one this server gave (was it given by another server, or before a restart?)")]
    Unknown(String),
    /// The task was given to another worker, finished, or given up on: this delivery is over.
    #[error("task '{task}' has moved on: {why}; this completion was not applied")]
    MovedOn {
        /// The delivery's name.
        task: String,
        /// What became of it.
        why: String,
    },
    /// The store that holds the tasks could not be reached: ask again.
    #[error("the tasks' store could not be reached: {0}; ask again")]
    Unavailable(String),
}

/// Where a board in memory keeps what workers answered durable workflows' calls, by the
/// workflow's number and the call's tag (the engine's `Tasks::keep_outcomes`).
pub trait Outcomes: Send + Sync {
    /// Keeps `outcome`, durably, before it returns.
    fn keep(&self, call: (u64, u64), outcome: &Result<Payload, CommandError>)
        -> Result<(), String>;

    /// The outcome kept for `call`, if one is.
    fn kept(&self, call: (u64, u64)) -> Option<Result<Payload, CommandError>>;
}

/// `instant` as wall-clock time.
fn wall(instant: Instant) -> SystemTime {
    let now = Instant::now();
    if instant >= now {
        SystemTime::now() + (instant - now)
    } else {
        SystemTime::now() - (now - instant)
    }
}
