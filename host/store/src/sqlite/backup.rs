//! A copy of a live SQLite store: `VACUUM INTO` reads the store in one read transaction (a
//! consistent snapshot, however the host writes meanwhile) into a file beside the copy, which is
//! synced and then renamed into place, so that a copy cut short (a crash, a full disk) never
//! looks whole.

use std::path::{Path, PathBuf};

use super::SqliteStore;
use crate::{StoreError, StoreErrorKind, StoreResult};

impl SqliteStore {
    /// Copies the store at `path` to `to` (which must not exist), beside the host that may be
    /// running it: what its last commit before the copy began holds, in one file that opens as
    /// a store on its own.
    pub fn backup(path: impl AsRef<Path>, to: impl AsRef<Path>) -> StoreResult<()> {
        let (path, to) = (path.as_ref(), to.as_ref());
        if to.exists() {
            return Err(StoreError::new(
                StoreErrorKind::Invalid,
                format_args!(
                    "{} exists: give the copy a new file (it is never overwritten)",
                    to.display()
                ),
            ));
        }
        let partial = partial_name(to);
        // Never one of the store's own files: this process may hold a connection to it, and
        // opening, closing or removing any of them outside SQLite breaks its locks.
        for copy in [to, &partial] {
            if let Some(own) = own_file(path, copy) {
                return Err(StoreError::new(
                    StoreErrorKind::Invalid,
                    format_args!(
                        "{} is the store's own {own}: give the copy a file beside it, not one of \
                     its files",
                        copy.display()
                    ),
                ));
            }
        }
        // Any version: the copy is the file as it is, never migrated first.
        let store = SqliteStore::open_any(path)?;
        let _ = std::fs::remove_file(&partial);
        let copied = store.vacuum_into(&partial).and_then(|()| {
            let sync =
                |file: &Path| -> std::io::Result<()> { std::fs::File::open(file)?.sync_all() };
            sync(&partial)
                .and_then(|()| std::fs::rename(&partial, to))
                .and_then(|()| {
                    // The rename is durable once the directory is.
                    let dir = to.parent().filter(|d| !d.as_os_str().is_empty());
                    sync(dir.unwrap_or(Path::new(".")))
                })
                .map_err(|e| {
                    StoreError::new(
                        StoreErrorKind::Unavailable,
                        format_args!("could not finish the copy {}: {e}", to.display()),
                    )
                })
        });
        if copied.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        copied
    }
}

/// Which of the store at `db`'s files `file` is (the database, its write-ahead log, its shared
/// memory, its rollback journal or its host's lock), after links and `.` are resolved.
fn own_file(db: &Path, file: &Path) -> Option<&'static str> {
    let db = super::lock::resolved(db);
    let file = super::lock::resolved(file);
    [
        ("", "database file"),
        ("-wal", "write-ahead log"),
        ("-shm", "shared memory file"),
        ("-journal", "rollback journal"),
        ("-lock", "lock file"),
    ]
    .into_iter()
    .find_map(|(suffix, what)| {
        let mut own = db.clone().into_os_string();
        own.push(suffix);
        (own == file.as_os_str()).then_some(what)
    })
}

/// Where a copy is written before it is whole: `<copy>.partial`.
fn partial_name(to: &Path) -> PathBuf {
    let mut name = to.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}
