//! The embedded store: one SQLite file in WAL mode, held by one host at a time (`lock.rs`). One
//! connection writes (the journal's writer thread, `write.rs`); others read at the same time
//! (`read.rs`), in the host and beside it. `schema.rs` has the tables by version, `backup.rs`
//! copies a live store.

mod backup;
mod lock;
mod prune;
mod read;
mod schedules;
mod schema;
mod tails;
mod write;

pub use lock::Holder;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{params, Connection};

use super::{StoreError, StoreErrorKind, StoreResult, SyncMode};
use lock::HostLock;
use schema::{MIGRATIONS, VERSION};

/// A SQLite store.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// Steps appended to the log since it was last moved into `steps`, and their bytes.
    logged: (u64, u64),
    /// The host's lock on the file: held by the store a host writes with.
    lock: Option<HostLock>,
}

/// `path`, unless it is empty.
fn named(path: &Path) -> StoreResult<PathBuf> {
    if path.as_os_str().is_empty() {
        return Err(StoreError::new(
            StoreErrorKind::Invalid,
            "the store's path is empty: give a file (--store wf.db, created if need be) or a \
             PostgreSQL URL (--store postgres://USER@HOST/DATABASE)",
        ));
    }
    Ok(path.to_path_buf())
}

/// The error for a file of a newer schema.
fn newer(path: &Path, version: i64) -> StoreError {
    StoreError::new(
        StoreErrorKind::NotAStore,
        format_args!(
            "{} was written by a newer wfhost (schema version {version}; this one knows up to \
         {VERSION}): upgrade wfhost to open it",
            path.display()
        ),
    )
}

/// How many steps the log holds before [`Store::tidy`] moves them into `steps`: enough that a
/// workflow's page there is written once for many of its steps, few enough that the log's index
/// stays a few pages (each commit writes the pages it touches).
pub(super) const LOG_STEPS: u64 = 32_768;

/// Or when its records have this many bytes, so that moving it is never a long stall.
pub(super) const LOG_BYTES: u64 = 32 << 20;

/// Refuses a store SQLite finds damaged when it first reads it: a file shorter than its header
/// says (cut by a failed copy, a full disk or a broken restore) reads as "database disk image
/// is malformed", and recovering from it would lose what was acknowledged.
///
/// Read through the connection, never by opening the file: on Linux, closing any descriptor of a
/// file drops every POSIX lock this process holds on it, SQLite's own included, and a reader
/// beside the host then takes the store for unused and deletes its write-ahead log (the rule in
/// ARCHITECTURE.md, "The store's files").
fn check_readable(conn: &Connection, path: &Path) -> StoreResult<()> {
    let read = conn.query_row("PRAGMA page_count", [], |row| row.get::<_, i64>(0));
    // SQLite counts a last page cut part way as whole: the length says it, by `stat` (which
    // opens nothing), when the file alone is the store (no write-ahead log holds frames).
    if let Ok(pages) = read {
        let page: i64 = conn
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .unwrap_or(0);
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let logged = std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0);
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        let whole = u64::try_from(pages.saturating_mul(page)).unwrap_or(0);
        if !logged && len < whole {
            return Err(StoreError::new(
                StoreErrorKind::Damaged,
                format_args!(
                    "the store {} is truncated (the file has {len} bytes and its header says \
                 {whole}): restore it from a copy (recovering from it would lose what was \
                 acknowledged)",
                    path.display()
                ),
            ));
        }
    }
    match read {
        Err(rusqlite::Error::SqliteFailure(error, _))
            if error.code == rusqlite::ErrorCode::DatabaseCorrupt =>
        {
            // `stat` of the path: it opens nothing.
            let len = std::fs::metadata(path).map_or(0, |m| m.len());
            Err(StoreError::new(
                StoreErrorKind::Damaged,
                format_args!(
                    "the store {} is truncated or damaged (the file has {len} bytes; SQLite says \
                 the database disk image is malformed): restore it from a copy (recovering from \
                 it would lose what was acknowledged)",
                    path.display()
                ),
            ))
        }
        // Anything else is said by what reads it next, in its own words.
        _ => Ok(()),
    }
}

/// What kind of failure a SQLite error is.
pub(super) fn kind_of(error: &rusqlite::Error) -> StoreErrorKind {
    match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DiskFull | rusqlite::ErrorCode::TooBig) => StoreErrorKind::Full,
        Some(rusqlite::ErrorCode::NotADatabase) => StoreErrorKind::NotAStore,
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => StoreErrorKind::Damaged,
        Some(rusqlite::ErrorCode::ConstraintViolation) => StoreErrorKind::Integrity,
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen) => {
            StoreErrorKind::Invalid
        }
        _ => StoreErrorKind::Unavailable,
    }
}

