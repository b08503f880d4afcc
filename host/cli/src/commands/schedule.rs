//! `wfhost schedule`: workflows started on a cron expression or an interval, by the hosts that
//! serve the store (`wfhost serve`), each firing once across them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use wfhost::schedules::{CatchUp, NewSchedule, Overlap, Schedule, When};
use wfhost::{utc_time, Payload};

use crate::args::units::parse_duration;
use crate::output::outln;

/// Schedules: each firing starts a workflow `ID@<the firing's time>` (for example
/// `nightly@2026-11-26T02:00:00Z`), so that a firing starts once however many hosts serve the
/// store and however often one restarts. The hosts that serve the store (`wfhost serve`) fire
/// them.
#[derive(Debug, clap::Parser)]
pub struct ScheduleCommand {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Creates a schedule.
    Create(Box<Create>),
    /// Lists the schedules.
    List(ListArgs),
    /// Pauses a schedule: it does not fire until resumed.
    Pause(One),
    /// Resumes a paused schedule from its next time after now (what it skipped is not caught up).
    Resume(One),
    /// Deletes a schedule (the workflows it started stay).
    Delete(One),
    /// Fires a schedule now, whatever its times: prints the workflow's id.
    Trigger(One),
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    #[command(flatten)]
    target: crate::args::target::Target,
}

#[derive(Debug, clap::Args)]
struct One {
    /// The schedule's id.
    id: String,

    #[command(flatten)]
    target: crate::args::target::Target,
}

#[derive(Debug, clap::Args)]
struct Create {
    /// The schedule's id (no '@').
    id: String,

    /// The workflow module: a `.wasm` file, or a workflow crate's directory (built first).
    module: PathBuf,

    /// The entry point each firing starts.
    entry: String,

    /// A cron expression, seconds first: "0 */5 * * * *" is every five minutes, "0 0 2 * * *"
    /// every day at 02:00.
    #[arg(
        long,
        value_name = "EXPR",
        required_unless_present = "every",
        conflicts_with = "every"
    )]
    cron: Option<String>,

    /// Or an interval: 30s, 10m, 1h, 1d (at least a second).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    every: Option<Duration>,

    /// The time zone the cron expression is read in (an IANA name).
    #[arg(long, value_name = "ZONE", default_value = "UTC", requires = "cron")]
    time_zone: String,

    /// The input of each firing's workflow, as JSON. Default: null.
    #[arg(long, value_name = "JSON")]
    input: Option<String>,

    /// While the last firing's workflow runs, a firing is skipped (skip), waits for it to end,
    /// one at most (buffer-one), or starts anyway (allow-all).
    #[arg(long, value_name = "POLICY", default_value = "skip")]
    overlap: String,

    /// Firings missed while no host ran (found more than a second late): none run (skip), the
    /// latest runs (last), or they run, the latest N at most (all:N).
    #[arg(long, value_name = "POLICY", default_value = "skip")]
    catch_up: String,

    /// Each firing starts up to this much after its time (the same delay on every host).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    jitter: Option<Duration>,

    #[command(flatten)]
    target: crate::args::target::Target,
}

impl ScheduleCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        match self.action {
            Action::Create(create) => create.execute(),
            Action::List(list) => {
                let schedules = list.target.client()?.schedules()?;
                if schedules.is_empty() {
                    eprintln!("no schedules");
                }
                for schedule in &schedules {
                    outln!("{}", line(schedule))?;
                }
                Ok(())
            }
            Action::Pause(one) => {
                let changed = one.target.client()?.pause_schedule(&one.id)?;
                say(&one.id, changed, "paused");
                Ok(())
            }
            Action::Resume(one) => {
                let changed = one.target.client()?.resume_schedule(&one.id)?;
                say(&one.id, changed, "resumed");
                Ok(())
            }
            Action::Delete(one) => {
                if one.target.client()?.delete_schedule(&one.id)? {
                    eprintln!("{} deleted", one.id);
                } else {
                    eprintln!("no schedule '{}': nothing deleted", one.id);
                }
                Ok(())
            }
            Action::Trigger(one) => {
                let started = one.target.client()?.trigger_schedule(&one.id)?;
                eprintln!("started {}", started.id);
                outln!("{}", started.id)?;
                Ok(())
            }
        }
    }
}

impl Create {
    fn execute(self) -> anyhow::Result<()> {
        let when = match (&self.cron, self.every) {
            (Some(cron), _) => When::cron(cron, &self.time_zone)?,
            (None, Some(every)) => When::every(every)?,
            (None, None) => bail!("say when it fires: --cron EXPR or --every DURATION"),
        };
        let (_, bytes) = crate::args::input::module_with(&self.module, &self.entry)?;
        let input = self.input.as_deref().unwrap_or("null");
        serde_json::from_str::<serde_json::Value>(input)
            .with_context(|| format!("--input is not JSON: {input}"))?;
        let client = self.target.client()?;
        let stored = client.put_module(&bytes)?;
        let mut schedule = NewSchedule::new(
            &self.id,
            when,
            &stored.hash,
            &self.entry,
            Payload::json_bytes(input.as_bytes().to_vec()),
        )
        .overlap(self.overlap.parse::<Overlap>()?)
        .catch_up(self.catch_up.parse::<CatchUp>()?);
        if let Some(jitter) = self.jitter {
            schedule = schedule.jitter(jitter);
        }
        let created = client.create_schedule(&schedule)?;
        eprintln!(
            "created {}: {}, next at {}",
            created.id,
            created.when.describe(),
            created.next_fire.map_or_else(|| "never".into(), utc_time)
        );
        Ok(())
    }
}

/// One schedule on a line: id, state, when, next firing, fired, entry.
fn line(s: &Schedule) -> String {
    format!(
        "{}  {}  {}  next {}  fired {}  {}  overlap {}  catch-up {}{}",
        s.id,
        if s.paused { "paused" } else { "active" },
        s.when.describe(),
        s.next_fire.map_or_else(|| "never".into(), utc_time),
        s.fired,
        s.entry,
        s.overlap.name(),
        s.catch_up.name(),
        s.last_workflow
            .as_deref()
            .map_or_else(String::new, |w| format!("  last {w}"))
    )
}

fn say(id: &str, changed: bool, done: &str) {
    if changed {
        eprintln!("{id} {done}");
    } else {
        eprintln!("{id} was {done} already");
    }
}
