//! Schedules: a workflow started again and again, on a cron expression or an interval. Each
//! firing starts a workflow whose id is the schedule's id and the firing's time
//! (`nightly@2026-11-26T02:00:00Z`), so that however many hosts look at a schedule, and however
//! often a crashed one looks again, the store lets one start of each firing through. Schedules
//! live in the store (`schedules`); every `wfhost serve` fires them (`wfhost-server`'s
//! `serve/schedules.rs`, through [`Client::fire_schedules`](crate::Client::fire_schedules)).

mod firings;
mod plan;
mod spec;

use std::time::Duration;

use chrono::{SecondsFormat, TimeZone, Utc};
use wfcontract::Payload;

pub use spec::{CatchUp, Overlap, When};

pub(crate) use plan::{plan, Timing};

use crate::error::{Error, ErrorKind, Result};
use wfhost_store::ScheduleRow;

/// The longest schedule id: a workflow id is at most 1024 characters, and a firing's adds `@`
/// and its time.
pub const MAX_ID: usize = 1024 - 32;

/// A firing found more than this after its time (while no host ran the schedule) is missed:
/// the schedule's [`CatchUp`] policy says what becomes of it.
pub const LATE: Duration = Duration::from_secs(1);

/// A schedule to create.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NewSchedule {
    /// Its id: what the ids of the workflows it starts begin with.
    pub id: String,
    /// When it fires.
    pub when: When,
    /// The module's SHA-256 (a module the store keeps).
    pub module: String,
    /// The entry point.
    pub entry: String,
    /// The input of each workflow.
    pub input: Payload,
    /// What a firing does while the last workflow still runs.
    pub overlap: Overlap,
    /// What becomes of firings missed while no host ran.
    pub catch_up: CatchUp,
    /// Each firing starts up to this much after its time (the same delay on every host).
    pub jitter: Duration,
}

impl NewSchedule {
    /// A schedule `id` that starts `entry` of the stored module `module` with `input` `when`
    /// says, skipping overlapping and missed firings, with no jitter.
    pub fn new(id: &str, when: When, module: &str, entry: &str, input: Payload) -> NewSchedule {
        NewSchedule {
            id: id.to_string(),
            when,
            module: module.to_string(),
            entry: entry.to_string(),
            input,
            overlap: Overlap::Skip,
            catch_up: CatchUp::Skip,
            jitter: Duration::ZERO,
        }
    }

    /// With this overlap policy.
    pub fn overlap(mut self, overlap: Overlap) -> NewSchedule {
        self.overlap = overlap;
        self
    }

    /// With this catch-up policy.
    pub fn catch_up(mut self, catch_up: CatchUp) -> NewSchedule {
        self.catch_up = catch_up;
        self
    }

    /// With this jitter.
    pub fn jitter(mut self, jitter: Duration) -> NewSchedule {
        self.jitter = jitter;
        self
    }

    /// Checks what a store cannot: the id (a workflow id's rules, and no `@`) and the jitter.
    pub(crate) fn check(&self) -> Result<()> {
        if self.id.contains('@') {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "schedule id '{}' has an '@', which separates it from the firing's time in \
                     the ids of its workflows",
                    self.id
                ),
            ));
        }
        // Its workflows' ids are its own and `@` and a time (at most 30 characters).
        if self.id.len() > MAX_ID {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "a schedule id is at most {MAX_ID} characters (its workflows' ids add the \
                     firing's time)"
                ),
            ));
        }
        self.when.check()?;
        if let CatchUp::All(n) = self.catch_up {
            CatchUp::All(n).name().parse::<CatchUp>()?;
        }
        if let Some(gap) = self.when.gap_after(wfhost_store::time::now_millis()) {
            if self.jitter.as_millis() >= u128::from(gap) {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "a jitter of {:?} is not shorter than the time between two firings \
                         ({gap} ms): firings would overtake each other",
                        self.jitter
                    ),
                ));
            }
        }
        if let Some(why) = crate::ids::bad_id(&self.id) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("schedule id '{}' cannot be used: {why}", self.id),
            ));
        }
        if self.jitter > Duration::from_secs(86_400) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a schedule's jitter is at most a day",
            ));
        }
        Ok(())
    }

    /// The row the store keeps, created at `now`.
    pub(crate) fn row(&self, module_name: &str, now: u64) -> Result<ScheduleRow> {
        let next_fire = self.when.next_after(now, now).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{} never fires again", self.when.describe()),
            )
        })?;
        Ok(ScheduleRow {
            id: self.id.clone(),
            spec: self.when.encode(),
            module: self.module.clone(),
            module_name: module_name.to_string(),
            entry: self.entry.clone(),
            input: postcard::to_allocvec(&self.input)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the input: {e}")))?,
            overlap: self.overlap.name().to_string(),
            catch_up: self.catch_up.name(),
            jitter_ms: u64::try_from(self.jitter.as_millis()).unwrap_or(u64::MAX),
            paused: false,
            next_fire,
            last_workflow: None,
            buffered: None,
            fired: 0,
            created: now,
        })
    }
}

