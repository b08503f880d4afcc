//! A reset on a store hosts share: written in a transaction of its own (not through a host's
//! journal, whose batches hold other workflows' steps), whole or not at all, and left for a host
//! to claim like any workflow no host owns.

use super::PgStore;
use crate::{Reset, StoreError, StoreErrorKind, StoreResult};

/// A number as PostgreSQL keeps it.
fn int(n: u64) -> StoreResult<i64> {
    i64::try_from(n).map_err(|_| {
        StoreError::new(
            StoreErrorKind::Invalid,
            format_args!("{n} is larger than the store can hold"),
        )
    })
}

impl PgStore {
    /// Writes `reset` unless its id no longer names the finished run it resets: whether it did.
    pub(super) fn reset_run(&mut self, reset: &Reset) -> StoreResult<bool> {
        let from = int(reset.from)?;
        let num = int(reset.workflow.num)?;
        let run = int(reset.run)?;
        let started = int(reset.workflow.started)?;
        let renamed: Vec<(i64, &str)> = reset
            .renamed
            .iter()
            .map(|(num, id)| Ok((int(*num)?, id.as_str())))
            .collect::<StoreResult<_>>()?;
        let steps: Vec<(i64, i64, &[u8])> = reset
            .steps
            .iter()
            .map(|s| Ok((int(s.seq)?, int(s.at)?, s.record.as_slice())))
            .collect::<StoreResult<_>>()?;
        let messages: Vec<(i64, i64, &[u8])> = reset
            .messages
            .iter()
            .map(|m| Ok((int(m.id)?, int(m.sender)?, m.payload.as_slice())))
            .collect::<StoreResult<_>>()?;
        let last_message = messages.iter().map(|m| m.0).max();
        let dropped: Vec<i64> = reset
            .dropped
            .iter()
            .map(|id| int(*id))
            .collect::<StoreResult<_>>()?;
        let w = &reset.workflow;
        self.transaction("resetting a workflow", super::READ_PATIENCE, |conn| {
            let current = conn.query(
                "SELECT 1 FROM workflows WHERE num = $1 AND id = $2 AND state <> 0 FOR UPDATE",
                &[&from, &reset.id],
            )?;
            if current.is_empty() {
                return Ok(false);
            }
            for (old, id) in &renamed {
                conn.query("UPDATE workflows SET id = $2 WHERE num = $1", &[old, id])?;
            }
            conn.query(
                "INSERT INTO workflows (num, id, parent, module, module_name, entry, input, \
                 started, root, owner, run, trace) \
                 VALUES ($1, $2, NULL, $3, $4, $5, $6, $7, $1, NULL, $8, $9)",
                &[
                    &num,
                    &w.id,
                    &w.module,
                    &w.module_name,
                    &w.entry,
                    &w.input,
                    &started,
                    &run,
                    &w.trace,
                ],
            )?;
            for (seq, at, record) in &steps {
                conn.query(
                    "INSERT INTO steps (num, seq, at, record) VALUES ($1, $2, $3, $4)",
                    &[&num, seq, at, record],
                )?;
            }
            // Messages the run before never read are the new run's, numbered again after those
            // it took (`messages`), so that they keep their order.
            conn.query(
                "DELETE FROM messages WHERE id = ANY($1) AND receiver = $2",
                &[&dropped, &from],
            )?;
            for (id, sender, payload) in &messages {
                conn.query(
                    "INSERT INTO messages (id, receiver, sender, payload) VALUES ($1, $2, $3, $4)",
                    &[id, &num, sender, payload],
                )?;
            }
            if let Some(last) = last_message {
                conn.query(
                    "UPDATE counters SET value = greatest(value, $1) WHERE name = 'messages'",
                    &[&last],
                )?;
            }
            conn.query("SELECT pg_notify('wfhost_work', '')", &[])?;
            Ok(true)
        })
    }
}
