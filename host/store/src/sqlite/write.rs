//! Writing: a batch of ops in one transaction, and moving the log of steps into place.

use std::collections::HashSet;

use rusqlite::params;

use super::{int, SqliteStore, LOG_BYTES, LOG_STEPS};
use crate::StoreResult;
use crate::{Ending, NewMessage, NewStep, NewWorkflow, Op, Reset, State, StoreError};

/// Writes `op`; `elided` are the messages sent and taken within this transaction, neither
/// written nor deleted.
fn write(tx: &rusqlite::Transaction<'_>, op: &Op, elided: &HashSet<u64>) -> rusqlite::Result<()> {
    match op {
        // Stored again, a module's time moves on (a prune keeps what was stored after its
        // cutoff); its bytes never change (they are its hash's).
        Op::Module { hash, bytes } => {
            tx.prepare_cached(
                "INSERT INTO modules (hash, bytes, kept) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (hash) DO UPDATE SET kept = excluded.kept, unused_since = NULL",
            )?
            .execute(params![hash, &bytes[..], int(crate::time::now_millis())?])?;
        }
        Op::NameModule { name, hash, at } => {
            tx.prepare_cached(
                "INSERT INTO module_names (name, version, hash, at) \
                 SELECT ?1, coalesce(max(version), 0) + 1, ?2, ?3 FROM module_names WHERE name = ?1 \
                 HAVING coalesce((SELECT hash FROM module_names WHERE name = ?1 \
                                  ORDER BY version DESC LIMIT 1), '') <> ?2",
            )?
            .execute(params![name, hash, int(*at)?])?;
        }
        Op::TaskOutcome { num, tag, outcome } => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO task_outcomes (num, tag, outcome) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![int(*num)?, int(*tag)?, outcome])?;
        }
        // One host writes a SQLite store: its starts of one id do not race.
        Op::Start(w) | Op::StartOnce(w) => write_start(tx, w)?,
        Op::Step(step) => write_step(tx, step, elided)?,
        Op::Message(message) => {
            if !elided.contains(&message.id) {
                write_message(tx, message)?;
            }
        }
        Op::Refused { id, error } => {
            tx.prepare_cached("UPDATE messages SET refused = ?2 WHERE id = ?1")?
                .execute(params![int(*id)?, error])?;
        }
        Op::End { num, ending, at } => write_end(tx, *num, ending, *at)?,
        Op::Cancel { num } => {
            tx.prepare_cached("UPDATE workflows SET cancel = 1 WHERE num = ?1 AND cancel = 0")?
                .execute(params![int(*num)?])?;
        }
        Op::HostMessage(message) => {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO outbox (num, tag, at, payload) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                int(message.num)?,
                int(message.tag)?,
                int(message.at)?,
                message.payload
            ])?;
        }
        Op::Prune {
            roots,
            kept_before,
            marked_before,
        } => super::prune::prune(tx, roots, *kept_before, *marked_before)?,
        Op::Pause { num, paused } => {
            tx.prepare_cached("UPDATE workflows SET paused = ?2 WHERE num = ?1 AND state = 0")?
                .execute(params![int(*num)?, i64::from(*paused)])?;
        }
        Op::Upgrade {
            num,
            from,
            to,
            steps,
            // One host writes a SQLite store: no other runs the workflow.
            unowned: _,
        } => {
            tx.prepare_cached(
                // Its steps are in `steps`, or still in `log` (`move_log`).
                "UPDATE workflows SET module = ?3 WHERE num = ?1 AND state = 0 AND module = ?2 \
                 AND max((SELECT COALESCE(MAX(seq), 0) FROM steps WHERE num = ?1), \
                         (SELECT COALESCE(MAX(seq), 0) FROM log WHERE num = ?1)) = ?4",
            )?
            .execute(params![int(*num)?, from, to, int(*steps)?])?;
        }
        Op::PutSchedule(_)
        | Op::DeleteSchedule { .. }
        | Op::PauseSchedule { .. }
        | Op::AdvanceSchedule(_) => super::schedules::write(tx, op)?,
        Op::Reset(reset) => write_reset(tx, reset, elided)?,
        Op::Damaged { num, why } => {
            tx.prepare_cached("UPDATE workflows SET damaged = ?2 WHERE num = ?1")?
                .execute(params![int(*num)?, why])?;
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

fn write_start(tx: &rusqlite::Transaction<'_>, w: &NewWorkflow) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO workflows (num, id, parent, module, module_name, entry, input, \
         started, trace) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        int(w.num)?,
        w.id,
        w.parent.map(int).transpose()?,
        w.module,
        w.module_name,
        w.entry,
        w.input,
        int(w.started)?,
        w.trace
    ])?;
    Ok(())
}

