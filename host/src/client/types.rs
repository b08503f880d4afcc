//! What a [`Client`](super::Client) answers with: typed views of the store's rows.

use wfcontract::{Event, Payload, Status, Yield};
use wfhost_scheduler::FailureKind;

use crate::durable::record::StepRecord;
use crate::durable::store::{Ending, State, Workflow};
use crate::error::{Error, ErrorKind, Result};
use crate::wasm::reads::Read as WasiRead;
use crate::wasm::ModuleInfo;

/// Where a workflow stands, in a word: the one vocabulary of the library, the CLI, the HTTP API
/// and the web UI (`running`, `paused`, `damaged`, `completed`, `failed`, `cancelled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WorkflowState {
    /// Not finished: it runs, or waits for a host to run it.
    Running,
    /// Not finished, and paused by an operator: it takes no step until unpaused.
    Paused,
    /// Not finished, and damaged: its journal (or its tree's) cannot be read back, and it is
    /// left as it was until the store is repaired or the build fixed.
    Damaged,
    /// Finished with a result.
    Completed,
    /// Finished with a failure.
    Failed,
    /// Cancelled, and stopped as asked.
    Cancelled,
}

impl WorkflowState {
    /// Every state, in the order the CLI and the web UI show them.
    pub const ALL: [WorkflowState; 6] = [
        WorkflowState::Running,
        WorkflowState::Paused,
        WorkflowState::Damaged,
        WorkflowState::Completed,
        WorkflowState::Failed,
        WorkflowState::Cancelled,
    ];

    /// `running`, `paused`, `damaged`, `completed`, `failed` or `cancelled`.
    pub fn name(self) -> &'static str {
        match self {
            WorkflowState::Running => "running",
            WorkflowState::Paused => "paused",
            WorkflowState::Damaged => "damaged",
            WorkflowState::Completed => "completed",
            WorkflowState::Failed => "failed",
            WorkflowState::Cancelled => "cancelled",
        }
    }

    /// The state named `name` (one of [`name`](Self::name)'s, or `done` for `completed`).
    pub fn parse(name: &str) -> Option<WorkflowState> {
        Some(match name {
            "running" => WorkflowState::Running,
            "paused" => WorkflowState::Paused,
            "damaged" => WorkflowState::Damaged,
            "completed" | "done" => WorkflowState::Completed,
            "failed" => WorkflowState::Failed,
            "cancelled" => WorkflowState::Cancelled,
            _ => return None,
        })
    }

    /// Whether a workflow that stands so has finished (it never changes again).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            WorkflowState::Completed | WorkflowState::Failed | WorkflowState::Cancelled
        )
    }
}

/// How a workflow failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// The kind, as the engine names it: `failed`, `trap`, `limit`, `cancelled`,
    /// `nondeterminism`, ...
    pub kind: String,
    /// What happened.
    pub message: String,
}

/// A workflow as the store has it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkflowStatus {
    /// Its id.
    pub id: String,
    /// Its number in the store (its pid while it runs).
    pub number: u64,
    /// The workflow that spawned it, by number, if any.
    pub parent: Option<u64>,
    /// Where it stands.
    pub state: WorkflowState,
    /// Its entry point.
    pub entry: String,
    /// The SHA-256 of its module, in hex.
    pub module: String,
    /// The name its module was loaded under.
    pub module_name: String,
    /// Its input (`None` if it does not decode).
    pub input: Option<Payload>,
    /// When it started, in milliseconds since the Unix epoch.
    pub started: u64,
    /// When it finished, once it has.
    pub finished: Option<u64>,
    /// Steps journaled.
    pub steps: u64,
    /// Its result, once it completed.
    pub result: Option<Payload>,
    /// Its failure, once it failed or was cancelled.
    pub error: Option<Failure>,
    /// Why its journal (or its tree's) cannot be read back, if a host found it so: it is left
    /// as it was, to be resumed once the store is repaired or the build fixed.
    pub damaged: Option<String>,
    /// Messages the store holds for it, not refused: waiting to be taken while it runs, never
    /// read once it has ended.
    pub unread: u64,
    /// Unfinished: the host that runs it, in words (on a SQLite file, the one holding the file;
    /// on a shared store, its number and name), if one is known.
    pub host: Option<String>,
    /// Unfinished and no live host runs it: it waits for one (`wfhost serve`, `wfhost resume`).
    pub waiting_for_host: bool,
    /// A cancel was asked for it.
    pub cancel_asked: bool,
    /// Paused by an operator: it takes no step until unpaused
    /// ([`Client::pause`](super::Client::pause)).
    pub paused: bool,
    /// Its number among the runs of its id: 1, and one more at each reset
    /// ([`Client::reset`](super::Client::reset)); the runs before are kept as `<id>/run-1`, ...
    pub run: u64,
}

