//! The statements a commit is written with, prepared once a connection.

use tokio_postgres::{Error, Statement};

use super::super::Conn;

/// Writes a segment's starts. A workflow's tree is its nearest ancestor's outside the batch
/// (whose row exists), or its own.
macro_rules! starts {
    () => {
        "INSERT INTO workflows (num, id, parent, module, module_name, entry, input, \
     started, root, owner, trace) \
     SELECT t.num, t.id, t.parent, t.module, t.module_name, t.entry, t.input, \
     t.started, CASE WHEN t.root_of = t.num THEN t.num ELSE \
     coalesce((SELECT w.root FROM workflows w WHERE w.num = t.root_of), t.root_of) \
     END, $10, t.trace \
     FROM unnest($1::int8[], $2::text[], $3::int8[], $4::text[], $5::text[], \
     $6::text[], $7::bytea[], $8::int8[], $9::int8[], $11::text[]) \
     AS t(num, id, parent, module, module_name, entry, input, started, root_of, trace)"
    };
}

const STARTS: &str = starts!();
/// The starts that give way to a workflow of the same id.
const STARTS_ONCE: &str = concat!(starts!(), " ON CONFLICT (id) DO NOTHING");

pub(super) struct Statements {
    pub(super) begin: Statement,
    pub(super) rollback: Statement,
    pub(super) mark: Statement,
    pub(super) commit: Statement,
    pub(super) modules: Statement,
    pub(super) starts: Statement,
    pub(super) starts_once: Statement,
    pub(super) messages: Statement,
    pub(super) steps: Statement,
    pub(super) took_cancel: Statement,
    pub(super) consumed: Statement,
    pub(super) calls_done: Statement,
    pub(super) snapshots: Statement,
    pub(super) ends: Statement,
    pub(super) cancel: Statement,
    pub(super) refused: Statement,
    pub(super) damaged: Statement,
    pub(super) pause: Statement,
    pub(super) upgrade: Statement,
    pub(super) prune: Statement,
    pub(super) prune_modules: Statement,
    pub(super) outbox: Statement,
    pub(super) counter: Statement,
}

