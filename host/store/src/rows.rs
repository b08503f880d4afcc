//! What a store reads back: a workflow, its steps, its messages, the hosts of a store they
//! share.

use crate::ops::{Ending, NewMessage, NewWorkflow};

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
    #[cfg(feature = "testing")]
    pub fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Done => "done",
            State::Failed => "failed",
        }
    }

    /// The code both stores keep it as.
    pub(crate) fn code(self) -> i64 {
        match self {
            State::Running => 0,
            State::Done => 1,
            State::Failed => 2,
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
    /// Paused by an operator: it takes no step until it is unpaused.
    pub paused: bool,
    /// Its number among the runs of its id: 1, and one more at each reset ([`crate::Reset`]).
    /// A child's is 1 (its top-level workflow's says which run it belongs to).
    pub run: u64,
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
pub struct StoredMessage {
    /// As sent.
    pub message: NewMessage,
    /// Why it was refused, if it was.
    pub refused: Option<String>,
}

/// The messages of `ops` that are sent and taken within them: a message sent by one step and
/// taken by a later one of the same batch (a workflow delivers to another before its commit) is
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

/// A host of a store hosts share, with its lease and its work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRow {
    /// As [`Submit::host_info`](crate::Submit::host_info) reads it.
    pub info: HostInfo,
    /// When its lease runs out, in milliseconds since the Unix epoch.
    pub lease_until: Option<u64>,
    /// The unfinished workflows it owns.
    pub workflows: u64,
}

/// A version of a module name: the module stored under it at that upload (`POST
/// /v1/modules?name=orders`, `wfhost deploy --name orders`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleName {
    /// The name.
    pub name: String,
    /// Its version: 1, and one more at each upload of other bytes under the name.
    pub version: u64,
    /// The module's SHA-256, in hex.
    pub hash: String,
    /// When it was named so, in milliseconds since the Unix epoch.
    pub at: u64,
}
