//! The durable commands `resume` and `list`, and what `run --store` and `history` share with them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use wfhost::store::{Ending, Location, State, Store, Workflow};
use wfhost::{Host, HostBuilder, Snapshots, SyncMode};

use super::limits::{CacheArgs, LimitArgs};
use super::WorkflowFailed;
use crate::output::outln;

/// How hard the store syncs, and how often workflows save snapshots to it.
#[derive(Debug, clap::Args)]
pub struct DurabilityArgs {
    /// `full` (default): every commit is on disk before anything it acknowledges happens.
    /// `normal`: faster, and a crash of wfhost loses nothing, but a power loss may lose the last
    /// commits.
    #[arg(long, value_name = "MODE", default_value = "full", value_parser = ["full", "normal"])]
    sync: String,

    /// A workflow saves a snapshot of its state after this many events (and when it hibernates),
    /// so that recovery replays only the steps after the latest one. 0: never (recovery replays
    /// every journal from its start).
    #[arg(long, value_name = "EVENTS", default_value_t = 1_000)]
    snapshot_every: u64,

    /// On a store hosts share (PostgreSQL): how long this host's lease on its workflows lasts
    /// unless renewed (every third of it). Another host takes them over this long after a
    /// crash; a host that cannot renew in time loses them (e.g. 10s, 2s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::limits::parse_duration)]
    lease: Duration,

    /// Caps a SQLite store's file at about SIZE (e.g. 10GiB): at the cap the host takes no new
    /// work and its workflows stop where their journals end, as on a full disk (exit code 4);
    /// a host started with room resumes them. Default: the disk is the limit.
    #[arg(long, value_name = "SIZE", value_parser = super::limits::parse_size)]
    store_limit: Option<usize>,
}

impl DurabilityArgs {
    pub fn mode(&self) -> SyncMode {
        if self.sync == "normal" {
            SyncMode::Normal
        } else {
            SyncMode::Full
        }
    }

    /// The builder with the store at `store`, synced and snapshotted as these say.
    pub fn apply(&self, builder: HostBuilder, store: &Location) -> HostBuilder {
        let snapshots = match self.snapshot_every {
            0 => Snapshots::off(),
            every => Snapshots {
                every,
                ..Snapshots::default()
            },
        };
        let builder = builder
            .store(store, self.mode())
            .snapshots(snapshots)
            .lease(self.lease);
        match self.store_limit {
            Some(bytes) => builder.store_limit(bytes as u64),
            None => builder,
        }
    }
}

/// A durable host on `store`, as the options of `resume` and `serve` say.
pub(super) fn build_host(
    store: &Location,
    durability: &DurabilityArgs,
    limits: &LimitArgs,
    workers: Option<usize>,
    cache: &CacheArgs,
) -> anyhow::Result<Host> {
    let mut builder = durability.apply(limits.apply(Host::builder())?, store);
    if let Some(workers) = workers {
        anyhow::ensure!(workers > 0, "--workers must be at least 1");
        builder = builder.workers(workers);
    }
    if let Some(dir) = cache.dir() {
        builder = builder.module_cache(dir);
    }
    builder.build().context("cannot start the host")
}

/// A new workflow id: "wf-" and 16 random hex digits.
pub fn new_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = nanos.to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("wf-{hex}")
}

/// Shuts its host down when dropped, however a command ends (an error, a closed stdout): the
/// store is closed as a host closes it (checkpointed; on a shared store, the workflows given
/// back), though the Ctrl-C handler keeps a handle to the host.
pub struct Stopping(pub Host);

impl Drop for Stopping {
    fn drop(&mut self) {
        self.0.shutdown(Duration::from_secs(1));
    }
}

/// Set once Ctrl-C (or SIGTERM) stopped the host: what ends from then on was stopped, not failed.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether Ctrl-C (or SIGTERM) stopped the host.
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Acquire)
}

/// Ctrl-C stops the host without cancelling the workflows: they resume later.
pub fn stop_on_ctrl_c(host: Host, store: Location) -> anyhow::Result<()> {
    ctrlc::set_handler(move || {
        INTERRUPTED.store(true, std::sync::atomic::Ordering::Release);
        eprintln!(
            "interrupted: stopping; the workflows are kept in {store} (resume them with `wfhost \
             resume --store {store}`)"
        );
        host.shutdown(Duration::ZERO);
        std::process::exit(130);
    })
    .context("cannot install the Ctrl-C handler")
}

