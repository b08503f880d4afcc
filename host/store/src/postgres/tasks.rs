//! The board on a PostgreSQL store that many hosts share: tasks are rows of `wfhost.tasks`, so a
//! worker may poll any host and each task is taken once, by the row's update (`FOR UPDATE SKIP
//! LOCKED`), as messages are. A row names the host whose workflow waits; a completion sets the
//! row's outcome and notifies (`wfhost_task_done`), and that host hands the outcome to its
//! waiting call. New tasks notify too (`wfhost_task_new`), waking the pollers of every host. A
//! sweep each second catches what a lost notification missed.
//!
//! A durable workflow's call is one row, named by the workflow and the call's tag, that outlives
//! the host that made it: when that host dies or loses its lease, the workflow's next owner makes
//! the call again and takes the row over (`call_durable`), so a worker's completion is applied
//! whichever host it reaches and whenever it comes (within the task's deadline), an outcome
//! given while no host ran the workflow is taken at once, and attempts count on. The row goes
//! with the step that journals its outcome (in that step's transaction), or with the workflow's
//! end or prune. A call of a process that is not durable is withdrawn when the call ends, and
//! goes with its host: a completion for it then is refused.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};
use tokio_postgres::{AsyncMessage, Client, NoTls};
use wfcontract::{CommandError, Encoding, ErrorKind, Payload};

use crate::tasks::{FunctionTasks, Task, TaskError, TaskSettings};

type Done = oneshot::Sender<Result<Payload, CommandError>>;

/// A call waiting for its task's outcome.
struct Waiter {
    done: Done,
    /// Its row is in the store (written, or taken over): a row gone from under it means the call
    /// is over (its workflow journaled its end, or gave it up), and it stops waiting.
    placed: bool,
}

/// How often a waiting poller looks again without a notification (for tasks whose deadlines
/// passed), and how often the sweep runs.
const RECHECK: Duration = Duration::from_secs(1);
const SWEEP: Duration = Duration::from_secs(1);

/// The board of activity tasks in a PostgreSQL store hosts share (see the module's text).
pub struct PgTaskBoard {
    settings: TaskSettings,
    config: tokio_postgres::Config,
    /// Drives the connections and the listener; shut down in the background when the board
    /// goes (the last reference may be dropped on one of its own threads).
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// The host this board's calls belong to (0: not joined yet).
    host: AtomicI64,
    /// Calls waiting, by task id.
    waiting: Mutex<HashMap<i64, Waiter>>,
    /// Pollers waiting, woken by function.
    new_tasks: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Drop for PgTaskBoard {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for PgTaskBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTaskBoard")
            .field("host", &self.host.load(Ordering::Relaxed))
            .field("waiting", &self.waiting.lock().len())
            .finish_non_exhaustive()
    }
}

fn unavailable(what: &str, error: impl std::fmt::Display) -> CommandError {
    CommandError::new(
        ErrorKind::Unavailable,
        format!("the task board's store could not be reached ({what}): {error}"),
    )
}

