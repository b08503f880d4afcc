//! The PostgreSQL schema, by version. Everything lives in the schema `wfhost` of the database the
//! URL names, so a database shared with other applications keeps its tables apart. `meta` holds
//! the version; each migration runs in the transaction that bumps it, under an advisory lock, so
//! hosts starting at once on a new database migrate it once.

use super::conn::{describe, Conn, Error};
use super::{redact, PgStore, READ_PATIENCE};
use crate::{StoreError, StoreErrorKind, StoreResult};

/// Migration `i` takes the store from version `i` to `i + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the first release: the SQLite store's tables, with steps in one table ordered by
    // workflow (PostgreSQL appends rows to the heap in commit order anyway), and the hosts that
    // write (each commit records its number there, so that a commit whose answer was lost with
    // the connection is known to have happened or not).
    "
    CREATE TABLE modules (
        hash TEXT PRIMARY KEY,
        bytes BYTEA NOT NULL
    );
    CREATE TABLE workflows (
        num BIGINT PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        parent BIGINT,
        module TEXT NOT NULL,
        module_name TEXT NOT NULL,
        entry TEXT NOT NULL,
        input BYTEA NOT NULL,
        started BIGINT NOT NULL,
        -- 0 running, 1 done, 2 failed
        state SMALLINT NOT NULL DEFAULT 0,
        result BYTEA,
        error_kind TEXT,
        error TEXT,
        finished BIGINT,
        -- 0 never asked, 1 asked, 2 taken by a step
        cancel SMALLINT NOT NULL DEFAULT 0
    );
    CREATE INDEX workflows_running ON workflows (num) WHERE state = 0;
    CREATE TABLE steps (
        num BIGINT NOT NULL,
        seq BIGINT NOT NULL,
        at BIGINT NOT NULL,
        record BYTEA NOT NULL,
        PRIMARY KEY (num, seq)
    );
    CREATE TABLE messages (
        id BIGINT PRIMARY KEY,
        receiver BIGINT NOT NULL,
        sender BIGINT NOT NULL,
        payload BYTEA NOT NULL,
        refused TEXT
    );
    CREATE INDEX messages_receiver ON messages (receiver);
    CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value BIGINT NOT NULL
    );
    INSERT INTO counters (name, value) VALUES ('messages', 0);
    CREATE TABLE snapshots (
        num BIGINT PRIMARY KEY,
        seq BIGINT NOT NULL,
        module TEXT NOT NULL,
        state BYTEA NOT NULL
    );
    CREATE TABLE hosts (
        id BIGSERIAL PRIMARY KEY,
        started BIGINT NOT NULL,
        batch BIGINT NOT NULL DEFAULT 0
    );
    ",
    // 2: many hosts. A host that runs workflows holds a lease (`lease_until`, by the database's
    // clock), renewed in one update for all it owns; a host whose lease ran out is marked dead by
    // whoever takes its workflows over, in the transaction that takes them, and a dead host never
    // writes again: every commit goes through `wfhost.mark`, which locks the host's row and
    // fails unless the host is alive (the fence). Clients (`wfhost start`) write without a lease
    // and own nothing. A workflow belongs to the tree of its top-level ancestor (`root`); trees
    // are owned whole (`owner`), so a parent and its children are always on one host; `token`
    // counts the takeovers of a workflow. Messages and cancels written by a client or another
    // host are taken by the receiver's owner (`delivered_to`, `cancel_seen`).
    "
    ALTER TABLE hosts
        ADD COLUMN lease_until TIMESTAMPTZ,
        ADD COLUMN dead BOOLEAN NOT NULL DEFAULT false,
        ADD COLUMN client BOOLEAN NOT NULL DEFAULT false,
        ADD COLUMN name TEXT NOT NULL DEFAULT '',
        ADD COLUMN joined TIMESTAMPTZ NOT NULL DEFAULT now(),
        ADD COLUMN lease_ms BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE workflows
        ADD COLUMN root BIGINT,
        ADD COLUMN owner BIGINT,
        ADD COLUMN token BIGINT NOT NULL DEFAULT 0;
    UPDATE workflows SET root = num;
    -- The host that has a message in memory, or has delivered a cancel: the host that owns the
    -- receiver takes what it has not (from a client, or a workflow on another host).
    ALTER TABLE messages ADD COLUMN delivered_to BIGINT;
    ALTER TABLE workflows ADD COLUMN cancel_seen BIGINT;
    -- The last claim or take that marked a row: a transaction whose answer was lost with the
    -- connection is retried with the same number and finds what it marked.
    ALTER TABLE workflows ADD COLUMN claim_nonce BIGINT, ADD COLUMN cancel_nonce BIGINT;
    ALTER TABLE messages ADD COLUMN take_nonce BIGINT;
    CREATE INDEX workflows_claimed ON workflows (claim_nonce) WHERE state = 0;
    CREATE INDEX workflows_cancels ON workflows (cancel_nonce) WHERE state = 0;
    CREATE INDEX messages_taken ON messages (take_nonce);
    CREATE INDEX workflows_trees ON workflows (root) WHERE state = 0;
    CREATE INDEX workflows_owned ON workflows (owner) WHERE state = 0;
    -- Workflows started by clients are numbered below 2^40; a host's from its id times 2^40.
    CREATE SEQUENCE client_numbers MINVALUE 1 MAXVALUE 1099511627775;
    CREATE FUNCTION mark(me BIGINT, batch BIGINT) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE wfhost.hosts SET batch = mark.batch
            WHERE id = me AND (client OR (NOT dead AND lease_until > now()));
        IF NOT FOUND THEN
            RAISE EXCEPTION 'host % has lost its lease: another host may own its workflows', me
                USING ERRCODE = 'WFL01';
        END IF;
    END $$;
    ",
    // 3: what a store must not hide or lose (as the SQLite store's version 5): workflows whose
    // journal cannot be read back marked damaged and left as they were, the messages durable
    // workflows send the host kept, and messages a workflow never read kept after it ends.
    "
    ALTER TABLE workflows ADD COLUMN damaged TEXT;
    CREATE TABLE outbox (
        num BIGINT NOT NULL,
        tag BIGINT NOT NULL,
        at BIGINT NOT NULL,
        payload BYTEA NOT NULL,
        PRIMARY KEY (num, tag)
    );
    ",
    // 4: activity tasks (`Tasks::postgres`), so that a worker may poll any host: each row is one
    // call of a worker function by a workflow of `host` (its id made by the caller, `seq` the
    // order tasks are offered in); `token` and `deadline` name the
    // delivery a worker holds; `outcome` (postcard) is its completion until `host` takes it.
    "
    CREATE TABLE tasks (
        id BIGINT PRIMARY KEY,
        seq BIGSERIAL,
        host BIGINT NOT NULL,
        function TEXT NOT NULL,
        input BYTEA NOT NULL,
        encoding SMALLINT NOT NULL,
        key TEXT,
        attempt INT NOT NULL DEFAULT 0,
        token BIGINT,
        deadline TIMESTAMPTZ,
        outcome BYTEA
    );
    CREATE INDEX tasks_open ON tasks (function, seq) WHERE outcome IS NULL;
    CREATE INDEX tasks_host ON tasks (host);
    ",
    // 5: the children of a workflow, for listing them (`Filter::parent`) without reading the
    // whole table.
    "
    CREATE INDEX workflows_children ON workflows (parent, num) WHERE parent IS NOT NULL;
    ",
    // 6: how many workflows stand each way, by entry point, so that counting a million
    // workflows reads a few rows (`Read::counts`). The triggers on `workflows` only append what
    // changed to `workflow_count_changes`, in the transaction that starts, ends or removes
    // workflows: no row is updated there, so hosts committing at once never wait for each other
    // (nor deadlock) on a count, and a batch of ends costs in proportion to its size. A read
    // adds the changes to the counts; one reader at a time folds them into `workflow_counts`
    // (`read::fold_counts`). The table is locked while the counts are first filled, so that no
    // workflow a host writes meanwhile is missed. `cancelled` is true for a failure of kind
    // 'cancelled' (`FailureKind::Cancelled`).
    "
    LOCK TABLE workflows IN SHARE ROW EXCLUSIVE MODE;
    CREATE TABLE workflow_counts (
        entry TEXT NOT NULL,
        state SMALLINT NOT NULL,
        cancelled BOOLEAN NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (entry, state, cancelled)
    );
    CREATE TABLE workflow_count_changes (
        entry TEXT NOT NULL,
        state SMALLINT NOT NULL,
        cancelled BOOLEAN NOT NULL,
        n BIGINT NOT NULL
    );
    INSERT INTO workflow_counts (entry, state, cancelled, n)
        SELECT entry, state, coalesce(error_kind, '') = 'cancelled', count(*) FROM workflows
        GROUP BY 1, 2, 3;
    CREATE FUNCTION workflow_counts_add() RETURNS trigger LANGUAGE plpgsql
    SET search_path = wfhost, pg_catalog AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO workflow_count_changes (entry, state, cancelled, n)
            SELECT entry, state, coalesce(error_kind, '') = 'cancelled', count(*)
            FROM new_rows GROUP BY 1, 2, 3;
        ELSE
            INSERT INTO workflow_count_changes (entry, state, cancelled, n)
            SELECT entry, state, coalesce(error_kind, '') = 'cancelled', -count(*)
            FROM old_rows GROUP BY 1, 2, 3;
        END IF;
        RETURN NULL;
    END $$;
    CREATE FUNCTION workflow_counts_move() RETURNS trigger LANGUAGE plpgsql
    SET search_path = wfhost, pg_catalog AS $$
    BEGIN
        INSERT INTO workflow_count_changes (entry, state, cancelled, n)
        VALUES (OLD.entry, OLD.state, coalesce(OLD.error_kind, '') = 'cancelled', -1),
               (NEW.entry, NEW.state, coalesce(NEW.error_kind, '') = 'cancelled', 1);
        RETURN NULL;
    END $$;
    CREATE TRIGGER workflow_counts_started AFTER INSERT ON workflows
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
        EXECUTE FUNCTION workflow_counts_add();
    CREATE TRIGGER workflow_counts_removed AFTER DELETE ON workflows
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
        EXECUTE FUNCTION workflow_counts_add();
    CREATE TRIGGER workflow_counts_changed AFTER UPDATE OF entry, state, error_kind ON workflows
        FOR EACH ROW WHEN (OLD.entry IS DISTINCT FROM NEW.entry
            OR OLD.state IS DISTINCT FROM NEW.state
            OR OLD.error_kind IS DISTINCT FROM NEW.error_kind)
        EXECUTE FUNCTION workflow_counts_move();
    ",
    // 7: a workflow paused by an operator takes no step until it is unpaused; its host reads
    // which of its workflows are paused at each look for messages and cancels.
    "
    ALTER TABLE workflows ADD COLUMN paused BOOLEAN NOT NULL DEFAULT false;
    CREATE INDEX workflows_paused ON workflows (owner) WHERE paused AND state = 0;
    ",
    // 8: retention: the finished top-level workflows in the order they finished (a prune
    // finds those before its cutoff without reading the rest), and the workflows of each
    // module (a prune removes a module once no workflow uses it).
    "
    CREATE INDEX workflows_finished ON workflows (finished, num) WHERE parent IS NULL AND state <> 0;
    CREATE INDEX workflows_module ON workflows (module);
    ",
    // 9: schedules, each firing a workflow whose id is the schedule's and the firing's time.
    "
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        spec TEXT NOT NULL,
        module TEXT NOT NULL,
        module_name TEXT NOT NULL,
        entry TEXT NOT NULL,
        input BYTEA NOT NULL,
        overlap TEXT NOT NULL,
        catch_up TEXT NOT NULL,
        jitter_ms BIGINT NOT NULL,
        paused BOOLEAN NOT NULL DEFAULT false,
        next_fire BIGINT NOT NULL,
        last_workflow TEXT,
        buffered BIGINT,
        fired BIGINT NOT NULL DEFAULT 0,
        created BIGINT NOT NULL
    );
    ",
    // 10: a durable workflow's task is its call's: `workflow` and `tag` name the call, once.
    // The row outlives the host that made it (the workflow's next owner calls again and takes
    // it over, attempts and a worker's outcome included) and goes with the step that journals
    // its outcome, the workflow's end, or its prune.
    "
    ALTER TABLE tasks ADD COLUMN workflow BIGINT, ADD COLUMN tag BIGINT;
    CREATE UNIQUE INDEX tasks_call ON tasks (workflow, tag) WHERE workflow IS NOT NULL;
    ",
    // 11: the unfinished workflows that are held (paused by an operator, or damaged), by entry
    // point: few, so that counting and listing them reads only them.
    "
    CREATE INDEX workflows_held ON workflows (entry) WHERE state = 0 AND (paused OR damaged IS NOT NULL);
    ",
    // 12: when a module was last stored, by the database's clock in milliseconds (a prune
    // removes one only if nobody stored it since its cutoff), and since when a prune found no
    // workflow using it (it goes at a prune a while later, if none uses it then).
    "
    ALTER TABLE modules ADD COLUMN kept BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE modules ADD COLUMN unused_since BIGINT;
    ",
    // 13: when a task's call was made, for how long tasks wait for a worker (`GET /v1/workers`,
    // `wfhost_task_wait_seconds`).
    "
    ALTER TABLE tasks ADD COLUMN queued_at TIMESTAMPTZ NOT NULL DEFAULT now();
    ",
    // 14: a workflow's number among the runs of its id (a reset starts a new run).
    "
    ALTER TABLE workflows ADD COLUMN run BIGINT NOT NULL DEFAULT 1;
    ",
    // 15: module names and their versions (`wfhost deploy --name orders`).
    "
    CREATE TABLE module_names (
        name TEXT NOT NULL,
        version BIGINT NOT NULL,
        hash TEXT NOT NULL,
        at BIGINT NOT NULL,
        PRIMARY KEY (name, version)
    );
    CREATE INDEX module_names_hash ON module_names (hash);
    ",
    // 16: the span a workflow's runs are children of (a W3C `traceparent`), for its traces; a
    // task's call's span, handed to its worker.
    "
    ALTER TABLE workflows ADD COLUMN trace TEXT;
    ALTER TABLE tasks ADD COLUMN traceparent TEXT;
    ",
];