/// The store at `store`, which must exist.
pub(super) fn open(store: &Location) -> anyhow::Result<Box<dyn Store>> {
    Ok(store.open_existing()?)
}

/// Workflow `id` of `store` (opened from `location`), or an error that says how to list them.
pub(super) fn find(
    store: &mut dyn Store,
    location: &Location,
    id: &str,
) -> anyhow::Result<Workflow> {
    store.workflow(id)?.with_context(|| {
        format!("no workflow '{id}' in {location} (`wfhost list --store {location}` shows them)")
    })
}

/// Resumes every unfinished workflow of a store and runs them to the end, printing each result.
///
/// Each workflow replays its journal with the module it started with (kept in the store), then
/// goes on: timers fire at their due time (at once if it passed), messages not yet taken are
/// delivered. Results go to stdout as `ID: RESULT`, one line each.
#[derive(Debug, clap::Parser)]
pub struct ResumeCommand {
    /// The store `wfhost run --store` wrote: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// Worker threads. Default: one per core.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,

    #[command(flatten)]
    durability: DurabilityArgs,

    #[command(flatten)]
    limits: LimitArgs,

    #[command(flatten)]
    cache: CacheArgs,
}

impl ResumeCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        if let Some(path) = self.store.path().filter(|p| !p.exists()) {
            anyhow::bail!(
                "there is no store at {}: give the file `wfhost run --store` or `wfhost serve \
                 --store` wrote",
                path.display()
            );
        }
        let host = build_host(
            &self.store,
            &self.durability,
            &self.limits,
            self.workers,
            &self.cache,
        )?;
        let _stopping = Stopping(host.clone());
        stop_on_ctrl_c(host.clone(), self.store.clone())?;
        let grants = self.limits.grants();
        let mut runs = host.recover_with(grants.clone())?;
        if host.store_host().is_some() {
            // Hosts share the store: what a stopped host owned is claimable once its lease runs
            // out.
            let mut told = false;
            loop {
                let waiting = host.claimable()?;
                if waiting == 0 {
                    break;
                }
                if !told {
                    eprintln!(
                        "waiting for the leases on {waiting} workflow(s) of hosts that stopped \
                         renewing them"
                    );
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(100));
                runs.extend(host.claim_with(grants.clone(), usize::MAX)?);
            }
        }
        // Each damaged workflow was logged, with why, as the recovery found it.
        let damaged = host.damaged()?;
        eprintln!("resuming {} workflow(s)", runs.len());
        let (mut failed, mut stopped) = (0, 0);
        for (id, run) in runs {
            // Their messages to the host are logged as they come, and kept in the store.
            match run.without_messages().wait() {
                Ok(result) => outln!("{id}: {}", super::run::render(&result)?)?,
                Err(error) if host.store_failure().is_some() || interrupted() => {
                    stopped += 1;
                    outln!("{id}: stopped, resumable: {}", error.message())?;
                }
                Err(error) => {
                    failed += 1;
                    outln!("{id}: failed: {}", error.message())?;
                }
            }
        }
        if let Ok(counters) = host.durable_counters() {
            eprintln!(
                "recovery: {} workflow(s) from a snapshot, {} step(s) of {} event(s) replayed{}",
                counters.snapshots_restored,
                counters.steps_replayed,
                counters.events_replayed,
                match counters.snapshots_ignored {
                    0 => String::new(),
                    n => format!(", {n} damaged or outdated snapshot(s) set aside"),
                }
            );
        }
        host.shutdown(Duration::from_secs(1));
        if !damaged.is_empty() {
            return Err(super::Damaged(format!(
                "{} workflow(s) of {} could not be read back and were left as they were, not \
                 failed ({}): {}; repair the store (or fix the build) and resume again",
                damaged.len(),
                self.store,
                damaged
                    .iter()
                    .map(|d| format!("'{}'", d.id))
                    .collect::<Vec<_>>()
                    .join(", "),
                damaged
                    .iter()
                    .map(|d| format!("'{}': {}", d.id, d.why))
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
            .into());
        }
        if stopped > 0 {
            return Err(super::Stopped(format!(
                "{stopped} workflow(s) stopped where their journals end: {}; `wfhost resume \
                 --store {}` goes on with them",
                host.store_failure()
                    .map(|e| e.message().to_string())
                    .unwrap_or_default(),
                self.store
            ))
            .into());
        }
        if failed > 0 {
            return Err(WorkflowFailed(format!("{failed} workflow(s) failed")).into());
        }
        Ok(())
    }
}

