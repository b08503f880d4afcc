//! `wfhost prune`: finished workflows removed from a store (retention).

use std::time::Duration;

use wfhost::{PruneQuery, WorkflowState};

use crate::args::units::parse_duration;

/// Removes the top-level workflows that finished longer ago than `--finished-before`, each with
/// its whole tree (its children, theirs, ...) and everything of theirs: steps, snapshots,
/// messages, what they sent the host, and the modules no workflow left uses. A tree part of
/// which still runs is left. It works in batches, so the workflows that run keep committing.
/// A SQLite file is pruned through the server that holds it (--server), or directly when no
/// host runs on it.
#[derive(Debug, clap::Parser)]
pub struct PruneCommand {
    /// Remove those that finished longer ago than this (e.g. 30d, 12h, 90m).
    #[arg(long, value_name = "AGE", value_parser = parse_duration)]
    finished_before: Duration,

    /// Only those that ended so.
    #[arg(long, value_name = "STATUS", value_parser = ["completed", "done", "failed", "cancelled"])]
    status: Option<String>,

    #[command(flatten)]
    target: crate::args::target::Target,
}

impl PruneCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let cutoff = now.saturating_sub(self.finished_before.as_millis() as u64);
        let mut query = PruneQuery::finished_before(cutoff);
        query.status = match self.status.as_deref() {
            Some("completed" | "done") => Some(WorkflowState::Completed),
            Some("failed") => Some(WorkflowState::Failed),
            Some("cancelled") => Some(WorkflowState::Cancelled),
            _ => None,
        };
        let pruned = self.target.client()?.prune(&query)?;
        eprintln!(
            "removed {} workflow(s): {} top-level, each with its tree, finished before {}",
            pruned.workflows,
            pruned.trees,
            crate::args::show::time(cutoff)
        );
        if pruned.left > 0 {
            eprintln!(
                "left {} top-level workflow(s) whose tree still runs in part",
                pruned.left
            );
        }
        Ok(())
    }
}