/// Writes a reset whole, or nothing when its id no longer names the finished run it resets.
fn write_reset(
    tx: &rusqlite::Transaction<'_>,
    reset: &Reset,
    elided: &HashSet<u64>,
) -> rusqlite::Result<()> {
    // The run before is the id's, finished: only then does anything change.
    let current = tx
        .prepare_cached("SELECT 1 FROM workflows WHERE num = ?1 AND id = ?2 AND state <> 0")?
        .exists(params![int(reset.from)?, reset.id])?;
    if !current {
        return Ok(());
    }
    for (num, id) in &reset.renamed {
        tx.prepare_cached("UPDATE workflows SET id = ?2 WHERE num = ?1")?
            .execute(params![int(*num)?, id])?;
    }
    write_start(tx, &reset.workflow)?;
    tx.prepare_cached("UPDATE workflows SET run = ?2 WHERE num = ?1")?
        .execute(params![int(reset.workflow.num)?, int(reset.run)?])?;
    for step in &reset.steps {
        write_step(tx, step, elided)?;
    }
    // Messages the run before never read are the new run's, numbered again after those it
    // took (`messages`), so that they keep their order.
    for id in &reset.dropped {
        tx.prepare_cached("DELETE FROM messages WHERE id = ?1 AND receiver = ?2")?
            .execute(params![int(*id)?, int(reset.from)?])?;
    }
    for message in &reset.messages {
        write_message(tx, message)?;
    }
    Ok(())
}

/// Appends a step to the log; the messages it took go (but `elided` ones, never written), and
/// a cancel it took is marked taken.
fn write_step(
    tx: &rusqlite::Transaction<'_>,
    step: &NewStep,
    elided: &HashSet<u64>,
) -> rusqlite::Result<()> {
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
                "step {} of workflow {} is in the store already (does another host write to \
                 this store?)",
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
    // The outcomes it took (or the calls it gave up) are its journal's now.
    for tag in &step.calls_done {
        tx.prepare_cached("DELETE FROM task_outcomes WHERE num = ?1 AND tag = ?2")?
            .execute(params![int(step.num)?, int(*tag)?])?;
    }
    Ok(())
}

fn write_message(tx: &rusqlite::Transaction<'_>, message: &NewMessage) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO messages (id, receiver, sender, payload) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        int(message.id)?,
        int(message.receiver)?,
        int(message.sender)?,
        message.payload
    ])?;
    Ok(())
}

/// Ends workflow `num` (once: a second end changes nothing) and drops its snapshot.
fn write_end(
    tx: &rusqlite::Transaction<'_>,
    num: u64,
    ending: &Ending,
    at: u64,
) -> rusqlite::Result<()> {
    let mut update = tx.prepare_cached(
        "UPDATE workflows SET state = ?2, result = ?3, error_kind = ?4, error = ?5, \
         finished = ?6 WHERE num = ?1 AND state = 0",
    )?;
    match ending {
        Ending::Done(result) => update.execute(params![
            int(num)?,
            State::Done.code(),
            result,
            None::<String>,
            None::<String>,
            int(at)?
        ])?,
        Ending::Failed { kind, message } => update.execute(params![
            int(num)?,
            State::Failed.code(),
            None::<Vec<u8>>,
            kind,
            message,
            int(at)?
        ])?,
    };
    // Its snapshot is of no use now, nor outcomes of calls it never took. Messages it never
    // read stay, counted as unread: they were acknowledged to whoever sent them.
    tx.prepare_cached("DELETE FROM snapshots WHERE num = ?1")?
        .execute(params![int(num)?])?;
    tx.prepare_cached("DELETE FROM task_outcomes WHERE num = ?1")?
        .execute(params![int(num)?])?;
    Ok(())
}

impl SqliteStore {
    pub(super) fn commit_ops(&mut self, ops: &[Op]) -> StoreResult<()> {
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
            StoreError::new(
                super::kind_of(&e),
                format_args!("could not write to the store {path}: {why}"),
            )
        };
        let (elided, last_message) = crate::ops::elided(ops);
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
        if ops.iter().any(|op| matches!(op, Op::Prune { .. })) {
            // Gives the file back what the prune freed, a bounded part at a time (a store
            // made before incremental vacuuming keeps its free pages for reuse instead).
            self.conn
                .execute_batch("PRAGMA incremental_vacuum(4096);")
                .map_err(failed)?;
        }
        self.logged.0 += logged.0;
        self.logged.1 += logged.1;
        Ok(())
    }

    pub(super) fn move_log(&mut self, all: bool) -> StoreResult<()> {
        let (steps, bytes) = self.logged;
        if steps == 0 || (!all && steps < LOG_STEPS && bytes < LOG_BYTES) {
            return Ok(());
        }
        let path = self.path.display().to_string();
        let failed = |e: rusqlite::Error| {
            StoreError::new(
                super::kind_of(&e),
                format_args!("could not move the log of steps into place in the store {path}: {e}"),
            )
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
}
