//! `wfhost resume`: every unfinished workflow of a store, run to its end.

use std::time::Duration;

use wfhost::store::Location;
use wfhost::{Damage, Host, Run};

use crate::args::host::{build_host, interrupted, stop_on_ctrl_c, DurabilityArgs, Stopping};
use crate::args::limits::{CacheArgs, LimitArgs};
use crate::exit::WorkflowFailed;
use crate::output::outln;

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
        let runs = self.recover(&host)?;
        // Each damaged workflow was logged, with why, as the recovery found it.
        let damaged = host.damaged()?;
        eprintln!("resuming {} workflow(s)", runs.len());
        let (mut failed, mut stopped) = (0, 0);
        for (id, run) in runs {
            // Their messages to the host are logged as they come, and kept in the store.
            match run.without_messages().wait() {
                Ok(result) => outln!("{id}: {}", crate::args::show::render(&result)?)?,
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
        report_recovery(&host);
        host.shutdown(Duration::from_secs(1));
        self.outcome(&host, &damaged, stopped, failed)
    }

    /// Every unfinished workflow of the store, running: on a store hosts share, also those of
    /// hosts that stopped renewing their leases, once the leases run out.
    fn recover(&self, host: &Host) -> anyhow::Result<Vec<(String, Run)>> {
        let grants = self.limits.grants();
        let mut runs = host.recover_with(grants.clone())?;
        if host.store_host().is_none() {
            return Ok(runs);
        }
        let mut told = false;
        loop {
            let waiting = host.claimable()?;
            if waiting == 0 {
                return Ok(runs);
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

    /// The command's outcome: damage first (exit code 5), then workflows the store stopped
    /// (4), then failed ones (1).
    fn outcome(
        &self,
        host: &Host,
        damaged: &[Damage],
        stopped: usize,
        failed: usize,
    ) -> anyhow::Result<()> {
        if !damaged.is_empty() {
            return Err(crate::exit::Damaged(format!(
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
            return Err(crate::exit::Stopped(format!(
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

/// What the recovery restored and replayed, on stderr.
fn report_recovery(host: &Host) {
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
}
