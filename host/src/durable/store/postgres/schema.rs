//! The PostgreSQL schema, by version. Everything lives in the schema `wfhost` of the database the
//! URL names, so a database shared with other applications keeps its tables apart. `meta` holds
//! the version; each migration runs in the transaction that bumps it, under an advisory lock, so
//! hosts starting at once on a new database migrate it once.

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
];

/// The version this build writes.
pub(super) const VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock migrations take ("wfhost" in ASCII).
pub(super) const MIGRATION_LOCK: i64 = 0x7766_686f_7374;