impl WorkflowStatus {
    /// The status of `workflow`, with its result decoded.
    pub(crate) fn of(workflow: Workflow) -> WorkflowStatus {
        let state = match (&workflow.state, &workflow.ending) {
            (State::Running, _) | (_, None) if workflow.damaged.is_some() => WorkflowState::Damaged,
            (State::Running, _) | (_, None) if workflow.paused => WorkflowState::Paused,
            (State::Running, _) | (_, None) => WorkflowState::Running,
            (State::Done, _) => WorkflowState::Completed,
            (_, Some(Ending::Failed { kind, .. })) if kind == FailureKind::Cancelled.name() => {
                WorkflowState::Cancelled
            }
            _ => WorkflowState::Failed,
        };
        let (result, error) = match workflow.ending {
            Some(Ending::Done(bytes)) => (postcard::from_bytes(&bytes).ok(), None),
            Some(Ending::Failed { kind, message }) => (None, Some(Failure { kind, message })),
            None => (None, None),
        };
        let start = workflow.start;
        WorkflowStatus {
            id: start.id,
            number: start.num,
            parent: start.parent,
            state,
            entry: start.entry,
            module: start.module,
            module_name: start.module_name,
            input: postcard::from_bytes(&start.input).ok(),
            started: start.started,
            finished: workflow.finished,
            steps: workflow.steps,
            result,
            error,
            damaged: workflow.damaged,
            unread: workflow.unread,
            host: None,
            waiting_for_host: false,
            cancel_asked: workflow.cancel != crate::durable::store::Cancel::No,
            paused: workflow.paused && workflow.state == crate::durable::store::State::Running,
            run: workflow.run,
        }
    }

    /// Whether it has finished.
    pub fn is_finished(&self) -> bool {
        self.state.is_finished()
    }

