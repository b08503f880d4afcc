//! Reads: what the engine recovers from, and what the client commands show.

use tokio_postgres::{Error, Row};

use super::Conn;
use crate::{
    Cancel, Ending, Filter, Held, HostInfo, HostMessage, HostRow, ModuleName, NewMessage,
    NewSnapshot, NewWorkflow, State, StateCounts, Step, StoreError, StoreErrorKind, StoreResult,
    StoredMessage, Workflow,
};

/// A number as the store keeps it (signed), or an error for one it cannot hold.
pub(super) fn int(n: u64) -> StoreResult<i64> {
    i64::try_from(n).map_err(|_| {
        StoreError::new(
            StoreErrorKind::Invalid,
            format_args!("{n} is larger than the store can hold"),
        )
    })
}

fn uint(n: i64) -> u64 {
    n.max(0) as u64
}

/// The columns [`workflow_row`] reads, from `workflows w`.
macro_rules! workflow_columns {
    () => {
        "num, id, parent, module, module_name, entry, input, started, state, result, \
         error_kind, error, finished, \
         coalesce((SELECT max(seq) FROM steps s WHERE s.num = w.num), 0), cancel, damaged, \
         (SELECT count(*) FROM messages m WHERE m.receiver = w.num AND m.refused IS NULL), \
         owner, paused, run, trace"
    };
}

fn workflow_row(row: &Row) -> Workflow {
    let state = State::from_code(row.get::<_, i16>(8).into());
    Workflow {
        start: NewWorkflow {
            num: uint(row.get(0)),
            id: row.get(1),
            parent: row.get::<_, Option<i64>>(2).map(uint),
            module: row.get(3),
            module_name: row.get(4),
            entry: row.get(5),
            input: row.get(6),
            started: uint(row.get(7)),
            trace: row.get(20),
        },
        state,
        ending: Ending::from_columns(state, row.get(9), row.get(10), row.get(11)),
        finished: row.get::<_, Option<i64>>(12).map(uint),
        steps: uint(row.get(13)),
        cancel: Cancel::from_code(row.get::<_, i16>(14).into()),
        damaged: row.get(15),
        unread: uint(row.get(16)),
        owner: row.get::<_, Option<i64>>(17).map(uint),
        paused: row.get(18),
        run: uint(row.get(19)).max(1),
    }
}

pub(super) fn high_water(conn: &mut Conn) -> Result<(u64, u64), Error> {
    let row = conn.query_one(
        "SELECT coalesce((SELECT max(num) FROM workflows), 0), \
         greatest(coalesce((SELECT max(id) FROM messages), 0), \
                  coalesce((SELECT value FROM counters WHERE name = 'messages'), 0))",
        &[],
    )?;
    Ok((uint(row.get(0)), uint(row.get(1))))
}

pub(super) fn workflow(conn: &mut Conn, id: &str) -> Result<Option<Workflow>, Error> {
    Ok(conn
        .query_opt(
            concat!(
                "SELECT ",
                workflow_columns!(),
                " FROM workflows w WHERE id = $1"
            ),
            &[&id],
        )?
        .as_ref()
        .map(workflow_row))
}

pub(super) fn workflow_by_num(conn: &mut Conn, num: i64) -> Result<Option<Workflow>, Error> {
    Ok(conn
        .query_opt(
            concat!(
                "SELECT ",
                workflow_columns!(),
                " FROM workflows w WHERE num = $1"
            ),
            &[&num],
        )?
        .as_ref()
        .map(workflow_row))
}

pub(super) fn workflows(conn: &mut Conn, unfinished_only: bool) -> Result<Vec<Workflow>, Error> {
    Ok(conn
        .query(
            if unfinished_only {
                concat!(
                    "SELECT ",
                    workflow_columns!(),
                    " FROM workflows w WHERE state = 0 ORDER BY num"
                )
            } else {
                concat!(
                    "SELECT ",
                    workflow_columns!(),
                    " FROM workflows w ORDER BY num"
                )
            },
            &[],
        )?
        .iter()
        .map(workflow_row)
        .collect())
}

