//! The store many hosts share: a PostgreSQL database.
//!
//! The client is `tokio-postgres`, driven by a single-threaded runtime of each connection's own
//! from the thread that uses it (the journal's writer, or whoever holds the reader): no thread
//! of its own, and the calling thread blocks as it does on SQLite. Each commit is one
//! transaction (group commit, as with SQLite); rows of one kind go in one statement (`unnest` of
//! arrays), and the transaction's statements, `BEGIN` to `COMMIT`, are sent at once (pipelined):
//! a commit of thousands of steps is one round trip to the server.
//!
//! A lost connection is not a failed store: the writer reconnects, with backoff, for as long as
//! it takes, and a commit whose answer was lost with the connection is found to have happened or
//! not by the batch number it wrote to its `hosts` row. Only what the database refuses (a full
//! disk, a read-only server, a constraint) fails the store.

mod conn;
mod lease;
mod listen;
mod read;
mod reset;
mod schedules;
mod schema;
mod tasks;
mod write;

pub use tasks::PgTaskBoard;

use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Cluster, Committed, Filter, HostInfo, Journal, NewWorkflow, Op, Read, StateCounts, StoreError,
    StoreErrorKind, StoreResult, Submit, SyncMode,
};
use crate::redact::redact;
use conn::{describe, retryable, Conn, Error};
use schema::VERSION;

/// How many times in a row a commit is tried again after failing on a connection that could be
/// made again at once.
const MAX_COMMIT_RETRIES: u32 = 20;

/// How long a read waits for the database to come back before it fails.
const READ_PATIENCE: Duration = Duration::from_secs(30);

/// Backoff between attempts to reconnect: from this...
const FIRST_RETRY: Duration = Duration::from_millis(50);
/// ...doubling up to this.
const LAST_RETRY: Duration = Duration::from_secs(2);

/// A PostgreSQL store.
pub struct PgStore {
    url: String,
    config: tokio_postgres::Config,
    sync: SyncMode,
    conn: Option<Conn>,
    /// This store's row in `hosts`, shared with the other connections made from it.
    member: Arc<Membership>,
    /// The number of its last commit.
    batch: i64,
}

/// Which row of `hosts` a store writes as: a host that joined (with a lease, owning workflows),
/// or, made on its first commit, a client (no lease, owning nothing).
#[derive(Debug, Default)]
pub(super) struct Membership {
    /// The row's id; 0 until there is one.
    id: AtomicI64,
    /// How long its lease lasts, in milliseconds; 0 for a client.
    lease_ms: AtomicI64,
}

impl Membership {
    fn id(&self) -> Option<i64> {
        Some(self.id.load(Ordering::Acquire)).filter(|id| *id != 0)
    }

    /// Whether this store joined as a host (it owns workflows).
    fn joined(&self) -> bool {
        self.lease_ms.load(Ordering::Acquire) > 0 && self.id().is_some()
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &redact(&self.url))
            .field("host", &self.member.id())
            .finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    i64::try_from(crate::time::now_millis()).unwrap_or(i64::MAX)
}

impl PgStore {
    /// Connects to the database at `url`, creating wfhost's tables (in the schema `wfhost`) or
    /// migrating them to this version's. With [`SyncMode::Normal`] commits do not wait for the
    /// server's disk (`synchronous_commit = off`): a crash of the server, not of the host, may
    /// lose the last of them.
    pub fn open(url: &str, sync: SyncMode) -> StoreResult<PgStore> {
        let mut store = PgStore::connect(url, sync)?;
        store.migrate()?;
        Ok(store)
    }