pub(super) fn sql(what: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |error| StoreError::new(kind_of(&error), format_args!("{what}: {error}"))
}

impl SqliteStore {
    /// The schema as it reads back (for the test that holds both stores to one description).
    #[cfg(feature = "testing")]
    pub fn shape(&self) -> StoreResult<super::shape::Shape> {
        let what = sql("reading the schema");
        let mut shape = super::shape::Shape::default();
        let names: Vec<(String, String, String)> = self
            .conn
            .prepare("SELECT type, name, tbl_name FROM sqlite_master WHERE sql IS NOT NULL")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .map_err(&what)?;
        for (kind, name, table) in names {
            let pragma = if kind == "table" {
                "table_info"
            } else {
                "index_info"
            };
            let columns: Vec<String> = self
                .conn
                .prepare(&format!("SELECT name FROM pragma_{pragma}(?1)"))
                .and_then(|mut s| s.query_map([&name], |r| r.get(0))?.collect())
                .map_err(&what)?;
            match kind.as_str() {
                "table" => drop(shape.tables.insert(name, columns)),
                "index" => drop(shape.indexes.insert(name, (table, columns))),
                _ => {}
            }
        }
        Ok(shape)
    }

    /// Opens (creating if need be) the store at `path` as its host, migrating it to this
    /// version's schema. The host holds the file's lock until the store is dropped: a second
    /// host (in this process or another) is refused with an error that names the first.
    pub fn open(path: impl AsRef<Path>, sync: SyncMode) -> StoreResult<SqliteStore> {
        let path = named(path.as_ref())?;
        let lock = HostLock::acquire(&path)?;
        let mut store = SqliteStore::connect(&path)?;
        store.configure(sync)?;
        store.migrate()?;
        let (steps, bytes): (i64, i64) = store
            .conn
            .query_row(
                "SELECT count(*), coalesce(sum(length(record)), 0) FROM log",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(sql("reading the store"))?;
        store.logged = (steps.max(0) as u64, bytes.max(0) as u64);
        // Held from here until the store is dropped, which then closes it as a host does.
        store.lock = Some(lock);
        Ok(store)
    }

    /// Opens the store at `path` to read it, beside the host that may run it (which keeps
    /// writing): the commands that read what hosts wrote. It must exist, with this version's
    /// tables: an older store is migrated by a host of this version, never under a reader.
    pub fn open_existing(path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        let store = SqliteStore::open_any(path.as_ref())?;
        let version = store.version()?;
        if version == VERSION {
            return Ok(store);
        }
        if version > VERSION {
            return Err(newer(&store.path, version));
        }
        let held = lock::holder(&store.path);
        Err(match (version, held) {
            (0, Some(_)) => StoreError::new(
                StoreErrorKind::Unavailable,
                format_args!(
                    "the store {} is being created by its host: ask again in a moment",
                    store.path.display()
                ),
            ),
            (0, None) => StoreError::new(
                StoreErrorKind::NotAStore,
                format_args!(
                "{} holds no wfhost store: give the file `wfhost run --store` or `wfhost serve \
                 --store` wrote",
                store.path.display()
            ),
            ),
            (_, _) => StoreError::new(
                StoreErrorKind::NotAStore,
                format_args!(
                "the store {} has the tables of an older wfhost (schema version {version}; this \
                 one reads {VERSION}): start a host of this version on it (`wfhost resume \
                 --store {}`), which migrates it",
                store.path.display(),
                store.path.display()
            ),
            ),
        })
    }

    /// A reading connection to the existing file at `path`, whatever its schema.
    fn open_any(path: &Path) -> StoreResult<SqliteStore> {
        let path = named(path)?;
        if !path.exists() {
            return Err(StoreError::new(
                StoreErrorKind::NotAStore,
                format_args!(
                    "there is no store at {}: give the file `wfhost run --store` or `wfhost serve \
                 --store` wrote",
                    path.display()
                ),
            ));
        }
        let mut store = SqliteStore::connect(&path)?;
        store.configure_reader()?;
        Ok(store)
    }

    /// A connection to the file, configured for nothing yet.
    fn connect(path: &Path) -> StoreResult<SqliteStore> {
        let conn = Connection::open(path).map_err(|e| {
            StoreError::new(
                kind_of(&e),
                format_args!("could not open the store {}: {e}", path.display()),
            )
        })?;
        check_readable(&conn, path)?;
        if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            return Err(StoreError::new(
                StoreErrorKind::Invalid,
                format_args!(
                "the store {} is read-only: give a file (and a directory, for its journal files) \
                 that this user may write",
                path.display()
            ),
            ));
        }
        Ok(SqliteStore {
            conn,
            path: path.to_path_buf(),
            logged: (0, 0),
            lock: None,
        })
    }

