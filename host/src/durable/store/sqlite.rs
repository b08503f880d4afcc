//! The embedded store: one SQLite file in WAL mode. One connection writes (the journal's writer
//! thread); others read at the same time.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use super::schema::{MIGRATIONS, VERSION};
use super::{
    Cancel, Ending, Message, NewMessage, NewSnapshot, NewWorkflow, Op, State, Step, Store,
    StoreError, StoreResult, Workflow,
};

/// How hard SQLite syncs a commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// `synchronous=FULL`: a commit is on disk when it returns. The default.
    #[default]
    Full,
    /// `synchronous=NORMAL`: in WAL mode the store cannot be corrupted, but the last commits
    /// before a power loss (not a crash of the host process) may be lost, though they were
    /// acknowledged.
    Normal,
}

/// A SQLite store.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// Steps appended to the log since it was last moved into `steps`, and their bytes.
    logged: (u64, u64),
}

/// How many steps the log holds before [`Store::tidy`] moves them into `steps`: enough that a
/// workflow's page there is written once for many of its steps, few enough that the log's index
/// stays a few pages (each commit writes the pages it touches).
const LOG_STEPS: u64 = 32_768;

/// Or when its records have this many bytes, so that moving it is never a long stall.
const LOG_BYTES: u64 = 32 << 20;

/// Refuses a file shorter than its header says it is (cut by a failed copy, a full disk or a
/// broken restore): SQLite would read it and fail only at the pages that are missing.
///
/// Only when the file is the whole store: while a write-ahead log holds frames (a host has the
/// store open, or died in a checkpoint, which writes page 1 before the pages that lengthen the
/// file), SQLite completes the file from the log, and a short file is no damage.
fn check_length(path: &Path) -> StoreResult<()> {
    use std::io::Read;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return Ok(());
    }
    let Ok(mut file) = std::fs::File::open(path) else {
        // Not there yet (it is created), or unreadable (opening it says why).
        return Ok(());
    };
    let mut header = [0u8; 100];
    if file.read_exact(&mut header).is_err() || !header.starts_with(b"SQLite format 3\0") {
        return Ok(());
    }
    let page = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        size => u64::from(size),
    };
    let pages = u64::from(u32::from_be_bytes([
        header[28], header[29], header[30], header[31],
    ]));
    // The page count is valid when the change counter matches "version valid for".
    let valid = header[24..28] == header[92..96];
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if valid && len < pages * page {
        return Err(StoreError::new(format_args!(
            "the store {} is truncated: the file has {len} bytes and its header says {}: \
             restore it from a copy (recovering from it would lose what was acknowledged)",
            path.display(),
            pages * page
        )));
    }
    Ok(())
}

fn sql(what: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |error| StoreError::new(format_args!("{what}: {error}"))
}

