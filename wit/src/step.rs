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
    /// Waiting for completions of yielded commands: a completion, a cancel or (while
    /// [`StepOutput::receive`] asks for any) a message wakes the process.
    Wait,
    /// Waiting only for a message: a message it asked for (see [`StepOutput::receive`]) or a cancel
    /// wakes the process. Completions that arrive meanwhile do not; they are delivered with the
    /// next step. Use it when no outstanding yield is awaited (a sent message's acknowledgement,
    /// say), so the process is not stepped just for that.
    Idle,
    /// Finished with this result.
    Done(Payload),
    /// Finished with this failure.
    Failed(String),
    /// Finished because it was cancelled: it stopped as asked (after any clean-up). The text says
    /// how. A joining parent sees a `child-cancelled` error rather than `child-failed`.
    Cancelled(String),
}

impl Status {
    /// True for `Done`, `Failed` and `Cancelled`.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Status::Done(_) | Status::Failed(_) | Status::Cancelled(_)
        )
    }
}

/// What one step produced: the process's status, the commands it yielded, and how many messages
/// it is ready to take.
///
/// The host reuses one `StepOutput` across steps; [`StepOutput::reset`] restores the default
/// (status [`Status::Wait`], no yields, no messages wanted) without freeing the yield buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepOutput {
    /// Where the process stands.
    pub status: Status,
    /// Commands to dispatch, in order.
    pub yields: Vec<Yield>,
    /// The most messages the process takes with its next step. Messages beyond it stay queued at
    /// the host, in the process's bounded mailbox, until a step asks for them: what a process
    /// holds in its own memory is only what it asked for, so no sender can flood it. Zero (the
    /// default): none; a message then does not wake the process either. `u32::MAX`: every
    /// message, for as long as the steps keep saying so (what a native process that handles each
    /// message as it comes would ask).
    pub receive: u32,
}

impl StepOutput {
    /// Status `Wait`, no yields, no messages wanted.
    pub const fn new() -> StepOutput {
        StepOutput {
            status: Status::Wait,
            yields: Vec::new(),
            receive: 0,
        }
    }

    /// Back to status `Wait` with no yields and no messages wanted, keeping the yield buffer's
    /// capacity.
    pub fn reset(&mut self) {
        self.status = Status::Wait;
        self.yields.clear();
        self.receive = 0;
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
    /// The most yields the host accepts from one step (its `max_yields_per_step` limit); a step
    /// that yields more fails the process. A guest that has more to yield holds the rest back for
    /// the next step (the SDK does).
    pub max_yields: u32,
}
