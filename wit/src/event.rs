use alloc::string::String;
use serde::{Deserialize, Serialize};

use crate::{Payload, Pid, Tag};

/// What an [`Event`] tells the process.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// A command the process yielded has finished: `tag` names the yield, and either `data` holds
    /// its result or `error` says why it failed.
    YieldComplete,
    /// A message from another process (or from the host when `from` is [`Pid::HOST`]).
    Message,
    /// The process is asked to stop. It may still yield clean-up commands; the host terminates it
    /// if it has not finished within the host's grace period.
    Cancel,
}

/// Something that happened to a process, delivered to its next `step`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// For `YieldComplete`, the tag of the completed yield; zero otherwise.
    pub tag: Tag,
    /// For `Message`, the sender; [`Pid::HOST`] otherwise.
    pub from: Pid,
    /// The result of the command, or the message.
    pub data: Payload,
    /// Set when the command failed; `data` is then empty. Boxed (the same on the wire): errors
    /// are rare, and every event is copied several times between a producer and the step that
    /// takes it, so it stays small (64 bytes, not 88).
    pub error: Option<alloc::boxed::Box<CommandError>>,
}

impl Event {
    /// The completion of the yield tagged `tag`.
    pub fn completion(tag: Tag, result: Result<Payload, CommandError>) -> Event {
        let (data, error) = match result {
            Ok(data) => (data, None),
            Err(error) => (Payload::empty(), Some(alloc::boxed::Box::new(error))),
        };
        Event {
            kind: EventKind::YieldComplete,
            tag,
            from: Pid::HOST,
            data,
            error,
        }
    }

    /// A message from `from`.
    pub fn message(from: Pid, data: Payload) -> Event {
        Event {
            kind: EventKind::Message,
            tag: Tag(0),
            from,
            data,
            error: None,
        }
    }

    /// A request to stop.
    pub fn cancel() -> Event {
        Event {
            kind: EventKind::Cancel,
            tag: Tag(0),
            from: Pid::HOST,
            data: Payload::empty(),
            error: None,
        }
    }

    /// The completion as a `Result`, consuming the event.
    pub fn into_result(self) -> Result<Payload, CommandError> {
        match self.error {
            Some(error) => Err(*error),
            None => Ok(self.data),
        }
    }
}

/// The class of a [`CommandError`], for code that reacts differently to each.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The host has no handler for this command (or no host function of this name).
    UnknownCommand,
    /// The target pid never existed or its process has finished.
    NoSuchProcess,
    /// The awaited work was cancelled, or the process itself was cancelled.
    Cancelled,
    /// A joined process failed; the message is its failure.
    ChildFailed,
    /// A joined process was cancelled (it stopped as asked) or terminated from outside before it
    /// finished; the message says how.
    ChildCancelled,
    /// The command ran and failed; the message says why.
    Failed,
    /// The command's arguments were unusable (unknown entry point, unknown module, bad input).
    InvalidInput,
    /// The host cannot take the command now (it is shutting down).
    Unavailable,
    /// The receiver's mailbox holds as many messages (or bytes) as it may; the receiver is not
    /// keeping up. Retry later, or send less.
    MailboxFull,
    /// The module is not allowed to use this command: the host did not grant it.
    NotAllowed,
    /// A configured limit refused the command: live processes per host, children per process,
    /// or the size of a payload.
    LimitReached,
    /// The command did not finish within its time limit (a host function's timeout); whatever it
    /// was doing may or may not have happened.
    Timeout,
    /// The function ran and refused for good (an activity worker's error marked not retryable):
    /// trying again will not help.
    Rejected,
}

impl ErrorKind {
    /// Every kind, in order.
    pub const ALL: [ErrorKind; 13] = [
        ErrorKind::UnknownCommand,
        ErrorKind::NoSuchProcess,
        ErrorKind::Cancelled,
        ErrorKind::ChildFailed,
        ErrorKind::ChildCancelled,
        ErrorKind::Failed,
        ErrorKind::InvalidInput,
        ErrorKind::Unavailable,
        ErrorKind::MailboxFull,
        ErrorKind::NotAllowed,
        ErrorKind::LimitReached,
        ErrorKind::Timeout,
        ErrorKind::Rejected,
    ];

    /// The kind named `name` (kebab-case, as [`name`](Self::name) gives it).
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The kebab-case name, as in the WIT.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::UnknownCommand => "unknown-command",
            ErrorKind::NoSuchProcess => "no-such-process",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::ChildFailed => "child-failed",
            ErrorKind::ChildCancelled => "child-cancelled",
            ErrorKind::Failed => "failed",
            ErrorKind::InvalidInput => "invalid-input",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::MailboxFull => "mailbox-full",
            ErrorKind::NotAllowed => "not-allowed",
            ErrorKind::LimitReached => "limit-reached",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Rejected => "rejected",
        }
    }
}

/// Why a yielded command failed, as the process sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[error("{message} ({})", kind.name())]
pub struct CommandError {
    /// The class of failure.
    pub kind: ErrorKind,
    /// What went wrong, for a human.
    pub message: String,
}

impl CommandError {
    /// A new error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> CommandError {
        CommandError {
            kind,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example in `wit/README.md`.
    #[test]
    fn a_message_event_encodes_as_documented() {
        let event = Event::message(Pid(3), Payload::json_bytes(b"1".to_vec()));
        let bytes = postcard::to_allocvec(&event).unwrap();
        assert_eq!(bytes, [0x01, 0x00, 0x03, 0x01, 0x01, 0x31, 0x00]);
    }
}