    /// Caps the file at about `bytes`: a commit that would grow it further fails as a full disk
    /// does, and the host stops taking new work. The cap never goes below what the file holds.
    pub fn limit_size(&mut self, bytes: u64) -> StoreResult<()> {
        let page: i64 = self
            .conn
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .map_err(sql("reading the page size"))?;
        let pages = bytes.div_ceil(page.max(1) as u64).max(1);
        self.conn
            .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |row| {
                row.get::<_, i64>(0)
            })
            .map_err(sql("limiting the store's size"))?;
        Ok(())
    }

    /// Another connection to the same store, for reading while this one writes.
    pub fn open_reader(&self) -> StoreResult<SqliteStore> {
        let mut reader = SqliteStore::connect(&self.path)?;
        reader.configure_reader()?;
        Ok(reader)
    }

    /// Writes a copy of the store into the new file `into`, from one read transaction.
    pub(super) fn vacuum_into(&self, into: &Path) -> StoreResult<()> {
        let into_text = into.to_str().ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Invalid,
                format_args!(
                    "{} is not a UTF-8 path: give the copy another name",
                    into.display()
                ),
            )
        })?;
        // The copy is written to another file: this connection still changes nothing of the
        // store's.
        self.conn
            .execute_batch("PRAGMA query_only=OFF;")
            .and_then(|()| self.conn.execute("VACUUM INTO ?1", params![into_text]))
            .map(drop)
            .map_err(|e| {
                StoreError::new(
                    kind_of(&e),
                    format_args!(
                        "could not copy the store {} to {}: {e}",
                        self.path.display(),
                        into.display()
                    ),
                )
            })
    }

    /// Who holds the store at `path` as its host, if a host does.
    pub fn holder(path: impl AsRef<Path>) -> Option<Holder> {
        lock::holder(path.as_ref())
    }

    fn configure(&mut self, sync: SyncMode) -> StoreResult<()> {
        let bad = |e: rusqlite::Error| {
            StoreError::new(
                kind_of(&e),
                format_args!("{} is not a usable wfhost store: {e}", self.path.display()),
            )
        };
        self.conn
            .busy_timeout(Duration::from_secs(30))
            .map_err(bad)?;
        // A new file vacuums incrementally, so that a prune can give it back the pages it frees
        // (`PRAGMA incremental_vacuum`). This holds only if set before the first table and
        // before the file goes into WAL mode; on any other file it changes nothing.
        let tables: i64 = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
            .map_err(bad)?;
        if tables == 0 {
            self.conn
                .execute_batch("PRAGMA auto_vacuum = INCREMENTAL;")
                .map_err(bad)?;
        }
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .map_err(bad)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::new(
                StoreErrorKind::Invalid,
                format_args!(
                    "{} cannot be put in WAL mode (it stays in '{mode}' mode): is it on a file \
                 system that supports shared memory?",
                    self.path.display()
                ),
            ));
        }
        let sync = match sync {
            SyncMode::Full => "FULL",
            SyncMode::Normal => "NORMAL",
        };
        // A page cache of 64 MiB, the statement journal (moving the log) in memory, and a
        // checkpoint every 16,000 pages of write-ahead log, so that a page written by many
        // commits goes to the database file once (BENCHMARKS.md).
        self.conn
            .execute_batch(&format!(
                "PRAGMA synchronous={sync}; PRAGMA foreign_keys=OFF; \
                 PRAGMA wal_autocheckpoint=16000; PRAGMA cache_size=-65536; \
                 PRAGMA temp_store=MEMORY;"
            ))
            .map_err(bad)?;
        Ok(())
    }

    /// A connection that reads beside the host: it waits for the host's commits rather than
    /// failing, and may not write. Nor does it checkpoint when it closes: a reader that takes
    /// itself for the last connection (it is not, if a host's locks were lost) would delete the
    /// write-ahead log; only the host's own connection empties it, when the host closes.
    fn configure_reader(&mut self) -> StoreResult<()> {
        let path = self.path.display().to_string();
        self.conn
            .busy_timeout(Duration::from_secs(30))
            .and_then(|()| self.conn.execute_batch("PRAGMA query_only=ON;"))
            .and_then(|()| {
                self.conn
                    .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
                    .map(drop)
            })
            .map_err(|e| {
                StoreError::new(
                    kind_of(&e),
                    format_args!("{path} is not a usable wfhost store: {e}"),
                )
            })
    }

    /// The schema version the file says it has (0: none yet).
    fn version(&self) -> StoreResult<i64> {
        self.conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(|e| {
                StoreError::new(
                    kind_of(&e),
                    format_args!(
                        "{} is not a wfhost store (SQLite says: {e})",
                        self.path.display()
                    ),
                )
            })
    }

    fn migrate(&mut self) -> StoreResult<()> {
        let path = self.path.display().to_string();
        let version = self.version()?;
        if version > VERSION {
            return Err(newer(&self.path, version));
        }
        if version == 0 {
            // A new file, or a SQLite file that is not ours: ours has the version set.
            let tables: i64 = self
                .conn
                .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
                .map_err(sql("reading the schema"))?;
            if tables > 0 {
                return Err(StoreError::new(
                    StoreErrorKind::NotAStore,
                    format_args!(
                        "{path} is a SQLite database that is not a wfhost store: give a new file"
                    ),
                ));
            }
        }
        for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql("starting a migration"))?;
            tx.execute_batch(migration)
                .map_err(sql("migrating the store"))?;
            tx.pragma_update(None, "user_version", from as i64 + 1)
                .map_err(sql("migrating the store"))?;
            tx.commit().map_err(sql("migrating the store"))?;
        }
        Ok(())
    }
}

