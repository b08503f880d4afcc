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
use crate::{NewMessage, NewWorkflow, StoreError, StoreErrorKind, StoreResult};

/// Client-started workflows are numbered below this; a host's numbers are its id times this.
pub(super) const HOST_RANGE: i64 = 1 << 40;

/// The error for a host whose lease is gone.
fn lost(me: i64) -> StoreError {
    StoreError::new(
        StoreErrorKind::Fenced,
        format_args!(
            "this host ({me}) lost its lease (it could not renew it in time: paused, cut off from \
         the database, or overloaded), and another host may have taken its workflows over"
        ),
    )
}

impl PgStore {
    /// Runs `work` in a transaction, trying again on a broken connection for up to `patience`.
    pub(super) fn transaction<T>(
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
                    return Err(StoreError::new(
                        super::conn::kind_of(&error),
                        format_args!(
                            "{what} in the store {}: {}",
                            redact(&self.url),
                            describe(&error)
                        ),
                    ));
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
                StoreErrorKind::Full,
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
            _ => Err(StoreError::new(
                StoreErrorKind::Invalid,
                "this store has not joined the hosts",
            )),
        }
    }

    /// Renews the lease: `false` if it was lost (it ran out, or another host took over). An
    /// error if the database could not be reached within a third of the lease: the caller tries
    /// again, and when the database is back the lease either still holds or has run out.
    pub(super) fn renew_lease(&mut self) -> StoreResult<bool> {
        let me = self.me()?;
        let ms = self.member.lease_ms.load(Ordering::Acquire);
        let patience = Duration::from_millis((ms / 3).max(10) as u64);
        let ms = ms as f64;
        self.transaction("renewing the lease", patience, |conn| {
            conn.query(
                "UPDATE hosts SET lease_until = now() + $2 * interval '1 millisecond' \
                 WHERE id = $1 AND NOT dead AND lease_until > now() RETURNING id",
                &[&me, &ms],
            )
            .map(|rows| !rows.is_empty())
        })
    }

    /// Takes up to `limit` trees of unfinished workflows that no live host owns (the host that
    /// owned them let them go, or its lease ran out), or only the tree of workflow `id`: the
    /// workflows now this host's. Retried after a lost answer, it returns what the lost attempt
    /// took (`claim_nonce`).
    pub(super) fn claim_trees(&mut self, limit: usize, id: Option<&str>) -> StoreResult<Vec<u64>> {
        let me = self.me()?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let attempt = nonce();
        let claimed = self.transaction("claiming workflows", super::READ_PATIENCE, |conn| {
            // A claim waits for no other host's row for long: a lock held that long is a host
            // stuck in a commit, which the next claim looks at again.
            conn.batch("SET LOCAL lock_timeout = '2s'")?;
            let alive = conn.query(
                "SELECT 1 FROM hosts WHERE id = $1 AND NOT dead AND lease_until > now()",
                &[&me],
            )?;
            if alive.is_empty() {
                return Ok(None);
            }
            // Hosts whose lease ran out are dead from here on: locking a host's row waits for
            // a commit of its own in flight (it holds the row), and every later commit of it
            // fails. A host whose row is locked (mid-commit) is skipped, for the next claim.
            conn.query(
                "UPDATE hosts SET dead = true WHERE id IN (SELECT id FROM hosts \
                 WHERE NOT dead AND NOT client AND lease_until < now() ORDER BY id \
                 FOR UPDATE SKIP LOCKED)",
                &[],
            )?;
            // In random order, so that hosts claiming at once mostly pick different trees.
            let roots: Vec<i64> = match id {
                Some(id) => conn.query(
                    "SELECT root FROM workflows WHERE id = $1 AND state = 0 \
                     AND (owner IS NULL OR owner IN (SELECT id FROM hosts WHERE dead))",
                    &[&id],
                )?,
                None => conn.query(
                    "SELECT root FROM (SELECT DISTINCT root FROM workflows WHERE state = 0 \
                     AND (owner IS NULL OR owner IN (SELECT id FROM hosts WHERE dead))) trees \
                     ORDER BY random() LIMIT $1",
                    &[&limit],
                )?,
            }
            .iter()
            .filter_map(|row| row.get::<_, Option<i64>>(0))
            .collect();
            if !roots.is_empty() {
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
                conn.query(
                    "UPDATE workflows SET owner = $1, token = token + 1, claim_nonce = $3 \
                     WHERE root = ANY($2) AND state = 0 \
                     AND (owner IS NULL OR owner IN (SELECT id FROM hosts WHERE dead))",
                    &[&me, &locked, &attempt],
                )?;
            }
            // This attempt's, and a lost earlier attempt's with the same number.
            let taken = conn.query(
                "SELECT num FROM workflows WHERE claim_nonce = $1 AND owner = $2 AND state = 0",
                &[&attempt, &me],
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

    /// Gives back workflows this host claimed and could not start.
    pub(super) fn unclaim_workflows(&mut self, nums: &[u64], wake: bool) -> StoreResult<()> {
        let me = self.me()?;
        let nums: Vec<i64> = nums.iter().map(|n| *n as i64).collect();
        self.transaction("giving back workflows", super::READ_PATIENCE, |conn| {
            conn.query(
                "UPDATE workflows SET owner = NULL WHERE num = ANY($1) AND owner = $2",
                &[&nums, &me],
            )?;
            if wake {
                conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            }
            Ok(())
        })
    }

    /// Gives back messages this host took and could not deliver (their receiver does not run
    /// here): taken again by whoever runs the receiver.
    pub(super) fn untake_messages(&mut self, ids: &[u64]) -> StoreResult<()> {
        let me = self.me()?;
        let ids: Vec<i64> = ids.iter().map(|n| *n as i64).collect();
        self.transaction("giving back messages", super::READ_PATIENCE, |conn| {
            conn.query(
                "UPDATE messages SET delivered_to = NULL WHERE id = ANY($1) AND delivered_to = $2",
                &[&ids, &me],
            )?;
            Ok(())
        })
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
                    "INSERT INTO modules (hash, bytes, kept) \
                 VALUES ($1, $2, (extract(epoch FROM now()) * 1000)::int8) \
                 ON CONFLICT (hash) DO UPDATE SET kept = excluded.kept, unused_since = NULL",
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
                 started, root, owner, trace) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $1, $9, $10) \
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
                    &workflow.trace,
                ],
            )?;
            if !rows.is_empty() && owner.is_none() {
                conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            }
            if rows.is_empty() && owner.is_some() {
                // An earlier attempt whose answer was lost may have started it: then it is ours.
                let ours = conn.query(
                    "SELECT 1 FROM workflows WHERE id = $1 AND num = $2 AND owner = $3",
                    &[&workflow.id, &num, &owner],
                )?;
                if !ours.is_empty() {
                    return Ok(Ok(Some(num as u64)));
                }
            }
            Ok(Ok(rows.first().map(|row| row.get::<_, i64>(0) as u64)))
        })?;
        match outcome {
            Ok(started) => Ok(started),
            Err(()) => Err(lost(owner.unwrap_or_default())),
        }
    }

    /// Takes the messages waiting for this host's workflows that it does not have (or every
    /// one waiting for `receivers`), in number order. Retried after a lost answer, it returns
    /// what the lost attempt took (`take_nonce`).
    pub(super) fn take(&mut self, receivers: Option<&[u64]>) -> StoreResult<Vec<NewMessage>> {
        let me = self.me()?;
        let receivers: Option<Vec<i64>> = receivers.map(|r| r.iter().map(|n| *n as i64).collect());
        let attempt = nonce();
        let rows = self.transaction("taking messages", super::READ_PATIENCE, |conn| {
            match &receivers {
                Some(receivers) => conn.query(
                    "UPDATE messages SET delivered_to = $1, take_nonce = $3 \
                     WHERE receiver = ANY($2) AND refused IS NULL",
                    &[&me, receivers, &attempt],
                )?,
                None => conn.query(
                    "UPDATE messages m SET delivered_to = $1, take_nonce = $2 FROM workflows w \
                     WHERE w.num = m.receiver AND w.owner = $1 AND w.state = 0 \
                     AND m.refused IS NULL AND m.delivered_to IS DISTINCT FROM $1",
                    &[&me, &attempt],
                )?,
            };
            conn.query(
                "SELECT id, receiver, sender, payload FROM messages WHERE take_nonce = $1 \
                 AND refused IS NULL ORDER BY id",
                &[&attempt],
            )
        })?;
        Ok(rows
            .iter()
            .map(|row| NewMessage {
                id: row.get::<_, i64>(0) as u64,
                receiver: row.get::<_, i64>(1) as u64,
                sender: row.get::<_, i64>(2) as u64,
                payload: row.get(3),
                local: false,
            })
            .collect())
    }

    /// Takes the cancels asked of this host's workflows that it has not delivered.
    pub(super) fn take_cancel_requests(&mut self) -> StoreResult<Vec<u64>> {
        let me = self.me()?;
        let attempt = nonce();
        let rows = self.transaction("taking cancels", super::READ_PATIENCE, |conn| {
            conn.query(
                "UPDATE workflows SET cancel_seen = $1, cancel_nonce = $2 WHERE owner = $1 \
                 AND state = 0 AND cancel = 1 AND cancel_seen IS DISTINCT FROM $1",
                &[&me, &attempt],
            )?;
            conn.query(
                "SELECT num FROM workflows WHERE cancel_nonce = $1 AND state = 0",
                &[&attempt],
            )
        })?;
        Ok(rows.iter().map(|row| row.get::<_, i64>(0) as u64).collect())
    }

    /// The unfinished workflows this host owns that are paused.
    pub(super) fn paused_owned(&mut self) -> StoreResult<Vec<u64>> {
        let me = self.me()?;
        let rows = self.transaction("reading paused workflows", super::READ_PATIENCE, |conn| {
            conn.query(
                "SELECT num FROM workflows WHERE owner = $1 AND paused AND state = 0",
                &[&me],
            )
        })?;
        Ok(rows.iter().map(|row| row.get::<_, i64>(0) as u64).collect())
    }

    /// From a client: pauses or unpauses the unfinished workflow `id`, and wakes the hosts to
    /// look (its owner acts on it).
    pub(super) fn pause_id(&mut self, id: &str, paused: bool) -> StoreResult<bool> {
        let rows = self.transaction("pausing a workflow", super::READ_PATIENCE, |conn| {
            let rows = conn.query(
                "UPDATE workflows SET paused = $2 WHERE id = $1 AND state = 0 AND paused <> $2 \
                 RETURNING num",
                &[&id, &paused],
            )?;
            if !rows.is_empty() {
                conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            }
            Ok(rows)
        })?;
        Ok(!rows.is_empty())
    }

    /// From a client: a message to the unfinished workflow `id`, for its owner to take. Its
    /// number is drawn first, so that a retry after a lost answer cannot send it twice.
    pub(super) fn send_to_id(&mut self, id: &str, payload: &[u8]) -> StoreResult<Option<u64>> {
        let number: i64 = self.read("numbering a message", |conn| {
            Ok(conn
                .query_one("SELECT nextval('client_numbers')", &[])?
                .get(0))
        })?;
        let sent = self.transaction("sending a message", super::READ_PATIENCE, |conn| {
            conn.query(
                "INSERT INTO messages (id, receiver, sender, payload) \
                 SELECT $3, num, 0, $2 FROM workflows WHERE id = $1 AND state = 0 \
                 ON CONFLICT (id) DO NOTHING",
                &[&id, &payload, &number],
            )?;
            let sent = !conn
                .query("SELECT 1 FROM messages WHERE id = $1", &[&number])?
                .is_empty();
            if sent {
                conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            }
            Ok(sent)
        })?;
        Ok(sent.then_some(number as u64))
    }

    /// From a client: asks the unfinished workflow `id` to cancel.
    pub(super) fn keep_module(&mut self, hash: &str, bytes: &[u8]) -> StoreResult<()> {
        self.transaction("keeping a module", super::READ_PATIENCE, |conn| {
            conn.query(
                "INSERT INTO modules (hash, bytes, kept) \
                 VALUES ($1, $2, (extract(epoch FROM now()) * 1000)::int8) \
                 ON CONFLICT (hash) DO UPDATE SET kept = excluded.kept, unused_since = NULL",
                &[&hash, &bytes],
            )
            .map(drop)
        })
    }

    /// From a client or a host: module `hash` takes the next version of name `name`, unless the
    /// name's latest version is that module. Uploads of one name number their versions one at a
    /// time (the table's lock).
    pub(super) fn name_module(&mut self, name: &str, hash: &str) -> StoreResult<()> {
        self.transaction("naming a module", super::READ_PATIENCE, |conn| {
            conn.query("LOCK TABLE module_names IN SHARE ROW EXCLUSIVE MODE", &[])?;
            conn.query(
                "INSERT INTO module_names (name, version, hash, at) \
                 SELECT $1, coalesce(max(version), 0) + 1, $2, \
                        (extract(epoch FROM now()) * 1000)::int8 \
                 FROM module_names WHERE name = $1 \
                 HAVING coalesce((SELECT hash FROM module_names WHERE name = $1 \
                                  ORDER BY version DESC LIMIT 1), '') <> $2",
                &[&name, &hash],
            )
            .map(drop)
        })
    }

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

/// A number for one claim or take, the same across its retries.
fn nonce() -> i64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = crate::time::now_nanos();
        bytes = (nanos ^ u64::from(std::process::id()) << 32).to_le_bytes();
    }
    (u64::from_le_bytes(bytes) >> 1) as i64
}