/// A schedule, as the store has it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Schedule {
    /// Its id.
    pub id: String,
    /// When it fires.
    pub when: When,
    /// The module's SHA-256.
    pub module: String,
    /// The name the module was stored under, if any.
    pub module_name: String,
    /// The entry point.
    pub entry: String,
    /// The input of each workflow.
    pub input: Payload,
    /// What a firing does while the last workflow still runs.
    pub overlap: Overlap,
    /// What becomes of firings missed while no host ran.
    pub catch_up: CatchUp,
    /// Each firing starts up to this much after its time.
    pub jitter: Duration,
    /// Paused: it does not fire until resumed (and does not catch up on what it skipped).
    pub paused: bool,
    /// Its next firing, in milliseconds since the Unix epoch (`None`: it never fires again).
    pub next_fire: Option<u64>,
    /// The workflow its last firing started.
    pub last_workflow: Option<String>,
    /// A firing waiting for that workflow to end (`buffer-one`), by its time.
    pub buffered: Option<u64>,
    /// Workflows it has started.
    pub fired: u64,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created: u64,
}

impl Schedule {
    /// The schedule a store row holds.
    pub(crate) fn of(row: &ScheduleRow) -> Result<Schedule> {
        let damaged = |what: &str| {
            Error::new(
                ErrorKind::Store,
                format!(
                    "schedule '{}' has a stored {what} this build cannot read",
                    row.id
                ),
            )
        };
        Ok(Schedule {
            id: row.id.clone(),
            when: When::decode(&row.spec).map_err(|_| damaged("time"))?,
            module: row.module.clone(),
            module_name: row.module_name.clone(),
            entry: row.entry.clone(),
            input: postcard::from_bytes(&row.input).map_err(|_| damaged("input"))?,
            overlap: row.overlap.parse().map_err(|_| damaged("overlap policy"))?,
            catch_up: row
                .catch_up
                .parse()
                .map_err(|_| damaged("catch-up policy"))?,
            jitter: Duration::from_millis(row.jitter_ms),
            paused: row.paused,
            next_fire: (row.next_fire != u64::MAX).then_some(row.next_fire),
            last_workflow: row.last_workflow.clone(),
            buffered: row.buffered,
            fired: row.fired,
            created: row.created,
        })
    }

    /// Its timing, for the planner.
    pub(crate) fn timing(&self) -> Timing<'_> {
        Timing {
            id: &self.id,
            when: &self.when,
            origin: self.created,
            next_fire: self.next_fire.unwrap_or(u64::MAX),
            overlap: self.overlap,
            catch_up: self.catch_up,
            jitter_ms: u64::try_from(self.jitter.as_millis()).unwrap_or(u64::MAX),
            buffered: self.buffered,
        }
    }
}

/// The id of the workflow firing `at` of schedule `id` starts: `id@2026-11-26T14:00:00Z`.
pub fn firing_id(id: &str, at: u64) -> String {
    let time = i64::try_from(at)
        .ok()
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
        .map_or_else(
            || at.to_string(),
            |t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        );
    format!("{id}@{time}")
}

/// The nominal time of a firing, from the id of the workflow it started; `None` for an id no
/// schedule made.
pub fn firing_time(workflow: &str) -> Option<u64> {
    let (_, time) = workflow.rsplit_once('@')?;
    let parsed = chrono::DateTime::parse_from_rfc3339(time).ok()?;
    u64::try_from(parsed.timestamp_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_firing_id_says_when_and_reads_back() {
        let at = 1_795_701_600_000;
        assert_eq!(firing_id("nightly", at), "nightly@2026-11-26T14:00:00Z");
        assert_eq!(firing_id("n", at + 250), "n@2026-11-26T14:00:00.250Z");
        assert_eq!(firing_time("nightly@2026-11-26T14:00:00Z"), Some(at));
        assert_eq!(firing_time("n@2026-11-26T14:00:00.250Z"), Some(at + 250));
        assert_eq!(firing_time("not-a-firing"), None);
    }
}
