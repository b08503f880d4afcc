//! What went wrong with a store, with a kind a caller can match on and words a person can act on.

/// What kind of failure a [`StoreError`] is: what a caller may do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store could not be reached or did not answer (a connection refused or cut, an I/O
    /// error, a timeout): trying again later may work.
    Unavailable,
    /// What is there is no wfhost store this build can use: not a database, a schema another
    /// program made, one a newer wfhost wrote, or no store at all where one was to be read.
    NotAStore,
    /// Another host holds the store (a SQLite file has one host at a time).
    Held,
    /// This host lost its lease on a store hosts share: another may have taken its workflows.
    Fenced,
    /// The store is full: its disk, or the size it was limited to.
    Full,
    /// What was asked conflicts with what the store has (a start of an id that exists with
    /// another module, entry point or input): the caller's to settle.
    Conflict,
    /// The store refused a write that breaks its own rules (a row that is there already):
    /// another writer wrote the same rows, or the writer is wrong. Not the caller's conflict.
    Integrity,
    /// The store was given something it cannot take as given (an empty path, a server's URL,
    /// a limit that does not apply to it, a value past what its columns hold).
    Invalid,
    /// The store holds something it cannot read back as written: a damaged row or file.
    Damaged,
    /// The host's journal has stopped (it shut down, or its writer failed before).
    Closed,
}

impl StoreErrorKind {
    /// The kind's name, as the API and the logs say it.
    pub fn name(self) -> &'static str {
        match self {
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::NotAStore => "not_a_store",
            StoreErrorKind::Held => "held",
            StoreErrorKind::Fenced => "fenced",
            StoreErrorKind::Full => "full",
            StoreErrorKind::Conflict => "conflict",
            StoreErrorKind::Integrity => "integrity",
            StoreErrorKind::Invalid => "invalid",
            StoreErrorKind::Damaged => "damaged",
            StoreErrorKind::Closed => "closed",
        }
    }
}

/// A store that could not be read or written: its kind, and what was wrong in words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
}

impl StoreError {
    /// An error of `kind`, saying `what`.
    pub fn new(kind: StoreErrorKind, what: impl std::fmt::Display) -> StoreError {
        StoreError {
            kind,
            message: what.to_string(),
        }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// What was wrong, in words.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;
