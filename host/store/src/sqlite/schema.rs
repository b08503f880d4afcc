//! The SQLite schema, by version. `PRAGMA user_version` says which migrations ran; each runs in
//! the transaction that bumps it, so a crash leaves the store at one version or the next.

/// Migration `i` takes the store from version `i` to `i + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the first release.
    "
    CREATE TABLE modules (
        hash TEXT PRIMARY KEY,
        bytes BLOB NOT NULL
    );
    CREATE TABLE workflows (
        num INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        parent INTEGER,
        module TEXT NOT NULL,
        module_name TEXT NOT NULL,
        entry TEXT NOT NULL,
        input BLOB NOT NULL,
        started INTEGER NOT NULL,
        -- 0 running, 1 done, 2 failed
        state INTEGER NOT NULL DEFAULT 0,
        result BLOB,
        error_kind TEXT,
        error TEXT,
        finished INTEGER,
        steps INTEGER NOT NULL DEFAULT 0,
        -- 0 never asked, 1 asked, 2 taken by a step
        cancel INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX workflows_running ON workflows(state) WHERE state = 0;
    CREATE TABLE steps (
        num INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        at INTEGER NOT NULL,
        record BLOB NOT NULL,
        PRIMARY KEY (num, seq)
    ) WITHOUT ROWID;
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        receiver INTEGER NOT NULL,
        sender INTEGER NOT NULL,
        payload BLOB NOT NULL,
        refused TEXT
    );
    ",
    // 2: message numbers are never given twice, also once the messages were taken and deleted.
    "
    CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    );
    INSERT INTO counters (name, value) SELECT 'messages', coalesce(max(id), 0) FROM messages;
    ",
    // 3: snapshots, so that recovery replays only the steps after the latest one.
    "
    CREATE TABLE snapshots (
        num INTEGER PRIMARY KEY,
        seq INTEGER NOT NULL,
        module TEXT NOT NULL,
        state BLOB NOT NULL
    );
    ",
    // 4: steps are appended to a log in commit order (a commit writes a few pages at its end,
    // not one page per workflow it touches) and moved into `steps`, ordered by workflow, many
    // at a time; a workflow's step count is read from its steps, no longer kept in its row.
    "
    CREATE TABLE log (
        lsn INTEGER PRIMARY KEY,
        num INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        at INTEGER NOT NULL,
        record BLOB NOT NULL
    );
    CREATE UNIQUE INDEX log_steps ON log(num, seq);
    ",
    // 5: what a store must not hide or lose. A workflow whose journal cannot be read back is
    // marked damaged (with why) and left as it was, not failed; the messages a durable
    // workflow sends the host are kept (`outbox`, by sender and yield tag); and messages a
    // workflow never read stay after it ends (counted per receiver).
    "
    ALTER TABLE workflows ADD COLUMN damaged TEXT;
    CREATE TABLE outbox (
        num INTEGER NOT NULL,
        tag INTEGER NOT NULL,
        at INTEGER NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (num, tag)
    ) WITHOUT ROWID;
    CREATE INDEX messages_receiver ON messages(receiver);
    ",
    // 6: unfinished workflows indexed by number, as the PostgreSQL store has them (recovery
    // reads them in that order; `shape.rs` describes what both stores keep).
    "
    DROP INDEX workflows_running;
    CREATE INDEX workflows_running ON workflows(num) WHERE state = 0;
    ",
    // 7: the children of a workflow, for listing them (`Filter::parent`) without reading the
    // whole table.
    "
    CREATE INDEX workflows_children ON workflows(parent, num) WHERE parent IS NOT NULL;
    ",
    // 8: how many workflows stand each way, by entry point, kept by triggers in the transaction
    // that starts, ends or removes them, so that counting a million workflows reads a few rows
    // (`Read::counts`). `cancelled` is 1 for a failure of kind 'cancelled'
    // (`FailureKind::Cancelled`).
    "
    CREATE TABLE workflow_counts (
        entry TEXT NOT NULL,
        state INTEGER NOT NULL,
        cancelled INTEGER NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (entry, state, cancelled)
    ) WITHOUT ROWID;
    INSERT INTO workflow_counts (entry, state, cancelled, n)
        SELECT entry, state, coalesce(error_kind = 'cancelled', 0), count(*) FROM workflows
        GROUP BY 1, 2, 3;
    CREATE TRIGGER workflow_counts_started AFTER INSERT ON workflows BEGIN
        INSERT INTO workflow_counts (entry, state, cancelled, n)
        VALUES (NEW.entry, NEW.state, coalesce(NEW.error_kind = 'cancelled', 0), 1)
        ON CONFLICT (entry, state, cancelled) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER workflow_counts_changed AFTER UPDATE OF entry, state, error_kind ON workflows
    WHEN OLD.entry IS NOT NEW.entry OR OLD.state IS NOT NEW.state
        OR OLD.error_kind IS NOT NEW.error_kind
    BEGIN
        UPDATE workflow_counts SET n = n - 1 WHERE entry = OLD.entry AND state = OLD.state
            AND cancelled = coalesce(OLD.error_kind = 'cancelled', 0);
        INSERT INTO workflow_counts (entry, state, cancelled, n)
        VALUES (NEW.entry, NEW.state, coalesce(NEW.error_kind = 'cancelled', 0), 1)
        ON CONFLICT (entry, state, cancelled) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER workflow_counts_removed AFTER DELETE ON workflows BEGIN
        UPDATE workflow_counts SET n = n - 1 WHERE entry = OLD.entry AND state = OLD.state
            AND cancelled = coalesce(OLD.error_kind = 'cancelled', 0);
    END;
    ",
    // 9: a workflow paused by an operator takes no step until it is unpaused.
    "
    ALTER TABLE workflows ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
    ",
    // 10: retention: the finished top-level workflows in the order they finished (a prune
    // finds those before its cutoff without reading the rest), and the workflows of each
    // module (a prune removes a module once no workflow uses it).
    "
    CREATE INDEX workflows_finished ON workflows(finished, num) WHERE parent IS NULL AND state <> 0;
    CREATE INDEX workflows_module ON workflows(module);
    ",
    // 11: schedules, each firing a workflow whose id is the schedule's and the firing's time.
    "
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        spec TEXT NOT NULL,
        module TEXT NOT NULL,
        module_name TEXT NOT NULL,
        entry TEXT NOT NULL,
        input BLOB NOT NULL,
        overlap TEXT NOT NULL,
        catch_up TEXT NOT NULL,
        jitter_ms INTEGER NOT NULL,
        paused INTEGER NOT NULL DEFAULT 0,
        next_fire INTEGER NOT NULL,
        last_workflow TEXT,
        buffered INTEGER,
        fired INTEGER NOT NULL DEFAULT 0,
        created INTEGER NOT NULL
    ) WITHOUT ROWID;
    ",
    // 12: the unfinished workflows that are held (paused by an operator, or damaged), by entry
    // point: few, so that counting and listing them reads only them.
    "
    CREATE INDEX workflows_held ON workflows(entry)
        WHERE state = 0 AND (paused = 1 OR damaged IS NOT NULL);
    ",
    // 13: when a module was last stored (a prune removes one only if nobody stored it since
    // its cutoff) and since when a prune found it unused (it goes at a prune a while later, if
    // none uses it then), and the outcomes activity workers gave durable workflows' calls, kept from
    // the completion's answer (`204`) until the step that takes each is journaled.
    "
    ALTER TABLE modules ADD COLUMN kept INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE modules ADD COLUMN unused_since INTEGER;
    CREATE TABLE task_outcomes (
        num INTEGER NOT NULL,
        tag INTEGER NOT NULL,
        outcome BLOB NOT NULL,
        PRIMARY KEY (num, tag)
    ) WITHOUT ROWID;
    ",
    // 14: a workflow's number among the runs of its id (a reset starts a new run).
    "
    ALTER TABLE workflows ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
    ",
    // 15: module names and their versions (`wfhost deploy --name orders`).
    "
    CREATE TABLE module_names (
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        hash TEXT NOT NULL,
        at INTEGER NOT NULL,
        PRIMARY KEY (name, version)
    ) WITHOUT ROWID;
    CREATE INDEX module_names_hash ON module_names(hash);
    ",
    // 16: the span a workflow's runs are children of (a W3C `traceparent`), for its traces.
    "
    ALTER TABLE workflows ADD COLUMN trace TEXT;
    ",
];

/// The version this build writes.
pub(super) const VERSION: i64 = MIGRATIONS.len() as i64;

#[cfg(test)]
mod tests {
    /// The kept counts tell a cancel by its failure kind's name, written out in the migration.
    #[test]
    fn the_kept_counts_know_a_cancel_by_its_kind() {
        let cancelled = format!("'{}'", crate::CANCELLED);
        assert!(super::MIGRATIONS[7].contains(&cancelled));
    }
}
