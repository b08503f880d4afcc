//! The `schedules` table of a PostgreSQL store: read and written by any host or client, on its
//! own connection (a schedule's firings are decided by the store: a workflow id each, and a
//! conditional move of the schedule's next firing).

use tokio_postgres::Row;

use super::{Conn, Error, PgStore};
use crate::time::{stored_time, time_read};
use crate::{Op, ScheduleAdvance, ScheduleRow, StoreResult};

/// The columns, in the order `row` reads them.
macro_rules! columns {
    () => {
        "id, spec, module, module_name, entry, input, overlap, catch_up, jitter_ms, paused, \
         next_fire, last_workflow, buffered, fired, created"
    };
}

fn row(r: &Row) -> ScheduleRow {
    ScheduleRow {
        id: r.get(0),
        spec: r.get(1),
        module: r.get(2),
        module_name: r.get(3),
        entry: r.get(4),
        input: r.get(5),
        overlap: r.get(6),
        catch_up: r.get(7),
        jitter_ms: time_read(r.get(8)),
        paused: r.get(9),
        next_fire: time_read(r.get(10)),
        last_workflow: r.get(11),
        buffered: r.get::<_, Option<i64>>(12).map(time_read),
        fired: time_read(r.get(13)),
        created: time_read(r.get(14)),
    }
}

fn apply(conn: &mut Conn, op: &Op) -> Result<bool, Error> {
    let changed = match op {
        Op::PutSchedule(s) => conn.query(
            concat!(
                "INSERT INTO schedules (",
                columns!(),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (id) DO NOTHING RETURNING id"
            ),
            &[
                &s.id,
                &s.spec,
                &s.module,
                &s.module_name,
                &s.entry,
                &s.input,
                &s.overlap,
                &s.catch_up,
                &stored_time(s.jitter_ms),
                &s.paused,
                &stored_time(s.next_fire),
                &s.last_workflow,
                &s.buffered.map(stored_time),
                &stored_time(s.fired),
                &stored_time(s.created),
            ],
        )?,
        Op::DeleteSchedule { id } => {
            conn.query("DELETE FROM schedules WHERE id = $1 RETURNING id", &[id])?
        }
        Op::PauseSchedule {
            id,
            paused,
            next_fire,
        } => conn.query(
            "UPDATE schedules SET paused = $2, next_fire = CASE WHEN $2 THEN next_fire \
             ELSE $3 END WHERE id = $1 AND paused <> $2 RETURNING id",
            &[id, paused, &stored_time(*next_fire)],
        )?,
        Op::AdvanceSchedule(ScheduleAdvance {
            id,
            from,
            from_buffered,
            next_fire,
            last_workflow,
            buffered,
            started,
        }) => conn.query(
            "UPDATE schedules SET next_fire = $3, last_workflow = coalesce($4, last_workflow), \
             buffered = $5, fired = fired + $6 WHERE id = $1 AND next_fire = $2 \
             AND buffered IS NOT DISTINCT FROM $7 AND NOT paused RETURNING id",
            &[
                id,
                &stored_time(*from),
                &stored_time(*next_fire),
                last_workflow,
                &buffered.map(stored_time),
                &stored_time(*started),
                &from_buffered.map(stored_time),
            ],
        )?,
        _ => Vec::new(),
    };
    Ok(!changed.is_empty())
}

impl PgStore {
    pub(super) fn schedules_all(&mut self) -> StoreResult<Vec<ScheduleRow>> {
        self.read("reading the schedules", |conn| {
            Ok(conn
                .query(
                    concat!("SELECT ", columns!(), " FROM schedules ORDER BY id"),
                    &[],
                )?
                .iter()
                .map(row)
                .collect())
        })
    }

    pub(super) fn schedule_one(&mut self, id: &str) -> StoreResult<Option<ScheduleRow>> {
        self.read("reading a schedule", |conn| {
            Ok(conn
                .query_opt(
                    concat!("SELECT ", columns!(), " FROM schedules WHERE id = $1"),
                    &[&id],
                )?
                .as_ref()
                .map(row))
        })
    }

    pub(super) fn schedule_op(&mut self, op: &Op) -> StoreResult<bool> {
        self.transaction("writing a schedule", super::READ_PATIENCE, |conn| {
            apply(conn, op)
        })
    }
}