    /// As [`open`](Self::open), for a database that must have wfhost's tables already (the
    /// commands that read what hosts wrote).
    pub fn open_existing(url: &str) -> StoreResult<PgStore> {
        let mut store = PgStore::connect(url, SyncMode::Full)?;
        let conn = store.conn.as_mut().expect("connected");
        let found: bool = conn
            .query_one("SELECT to_regclass('wfhost.meta') IS NOT NULL", &[])
            .map(|row| row.get(0))
            .map_err(|e| store.error("looking for wfhost's tables", e))?;
        if !found {
            return Err(StoreError::new(
                StoreErrorKind::NotAStore,
                format_args!(
                "the database {} holds no wfhost store: start a host on it first (`wfhost serve \
                 --store URL` or `wfhost run --store URL`)",
                redact(url)
            ),
            ));
        }
        // Read as it is: a client does not migrate tables under running hosts.
        let conn = store.conn.as_mut().expect("connected");
        let version: i64 = conn
            .query_one("SELECT value FROM wfhost.meta WHERE key = 'schema'", &[])
            .map(|row| row.get(0))
            .map_err(|e| store.error("reading the schema version", e))?;
        if version > VERSION {
            return Err(StoreError::new(
                StoreErrorKind::NotAStore,
                format_args!(
                "the store {} was written by a newer wfhost (schema version {version}; this one \
                 knows up to {VERSION}): upgrade wfhost to read it",
                redact(url)
            ),
            ));
        }
        if version < VERSION {
            return Err(StoreError::new(
                StoreErrorKind::NotAStore,
                format_args!(
                "the store {} has the tables of an older wfhost (schema version {version}; this \
                 one writes {VERSION}): start a host of this version on it first (`wfhost serve`), \
                 which migrates them",
                redact(url)
            ),
            ));
        }
        Ok(store)
    }

    fn connect(url: &str, sync: SyncMode) -> StoreResult<PgStore> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            StoreError::new(StoreErrorKind::Invalid, format_args!(
                "{} is not a PostgreSQL URL ({e}): write postgres://USER:PASSWORD@HOST:PORT/DATABASE",
                redact(url)
            ))
        })?;
        if config.get_application_name().is_none() {
            config.application_name("wfhost");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let mut store = PgStore {
            url: url.to_string(),
            config,
            sync,
            conn: None,
            member: Arc::default(),
            batch: 0,
        };
        store.conn = Some(Conn::open(&store.config, store.sync).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                format_args!(
                "could not connect to the PostgreSQL store {}: {e}: is the server running, and \
                 does the URL name its host, port, user and database?",
                redact(url)
            ),
            )
        })?);
        Ok(store)
    }

    /// A connection, made again (with backoff, for as long as `patience` allows; `None`:
    /// forever) if the last one broke.
    fn conn(&mut self, patience: Option<Duration>) -> StoreResult<&mut Conn> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let started = Instant::now();
            let mut delay = FIRST_RETRY;
            let mut attempts = 0u32;
            loop {
                match Conn::open(&self.config, self.sync) {
                    Ok(conn) => {
                        if attempts > 0 {
                            tracing::info!(
                                store = %redact(&self.url),
                                "reconnected to the store after {attempts} attempts"
                            );
                        }
                        self.conn = Some(conn);
                        break;
                    }
                    Err(error) => {
                        attempts += 1;
                        if patience.is_some_and(|p| started.elapsed() >= p) {
                            return Err(StoreError::new(
                                StoreErrorKind::Unavailable,
                                format_args!(
                                    "lost the connection to the store {} and could not reconnect \
                                 within {:?}: {error}",
                                    redact(&self.url),
                                    patience.unwrap_or_default(),
                                ),
                            ));
                        }
                        if attempts == 1 || attempts.is_power_of_two() {
                            tracing::warn!(
                                store = %redact(&self.url),
                                "the store cannot be reached ({error}); trying again"
                            );
                        }
                        std::thread::sleep(delay);
                        delay = (delay * 2).min(LAST_RETRY);
                    }
                }
            }
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    fn error(&self, what: &str, error: Error) -> StoreError {
        StoreError::new(
            conn::kind_of(&error),
            format_args!(
                "{what} in the store {}: {}",
                redact(&self.url),
                describe(&error)
            ),
        )
    }

    /// This store's row in `hosts`: the host's it joined as, or a client's, made on its first
    /// commit.
    fn host(&mut self) -> StoreResult<i64> {
        if let Some(host) = self.member.id() {
            return Ok(host);
        }
        let url = redact(&self.url);
        let mut delay = FIRST_RETRY;
        loop {
            let conn = self.conn(None)?;
            match conn.query_one(
                "INSERT INTO hosts (started, client) VALUES ($1, true) RETURNING id",
                &[&now_ms()],
            ) {
                Ok(row) => {
                    let host = row.get(0);
                    self.member.id.store(host, Ordering::Release);
                    return Ok(host);
                }
                Err(error) if retryable(&error) => {
                    self.conn = None;
                    tracing::warn!(store = %url, "registering with the store: {}", describe(&error));
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(LAST_RETRY);
                }
                Err(error) => return Err(write::failure(&url, &error)),
            }
        }
    }

    /// Runs a read, reconnecting and trying again when the connection broke, for up to
    /// [`READ_PATIENCE`].
    fn read<T>(
        &mut self,
        what: &str,
        mut f: impl FnMut(&mut Conn) -> Result<T, Error>,
    ) -> StoreResult<T> {
        let started = Instant::now();
        let mut delay = FIRST_RETRY;
        loop {
            let patience = READ_PATIENCE.saturating_sub(started.elapsed());
            let conn = self.conn(Some(patience))?;
            match f(conn) {
                Ok(value) => return Ok(value),
                Err(error) if retryable(&error) && started.elapsed() < READ_PATIENCE => {
                    self.conn = None;
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(LAST_RETRY);
                }
                Err(error) => return Err(self.error(what, error)),
            }
        }
    }
}