    /// An [`ErrorKind::Damaged`] error for a workflow that goes no further until its store is
    /// repaired.
    pub(crate) fn refuse_damaged(&self) -> Result<()> {
        match (&self.damaged, self.state) {
            (Some(why), WorkflowState::Damaged) => Err(Error::new(
                ErrorKind::Damaged,
                format!(
                    "workflow '{}' is damaged and goes no further until the store is repaired \
                     (or the build fixed) and a host resumes it: {why}",
                    self.id
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// One page of a listing, and where the next begins.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Page<T> {
    /// What this page holds, in order.
    pub items: Vec<T>,
    /// The cursor to ask for the next page with; `None` at the end.
    pub next: Option<String>,
}

/// Which workflows [`Client::list`](super::Client::list) shows, and how many at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListQuery {
    pub(crate) state: Option<WorkflowState>,
    pub(crate) entry: Option<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) started_before: Option<u64>,
    pub(crate) started_after: Option<u64>,
    pub(crate) top_level: bool,
    pub(crate) parent: Option<u64>,
    pub(crate) limit: usize,
    pub(crate) after: Option<String>,
}

/// How many workflows stand each way ([`Client::counts`](super::Client::counts)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkflowCounts {
    /// Not finished, and neither paused nor damaged.
    pub running: u64,
    /// Not finished, and paused.
    pub paused: u64,
    /// Not finished, and damaged.
    pub damaged: u64,
    /// Finished with a result.
    pub completed: u64,
    /// Finished with a failure other than a cancel.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
}

impl WorkflowCounts {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.running + self.paused + self.damaged + self.completed + self.failed + self.cancelled
    }

    /// The counts a store read: its unfinished split into those that run and those held.
    pub(crate) fn of_store(counts: &crate::durable::store::StateCounts) -> WorkflowCounts {
        let held = counts.paused + counts.damaged;
        WorkflowCounts {
            running: counts.running.saturating_sub(held),
            paused: counts.paused,
            damaged: counts.damaged,
            completed: counts.completed,
            failed: counts.failed,
            cancelled: counts.cancelled,
        }
    }

    /// How many stand so.
    pub fn of(&self, state: WorkflowState) -> u64 {
        match state {
            WorkflowState::Running => self.running,
            WorkflowState::Paused => self.paused,
            WorkflowState::Damaged => self.damaged,
            WorkflowState::Completed => self.completed,
            WorkflowState::Failed => self.failed,
            WorkflowState::Cancelled => self.cancelled,
        }
    }
}

/// The page size of a [`ListQuery`] unless it says otherwise.
pub const DEFAULT_PAGE: usize = 100;

/// The largest page a [`ListQuery`] may ask for.
pub const MAX_PAGE: usize = 10_000;

impl Default for ListQuery {
    fn default() -> ListQuery {
        ListQuery {
            state: None,
            entry: None,
            prefix: None,
            started_before: None,
            started_after: None,
            top_level: false,
            parent: None,
            limit: DEFAULT_PAGE,
            after: None,
        }
    }
}

impl ListQuery {
    /// An [`ErrorKind::InvalidInput`] error for a page size out of bounds.
    pub(crate) fn check(&self) -> Result<()> {
        if self.limit == 0 || self.limit > MAX_PAGE {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("a page holds 1 to {MAX_PAGE} workflows, not {}", self.limit),
            ));
        }
        Ok(())
    }

    /// Every workflow, [`DEFAULT_PAGE`] at a time, oldest first.
    pub fn new() -> ListQuery {
        ListQuery::default()
    }

    /// Only workflows that stand so.
    pub fn state(mut self, state: WorkflowState) -> ListQuery {
        self.state = Some(state);
        self
    }

    /// Only workflows of this entry point.
    pub fn entry(mut self, entry: impl Into<String>) -> ListQuery {
        self.entry = Some(entry.into());
        self
    }

    /// Only workflows whose id starts with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> ListQuery {
        self.prefix = Some(prefix.into());
        self
    }

    /// Only workflows started before `millis` (milliseconds since the Unix epoch).
    pub fn started_before(mut self, millis: u64) -> ListQuery {
        self.started_before = Some(millis);
        self
    }

    /// Only workflows started at or after `millis`.
    pub fn started_after(mut self, millis: u64) -> ListQuery {
        self.started_after = Some(millis);
        self
    }

    /// Only the children of the workflow numbered `number` (its [`WorkflowStatus::number`]).
    ///
    /// [`WorkflowStatus::number`]: super::WorkflowStatus
    pub fn parent(mut self, number: u64) -> ListQuery {
        self.parent = Some(number);
        self
    }

    /// Only top-level workflows (not the children they spawned).
    pub fn top_level(mut self) -> ListQuery {
        self.top_level = true;
        self
    }

    /// At most `limit` a page (1 to [`MAX_PAGE`]).
    pub fn limit(mut self, limit: usize) -> ListQuery {
        self.limit = limit;
        self
    }

    /// The page after the one whose [`Page::next`] was `cursor`.
    pub fn after(mut self, cursor: impl Into<String>) -> ListQuery {
        self.after = Some(cursor.into());
        self
    }
}

/// One journaled step of a workflow: what entered it and what it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryStep {
    /// Its position, from 1.
    pub seq: u64,
    /// When it ran, in milliseconds since the Unix epoch.
    pub at: u64,
    /// The events it took, in delivery order (a message's tag is its number in the store).
    pub events: Vec<Event>,
    /// What it read from WASI (clocks, randomness).
    pub reads: Vec<WasiRead>,
    /// What it yielded.
    pub yields: Vec<Yield>,
    /// Its status after the step.
    pub status: Status,
    /// The most messages it asked to take with its next step (0: none; a message then does
    /// not wake it).
    pub receive: u32,
    /// The record as the journal keeps it (postcard).
    pub(crate) record: Vec<u8>,
}

