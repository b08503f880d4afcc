//! Where a durable host keeps its workflows: the [`Store`] trait, what it is given to write, and
//! what it reads back. SQLite (`sqlite.rs`) is the embedded default; PostgreSQL (`postgres/`) is
//! the store many hosts share. The engine sees only the trait.

mod location;
mod postgres;
mod sqlite;

pub use location::Location;
pub use postgres::PgStore;
pub use sqlite::{Holder, SqliteStore, SyncMode};

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What a store calls when there is work for hosts ([`Store::listen`]).
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// A store that could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

impl StoreError {
    pub(crate) fn new(what: impl std::fmt::Display) -> StoreError {
        StoreError(what.to_string())
    }
}

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// A workflow as it starts: everything needed to start it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewWorkflow {
    /// Its pid, stable across restarts.
    pub num: u64,
    /// The id it was started under.
    pub id: String,
    /// The workflow that spawned it, if any.
    pub parent: Option<u64>,
    /// SHA-256 of its module, in hex: the store keeps the bytes.
    pub module: String,
    /// The name its module was loaded under.
    pub module_name: String,
    /// Its entry point.
    pub entry: String,
    /// Its input, postcard-encoded as a `Payload`.
    pub input: Vec<u8>,
    /// When it started, in milliseconds since the Unix epoch.
    pub started: u64,
}

impl NewWorkflow {
    /// Whether a start of module `module` (its hash), entry point `entry` and `input` (a
    /// postcard-encoded `Payload`) under this workflow's id may follow it (an idempotent start):
    /// an [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) error naming what differs if not.
    pub fn may_follow(&self, module: &str, entry: &str, input: &[u8]) -> crate::Result<()> {
        let differs = self.differences(module, entry, input);
        if differs.is_empty() {
            return Ok(());
        }
        Err(crate::Error::new(
            crate::ErrorKind::Conflict,
            format!(
                "workflow '{}' exists with another {}: a start of an id that exists follows \
                 that workflow only with the same module, entry point and input; give a new id \
                 to start another",
                self.id,
                differs.join(" and another ")
            ),
        ))
    }

    /// What differs between this start and one of module `module` (its hash), entry point
    /// `entry` and `input` (a postcard-encoded `Payload`), in words: nothing for a start that
    /// may follow this workflow (an idempotent start). JSON inputs are compared as values
    /// (`{"a": 1}` is `{"a":1}`); others byte for byte.
    pub fn differences(&self, module: &str, entry: &str, input: &[u8]) -> Vec<String> {
        let mut differs = Vec::new();
        if self.module != module {
            differs.push(format!(
                "module (it runs {}, this start names {})",
                short(&self.module),
                short(module)
            ));
        }
        if self.entry != entry {
            differs.push(format!(
                "entry point (it runs '{}', this start names '{entry}')",
                self.entry
            ));
        }
        if !same_payload(&self.input, input) {
            differs.push("input".to_string());
        }
        differs
    }
}

/// The first 12 digits of a hash.
fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Whether two postcard-encoded payloads hold the same value: JSON compared as values.
fn same_payload(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    let (Ok(a), Ok(b)) = (
        postcard::from_bytes::<wfcontract::Payload>(a),
        postcard::from_bytes::<wfcontract::Payload>(b),
    ) else {
        return false;
    };
    if a.encoding != b.encoding {
        return false;
    }
    if a.encoding == wfcontract::Encoding::Json {
        if let (Ok(a), Ok(b)) = (
            serde_json::from_slice::<serde_json::Value>(&a.bytes),
            serde_json::from_slice::<serde_json::Value>(&b.bytes),
        ) {
            return a == b;
        }
    }
    a.bytes == b.bytes
}

/// How a workflow ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// With this result (a postcard-encoded `Payload`).
    Done(Vec<u8>),
    /// Failed: the failure's kind (as `FailureKind::name`) and message.
    Failed {
        /// `FailureKind::name()`.
        kind: String,
        /// What happened.
        message: String,
    },
}

/// A message waiting at its durable receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMessage {
    /// Its number: the tag its event carries, unique in the store.
    pub id: u64,
    /// Who gets it.
    pub receiver: u64,
    /// Who sent it (0: the host).
    pub sender: u64,
    /// The payload, postcard-encoded.
    pub payload: Vec<u8>,
    /// The host that writes it delivers it itself (it runs the receiver). On a store hosts
    /// share, a message that is not is taken from the store by the receiver's owner. Read back:
    /// false.
    pub local: bool,
}