impl SqliteStore {
    /// Opens (creating if need be) the store at `path`, migrating it to this version's schema.
    pub fn open(path: impl AsRef<Path>, sync: SyncMode) -> StoreResult<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        check_length(&path)?;
        let conn = Connection::open(&path).map_err(|e| {
            StoreError::new(format_args!(
                "could not open the store {}: {e}",
                path.display()
            ))
        })?;
        if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            return Err(StoreError::new(format_args!(
                "the store {} is read-only: give a file (and a directory, for its journal files) \
                 that this user may write",
                path.display()
            )));
        }
        let mut store = SqliteStore {
            conn,
            path,
            logged: (0, 0),
        };
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
        Ok(store)
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
        SqliteStore::open(&self.path, SyncMode::Full)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn configure(&mut self, sync: SyncMode) -> StoreResult<()> {
        let bad = |e: rusqlite::Error| {
            StoreError::new(format_args!(
                "{} is not a usable wfhost store: {e}",
                self.path.display()
            ))
        };
        self.conn
            .busy_timeout(Duration::from_secs(30))
            .map_err(bad)?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .map_err(bad)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::new(format_args!(
                "{} cannot be put in WAL mode (it stays in '{mode}' mode): is it on a file \
                 system that supports shared memory?",
                self.path.display()
            )));
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

    fn migrate(&mut self) -> StoreResult<()> {
        let path = self.path.display().to_string();
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(|e| {
                StoreError::new(format_args!(
                    "{path} is not a wfhost store (SQLite says: {e})"
                ))
            })?;
        if version > VERSION {
            return Err(StoreError::new(format_args!(
                "{path} was written by a newer wfhost (schema version {version}; this one knows \
                 up to {VERSION}): upgrade wfhost to open it"
            )));
        }
        if version == 0 {
            // A new file, or a SQLite file that is not ours: ours has the version set.
            let tables: i64 = self
                .conn
                .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
                .map_err(sql("reading the schema"))?;
            if tables > 0 {
                return Err(StoreError::new(format_args!(
                    "{path} is a SQLite database that is not a wfhost store: give a new file"
                )));
            }
        }
        for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = self
                .conn
                .transaction()
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

const WORKFLOW_COLUMNS: &str = "num, id, parent, module, module_name, entry, input, started, \
     state, result, error_kind, error, finished, \
     max(steps, \
         coalesce((SELECT max(seq) FROM steps s WHERE s.num = workflows.num), 0), \
         coalesce((SELECT max(seq) FROM log l WHERE l.num = workflows.num), 0)), \
     cancel";

fn workflow_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Workflow> {
    let state = State::from_code(row.get(8)?);
    Ok(Workflow {
        start: NewWorkflow {
            num: row.get::<_, i64>(0)? as u64,
            id: row.get(1)?,
            parent: row.get::<_, Option<i64>>(2)?.map(|n| n as u64),
            module: row.get(3)?,
            module_name: row.get(4)?,
            entry: row.get(5)?,
            input: row.get(6)?,
            started: row.get::<_, i64>(7)? as u64,
        },
        state,
        ending: Ending::from_columns(state, row.get(9)?, row.get(10)?, row.get(11)?),
        finished: row.get::<_, Option<i64>>(12)?.map(|n| n as u64),
        steps: row.get::<_, i64>(13)? as u64,
        cancel: Cancel::from_code(row.get(14)?),
    })
}

/// SQLite keeps integers signed: numbers past `i64::MAX` do not occur (pids and message numbers
/// count up from 1), and are refused rather than wrapped.
fn int(n: u64) -> rusqlite::Result<i64> {
    i64::try_from(n).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// Writes `op`; `elided` are the messages sent and taken within this transaction, neither
/// written nor deleted.
fn write(tx: &rusqlite::Transaction<'_>, op: &Op, elided: &HashSet<u64>) -> rusqlite::Result<()> {
    match op {
        Op::Module { hash, bytes } => {
            tx.prepare_cached("INSERT OR IGNORE INTO modules (hash, bytes) VALUES (?1, ?2)")?
                .execute(params![hash, &bytes[..]])?;
        }
        Op::Start(w) => {
            tx.prepare_cached(
                "INSERT INTO workflows (num, id, parent, module, module_name, entry, input, \
                 started) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                int(w.num)?,
                w.id,
                w.parent.map(int).transpose()?,
                w.module,
                w.module_name,
                w.entry,
                w.input,
                int(w.started)?
            ])?;
        }
        Op::Step(step) => {
            // The log's index refuses a step twice in the log; this, a step moved out of it.
            let added = tx
                .prepare_cached(
                    "INSERT INTO log (num, seq, at, record) SELECT ?1, ?2, ?3, ?4 \
                     WHERE NOT EXISTS (SELECT 1 FROM steps WHERE num = ?1 AND seq = ?2)",
                )?
                .execute(params![
                    int(step.num)?,
                    int(step.seq)?,
                    int(step.at)?,
                    step.record
                ])?;
            if added == 0 {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY),
                    Some(format!(
                        "step {} of workflow {} is in the store already (does another host \
                         write to this store?)",
                        step.seq, step.num
                    )),
                ));
            }
            if step.took_cancel {
                tx.prepare_cached("UPDATE workflows SET cancel = 2 WHERE num = ?1")?
                    .execute(params![int(step.num)?])?;
            }
            for id in step.consumed.iter().filter(|id| !elided.contains(id)) {
                tx.prepare_cached("DELETE FROM messages WHERE id = ?1")?
                    .execute(params![int(*id)?])?;
            }
        }
        Op::Message(NewMessage {
            id,
            receiver,
            sender,
            payload,
            ..
        }) => {
            if elided.contains(id) {
                return Ok(());
            }
            tx.prepare_cached(
                "INSERT INTO messages (id, receiver, sender, payload) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![int(*id)?, int(*receiver)?, int(*sender)?, payload])?;
        }
        Op::Refused { id, error } => {
            tx.prepare_cached("UPDATE messages SET refused = ?2 WHERE id = ?1")?
                .execute(params![int(*id)?, error])?;
        }
        Op::End { num, ending, at } => {
            let mut update = tx.prepare_cached(
                "UPDATE workflows SET state = ?2, result = ?3, error_kind = ?4, error = ?5, \
                 finished = ?6 WHERE num = ?1 AND state = 0",
            )?;
            match ending {
                Ending::Done(result) => update.execute(params![
                    int(*num)?,
                    1,
                    result,
                    None::<String>,
                    None::<String>,
                    int(*at)?
                ])?,
                Ending::Failed { kind, message } => update.execute(params![
                    int(*num)?,
                    2,
                    None::<Vec<u8>>,
                    kind,
                    message,
                    int(*at)?
                ])?,
            };
            // What waited for it, and its snapshot, are of no use now.
            tx.prepare_cached("DELETE FROM messages WHERE receiver = ?1")?
                .execute(params![int(*num)?])?;
            tx.prepare_cached("DELETE FROM snapshots WHERE num = ?1")?
                .execute(params![int(*num)?])?;
        }
        Op::Cancel { num } => {
            tx.prepare_cached("UPDATE workflows SET cancel = 1 WHERE num = ?1 AND cancel = 0")?
                .execute(params![int(*num)?])?;
        }
        Op::Snapshot(snapshot) => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO snapshots (num, seq, module, state) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                int(snapshot.num)?,
                int(snapshot.seq)?,
                snapshot.module,
                snapshot.state
            ])?;
        }
    }
    Ok(())
}