impl HistoryStep {
    /// Step `seq`, its record read back from `bytes`.
    pub(crate) fn of(seq: u64, at: u64, record: StepRecord, bytes: Vec<u8>) -> HistoryStep {
        HistoryStep {
            seq,
            at,
            events: record.events,
            reads: record.reads,
            yields: record.output.yields,
            status: record.output.status,
            receive: record.output.receive,
            record: bytes,
        }
    }

    /// The step's record exactly as the journal keeps it (postcard-encoded).
    pub fn record(&self) -> &[u8] {
        &self.record
    }
}

/// What a [`Client::start`](super::Client::start) did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Started {
    /// The workflow's id (the one given, or one made).
    pub id: String,
    /// Whether this start wrote it: `false` when a workflow of that id existed with the same
    /// module, entry point and input (the start is idempotent).
    pub new: bool,
    /// Where it stands right after the start.
    pub workflow: WorkflowStatus,
}

/// A module a store keeps, by hash.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredModule {
    /// Its SHA-256, in hex.
    pub hash: String,
    /// The workflows it can start.
    pub entry_points: Vec<String>,
    /// Its size in bytes.
    pub size: u64,
    /// [`Client::put_module`](super::Client::put_module): whether this call stored it
    /// (`false`: the store had it).
    pub new: bool,
    /// The names it was uploaded under, with its version of each, by name
    /// ([`Client::put_module_named`](super::Client::put_module_named): the one it was given).
    pub names: Vec<ModuleVersion>,
}

/// A version of a module name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleVersion {
    /// The name.
    pub name: String,
    /// Its version: 1, and one more at each upload of other bytes under the name.
    pub version: u64,
}

impl std::fmt::Display for ModuleVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

impl StoredModule {
    pub(crate) fn of(info: &ModuleInfo, new: bool) -> StoredModule {
        StoredModule {
            hash: info.sha256.clone(),
            entry_points: info.entries.clone(),
            size: info.size as u64,
            new,
            names: Vec::new(),
        }
    }

    /// The module stored under `hash`, read from its bytes (none listed if they do not inspect).
    pub(crate) fn inspected(hash: &str, bytes: &[u8]) -> StoredModule {
        StoredModule {
            hash: hash.to_string(),
            entry_points: ModuleInfo::inspect(bytes)
                .map(|info| info.entries)
                .unwrap_or_default(),
            size: bytes.len() as u64,
            new: false,
            names: Vec::new(),
        }
    }
}

/// A host of a store (a SQLite file's one host, or one of those that share a PostgreSQL store).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStatus {
    /// Its number in the store (0 for a SQLite file's host).
    pub id: u64,
    /// Who it is: its machine's name and its process id.
    pub name: String,
    /// Whether its lease holds (a SQLite file's host: whether it holds the file).
    pub alive: bool,
    /// When its lease runs out, in milliseconds since the Unix epoch (none on a SQLite file).
    pub lease_until: Option<u64>,
    /// The unfinished workflows it owns.
    pub workflows: u64,
    /// Whether it is the host the client runs beside (a client of a serving host, or the
    /// server that answered over HTTP).
    pub this: bool,
}

/// A message a durable workflow sent the host.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxMessage {
    /// Its place among the workflow's messages to the host (the tag of the `send`).
    pub tag: u64,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub at: u64,
    /// What it holds.
    pub data: Payload,
}

/// The messages a workflow sent the host after a cursor
/// ([`Client::outbox`](super::Client::outbox)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxPage {
    /// The workflow's number in the store.
    pub number: u64,
    /// The messages, in the order they were sent.
    pub messages: Vec<OutboxMessage>,
    /// The cursor to ask for what follows: always given, as more may come while it runs.
    pub next: String,
    /// Whether the workflow had finished when this was read: nothing follows.
    pub finished: bool,
}

