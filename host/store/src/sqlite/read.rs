//! Reading: workflows, journals, snapshots, modules and messages, for recovery and for the
//! commands that show them.

use rusqlite::{params, OptionalExtension};

use super::int;
use super::{sql, SqliteStore};
use crate::roles::Visit;
use crate::{
    Cancel, Committed, Ending, Filter, Held, HostMessage, Journal, ModuleName, NewMessage,
    NewSnapshot, NewWorkflow, Op, Read, ScheduleRow, State, StateCounts, Step, StoreResult,
    StoredMessage, Workflow,
};

const WORKFLOW_COLUMNS: &str = "num, id, parent, module, module_name, entry, input, started, \
     state, result, error_kind, error, finished, \
     max(steps, \
         coalesce((SELECT max(seq) FROM steps s WHERE s.num = workflows.num), 0), \
         coalesce((SELECT max(seq) FROM log l WHERE l.num = workflows.num), 0)), \
     cancel, damaged, \
     (SELECT count(*) FROM messages m WHERE m.receiver = workflows.num AND m.refused IS NULL), \
     paused, run, trace";

fn module_name(row: &rusqlite::Row<'_>) -> rusqlite::Result<ModuleName> {
    Ok(ModuleName {
        name: row.get(0)?,
        version: row.get::<_, i64>(1)?.max(0) as u64,
        hash: row.get(2)?,
        at: row.get::<_, i64>(3)?.max(0) as u64,
    })
}

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
            trace: row.get(19)?,
        },
        state,
        ending: Ending::from_columns(state, row.get(9)?, row.get(10)?, row.get(11)?),
        finished: row.get::<_, Option<i64>>(12)?.map(|n| n as u64),
        steps: row.get::<_, i64>(13)? as u64,
        cancel: Cancel::from_code(row.get(14)?),
        damaged: row.get(15)?,
        unread: row.get::<_, i64>(16)?.max(0) as u64,
        owner: None,
        paused: row.get::<_, i64>(17)? != 0,
        run: row.get::<_, i64>(18)?.max(1) as u64,
    })
}

impl Journal for SqliteStore {
    fn reader(&self) -> StoreResult<Box<dyn Journal>> {
        Ok(Box::new(self.open_reader()?))
    }

    fn commit(&mut self, ops: &[Op]) -> StoreResult<Committed> {
        // A start of an id the store has is an error here (its one host checks first): every
        // start of a commit that succeeded was written.
        self.commit_ops(ops).map(|()| Committed {
            every_start_written: true,
        })
    }

