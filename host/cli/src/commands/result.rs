//! `wfhost result`: what a workflow ended with, from the store whichever host ran it.

use std::time::Duration;

use anyhow::{bail, Context as _};
use wfhost::WorkflowStatus;

use crate::args::units::parse_duration;
use crate::exit::WorkflowFailed;
use crate::output::outln;

/// Prints a workflow's result (JSON), from the store whichever host ran it. Exit code 1 if it
/// failed; with --wait, waits for it to end.
#[derive(Debug, clap::Parser)]
pub struct ResultCommand {
    /// The workflow's id.
    id: String,

    #[command(flatten)]
    target: crate::args::target::Target,

    /// Wait for the workflow to end (otherwise an unfinished one is an error).
    #[arg(long)]
    wait: bool,

    /// With --wait: give up after this long (e.g. 30s, 5m). Default: wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "wait")]
    timeout: Option<Duration>,
}

impl ResultCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let client = self.target.client()?;
        let wait = match (self.wait, self.timeout) {
            (false, _) => None,
            (true, Some(timeout)) => Some(timeout),
            (true, None) => Some(Duration::MAX),
        };
        let workflow = client.result(&self.id, wait)?;
        if workflow.is_finished() {
            return print_result(&workflow);
        }
        if !self.wait {
            bail!(
                "workflow '{}' has not finished (`wfhost result --wait` waits for it)",
                self.id
            );
        }
        bail!(
            "workflow '{}' did not finish within {:?}",
            self.id,
            self.timeout.unwrap_or_default()
        )
    }
}

/// Prints what `workflow` ended with: its result on stdout, or its failure as an error.
fn print_result(workflow: &WorkflowStatus) -> anyhow::Result<()> {
    if let Some(e) = &workflow.error {
        return Err(WorkflowFailed(format!(
            "workflow '{}' failed ({}): {}",
            workflow.id, e.kind, e.message
        ))
        .into());
    }
    let result = workflow
        .result
        .as_ref()
        .with_context(|| format!("the stored result of '{}' does not decode", workflow.id))?;
    outln!("{}", crate::args::show::render(result)?)?;
    Ok(())
}
