//! Why a scheduler operation was refused.

use wfcontract::{CommandError, ErrorKind, Pid};

/// Why a scheduler operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The pid never named a process, or its process has finished.
    #[error("no process {0}: it never existed or has already finished")]
    NoSuchProcess(Pid),
    /// A stop was requested: the scheduler accepts no new processes.
    #[error("the scheduler is shutting down and accepts no new processes")]
    ShuttingDown,
    /// The scheduler already runs as many processes as it may.
    #[error("the host already runs its limit of {0} processes; try again when some have finished")]
    TooManyProcesses(usize),
    /// The receiver's mailbox holds as many messages (or bytes) as it may.
    #[error(
        "the mailbox of process {0} is full (its message or byte limit); the receiver is not \
         keeping up"
    )]
    MailboxFull(Pid),
    /// The spawning process already has as many children as it may.
    #[error(
        "process {parent} already has its limit of {limit} children (running, or finished and \
         not yet joined); join some first"
    )]
    TooManyChildren {
        /// The would-be parent.
        parent: Pid,
        /// The limit.
        limit: usize,
    },
    /// The scheduler could not take the request now (it could not arm a timer).
    #[error("the scheduler cannot take this now: {0}")]
    Unavailable(String),
    /// A spawn asked for a pid ([`Spawn::pid`](crate::Spawn::pid)) that a process has.
    #[error("pid {0} is in use by another process")]
    PidInUse(Pid),
}

impl Error {
    /// The error a process sees when its command failed this way.
    pub fn into_command_error(self) -> CommandError {
        let kind = match self {
            Error::NoSuchProcess(_) => ErrorKind::NoSuchProcess,
            Error::ShuttingDown | Error::Unavailable(_) | Error::PidInUse(_) => {
                ErrorKind::Unavailable
            }
            Error::MailboxFull(_) => ErrorKind::MailboxFull,
            Error::TooManyProcesses(_) | Error::TooManyChildren { .. } => ErrorKind::LimitReached,
        };
        CommandError::new(kind, self.to_string())
    }
}

/// Why a scheduler could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A setting is out of range.
    #[error("invalid scheduler setting: {0}")]
    Invalid(String),
    /// The OS refused a thread.
    #[error("could not start a scheduler thread: {0}")]
    Thread(#[from] std::io::Error),
}