    fn tidy(&mut self, all: bool) -> StoreResult<()> {
        self.move_log(all)
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
}

/// The clauses (and their values) of `filter` beyond where a workflow stands: its entry point,
/// id, start time and parent. With `by_id_index`, an id prefix is read as a range of the id
/// index; without, each row read in the order of numbers is checked (`+id`: the index is not
/// used), which is quicker when a page of them lies close (see [`prefix_near`]).
fn narrow(
    filter: &Filter,
    by_id_index: bool,
    clauses: &mut Vec<String>,
    values: &mut Vec<rusqlite::types::Value>,
) -> rusqlite::Result<()> {
    if let Some(entry) = &filter.entry {
        clauses.push("entry = ?".into());
        values.push(entry.clone().into());
    }
    if let Some(prefix) = &filter.prefix {
        // A range of the id index: the ids that start with `prefix` are those from it up to
        // the first string past all of them (UTF-8 sorts as code points do).
        let id = if by_id_index { "id" } else { "+id" };
        clauses.push(format!("{id} >= ?"));
        values.push(prefix.clone().into());
        if let Some(end) = past_prefix(prefix) {
            clauses.push(format!("{id} < ?"));
            values.push(end.into());
        }
    }
    if let Some(before) = filter.started_before {
        clauses.push("started < ?".into());
        values.push(int(before)?.into());
    }
    if let Some(after) = filter.started_after {
        clauses.push("started >= ?".into());
        values.push(int(after)?.into());
    }
    if filter.top_level {
        clauses.push("parent IS NULL".into());
    }
    if let Some(parent) = filter.parent {
        clauses.push("parent = ?".into());
        values.push(int(parent)?.into());
    }
    if let Some(held) = filter.held {
        clauses.push(
            match held {
                Held::No => "paused = 0 AND damaged IS NULL",
                Held::Paused => "paused = 1 AND damaged IS NULL",
                Held::Damaged => "damaged IS NOT NULL",
            }
            .into(),
        );
    }
    Ok(())
}

/// Workflows read in order, past a page's cursor, to see whether a page of an id prefix's
/// workflows lies close.
const NEAR: i64 = 20_000;

/// Whether the [`NEAR`] workflows after `after` hold `limit` whose ids start with `prefix`, or
/// are all there are. If so, a page of them is found soonest by reading workflows in order from
/// the cursor; if not, by reading the prefix's range of the id index and sorting it (its rows
/// may be few, or far along).
fn prefix_near(
    conn: &rusqlite::Connection,
    prefix: &str,
    after: u64,
    limit: usize,
) -> rusqlite::Result<bool> {
    let end = past_prefix(prefix);
    let (read, matched): (i64, i64) = conn.query_row(
        "SELECT count(*), coalesce(sum(id >= ?3 AND (?4 IS NULL OR id < ?4)), 0) \
         FROM (SELECT id FROM workflows WHERE num > ?1 ORDER BY num LIMIT ?2)",
        params![int(after)?, NEAR, prefix, end],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    Ok(read < NEAR || matched >= i64::try_from(limit).unwrap_or(i64::MAX))
}

/// The least string greater than every string that starts with `prefix`, if there is one: the
/// prefix up to its last character that has a next one, with that character advanced.
fn past_prefix(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

impl Read for SqliteStore {
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

    fn page(&mut self, filter: &Filter, after: u64, limit: usize) -> StoreResult<Vec<Workflow>> {
        let what = "listing workflows";
        let mut clauses = vec!["num > ?".to_string()];
        let mut values: Vec<rusqlite::types::Value> = vec![int(after).map_err(sql(what))?.into()];
        if let Some(state) = filter.state {
            clauses.push("state = ?".into());
            values.push(state.code().into());
        }
        if let Some(cancelled) = filter.cancelled {
            let test = if cancelled { "=" } else { "IS NOT" };
            let cancelled = crate::CANCELLED;
            clauses.push(format!("error_kind {test} '{cancelled}'"));
        }
        let by_id_index = match &filter.prefix {
            Some(prefix) => !prefix_near(&self.conn, prefix, after, limit).map_err(sql(what))?,
            None => true,
        };
        narrow(filter, by_id_index, &mut clauses, &mut values).map_err(sql(what))?;
        // The paused or damaged (few) through their partial index, which the planner would not
        // pick over the order of numbers alone.
        let table = match filter.held {
            Some(Held::Paused | Held::Damaged) => {
                clauses.push("state = 0 AND (paused = 1 OR damaged IS NOT NULL)".into());
                "workflows INDEXED BY workflows_held"
            }
            _ => "workflows",
        };
        values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        let query = match filter.max_bytes {
            None => format!(
                "SELECT {WORKFLOW_COLUMNS} FROM {table} WHERE {} ORDER BY num LIMIT ?",
                clauses.join(" AND ")
            ),
            // The page, cut where its inputs and results reach the budget (the sizes are read
            // from the rows' headers, not their bytes).
            Some(budget) => {
                values.push(i64::try_from(budget).unwrap_or(i64::MAX).into());
                format!(
                    "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE num IN (\
                     SELECT num FROM (SELECT num, \
                       length(input) + coalesce(length(result), 0) AS own, \
                       sum(length(input) + coalesce(length(result), 0)) OVER (ORDER BY num) AS upto \
                       FROM {table} WHERE {} ORDER BY num LIMIT ?) WHERE upto - own < ?) \
                     ORDER BY num",
                    clauses.join(" AND ")
                )
            }
        };
        let mut statement = self.conn.prepare(&query).map_err(sql(what))?;
        let rows = statement
            .query_map(rusqlite::params_from_iter(values), workflow_row)
            .map_err(sql(what))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql(what))
    }

    fn step_page(&mut self, num: u64, after: u64, limit: Option<usize>) -> StoreResult<Vec<Step>> {
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT seq, at, record FROM steps WHERE num = ?1 AND seq > ?2 \
                 UNION ALL SELECT seq, at, record FROM log WHERE num = ?1 AND seq > ?2 \
                 ORDER BY seq LIMIT ?3",
            )
            .map_err(sql("reading a journal"))?;
        let (num, after) = (
            int(num).map_err(sql("reading a journal"))?,
            int(after).map_err(sql("reading a journal"))?,
        );
        let limit = limit.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = statement
            .query_map(params![num, after, limit], |row| {
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

    fn step_sizes(&mut self, num: u64, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        self.sizes(
            "reading a journal",
            "SELECT length(record), seq FROM steps WHERE num = ?1 AND seq > ?2 \
             UNION ALL SELECT length(record), seq FROM log WHERE num = ?1 AND seq > ?2 \
             ORDER BY seq LIMIT ?3",
            (num, after, limit),
        )
    }

    fn host_message_sizes(&mut self, num: u64, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        self.sizes(
            "reading the messages to the host",
            "SELECT length(payload) FROM outbox WHERE num = ?1 AND tag > ?2 ORDER BY tag \
             LIMIT ?3",
            (num, after, limit),
        )
    }

    fn tails(&mut self, nums: &[u64], visit: Visit<'_>) -> StoreResult<()> {
        self.tails_in_one_pass(nums, visit)
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

    fn schedules(&mut self) -> StoreResult<Vec<ScheduleRow>> {
        super::schedules::all(&self.conn).map_err(sql("reading the schedules"))
    }

    fn schedule(&mut self, id: &str) -> StoreResult<Option<ScheduleRow>> {
        super::schedules::one(&self.conn, id).map_err(sql("reading a schedule"))
    }

    fn has_module(&mut self, hash: &str) -> StoreResult<bool> {
        self.conn
            .prepare_cached("SELECT 1 FROM modules WHERE hash = ?1")
            .and_then(|mut s| s.exists(params![hash]))
            .map_err(sql("reading a module"))
    }

    fn task_outcome(&mut self, num: u64, tag: u64) -> StoreResult<Option<Vec<u8>>> {
        let what = "reading a task's outcome";
        self.conn
            .prepare_cached("SELECT outcome FROM task_outcomes WHERE num = ?1 AND tag = ?2")
            .and_then(|mut s| {
                s.query_row(params![int(num)?, int(tag)?], |row| {
                    row.get::<_, Vec<u8>>(0)
                })
                .optional()
            })
            .map_err(sql(what))
    }

    fn module(&mut self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        self.conn
            .prepare_cached("SELECT bytes FROM modules WHERE hash = ?1")
            .and_then(|mut s| s.query_row(params![hash], |row| row.get(0)).optional())
            .map_err(sql("reading a module"))
    }

    fn host_messages(
        &mut self,
        num: u64,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<HostMessage>> {
        let what = "reading the messages to the host";
        let (num, after) = (int(num).map_err(sql(what))?, int(after).map_err(sql(what))?);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT tag, at, payload FROM outbox WHERE num = ?1 AND tag > ?2 ORDER BY tag \
                 LIMIT ?3",
            )
            .map_err(sql(what))?;
        let rows = statement
            .query_map(params![num, after, limit], |row| {
                Ok(HostMessage {
                    num: num as u64,
                    tag: row.get::<_, i64>(0)?.max(0) as u64,
                    at: row.get::<_, i64>(1)?.max(0) as u64,
                    payload: row.get(2)?,
                })
            })
            .map_err(sql(what))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql(what))
    }

    fn module_list(&mut self) -> StoreResult<Vec<(String, u64)>> {
        let what = "listing modules";
        let mut statement = self
            .conn
            .prepare_cached("SELECT hash, length(bytes) FROM modules ORDER BY hash")
            .map_err(sql(what))?;
        let rows = statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?.max(0) as u64,
                ))
            })
            .map_err(sql(what))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql(what))
    }

    fn module_names(&mut self) -> StoreResult<Vec<ModuleName>> {
        let what = "listing module names";
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT name, version, hash, at FROM module_names ORDER BY name, version",
            )
            .map_err(sql(what))?;
        let rows = statement.query_map([], module_name).map_err(sql(what))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql(what))
    }

    fn module_named(
        &mut self,
        name: &str,
        version: Option<u64>,
    ) -> StoreResult<Option<ModuleName>> {
        let what = "reading a module name";
        let version = version.map(int).transpose().map_err(sql(what))?;
        self.conn
            .prepare_cached(
                "SELECT name, version, hash, at FROM module_names \
                 WHERE name = ?1 AND (?2 IS NULL OR version = ?2) ORDER BY version DESC LIMIT 1",
            )
            .and_then(|mut s| s.query_row(params![name, version], module_name).optional())
            .map_err(sql(what))
    }

    fn finished_among(&mut self, nums: &[u64]) -> StoreResult<Vec<u64>> {
        let what = "reading which workflows finished";
        let mut statement = self
            .conn
            .prepare_cached("SELECT state FROM workflows WHERE num = ?1")
            .map_err(sql(what))?;
        let mut finished = Vec::new();
        for &num in nums {
            let state: Option<i64> = statement
                .query_row(params![int(num).map_err(sql(what))?], |row| row.get(0))
                .optional()
                .map_err(sql(what))?;
            if state.is_some_and(|code| State::from_code(code) != State::Running) {
                finished.push(num);
            }
        }
        Ok(finished)
    }

    fn latest_host_messages(&mut self, nums: &[u64]) -> StoreResult<Vec<(u64, u64)>> {
        let what = "reading the latest messages to the host";
        let mut statement = self
            .conn
            .prepare_cached("SELECT max(tag) FROM outbox WHERE num = ?1")
            .map_err(sql(what))?;
        let mut latest = Vec::new();
        for &num in nums {
            let tag: Option<i64> = statement
                .query_row(params![int(num).map_err(sql(what))?], |row| row.get(0))
                .map_err(sql(what))?;
            if let Some(tag) = tag {
                latest.push((num, tag.max(0) as u64));
            }
        }
        Ok(latest)
    }

    fn counts(&mut self, filter: &Filter) -> StoreResult<StateCounts> {
        let what = "counting workflows";
        // What they stand as; then, of those unfinished, the few held (a partial index's).
        let mut counts = if filter.counted_by_entry() {
            kept_counts(&self.conn, filter.entry.as_deref()).map_err(sql(what))?
        } else {
            let mut clauses = vec!["1".to_string()];
            let mut values: Vec<rusqlite::types::Value> = Vec::new();
            narrow(filter, true, &mut clauses, &mut values).map_err(sql(what))?;
            let cancelled = crate::CANCELLED;
            let query = format!(
                "SELECT state, coalesce(error_kind = '{cancelled}', 0), count(*) FROM workflows \
                 WHERE {} GROUP BY 1, 2",
                clauses.join(" AND ")
            );
            let mut statement = self.conn.prepare(&query).map_err(sql(what))?;
            let rows = statement
                .query(rusqlite::params_from_iter(values))
                .map_err(sql(what))?;
            counts_of(rows).map_err(sql(what))?
        };
        let unheld = Filter {
            held: None,
            ..filter.clone()
        };
        let mut clauses = vec!["state = 0 AND (paused = 1 OR damaged IS NOT NULL)".to_string()];
        let mut values: Vec<rusqlite::types::Value> = Vec::new();
        narrow(&unheld, true, &mut clauses, &mut values).map_err(sql(what))?;
        // Through the partial index of the held (few), which the planner would not pick alone.
        let (paused, damaged): (i64, i64) = self
            .conn
            .query_row(
                &format!(
                    "SELECT coalesce(sum(damaged IS NULL), 0), coalesce(sum(damaged IS NOT NULL), 0) \
                     FROM workflows INDEXED BY workflows_held WHERE {}",
                    clauses.join(" AND ")
                ),
                rusqlite::params_from_iter(values),
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(sql(what))?;
        counts.paused = paused.max(0) as u64;
        counts.damaged = damaged.max(0) as u64;
        Ok(counts)
    }

    fn prunable(
        &mut self,
        filter: &crate::PruneFilter,
        after: (u64, u64),
        limit: usize,
    ) -> StoreResult<Vec<crate::PruneCandidate>> {
        super::prune::prunable(&self.conn, filter, after, limit)
            .map_err(sql("finding finished workflows to remove"))
    }

    fn count_running(&mut self) -> StoreResult<u64> {
        self.conn
            .query_row(
                "SELECT count(*) FROM workflows WHERE state = 0",
                [],
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
            .map_err(sql("counting unfinished workflows"))
    }

    fn refused_from(&mut self, senders: &[u64]) -> StoreResult<Vec<StoredMessage>> {
        Ok(self
            .messages()?
            .into_iter()
            .filter(|m| m.refused.is_some() && senders.contains(&m.message.sender))
            .collect())
    }

    fn unread_from_clients(&mut self, num: u64) -> StoreResult<Vec<NewMessage>> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT id, payload FROM messages \
                 WHERE receiver = ?1 AND sender = 0 AND refused IS NULL ORDER BY id",
            )
            .map_err(sql("reading unread messages"))?;
        let rows = statement
            .query_map(
                params![int(num).map_err(sql("reading unread messages"))?],
                |row| {
                    Ok(NewMessage {
                        id: row.get::<_, i64>(0)? as u64,
                        receiver: num,
                        sender: 0,
                        payload: row.get(1)?,
                        local: false,
                    })
                },
            )
            .map_err(sql("reading unread messages"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql("reading unread messages"))
    }

    fn messages(&mut self) -> StoreResult<Vec<StoredMessage>> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT id, receiver, sender, payload, refused FROM messages \
                 WHERE (refused IS NULL AND receiver IN (SELECT num FROM workflows WHERE state = 0)) \
                 OR (refused IS NOT NULL AND sender IN (SELECT num FROM workflows WHERE state = 0)) \
                 ORDER BY id",
            )
            .map_err(sql("reading messages"))?;
        let rows = statement
            .query_map([], |row| {
                Ok(StoredMessage {
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

impl SqliteStore {
    /// The byte sizes in the first column `query` gives (`?1` a workflow, `?2` the position
    /// after which, `?3` how many), for a page that stops at its budget.
    fn sizes(
        &mut self,
        what: &str,
        query: &str,
        (num, after, limit): (u64, u64, usize),
    ) -> StoreResult<Vec<u64>> {
        let (num, after) = (int(num).map_err(sql(what))?, int(after).map_err(sql(what))?);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut statement = self.conn.prepare_cached(query).map_err(sql(what))?;
        let rows = statement
            .query_map(params![num, after, limit], |row| {
                Ok(row.get::<_, i64>(0)?.max(0) as u64)
            })
            .map_err(sql(what))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql(what))
    }
}

/// The counts the triggers keep, of one entry point or all.
fn kept_counts(conn: &rusqlite::Connection, entry: Option<&str>) -> rusqlite::Result<StateCounts> {
    let mut statement = conn.prepare_cached(
        "SELECT state, cancelled, sum(n) FROM workflow_counts \
         WHERE ?1 IS NULL OR entry = ?1 GROUP BY 1, 2",
    )?;
    let rows = statement.query(params![entry])?;
    counts_of(rows)
}

/// Counts from rows of (state, cancelled, how many).
fn counts_of(mut rows: rusqlite::Rows<'_>) -> rusqlite::Result<StateCounts> {
    let mut counts = StateCounts::default();
    while let Some(row) = rows.next()? {
        let n: i64 = row.get(2)?;
        counts.add(State::from_code(row.get(0)?), row.get(1)?, n.max(0) as u64);
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::past_prefix;

    #[test]
    fn the_end_of_a_prefix_range_is_the_least_string_past_it() {
        assert_eq!(past_prefix("order-"), Some("order.".into()));
        assert_eq!(past_prefix("a\u{10FFFF}"), Some("b".into()));
        assert_eq!(past_prefix("\u{D7FF}"), Some("\u{E000}".into()));
        assert_eq!(past_prefix("\u{10FFFF}\u{10FFFF}"), None);
        assert_eq!(past_prefix(""), None);
    }
}