fn millis(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn token() -> i64 {
    let mut bytes = [0; 8];
    let _ = getrandom::fill(&mut bytes);
    i64::from_le_bytes(bytes) & i64::MAX
}

fn parse(task: &str) -> Option<(i64, i64)> {
    let (id, token) = task.split_once('.')?;
    if token.len() != 16 {
        return None;
    }
    Some((id.parse().ok()?, i64::from_str_radix(token, 16).ok()?))
}

fn encoding_code(encoding: Encoding) -> i16 {
    match encoding {
        Encoding::Postcard => 0,
        Encoding::Json => 1,
        Encoding::Bytes => 2,
    }
}

fn encoding_of(code: i16) -> Encoding {
    match code {
        1 => Encoding::Json,
        2 => Encoding::Bytes,
        _ => Encoding::Postcard,
    }
}

impl PgTaskBoard {
    /// A board on the PostgreSQL store at `url` (whose schema the host's store creates).
    pub fn start(url: &str, settings: TaskSettings) -> Result<Arc<PgTaskBoard>, String> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| format!("the store's URL is not a PostgreSQL URL: {e}"))?;
        config.application_name("wfhost-tasks");
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("wfhost-tasks")
            .enable_all()
            .build()
            .map_err(|e| format!("the task board's runtime did not start: {e}"))?;
        let handle = runtime.handle().clone();
        let board = Arc::new(PgTaskBoard {
            settings,
            config,
            runtime: Some(runtime),
            handle,
            client: tokio::sync::Mutex::new(None),
            host: AtomicI64::new(0),
            waiting: Mutex::new(HashMap::new()),
            new_tasks: Mutex::new(HashMap::new()),
        });
        board.handle.spawn(listen(Arc::downgrade(&board)));
        board.handle.spawn(sweep(Arc::downgrade(&board)));
        Ok(board)
    }

    /// Tells the board which host its calls come from (once the host has joined the store).
    pub fn joined(&self, host: u64) {
        self.host
            .store(i64::try_from(host).unwrap_or(0), Ordering::Release);
    }

    /// The connection, made again if it broke.
    async fn client(&self) -> Result<Arc<Client>, String> {
        let mut client = self.client.lock().await;
        if let Some(open) = client.as_ref().filter(|c| !c.is_closed()) {
            return Ok(Arc::clone(open));
        }
        // Connected on the board's own runtime, whose IO driver then serves the socket for as
        // long as the board lives, whichever runtime asked first.
        let config = self.config.clone();
        let made = self
            .handle
            .spawn(async move {
                let (made, connection) = config.connect(NoTls).await?;
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!("a task board connection ended: {error}");
                    }
                });
                made.batch_execute("SET search_path TO wfhost").await?;
                Ok::<_, tokio_postgres::Error>(made)
            })
            .await
            .map_err(|_| "the task board is shutting down".to_string())?
            .map_err(|e| e.to_string())?;
        let made = Arc::new(made);
        *client = Some(Arc::clone(&made));
        Ok(made)
    }

    /// Calls `function` with `input` through a worker, for a process that is not durable: the
    /// task is withdrawn when the call ends (the future is dropped), and goes with its host.
    pub async fn call(
        self: &Arc<Self>,
        function: Arc<str>,
        input: Payload,
        key: Option<String>,
        traceparent: Option<String>,
    ) -> Result<Payload, CommandError> {
        let host = self.host.load(Ordering::Acquire);
        if host == 0 {
            return Err(CommandError::new(
                ErrorKind::Unavailable,
                "the task board has no host yet: retry",
            ));
        }
        let (done, outcome) = oneshot::channel();
        // The id is made here, and the call waits under it before the row exists: a call
        // dropped while its insert is on the way still withdraws the row.
        let id = token().max(1);
        {
            let mut waiting = self.waiting.lock();
            if waiting.len() >= self.settings.max_tasks {
                return Err(CommandError::new(
                    ErrorKind::LimitReached,
                    format!(
                        "{} tasks of this host wait for activity workers, the most it holds; \
                         retry later",
                        self.settings.max_tasks
                    ),
                ));
            }
            waiting.insert(
                id,
                Waiter {
                    done,
                    placed: false,
                },
            );
        }
        let _withdraw = Withdraw {
            board: Arc::clone(self),
            id,
        };
        let client = self.client().await.map_err(|e| unavailable("a call", e))?;
        client
            .query_one(
                "WITH t AS (INSERT INTO tasks (id, host, function, input, encoding, key, \
                 traceparent) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id) \
                 SELECT id, pg_notify('wfhost_task_new', $3) FROM t",
                &[
                    &id,
                    &host,
                    &&*function,
                    &&input.bytes[..],
                    &encoding_code(input.encoding),
                    &key,
                    &traceparent,
                ],
            )
            .await
            .map_err(|e| unavailable("a call", e))?;
        if let Some(waiter) = self.waiting.lock().get_mut(&id) {
            waiter.placed = true;
        }
        match outcome.await {
            Ok(outcome) => outcome,
            Err(_) => Err(CommandError::new(
                ErrorKind::Unavailable,
                format!("the task for '{function}' was dropped from the board"),
            )),
        }
    }

    /// The task of durable workflow `call.0`'s call `call.1`: one row for the call, however
    /// many hosts make it. A call made again by the workflow's next owner (the host that made
    /// it died, or lost its lease) takes the row over: a worker holding it still completes it,
    /// an outcome a worker gave meanwhile is taken at once, and attempts count on. The row
    /// stays until the step that takes its outcome is journaled (or the workflow ends).
    pub async fn call_durable(
        self: &Arc<Self>,
        function: Arc<str>,
        input: Payload,
        key: Option<String>,
        traceparent: Option<String>,
        (workflow, tag): (u64, u64),
    ) -> Result<Payload, CommandError> {
        // Tags and numbers past i64 never reach here (the host refuses such yields).
        let (workflow, tag) = (
            i64::try_from(workflow).unwrap_or(i64::MAX),
            i64::try_from(tag).unwrap_or(i64::MAX),
        );
        // What a failure here answers is journaled as the call's outcome, and the step that
        // takes it removes the task, a worker's outcome included: so nothing the store can get
        // over answers the call. It waits instead (the host's shutdown drops it).
        let mut wait = Duration::from_millis(50);
        let (id, inserted) = loop {
            match self
                .take_call(&function, &input, (&key, &traceparent), workflow, tag)
                .await
            {
                Ok(Some(row)) => break row,
                Ok(None) => {
                    return Err(CommandError::new(
                        ErrorKind::Unavailable,
                        "this host no longer runs the workflow (its lease ran out): its new \
                         owner makes the call",
                    ))
                }
                Err(error) => {
                    tracing::warn!(
                        "the task board cannot take a call of '{function}' now ({error}); \
                         trying again in {wait:?}"
                    );
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        };
        let (done, outcome) = oneshot::channel();
        {
            let mut waiting = self.waiting.lock();
            // Past the board's bound, a new call is refused (and its row goes); one that was
            // there is taken whatever the bound: its outcome may be in it.
            if inserted && waiting.len() >= self.settings.max_tasks {
                drop(waiting);
                let board = Arc::downgrade(self);
                self.handle.spawn(async move {
                    if let Some(board) = board.upgrade() {
                        if let Ok(client) = board.client().await {
                            let _ = client
                                .execute("DELETE FROM tasks WHERE id = $1", &[&id])
                                .await;
                        }
                    }
                });
                return Err(CommandError::new(
                    ErrorKind::LimitReached,
                    format!(
                        "{} tasks of this host wait for activity workers, the most it holds; \
                         retry later",
                        self.settings.max_tasks
                    ),
                ));
            }
            if waiting.contains_key(&id) {
                return Err(CommandError::new(
                    ErrorKind::InvalidInput,
                    "this call is made already, under the same tag: a workflow's calls have \
                     tags of their own",
                ));
            }
            waiting.insert(id, Waiter { done, placed: true });
        }
        let _forget = Forget {
            board: Arc::clone(self),
            id,
        };
        // Completed before this host waited for it (by a worker while its old host was gone,
        // or just now, before the wait above was in place): taken now.
        self.deliver(id).await;
        match outcome.await {
            Ok(outcome) => outcome,
            Err(_) => Err(CommandError::new(
                ErrorKind::Unavailable,
                format!("the task for '{function}' was dropped from the board"),
            )),
        }
    }

    /// Writes the task of durable workflow `workflow`'s call `tag`, or takes its row over from
    /// the host that made it before: its id, and whether it is new. `None` when this host does
    /// not own the workflow (it lost its lease: the new owner makes the call).
    async fn take_call(
        &self,
        function: &str,
        input: &Payload,
        (key, traceparent): (&Option<String>, &Option<String>),
        workflow: i64,
        tag: i64,
    ) -> Result<Option<(i64, bool)>, String> {
        let host = self.host.load(Ordering::Acquire);
        if host == 0 {
            return Err("the board has no host yet".into());
        }
        let client = self.client().await?;
        let row = client
            .query_opt(
                "WITH t AS (INSERT INTO tasks (id, host, function, input, encoding, key, \
                   workflow, tag, traceparent) \
                   SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE EXISTS \
                     (SELECT 1 FROM workflows w WHERE w.num = $7 AND w.owner = $2) \
                   ON CONFLICT (workflow, tag) WHERE workflow IS NOT NULL \
                   DO UPDATE SET host = excluded.host, traceparent = excluded.traceparent \
                   RETURNING id, xmax = 0 AS inserted) \
                 SELECT id, inserted, pg_notify('wfhost_task_new', $3) FROM t",
                &[
                    &token().max(1),
                    &host,
                    &function,
                    &&input.bytes[..],
                    &encoding_code(input.encoding),
                    key,
                    &workflow,
                    &tag,
                    traceparent,
                ],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.map(|row| (row.get(0), row.get(1))))
    }

    /// Hands task `id`'s outcome, if it has one, to the call waiting for it here.
    async fn deliver(&self, id: i64) {
        if !self.waiting.lock().contains_key(&id) {
            return;
        }
        let Ok(client) = self.client().await else {
            return;
        };
        let row = client
            .query_opt(
                "SELECT outcome FROM tasks WHERE id = $1 AND outcome IS NOT NULL",
                &[&id],
            )
            .await;
        let Ok(Some(row)) = row else {
            return;
        };
        let bytes: Vec<u8> = row.get(0);
        let outcome =
            postcard::from_bytes::<Result<Payload, CommandError>>(&bytes).unwrap_or_else(|e| {
                Err(CommandError::new(
                    ErrorKind::Failed,
                    format!("the task's outcome in the store does not read back: {e}"),
                ))
            });
        if let Some(waiter) = self.waiting.lock().remove(&id) {
            let _ = waiter.done.send(outcome);
        }
        // Read, handed over, then deleted: an answer lost on the way leaves the row for the
        // next look (a delete lost leaves it for the sweep), never a call without its outcome.
        // A durable workflow's stays until the step that takes the outcome is journaled.
        let host = self.host.load(Ordering::Acquire);
        let _ = client
            .execute(
                "DELETE FROM tasks WHERE id = $1 AND host = $2 AND workflow IS NULL",
                &[&id, &host],
            )
            .await;
    }

    /// Ends the waits of calls whose rows are gone: a durable workflow journaled the call's end
    /// or gave it up (a `forget`), or ended; or, for a call of a process that is not durable,
    /// this host was taken for gone and its rows went.
    async fn release_gone(&self, client: &Client) {
        let placed: Vec<i64> = self
            .waiting
            .lock()
            .iter()
            .filter(|(_, waiter)| waiter.placed)
            .map(|(id, _)| *id)
            .collect();
        if placed.is_empty() {
            return;
        }
        let Ok(rows) = client
            .query(
                "SELECT w.id FROM unnest($1::int8[]) AS w(id) \
                 WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = w.id)",
                &[&placed],
            )
            .await
        else {
            return;
        };
        let mut waiting = self.waiting.lock();
        for row in rows {
            let id: i64 = row.get(0);
            if !waiting.get(&id).is_some_and(|waiter| waiter.placed) {
                continue;
            }
            if let Some(waiter) = waiting.remove(&id) {
                let _ = waiter.done.send(Err(CommandError::new(
                    ErrorKind::Unavailable,
                    "the task is gone from the board: the call was given up or ended",
                )));
            }
        }
    }

    /// What pollers of `function` wait on.
    fn notifier(&self, function: &str) -> Arc<Notify> {
        Arc::clone(
            self.new_tasks
                .lock()
                .entry(function.to_string())
                .or_insert_with(|| Arc::new(Notify::new())),
        )
    }

    /// The next task for one of `functions`, waiting up to `wait` for one; `None` if none came.
    pub async fn poll(
        &self,
        functions: &[String],
        wait: Duration,
    ) -> Result<Option<Task>, TaskError> {
        let until = tokio::time::Instant::now() + wait;
        let functions: Vec<String> = functions.to_vec();
        let timeout_ms = i64::try_from(self.settings.timeout.as_millis()).unwrap_or(i64::MAX);
        let listening = Listening {
            board: self,
            notifiers: functions
                .iter()
                .map(|f| (f.clone(), self.notifier(f)))
                .collect(),
        };
        loop {
            let mut notified: Vec<_> = listening
                .notifiers
                .iter()
                .map(|(_, n)| Box::pin(n.notified()))
                .collect();
            for one in &mut notified {
                one.as_mut().enable();
            }
            let client = self
                .client()
                .await
                .map_err(|e| TaskError::Unavailable(e.to_string()))?;
            let token = token();
            let row = client
                .query_opt(
                    "UPDATE tasks SET token = $2, attempt = attempt + 1, \
                     deadline = now() + $3 * interval '1 millisecond' \
                     WHERE id = (SELECT t.id FROM tasks t JOIN hosts h ON h.id = t.host \
                       WHERE t.function = ANY($1) AND t.outcome IS NULL \
                       AND (t.deadline IS NULL OR t.deadline <= now()) \
                       AND NOT h.dead AND h.lease_until > now() \
                       ORDER BY t.seq LIMIT 1 FOR UPDATE OF t SKIP LOCKED) \
                     RETURNING id, function, input, encoding, key, attempt, \
                       (extract(epoch FROM deadline) * 1000)::bigint, \
                       (extract(epoch FROM now() - queued_at) * 1000)::bigint, traceparent",
                    &[&functions, &token, &(timeout_ms as f64)],
                )
                .await
                .map_err(|e| TaskError::Unavailable(e.to_string()))?;
            if let Some(row) = row {
                let id: i64 = row.get(0);
                let attempt: i32 = row.get(5);
                return Ok(Some(
                    Task::new(
                        format!("{id}.{token:016x}"),
                        row.get(1),
                        Payload {
                            encoding: encoding_of(row.get(3)),
                            bytes: wfcontract::PayloadBytes::from_slice(row.get::<_, &[u8]>(2)),
                        },
                        row.get(4),
                        u32::try_from(attempt).unwrap_or(0),
                        millis(row.get(6)),
                    )
                    .waited(Duration::from_millis(
                        u64::try_from(row.get::<_, i64>(7)).unwrap_or(0),
                    ))
                    .traceparent(row.get(8)),
                ));
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Ok(None);
            }
            let nap = (until - now).min(RECHECK);
            let _ = tokio::time::timeout(nap, futures::future::select_all(notified)).await;
        }
    }

    /// Completes task `task` with `result`: applied to the row whichever host runs the workflow.
    pub async fn complete(
        &self,
        task: &str,
        outcome: Result<Payload, CommandError>,
    ) -> Result<(), TaskError> {
        let (id, token) = parse(task).ok_or_else(|| TaskError::Unknown(task.into()))?;
        let bytes = postcard::to_allocvec(&outcome)
            .map_err(|e| TaskError::Unavailable(format!("the outcome did not encode: {e}")))?;
        let client = self
            .client()
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        let done = client
            .query_opt(
                "WITH t AS (UPDATE tasks SET outcome = $3, token = NULL \
                 WHERE id = $1 AND token = $2 AND outcome IS NULL AND deadline > now() \
                 AND (workflow IS NOT NULL OR host IN \
                   (SELECT id FROM hosts WHERE NOT dead AND lease_until > now())) \
                 RETURNING id) \
                 SELECT pg_notify('wfhost_task_done', id::text) FROM t",
                &[&id, &token, &bytes],
            )
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        if done.is_some() {
            return Ok(());
        }
        Err(self.why_not(&client, task, id, token).await)
    }

    /// Moves task `task`'s deadline on by the board's timeout; returns the new deadline.
    pub async fn heartbeat(&self, task: &str) -> Result<SystemTime, TaskError> {
        let (id, token) = parse(task).ok_or_else(|| TaskError::Unknown(task.into()))?;
        let timeout_ms = i64::try_from(self.settings.timeout.as_millis()).unwrap_or(i64::MAX);
        let client = self
            .client()
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        let row = client
            .query_opt(
                "UPDATE tasks SET deadline = now() + $3 * interval '1 millisecond' \
                 WHERE id = $1 AND token = $2 AND outcome IS NULL AND deadline > now() \
                 RETURNING (extract(epoch FROM deadline) * 1000)::bigint",
                &[&id, &token, &(timeout_ms as f64)],
            )
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        match row {
            Some(row) => Ok(millis(row.get(0))),
            None => Err(self.why_not(&client, task, id, token).await),
        }
    }

    /// Each function's open tasks: how many wait for a worker (and how long the oldest has),
    /// how many workers hold. Tasks of every host's workflows, as a poll sees them.
    pub async fn summary(&self) -> Result<Vec<FunctionTasks>, TaskError> {
        let client = self
            .client()
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        let rows = client
            .query(
                "SELECT t.function, \
                   count(*) FILTER (WHERE t.deadline IS NULL OR t.deadline <= now()), \
                   (extract(epoch FROM now() - min(t.queued_at) \
                     FILTER (WHERE t.deadline IS NULL OR t.deadline <= now())) * 1000)::bigint, \
                   count(*) FILTER (WHERE t.deadline > now()) \
                 FROM tasks t JOIN hosts h ON h.id = t.host \
                 WHERE t.outcome IS NULL AND NOT h.dead AND h.lease_until > now() \
                 GROUP BY t.function ORDER BY t.function",
                &[],
            )
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        Ok(rows
            .iter()
            .map(|row| {
                let mut tasks = FunctionTasks::new(row.get(0));
                tasks.waiting = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
                tasks.oldest_waiting = row
                    .get::<_, Option<i64>>(2)
                    .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
                tasks.in_flight = u64::try_from(row.get::<_, i64>(3)).unwrap_or(0);
                tasks
            })
            .collect())
    }

    /// Gives task `task` back, for the next poll to take now rather than at its deadline.
    pub async fn release(&self, task: &str) -> Result<(), TaskError> {
        let (id, token) = parse(task).ok_or_else(|| TaskError::Unknown(task.into()))?;
        let client = self
            .client()
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        let row = client
            .query_opt(
                "WITH t AS (UPDATE tasks SET deadline = now(), token = NULL \
                 WHERE id = $1 AND token = $2 AND outcome IS NULL AND deadline > now() \
                 RETURNING function) \
                 SELECT pg_notify('wfhost_task_new', function) FROM t",
                &[&id, &token],
            )
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        match row {
            Some(_) => Ok(()),
            None => Err(self.why_not(&client, task, id, token).await),
        }
    }

    /// Why delivery `token` of task `id` cannot be completed or heartbeaten.
    async fn why_not(&self, client: &Client, task: &str, id: i64, token: i64) -> TaskError {
        let moved = |why: String| TaskError::MovedOn {
            task: task.into(),
            why,
        };
        let row = client
            .query_opt(
                "SELECT outcome IS NOT NULL, token, attempt, deadline <= now(), \
                 workflow IS NULL AND host NOT IN \
                   (SELECT id FROM hosts WHERE NOT dead AND lease_until > now()) \
                 FROM tasks WHERE id = $1",
                &[&id],
            )
            .await;
        match row {
            Err(error) => TaskError::Unavailable(error.to_string()),
            Ok(None) => moved("it is finished, or the workflow stopped waiting for it".into()),
            Ok(Some(row)) => {
                let (finished, current, attempt, late): (bool, Option<i64>, i32, Option<bool>) =
                    (row.get(0), row.get(1), row.get(2), row.get(3));
                let orphaned: Option<bool> = row.get(4);
                if finished {
                    moved("it is finished".into())
                } else if orphaned == Some(true) {
                    moved(
                        "the host whose process called it is gone, and that process with it (it \
                         was not a durable workflow's, which would call again)"
                            .into(),
                    )
                } else if current == Some(token) && late == Some(true) {
                    moved("its deadline passed before this came".into())
                } else {
                    moved(format!(
                        "its deadline passed and it was offered again (it is at attempt \
                         {attempt} now)"
                    ))
                }
            }
        }
    }

    /// The function of the task a delivery's name names, if it is on the board.
    pub async fn function_of(&self, task: &str) -> Result<Option<String>, TaskError> {
        let Some((id, _)) = parse(task) else {
            return Ok(None);
        };
        let client = self.client().await.map_err(TaskError::Unavailable)?;
        let row = client
            .query_opt("SELECT function FROM tasks WHERE id = $1", &[&id])
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        Ok(row.map(|row| row.get(0)))
    }
}

/// A poll's hold on the notifiers of its functions: those nobody else holds are let go when the
/// poll ends, so that polls for names that come and go leave nothing behind.
struct Listening<'a> {
    board: &'a PgTaskBoard,
    notifiers: Vec<(String, Arc<Notify>)>,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        let mut map = self.board.new_tasks.lock();
        for (function, notifier) in self.notifiers.drain(..) {
            // The map's and this one: nobody else waits on it.
            if Arc::strong_count(&notifier) == 2 {
                map.remove(&function);
            }
        }
    }
}