/// What a [`Client::pause`](super::Client::pause) or [`Client::unpause`](super::Client::unpause)
/// did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PauseChange {
    /// Written: its host holds it from its next turn, or wakes it (on a store hosts share, a
    /// workflow another host runs once that host has looked: at once when the store notifies
    /// it, within its poll otherwise).
    Done,
    /// It was so already.
    Already,
    /// The workflow had ended: nothing to pause.
    Ended(WorkflowState),
}

impl PauseChange {
    /// Its name, as the HTTP API says it: `done`, `already` or `ended`.
    pub fn name(self) -> &'static str {
        match self {
            PauseChange::Done => "done",
            PauseChange::Already => "already",
            PauseChange::Ended(_) => "ended",
        }
    }
}

/// What a [`Client::cancel`](super::Client::cancel) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The cancel was written for the workflow's host to deliver.
    Asked,
    /// A cancel had been asked already.
    AskedBefore,
    /// The workflow had ended: nothing to cancel.
    Ended(WorkflowState),
}

impl Cancelled {
    /// Its name, as the HTTP API says it: `asked`, `asked_before` or `ended`.
    pub fn name(self) -> &'static str {
        match self {
            Cancelled::Asked => "asked",
            Cancelled::AskedBefore => "asked_before",
            Cancelled::Ended(_) => "ended",
        }
    }
}

/// Which finished workflows [`Client::prune`](super::Client::prune) removes: top-level ones (each
/// with its whole tree) that finished before a time, of one status or any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneQuery {
    /// Finished before this, in milliseconds since the Unix epoch.
    pub finished_before: u64,
    /// Only those that ended so (`Completed`, `Failed` or `Cancelled`); `Running` matches none.
    pub status: Option<WorkflowState>,
}

impl PruneQuery {
    /// The workflows that finished before `millis` (since the Unix epoch), whatever their end.
    pub fn finished_before(millis: u64) -> PruneQuery {
        PruneQuery {
            finished_before: millis,
            status: None,
        }
    }

    /// The workflows that finished more than `age` ago, whatever their end.
    pub fn finished_more_than(age: std::time::Duration) -> PruneQuery {
        let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        PruneQuery::finished_before(wfhost_store::time::now_millis().saturating_sub(age))
    }

    /// Only those that ended as `status` says.
    pub fn status(mut self, status: WorkflowState) -> PruneQuery {
        self.status = Some(status);
        self
    }
}

/// What a prune removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pruned {
    /// Top-level workflows removed, each with its tree.
    pub trees: u64,
    /// Workflows removed, children included.
    pub workflows: u64,
    /// Top-level workflows the query matched that were left: part of their tree still runs.
    pub left: u64,
    /// It stopped at its deadline with more to remove
    /// ([`Client::prune_until`](super::Client::prune_until)).
    pub more: bool,
}

/// A command a workflow yielded that nothing has answered yet.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OpenYield {
    /// The command, with its tag.
    pub yielded: Yield,
    /// For a timer: when it fires, in milliseconds since the Unix epoch (as its host decided
    /// when the step that asked for it was journaled).
    pub fires_at: Option<u64>,
    /// For a host function's call that the host running the workflow does not serve: why it is
    /// not answered, and what would serve it. It waits for a host that does.
    pub unserved: Option<String>,
}

/// What a workflow waits for ([`Client::waits`](super::Client::waits)), as of the last step its
/// journal holds.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Waits {
    /// The steps its journal holds.
    pub steps: u64,
    /// The commands it yielded that no event has answered (nor it forgot), in the order of
    /// their tags: timers, children it joins, host functions it called, sends not yet
    /// delivered. None once it has ended.
    pub open: Vec<OpenYield>,
    /// Whether it waits for a message: it runs, and its last step asked for messages.
    pub message: bool,
}

/// What a look at the schedules did ([`Client::fire_schedules`](super::Client::fire_schedules)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fired {
    /// Workflows started (or found started by another host: a firing starts once).
    pub started: u64,
    /// Firings skipped (missed and not caught up, or overlapping).
    pub skipped: u64,
    /// When the look began, in milliseconds since the Unix epoch: the `since` of the next.
    pub at: u64,
}
