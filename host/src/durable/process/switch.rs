//! A workflow that runs here takes an upgrade between two of its steps (`durable/upgrade.rs`):
//! its whole journal is replayed against the new module in an instance of its own; if every
//! step is the same, the switch is written, and the workflow stands where its journal left it,
//! dormant with the new module: its next event restores it by replaying the journal into an
//! instance of the new module (no snapshot of the old module is of use to it), and steps it.

use std::sync::Arc;

use wfhost_scheduler::{InitContext, Process as _};

use super::{DurableProcess, Standing};
use crate::durable::store::Op;
use crate::durable::upgrade::{stored_input, Request};
use crate::error::{Error, ErrorKind, Result};

impl DurableProcess {
    /// Takes `request`, answering it: the steps the new module replayed, or why nothing
    /// changed.
    pub(super) fn switch(&mut self, request: Request) {
        let answer = self.try_switch(&request);
        if let Err(error) = &answer {
            tracing::info!(workflow = %self.id, "upgrade refused: {}", error.message());
        }
        if self.dormant {
            // Woken for the upgrade, not for an event: its turn is answered from where its
            // journal left it (its yields stay armed), and only an event restores it.
            self.recovering = true;
        }
        let _ = request.reply.send(answer);
    }

    fn try_switch(&mut self, request: &Request) -> Result<u64> {
        let busy = |why: &str| {
            Err(Error::new(
                ErrorKind::Unavailable,
                format!("workflow '{}' {why}: nothing changed; try again", self.id),
            ))
        };
        if self.ended {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "workflow '{}' has ended: there is nothing to upgrade",
                    self.id
                ),
            ));
        }
        if self.inner.reaches_any_process() != request.loaded.grants.reaches_any_process() {
            // Which processes it may reach was fixed when it started.
            return Err(Error::new(
                ErrorKind::NotAllowed,
                format!(
                    "the new module's grants differ from the old one's in whether it may reach \
                     any process (not only its own children), which workflow '{}' keeps from \
                     its start: load the new module with the same grants",
                    self.id
                ),
            ));
        }
        if !self.dormant && (self.recovering || self.restoring || self.deferred.is_some()) {
            return busy("is being started or recovered");
        }
        if self.seq == 0 {
            return busy("has not taken its first step yet");
        }
        // Its steps so far are on disk: the journal read is the whole of it.
        self.durable.write(Vec::new())?;
        let durable = Arc::clone(&self.durable);
        let workflow = durable.reader.lock().workflow(&self.id).map_err(|e| {
            Error::new(
                ErrorKind::Store,
                format!("reading workflow '{}': {e}", self.id),
            )
        })?;
        let Some(workflow) = workflow else {
            return busy("is not in the store");
        };
        let records = durable.journal_of(self.pid.0, &self.id)?;
        if records.len() as u64 != self.seq {
            return Err(Error::new(
                ErrorKind::Store,
                format!(
                    "the journal of '{}' has {} steps where the workflow has taken {}: nothing \
                     changed",
                    self.id,
                    records.len(),
                    self.seq
                ),
            ));
        }
        // Where it stands, for the live process that becomes dormant.
        let standing = Standing::of(None, &records);
        if !self.dormant && standing.is_none() {
            return busy("is not waiting");
        }
        let steps =
            durable.check_upgrade(self.inner.sibling(&request.loaded), &workflow, records)?;
        let to = request.loaded.compiled.info.sha256.clone();
        durable.write(vec![
            Op::Module {
                hash: to.clone(),
                bytes: Arc::clone(&request.bytes),
            },
            Op::Upgrade {
                num: self.pid.0,
                from: self.module.to_string(),
                to: to.clone(),
                steps,
                unowned: false,
            },
        ])?;
        let now = match durable.reader.lock().workflow(&self.id) {
            Ok(now) => now,
            Err(error) => {
                // Whether the switch was written is not known: the workflow stops where its
                // journal ends, as on any failure of its store, and its next host recovers it
                // with whichever module its row names.
                self.ended = true;
                durable.store_failed(&error, &[self.pid]);
                return Err(Error::new(
                    ErrorKind::Store,
                    format!(
                        "reading back the upgrade of '{}' failed ({error}): the store failed; \
                         the workflow resumes with whichever module it names",
                        self.id
                    ),
                ));
            }
        };
        if now.as_ref().map(|w| w.start.module.as_str()) != Some(to.as_str()) {
            return Err(Error::new(
                ErrorKind::Store,
                format!(
                    "the store did not take the upgrade of '{}' (it ended, or another host took \
                     it): nothing changed",
                    self.id
                ),
            ));
        }
        let input = stored_input(&workflow)?;
        let fresh = self.inner.sibling(&request.loaded);
        std::mem::replace(&mut self.inner, fresh).close();
        self.module = Arc::from(to.as_str());
        if !self.dormant {
            // Its yields stay armed in the scheduler: the standing re-arms none of them, and its
            // first turn is answered from the journal, as a recovered dormant workflow's is.
            let Some(standing) = standing else {
                unreachable!("checked before the switch");
            };
            let ctx = InitContext::new(self.pid, workflow.start.parent.map(wfcontract::Pid));
            self.deferred = Some(Box::new((ctx, workflow.start.entry.clone(), input)));
            self.pending.clear();
            self.standing = Vec::new();
            self.last = Some((standing.status, standing.receive));
            self.saved = None;
            self.replay.clear();
            self.recovering = true;
            self.dormant = true;
        }
        // A snapshot of the new module is taken at its next chance (restore sees none).
        Ok(steps)
    }
}