impl Store for SqliteStore {
    fn reader(&self) -> StoreResult<Box<dyn Store>> {
        Ok(Box::new(self.open_reader()?))
    }

    fn commit(&mut self, ops: &[Op]) -> StoreResult<()> {
        let path = self.path.display().to_string();
        let failed = |e: rusqlite::Error| {
            let why = match e.sqlite_error_code() {
                Some(rusqlite::ErrorCode::DiskFull) => {
                    "it is full (the disk, or its size limit): free space or raise the limit \
                     and start again; what was written before resumes"
                        .to_string()
                }
                Some(rusqlite::ErrorCode::ReadOnly) => {
                    "it has become read-only: make it writable and start again; what was \
                     written before resumes"
                        .to_string()
                }
                _ => e.to_string(),
            };
            StoreError::new(format_args!("could not write to the store {path}: {why}"))
        };
        let (elided, last_message) = super::elided(ops);
        let tx = self.conn.transaction().map_err(failed)?;
        let mut logged = (0, 0);
        for op in ops {
            write(&tx, op, &elided).map_err(failed)?;
            if let Op::Step(step) = op {
                logged.0 += 1;
                logged.1 += step.record.len() as u64;
            }
        }
        if let Some(last) = last_message {
            tx.prepare_cached("UPDATE counters SET value = max(value, ?1) WHERE name = 'messages'")
                .and_then(|mut s| s.execute(params![int(last)?]))
                .map_err(failed)?;
        }
        tx.commit().map_err(failed)?;
        self.logged.0 += logged.0;
        self.logged.1 += logged.1;
        Ok(())
    }

    fn tidy(&mut self, all: bool) -> StoreResult<()> {
        let (steps, bytes) = self.logged;
        if steps == 0 || (!all && steps < LOG_STEPS && bytes < LOG_BYTES) {
            return Ok(());
        }
        let path = self.path.display().to_string();
        let failed = |e: rusqlite::Error| {
            StoreError::new(format_args!(
                "could not move the log of steps into place in the store {path}: {e}"
            ))
        };
        let tx = self.conn.transaction().map_err(failed)?;
        tx.execute_batch(
            "INSERT INTO steps (num, seq, at, record) \
             SELECT num, seq, at, record FROM log ORDER BY num, seq; \
             DELETE FROM log;",
        )
        .map_err(failed)?;
        tx.commit().map_err(failed)?;
        self.logged = (0, 0);
        Ok(())
    }