/// One step of one workflow, as the engine journals it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewStep {
    /// The workflow.
    pub num: u64,
    /// Its position, from 1.
    pub seq: u64,
    /// When it ran, in milliseconds since the Unix epoch.
    pub at: u64,
    /// The step record (events, reads, output), postcard-encoded.
    pub record: Vec<u8>,
    /// The messages it took (their rows go).
    pub consumed: Vec<u64>,
    /// It took a cancel.
    pub took_cancel: bool,
}

/// A workflow's state after one of its steps: with it, recovery need not replay the steps up to
/// that one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSnapshot {
    /// The workflow.
    pub num: u64,
    /// The step it follows.
    pub seq: u64,
    /// SHA-256 of the module it came from, in hex: it applies to those bytes only.
    pub module: String,
    /// The state, encoded by the engine.
    pub state: Vec<u8>,
}

/// One thing to write. A batch of them is written in one transaction, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Keep a module's bytes (once per hash).
    Module {
        /// SHA-256, hex.
        hash: String,
        /// The bytes.
        bytes: std::sync::Arc<[u8]>,
    },
    /// A workflow starts.
    Start(NewWorkflow),
    /// A workflow stepped.
    Step(NewStep),
    /// A message is sent to a durable workflow.
    Message(NewMessage),
    /// A message could not be delivered (the receiver's mailbox was full, or it ended): the
    /// sender is told so, and so is a replay of the sender.
    Refused {
        /// The message.
        id: u64,
        /// Why.
        error: String,
    },
    /// A workflow ended.
    End {
        /// The workflow.
        num: u64,
        /// How.
        ending: Ending,
        /// When, in milliseconds since the Unix epoch.
        at: u64,
    },
    /// A cancel was asked for (from outside, or by its parent).
    Cancel {
        /// The workflow.
        num: u64,
    },
    /// A workflow's snapshot, in place of the one it had.
    Snapshot(NewSnapshot),
    /// A durable workflow's message to the host, kept for whoever asks (once per sender and
    /// yield).
    HostMessage(HostMessage),
    /// A workflow's journal could not be read back (`Some(why)`), or can again (`None`).
    Damaged {
        /// The workflow.
        num: u64,
        /// Why, or `None` once it recovered.
        why: Option<String>,
    },
}

/// A message a durable workflow sent the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMessage {
    /// The sender.
    pub num: u64,
    /// The tag of the `send` that sent it: the sender's messages are in tag order.
    pub tag: u64,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub at: u64,
    /// The payload, postcard-encoded.
    pub payload: Vec<u8>,
}

/// A host that joined a store hosts share, as the store knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// Its number.
    pub id: u64,
    /// Who it is: its machine's name and its pid.
    pub name: String,
    /// Whether its lease holds.
    pub alive: bool,
}

/// Where a workflow stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not finished.
    Running,
    /// Finished with a result.
    Done,
    /// Finished with a failure.
    Failed,
}

impl State {
    /// From the code both stores keep it as: 0 running, 1 done, anything else failed.
    pub(crate) fn from_code(code: i64) -> State {
        match code {
            0 => State::Running,
            1 => State::Done,
            _ => State::Failed,
        }
    }

    /// "running", "done", "failed".
    pub fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Done => "done",
            State::Failed => "failed",
        }
    }
}

/// A workflow as the store has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workflow {
    /// How it started.
    pub start: NewWorkflow,
    /// Where it stands.
    pub state: State,
    /// How it ended, once it has.
    pub ending: Option<Ending>,
    /// When it ended, in milliseconds since the Unix epoch.
    pub finished: Option<u64>,
    /// Steps journaled.
    pub steps: u64,
    /// A cancel was asked for; and whether a step took it.
    pub cancel: Cancel,
    /// Why its journal (or its tree's) cannot be read back, if a host found it so: it is left
    /// as it was, to be resumed once the store is repaired or the build fixed.
    pub damaged: Option<String>,
    /// Messages the store holds for it, not refused: waiting to be taken while it runs, never
    /// read once it has ended.
    pub unread: u64,
    /// On a store hosts share, the host that owns it (runs it, or ran it last).
    pub owner: Option<u64>,
}

/// Whether a workflow was asked to cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// Never.
    No,
    /// Asked, not yet taken by a step.
    Asked,
    /// Taken by a step.
    Taken,
}

impl Cancel {
    /// From the code both stores keep it as: 0 never asked, 1 asked, anything else taken.
    pub(crate) fn from_code(code: i64) -> Cancel {
        match code {
            0 => Cancel::No,
            1 => Cancel::Asked,
            _ => Cancel::Taken,
        }
    }
}

