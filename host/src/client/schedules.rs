//! Schedules through a [`Client`]: created, listed, paused, resumed, deleted and triggered; and
//! fired, by a server's schedule thread (`server/schedules.rs`).

use std::time::Duration;

use super::{Backend, Client};
use crate::durable::now_millis;
use crate::durable::store::{Op, ScheduleAdvance, ScheduleRow};
use crate::error::{Error, ErrorKind, Result};
use crate::schedules::{firing_id, plan, NewSchedule, Schedule};
use crate::Started;

/// What a look at the schedules did ([`Client::fire_schedules`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fired {
    /// Workflows started (or found started by another host: a firing starts once).
    pub started: u64,
    /// Firings skipped (missed and not caught up, or overlapping).
    pub skipped: u64,
    /// When the look began, in milliseconds since the Unix epoch: the `since` of the next.
    pub at: u64,
}

impl Client {
    /// Creates schedule `schedule`: an [`ErrorKind::Conflict`] if one of its id exists, an
    /// [`ErrorKind::UnknownModule`] if the store keeps no such module, an
    /// [`ErrorKind::UnknownEntry`] if the module has no such entry point. Its first firing is
    /// the first of its times after now.
    pub fn create_schedule(&self, schedule: &NewSchedule) -> Result<Schedule> {
        schedule.check()?;
        if let Backend::Remote(remote) = &*self.backend {
            return remote.create_schedule(schedule);
        }
        let bytes = self.module(&schedule.module)?.ok_or_else(|| {
            Error::new(
                ErrorKind::UnknownModule,
                format!(
                    "the store keeps no module {}: store it first (`POST /v1/modules`, or give \
                     the schedule a .wasm file)",
                    schedule.module
                ),
            )
        })?;
        let info = crate::ModuleInfo::inspect(&bytes)?;
        if !info.has_entry(&schedule.entry) {
            return Err(info.unknown_entry(&schedule.entry));
        }
        let row = schedule.row("", now_millis())?;
        if !self.write_schedule(Op::PutSchedule(row.clone()), &row.id)? {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "a schedule '{}' exists: delete it first, or choose another id",
                    row.id
                ),
            ));
        }
        Schedule::of(&row)
    }

    /// Every schedule, by id.
    pub fn schedules(&self) -> Result<Vec<Schedule>> {
        let rows = match &*self.backend {
            Backend::Store(store) => store.read(|s| s.schedules())?,
            Backend::Serving(serving) => serving.store.read(|s| s.schedules())?,
            Backend::Remote(remote) => return remote.schedules(),
        };
        rows.iter().map(Schedule::of).collect()
    }

    /// Schedule `id`, or an [`ErrorKind::UnknownSchedule`] error.
    pub fn schedule(&self, id: &str) -> Result<Schedule> {
        let row = match &*self.backend {
            Backend::Store(store) => store.read(|s| s.schedule(id))?,
            Backend::Serving(serving) => serving.store.read(|s| s.schedule(id))?,
            Backend::Remote(remote) => return remote.schedule(id),
        };
        row.as_ref()
            .map(Schedule::of)
            .unwrap_or_else(|| Err(unknown(id)))
    }

    /// Pauses schedule `id`: it does not fire until resumed. Whether it was running.
    pub fn pause_schedule(&self, id: &str) -> Result<bool> {
        self.set_schedule_paused(id, true)
    }

    /// Resumes schedule `id`: it fires from its next time after now (what it skipped while
    /// paused is not caught up). Whether it was paused.
    pub fn resume_schedule(&self, id: &str) -> Result<bool> {
        self.set_schedule_paused(id, false)
    }

    fn set_schedule_paused(&self, id: &str, paused: bool) -> Result<bool> {
        if let Backend::Remote(remote) = &*self.backend {
            return remote.pause_schedule(id, paused);
        }
        let schedule = self.schedule(id)?;
        if schedule.paused == paused {
            return Ok(false);
        }
        let now = now_millis();
        let next_fire = schedule
            .when
            .next_after(now, schedule.created)
            .unwrap_or(u64::MAX);
        let op = Op::PauseSchedule {
            id: id.to_string(),
            paused,
            next_fire,
        };
        self.write_schedule(op, id)
    }

    /// Deletes schedule `id` (the workflows it started stay): whether it existed.
    pub fn delete_schedule(&self, id: &str) -> Result<bool> {
        if let Backend::Remote(remote) = &*self.backend {
            return remote.delete_schedule(id);
        }
        self.write_schedule(Op::DeleteSchedule { id: id.to_string() }, id)
    }

    /// Fires schedule `id` now, whatever its times and its overlap policy: a workflow
    /// `id@<now>` with its module, entry point and input.
    pub fn trigger_schedule(&self, id: &str) -> Result<Started> {
        if let Backend::Remote(remote) = &*self.backend {
            return remote.trigger_schedule(id);
        }
        let schedule = self.schedule(id)?;
        self.start_stored(
            Some(&firing_id(id, now_millis())),
            &schedule.module,
            &schedule.entry,
            &schedule.input,
        )
    }

    /// Writes a schedule op: whether it changed anything.
    fn write_schedule(&self, op: Op, id: &str) -> Result<bool> {
        match &*self.backend {
            Backend::Store(store) => store.submit(true, |s| s.submit_schedule(&op)),
            Backend::Serving(serving) if serving.shared() => {
                serving.store.submit(true, |s| s.submit_schedule(&op))
            }
            Backend::Serving(serving) => {
                // One host writes a SQLite store: through its writer, and read back, one
                // write at a time (what it reads back is its own).
                let _one = serving.durable.taking.lock();
                let before = serving.store.read(|s| s.schedule(id))?;
                serving.durable.write(vec![op.clone()])?;
                let after = serving.store.read(|s| s.schedule(id))?;
                Ok(changed(&op, before.as_ref(), after.as_ref()))
            }
            Backend::Remote(_) => Err(Error::new(
                ErrorKind::Config,
                "a server writes its schedules itself",
            )),
        }
    }

    /// Fires what is due of every schedule now (a server's schedule thread calls it, every
    /// [`SCHEDULES_LOOK_EVERY`]): each firing a workflow whose id says which firing it is, so
    /// that a firing starts once however many hosts look. `since`: when this host's previous
    /// look began ([`Fired::at`]), if it looked before. A client of a server fires nothing (the
    /// server does).
    pub fn fire_schedules(&self, since: Option<u64>) -> Result<Fired> {
        let now = now_millis();
        let mut fired = Fired {
            at: now,
            ..Fired::default()
        };
        let rows = match &*self.backend {
            Backend::Store(store) => store.read(|s| s.schedules())?,
            Backend::Serving(serving) => serving.store.read(|s| s.schedules())?,
            Backend::Remote(_) => return Ok(fired),
        };
        for row in rows {
            // One schedule this build cannot read stops none of the others.
            let schedule = match Schedule::of(&row) {
                Ok(schedule) => schedule,
                Err(error) => {
                    tracing::warn!(schedule = %row.id, "not fired: {}", error.message());
                    continue;
                }
            };
            if schedule.paused {
                continue;
            }
            match self.fire(&schedule, now, since) {
                Ok(one) => {
                    fired.started += one.started;
                    fired.skipped += one.skipped;
                }
                Err(error) => tracing::warn!(
                    schedule = %schedule.id,
                    "firing the schedule: {}",
                    error.message()
                ),
            }
        }
        Ok(fired)
    }

    fn fire(&self, schedule: &Schedule, now: u64, since: Option<u64>) -> Result<Fired> {
        let due = schedule.next_fire.is_some_and(|next| next <= now) || schedule.buffered.is_some();
        if !due {
            return Ok(Fired::default());
        }
        let running = match &schedule.last_workflow {
            Some(last) => match self.status(last) {
                Ok(status) => !status.is_finished(),
                Err(error) if error.kind() == ErrorKind::UnknownWorkflow => false,
                Err(error) => return Err(error),
            },
            None => false,
        };
        let Some(plan) = plan(&schedule.timing(), now, since, running) else {
            return Ok(Fired::default());
        };
        let mut last_workflow = None;
        let (mut started, mut skipped) = (0, plan.skipped);
        for &at in &plan.start {
            let id = firing_id(&schedule.id, at);
            let start = self.start_stored(
                Some(&id),
                &schedule.module,
                &schedule.entry,
                &schedule.input,
            );
            match start {
                Ok(_) => {
                    started += 1;
                    last_workflow = Some(id);
                }
                // The store, or the host, cannot take it now: the next look tries again.
                Err(error) if transient(error.kind()) => return Err(error),
                // It will never start (its input refused, its id taken by another start, its
                // module gone): skipped, so that the schedule goes on.
                Err(error) => {
                    tracing::warn!(
                        schedule = %schedule.id,
                        workflow = %id,
                        "a firing could not start, skipped: {}",
                        error.message()
                    );
                    skipped += 1;
                }
            }
        }
        let advance = ScheduleAdvance {
            id: schedule.id.clone(),
            from: schedule.next_fire.unwrap_or(u64::MAX),
            from_buffered: schedule.buffered,
            next_fire: plan.next_fire,
            last_workflow,
            buffered: plan.buffered,
            started,
        };
        self.write_schedule(Op::AdvanceSchedule(advance), &schedule.id)?;
        Ok(Fired {
            started,
            skipped,
            at: now,
        })
    }
}

/// Whether `op` changed schedule row `before` into `after`.
fn changed(op: &Op, before: Option<&ScheduleRow>, after: Option<&ScheduleRow>) -> bool {
    match op {
        Op::PutSchedule(_) => before.is_none() && after.is_some(),
        Op::DeleteSchedule { .. } => before.is_some() && after.is_none(),
        _ => before != after,
    }
}

/// Whether a failed start may go through if tried again later.
fn transient(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Store
            | ErrorKind::Unavailable
            | ErrorKind::ShuttingDown
            | ErrorKind::Timeout
            | ErrorKind::Io
            | ErrorKind::Limit
    )
}

fn unknown(id: &str) -> Error {
    Error::new(
        ErrorKind::UnknownSchedule,
        format!("no schedule '{id}' (`wfhost schedule list` lists them)"),
    )
}

/// How long a server's schedule thread waits between looks at most.
pub const SCHEDULES_LOOK_EVERY: Duration = Duration::from_millis(200);
