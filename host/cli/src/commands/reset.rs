//! `wfhost reset`: a finished workflow runs again from one of its steps, as a new run of its id.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use wfhost::{ErrorKind, SyncMode, WorkflowReset};

use crate::args::limits::CacheArgs;
use crate::exit::WorkflowFailed;
use crate::output::outln;

/// Resets a finished (failed, cancelled or completed) top-level workflow: a new run keeps its
/// journal up to a step, replays it, and goes on from there under the same id. What the run
/// did after that step is done again, with idempotency keys of the new run's (a worker that
/// deduplicates by key sees new work); messages it took after the step are sent to the new run
/// again. The run before is kept whole, as `<id>/run-1` (`wfhost history order-7/run-1`).
///
/// Through a server (`--server`), the new run starts there at once. On a store (`--store`),
/// it waits for a host to recover the store (`wfhost resume`, `wfhost serve`).
#[derive(Debug, clap::Parser)]
pub struct ResetCommand {
    /// The workflow's id.
    id: String,

    /// The last step the new run keeps (0: none, it starts over). Default: the step before the
    /// one that ended the run, or before the one that took its cancel.
    #[arg(long, value_name = "N")]
    to_step: Option<u64>,

    /// A module (a `.wasm` file) to run in place of the workflow's own: fixed code. It must
    /// replay the steps kept; the step that differs is named otherwise.
    #[arg(long, value_name = "FILE")]
    module: Option<PathBuf>,

    #[command(flatten)]
    target: crate::args::target::Target,

    #[command(flatten)]
    cache: CacheArgs,
}

impl ResetCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let wasm = match &self.module {
            Some(path) => Some(
                std::fs::read(path)
                    .with_context(|| format!("cannot read the module {}", path.display()))?,
            ),
            None => None,
        };
        let (result, started) = if self.target.is_server() {
            let client = self.target.client()?;
            (client.reset(&self.id, self.to_step, wasm.as_deref()), true)
        } else {
            // A host of its own over the store, which starts nothing: the new run waits for
            // the host that serves the store, with that host's grants.
            let location = self.target.location()?;
            let builder = crate::args::host::builder(Some(1), None, &self.cache, None)?;
            let host = crate::args::host::build(builder.store(location, SyncMode::Full))?;
            let result = host.reset_unstarted(&self.id, self.to_step, wasm.as_deref());
            host.shutdown(Duration::from_secs(1));
            (result, false)
        };
        match result {
            Ok(reset) => say(&reset, started),
            Err(error) if error.kind() == ErrorKind::Conflict => {
                Err(WorkflowFailed(error.message().to_string()).into())
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// What a reset did, in words.
fn say(reset: &WorkflowReset, started: bool) -> anyhow::Result<()> {
    outln!(
        "{} reset: run {} keeps {} step(s) of the run before (now {}) and goes on from there",
        reset.id,
        reset.run,
        reset.steps,
        reset.previous
    )?;
    if reset.messages > 0 {
        outln!(
            "{} message(s) it took after step {} sent to the new run again",
            reset.messages,
            reset.steps
        )?;
    }
    if !started {
        outln!(
            "it runs once a host recovers the store (`wfhost resume`, or `wfhost serve` on it)"
        )?;
    }
    Ok(())
}
