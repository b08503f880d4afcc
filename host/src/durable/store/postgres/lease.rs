//! Many hosts on one database: joining with a lease, renewing it, claiming the trees of
//! workflows nobody alive owns, giving them back, and starting a workflow once whoever asks.
//!
//! The fence is the host's row: every commit goes through `wfhost.mark`, which locks the row and
//! fails unless the lease holds. A claim marks hosts whose lease ran out dead before it takes
//! their workflows, and that update waits for any commit of theirs in flight; after it, their
//! commits fail. So a workflow's journal is written by one host at a time, and the host that
//! takes a workflow over reads a journal no one else will add to.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{describe, now_ms, redact, retryable, Conn, Error, PgStore, FIRST_RETRY, LAST_RETRY};
use crate::durable::store::{NewMessage, NewWorkflow, StoreError, StoreResult};

/// Client-started workflows are numbered below this; a host's numbers are its id times this.
pub(super) const HOST_RANGE: i64 = 1 << 40;

/// The error for a host whose lease is gone.
fn lost(me: i64) -> StoreError {
    StoreError::new(format_args!(
        "this host ({me}) lost its lease (it could not renew it in time: paused, cut off from \
         the database, or overloaded), and another host may have taken its workflows over"
    ))
}

impl PgStore {
    /// Runs `work` in a transaction, trying again on a broken connection for up to `patience`.
    fn transaction<T>(
        &mut self,
        what: &str,
        patience: Duration,
        mut work: impl FnMut(&mut Conn) -> Result<T, Error>,
    ) -> StoreResult<T> {
        let started = Instant::now();
        let mut delay = FIRST_RETRY;
        loop {
            let left = patience.saturating_sub(started.elapsed());
            let conn = self.conn(Some(left))?;
            let result = conn
                .batch("BEGIN")
                .and_then(|()| work(conn))
                .and_then(|value| conn.batch("COMMIT").map(|()| value));
            match result {
                Ok(value) => return Ok(value),
                Err(error) if retryable(&error) && started.elapsed() < patience => {
                    self.conn = None;
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(LAST_RETRY);
                }
                Err(error) => {
                    if let Some(conn) = self.conn.as_ref() {
                        let _ = conn.batch("ROLLBACK");
                    }
                    return Err(StoreError::new(format_args!(
                        "{what} in the store {}: {}",
                        redact(&self.url),
                        describe(&error)
                    )));
                }
            }
        }
    }