    fn high_water(&mut self) -> StoreResult<(u64, u64)> {
        let workflows: Option<i64> = self
            .conn
            .query_row("SELECT max(num) FROM workflows", [], |row| row.get(0))
            .map_err(sql("reading the store"))?;
        let messages: Option<i64> = self
            .conn
            .query_row(
                "SELECT max(coalesce((SELECT max(id) FROM messages), 0), \
                 coalesce((SELECT value FROM counters WHERE name = 'messages'), 0))",
                [],
                |row| row.get(0),
            )
            .map_err(sql("reading the store"))?;
        Ok((
            workflows.unwrap_or(0).max(0) as u64,
            messages.unwrap_or(0).max(0) as u64,
        ))
    }

    fn workflow(&mut self, id: &str) -> StoreResult<Option<Workflow>> {
        self.conn
            .prepare_cached(&format!(
                "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id = ?1"
            ))
            .and_then(|mut s| s.query_row(params![id], workflow_row).optional())
            .map_err(sql("reading a workflow"))
    }

    fn workflow_by_num(&mut self, num: u64) -> StoreResult<Option<Workflow>> {
        let num = int(num).map_err(sql("reading a workflow"))?;
        self.conn
            .prepare_cached(&format!(
                "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE num = ?1"
            ))
            .and_then(|mut s| s.query_row(params![num], workflow_row).optional())
            .map_err(sql("reading a workflow"))
    }

    fn workflows(&mut self, unfinished_only: bool) -> StoreResult<Vec<Workflow>> {
        let filter = if unfinished_only {
            "WHERE state = 0"
        } else {
            ""
        };
        let mut statement = self
            .conn
            .prepare(&format!(
                "SELECT {WORKFLOW_COLUMNS} FROM workflows {filter} ORDER BY num"
            ))
            .map_err(sql("listing workflows"))?;
        let rows = statement
            .query_map([], workflow_row)
            .map_err(sql("listing workflows"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql("listing workflows"))
    }

    fn steps(&mut self, num: u64, after: u64) -> StoreResult<Vec<Step>> {
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT seq, at, record FROM steps WHERE num = ?1 AND seq > ?2 \
                 UNION ALL SELECT seq, at, record FROM log WHERE num = ?1 AND seq > ?2 \
                 ORDER BY seq",
            )
            .map_err(sql("reading a journal"))?;
        let (num, after) = (
            int(num).map_err(sql("reading a journal"))?,
            int(after).map_err(sql("reading a journal"))?,
        );
        let rows = statement
            .query_map(params![num, after], |row| {
                Ok(Step {
                    seq: row.get::<_, i64>(0)? as u64,
                    at: row.get::<_, i64>(1)? as u64,
                    record: row.get(2)?,
                })
            })
            .map_err(sql("reading a journal"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql("reading a journal"))
    }

    fn snapshot(&mut self, num: u64) -> StoreResult<Option<NewSnapshot>> {
        let num = int(num).map_err(sql("reading a snapshot"))?;
        self.conn
            .prepare_cached("SELECT seq, module, state FROM snapshots WHERE num = ?1")
            .and_then(|mut s| {
                s.query_row(params![num], |row| {
                    Ok(NewSnapshot {
                        num: num as u64,
                        seq: row.get::<_, i64>(0)?.max(0) as u64,
                        module: row.get(1)?,
                        state: row.get(2)?,
                    })
                })
                .optional()
            })
            .map_err(sql("reading a snapshot"))
    }

    fn module(&mut self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        self.conn
            .prepare_cached("SELECT bytes FROM modules WHERE hash = ?1")
            .and_then(|mut s| s.query_row(params![hash], |row| row.get(0)).optional())
            .map_err(sql("reading a module"))
    }

    fn messages(&mut self) -> StoreResult<Vec<Message>> {
        let mut statement = self
            .conn
            .prepare("SELECT id, receiver, sender, payload, refused FROM messages ORDER BY id")
            .map_err(sql("reading messages"))?;
        let rows = statement
            .query_map([], |row| {
                Ok(Message {
                    message: NewMessage {
                        id: row.get::<_, i64>(0)? as u64,
                        receiver: row.get::<_, i64>(1)? as u64,
                        sender: row.get::<_, i64>(2)? as u64,
                        payload: row.get(3)?,
                        local: false,
                    },
                    refused: row.get(4)?,
                })
            })
            .map_err(sql("reading messages"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql("reading messages"))
    }
}
