//! A recovered workflow that is not restored until something happens to it.
//!
//! Recovery reads each unfinished workflow's snapshot and journal once, checks that they decode,
//! and works out from them alone (no instance, no replay) where the workflow stands: its last
//! status, the messages it asked for and the yields it waits for ([`Standing`]). It then drops
//! the bytes. The workflow starts dormant: its first step is answered from that standing (its
//! timers re-armed at their due times, its joins made again, what it sent confirmed), and it
//! holds a few hundred bytes and no instance. Its first event (a timer firing, a message, a
//! cancel) restores it: the snapshot and journal are read again, the journal after the snapshot
//! is replayed into an instance and checked step by step, and the event is stepped.

use std::collections::BTreeMap;

use wfcontract::{Command, Event, EventKind, Status, Tag};
use wfhost_scheduler::ProcessError;

use super::{DurableProcess, Pending};
use crate::durable::record::StepRecord;
use crate::durable::snapshot::{SavedWorkflow, Whose};
use crate::durable::store::{StoreError, StoreErrorKind};

/// Where a workflow stands after its journal: what a dormant workflow answers its first step
/// with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Its last journaled step.
    pub(crate) seq: u64,
    /// That step's status and the messages it asked for.
    pub(crate) status: Status,
    pub(crate) receive: u32,
    /// Its yields not yet answered, by tag (a list, as small as it can be: a million dormant
    /// workflows keep theirs until their first step).
    pub(crate) pending: Vec<(Tag, Pending)>,
}

impl Standing {
    /// Where a workflow stands after `saved` (its snapshot, if one is used) and `records` (the
    /// journal after it, or all of it). `None` when it has taken no step, or its last one
    /// ended it (it is then started as it always was: its first step runs, or its end is
    /// journaled again).
    pub(crate) fn of(saved: Option<&SavedWorkflow>, records: &[StepRecord]) -> Option<Standing> {
        let mut standing = match saved {
            Some(saved) => Standing {
                seq: saved.seq,
                status: saved.status.clone(),
                receive: saved.receive,
                pending: Vec::new(),
            },
            None => Standing {
                seq: 0,
                status: Status::Continue,
                receive: 0,
                pending: Vec::new(),
            },
        };
        let mut pending: BTreeMap<Tag, Pending> = saved
            .map(|saved| saved.pending.iter().cloned().collect())
            .unwrap_or_default();
        for record in records {
            track(&mut pending, &record.events, record);
            standing.seq += 1;
            standing.status = record.output.status.clone();
            standing.receive = record.output.receive;
        }
        standing.pending = pending.into_iter().collect();
        standing.pending.shrink_to_fit();
        let waiting = matches!(
            standing.status,
            Status::Continue | Status::Wait | Status::Idle
        );
        (standing.seq > 0 && waiting).then_some(standing)
    }
}

/// Updates `pending` with one step: the yields its `events` answered go, the new ones of
/// `record` come (with what the host decided about them).
pub(crate) fn track(pending: &mut BTreeMap<Tag, Pending>, events: &[Event], record: &StepRecord) {
    for event in events {
        if event.kind == EventKind::YieldComplete {
            pending.remove(&event.tag);
        }
    }
    let find = |list: &[(Tag, u64)], tag: Tag| list.iter().find(|(t, _)| *t == tag).map(|p| p.1);
    for y in &record.output.yields {
        match &y.command {
            Command::Forget(tag) => {
                pending.remove(tag);
            }
            command if command.kind().expects_completion() => {
                let spawned = record
                    .spawned
                    .iter()
                    .find(|(t, _)| *t == y.tag)
                    .map(|p| p.1);
                pending.insert(
                    y.tag,
                    Pending {
                        command: command.clone(),
                        due: find(&record.dues, y.tag),
                        sent: find(&record.sent, y.tag),
                        spawned,
                    },
                );
            }
            _ => {}
        }
    }
}

impl DurableProcess {
    /// A workflow recovered dormant: standing where `standing` says, restored at its first
    /// event.
    pub(crate) fn dormant(mut self, standing: Standing) -> DurableProcess {
        self.seq = standing.seq;
        self.standing = standing.pending;
        self.last = Some((standing.status, standing.receive));
        self.recovering = true;
        self.dormant = true;
        self
    }

    /// Restores a dormant workflow for its first event: its snapshot and journal read again
    /// (as recovery read and checked them), to be started and replayed by this turn's
    /// `prepare` and `step`. A store that cannot give back what it gave at recovery has
    /// failed: the host stops every durable workflow where its journal ends, this one too,
    /// without journaling an end.
    pub(super) fn restore(&mut self) -> Result<(), ProcessError> {
        self.dormant = false;
        let (saved, records) = match self.read_back() {
            Ok(found) => found,
            Err(why) => {
                let error = StoreError::new(
                    StoreErrorKind::Damaged,
                    format!("workflow '{}' could not be restored: {why}", self.id),
                );
                self.ended = true;
                self.durable.store_failed(&error, &[self.pid]);
                return Err(ProcessError::new(error.message()));
            }
        };
        // Its standing comes again from the snapshot and the replay, which checks each step.
        self.pending.clear();
        self.seq = 0;
        self.last = None;
        self.since_snapshot = 0;
        self.snapshot_soon = saved.is_none();
        self.saved = saved.map(Box::new);
        self.replay = records.into();
        self.restoring = true;
        Ok(())
    }

    /// The snapshot this workflow starts from (as recovery chose it) and its journal after it.
    fn read_back(&self) -> Result<(Option<SavedWorkflow>, Vec<StepRecord>), String> {
        let (compiled, max_memory) = self.inner.fit();
        let saved = self.durable.saved(
            Whose {
                num: self.pid.0,
                id: &self.id,
                module: &self.module,
                steps: self.seq,
            },
            compiled,
            max_memory,
        );
        let after = saved.as_ref().map_or(0, |saved| saved.seq);
        let steps = self
            .durable
            .reader
            .lock()
            .steps(self.pid.0, after)
            .map_err(|e| e.to_string())?;
        if steps.len() as u64 != self.seq.saturating_sub(after) {
            return Err(format!(
                "its journal has {} steps after step {after} where recovery found {}",
                steps.len(),
                self.seq.saturating_sub(after)
            ));
        }
        let records = steps
            .iter()
            .map(|step| {
                StepRecord::decode(&step.record)
                    .map_err(|e| format!("step {} of its journal does not decode ({e})", step.seq))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((saved, records))
    }
}

#[cfg(test)]
mod tests {
    /// A million dormant workflows hold a million of these: what only a live or restoring
    /// workflow needs (its instance, its snapshot, its deferred start) is boxed.
    #[test]
    fn a_dormant_workflow_is_small() {
        assert!(std::mem::size_of::<super::DurableProcess>() <= 640);
        assert!(std::mem::size_of::<crate::wasm::WasmProcess>() <= 320);
    }
}
