//! The journal's writer: one thread that writes what every worker hands it in batches, one
//! transaction and one sync per batch (group commit), and then lets each step's effects go.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use wfcontract::Pid;
use wfhost_scheduler::Release;

use super::store::{Committed, Journal, Op, StoreError, StoreErrorKind};
use super::waiters::Waiters;
use crate::metrics::{ending_outcome, Kind, Metrics, Outcome};

/// The most entries one transaction takes: enough to pay for a sync many times over, few enough
/// that a batch does not hold the steps behind it for long.
const MAX_BATCH: usize = 8_192;

/// The longest a batch of steps that nobody waits for waits for more (`gather`). Nobody is told
/// anything of them until a later commit: waiting costs only how soon they are on disk (and a
/// message to a workflow another host runs, which that host reads from the store).
const AHEAD_WAIT: Duration = Duration::from_millis(1);

/// Who hears that an entry is on disk.
pub(crate) enum Done {
    /// A held step of this process: released.
    Release(Release, Pid),
    /// A step of this process that went on without waiting (its effects stay inside the
    /// journal): one fewer of its steps ahead of the disk. Lost, the process is stopped.
    Ahead(Arc<AtomicU32>, Pid),
    /// A caller waiting (a start, a message from the host, a cancel).
    Reply(Sender<Result<Committed, StoreError>>),
    /// Nobody waits.
    Nothing,
}

/// Ops written together, and who hears of it.
pub(crate) struct Submission {
    pub(crate) ops: Vec<Op>,
    pub(crate) done: Done,
}

/// Who hears of each commit once it is on disk: the waiters of the workflows it ended, and the
/// metrics.
pub(crate) struct Hooks {
    pub(crate) waiters: Arc<Waiters>,
    pub(crate) metrics: Option<Metrics>,
}

impl Hooks {
    /// After a commit of `ops` that took `took`.
    fn committed(&self, ops: &[Op], took: Duration) {
        // Counted before anyone waiting hears of the commit: whoever reads the metrics after
        // an answer it waited for finds that answer counted.
        self.count(ops, took);
        self.waiters.committed(ops);
    }

    fn count(&self, ops: &[Op], took: Duration) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let core = &metrics.core;
        core.commits.inc();
        core.commit_seconds.observe_duration(took);
        let mut steps = 0;
        for op in ops {
            match op {
                Op::Step(_) => steps += 1,
                // A start that may give way is counted by the start that won
                // (`Durable::write_start`).
                Op::Start(start) => {
                    let kind = if start.parent.is_some() {
                        "spawned"
                    } else {
                        "top_level"
                    };
                    core.started.get_or_create(&Kind { kind }).inc();
                }
                Op::End { ending, .. } => {
                    let outcome = ending_outcome(ending);
                    core.ended.get_or_create(&Outcome { outcome }).inc();
                }
                _ => {}
            }
        }
        core.steps_per_commit.observe(steps);
    }

    fn failed(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.core.commit_failures.inc();
        }
    }
}

/// Hands entries to the writer thread.
pub(crate) struct Writer {
    sender: Mutex<Option<Sender<Submission>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set by the first failed write: the store takes nothing more.
    failed: std::sync::Arc<Mutex<Option<StoreError>>>,
    /// Called on the writer thread after each failed write.
    on_failure: std::sync::Arc<OnFailure>,
}

/// What the host does when a write fails: told why, and which processes' held steps were lost
/// with it (they are never released).
type FailureHook = Box<dyn Fn(&StoreError, &[Pid]) + Send + Sync>;
type OnFailure = std::sync::OnceLock<FailureHook>;

impl Writer {
    pub(crate) fn start(store: Box<dyn Journal>, hooks: Hooks) -> std::io::Result<Writer> {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let failed = std::sync::Arc::new(Mutex::new(None));
        let failed_in = std::sync::Arc::clone(&failed);
        let on_failure = std::sync::Arc::new(OnFailure::new());
        let on_failure_in = std::sync::Arc::clone(&on_failure);
        let thread = std::thread::Builder::new()
            .name("wfhost-journal".into())
            .spawn(move || run(store, &receiver, &failed_in, &on_failure_in, &hooks))?;
        Ok(Writer {
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
            failed,
            on_failure,
        })
    }

    /// Sets what happens when a write fails (the writer thread calls it after each).
    pub(crate) fn on_failure(&self, hook: FailureHook) {
        let _ = self.on_failure.set(hook);
    }

    /// Marks the store failed for a reason found outside a write (a lost lease): it takes
    /// nothing more.
    pub(crate) fn fail(&self, error: &StoreError) {
        self.failed.lock().get_or_insert_with(|| error.clone());
    }

    /// Why the store takes nothing more, if it does not.
    pub(crate) fn failed(&self) -> Option<StoreError> {
        self.failed.lock().clone()
    }

    /// Queues `entry`. Refused once the store has failed or the writer stopped.
    pub(crate) fn submit(&self, entry: Submission) -> Result<(), StoreError> {
        if let Some(error) = self.failed() {
            return Err(error);
        }
        let sender = self.sender.lock();
        match sender.as_ref() {
            Some(sender) => sender.send(entry).map_err(|_| {
                StoreError::new(StoreErrorKind::Closed, "the journal's writer has stopped")
            }),
            None => Err(StoreError::new(
                StoreErrorKind::Closed,
                "the host has shut down its journal",
            )),
        }
    }