impl Ending {
    /// How a workflow in `state` ended, from its `result`, `error_kind` and `error` columns.
    pub(crate) fn from_columns(
        state: State,
        result: Option<Vec<u8>>,
        kind: Option<String>,
        message: Option<String>,
    ) -> Option<Ending> {
        match state {
            State::Running => None,
            State::Done => Some(Ending::Done(result.unwrap_or_default())),
            State::Failed => Some(Ending::Failed {
                kind: kind.unwrap_or_default(),
                message: message.unwrap_or_default(),
            }),
        }
    }
}

/// One journaled step, read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Its position, from 1.
    pub seq: u64,
    /// When it ran, in milliseconds since the Unix epoch.
    pub at: u64,
    /// The record, postcard-encoded.
    pub record: Vec<u8>,
}

/// A message the store holds: waiting for its receiver, or refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// As sent.
    pub message: NewMessage,
    /// Why it was refused, if it was.
    pub refused: Option<String>,
}

/// A durable store. Writes come in batches from one writer; reads may come from another
/// connection at the same time ([`Store::reader`]).
pub trait Store: Send {
    /// Another connection to the same store, for reading while this one writes.
    fn reader(&self) -> StoreResult<Box<dyn Store>>;

    /// Writes `ops` in one transaction, durably (as the store's sync setting says) before it
    /// returns.
    fn commit(&mut self, ops: &[Op]) -> StoreResult<()>;

    /// Work the store does between commits, after the steps of the last one were let go (the
    /// SQLite store moves its log of steps into the table ordered by workflow once the log is
    /// long, or whenever `all`). Default: none.
    fn tidy(&mut self, all: bool) -> StoreResult<()> {
        let _ = all;
        Ok(())
    }

    /// The highest workflow number and message number in the store (0 when none). For a host
    /// that joined a shared store, the start of the range of numbers it gives.
    fn high_water(&mut self) -> StoreResult<(u64, u64)>;

    /// Joins the hosts that share this store, with a lease of `lease` (renewed with
    /// [`renew`](Self::renew)); `name` says who it is. `None` for a store one host has to itself
    /// (SQLite): it owns every workflow, and needs no lease.
    fn join(&mut self, lease: std::time::Duration, name: &str) -> StoreResult<Option<u64>> {
        let _ = (lease, name);
        Ok(None)
    }

    /// Renews the lease of a host that joined (from another connection made with
    /// [`reader`](Self::reader)): `false` if it is lost; an error if the store could not be
    /// reached in time (try again).
    fn renew(&mut self) -> StoreResult<bool> {
        Ok(true)
    }

    /// Gives back workflows this host claimed and could not start, for another to claim.
    fn unclaim(&mut self, nums: &[u64]) -> StoreResult<()> {
        let _ = nums;
        Ok(())
    }

    /// The refused messages sent by `senders`: why, for those that had not heard before a
    /// restart.
    fn refused_from(&mut self, senders: &[u64]) -> StoreResult<Vec<Message>> {
        Ok(self
            .messages()?
            .into_iter()
            .filter(|m| m.refused.is_some() && senders.contains(&m.message.sender))
            .collect())
    }

    /// Takes up to `limit` trees of unfinished workflows (a top-level workflow and everything
    /// it spawned) that no live host owns, or only the tree of workflow `id`: the numbers of
    /// the workflows this host now owns. A store one host has to itself gives every unfinished
    /// workflow.
    fn claim(&mut self, limit: usize, id: Option<&str>) -> StoreResult<Vec<u64>> {
        let _ = limit;
        Ok(self
            .workflows(true)?
            .into_iter()
            .filter(|w| id.is_none_or(|id| w.start.id == id))
            .map(|w| w.start.num)
            .collect())
    }

    /// For a host that joined: how many unfinished workflows no other host is known to run:
    /// none owns them, or the host that does is dead, let its lease run out, or has not renewed
    /// it since this host joined (it may have died). They are claimable now or once that lease
    /// runs out. 0 for a store one host has to itself.
    fn claimable(&mut self) -> StoreResult<u64> {
        Ok(0)
    }

    /// Gives back every unfinished workflow this host owns and ends its lease.
    fn release(&mut self) -> StoreResult<()> {
        Ok(())
    }

    /// Calls `wake` whenever a client or a host writes work for hosts to take (a start, a
    /// message, a cancel, workflows given back), from a thread of the store's own, until `stop`
    /// is set. Default: never (hosts poll).
    fn listen(&self, wake: Wake, stop: Arc<AtomicBool>) -> StoreResult<()> {
        let _ = (wake, stop);
        Ok(())
    }

