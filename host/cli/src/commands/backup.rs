//! `wfhost backup`: a copy of a SQLite store, taken while its host runs.

use std::path::PathBuf;

use anyhow::bail;
use wfhost::store::Location;

/// Copies a SQLite store into a new file, consistent as of one moment, while its host may be
/// running: the copy is one file that opens as a store on its own (`wfhost resume --store
/// COPY`). A PostgreSQL store is backed up with PostgreSQL's own tools (`pg_dump`).
#[derive(Debug, clap::Parser)]
pub struct BackupCommand {
    /// The store: a SQLite file.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// The copy: a new file (an existing one is never overwritten).
    to: PathBuf,
}

impl BackupCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let Some(path) = self.store.path() else {
            bail!(
                "{} is a PostgreSQL store: back it up with PostgreSQL's tools (`pg_dump --schema \
                 wfhost`, or the server's own backups)",
                self.store
            );
        };
        wfhost::store::backup(path, &self.to)?;
        eprintln!("copied {} to {}", self.store, self.to.display());
        Ok(())
    }
}