impl PgStore {
    /// Another connection as this store's host (or client), always synced in full.
    fn another(&self) -> StoreResult<PgStore> {
        // Claims, renewals and takes go through these: never with synchronous_commit off,
        // which a server crash could undo.
        let mut reader = PgStore {
            url: self.url.clone(),
            config: self.config.clone(),
            sync: SyncMode::Full,
            conn: None,
            member: Arc::clone(&self.member),
            batch: 0,
        };
        reader.conn(Some(READ_PATIENCE))?;
        Ok(reader)
    }

    /// The schema as it reads back (for the test that holds both stores to one description).
    #[cfg(feature = "testing")]
    pub fn shape(&mut self) -> StoreResult<super::shape::Shape> {
        self.read("reading the schema", |conn| {
            let mut shape = super::shape::Shape::default();
            for row in conn.query(
                "SELECT table_name::text, column_name::text FROM information_schema.columns \
                 WHERE table_schema = 'wfhost' ORDER BY table_name, ordinal_position",
                &[],
            )? {
                shape.tables.entry(row.get(0)).or_default().push(row.get(1));
            }
            for row in conn.query(
                "SELECT i.relname::text, t.relname::text, \
                        array_agg(a.attname::text ORDER BY k.ord) \
                 FROM pg_index x \
                 JOIN pg_class i ON i.oid = x.indexrelid \
                 JOIN pg_class t ON t.oid = x.indrelid \
                 JOIN pg_namespace n ON n.oid = t.relnamespace \
                 CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
                 WHERE n.nspname = 'wfhost' GROUP BY i.relname, t.relname",
                &[],
            )? {
                shape.indexes.insert(row.get(0), (row.get(1), row.get(2)));
            }
            Ok(shape)
        })
    }

    /// The host numbered `id`.
    pub fn host_info(&mut self, id: u64) -> StoreResult<Option<HostInfo>> {
        let id = read::int(id)?;
        self.read("reading a host", |conn| read::host_info(conn, id))
    }
}

impl Journal for PgStore {
    fn reader(&self) -> StoreResult<Box<dyn Journal>> {
        Ok(Box::new(self.another()?))
    }

    fn tidy(&mut self, _all: bool) -> StoreResult<()> {
        // Steps go straight into their table: nothing to move.
        Ok(())
    }

