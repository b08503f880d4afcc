//! Activity tasks: calls to functions that programs outside the host serve (activity workers, in
//! any language, over the HTTP API's `/v1/tasks` routes).
//!
//! A call to a worker function becomes a task on a [`Tasks`] board: queued until a worker polls
//! for its function, then taken by that worker until a deadline that each heartbeat moves on. A
//! task whose worker neither completes nor heartbeats by its deadline is queued again (its attempt
//! counted up) for another worker; its earlier delivery's name is then refused, so a late
//! completion is never applied. A completion ends the call in the workflow, which journals it like
//! every completion.
//!
//! The board lives in memory and holds no thread or connection per task. It loses nothing when
//! the host stops: a durable workflow's pending call is in its journal and is called again after
//! recovery, with the same idempotency key, which puts the task back on the board.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use wfcontract::{CommandError, Payload};

pub(crate) use wfhost_store::tasks::{Board, Outcomes};
pub use wfhost_store::tasks::{
    FunctionTasks, Task, TaskError, TaskSettings, DEFAULT_MAX_TASKS, DEFAULT_TASK_TIMEOUT,
};
use wfhost_store::PgTaskBoard as SharedBoard;

/// The board of activity tasks: share one between the hosts that call worker functions
/// ([`HostBuilder::worker_function`](crate::HostBuilder::worker_function)) and the HTTP API that
/// workers poll (`Api::tasks` of crate `wfhost-server`). Cheap to clone.
///
/// [`Tasks::new`] keeps the tasks in memory, for one host; [`Tasks::postgres`] keeps them in the
/// PostgreSQL store hosts share, so that a worker may poll any of them.
#[derive(Clone, Debug)]
pub struct Tasks {
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    Local(Arc<Board>),
    Shared(Arc<SharedBoard>),
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks::new(TaskSettings::default())
    }
}

impl Tasks {
    /// An empty board in memory.
    pub fn new(settings: TaskSettings) -> Tasks {
        Tasks {
            kind: Kind::Local(Board::start(settings)),
        }
    }

    /// A board in the PostgreSQL store at `url` (the hosts' `--store`): every host's tasks are
    /// offered to workers polling any host, and each is taken once. The host built with it
    /// ([`HostBuilder::tasks`](crate::HostBuilder::tasks)) must be on the same store.
    pub fn postgres(url: &str, settings: TaskSettings) -> crate::Result<Tasks> {
        let board = SharedBoard::start(url, settings)
            .map_err(|why| crate::Error::new(crate::ErrorKind::Config, why))?;
        Ok(Tasks {
            kind: Kind::Shared(board),
        })
    }

    /// The next task for one of `functions`, waiting up to `wait` for one; `None` if none came.
    pub async fn poll(
        &self,
        functions: &[String],
        wait: Duration,
    ) -> Result<Option<Task>, TaskError> {
        match &self.kind {
            Kind::Local(board) => Ok(board.poll(functions, wait).await),
            Kind::Shared(board) => board.poll(functions, wait).await,
        }
    }

    /// Completes task `task` with `result` (a worker's error: `failed` if worth retrying,
    /// `rejected` if not).
    pub async fn complete(
        &self,
        task: &str,
        result: Result<Payload, CommandError>,
    ) -> Result<(), TaskError> {
        match &self.kind {
            // It may write the outcome to the store: off the async threads.
            Kind::Local(board) => {
                let board = Arc::clone(board);
                let task = task.to_string();
                tokio::task::spawn_blocking(move || board.complete(&task, result))
                    .await
                    .unwrap_or_else(|e| Err(TaskError::Unavailable(e.to_string())))
            }
            Kind::Shared(board) => board.complete(task, result).await,
        }
    }

    /// Moves task `task`'s deadline on by the board's timeout; returns the new deadline.
    pub async fn heartbeat(&self, task: &str) -> Result<SystemTime, TaskError> {
        match &self.kind {
            Kind::Local(board) => board.heartbeat(task),
            Kind::Shared(board) => board.heartbeat(task).await,
        }
    }

    /// Gives task `task` back: the next poll takes it now, not at its deadline (a worker that
    /// stops before it finished the task).
    pub async fn release(&self, task: &str) -> Result<(), TaskError> {
        match &self.kind {
            Kind::Local(board) => board.release(task),
            Kind::Shared(board) => board.release(task).await,
        }
    }

    /// The function of the task a delivery's name names, if it is on the board.
    pub async fn function_of(&self, task: &str) -> Result<Option<String>, TaskError> {
        match &self.kind {
            Kind::Local(board) => Ok(board.function_of(task)),
            Kind::Shared(board) => board.function_of(task).await,
        }
    }

    /// Each function's open tasks: how many wait for a worker (and how long the oldest has),
    /// how many workers hold.
    pub async fn summary(&self) -> Result<Vec<FunctionTasks>, TaskError> {
        match &self.kind {
            Kind::Local(board) => Ok(board.summary()),
            Kind::Shared(board) => board.summary().await,
        }
    }

    /// Tasks waiting for a worker, and tasks workers hold, on a board in memory (`None` for one
    /// in a store).
    pub fn counts(&self) -> Option<(usize, usize)> {
        match &self.kind {
            Kind::Local(board) => Some(board.counts()),
            Kind::Shared(_) => None,
        }
    }

    /// Tells a board in a store which host its calls come from.
    pub(crate) fn joined(&self, host: u64) {
        if let Kind::Shared(board) = &self.kind {
            board.joined(host);
        }
    }

    /// Whether the tasks are in a store.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self.kind, Kind::Shared(_))
    }

    /// Keeps the outcomes of durable workflows' calls on a board in memory in `outcomes` (the
    /// host's store), from a completion's answer until the step that takes each is journaled.
    pub(crate) fn keep_outcomes(&self, outcomes: Arc<dyn Outcomes>) {
        if let Kind::Local(board) = &self.kind {
            board.keep_outcomes(outcomes);
        }
    }

    /// Calls `function` with `input` through a worker: queues the task and waits for its
    /// completion. Dropping the future withdraws the task, but a durable workflow's (`call`
    /// names it: the workflow's number and the call's tag) on a store's board: that one stays
    /// for the workflow's next owner until the step that takes its outcome is journaled.
    pub(crate) async fn call(
        &self,
        function: Arc<str>,
        input: Payload,
        (key, traceparent): (Option<String>, Option<String>),
        call: Option<(u64, u64)>,
    ) -> Result<Payload, CommandError> {
        match &self.kind {
            Kind::Local(board) => board.call(function, input, key, traceparent, call).await,
            Kind::Shared(board) => match call {
                Some(call) => {
                    board
                        .call_durable(function, input, key, traceparent, call)
                        .await
                }
                None => board.call(function, input, key, traceparent).await,
            },
        }
    }
}