/// Stops a durable workflow's call waiting here when the call ends, however it ends; its task
/// stays in the store (see [`PgTaskBoard::call_durable`]).
struct Forget {
    board: Arc<PgTaskBoard>,
    id: i64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.board.waiting.lock().remove(&self.id);
    }
}

/// Takes a call's task off the store when the call ends, however it ends.
struct Withdraw {
    board: Arc<PgTaskBoard>,
    id: i64,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if self.board.waiting.lock().remove(&self.id).is_none() {
            // Delivered: the row goes with the outcome.
            return;
        }
        // Weak: the board may be going, and its runtime with it.
        let board = Arc::downgrade(&self.board);
        let id = self.id;
        self.board.handle.spawn(async move {
            for attempt in 0..3u32 {
                let Some(strong) = board.upgrade() else {
                    return;
                };
                if let Ok(client) = strong.client().await {
                    if client
                        .execute(
                            "DELETE FROM tasks WHERE id = $1 AND workflow IS NULL",
                            &[&id],
                        )
                        .await
                        .is_ok()
                    {
                        return;
                    }
                }
                drop(strong);
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
            // Left for the sweep of rows no call of this host waits for.
        });
    }
}

/// Listens for new tasks (waking the pollers) and completions (delivering them), connecting
/// again when the connection breaks.
async fn listen(board: Weak<PgTaskBoard>) {
    loop {
        let Some(strong) = board.upgrade() else {
            return;
        };
        let config = strong.config.clone();
        drop(strong);
        let connected = config.connect(NoTls).await;
        let (client, mut connection) = match connected {
            Ok(connected) => connected,
            Err(error) => {
                tracing::warn!("the task board cannot listen to its store: {error}");
                tokio::time::sleep(SWEEP).await;
                continue;
            }
        };
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        let listening = async {
            client
                .batch_execute("LISTEN wfhost_task_new; LISTEN wfhost_task_done")
                .await
        };
        // The connection must be polled for the LISTEN to be answered.
        let mut listening = std::pin::pin!(listening);
        let mut ready = false;
        loop {
            tokio::select! {
                result = &mut listening, if !ready => {
                    if result.is_err() {
                        break;
                    }
                    ready = true;
                }
                message = messages.next() => {
                    let Some(Ok(message)) = message else { break };
                    let AsyncMessage::Notification(note) = message else { continue };
                    let Some(board) = board.upgrade() else { return };
                    match note.channel() {
                        "wfhost_task_new" => {
                            let notifier = board.new_tasks.lock().get(note.payload()).cloned();
                            if let Some(notifier) = notifier {
                                notifier.notify_waiters();
                            }
                        }
                        _ => {
                            if let Ok(id) = note.payload().parse::<i64>() {
                                board.deliver(id).await;
                            }
                        }
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each second: delivers outcomes a lost notification missed, ends the waits of calls whose
/// tasks are gone, and deletes the tasks of dead hosts' processes that are not durable (a
/// durable workflow's wait for its next owner).
async fn sweep(board: Weak<PgTaskBoard>) {
    let mut round = 0u64;
    loop {
        tokio::time::sleep(SWEEP).await;
        round += 1;
        let Some(board) = board.upgrade() else {
            return;
        };
        let host = board.host.load(Ordering::Acquire);
        let Ok(client) = board.client().await else {
            continue;
        };
        if host != 0 && !board.waiting.lock().is_empty() {
            let done = client
                .query(
                    "SELECT id FROM tasks WHERE host = $1 AND outcome IS NOT NULL",
                    &[&host],
                )
                .await;
            for row in done.into_iter().flatten() {
                board.deliver(row.get(0)).await;
            }
        }
        board.release_gone(&client).await;
        // The processes of hosts that are gone went with them; a durable workflow's calls
        // wait for its next owner.
        let _ = client
            .execute(
                "DELETE FROM tasks WHERE workflow IS NULL AND host IN \
                 (SELECT id FROM hosts WHERE dead OR lease_until < now())",
                &[],
            )
            .await;
        if round.is_multiple_of(30) {
            // Now and then: this host's rows that no call waits for (a withdrawal whose delete
            // failed, an outcome handed over whose delete was lost), and the calls of workflows
            // that no longer run (their ends remove them; this is for rows a host wrote after).
            if host != 0 {
                let waiting: Vec<i64> = board.waiting.lock().keys().copied().collect();
                let _ = client
                    .execute(
                        "DELETE FROM tasks WHERE host = $1 AND workflow IS NULL \
                         AND NOT (id = ANY($2))",
                        &[&host, &waiting],
                    )
                    .await;
            }
            let _ = client
                .execute(
                    "DELETE FROM tasks t WHERE t.workflow IS NOT NULL AND NOT EXISTS \
                     (SELECT 1 FROM workflows w WHERE w.num = t.workflow AND w.state = 0)",
                    &[],
                )
                .await;
        }
    }
}