    fn commit(&mut self, ops: &[Op]) -> StoreResult<Committed> {
        let url = redact(&self.url);
        let plan = write::Plan::new(ops, self.member.joined()).map_err(|why| {
            StoreError::new(
                StoreErrorKind::Invalid,
                format_args!("could not write to the store {url}: {why}"),
            )
        })?;
        let host = self.host()?;
        self.batch += 1;
        let batch = self.batch;
        let mut delay = FIRST_RETRY;
        // Commits that failed on the connection although the database could be reached at
        // once: an error that only looks like a lost connection (a message the server cannot
        // take, a backend killed for memory) must not be retried for ever.
        let mut failures = 0;
        loop {
            let conn = self.conn(None)?;
            let backend = conn.backend;
            let error = match plan.commit(conn, host, batch) {
                Ok(committed) => return Ok(committed),
                Err(error) if retryable(&error) => error,
                Err(error) => return Err(write::failure(&url, &error)),
            };
            failures += 1;
            if failures > MAX_COMMIT_RETRIES {
                return Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    format_args!(
                        "could not write to the store {url}: {} commits in a row failed on their \
                     connection ({}); the batch is given up",
                        MAX_COMMIT_RETRIES,
                        describe(&error)
                    ),
                ));
            }
            tracing::warn!(
                store = %url,
                "a commit lost its connection ({}); reconnecting",
                describe(&error)
            );
            self.conn = None;
            // The commit may have happened with its answer lost: its batch number says, once
            // the old connection's transaction is over (ended here, and waited for by locking
            // the host's row, which it holds until it ends).
            loop {
                let conn = self.conn(None)?;
                let _ = conn.query("SELECT pg_terminate_backend($1)", &[&backend]);
                match write::committed(conn, host) {
                    // Written, with what its starts did lost: the callers read who won.
                    Ok(last) if last == batch => {
                        return Ok(Committed {
                            every_start_written: false,
                        })
                    }
                    Ok(_) => break,
                    Err(error) if retryable(&error) => {
                        self.conn = None;
                        std::thread::sleep(delay);
                        delay = (delay * 2).min(LAST_RETRY);
                    }
                    Err(error) => return Err(write::failure(&url, &error)),
                }
            }
        }
    }

    fn high_water(&mut self) -> StoreResult<(u64, u64)> {
        if let (true, Some(id)) = (self.member.joined(), self.member.id()) {
            let base = (id * lease::HOST_RANGE) as u64;
            return Ok((base, base));
        }
        self.read("reading the highest numbers", read::high_water)
    }
}

impl Cluster for PgStore {
    fn connection(&self) -> StoreResult<Box<dyn Cluster>> {
        Ok(Box::new(self.another()?))
    }

    fn join(&mut self, lease: Duration, name: &str) -> StoreResult<u64> {
        self.join_hosts(lease, name)
    }

    fn renew(&mut self) -> StoreResult<bool> {
        self.renew_lease()
    }

    fn unclaim(&mut self, nums: &[u64], wake: bool) -> StoreResult<()> {
        self.unclaim_workflows(nums, wake)
    }

    fn claim(&mut self, limit: usize, id: Option<&str>) -> StoreResult<Vec<u64>> {
        self.claim_trees(limit, id)
    }

    fn reset(&mut self, reset: &super::Reset) -> StoreResult<bool> {
        self.reset_run(reset)
    }

    fn release(&mut self) -> StoreResult<()> {
        self.release_all()
    }