/// The error a commit fails with when its host lost its lease (`wfhost.mark`).
pub(super) const LEASE_LOST: &str = "WFL01";

/// The version this build writes.
pub(super) const VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock migrations take ("wfhost" in ASCII).
pub(super) const MIGRATION_LOCK: i64 = 0x7766_686f_7374;

impl PgStore {
    /// Creates wfhost's tables, or migrates them to this version's, in one transaction under
    /// [`MIGRATION_LOCK`].
    pub(super) fn migrate(&mut self) -> StoreResult<()> {
        let url = redact(&self.url);
        let Conn {
            runtime, client, ..
        } = self.conn(Some(READ_PATIENCE))?;
        let outcome = runtime.block_on(async {
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await?;
            let ours: bool = tx
                .query_one("SELECT to_regclass('wfhost.meta') IS NOT NULL", &[])
                .await?
                .get(0);
            let version: i64 = if ours {
                tx.query_one("SELECT value FROM wfhost.meta WHERE key = 'schema'", &[])
                    .await?
                    .get(0)
            } else {
                let tables: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM pg_tables WHERE schemaname = 'wfhost'",
                        &[],
                    )
                    .await?
                    .get(0);
                if tables > 0 {
                    return Ok(Err(format!(
                        "the database {url} has a schema 'wfhost' that is not a wfhost store: \
                         give another database"
                    )));
                }
                tx.batch_execute(
                    "CREATE SCHEMA IF NOT EXISTS wfhost; \
                     CREATE TABLE wfhost.meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL); \
                     INSERT INTO wfhost.meta (key, value) VALUES ('schema', 0);",
                )
                .await?;
                0
            };
            if version > VERSION {
                return Ok(Err(format!(
                    "the store {url} was written by a newer wfhost (schema version {version}; \
                     this one knows up to {VERSION}): upgrade wfhost to open it"
                )));
            }
            for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
                tx.batch_execute(migration).await?;
                tx.execute(
                    "UPDATE wfhost.meta SET value = $1 WHERE key = 'schema'",
                    &[&(from as i64 + 1)],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(Ok(()))
        });
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(StoreError::new(StoreErrorKind::NotAStore, why)),
            Err(error) => Err(migration_error(&url, &error)),
        }
    }
}

fn migration_error(url: &str, error: &Error) -> StoreError {
    StoreError::new(
        super::conn::kind_of(error),
        format_args!(
            "could not create or migrate wfhost's tables in the store {url}: {}",
            describe(error)
        ),
    )
}

#[cfg(test)]
mod tests {
    /// The kept counts tell a cancel by its failure kind's name, written out in the migration.
    #[test]
    fn the_kept_counts_know_a_cancel_by_its_kind() {
        let cancelled = format!("'{}'", crate::CANCELLED);
        assert!(super::MIGRATIONS[5].contains(&cancelled));
    }
}
