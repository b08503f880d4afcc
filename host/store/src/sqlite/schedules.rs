//! The `schedules` table of a SQLite store: read by anyone, written by the host that holds the
//! file, through its journal's writer.

use rusqlite::{params, OptionalExtension, Row, Transaction};

use crate::time::{stored_time, time_read};
use crate::{Op, ScheduleAdvance, ScheduleRow};

const COLUMNS: &str = "id, spec, module, module_name, entry, input, overlap, catch_up, \
    jitter_ms, paused, next_fire, last_workflow, buffered, fired, created";

fn row(r: &Row<'_>) -> rusqlite::Result<ScheduleRow> {
    Ok(ScheduleRow {
        id: r.get(0)?,
        spec: r.get(1)?,
        module: r.get(2)?,
        module_name: r.get(3)?,
        entry: r.get(4)?,
        input: r.get(5)?,
        overlap: r.get(6)?,
        catch_up: r.get(7)?,
        jitter_ms: time_read(r.get(8)?),
        paused: r.get::<_, i64>(9)? != 0,
        next_fire: time_read(r.get(10)?),
        last_workflow: r.get(11)?,
        buffered: r.get::<_, Option<i64>>(12)?.map(time_read),
        fired: time_read(r.get(13)?),
        created: time_read(r.get(14)?),
    })
}

/// Every schedule, by id.
pub(super) fn all(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<ScheduleRow>> {
    let mut statement =
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM schedules ORDER BY id"))?;
    let rows = statement.query_map([], row)?;
    rows.collect()
}

/// Schedule `id`.
pub(super) fn one(conn: &rusqlite::Connection, id: &str) -> rusqlite::Result<Option<ScheduleRow>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE id = ?1"))?
        .query_row([id], row)
        .optional()
}

/// Writes a schedule op (one of `PutSchedule`, `DeleteSchedule`, `PauseSchedule`,
/// `AdvanceSchedule`).
pub(super) fn write(tx: &Transaction<'_>, op: &Op) -> rusqlite::Result<()> {
    match op {
        Op::PutSchedule(s) => {
            tx.prepare_cached(&format!(
                "INSERT OR IGNORE INTO schedules ({COLUMNS}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
            ))?
            .execute(params![
                s.id,
                s.spec,
                s.module,
                s.module_name,
                s.entry,
                s.input,
                s.overlap,
                s.catch_up,
                stored_time(s.jitter_ms),
                i64::from(s.paused),
                stored_time(s.next_fire),
                s.last_workflow,
                s.buffered.map(stored_time),
                stored_time(s.fired),
                stored_time(s.created),
            ])?;
        }
        Op::DeleteSchedule { id } => {
            tx.prepare_cached("DELETE FROM schedules WHERE id = ?1")?
                .execute([id])?;
        }
        Op::PauseSchedule {
            id,
            paused,
            next_fire,
        } => {
            tx.prepare_cached(
                "UPDATE schedules SET paused = ?2, next_fire = CASE WHEN ?2 THEN next_fire \
                 ELSE ?3 END WHERE id = ?1",
            )?
            .execute(params![id, i64::from(*paused), stored_time(*next_fire)])?;
        }
        Op::AdvanceSchedule(ScheduleAdvance {
            id,
            from,
            from_buffered,
            next_fire,
            last_workflow,
            buffered,
            started,
        }) => {
            tx.prepare_cached(
                "UPDATE schedules SET next_fire = ?3, \
                 last_workflow = coalesce(?4, last_workflow), buffered = ?5, \
                 fired = fired + ?6 WHERE id = ?1 AND next_fire = ?2 AND buffered IS ?7 \
                 AND paused = 0",
            )?
            .execute(params![
                id,
                stored_time(*from),
                stored_time(*next_fire),
                last_workflow,
                buffered.map(stored_time),
                stored_time(*started),
                from_buffered.map(stored_time),
            ])?;
        }
        _ => {}
    }
    Ok(())
}