/// A host that closes its store leaves everything in the file itself: the log of steps moved
/// into place and the write-ahead log checkpointed into the file and emptied, so that the file
/// alone is the whole store (a copy of it, taken after the host stopped, misses nothing).
impl Drop for SqliteStore {
    fn drop(&mut self) {
        if self.lock.is_none() {
            return;
        }
        if let Err(error) = self.move_log(true) {
            tracing::warn!("closing the store: {error}");
        }
        let checkpoint = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            });
        match checkpoint {
            Ok((0, _, _)) => {}
            Ok((_, log, done)) => tracing::warn!(
                "closing the store {}: {done} of {log} pages of its write-ahead log were \
                 checkpointed (a reader held the rest); the file needs its -wal file beside it",
                self.path.display()
            ),
            Err(error) => tracing::warn!(
                "closing the store {}: could not checkpoint its write-ahead log ({error}); the \
                 file needs its -wal file beside it",
                self.path.display()
            ),
        }
    }
}

/// SQLite keeps integers signed: numbers past `i64::MAX` do not occur (pids and message numbers
/// count up from 1), and are refused rather than wrapped.
pub(super) fn int(n: u64) -> rusqlite::Result<i64> {
    i64::try_from(n).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

#[cfg(test)]
mod tests {
    /// The rule in ARCHITECTURE.md ("The store's files"): only SQLite opens the store's files.
    /// Code here that opens, creates, removes or renames a file any other way is one close away
    /// from dropping SQLite's locks; the two files that may are named with what they touch.
    #[test]
    fn the_store_files_are_opened_only_by_sqlite() {
        // lock.rs: the host's `<file>-lock`, which SQLite never opens. backup.rs: the copy, a
        // new file it refuses to name after any of the store's.
        const ALLOWED: [&str; 2] = ["lock.rs", "backup.rs"];
        const OPENERS: [&str; 14] = [
            "File::open",
            "File::create",
            "File::options",
            "OpenOptions",
            "fs::read(",
            "fs::read_to_string",
            "fs::write",
            "fs::remove_file",
            "fs::remove_dir_all",
            "fs::rename",
            "fs::copy",
            "fs::hard_link",
            "libc::open",
            "tokio::fs",
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sqlite");
        let mut checked = 0;
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if ALLOWED.contains(&name.as_str()) || !name.ends_with(".rs") {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            // This test's own list is not a use.
            let code = source.split("mod tests {").next().unwrap_or_default();
            for opener in OPENERS {
                assert!(
                    !code.contains(opener),
                    "{name} uses {opener}: the store's files are opened only by SQLite (see \
                     ARCHITECTURE.md, \"The store's files\")"
                );
            }
            checked += 1;
        }
        assert!(
            checked >= 7,
            "only {checked} files were checked in {}",
            dir.display()
        );
    }
}