/// Up to `limit` workflows `filter` lets through, numbered after `after`, by number.
pub(super) fn page(
    conn: &mut Conn,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Workflow>, Error> {
    let state = filter.state.map(|s| s.code() as i16);
    let cancelled = filter.cancelled;
    let started_before = filter.started_before.map(|t| t.min(i64::MAX as u64) as i64);
    let started_after = filter.started_after.map(|t| t.min(i64::MAX as u64) as i64);
    // The page, cut where its inputs and results reach the budget (none: no cut).
    let budget = filter.max_bytes.map(|b| b.min(i64::MAX as u64) as i64);
    let parent = filter.parent.map(|p| p.min(i64::MAX as u64) as i64);
    Ok(conn
        .query(
            concat!(
                "SELECT ",
                workflow_columns!(),
                " FROM workflows w WHERE num IN (SELECT num FROM (\
                 SELECT num, octet_length(input) + coalesce(octet_length(result), 0) AS own, \
                 sum(octet_length(input) + coalesce(octet_length(result), 0)) \
                   OVER (ORDER BY num) AS upto \
                 FROM workflows WHERE num > $1 \
                 AND ($2::smallint IS NULL OR state = $2) \
                 AND ($3::bool IS NULL OR (coalesce(error_kind, '') = $10) = $3) \
                 AND ($4::text IS NULL OR entry = $4) \
                 AND ($5::text IS NULL OR starts_with(id, $5)) \
                 AND ($6::bigint IS NULL OR started < $6) \
                 AND ($7::bigint IS NULL OR started >= $7) \
                 AND (NOT $8 OR parent IS NULL) \
                 AND ($12::bigint IS NULL OR parent = $12) \
                 AND ($13::int2 IS NULL OR CASE $13 WHEN 0 THEN NOT paused AND damaged IS NULL \
                   WHEN 1 THEN paused AND damaged IS NULL ELSE damaged IS NOT NULL END) \
                 ORDER BY num LIMIT $9) page \
                 WHERE $11::bigint IS NULL OR upto - own < $11) \
                 ORDER BY num"
            ),
            &[
                &after,
                &state,
                &cancelled,
                &filter.entry,
                &filter.prefix,
                &started_before,
                &started_after,
                &filter.top_level,
                &limit,
                &crate::CANCELLED,
                &budget,
                &parent,
                &held_code(filter.held),
            ],
        )?
        .iter()
        .map(workflow_row)
        .collect())
}

/// A [`Held`] as the listing's query takes it.
fn held_code(held: Option<Held>) -> Option<i16> {
    held.map(|held| match held {
        Held::No => 0,
        Held::Paused => 1,
        Held::Damaged => 2,
    })
}

/// How many workflows `filter` lets through stand each way (see `Read::counts`).
pub(super) fn counts(conn: &mut Conn, filter: &Filter) -> Result<StateCounts, Error> {
    let started_before = filter.started_before.map(|t| t.min(i64::MAX as u64) as i64);
    let started_after = filter.started_after.map(|t| t.min(i64::MAX as u64) as i64);
    let parent = filter.parent.map(|p| p.min(i64::MAX as u64) as i64);
    let mut counts = if filter.counted_by_entry() {
        kept_counts(conn, filter.entry.as_deref())?
    } else {
        let rows = conn.query(
            "SELECT state, coalesce(error_kind, '') = $1, count(*) FROM workflows \
             WHERE ($2::text IS NULL OR entry = $2) \
             AND ($3::text IS NULL OR starts_with(id, $3)) \
             AND ($4::bigint IS NULL OR started < $4) \
             AND ($5::bigint IS NULL OR started >= $5) \
             AND (NOT $6 OR parent IS NULL) \
             AND ($7::bigint IS NULL OR parent = $7) \
             GROUP BY 1, 2",
            &[
                &crate::CANCELLED,
                &filter.entry,
                &filter.prefix,
                &started_before,
                &started_after,
                &filter.top_level,
                &parent,
            ],
        )?;
        counts_of(&rows)
    };
    // Of those unfinished, the few held (read through a partial index of them).
    let held = conn.query_one(
        "SELECT count(*) FILTER (WHERE damaged IS NULL), \
         count(*) FILTER (WHERE damaged IS NOT NULL) FROM workflows \
         WHERE state = 0 AND (paused OR damaged IS NOT NULL) \
         AND ($1::text IS NULL OR entry = $1) \
         AND ($2::text IS NULL OR starts_with(id, $2)) \
         AND ($3::bigint IS NULL OR started < $3) \
         AND ($4::bigint IS NULL OR started >= $4) \
         AND (NOT $5 OR parent IS NULL) \
         AND ($6::bigint IS NULL OR parent = $6)",
        &[
            &filter.entry,
            &filter.prefix,
            &started_before,
            &started_after,
            &filter.top_level,
            &parent,
        ],
    )?;
    counts.paused = held.get::<_, i64>(0).max(0) as u64;
    counts.damaged = held.get::<_, i64>(1).max(0) as u64;
    Ok(counts)
}

/// Counts from rows of (state, cancelled, how many).
fn counts_of(rows: &[Row]) -> StateCounts {
    let mut counts = StateCounts::default();
    for row in rows {
        let n: i64 = row.get(2);
        counts.add(
            State::from_code(i64::from(row.get::<_, i16>(0))),
            row.get(1),
            n.max(0) as u64,
        );
    }
    counts
}

/// The counts the triggers keep (schema version 6), of one entry point or all: the folded
/// counts plus the changes not yet folded.
fn kept_counts(conn: &mut Conn, entry: Option<&str>) -> Result<StateCounts, Error> {
    fold_counts(conn)?;
    let rows = conn.query(
        "SELECT state, cancelled, sum(n)::int8 FROM ( \
           SELECT entry, state, cancelled, n FROM workflow_counts \
           UNION ALL SELECT entry, state, cancelled, n FROM workflow_count_changes) c \
         WHERE $1::text IS NULL OR entry = $1 GROUP BY 1, 2",
        &[&entry],
    )?;
    Ok(counts_of(&rows))
}

/// The advisory lock a fold of the counts takes ("wfcounts" in ASCII).
const FOLD_LOCK: i64 = 0x7766_636f_756e_7473;

/// Folds the count changes written so far into `workflow_counts`, unless another reader is
/// folding them (then they are read as changes). In a transaction of its own.
pub(super) fn fold_counts(conn: &mut Conn) -> Result<(), Error> {
    // One statement, so one transaction: the lock is let go at its end.
    conn.query(
        "WITH folding AS (SELECT pg_try_advisory_xact_lock($1) AS mine), \
         moved AS (DELETE FROM workflow_count_changes WHERE (SELECT mine FROM folding) \
           RETURNING entry, state, cancelled, n), \
         summed AS (SELECT entry, state, cancelled, sum(n)::int8 AS n FROM moved \
           GROUP BY 1, 2, 3) \
         INSERT INTO workflow_counts AS c (entry, state, cancelled, n) \
           SELECT entry, state, cancelled, n FROM summed ORDER BY 1, 2, 3 \
         ON CONFLICT (entry, state, cancelled) DO UPDATE SET n = c.n + excluded.n",
        &[&FOLD_LOCK],
    )
    .map(drop)
}

/// See `Read::prunable`.
pub(super) fn prunable(
    conn: &mut Conn,
    filter: &crate::PruneFilter,
    after: (u64, u64),
    limit: usize,
) -> Result<Vec<crate::PruneCandidate>, Error> {
    let clamp = |t: u64| t.min(i64::MAX as u64) as i64;
    let state = filter.state.map(|s| s.code() as i16);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn.query(
        "WITH RECURSIVE roots(num, finished) AS ( \
           SELECT num, finished FROM workflows WHERE parent IS NULL AND state <> 0 \
           AND finished < $1 AND (finished, num) > ($2, $3) \
           AND ($4::int2 IS NULL OR state = $4) \
           AND ($5::bool IS NULL OR (coalesce(error_kind, '') = $6) = $5) \
           ORDER BY finished, num LIMIT $7), \
         tree(root, num, state) AS ( \
           SELECT num, num, 1::int2 FROM roots \
           UNION ALL SELECT t.root, w.num, w.state FROM workflows w JOIN tree t \
             ON w.parent = t.num WHERE w.parent IS NOT NULL) \
         SELECT r.num, r.finished, count(*), count(*) FILTER (WHERE t.state = 0) FROM roots r \
           JOIN tree t ON t.root = r.num GROUP BY r.num, r.finished ORDER BY r.finished, r.num",
        &[
            &clamp(filter.finished_before),
            &clamp(after.0),
            &clamp(after.1),
            &state,
            &filter.cancelled,
            &crate::CANCELLED,
            &limit,
        ],
    )?;
    Ok(rows
        .iter()
        .map(|row| crate::PruneCandidate {
            root: uint(row.get(0)),
            finished: uint(row.get(1)),
            workflows: uint(row.get(2)),
            unfinished: row.get::<_, i64>(3) > 0,
        })
        .collect())
}

pub(super) fn steps(
    conn: &mut Conn,
    num: i64,
    after: i64,
    limit: Option<i64>,
) -> Result<Vec<Step>, Error> {
    Ok(conn
        .query(
            "SELECT seq, at, record FROM steps WHERE num = $1 AND seq > $2 ORDER BY seq \
             LIMIT $3",
            &[&num, &after, &limit],
        )?
        .iter()
        .map(|row| Step {
            seq: uint(row.get(0)),
            at: uint(row.get(1)),
            record: row.get(2),
        })
        .collect())
}

pub(super) fn snapshot(conn: &mut Conn, num: i64) -> Result<Option<NewSnapshot>, Error> {
    Ok(conn
        .query_opt(
            "SELECT seq, module, state FROM snapshots WHERE num = $1",
            &[&num],
        )?
        .map(|row| NewSnapshot {
            num: uint(num),
            seq: uint(row.get(0)),
            module: row.get(1),
            state: row.get(2),
        }))
}

pub(super) fn module(conn: &mut Conn, hash: &str) -> Result<Option<Vec<u8>>, Error> {
    Ok(conn
        .query_opt("SELECT bytes FROM modules WHERE hash = $1", &[&hash])?
        .map(|row| row.get(0)))
}

pub(super) fn host_messages(
    conn: &mut Conn,
    num: i64,
    after: i64,
    limit: i64,
) -> Result<Vec<HostMessage>, Error> {
    Ok(conn
        .query(
            "SELECT tag, at, payload FROM outbox WHERE num = $1 AND tag > $2 ORDER BY tag \
             LIMIT $3",
            &[&num, &after, &limit],
        )?
        .iter()
        .map(|row| HostMessage {
            num: uint(num),
            tag: uint(row.get(0)),
            at: uint(row.get(1)),
            payload: row.get(2),
        })
        .collect())
}

pub(super) fn host_info(conn: &mut Conn, id: i64) -> Result<Option<HostInfo>, Error> {
    Ok(conn
        .query_opt(
            "SELECT id, name, NOT dead AND NOT client AND lease_until > now() FROM hosts \
             WHERE id = $1",
            &[&id],
        )?
        .map(|row| HostInfo {
            id: uint(row.get(0)),
            name: row.get(1),
            alive: row.get::<_, Option<bool>>(2).unwrap_or(false),
        }))
}

pub(super) fn hosts(conn: &mut Conn) -> Result<Vec<HostRow>, Error> {
    Ok(conn
        .query(
            "SELECT h.id, h.name, NOT h.dead AND h.lease_until > now(), \
                    (extract(epoch FROM h.lease_until) * 1000)::BIGINT, \
                    (SELECT count(*) FROM workflows w WHERE w.owner = h.id AND w.state = 0) AS owned \
             FROM hosts h WHERE NOT h.client \
             AND ((NOT h.dead AND h.lease_until > now()) \
                  OR EXISTS (SELECT 1 FROM workflows w WHERE w.owner = h.id AND w.state = 0)) \
             ORDER BY h.id",
            &[],
        )?
        .iter()
        .map(|row| HostRow {
            info: HostInfo {
                id: uint(row.get(0)),
                name: row.get(1),
                alive: row.get::<_, Option<bool>>(2).unwrap_or(false),
            },
            lease_until: row.get::<_, Option<i64>>(3).map(uint),
            workflows: uint(row.get(4)),
        })
        .collect())
}

/// The byte sizes `query` gives (`$1` a workflow, `$2` the position after which, `$3` how many),
/// for a page that stops at its budget: the steps' records, or the messages to the host.
pub(super) fn sizes(
    conn: &mut Conn,
    query: &'static str,
    num: i64,
    after: i64,
    limit: i64,
) -> Result<Vec<u64>, Error> {
    Ok(conn
        .query(query, &[&num, &after, &limit])?
        .iter()
        .map(|row| uint(row.get(0)))
        .collect())
}

pub(super) fn module_list(conn: &mut Conn) -> Result<Vec<(String, u64)>, Error> {
    Ok(conn
        .query(
            "SELECT hash, octet_length(bytes)::BIGINT FROM modules ORDER BY hash",
            &[],
        )?
        .iter()
        .map(|row| (row.get(0), uint(row.get(1))))
        .collect())
}

fn module_name(row: &Row) -> ModuleName {
    ModuleName {
        name: row.get(0),
        version: uint(row.get(1)),
        hash: row.get(2),
        at: uint(row.get(3)),
    }
}

pub(super) fn module_names(conn: &mut Conn) -> Result<Vec<ModuleName>, Error> {
    Ok(conn
        .query(
            "SELECT name, version, hash, at FROM module_names ORDER BY name, version",
            &[],
        )?
        .iter()
        .map(module_name)
        .collect())
}

pub(super) fn module_named(
    conn: &mut Conn,
    name: &str,
    version: Option<i64>,
) -> Result<Option<ModuleName>, Error> {
    Ok(conn
        .query_opt(
            "SELECT name, version, hash, at FROM module_names \
             WHERE name = $1 AND ($2::int8 IS NULL OR version = $2) ORDER BY version DESC LIMIT 1",
            &[&name, &version],
        )?
        .as_ref()
        .map(module_name))
}

pub(super) fn latest_host_messages(
    conn: &mut Conn,
    nums: &[i64],
) -> Result<Vec<(u64, u64)>, Error> {
    Ok(conn
        .query(
            "SELECT num, max(tag) FROM outbox WHERE num = ANY($1) GROUP BY num",
            &[&nums],
        )?
        .iter()
        .map(|row| (uint(row.get(0)), uint(row.get(1))))
        .collect())
}

pub(super) fn finished_among(conn: &mut Conn, nums: &[i64]) -> Result<Vec<u64>, Error> {
    Ok(conn
        .query(
            "SELECT num FROM workflows WHERE num = ANY($1) AND state <> 0",
            &[&nums],
        )?
        .iter()
        .map(|row| uint(row.get(0)))
        .collect())
}

pub(super) fn messages(conn: &mut Conn) -> Result<Vec<StoredMessage>, Error> {
    Ok(conn
        .query(
            "SELECT id, receiver, sender, payload, refused FROM messages \
             WHERE (refused IS NULL AND receiver IN (SELECT num FROM workflows WHERE state = 0)) \
             OR (refused IS NOT NULL AND sender IN (SELECT num FROM workflows WHERE state = 0)) \
             ORDER BY id",
            &[],
        )?
        .iter()
        .map(|row| StoredMessage {
            message: NewMessage {
                id: uint(row.get(0)),
                receiver: uint(row.get(1)),
                sender: uint(row.get(2)),
                payload: row.get(3),
                local: false,
            },
            refused: row.get(4),
        })
        .collect())
}
