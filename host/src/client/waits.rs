//! What a workflow waits for now, read from its latest snapshot and the journal after it:
//! [`Client::waits`].

use std::collections::BTreeMap;

use wfcontract::{Command, Status, Tag, Yield};

use super::store::StoreBackend;
use super::{Client, OpenYield, Waits};
use crate::durable::process::{track, Pending};
use crate::durable::record::StepRecord;
use crate::durable::snapshot::SavedWorkflow;
use crate::durable::store::State;
use crate::error::{Error, ErrorKind, Result};

/// Steps read at a time after the snapshot.
const WINDOW: usize = 10_000;

impl Client {
    /// What workflow `id` waits for now: the commands it yielded that nothing has answered
    /// yet, and whether it waits for a message. Worked out from its latest snapshot and the
    /// steps journaled after it (a snapshot is written every so many events, so this reads
    /// little of a long journal); through a server, the server works it out.
    pub fn waits(&self, id: &str) -> Result<Waits> {
        self.backend.waits(id)
    }
}

impl StoreBackend {
    pub(crate) fn waits(&self, id: &str) -> Result<Waits> {
        let workflow = self.find(id)?;
        let num = workflow.start.num;
        if workflow.state != State::Running {
            return Ok(Waits {
                steps: workflow.steps,
                ..Waits::default()
            });
        }
        let damaged = |what: String| {
            Error::new(
                ErrorKind::Damaged,
                format!(
                    "{what} of '{id}' does not decode: the store is damaged there (`wfhost \
                     status {id}` says more)"
                ),
            )
        };
        let snapshot = self.read(|store| store.snapshot(num))?;
        let mut pending: BTreeMap<Tag, Pending> = BTreeMap::new();
        let mut last: Option<(u64, Status, u32)> = None;
        if let Some(snapshot) = &snapshot {
            let saved = SavedWorkflow::decode(&snapshot.state)
                .map_err(|e| damaged(format!("the snapshot at step {} ({e})", snapshot.seq)))?;
            pending.extend(saved.pending.iter().cloned());
            last = Some((saved.seq, saved.status.clone(), saved.receive));
        }
        let mut after = last.as_ref().map_or(0, |(seq, _, _)| *seq);
        loop {
            let steps = self.read(|store| store.step_page(num, after, Some(WINDOW)))?;
            let Some(end) = steps.last().map(|s| s.seq) else {
                break;
            };
            for step in &steps {
                let record = StepRecord::decode(&step.record)
                    .map_err(|e| damaged(format!("step {} of the journal ({e})", step.seq)))?;
                track(&mut pending, &record.events, &record);
                last = Some((step.seq, record.output.status, record.output.receive));
            }
            after = end;
        }
        let (steps, status, receive) = last.unwrap_or((0, Status::Continue, 0));
        let waiting = matches!(status, Status::Continue | Status::Wait | Status::Idle);
        Ok(Waits {
            steps,
            open: pending
                .into_iter()
                .map(|(tag, pending)| OpenYield {
                    fires_at: fires_at(&pending),
                    unserved: None,
                    yielded: Yield {
                        tag,
                        command: pending.command,
                    },
                })
                .collect(),
            message: waiting && receive > 0,
        })
    }
}

/// When a pending timer fires, in milliseconds since the Unix epoch.
fn fires_at(pending: &Pending) -> Option<u64> {
    match (&pending.command, pending.due) {
        (Command::Sleep(_), Some(due)) => Some(due / 1_000_000),
        (Command::SleepUntil(nanos), _) => Some(nanos / 1_000_000),
        _ => None,
    }
}
