//! Which workflows a command over many of them takes (`replay --all`, `upgrade --all`).

use wfhost::{Client, ListQuery, WorkflowState};

/// Calls `each` with every unfinished workflow (running, paused or damaged) whose entry point
/// the module `info` exports (and, with `of`, that started from the module of that name or hash
/// prefix), page by page.
pub fn each_running(
    client: &Client,
    info: &wfhost::ModuleInfo,
    of: Option<&str>,
    mut each: impl FnMut(&wfhost::WorkflowStatus) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for state in [
        WorkflowState::Running,
        WorkflowState::Paused,
        WorkflowState::Damaged,
    ] {
        let mut query = ListQuery::new().state(state);
        loop {
            let page = client.list(&query)?;
            for workflow in &page.items {
                // A hash's start of at least 8 digits (a shorter one reads as a name only).
                let ours = info.entries.contains(&workflow.entry)
                    && of.is_none_or(|of| {
                        workflow.module_name == of
                            || (of.len() >= 8 && workflow.module.starts_with(of))
                    });
                if ours {
                    each(workflow)?;
                }
            }
            match page.next {
                Some(next) => query = query.after(next),
                None => break,
            }
        }
    }
    Ok(())
}
