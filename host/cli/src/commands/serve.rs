//! `wfhost serve`: a long-running host on a store. On a store hosts share (PostgreSQL) it claims
//! the workflows no live host owns, again and again, and runs them; on SQLite it is the one host
//! and runs every unfinished workflow. SIGTERM or Ctrl-C stops it gracefully: it claims nothing
//! more, stops its workflows where their journals end, and gives them back to the other hosts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use wfhost::store::Location;
use wfhost::Host;

use super::durable::DurabilityArgs;
use super::limits::{parse_duration, CacheArgs, LimitArgs};

/// Serves a store: runs its workflows until stopped (SIGTERM, Ctrl-C).
///
/// On a PostgreSQL store several `wfhost serve` share the work: each claims the workflows no live
/// host owns (new ones from `wfhost start`, and those of a host whose lease ran out) and runs
/// them; a host that dies loses its workflows to the others after its lease (--lease). On a
/// SQLite file it is the only host. Stopping gives what it runs back to the other hosts at once.
#[derive(Debug, clap::Parser)]
pub struct ServeCommand {
    /// The store: a PostgreSQL URL (hosts share it) or a SQLite file (this host alone).
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// Worker threads. Default: one per core.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,

    /// How often to look for workflows to claim (e.g. 500ms, 2s).
    /// Clients' starts, messages and cancels wake the host at once (PostgreSQL's LISTEN); the
    /// poll catches the rest (messages from workflows on other hosts, leases that ran out).
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = parse_duration)]
    poll: Duration,

    /// The most trees of workflows (a top-level workflow and what it spawned) claimed at one
    /// look, so that hosts starting together share the work; never more than the host has free
    /// process slots (`--max-processes` and the memory it has).
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    claim: usize,

    /// On SIGTERM or Ctrl-C: how long running steps may take to finish before the host stops.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    grace: Duration,

    #[command(flatten)]
    durability: DurabilityArgs,

    #[command(flatten)]
    limits: LimitArgs,

    #[command(flatten)]
    cache: CacheArgs,
}

impl ServeCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        anyhow::ensure!(self.claim > 0, "--claim must be at least 1");
        if let Location::Sqlite(_) = &self.store {
            // A new file is fine: the host creates it.
        } else {
            // A database must be reachable; its tables are created if need be.
            drop(self.store.open(self.durability.mode())?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (wake, woken) = crossbeam_channel::bounded::<()>(1);
        {
            let stop = Arc::clone(&stop);
            let wake = wake.clone();
            ctrlc::set_handler(move || {
                stop.store(true, Ordering::Release);
                let _ = wake.try_send(());
            })
            .context("cannot install the SIGTERM and Ctrl-C handler")?;
        }
        let grants = self.limits.grants();
        // A host that loses its lease (paused, cut off) stops its workflows; a new one, with a
        // new lease, takes up the work.
        loop {
            let host = self.build()?;
            let _stopping = super::durable::Stopping(host.clone());
            {
                // Clients' starts, messages and cancels wake the host at once; the poll is the
                // fallback.
                let wake = wake.clone();
                host.on_new_work(move || {
                    let _ = wake.try_send(());
                })?;
            }
            let who = host
                .store_host()
                .map_or_else(|| "the only host".to_string(), |id| format!("host {id}"));
            tracing::info!(store = %self.store, "serving as {who}");
            eprintln!("wfhost serve: serving {} as {who}", self.store);
            let mut first = true;
            loop {
                if stop.load(Ordering::Acquire) {
                    eprintln!("wfhost serve: stopping; giving back what this host runs");
                    let report = host.shutdown(self.grace);
                    tracing::info!(?report, "stopped");
                    return Ok(());
                }
                if let Some(error) = host.store_failure() {
                    if host.store_host().is_none() {
                        host.shutdown(Duration::ZERO);
                        anyhow::bail!("{}", error.message());
                    }
                    tracing::error!("{}; starting again as a new host", error.message());
                    eprintln!(
                        "wfhost serve: {}; starting again as a new host",
                        error.message()
                    );
                    host.shutdown(Duration::ZERO);
                    break;
                }
                let shared = host.store_host().is_some();
                if !shared && !first {
                    // The only host: everything unfinished was recovered at the start, and new
                    // workflows come from this host alone.
                    let _ = woken.recv_timeout(self.poll);
                    continue;
                }
                first = false;
                // A host claims only while it has room: the others take the rest.
                let free = host.capacity().processes.saturating_sub(host.live());
                let limit = self.claim.min(free);
                if limit == 0 {
                    let _ = woken.recv_timeout(self.poll);
                    continue;
                }
                match host.claim_with(grants.clone(), limit) {
                    Ok(runs) if !runs.is_empty() => {
                        tracing::info!(claimed = runs.len(), live = host.live(), "claimed");
                        // Claimed a full batch: more may wait.
                        if runs.len() >= limit {
                            continue;
                        }
                    }
                    Ok(_) => {}
                    Err(error) if host.store_failure().is_some() => {
                        tracing::debug!("claiming failed with the store: {}", error.message());
                    }
                    Err(error) => {
                        tracing::warn!("claiming workflows: {}", error.message());
                    }
                }
                let _ = woken.recv_timeout(self.poll);
            }
        }
    }

    fn build(&self) -> anyhow::Result<Host> {
        super::durable::build_host(
            &self.store,
            &self.durability,
            &self.limits,
            self.workers,
            &self.cache,
        )
    }
}
