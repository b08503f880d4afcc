//! Recovery's read of every journal it needs, in one pass: the unfinished workflows' snapshots
//! and their steps after them, each read in workflow order through the index of unfinished
//! workflows and merged, rather than two queries per workflow.

use std::iter::Peekable;

use super::{sql, SqliteStore};
use crate::roles::Visit;
use crate::{NewSnapshot, Step, StoreResult};

/// The snapshots of the unfinished workflows, by number.
const SNAPSHOTS: &str = "SELECT w.num, s.seq, s.module, s.state FROM workflows w \
     JOIN snapshots s ON s.num = w.num WHERE w.state = 0 ORDER BY w.num";

/// The steps of the unfinished workflows after their snapshots, by number and position: those
/// moved into `steps`, and those still in the log (`{table}`).
fn tail_query(table: &str) -> String {
    format!(
        "SELECT w.num, t.seq, t.at, t.record FROM workflows w \
         JOIN {table} t ON t.num = w.num \
         AND t.seq > coalesce((SELECT seq FROM snapshots n WHERE n.num = w.num), 0) \
         WHERE w.state = 0 ORDER BY w.num, t.seq"
    )
}

/// The rows of `iter` for workflow `num`, those of earlier workflows skipped.
fn take_for<T, I>(iter: &mut Peekable<I>, num: u64, of: impl Fn(&T) -> u64) -> StoreResult<Vec<T>>
where
    I: Iterator<Item = StoreResult<T>>,
{
    let mut taken = Vec::new();
    loop {
        match iter.peek() {
            Some(Ok(row)) if of(row) < num => {
                iter.next();
            }
            Some(Ok(row)) if of(row) == num => {
                if let Some(row) = iter.next() {
                    taken.push(row?);
                }
            }
            Some(Err(_)) => {
                if let Some(Err(error)) = iter.next() {
                    return Err(error);
                }
            }
            _ => return Ok(taken),
        }
    }
}

impl SqliteStore {
    /// [`Read::tails`](crate::Read::tails) in one pass.
    pub(super) fn tails_in_one_pass(&mut self, nums: &[u64], visit: Visit<'_>) -> StoreResult<()> {
        let what = "reading the journals to recover";
        // One read transaction: the three scans see one state of the store, whatever the
        // writer commits meanwhile (moving the log into `steps`, say).
        let read = self.conn.unchecked_transaction().map_err(sql(what))?;
        let mut snapshots = read.prepare(SNAPSHOTS).map_err(sql(what))?;
        let mut snapshots = snapshots
            .query_map([], |row| {
                Ok(NewSnapshot {
                    num: row.get::<_, i64>(0)? as u64,
                    seq: row.get::<_, i64>(1)?.max(0) as u64,
                    module: row.get(2)?,
                    state: row.get(3)?,
                })
            })
            .map_err(sql(what))?
            .map(|row| row.map_err(sql(what)))
            .peekable();
        let step = |row: &rusqlite::Row<'_>| {
            Ok((
                row.get::<_, i64>(0)? as u64,
                Step {
                    seq: row.get::<_, i64>(1)? as u64,
                    at: row.get::<_, i64>(2)? as u64,
                    record: row.get(3)?,
                },
            ))
        };
        let mut moved = read.prepare(&tail_query("steps")).map_err(sql(what))?;
        let mut moved = moved
            .query_map([], step)
            .map_err(sql(what))?
            .map(|row| row.map_err(sql(what)))
            .peekable();
        let mut logged = read.prepare(&tail_query("log")).map_err(sql(what))?;
        let mut logged = logged
            .query_map([], step)
            .map_err(sql(what))?
            .map(|row| row.map_err(sql(what)))
            .peekable();
        for &num in nums {
            let snapshot = take_for(&mut snapshots, num, |s: &NewSnapshot| s.num)?.pop();
            let mut steps: Vec<Step> = take_for(&mut moved, num, |s: &(u64, Step)| s.0)?
                .into_iter()
                .map(|(_, step)| step)
                .collect();
            let newer = take_for(&mut logged, num, |s: &(u64, Step)| s.0)?;
            if !newer.is_empty() {
                steps.extend(newer.into_iter().map(|(_, step)| step));
                steps.sort_by_key(|step| step.seq);
            }
            visit(num, snapshot, steps)?;
        }
        Ok(())
    }
}