    /// For a host that joined: takes the messages waiting for workflows it owns that it does not
    /// have yet (from clients, or workflows on other hosts), or, given `receivers`, every
    /// message waiting for them (recovery delivers them all). Each message is taken once.
    fn take_messages(&mut self, receivers: Option<&[u64]>) -> StoreResult<Vec<NewMessage>> {
        let _ = receivers;
        Ok(Vec::new())
    }

    /// For a host that joined: gives back messages it took and could not deliver (their
    /// receiver does not run here), for whoever runs it to take.
    fn untake_messages(&mut self, ids: &[u64]) -> StoreResult<()> {
        let _ = ids;
        Ok(())
    }

    /// For a host that joined: takes the cancels asked of workflows it owns that it has not
    /// delivered: their numbers. Each is taken once.
    fn take_cancels(&mut self) -> StoreResult<Vec<u64>> {
        Ok(Vec::new())
    }

    /// From a client: sends `payload` (a postcard-encoded `Payload`) to the unfinished workflow
    /// `id`, for its host to deliver: the message's number, or `None` if no such workflow runs.
    fn send_to(&mut self, id: &str, payload: &[u8]) -> StoreResult<Option<u64>> {
        let _ = (id, payload);
        Err(client_only())
    }

    /// From a client: asks the unfinished workflow `id` to cancel: whether it was running and
    /// not yet asked.
    fn cancel_by_id(&mut self, id: &str) -> StoreResult<bool> {
        let _ = id;
        Err(client_only())
    }

    /// Starts `workflow` (keeping `module`'s bytes first) unless one with its id exists: its
    /// number if this started it. From a host that joined, the workflow is the host's; from a
    /// client (a store that did not join), it waits for a host to claim it, and is numbered by
    /// the store.
    fn start_once(
        &mut self,
        module: Option<(&str, &[u8])>,
        workflow: &NewWorkflow,
    ) -> StoreResult<Option<u64>> {
        let _ = (module, workflow);
        Err(client_only())
    }

    /// The workflow started under `id`.
    fn workflow(&mut self, id: &str) -> StoreResult<Option<Workflow>>;

    /// The workflow numbered `num`.
    fn workflow_by_num(&mut self, num: u64) -> StoreResult<Option<Workflow>>;

    /// Every workflow (or every unfinished one), by number.
    fn workflows(&mut self, unfinished_only: bool) -> StoreResult<Vec<Workflow>>;

    /// The steps of workflow `num` after `after`, in order.
    fn steps(&mut self, num: u64, after: u64) -> StoreResult<Vec<Step>>;

    /// The latest snapshot of workflow `num`, if it has one.
    fn snapshot(&mut self, num: u64) -> StoreResult<Option<NewSnapshot>>;

    /// The bytes of the module with this hash.
    fn module(&mut self, hash: &str) -> StoreResult<Option<Vec<u8>>>;

    /// The messages a recovery delivers or reports, by number: those waiting for unfinished
    /// workflows, and those refused to unfinished senders (who may not have heard why). The
    /// messages a workflow never read before it ended stay in the store, counted in
    /// [`Workflow::unread`], but are not among them.
    fn messages(&mut self) -> StoreResult<Vec<Message>>;

    /// The messages workflow `num` sent the host with a tag after `after`, in order.
    fn host_messages(&mut self, num: u64, after: u64) -> StoreResult<Vec<HostMessage>>;

    /// The host numbered `id`, on a store hosts share. `None` for a store one host has to
    /// itself (SQLite: [`Holder`] says who holds it).
    fn host_info(&mut self, id: u64) -> StoreResult<Option<HostInfo>> {
        let _ = id;
        Ok(None)
    }
}

/// The messages of `ops` that are sent and taken within them: a message sent by one step and
/// taken by a later one of the same batch (a workflow delivers to another before its commit) is
/// neither inserted nor deleted. Also the highest message number sent.
pub(crate) fn elided(ops: &[Op]) -> (HashSet<u64>, Option<u64>) {
    let mut sent = HashSet::new();
    let mut elided = HashSet::new();
    let mut last_message = None;
    for op in ops {
        match op {
            Op::Message(message) => {
                sent.insert(message.id);
                last_message = last_message.max(Some(message.id));
            }
            Op::Step(step) => {
                elided.extend(step.consumed.iter().filter(|id| sent.contains(id)));
            }
            _ => {}
        }
    }
    (elided, last_message)
}

/// Client commands on a store one host has to itself.
pub(super) fn client_only() -> StoreError {
    StoreError::new(
        "this store is one host's own (a SQLite file): run workflows with `wfhost run --store` \
         or a host of your own (Host::start, Host::send, Host::cancel); client commands need a \
         store hosts share (PostgreSQL)",
    )
}
