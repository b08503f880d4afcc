use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::{Command, Payload, Pid, Tag};

/// A command the process asks its host to carry out, tagged so that its completion can be matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Yield {
    /// Chosen by the process; returned in the `YieldComplete` event.
    pub tag: Tag,
    /// What to do.
    pub command: Command,
}

/// Where a process stands after a step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Step me again soon, even with no new events (a long computation giving others a turn).
    Continue,
    /// Waiting for completions of yielded commands: any event (a completion, a message, a cancel)
    /// wakes the process.
    Wait,
    /// Waiting only for a message: a message or a cancel wakes the process. Completions that arrive
    /// meanwhile do not; they are delivered with the next step. Use it when no outstanding yield is
    /// awaited (a sent message's acknowledgement, say), so the process is not stepped just for that.
    Idle,
    /// Finished with this result.
    Done(Payload),
    /// Finished with this failure.
    Failed(String),
}

impl Status {
    /// True for `Done` and `Failed`.
    pub fn is_final(&self) -> bool {
        matches!(self, Status::Done(_) | Status::Failed(_))
    }
}

/// What one step produced: the process's status and the commands it yielded.
///
/// The host reuses one `StepOutput` across steps; [`StepOutput::reset`] restores the default
/// (status [`Status::Wait`], no yields) without freeing the yield buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepOutput {
    /// Where the process stands.
    pub status: Status,
    /// Commands to dispatch, in order.
    pub yields: Vec<Yield>,
}

impl StepOutput {
    /// Status `Wait`, no yields.
    pub const fn new() -> StepOutput {
        StepOutput {
            status: Status::Wait,
            yields: Vec::new(),
        }
    }

    /// Back to status `Wait` with no yields, keeping the yield buffer's capacity.
    pub fn reset(&mut self) {
        self.status = Status::Wait;
        self.yields.clear();
    }

    /// Appends a yield.
    pub fn push(&mut self, tag: Tag, command: Command) {
        self.yields.push(Yield { tag, command });
    }
}

impl Default for StepOutput {
    fn default() -> Self {
        StepOutput::new()
    }
}

/// What a guest's `init` export receives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitRequest {
    /// The new process's pid.
    pub pid: Pid,
    /// The process that spawned it, if a process did.
    pub parent: Option<Pid>,
    /// The entry point to run.
    pub entry: String,
    /// The entry point's input.
    pub input: Payload,
}
