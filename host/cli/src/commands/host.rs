//! How every subcommand builds its host: one place for the workers, the sandbox limits, the
//! module cache and, for durable commands, the store.

use anyhow::Context as _;
use wfhost::store::Location;
use wfhost::{Host, HostBuilder};

use super::durable::DurabilityArgs;
use super::limits::{CacheArgs, LimitArgs};

/// A builder with `workers` worker threads (default: one per core), the sandbox `limits` (the
/// defaults without), the module cache, and, when given, a store held as `durability` says.
pub(super) fn builder(
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
pub(super) fn build(builder: HostBuilder) -> anyhow::Result<Host> {
    builder.build().context("cannot start the host")
}
