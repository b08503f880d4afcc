//! A copy of a live SQLite store: `VACUUM INTO` reads the store in one read transaction (a
//! consistent snapshot, however the host writes meanwhile) into a file beside the copy, which is
//! synced and then renamed into place, so that a copy cut short (a crash, a full disk) never
//! looks whole.

use std::path::{Path, PathBuf};

use super::SqliteStore;
use crate::durable::store::{StoreError, StoreResult};

impl SqliteStore {
    /// Copies the store at `path` to `to` (which must not exist), beside the host that may be
    /// running it: what its last commit before the copy began holds, in one file that opens as
    /// a store on its own.
    pub fn backup(path: impl AsRef<Path>, to: impl AsRef<Path>) -> StoreResult<()> {
        let (path, to) = (path.as_ref(), to.as_ref());
        if to.exists() {
            return Err(StoreError::new(format_args!(
                "{} exists: give the copy a new file (it is never overwritten)",
                to.display()
            )));
        }
        // Any version: the copy is the file as it is, never migrated first.
        let store = SqliteStore::open_any(path)?;
        let partial = partial_name(to);
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
                    StoreError::new(format_args!(
                        "could not finish the copy {}: {e}",
                        to.display()
                    ))
                })
        });
        if copied.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        copied
    }
}

/// Where a copy is written before it is whole: `<copy>.partial`.
fn partial_name(to: &Path) -> PathBuf {
    let mut name = to.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}