/// Lists the workflows of a store: id, entry point, status, when started, steps.
#[derive(Debug, clap::Parser)]
pub struct ListCommand {
    /// The store: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,
}

impl ListCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let mut store = open(&self.store)?;
        let workflows = store.workflows(false)?;
        let rows: Vec<[String; 5]> = workflows
            .iter()
            .map(|w| {
                [
                    w.start.id.clone(),
                    w.start.entry.clone(),
                    status_word(w).to_string(),
                    time(w.start.started),
                    w.steps.to_string(),
                ]
            })
            .collect();
        let header = ["ID", "ENTRY", "STATUS", "STARTED", "STEPS"].map(String::from);
        let mut widths = [0usize; 5];
        for row in std::iter::once(&header).chain(&rows) {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            let line: Vec<String> = row
                .iter()
                .zip(widths)
                .enumerate()
                .map(|(i, (cell, width))| {
                    if i + 1 == row.len() {
                        cell.clone()
                    } else {
                        format!("{cell:<width$}")
                    }
                })
                .collect();
            outln!("{}", line.join("  "))?;
        }
        Ok(())
    }
}

/// A workflow's status in a word: `running`, `done`, `failed`, `cancelled`, or `damaged` (its
/// journal, or its tree's, cannot be read back).
pub(super) fn status_word(workflow: &Workflow) -> &'static str {
    match (&workflow.state, &workflow.ending, &workflow.damaged) {
        (State::Running, _, Some(_)) => "damaged",
        (State::Failed, Some(Ending::Failed { kind, .. }), _) if kind == "cancelled" => "cancelled",
        (state, _, _) => state.name(),
    }
}

/// Milliseconds since the Unix epoch, as UTC "YYYY-MM-DD hh:mm:ss.mmm".
pub(super) fn time(millis: u64) -> String {
    let secs = millis / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        millis % 1000
    )
}

/// Replays a workflow's journal with a module, running nothing: does a new build do what the one
/// that wrote the journal did? Exit code 1 when it does not, with the step and what differs.
#[derive(Debug, clap::Parser)]
pub struct ReplayCommand {
    /// The store: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// The workflow's id.
    id: String,

    /// The module to replay with (a `.wasm` file). Default: the one the workflow started with,
    /// as the store kept it.
    #[arg(long, value_name = "FILE")]
    module: Option<PathBuf>,

    #[command(flatten)]
    cache: CacheArgs,
}

impl ReplayCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let mut store = open(&self.store)?;
        let workflow = find(&mut *store, &self.store, &self.id)?;
        // Beside the host that may run the store: this one only reads it.
        let mut builder = Host::builder().workers(1).read_store(&self.store);
        if let Some(dir) = self.cache.dir() {
            builder = builder.module_cache(dir);
        }
        let host = builder.build().context("cannot start the host")?;
        let shown = match &self.module {
            Some(path) => {
                host.load_module("replayed", path)?;
                path.display().to_string()
            }
            None => {
                let hash = &workflow.start.module;
                let bytes = store.module(hash)?.with_context(|| {
                    format!("the store lacks the module {hash} the workflow started with")
                })?;
                host.load_module_bytes("replayed", &bytes)?;
                format!("its own module ({hash})")
            }
        };
        let replayed = host.replay(&self.id, "replayed");
        host.shutdown(Duration::from_secs(1));
        match replayed {
            Ok(steps) => {
                outln!(
                    "workflow {}: {steps} step(s) replay the same with {shown}",
                    self.id
                )?;
                Ok(())
            }
            Err(error) if error.kind() == wfhost::ErrorKind::Nondeterminism => {
                Err(WorkflowFailed(error.message().to_string()).into())
            }
            Err(error) => Err(error.into()),
        }
    }
}
