//! A process saved between steps for a durable store, and started again from what was saved: the
//! hibernation image (pages and globals that differ from a fresh instance), kept on disk.
//!
//! A process started from a saved image does not run its module's `_initialize` or its entry
//! point's `init`: its memory has both done. It starts hibernated, and takes an instance only
//! when it next steps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wfcontract::Status;
use wfhost_scheduler::{InitContext, ProcessError, Readiness, WakerSource};

use super::WasmProcess;
use crate::wasm::hibernate::{Image, Snapshot};
use crate::wasm::instances::TicketState;
use crate::wasm::wasi::Logs;

/// A process as a durable store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedProcess {
    image: Image,
    /// The CPU time it had used, in nanoseconds (it counts against `Limits::max_cpu_time`).
    cpu_nanos: u64,
}

impl SavedProcess {
    /// Why this cannot start a process of `compiled` with memory up to `max_memory` bytes, if
    /// it cannot: what [`WasmProcess::init_saved`] checks before it touches anything.
    pub(crate) fn misfit(
        &self,
        compiled: &crate::wasm::Compiled,
        max_memory: usize,
    ) -> Option<String> {
        let hibernating = match compiled.hibernation.as_ref() {
            Ok(hibernating) => hibernating,
            Err(why) => return Some(format!("its module cannot hibernate: {why}")),
        };
        self.image
            .check(compiled.pre.module(), &hibernating.plan.globals, max_memory)
            .err()
            .map(|why| format!("its saved image does not fit: {why}"))
    }
}

impl WasmProcess {
    /// Its state now, for a durable store: the hibernation image of its instance (taken now if it
    /// is live), and the time it has used. `None` when its module's processes cannot hibernate.
    pub(crate) fn save(&mut self) -> Option<SavedProcess> {
        let compiled = Arc::clone(&self.spec.module.compiled);
        let hibernating = compiled.hibernation.as_ref().ok()?;
        let image = match (&self.snapshot, self.live.as_mut()) {
            (Some(snapshot), _) => snapshot.to_image()?,
            (None, Some(live)) => {
                let started = Instant::now();
                let snapshot = Snapshot::take(
                    &mut live.store,
                    live.memory,
                    &live.globals,
                    &hibernating.plan.image,
                );
                self.spent(started);
                snapshot.to_image()?
            }
            (None, None) => return None,
        };
        Some(SavedProcess {
            image,
            cpu_nanos: u64::try_from(self.cpu.as_nanos()).unwrap_or(u64::MAX),
        })
    }

    /// Starts the process from what [`save`](Self::save) kept, hibernated: in place of `init`.
    /// Fails (touching nothing) when the image does not fit its module.
    pub(crate) fn init_saved(
        &mut self,
        ctx: &InitContext,
        method: &str,
        saved: SavedProcess,
    ) -> Result<(), ProcessError> {
        let compiled = Arc::clone(&self.spec.module.compiled);
        let hibernating = compiled
            .hibernation
            .as_ref()
            .map_err(|why| ProcessError::new(format!("its module cannot hibernate: {why}")))?;
        let snapshot = Snapshot::from_image(
            saved.image,
            hibernating.plan.globals.len(),
            self.spec.limits.max_memory_bytes,
        )
        .and_then(|snapshot| {
            snapshot.fits(compiled.pre.module(), &hibernating.plan.globals)?;
            Ok(snapshot)
        })
        .map_err(|why| ProcessError::new(format!("its saved image does not fit: {why}")))?;
        self.pid = ctx.pid();
        self.entry = method.to_string();
        self.runtime.note_process(self.pid, Some(&self.spec));
        self.logs
            .get_or_insert_with(|| Box::new(Logs::new(self.pid, self.workflow.clone())));
        self.cpu = Duration::from_nanos(saved.cpu_nanos);
        self.runtime.instances.restored(snapshot.size());
        self.snapshot = Some(Box::new(snapshot));
        Ok(())
    }

    /// What a saved image must fit to start this process: its module, and the host's memory
    /// limit (what recovery checked a durable workflow's snapshot against).
    pub(crate) fn fit(&self) -> (&crate::wasm::Compiled, usize) {
        (
            &self.spec.module.compiled,
            self.runtime.limits.max_memory_bytes,
        )
    }

    /// An instance for its `init`, taken now, or its place in the queue for one (`NotReady`:
    /// `waker` runs it when one is counted for it), as a hibernated process waits for one to
    /// wake into: for a process started late (a durable workflow restored at its first event),
    /// which must wait for an instance rather than fail for want of one.
    pub(crate) fn reserve_instance(
        &mut self,
        waker: &WakerSource<'_>,
    ) -> Result<Readiness, ProcessError> {
        if self.reserved.is_some() {
            return Ok(Readiness::Ready);
        }
        if let Some(ticket) = self.ticket.take() {
            match ticket.state() {
                TicketState::Granted => {
                    self.reserved = Some(self.runtime.instances.redeem(&ticket));
                    return Ok(Readiness::Ready);
                }
                TicketState::Waiting => {
                    self.ticket = Some(ticket);
                    return Ok(Readiness::NotReady);
                }
                TicketState::Expired => return Err(self.no_instance()),
            }
        }
        match self.runtime.take_instance_or_queue(|| waker.waker()) {
            Ok(slot) => {
                self.reserved = Some(slot);
                Ok(Readiness::Ready)
            }
            Err(ticket) => {
                self.ticket = Some(ticket);
                Ok(Readiness::NotReady)
            }
        }
    }

    /// Gives its instance back if it waits (`status`) and the host's policy says so, as a step
    /// that leaves it waiting does.
    pub(crate) fn hibernate_if_waiting(&mut self, status: &Status) {
        if matches!(status, Status::Idle | Status::Wait) && !self.pinned {
            self.hibernate_if_due();
        }
    }

    /// Whether it holds no instance now (hibernated).
    pub(crate) fn is_hibernated(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Wakes it at once if it is hibernated, into a warm instance or a fresh one. `false` when
    /// no instance can be had now (the caller steps it later, through `prepare`, which queues).
    pub(crate) fn wake_now(&mut self) -> Result<bool, ProcessError> {
        if self.snapshot.is_none() {
            return Ok(true);
        }
        let started = Instant::now();
        let woken = if self.wake_warm() {
            Ok(true)
        } else {
            match self.runtime.take_instance() {
                Ok(slot) => self.wake_fresh(slot).map(|()| true),
                Err(_) => Ok(false),
            }
        };
        self.spent(started);
        woken
    }
}
