//! What a host or a client gives a store to write: [`Op`]s, written a batch to a transaction,
//! and the new rows they carry.

use std::collections::HashSet;

use crate::error::{StoreError, StoreErrorKind, StoreResult};

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
    /// The span its runs are children of, as a W3C `traceparent`: the request that started it,
    /// or its parent workflow's run. `None`: started with no trace (each host's run of it is a
    /// trace's root).
    pub trace: Option<String>,
}

impl NewWorkflow {
    /// Whether a start of module `module` (its hash), entry point `entry` and `input` (a
    /// postcard-encoded `Payload`) under this workflow's id may follow it (an idempotent start):
    /// a [`StoreErrorKind::Conflict`] error naming what differs if not.
    pub fn may_follow(&self, module: &str, entry: &str, input: &[u8]) -> StoreResult<()> {
        let differs = self.differences(module, entry, input);
        if differs.is_empty() {
            return Ok(());
        }
        Err(StoreError::new(
            StoreErrorKind::Conflict,
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
    /// The host-function calls whose answers it took, or that it gave up, by tag: a store that
    /// keeps activity tasks (PostgreSQL) removes theirs with the step.
    pub calls_done: Vec<u64>,
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

/// A schedule as the store keeps it (the engine's schedules read it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRow {
    /// Its id.
    pub id: String,
    /// When it fires (`When::encode`).
    pub spec: String,
    /// The module's SHA-256.
    pub module: String,
    /// The module's name, if one was given.
    pub module_name: String,
    /// The entry point.
    pub entry: String,
    /// The input, postcard-encoded.
    pub input: Vec<u8>,
    /// The overlap policy's name.
    pub overlap: String,
    /// The catch-up policy's name.
    pub catch_up: String,
    /// The jitter, in milliseconds.
    pub jitter_ms: u64,
    /// Paused.
    pub paused: bool,
    /// The next nominal firing, in milliseconds since the Unix epoch (`u64::MAX`: none).
    pub next_fire: u64,
    /// The workflow the last firing started.
    pub last_workflow: Option<String>,
    /// A firing waiting for that workflow to end.
    pub buffered: Option<u64>,
    /// Workflows started.
    pub fired: u64,
    /// When it was created.
    pub created: u64,
}

/// A schedule moved on after a look: written only if it is still as the look found it (its next
/// firing `from`, its waiting firing `from_buffered`: another host's look did not move it first)
/// and not paused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleAdvance {
    /// The schedule.
    pub id: String,
    /// Its next firing as the look found it.
    pub from: u64,
    /// The firing left waiting as the look found it.
    pub from_buffered: Option<u64>,
    /// Its next firing now.
    pub next_fire: u64,
    /// The workflow the look started last, if it started any.
    pub last_workflow: Option<String>,
    /// A firing left waiting.
    pub buffered: Option<u64>,
    /// Workflows the look started.
    pub started: u64,
}

/// A reset: a finished top-level workflow's run goes on, under the same id, as a new run that
/// keeps the first steps of its journal. The run before keeps its rows (its journal, its
/// result, its children) under the id of a past run (`order-7/run-1`, its children's ids
/// likewise), so that it can still be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reset {
    /// The workflow's id.
    pub id: String,
    /// The number of the run it resets: written only if the id still names it, finished.
    pub from: u64,
    /// The run before's workflows (it and every one of its tree), each with its id from now on.
    pub renamed: Vec<(u64, String)>,
    /// The new run: a new number under the same id.
    pub workflow: NewWorkflow,
    /// The new run's number among the runs of the id (the first is 1).
    pub run: u64,
    /// The steps it keeps, copied from the run before (under the new number).
    pub steps: Vec<NewStep>,
    /// Messages for the new run, in the order it is to take them: those clients sent the run
    /// before that it took after the steps kept, then those it never read, sent again.
    pub messages: Vec<NewMessage>,
    /// The run before's messages it never read (sent again in `messages`): they go.
    pub dropped: Vec<u64>,
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
    /// Module `hash` (kept by an `Op::Module`) takes the next version of name `name`, unless
    /// that name's latest version is that module already. Only the SQLite store takes this
    /// through its journal (on PostgreSQL, `Submit::submit_module_name` writes it).
    NameModule {
        /// The name.
        name: String,
        /// The module's SHA-256, hex.
        hash: String,
        /// When, in milliseconds since the Unix epoch.
        at: u64,
    },
    /// A workflow starts.
    Start(NewWorkflow),
    /// A top-level workflow starts on a store hosts share, unless one of its id exists (another
    /// host's or a client's start of the same id came first): then nothing is written, and the
    /// caller reads after the commit whose start it was. Starts through the journal's writer
    /// share its commits, where each `Cluster::start_once` is a transaction of its own.
    StartOnce(NewWorkflow),
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
    /// Finished top-level workflows go, each with its whole tree (its children, theirs, ...) and
    /// everything of theirs: steps, snapshots, messages to them, what they sent the host, and
    /// the modules no workflow left uses. A root whose tree holds an unfinished workflow is left.
    Prune {
        /// The top-level workflows.
        roots: Vec<u64>,
        /// Their modules are marked unused once no workflow uses them, unless stored at or
        /// after this (milliseconds since the Unix epoch: the prune's cutoff).
        kept_before: u64,
        /// Modules marked unused before this (milliseconds since the Unix epoch) and unused
        /// still go: a start that found its module there before the mark is journaled by then.
        marked_before: u64,
    },
    /// An activity worker's outcome of durable workflow `num`'s call `tag`, kept until the step
    /// that takes it is journaled (its `calls_done`), so that a completion answered `204`
    /// survives a crash of the host before that step. Only the SQLite store keeps these (on
    /// PostgreSQL the task's own row does).
    TaskOutcome {
        /// The workflow.
        num: u64,
        /// The call's tag.
        tag: u64,
        /// The outcome, postcard-encoded.
        outcome: Vec<u8>,
    },
    /// An unfinished workflow is paused (it takes no step until unpaused), or unpaused.
    Pause {
        /// The workflow.
        num: u64,
        /// Paused, or not.
        paused: bool,
    },
    /// An unfinished workflow runs module `to` from now on, in place of `from`: written only if
    /// it still runs `from` and its journal still ends at step `steps` (the journal the new
    /// module was checked against). Whether it was can be read back.
    Upgrade {
        /// The workflow.
        num: u64,
        /// The module's hash it ran.
        from: String,
        /// The module's hash it runs from now on (kept by an `Op::Module` before it).
        to: String,
        /// Its journal's last step, as checked.
        steps: u64,
        /// Written by a host that does not run it: on a store hosts share, only if no host owns
        /// it.
        unowned: bool,
    },
    /// A schedule is created (refused if one of its id exists: nothing is written).
    PutSchedule(ScheduleRow),
    /// A schedule goes.
    DeleteSchedule {
        /// The schedule.
        id: String,
    },
    /// A schedule is paused, or resumed with its next firing `next_fire`.
    PauseSchedule {
        /// The schedule.
        id: String,
        /// Paused, or not.
        paused: bool,
        /// Its next firing (resumed: the first after now; missed ones are not caught up).
        next_fire: u64,
    },
    /// A schedule moved on after a look.
    AdvanceSchedule(ScheduleAdvance),
    /// A finished top-level workflow runs again from one of its steps (see [`Reset`]): written
    /// whole, or not at all when the run it resets is no longer the one its id names (another
    /// reset came first). Whether it was can be read back: the id then names the new run.
    Reset(Box<Reset>),
    /// A workflow's journal could not be read back (`Some(why)`), or can again (`None`).
    Damaged {
        /// The workflow.
        num: u64,
        /// Why, or `None` once it recovered.
        why: Option<String>,
    },
}

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
            Op::Reset(reset) => {
                last_message = last_message.max(reset.messages.iter().map(|m| m.id).max());
            }
            _ => {}
        }
    }
    (elided, last_message)
}
