//! How every subcommand builds its host: one place for the workers, the sandbox limits, the
//! module cache and, for durable commands, the store (how hard it syncs), and how a host stops.

use std::time::Duration;

use anyhow::Context as _;
use wfhost::store::Location;
use wfhost::{Host, HostBuilder, Snapshots, SyncMode};

use super::limits::{CacheArgs, LimitArgs};

/// A builder with `workers` worker threads (default: one per core), the sandbox `limits` (the
/// defaults without), the module cache, and, when given, a store held as `durability` says.
pub fn builder(
    workers: Option<usize>,
    limits: Option<&LimitArgs>,
    cache: &CacheArgs,
    store: Option<(&Location, &DurabilityArgs)>,
) -> anyhow::Result<HostBuilder> {
    let mut builder = match limits {
        Some(limits) => limits.apply(Host::builder())?,
        None => Host::builder(),
    };
    if let Some(workers) = workers {
        anyhow::ensure!(workers > 0, "--workers must be at least 1");
        builder = builder.workers(workers);
    }
    if let Some(dir) = cache.dir() {
        builder = builder.module_cache(dir);
    }
    if let Some((store, durability)) = store {
        builder = durability.apply(builder, store);
    }
    Ok(builder)
}

/// The host `builder` describes, started.
pub fn build(builder: HostBuilder) -> anyhow::Result<Host> {
    builder.build().context("cannot start the host")
}

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
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::units::parse_duration)]
    lease: Duration,

    /// Caps a SQLite store's file at about SIZE (e.g. 10GiB): at the cap the host takes no new
    /// work and its workflows stop where their journals end, as on a full disk (exit code 4);
    /// a host started with room resumes them. Default: the disk is the limit.
    #[arg(long, value_name = "SIZE", value_parser = super::units::parse_size)]
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
        let snapshots = Snapshots::every(self.snapshot_every);
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
pub fn build_host(
    store: &Location,
    durability: &DurabilityArgs,
    limits: &LimitArgs,
    workers: Option<usize>,
    cache: &CacheArgs,
) -> anyhow::Result<Host> {
    build(builder(
        workers,
        Some(limits),
        cache,
        Some((store, durability)),
    )?)
}

pub use wfhost::store::new_id;

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
