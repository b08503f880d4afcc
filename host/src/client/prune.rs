//! Retention: finished workflows removed from the store, a tree at a time: [`Client::prune`].

use std::time::Instant;

use super::store::StoreBackend;
use super::{Client, PruneQuery, Pruned, WorkflowState};
use crate::durable::now_millis;
use crate::durable::store::{Op, PruneCandidate, PruneFilter, State};
use crate::error::Result;

/// Top-level workflows a prune looks at a time: each batch is one write, so that a prune never
/// holds the store long enough to stall the commits of the workflows that run.
const BATCH: usize = 100;

/// How long a module a prune found unused stays before a later prune removes it (if none uses
/// it then): a start that read it as there before the mark has been journaled long before.
const MODULE_GRACE_MS: u64 = 10 * 60 * 1000;

impl Client {
    /// Removes the finished top-level workflows `query` matches, each with its whole tree (a
    /// tree part of which still runs is left, and counted in [`Pruned::left`]), and with
    /// everything of theirs: their steps, snapshots, messages, what they sent the host, and the
    /// modules no workflow left uses. In batches of 100 trees, each one write, so the
    /// workflows that run keep committing meanwhile. A SQLite file is pruned by the host that
    /// holds it (through a server, or a serving client), or by this client when no host does.
    pub fn prune(&self, query: &PruneQuery) -> Result<Pruned> {
        self.prune_until(query, None)
    }

    /// As [`prune`](Self::prune), stopping after the batch that passes `deadline` (with
    /// [`Pruned::more`] if some are left): the HTTP API answers within a request's time so.
    pub fn prune_until(&self, query: &PruneQuery, deadline: Option<Instant>) -> Result<Pruned> {
        self.backend.prune(query, deadline)
    }
}

impl StoreBackend {
    /// Finds the trees to remove a batch at a time, and hands each batch to `write`.
    pub(crate) fn prune_with(
        &self,
        query: &PruneQuery,
        deadline: Option<Instant>,
        mut write: impl FnMut(Vec<Op>) -> Result<()>,
    ) -> Result<Pruned> {
        let (state, cancelled) = match query.status {
            None => (None, None),
            Some(WorkflowState::Completed) => (Some(State::Done), None),
            Some(WorkflowState::Failed) => (Some(State::Failed), Some(false)),
            Some(WorkflowState::Cancelled) => (Some(State::Failed), Some(true)),
            // Unfinished: nothing to remove.
            Some(_) => return Ok(Pruned::default()),
        };
        let filter = PruneFilter {
            finished_before: query.finished_before.min(i64::MAX as u64),
            state,
            cancelled,
        };
        let mut pruned = Pruned::default();
        let mut after = (0, 0);
        loop {
            let candidates = self.read(|store| store.prunable(&filter, after, BATCH))?;
            let Some(last) = candidates.last() else {
                return Ok(pruned);
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                pruned.more = true;
                return Ok(pruned);
            }
            after = (last.finished, last.root);
            let (whole, unfinished): (Vec<&PruneCandidate>, Vec<&PruneCandidate>) =
                candidates.iter().partition(|c| !c.unfinished);
            pruned.left += unfinished.len() as u64;
            if whole.is_empty() {
                continue;
            }
            write(vec![Op::Prune {
                roots: whole.iter().map(|c| c.root).collect(),
                kept_before: filter.finished_before,
                marked_before: now_millis().saturating_sub(MODULE_GRACE_MS),
            }])?;
            pruned.trees += whole.len() as u64;
            pruned.workflows += whole.iter().map(|c| c.workflows).sum::<u64>();
        }
    }
}