impl Statements {
    pub(super) fn prepare(conn: &mut Conn) -> Result<Statements, Error> {
        Ok(Statements {
            begin: conn.prepare("BEGIN")?,
            rollback: conn.prepare("ROLLBACK")?,
            // Fails the transaction unless the host is alive (its lease holds) or a client.
            mark: conn.prepare("SELECT mark($1, $2)")?,
            commit: conn.prepare("COMMIT")?,
            // Stored again, a module's time moves on (a prune keeps what was stored after its
            // cutoff); its bytes never change (they are its hash's).
            modules: conn.prepare(
                "INSERT INTO modules (hash, bytes, kept) \
                 SELECT h, b, (extract(epoch FROM now()) * 1000)::int8 \
                 FROM unnest($1::text[], $2::bytea[]) AS t(h, b) \
                 ON CONFLICT (hash) DO UPDATE SET kept = excluded.kept, unused_since = NULL",
            )?,
            starts: conn.prepare(STARTS)?,
            starts_once: conn.prepare(STARTS_ONCE)?,
            // The writing host has the message in memory (delivered, or to be, if it runs the
            // receiver); the receiver's owner takes it otherwise.
            messages: conn.prepare(
                "INSERT INTO messages (id, receiver, sender, payload, delivered_to) \
                 SELECT t.id, t.receiver, t.sender, t.payload, CASE WHEN t.local THEN $5::int8 END \
                 FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::bytea[], $6::bool[]) \
                 AS t(id, receiver, sender, payload, local)",
            )?,
            steps: conn.prepare(
                "INSERT INTO steps (num, seq, at, record) \
                 SELECT * FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::bytea[])",
            )?,
            took_cancel: conn
                .prepare("UPDATE workflows SET cancel = 2 WHERE num = ANY($1::int8[])")?,
            consumed: conn.prepare("DELETE FROM messages WHERE id = ANY($1::int8[])")?,
            // A call's task goes with the step that took its outcome (or gave it up): until
            // then it waits for the workflow's next owner, outcome and attempts included.
            calls_done: conn.prepare(
                "DELETE FROM tasks t USING unnest($1::int8[], $2::int8[]) AS d(num, tag) \
                 WHERE t.workflow = d.num AND t.tag = d.tag",
            )?,
            snapshots: conn.prepare(
                "INSERT INTO snapshots (num, seq, module, state) \
                 SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[], $4::bytea[]) \
                 ON CONFLICT (num) DO UPDATE SET seq = excluded.seq, module = excluded.module, \
                 state = excluded.state",
            )?,
            // Its snapshot is of no use once it ended. Messages it never read stay, counted as
            // unread: they were acknowledged to whoever sent them.
            // Nor are the tasks of its calls: nothing will take their outcomes.
            // A workflow that ended already stays as it ended.
            ends: conn.prepare(
                "WITH e AS (SELECT * FROM unnest($1::int8[], $2::int2[], $3::bytea[], \
                 $4::text[], $5::text[], $6::int8[]) AS t(num, state, result, kind, message, at)), \
                 ended AS (UPDATE workflows w SET state = e.state, result = e.result, \
                 error_kind = e.kind, error = e.message, finished = e.at \
                 FROM e WHERE w.num = e.num AND w.state = 0), \
                 calls AS (DELETE FROM tasks t USING e WHERE t.workflow = e.num) \
                 DELETE FROM snapshots s USING e WHERE s.num = e.num",
            )?,
            // Delivered by the host that asks (its own workflow, or its child).
            cancel: conn.prepare(
                "UPDATE workflows SET cancel = 1, cancel_seen = $2 WHERE num = $1 AND cancel = 0",
            )?,
            refused: conn.prepare("UPDATE messages SET refused = $2 WHERE id = $1")?,
            damaged: conn.prepare("UPDATE workflows SET damaged = $2 WHERE num = $1")?,
            pause: conn.prepare("UPDATE workflows SET paused = $2 WHERE num = $1 AND state = 0")?,
            upgrade: conn.prepare(
                "UPDATE workflows SET module = $3 WHERE num = $1 AND state = 0 AND module = $2 \
                 AND (SELECT COALESCE(MAX(seq), 0) FROM steps WHERE num = $1) = $4 \
                 AND (NOT $5 OR owner IS NULL)",
            )?,
            // The finished trees of these roots, with everything of theirs; a tree with an
            // unfinished workflow is left. One statement sees one snapshot: the modules no
            // workflow left uses are those no workflow outside the pruned trees does.
            prune: conn.prepare(
                "WITH RECURSIVE tree(root, num, state) AS ( \
                   SELECT num, num, state FROM workflows \
                     WHERE num = ANY($1::int8[]) AND parent IS NULL AND state <> 0 \
                   UNION ALL SELECT t.root, w.num, w.state FROM workflows w JOIN tree t \
                     ON w.parent = t.num WHERE w.parent IS NOT NULL), \
                 whole AS (SELECT num FROM tree \
                   WHERE root NOT IN (SELECT root FROM tree WHERE state = 0)), \
                 s AS (DELETE FROM steps WHERE num IN (SELECT num FROM whole)), \
                 sn AS (DELETE FROM snapshots WHERE num IN (SELECT num FROM whole)), \
                 o AS (DELETE FROM outbox WHERE num IN (SELECT num FROM whole)), \
                 tk AS (DELETE FROM tasks WHERE workflow IN (SELECT num FROM whole)), \
                 m AS (DELETE FROM messages WHERE receiver IN (SELECT num FROM whole) \
                   OR (refused IS NOT NULL AND sender IN (SELECT num FROM whole))), \
                 w AS (DELETE FROM workflows WHERE num IN (SELECT num FROM whole) \
                   RETURNING module) \
                 UPDATE modules SET unused_since = (extract(epoch FROM now()) * 1000)::int8 \
                 WHERE hash IN (SELECT module FROM w) AND kept < $2 AND unused_since IS NULL \
                   AND NOT EXISTS (SELECT 1 FROM workflows x WHERE x.module = modules.hash \
                     AND x.num NOT IN (SELECT num FROM whole)) \
                   AND NOT EXISTS (SELECT 1 FROM snapshots y WHERE y.module = modules.hash \
                     AND y.num NOT IN (SELECT num FROM whole)) \
                   AND NOT EXISTS (SELECT 1 FROM schedules z WHERE z.module = modules.hash)",
            )?,
            // After the prune's own statement, in its transaction: the modules marked unused
            // long enough ago (a start that read its module as there before the mark has been
            // journaled by then) and unused still go; those used again lose their mark.
            prune_modules: conn.prepare(
                "WITH used AS (UPDATE modules SET unused_since = NULL \
                   WHERE unused_since IS NOT NULL AND (kept >= $2 \
                     OR EXISTS (SELECT 1 FROM workflows x WHERE x.module = modules.hash) \
                     OR EXISTS (SELECT 1 FROM snapshots y WHERE y.module = modules.hash) \
                     OR EXISTS (SELECT 1 FROM schedules z WHERE z.module = modules.hash)) \
                   RETURNING hash) \
                 , gone AS (DELETE FROM modules WHERE unused_since < $1 AND kept < $2 \
                   AND hash NOT IN (SELECT hash FROM used) \
                   AND NOT EXISTS (SELECT 1 FROM workflows x WHERE x.module = modules.hash) \
                   AND NOT EXISTS (SELECT 1 FROM snapshots y WHERE y.module = modules.hash) \
                   AND NOT EXISTS (SELECT 1 FROM schedules z WHERE z.module = modules.hash) \
                   AND NOT EXISTS (SELECT 1 FROM module_names n WHERE n.hash = modules.hash \
                     AND n.version = (SELECT max(version) FROM module_names l \
                                      WHERE l.name = n.name)) \
                   RETURNING hash) \
                 DELETE FROM module_names WHERE hash IN (SELECT hash FROM gone)",
            )?,
            outbox: conn.prepare(
                "INSERT INTO outbox (num, tag, at, payload) \
                 SELECT * FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::bytea[]) \
                 ON CONFLICT (num, tag) DO NOTHING",
            )?,
            counter: conn.prepare(
                "UPDATE counters SET value = greatest(value, $1) WHERE name = 'messages'",
            )?,
        })
    }
}
