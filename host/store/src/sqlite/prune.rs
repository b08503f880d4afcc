//! Retention on a SQLite store: which finished trees a prune may remove, and their removal
//! (`Op::Prune`), with everything of theirs.

use rusqlite::{params, Connection, Transaction};

use super::int;
use crate::{PruneCandidate, PruneFilter, State};

/// The clause that keeps the top-level workflows `filter` lets through (the index
/// `workflows_finished` holds exactly the finished top-level ones).
fn narrow(filter: &PruneFilter) -> String {
    let mut clauses = vec!["parent IS NULL AND state <> 0".to_string()];
    if let Some(state) = filter.state {
        clauses.push(format!("state = {}", state.code()));
    }
    let cancelled = crate::CANCELLED;
    match filter.cancelled {
        Some(true) => clauses.push(format!("error_kind = '{cancelled}'")),
        Some(false) => clauses.push(format!("error_kind IS NOT '{cancelled}'")),
        None => {}
    }
    clauses.join(" AND ")
}

pub(super) fn prunable(
    conn: &Connection,
    filter: &PruneFilter,
    after: (u64, u64),
    limit: usize,
) -> rusqlite::Result<Vec<PruneCandidate>> {
    let query = format!(
        "WITH RECURSIVE roots(num, finished) AS ( \
           SELECT num, finished FROM workflows WHERE {} AND finished < ?1 \
           AND (finished, num) > (?2, ?3) ORDER BY finished, num LIMIT ?4), \
         tree(root, num, state) AS ( \
           SELECT num, num, 1 FROM roots \
           UNION ALL SELECT t.root, w.num, w.state FROM workflows w JOIN tree t \
             ON w.parent = t.num WHERE w.parent IS NOT NULL) \
         SELECT r.num, r.finished, count(*), sum(t.state = 0) FROM roots r \
           JOIN tree t ON t.root = r.num GROUP BY r.num ORDER BY r.finished, r.num",
        narrow(filter)
    );
    let mut statement = conn.prepare_cached(&query)?;
    let rows = statement.query_map(
        params![
            int(filter.finished_before)?,
            int(after.0)?,
            int(after.1)?,
            i64::try_from(limit).unwrap_or(i64::MAX)
        ],
        |row| {
            Ok(PruneCandidate {
                root: row.get::<_, i64>(0)? as u64,
                finished: row.get::<_, i64>(1)?.max(0) as u64,
                workflows: row.get::<_, i64>(2)?.max(0) as u64,
                unfinished: row.get::<_, i64>(3)? > 0,
            })
        },
    )?;
    rows.collect()
}

/// Removes the trees of `roots` whose every workflow has finished, with their steps (in the
/// table and the log), snapshots, messages to them (and those they sent that were refused),
/// what they sent the host; and marks the modules no workflow left (and no schedule) uses and
/// nobody stored since `kept_before`, and removes those marked before `marked_before` that are
/// unused still.
pub(super) fn prune(
    tx: &Transaction<'_>,
    roots: &[u64],
    kept_before: u64,
    marked_before: u64,
) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS pruning (num INTEGER PRIMARY KEY); \
         DELETE FROM temp.pruning;",
    )?;
    for &root in roots {
        tx.prepare_cached(
            "WITH RECURSIVE tree(num) AS ( \
               SELECT num FROM workflows WHERE num = ?1 AND parent IS NULL AND state <> 0 \
               UNION ALL SELECT w.num FROM workflows w JOIN tree t ON w.parent = t.num \
                 WHERE w.parent IS NOT NULL) \
             INSERT OR IGNORE INTO temp.pruning (num) SELECT num FROM tree",
        )?
        .execute(params![int(root)?])?;
        let unfinished: i64 = tx
            .prepare_cached(
                "SELECT count(*) FROM workflows WHERE state = ?1 \
                 AND num IN (SELECT num FROM temp.pruning)",
            )?
            .query_row(params![State::Running.code()], |row| row.get(0))?;
        if unfinished > 0 {
            tx.execute("DELETE FROM temp.pruning", [])?;
            continue;
        }
        let modules: Vec<String> = tx
            .prepare_cached(
                "SELECT DISTINCT module FROM workflows WHERE num IN (SELECT num FROM temp.pruning)",
            )?
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for statement in [
            "DELETE FROM steps WHERE num IN (SELECT num FROM temp.pruning)",
            "DELETE FROM log WHERE num IN (SELECT num FROM temp.pruning)",
            "DELETE FROM snapshots WHERE num IN (SELECT num FROM temp.pruning)",
            "DELETE FROM outbox WHERE num IN (SELECT num FROM temp.pruning)",
            "DELETE FROM task_outcomes WHERE num IN (SELECT num FROM temp.pruning)",
            "DELETE FROM messages WHERE receiver IN (SELECT num FROM temp.pruning)",
            "DELETE FROM messages WHERE refused IS NOT NULL \
             AND sender IN (SELECT num FROM temp.pruning)",
            "DELETE FROM workflows WHERE num IN (SELECT num FROM temp.pruning)",
            "DELETE FROM temp.pruning",
        ] {
            tx.prepare_cached(statement)?.execute([])?;
        }
        // Unused now, and not stored since the cutoff: marked; it goes at a prune a while later
        // if none uses it then (a start that found it there before the mark is journaled by
        // then).
        let now = int(crate::time::now_millis())?;
        for module in modules {
            tx.prepare_cached(
                "UPDATE modules SET unused_since = ?3 WHERE hash = ?1 AND kept < ?2 \
                 AND unused_since IS NULL \
                 AND NOT EXISTS (SELECT 1 FROM workflows WHERE module = ?1) \
                 AND NOT EXISTS (SELECT 1 FROM snapshots WHERE module = ?1) \
                 AND NOT EXISTS (SELECT 1 FROM schedules WHERE module = ?1)",
            )?
            .execute(params![module, int(kept_before)?, now])?;
        }
    }
    // The modules marked a while ago and unused still go; those used again lose their mark.
    let (kept_before, marked_before) = (int(kept_before)?, int(marked_before)?);
    tx.prepare_cached(
        "UPDATE modules SET unused_since = NULL WHERE unused_since IS NOT NULL AND (kept >= ?1 \
         OR EXISTS (SELECT 1 FROM workflows WHERE module = modules.hash) \
         OR EXISTS (SELECT 1 FROM snapshots WHERE module = modules.hash) \
         OR EXISTS (SELECT 1 FROM schedules WHERE module = modules.hash))",
    )?
    .execute(params![kept_before])?;
    // The latest version of a name is kept (starts by the name run it), older ones go as any
    // module, with their names.
    tx.prepare_cached(
        "DELETE FROM modules WHERE unused_since < ?1 AND kept < ?2 \
         AND NOT EXISTS (SELECT 1 FROM workflows WHERE module = modules.hash) \
         AND NOT EXISTS (SELECT 1 FROM snapshots WHERE module = modules.hash) \
         AND NOT EXISTS (SELECT 1 FROM schedules WHERE module = modules.hash) \
         AND NOT EXISTS (SELECT 1 FROM module_names n WHERE n.hash = modules.hash \
             AND n.version = (SELECT max(version) FROM module_names l WHERE l.name = n.name))",
    )?
    .execute(params![marked_before, kept_before])?;
    tx.prepare_cached("DELETE FROM module_names WHERE hash NOT IN (SELECT hash FROM modules)")?
        .execute([])?;
    Ok(())
}
