//! How hard a store syncs a commit: both stores take the same setting.

/// How hard a store syncs a commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// A commit is on disk when it returns: SQLite's `synchronous=FULL`, PostgreSQL's
    /// `synchronous_commit = on`. The default.
    #[default]
    Full,
    /// Faster: SQLite's `synchronous=NORMAL` (in WAL mode the store cannot be corrupted, but the
    /// last commits before a power loss, not a crash of the host process, may be lost, though
    /// they were acknowledged); PostgreSQL's `synchronous_commit = off` (a crash of the server
    /// may lose the last commits).
    Normal,
}