    /// Entries handed over and not yet committed.
    pub(crate) fn pending(&self) -> usize {
        self.sender.lock().as_ref().map_or(0, Sender::len)
    }

    /// Writes `ops` and waits until they are on disk: what the commit says of its starts.
    pub(crate) fn write(&self, ops: Vec<Op>) -> Result<Committed, StoreError> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.submit(Submission {
            ops,
            done: Done::Reply(reply),
        })?;
        answer.recv().unwrap_or_else(|_| {
            Err(StoreError::new(
                StoreErrorKind::Closed,
                "the journal's writer has stopped",
            ))
        })
    }

    /// Writes what is queued, then stops the thread.
    pub(crate) fn stop(&self) {
        drop(self.sender.lock().take());
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                tracing::error!("the journal's writer panicked");
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Fault injection for crash tests, built only with the `testing` feature (wfhost's own tests):
/// with `WFHOST_CRASH_AFTER_COMMITS=N` in its environment, the host aborts (as a `kill -9`
/// would stop it, with nothing flushed) right after its Nth commit, before anything that commit
/// acknowledges happens. Tests pick N to crash at exact points.
#[cfg(feature = "testing")]
fn crash_after() -> Option<u64> {
    std::env::var("WFHOST_CRASH_AFTER_COMMITS")
        .ok()
        .and_then(|n| n.parse().ok())
}

/// Without the `testing` feature, never.
#[cfg(not(feature = "testing"))]
fn crash_after() -> Option<u64> {
    None
}

fn run(
    mut store: Box<dyn Journal>,
    receiver: &Receiver<Submission>,
    failed: &Mutex<Option<StoreError>>,
    on_failure: &OnFailure,
    hooks: &Hooks,
) {
    let crash_after = crash_after();
    let mut commits = 0u64;
    let mut batch: Vec<Submission> = Vec::new();
    let mut ops: Vec<Op> = Vec::new();
    while let Ok(first) = receiver.recv() {
        batch.push(first);
        gather(receiver, &mut batch);
        let broken = failed.lock().clone();
        let started = Instant::now();
        let result = match broken {
            Some(error) => Err(error),
            None => {
                for entry in &mut batch {
                    ops.append(&mut entry.ops);
                }
                store.commit(&ops)
            }
        };
        let took = started.elapsed();
        if result.is_ok() {
            commits += 1;
            if crash_after == Some(commits) {
                std::process::abort();
            }
        }
        if let Err(error) = &result {
            // Never released: their effects must not happen; the host stops those processes.
            let lost: Vec<Pid> = batch
                .iter()
                .filter_map(|entry| match entry.done {
                    Done::Release(_, pid) | Done::Ahead(_, pid) => Some(pid),
                    _ => None,
                })
                .collect();
            fail(failed, on_failure, error, &lost);
        }
        for entry in batch.drain(..) {
            match (entry.done, &result) {
                (Done::Release(release, _), Ok(_)) => release.release(),
                (Done::Ahead(ahead, _), _) => {
                    ahead.fetch_sub(1, Ordering::AcqRel);
                }
                (Done::Release(..), Err(_)) | (Done::Nothing, _) => {}
                (Done::Reply(reply), result) => {
                    let _ = reply.send(result.clone());
                }
            }
        }
        match &result {
            Ok(_) => hooks.committed(&ops, took),
            Err(_) if !ops.is_empty() => hooks.failed(),
            Err(_) => {}
        }
        ops.clear();
        if result.is_ok() {
            // Off the path of the steps just let go; what it writes was durable already.
            if let Err(error) = store.tidy(false) {
                fail(failed, on_failure, &error, &[]);
            }
        }
    }
}

/// Adds to `batch` what is queued behind its first entry. A batch that nobody waits for (only
/// steps that went on before their commit, `Done::Ahead`) waits up to [`AHEAD_WAIT`] for more,
/// and for the first entry someone waits for, which it then takes with everything queued: a
/// parent that spawns a child and joins it shares one commit with the child's end, where
/// committing its step at once would have cost a commit of its own.
fn gather(receiver: &Receiver<Submission>, batch: &mut Vec<Submission>) {
    let drain = |batch: &mut Vec<Submission>| {
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(entry) => batch.push(entry),
                Err(_) => break,
            }
        }
    };
    drain(batch);
    if !batch
        .iter()
        .all(|entry| matches!(entry.done, Done::Ahead(..)))
    {
        return;
    }
    let deadline = Instant::now() + AHEAD_WAIT;
    while batch.len() < MAX_BATCH {
        let Ok(entry) = receiver.recv_deadline(deadline) else {
            return;
        };
        let waited_for = !matches!(entry.done, Done::Ahead(..));
        batch.push(entry);
        if waited_for {
            return drain(batch);
        }
    }
}

/// Records the store's first failure (the host takes no more work) and tells the host, with the
/// processes whose held steps were lost.
fn fail(
    failed: &Mutex<Option<StoreError>>,
    on_failure: &OnFailure,
    error: &StoreError,
    lost: &[Pid],
) {
    let first = {
        let mut failed = failed.lock();
        let first = failed.is_none();
        if first {
            *failed = Some(error.clone());
        }
        first
    };
    if first {
        tracing::error!(
            "{error}; the host takes no more work, and its durable workflows stop where their \
             journals end (a host started on a working store resumes them)"
        );
    }
    if let Some(hook) = on_failure.get() {
        hook(error, lost);
    }
}
