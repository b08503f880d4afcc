//! The host's error type.

/// What kind of failure an [`Error`] is, for callers that react differently to each.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The bytes are not a workflow module this host can run: not wasm, truncated, invalid, no
    /// manifest, another ABI version, missing exports, or imports the host does not provide.
    BadModule,
    /// No module is loaded under that name.
    UnknownModule,
    /// The module has no entry point of that name.
    UnknownEntry,
    /// The process trapped, panicked or exceeded a limit while running.
    Trap,
    /// A configured limit was reached (live processes, a full mailbox, pooled instances).
    Limit,
    /// The process ran and failed.
    Failed,
    /// No process has that pid (it never existed or has finished).
    NoSuchProcess,
    /// The host is shutting down.
    ShuttingDown,
    /// A file could not be read.
    Io,
    /// A setting is invalid, or the host could not start.
    Config,
    /// Building a workflow crate failed.
    Build,
}

/// A failure, with the kind and a message that says what was wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Its message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<wfhost_scheduler::Error> for Error {
    fn from(error: wfhost_scheduler::Error) -> Error {
        let kind = match error {
            wfhost_scheduler::Error::NoSuchProcess(_) => ErrorKind::NoSuchProcess,
            wfhost_scheduler::Error::ShuttingDown => ErrorKind::ShuttingDown,
            wfhost_scheduler::Error::TooManyProcesses(_)
            | wfhost_scheduler::Error::MailboxFull(_) => ErrorKind::Limit,
        };
        Error::new(kind, error.to_string())
    }
}

/// Results of host operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
