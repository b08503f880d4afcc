//! `wfhost status`: where one workflow stands.

use wfhost::WorkflowState;

use crate::args::show::{status_word, time};
use crate::output::outln;

/// Shows where a workflow stands: running (and on which host, or waiting for one), paused,
/// damaged (its journal cannot be read back), completed, failed or cancelled (with its result or
/// error); its steps, times and the messages waiting for it, and through a server, what it waits
/// for that its host does not serve.
#[derive(Debug, clap::Parser)]
pub struct StatusCommand {
    /// The workflow's id.
    id: String,

    #[command(flatten)]
    target: crate::args::target::Target,

    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl StatusCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let client = self.target.client()?;
        let workflow = client.status(&self.id)?;
        // What it waits for that its host cannot give it (a function that host does not
        // serve): said by a host, so only through a server.
        let unserved: Vec<String> = if workflow.is_finished() || !self.target.is_server() {
            Vec::new()
        } else {
            client
                .waits(&self.id)
                .map(|waits| waits.open.into_iter().filter_map(|o| o.unserved).collect())
                .unwrap_or_default()
        };
        let status = status_word(&workflow);
        let result = workflow.result.as_ref().map(|p| {
            crate::args::show::render(p)
                .unwrap_or_else(|_| "(a result that does not decode)".into())
        });
        let result = match (&result, workflow.state) {
            (None, WorkflowState::Completed) => Some("(a result that does not decode)".into()),
            _ => result,
        };
        let error = workflow.error.as_ref();
        if self.json {
            let result = result
                .as_deref()
                .map(|text| serde_json::from_str::<serde_json::Value>(text).unwrap_or(text.into()));
            outln!(
                "{}",
                serde_json::json!({
                    "id": workflow.id,
                    "pid": workflow.number,
                    "entry": workflow.entry,
                    "module": workflow.module_name,
                    "status": status,
                    "waiting_for_host": workflow.waiting_for_host,
                    "host": workflow.host,
                    "started": workflow.started,
                    "finished": workflow.finished,
                    "steps": workflow.steps,
                    "result": result,
                    "error": error.map(|e| serde_json::json!({
                        "kind": e.kind,
                        "message": e.message,
                    })),
                    "damaged": workflow.damaged,
                    "paused": workflow.paused,
                    "unread_messages": workflow.unread,
                    "unserved": unserved,
                })
            )?;
            return Ok(());
        }
        outln!("id:       {}", workflow.id)?;
        outln!("entry:    {} ({})", workflow.entry, workflow.module_name)?;
        let waiting = match (&workflow.damaged, workflow.waiting_for_host) {
            (Some(_), _) => "",
            (None, true) if workflow.steps == 0 => {
                " (waiting for a host to start it: `wfhost serve` or `wfhost resume`)"
            }
            (None, true) => " (waiting for a host: `wfhost serve` or `wfhost resume` goes on)",
            (None, false) => "",
        };
        outln!("status:   {status}{waiting}")?;
        if let Some(why) = &workflow.damaged {
            outln!(
                "damaged:  {why} (left as it was; a host resumes it once the store is repaired \
                 or the build fixed)"
            )?;
        }
        if let Some(text) = &workflow.host {
            outln!("host:     {text}")?;
        }
        for why in &unserved {
            outln!("waits:    {why}")?;
        }
        outln!("started:  {}", time(workflow.started))?;
        if let Some(finished) = workflow.finished {
            outln!("finished: {}", time(finished))?;
        }
        outln!("steps:    {}", workflow.steps)?;
        match (workflow.unread, workflow.state) {
            (0, _) => {}
            (n, state) if !state.is_finished() => outln!("messages: {n} waiting to be taken")?,
            (n, _) => outln!("messages: {n} sent to it were never read (it ended first)")?,
        }
        if let Some(result) = result {
            outln!("result:   {result}")?;
        }
        if let Some(e) = error {
            outln!("error:    {}: {}", e.kind, e.message)?;
        }
        Ok(())
    }
}
