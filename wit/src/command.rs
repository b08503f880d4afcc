use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;
use serde::{Deserialize, Serialize};

use crate::{Payload, Pid, Tag};

/// A request from a process to its host, carried by a [`Yield`](crate::Yield).
///
/// Every source of nondeterminism a workflow needs (time, randomness, other processes, the outside
/// world) is a command, so that a process's `step` stays a pure function of the events it is given.
/// Each command documents what its completion's `data` holds; errors arrive as a
/// [`CommandError`](crate::CommandError).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Completes, with no data, once the duration has passed.
    Sleep(Duration),
    /// Completes, with no data, once the host's wall clock reaches this time, in nanoseconds since
    /// the Unix epoch (at once if it has passed).
    SleepUntil(u64),
    /// Writes a log record to the host's log. Never completes: it expects no answer.
    Log(LogRecord),
    /// Queues a message for another process. Completes with no data once queued, or with
    /// `no-such-process` when the target is unknown or finished.
    Send(SendRequest),
    /// Starts a child process. Completes with the child's [`Pid`] (postcard).
    Spawn(SpawnRequest),
    /// Completes with the result of the given process once it finishes, or with `child-failed`.
    Join(Pid),
    /// Delivers a cancel to the given process. Completes with no data once delivered.
    Cancel(Pid),
    /// Runs a host function that the embedding application registered. Completes with its result.
    Call(CallRequest),
    /// Completes with the host's wall-clock time as nanoseconds since the Unix epoch (postcard u64).
    Now,
    /// Completes with 64 random bits from the host (postcard u64).
    Random,
    /// The result of the earlier yield with this tag is no longer wanted: the host may stop that
    /// work (a pending `sleep` is dropped) and sends no completion for it. Never completes itself.
    Forget(Tag),
    /// Runs a host function again: attempt `attempt` of the call first made by the yield tagged
    /// `first`, under the caller's retry policy. Completes as [`Command::Call`] does; the host
    /// gives it the first attempt's idempotency key, and its attempt number beside it, so that a
    /// service the call reaches does its effect once however many attempts it takes. (ABI 3.)
    Retry(RetryRequest),
}

/// The argument of [`Command::Retry`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryRequest {
    /// The tag of the call's first attempt.
    pub first: Tag,
    /// This attempt's number: 2 for the first retry.
    pub attempt: u32,
    /// The call, as its first attempt made it.
    pub call: CallRequest,
}

impl Command {
    /// The host function call this command makes, if it makes one (a call, or an attempt at
    /// one again).
    pub fn call(&self) -> Option<&CallRequest> {
        match self {
            Command::Call(call) | Command::Retry(RetryRequest { call, .. }) => Some(call),
            _ => None,
        }
    }
}

/// The argument of [`Command::Send`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendRequest {
    /// The receiver.
    pub to: Pid,
    /// The message.
    pub message: Payload,
}

/// The argument of [`Command::Spawn`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// The module to start, by the name the host loaded it under; `None` for the spawner's own.
    pub module: Option<String>,
    /// The entry point to run.
    pub entry: String,
    /// The entry point's input.
    pub input: Payload,
}

/// The argument of [`Command::Call`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRequest {
    /// The host function's registered name, such as `inventory.reserve`.
    pub name: String,
    /// Its input.
    pub input: Payload,
}

/// A structured log record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    /// Severity.
    pub level: Level,
    /// The message.
    pub message: String,
    /// Structured key/value fields, passed through to the host's log.
    pub fields: Vec<Field>,
}

/// One structured field of a [`LogRecord`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// The field's name.
    pub key: String,
    /// The field's value, already formatted.
    pub value: String,
}

/// Log severity, lowest first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something unexpected that the workflow handled.
    Warn,
    /// Something failed.
    Error,
}

/// The kind of a [`Command`], without its arguments: what handlers are registered for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CommandKind {
    /// [`Command::Sleep`].
    Sleep,
    /// [`Command::SleepUntil`].
    SleepUntil,
    /// [`Command::Log`].
    Log,
    /// [`Command::Send`].
    Send,
    /// [`Command::Spawn`].
    Spawn,
    /// [`Command::Join`].
    Join,
    /// [`Command::Cancel`].
    Cancel,
    /// [`Command::Call`].
    Call,
    /// [`Command::Now`].
    Now,
    /// [`Command::Random`].
    Random,
    /// [`Command::Forget`].
    Forget,
    /// [`Command::Retry`].
    Retry,
}

impl CommandKind {
    /// Every kind, in declaration order (the order of [`CommandKind::index`]).
    pub const ALL: [CommandKind; 12] = [
        CommandKind::Sleep,
        CommandKind::SleepUntil,
        CommandKind::Log,
        CommandKind::Send,
        CommandKind::Spawn,
        CommandKind::Join,
        CommandKind::Cancel,
        CommandKind::Call,
        CommandKind::Now,
        CommandKind::Random,
        CommandKind::Forget,
        CommandKind::Retry,
    ];

    /// A dense index in `0..ALL.len()`, for handler tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The kebab-case name, as in the WIT.
    pub fn name(self) -> &'static str {
        match self {
            CommandKind::Sleep => "sleep",
            CommandKind::SleepUntil => "sleep-until",
            CommandKind::Log => "log",
            CommandKind::Send => "send",
            CommandKind::Spawn => "spawn",
            CommandKind::Join => "join",
            CommandKind::Cancel => "cancel",
            CommandKind::Call => "call",
            CommandKind::Now => "now",
            CommandKind::Random => "random",
            CommandKind::Forget => "forget",
            CommandKind::Retry => "retry",
        }
    }

    /// False for commands that are never completed ([`Command::Log`], [`Command::Forget`]).
    pub fn expects_completion(self) -> bool {
        !matches!(self, CommandKind::Log | CommandKind::Forget)
    }
}

impl Command {
    /// This command's kind.
    pub fn kind(&self) -> CommandKind {
        match self {
            Command::Sleep(_) => CommandKind::Sleep,
            Command::SleepUntil(_) => CommandKind::SleepUntil,
            Command::Log(_) => CommandKind::Log,
            Command::Send(_) => CommandKind::Send,
            Command::Spawn(_) => CommandKind::Spawn,
            Command::Join(_) => CommandKind::Join,
            Command::Cancel(_) => CommandKind::Cancel,
            Command::Call(_) => CommandKind::Call,
            Command::Now => CommandKind::Now,
            Command::Random => CommandKind::Random,
            Command::Forget(_) => CommandKind::Forget,
            Command::Retry(_) => CommandKind::Retry,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_indices_are_dense_and_in_order() {
        for (i, kind) in CommandKind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), i);
        }
    }
}