    fn listen(
        &self,
        wake: super::Wake,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> StoreResult<()> {
        listen::start(&self.url, self.config.clone(), wake, stop)
    }

    fn take_messages(&mut self, receivers: Option<&[u64]>) -> StoreResult<Vec<super::NewMessage>> {
        self.take(receivers)
    }

    fn untake_messages(&mut self, ids: &[u64]) -> StoreResult<()> {
        PgStore::untake_messages(self, ids)
    }

    fn take_cancels(&mut self) -> StoreResult<Vec<u64>> {
        self.take_cancel_requests()
    }

    fn paused_here(&mut self) -> StoreResult<Vec<u64>> {
        self.paused_owned()
    }

    fn fold_counts(&mut self) -> StoreResult<()> {
        self.read("folding the counts by status", read::fold_counts)
    }

    fn claimable(&mut self) -> StoreResult<u64> {
        let me = self.member.id().unwrap_or(0);
        self.read("counting workflows to claim", |conn| {
            // A host is known to run its workflows once it has renewed its lease since this
            // one joined (to a time past this one's join plus its lease).
            let row = conn.query_one(
                "SELECT count(*) FROM workflows w LEFT JOIN hosts h ON h.id = w.owner, \
                 hosts me WHERE me.id = $1 AND w.state = 0 AND w.owner IS DISTINCT FROM $1 \
                 AND (w.owner IS NULL OR h.id IS NULL OR h.dead OR h.lease_until < now() \
                 OR h.lease_until < me.joined + me.lease_ms * interval '1 millisecond')",
                &[&me],
            )?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
    }
}

impl Submit for PgStore {
    fn submit_start(
        &mut self,
        module: (&str, &[u8]),
        workflow: &NewWorkflow,
    ) -> StoreResult<Option<u64>> {
        PgStore::start_once(self, Some(module), workflow)
    }

    fn submit_module(&mut self, hash: &str, bytes: &[u8]) -> StoreResult<()> {
        self.keep_module(hash, bytes)
    }

    fn submit_module_name(&mut self, name: &str, hash: &str) -> StoreResult<()> {
        self.name_module(name, hash)
    }

    fn submit_message(&mut self, id: &str, payload: &[u8]) -> StoreResult<Option<u64>> {
        self.send_to_id(id, payload)
    }

    fn submit_cancel(&mut self, id: &str) -> StoreResult<bool> {
        self.cancel_id(id)
    }

    fn submit_pause(&mut self, id: &str, paused: bool) -> StoreResult<bool> {
        self.pause_id(id, paused)
    }

    fn submit_schedule(&mut self, op: &Op) -> StoreResult<bool> {
        self.schedule_op(op)
    }

    fn host_info(&mut self, id: u64) -> StoreResult<Option<HostInfo>> {
        PgStore::host_info(self, id)
    }

    fn hosts(&mut self) -> StoreResult<Vec<super::HostRow>> {
        self.read("reading the hosts", read::hosts)
    }
}

impl Read for PgStore {
    fn schedules(&mut self) -> StoreResult<Vec<super::ScheduleRow>> {
        self.schedules_all()
    }

    fn schedule(&mut self, id: &str) -> StoreResult<Option<super::ScheduleRow>> {
        self.schedule_one(id)
    }

    fn refused_from(&mut self, senders: &[u64]) -> StoreResult<Vec<super::StoredMessage>> {
        let senders: Vec<i64> = senders.iter().map(|n| *n as i64).collect();
        self.read("reading refused messages", |conn| {
            Ok(conn
                .query(
                    "SELECT id, receiver, sender, payload, refused FROM messages \
                     WHERE refused IS NOT NULL AND sender = ANY($1) ORDER BY id",
                    &[&senders],
                )?
                .iter()
                .map(|row| super::StoredMessage {
                    message: super::NewMessage {
                        id: row.get::<_, i64>(0) as u64,
                        receiver: row.get::<_, i64>(1) as u64,
                        sender: row.get::<_, i64>(2) as u64,
                        payload: row.get(3),
                        local: false,
                    },
                    refused: row.get(4),
                })
                .collect())
        })
    }

    fn workflow(&mut self, id: &str) -> StoreResult<Option<super::Workflow>> {
        self.read("reading a workflow", |conn| read::workflow(conn, id))
    }

    fn workflow_by_num(&mut self, num: u64) -> StoreResult<Option<super::Workflow>> {
        let num = read::int(num)?;
        self.read("reading a workflow", |conn| {
            read::workflow_by_num(conn, num)
        })
    }

    fn workflows(&mut self, unfinished_only: bool) -> StoreResult<Vec<super::Workflow>> {
        self.read("listing workflows", |conn| {
            read::workflows(conn, unfinished_only)
        })
    }

    fn page(
        &mut self,
        filter: &Filter,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<super::Workflow>> {
        let after = read::int(after)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read("listing workflows", |conn| {
            read::page(conn, filter, after, limit)
        })
    }

    fn step_page(
        &mut self,
        num: u64,
        after: u64,
        limit: Option<usize>,
    ) -> StoreResult<Vec<super::Step>> {
        let (num, after) = (read::int(num)?, read::int(after)?);
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        self.read("reading a journal", |conn| {
            read::steps(conn, num, after, limit)
        })
    }

    fn snapshot(&mut self, num: u64) -> StoreResult<Option<super::NewSnapshot>> {
        let num = read::int(num)?;
        self.read("reading a snapshot", |conn| read::snapshot(conn, num))
    }

    fn module(&mut self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read("reading a module", |conn| read::module(conn, hash))
    }

    fn has_module(&mut self, hash: &str) -> StoreResult<bool> {
        self.read("reading a module", |conn| {
            conn.query_opt("SELECT 1 FROM modules WHERE hash = $1", &[&hash])
                .map(|row| row.is_some())
        })
    }

    fn messages(&mut self) -> StoreResult<Vec<super::StoredMessage>> {
        self.read("reading messages", read::messages)
    }

    fn unread_from_clients(&mut self, num: u64) -> StoreResult<Vec<super::NewMessage>> {
        let number = read::int(num)?;
        self.read("reading unread messages", |conn| {
            Ok(conn
                .query(
                    "SELECT id, payload FROM messages \
                     WHERE receiver = $1 AND sender = 0 AND refused IS NULL ORDER BY id",
                    &[&number],
                )?
                .iter()
                .map(|row| super::NewMessage {
                    id: row.get::<_, i64>(0) as u64,
                    receiver: num,
                    sender: 0,
                    payload: row.get(1),
                    local: false,
                })
                .collect())
        })
    }

    fn host_messages(
        &mut self,
        num: u64,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<super::HostMessage>> {
        let (num, after) = (read::int(num)?, read::int(after)?);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read("reading the messages to the host", |conn| {
            read::host_messages(conn, num, after, limit)
        })
    }

    fn latest_host_messages(&mut self, nums: &[u64]) -> StoreResult<Vec<(u64, u64)>> {
        let nums = nums
            .iter()
            .map(|&n| read::int(n))
            .collect::<StoreResult<Vec<i64>>>()?;
        self.read("reading the latest messages to the host", |conn| {
            read::latest_host_messages(conn, &nums)
        })
    }

    fn prunable(
        &mut self,
        filter: &super::PruneFilter,
        after: (u64, u64),
        limit: usize,
    ) -> StoreResult<Vec<super::PruneCandidate>> {
        self.read("finding finished workflows to remove", |conn| {
            read::prunable(conn, filter, after, limit)
        })
    }

    fn counts(&mut self, filter: &Filter) -> StoreResult<StateCounts> {
        self.read("counting workflows", |conn| read::counts(conn, filter))
    }

    fn count_running(&mut self) -> StoreResult<u64> {
        self.read("counting unfinished workflows", |conn| {
            let row = conn.query_one("SELECT count(*) FROM workflows WHERE state = 0", &[])?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
    }

    fn step_sizes(&mut self, num: u64, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        self.sizes(
            "reading a journal",
            "SELECT octet_length(record)::BIGINT FROM steps WHERE num = $1 AND seq > $2 \
             ORDER BY seq LIMIT $3",
            (num, after, limit),
        )
    }

    fn host_message_sizes(&mut self, num: u64, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        self.sizes(
            "reading the messages to the host",
            "SELECT octet_length(payload)::BIGINT FROM outbox WHERE num = $1 AND tag > $2 \
             ORDER BY tag LIMIT $3",
            (num, after, limit),
        )
    }

    fn module_list(&mut self) -> StoreResult<Vec<(String, u64)>> {
        self.read("listing modules", read::module_list)
    }

    fn module_names(&mut self) -> StoreResult<Vec<super::ModuleName>> {
        self.read("listing module names", read::module_names)
    }

    fn module_named(
        &mut self,
        name: &str,
        version: Option<u64>,
    ) -> StoreResult<Option<super::ModuleName>> {
        let version = version.map(read::int).transpose()?;
        self.read("reading a module name", |conn| {
            read::module_named(conn, name, version)
        })
    }

    fn finished_among(&mut self, nums: &[u64]) -> StoreResult<Vec<u64>> {
        let nums = nums
            .iter()
            .map(|&n| read::int(n))
            .collect::<StoreResult<Vec<i64>>>()?;
        self.read("reading which workflows finished", |conn| {
            read::finished_among(conn, &nums)
        })
    }
}

impl PgStore {
    /// What [`read::sizes`] gives for `query` with a workflow, a position and a count.
    fn sizes(
        &mut self,
        what: &str,
        query: &'static str,
        (num, after, limit): (u64, u64, usize),
    ) -> StoreResult<Vec<u64>> {
        let (num, after) = (read::int(num)?, read::int(after)?);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(what, |conn| read::sizes(conn, query, num, after, limit))
    }
}
