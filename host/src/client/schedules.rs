//! Schedules through a [`Client`]: created, listed, paused, resumed, deleted and triggered; and
//! fired, by a server's schedule thread (`wfhost-server`'s `serve/schedules.rs`). A backend that
//! reads and writes the store itself ([`Direct`]: a store's, a serving host's) does so here; a
//! server's client asks the server.

use std::time::Duration;

use super::backend::{Backend, Schedules};
use super::{Client, Fired, ModuleRef, Start};
use crate::durable::now_millis;
use crate::durable::store::{Op, Read, ScheduleAdvance, ScheduleRow, StoreError};
use crate::error::{Error, ErrorKind, Result};
use crate::schedules::{firing_id, plan, NewSchedule, Schedule};
use crate::Started;

impl Client {
    /// Creates schedule `schedule`: an [`ErrorKind::Conflict`] if one of its id exists, an
    /// [`ErrorKind::UnknownModule`] if the store keeps no such module, an
    /// [`ErrorKind::UnknownEntry`] if the module has no such entry point. Its first firing is
    /// the first of its times after now.
    pub fn create_schedule(&self, schedule: &NewSchedule) -> Result<Schedule> {
        schedule.check()?;
        self.backend.create_schedule(schedule)
    }

    /// Every schedule, by id.
    pub fn schedules(&self) -> Result<Vec<Schedule>> {
        self.backend.schedules()
    }

    /// Schedule `id`, or an [`ErrorKind::UnknownSchedule`] error.
    pub fn schedule(&self, id: &str) -> Result<Schedule> {
        self.backend.schedule(id)
    }

    /// Pauses schedule `id`: it does not fire until resumed. Whether it was running.
    pub fn pause_schedule(&self, id: &str) -> Result<bool> {
        self.backend.pause_schedule(id, true)
    }

    /// Resumes schedule `id`: it fires from its next time after now (what it skipped while
    /// paused is not caught up). Whether it was paused.
    pub fn resume_schedule(&self, id: &str) -> Result<bool> {
        self.backend.pause_schedule(id, false)
    }

    /// Deletes schedule `id` (the workflows it started stay): whether it existed.
    pub fn delete_schedule(&self, id: &str) -> Result<bool> {
        self.backend.delete_schedule(id)
    }

    /// Fires schedule `id` now, whatever its times and its overlap policy: a workflow
    /// `id@<now>` with its module, entry point and input.
    pub fn trigger_schedule(&self, id: &str) -> Result<Started> {
        self.backend.trigger_schedule(id)
    }

    /// Fires what is due of every schedule now (a server's schedule thread calls it, every
    /// [`SCHEDULES_LOOK_EVERY`]): each firing a workflow whose id says which firing it is, so
    /// that a firing starts once however many hosts look. `since`: when this host's previous
    /// look began ([`Fired::at`]), if it looked before. A client of a server fires nothing (the
    /// server does).
    pub fn fire_schedules(&self, since: Option<u64>) -> Result<Fired> {
        self.backend.fire_schedules(since)
    }
}

impl<D: Direct> Schedules for D {
    fn create_schedule(&self, schedule: &NewSchedule) -> Result<Schedule> {
        create(self, schedule)
    }

    fn schedules(&self) -> Result<Vec<Schedule>> {
        all(self)
    }

    fn schedule(&self, id: &str) -> Result<Schedule> {
        one(self, id)
    }

    fn pause_schedule(&self, id: &str, paused: bool) -> Result<bool> {
        set_paused(self, id, paused)
    }

    fn delete_schedule(&self, id: &str) -> Result<bool> {
        delete(self, id)
    }

    fn trigger_schedule(&self, id: &str) -> Result<Started> {
        trigger(self, id)
    }

    fn fire_schedules(&self, since: Option<u64>) -> Result<Fired> {
        fire_due(self, since)
    }
}

/// A backend that reads and writes the store itself: what its schedules take.
pub(crate) trait Direct: Backend {
    /// Reads the store directly.
    fn read_store<T>(
        &self,
        read: impl FnOnce(&mut dyn Read) -> std::result::Result<T, StoreError>,
    ) -> Result<T>;
    /// Writes a schedule op: whether it changed anything.
    fn write_schedule(&self, op: Op, id: &str) -> Result<bool>;
}

/// [`Client::create_schedule`] on a backend that writes the store itself.
pub(crate) fn create(direct: &impl Direct, schedule: &NewSchedule) -> Result<Schedule> {
    let bytes = direct.module(&schedule.module)?.ok_or_else(|| {
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
    if !direct.write_schedule(Op::PutSchedule(row.clone()), &row.id)? {
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

/// [`Client::schedules`] read from the store.
pub(crate) fn all(direct: &impl Direct) -> Result<Vec<Schedule>> {
    direct
        .read_store(|s| s.schedules())?
        .iter()
        .map(Schedule::of)
        .collect()
}

/// [`Client::schedule`] read from the store.
pub(crate) fn one(direct: &impl Direct, id: &str) -> Result<Schedule> {
    direct
        .read_store(|s| s.schedule(id))?
        .as_ref()
        .map(Schedule::of)
        .unwrap_or_else(|| Err(unknown(id)))
}

/// [`Client::pause_schedule`] and [`Client::resume_schedule`] on a backend that writes the
/// store itself.
pub(crate) fn set_paused(direct: &impl Direct, id: &str, paused: bool) -> Result<bool> {
    let schedule = one(direct, id)?;
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
    direct.write_schedule(op, id)
}

/// [`Client::delete_schedule`] on a backend that writes the store itself.
pub(crate) fn delete(direct: &impl Direct, id: &str) -> Result<bool> {
    direct.write_schedule(Op::DeleteSchedule { id: id.to_string() }, id)
}

/// [`Client::trigger_schedule`] on a backend that writes the store itself.
pub(crate) fn trigger(direct: &impl Direct, id: &str) -> Result<Started> {
    let schedule = one(direct, id)?;
    start_firing(direct, &schedule, &firing_id(id, now_millis()))
}

/// Starts the firing `id` of `schedule`.
fn start_firing(direct: &impl Direct, schedule: &Schedule, id: &str) -> Result<Started> {
    direct.start(&Start {
        id: Some(id),
        module: ModuleRef::Hash(&schedule.module),
        module_name: None,
        entry: &schedule.entry,
        input: &schedule.input,
        trace: None,
    })
}

/// [`Client::fire_schedules`] on a backend that writes the store itself.
pub(crate) fn fire_due(direct: &impl Direct, since: Option<u64>) -> Result<Fired> {
    let now = now_millis();
    let mut fired = Fired {
        at: now,
        ..Fired::default()
    };
    for row in direct.read_store(|s| s.schedules())? {
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
        match fire(direct, &schedule, now, since) {
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

fn fire(direct: &impl Direct, schedule: &Schedule, now: u64, since: Option<u64>) -> Result<Fired> {
    let due = schedule.next_fire.is_some_and(|next| next <= now) || schedule.buffered.is_some();
    if !due {
        return Ok(Fired::default());
    }
    let running = match &schedule.last_workflow {
        Some(last) => match direct.status(last) {
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
        match start_firing(direct, schedule, &id) {
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
    direct.write_schedule(Op::AdvanceSchedule(advance), &schedule.id)?;
    Ok(Fired {
        started,
        skipped,
        at: now,
    })
}

/// Whether `op` changed schedule row `before` into `after`.
pub(crate) fn changed(op: &Op, before: Option<&ScheduleRow>, after: Option<&ScheduleRow>) -> bool {
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