    /// Registers this store's connections as a host holding a lease of `lease`: its id.
    pub(super) fn join_hosts(&mut self, lease: Duration, name: &str) -> StoreResult<u64> {
        let ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX).max(1);
        let id: i64 = self.transaction("joining the hosts", lease, |conn| {
            Ok(conn
                .query_one(
                    "INSERT INTO hosts (started, lease_until, name, lease_ms) \
                     VALUES ($1, now() + $2 * interval '1 millisecond', $3, $4) RETURNING id",
                    &[&now_ms(), &(ms as f64), &name, &ms],
                )?
                .get(0))
        })?;
        if id >= (i64::MAX / HOST_RANGE) {
            return Err(StoreError::new(
                "the store has registered too many hosts to number their workflows: start a \
                 new database",
            ));
        }
        self.member.lease_ms.store(ms, Ordering::Release);
        self.member.id.store(id, Ordering::Release);
        Ok(id as u64)
    }

    /// The host this store joined as, or an error if it did not.
    fn me(&self) -> StoreResult<i64> {
        match self.member.id() {
            Some(id) if self.member.joined() => Ok(id),
            _ => Err(StoreError::new("this store has not joined the hosts")),
        }
    }

    /// Renews the lease: an error if it was lost (ran out, or another host took over). A broken
    /// connection is tried again for as long as it takes: when the database is back, the lease
    /// either still holds or has run out, and only then is it known to be lost.
    pub(super) fn renew_lease(&mut self) -> StoreResult<()> {
        let me = self.me()?;
        let ms = self.member.lease_ms.load(Ordering::Acquire) as f64;
        let renewed = self.transaction("renewing the lease", Duration::MAX, |conn| {
            conn.query(
                "UPDATE hosts SET lease_until = now() + $2 * interval '1 millisecond' \
                 WHERE id = $1 AND NOT dead AND lease_until > now() RETURNING id",
                &[&me, &ms],
            )
            .map(|rows| !rows.is_empty())
        })?;
        if renewed {
            Ok(())
        } else {
            Err(lost(me))
        }
    }

    /// Takes up to `limit` trees of unfinished workflows that no live host owns (the host that
    /// owned them let them go, or its lease ran out), or only the tree of workflow `id`: the
    /// workflows now this host's.
    pub(super) fn claim_trees(&mut self, limit: usize, id: Option<&str>) -> StoreResult<Vec<u64>> {
        let me = self.me()?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let claimed = self.transaction("claiming workflows", super::READ_PATIENCE, |conn| {
            let alive = conn.query(
                "SELECT 1 FROM hosts WHERE id = $1 AND NOT dead AND lease_until > now() FOR SHARE",
                &[&me],
            )?;
            if alive.is_empty() {
                return Ok(None);
            }
            // Hosts whose lease ran out are dead from here on: this waits for a commit of
            // theirs in flight, and fails every later one. In id order, so that two claims
            // never wait for each other.
            conn.query(
                "UPDATE hosts SET dead = true WHERE id IN (SELECT id FROM hosts \
                 WHERE NOT dead AND NOT client AND lease_until < now() ORDER BY id FOR UPDATE)",
                &[],
            )?;
            let roots: Vec<i64> = match id {
                Some(id) => conn.query(
                    "SELECT root FROM workflows WHERE id = $1 AND state = 0 \
                     AND (owner IS NULL OR owner IN (SELECT id FROM hosts WHERE dead))",
                    &[&id],
                )?,
                None => conn.query(
                    "SELECT DISTINCT root FROM workflows WHERE state = 0 \
                     AND (owner IS NULL OR owner IN (SELECT id FROM hosts WHERE dead)) LIMIT $1",
                    &[&limit],
                )?,
            }
            .iter()
            .map(|row| row.get(0))
            .collect();
            if roots.is_empty() {
                return Ok(Some(Vec::new()));
            }
            // The tree's top row is its lock: another host claiming at once skips it.
            let locked: Vec<i64> = conn
                .query(
                    "SELECT num FROM workflows WHERE num = ANY($1) ORDER BY num \
                     FOR UPDATE SKIP LOCKED",
                    &[&roots],
                )?
                .iter()
                .map(|row| row.get(0))
                .collect();
            let taken = conn.query(
                "UPDATE workflows SET owner = $1, token = token + 1 \
                 WHERE root = ANY($2) AND state = 0 \
                 AND (owner IS NULL OR owner IN (SELECT id FROM hosts WHERE dead)) \
                 RETURNING num",
                &[&me, &locked],
            )?;
            Ok(Some(
                taken
                    .iter()
                    .map(|row| row.get::<_, i64>(0) as u64)
                    .collect(),
            ))
        })?;
        claimed.ok_or_else(|| lost(me))
    }

    /// Gives back every unfinished workflow this host owns (another host may claim them at
    /// once) and ends its lease: after this it writes nothing.
    pub(super) fn release_all(&mut self) -> StoreResult<()> {
        let me = self.me()?;
        self.transaction("releasing workflows", super::READ_PATIENCE, |conn| {
            conn.query(
                "UPDATE workflows SET owner = NULL WHERE owner = $1 AND state = 0",
                &[&me],
            )?;
            conn.query("UPDATE hosts SET dead = true WHERE id = $1", &[&me])?;
            conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            Ok(())
        })
    }

    /// Starts `workflow` unless one with its id exists: its number if this started it. A host
    /// that joined owns it (and must be alive); a client leaves it to a host to claim, and
    /// numbers it here (`workflow.num` is ignored).
    pub(super) fn start_once(
        &mut self,
        module: Option<(&str, &[u8])>,
        workflow: &NewWorkflow,
    ) -> StoreResult<Option<u64>> {
        let owner = match self.member.joined() {
            true => Some(self.me()?),
            false => None,
        };
        let parent = workflow.parent.map(|p| p as i64);
        let num = workflow.num as i64;
        let started = workflow.started as i64;
        let outcome = self.transaction("starting a workflow", super::READ_PATIENCE, |conn| {
            if let Some(me) = owner {
                let alive = conn.query(
                    "SELECT 1 FROM hosts WHERE id = $1 AND NOT dead AND lease_until > now() \
                     FOR SHARE",
                    &[&me],
                )?;
                if alive.is_empty() {
                    return Ok(Err(()));
                }
            }
            if let Some((hash, bytes)) = module {
                conn.query(
                    "INSERT INTO modules (hash, bytes) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&hash, &bytes],
                )?;
            }
            let num = match owner {
                Some(_) => num,
                None => conn
                    .query_one("SELECT nextval('client_numbers')", &[])?
                    .get(0),
            };
            let rows = conn.query(
                "INSERT INTO workflows (num, id, parent, module, module_name, entry, input, \
                 started, root, owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $1, $9) \
                 ON CONFLICT (id) DO NOTHING RETURNING num",
                &[
                    &num,
                    &workflow.id,
                    &parent,
                    &workflow.module,
                    &workflow.module_name,
                    &workflow.entry,
                    &workflow.input,
                    &started,
                    &owner,
                ],
            )?;
            if !rows.is_empty() && owner.is_none() {
                conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            }
            Ok(Ok(rows.first().map(|row| row.get::<_, i64>(0) as u64)))
        })?;
        match outcome {
            Ok(started) => Ok(started),
            Err(()) => Err(lost(owner.unwrap_or_default())),
        }
    }

    /// Takes the messages waiting for this host's workflows that it does not have (or every
    /// one waiting for `receivers`), in number order per sender.
    pub(super) fn take(&mut self, receivers: Option<&[u64]>) -> StoreResult<Vec<NewMessage>> {
        let me = self.me()?;
        let receivers: Option<Vec<i64>> = receivers.map(|r| r.iter().map(|n| *n as i64).collect());
        let rows =
            self.transaction(
                "taking messages",
                super::READ_PATIENCE,
                |conn| match &receivers {
                    Some(receivers) => conn.query(
                        "UPDATE messages SET delivered_to = $1 \
                     WHERE receiver = ANY($2) AND refused IS NULL \
                     RETURNING id, receiver, sender, payload",
                        &[&me, receivers],
                    ),
                    None => conn.query(
                        "UPDATE messages m SET delivered_to = $1 FROM workflows w \
                     WHERE w.num = m.receiver AND w.owner = $1 AND w.state = 0 \
                     AND m.refused IS NULL AND m.delivered_to IS DISTINCT FROM $1 \
                     RETURNING m.id, m.receiver, m.sender, m.payload",
                        &[&me],
                    ),
                },
            )?;
        let mut messages: Vec<NewMessage> = rows
            .iter()
            .map(|row| NewMessage {
                id: row.get::<_, i64>(0) as u64,
                receiver: row.get::<_, i64>(1) as u64,
                sender: row.get::<_, i64>(2) as u64,
                payload: row.get(3),
            })
            .collect();
        messages.sort_by_key(|m| m.id);
        Ok(messages)
    }

    /// Takes the cancels asked of this host's workflows that it has not delivered.
    pub(super) fn take_cancel_requests(&mut self) -> StoreResult<Vec<u64>> {
        let me = self.me()?;
        let rows = self.transaction("taking cancels", super::READ_PATIENCE, |conn| {
            conn.query(
                "UPDATE workflows SET cancel_seen = $1 WHERE owner = $1 AND state = 0 \
                 AND cancel = 1 AND cancel_seen IS DISTINCT FROM $1 RETURNING num",
                &[&me],
            )
        })?;
        Ok(rows.iter().map(|row| row.get::<_, i64>(0) as u64).collect())
    }

    /// From a client: a message to the unfinished workflow `id`, for its owner to take.
    pub(super) fn send_to_id(&mut self, id: &str, payload: &[u8]) -> StoreResult<Option<u64>> {
        let rows = self.transaction("sending a message", super::READ_PATIENCE, |conn| {
            let rows = conn.query(
                "INSERT INTO messages (id, receiver, sender, payload) \
                 SELECT nextval('client_numbers'), num, 0, $2 FROM workflows \
                 WHERE id = $1 AND state = 0 RETURNING id",
                &[&id, &payload],
            )?;
            if !rows.is_empty() {
                conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            }
            Ok(rows)
        })?;
        Ok(rows.first().map(|row| row.get::<_, i64>(0) as u64))
    }

    /// From a client: asks the unfinished workflow `id` to cancel.
    pub(super) fn cancel_id(&mut self, id: &str) -> StoreResult<bool> {
        let rows = self.transaction("asking for a cancel", super::READ_PATIENCE, |conn| {
            let rows = conn.query(
                "UPDATE workflows SET cancel = 1, cancel_seen = NULL \
                 WHERE id = $1 AND state = 0 AND cancel = 0 RETURNING num",
                &[&id],
            )?;
            if !rows.is_empty() {
                conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            }
            Ok(rows)
        })?;
        Ok(!rows.is_empty())
    }
}
