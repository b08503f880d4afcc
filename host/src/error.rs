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
    /// The entry point could not start with its input: the input does not decode as its type, or
    /// its start failed.
    InvalidInput,
    /// The process trapped or panicked (a guest panic traps), or its host-side handler panicked.
    Trap,
    /// A configured limit was reached: by a process (time, memory, yields, answer or payload
    /// size, which fails it), or by a request (live processes, children, a full mailbox, payload
    /// size, module size or compile time).
    Limit,
    /// The process answered something that does not follow the wfhost ABI.
    BadOutput,
    /// The process ran and reported failure (its entry point returned an error).
    Failed,
    /// The process was ended from outside: it outlived its cancel grace period, was terminated,
    /// or the host shut down under it.
    Terminated,
    /// The process was cancelled and stopped as asked (its entry point returned
    /// `Error::Cancelled`).
    Cancelled,
    /// The process ran past the timeout it was spawned with (`SpawnOptions::timeout`).
    Timeout,
    /// The module is not allowed to do that: the host did not grant it.
    NotAllowed,
    /// No process has that pid (it never existed or has finished).
    NoSuchProcess,
    /// The host is shutting down.
    ShuttingDown,
    /// The host could not get what the request needed just now (a thread for its timer, say);
    /// the request may succeed later.
    Unavailable,
    /// A file could not be read.
    Io,
    /// A setting is invalid, or the host could not start.
    Config,
    /// A durable workflow's replay did not match its journal: the module behaves differently
    /// from the one that wrote it. The workflow fails rather than diverge silently.
    Nondeterminism,
    /// The durable store could not be opened, read or written (full, read-only, corrupt, or
    /// written by a newer wfhost). Once a write fails the host takes no new work.
    Store,
    /// No durable workflow has that id.
    UnknownWorkflow,
    /// A durable workflow with that id exists, started with another module, entry point or
    /// input: a start of the same id is idempotent only with the same three.
    Conflict,
    /// What the store holds for a workflow (its journal, input or module) cannot be read back:
    /// it is left as it was, and goes on once the store is repaired or the build fixed.
    Damaged,
    /// No schedule has that id.
    UnknownSchedule,
}

impl ErrorKind {
    /// Every kind, in the order they are declared.
    pub const ALL: [ErrorKind; 23] = [
        ErrorKind::BadModule,
        ErrorKind::UnknownModule,
        ErrorKind::UnknownEntry,
        ErrorKind::InvalidInput,
        ErrorKind::Trap,
        ErrorKind::Limit,
        ErrorKind::BadOutput,
        ErrorKind::Failed,
        ErrorKind::Terminated,
        ErrorKind::Cancelled,
        ErrorKind::Timeout,
        ErrorKind::NotAllowed,
        ErrorKind::NoSuchProcess,
        ErrorKind::ShuttingDown,
        ErrorKind::Unavailable,
        ErrorKind::Io,
        ErrorKind::Config,
        ErrorKind::Nondeterminism,
        ErrorKind::Store,
        ErrorKind::UnknownWorkflow,
        ErrorKind::Conflict,
        ErrorKind::Damaged,
        ErrorKind::UnknownSchedule,
    ];

    /// The kind in snake case (`unknown_workflow`): the `code` of the HTTP API's errors.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadModule => "bad_module",
            ErrorKind::UnknownModule => "unknown_module",
            ErrorKind::UnknownEntry => "unknown_entry",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::Trap => "trap",
            ErrorKind::Limit => "limit",
            ErrorKind::BadOutput => "bad_output",
            ErrorKind::Failed => "failed",
            ErrorKind::Terminated => "terminated",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Timeout => "timeout",
            ErrorKind::NotAllowed => "not_allowed",
            ErrorKind::NoSuchProcess => "no_such_process",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Io => "io",
            ErrorKind::Config => "config",
            ErrorKind::Nondeterminism => "nondeterminism",
            ErrorKind::Store => "store",
            ErrorKind::UnknownWorkflow => "unknown_workflow",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Damaged => "damaged",
            ErrorKind::UnknownSchedule => "unknown_schedule",
        }
    }

    /// The kind [`name`](Self::name)d so.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
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

impl Error {
    /// A refusal of the scheduler's, in the host's terms.
    pub(crate) fn refused(error: wfhost_scheduler::Error) -> Error {
        let kind = match error {
            wfhost_scheduler::Error::NoSuchProcess(_) => ErrorKind::NoSuchProcess,
            wfhost_scheduler::Error::ShuttingDown => ErrorKind::ShuttingDown,
            wfhost_scheduler::Error::Unavailable(_) | wfhost_scheduler::Error::PidInUse(_) => {
                ErrorKind::Unavailable
            }
            wfhost_scheduler::Error::TooManyProcesses(_)
            | wfhost_scheduler::Error::TooManyChildren { .. }
            | wfhost_scheduler::Error::MailboxFull(_) => ErrorKind::Limit,
        };
        Error::new(kind, error.to_string())
    }

    /// A process's failure, with its kind carried over.
    pub(crate) fn failed(error: &wfhost_scheduler::ProcessError) -> Error {
        use wfhost_scheduler::FailureKind;
        let kind = match error.kind() {
            FailureKind::Trap => ErrorKind::Trap,
            FailureKind::Limit => ErrorKind::Limit,
            FailureKind::BadOutput => ErrorKind::BadOutput,
            FailureKind::Refused => ErrorKind::UnknownEntry,
            FailureKind::Terminated => ErrorKind::Terminated,
            FailureKind::Cancelled => ErrorKind::Cancelled,
            FailureKind::Timeout => ErrorKind::Timeout,
            FailureKind::InvalidInput => ErrorKind::InvalidInput,
            FailureKind::Nondeterminism => ErrorKind::Nondeterminism,
            _ => ErrorKind::Failed,
        };
        Error::new(kind, error.message())
    }
}

/// Results of host operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A store's failure, as the host says it: a conflict the caller asked for (a start of an id that
/// exists with another module, entry point or input) is [`ErrorKind::Conflict`]; anything else,
/// a write the store refused by its own rules included, is the store's ([`ErrorKind::Store`]).
impl From<wfhost_store::StoreError> for Error {
    fn from(error: wfhost_store::StoreError) -> Error {
        let kind = match error.kind() {
            wfhost_store::StoreErrorKind::Conflict => ErrorKind::Conflict,
            _ => ErrorKind::Store,
        };
        Error::new(kind, error.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_name_of_its_own() {
        let mut names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_name(kind.name()), Some(kind));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorKind::ALL.len());
        assert_eq!(ErrorKind::from_name("nonsense"), None);
    }

    #[test]
    fn only_a_conflict_the_caller_asked_for_is_a_conflict() {
        use wfhost_store::{StoreError, StoreErrorKind};
        let asked = Error::from(StoreError::new(StoreErrorKind::Conflict, "another module"));
        assert_eq!(asked.kind(), ErrorKind::Conflict);
        assert_eq!(asked.message(), "another module");
        for kind in [
            StoreErrorKind::Integrity,
            StoreErrorKind::Unavailable,
            StoreErrorKind::Full,
            StoreErrorKind::Fenced,
            StoreErrorKind::Damaged,
        ] {
            assert_eq!(
                Error::from(StoreError::new(kind, "x")).kind(),
                ErrorKind::Store,
                "{}",
                kind.name()
            );
        }
    }

    #[test]
    fn the_store_names_a_cancelled_workflow_as_the_scheduler_does() {
        assert_eq!(
            wfhost_store::CANCELLED,
            wfhost_scheduler::FailureKind::Cancelled.name()
        );
    }
}
