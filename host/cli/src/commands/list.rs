//! `wfhost list`: a store's workflows, a page at a time.

use anyhow::Context as _;
use wfhost::{ListQuery, WorkflowState};

use crate::args::show::{status_word, time};
use crate::output::outln;

/// Lists the workflows of a store, oldest first, a page at a time: id, entry point, status,
/// when started, steps. When more follow, the last line gives the cursor of the next page
/// (`--after`).
#[derive(Debug, clap::Parser)]
pub struct ListCommand {
    #[command(flatten)]
    target: crate::args::target::Target,

    /// At most this many workflows (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    limit: usize,

    /// The page after the one that printed this cursor.
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,

    /// Only workflows that stand so: running, paused, damaged, completed, failed or cancelled.
    #[arg(long, value_name = "STATUS", value_parser = ["running", "paused", "damaged", "completed", "done", "failed", "cancelled"])]
    status: Option<String>,

    /// Only workflows of this entry point.
    #[arg(long, value_name = "ENTRY")]
    entry: Option<String>,

    /// Only workflows whose id starts with this.
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
}

impl ListCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let mut query = ListQuery::new().limit(self.limit);
        if let Some(state) = self.status.as_deref().and_then(WorkflowState::parse) {
            query = query.state(state);
        }
        if let Some(entry) = &self.entry {
            query = query.entry(entry.clone());
        }
        if let Some(prefix) = &self.prefix {
            query = query.prefix(prefix.clone());
        }
        if let Some(after) = &self.after {
            query = query.after(after.clone());
        }
        let location = self.target.location()?;
        let page = self
            .target
            .client()?
            .list(&query)
            .with_context(|| format!("cannot list the workflows of {location}"))?;
        let rows: Vec<[String; 5]> = page
            .items
            .iter()
            .map(|w| {
                [
                    w.id.clone(),
                    w.entry.clone(),
                    status_word(w).to_string(),
                    time(w.started),
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
        if let Some(next) = page.next {
            // Beside the table, not in it: the page's rows stay what a tool reads.
            eprintln!(
                "more follow: wfhost list --{} {location} --limit {} --after {next}",
                if self.target.is_server() {
                    "server"
                } else {
                    "store"
                },
                self.limit
            );
        }
        Ok(())
    }
}
