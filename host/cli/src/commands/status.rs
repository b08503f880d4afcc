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
    /// The calls among `open` that a host serves, in words: a worker function's with how its
    /// tasks stand (`call 'payments.charge' #3: a worker function, 2 tasks waiting, no worker
    /// polls for it`).
    fn calls(&self, open: &[wfhost::OpenYield]) -> Vec<String> {
        let named: Vec<(String, u64)> = open
            .iter()
            .filter(|o| o.unserved.is_none())
            .filter_map(|o| match &o.yielded.command {
                wfhost::contract::Command::Call(call) => Some((call.name.clone(), o.yielded.tag.0)),
                wfhost::contract::Command::Retry(retry) => {
                    Some((retry.call.name.clone(), o.yielded.tag.0))
                }
                _ => None,
            })
            .collect();
        if named.is_empty() {
            return Vec::new();
        }
        let workers = self
            .target
            .api("workers")
            .and_then(|api| Ok(api.workers()?))
            .ok();
        named
            .into_iter()
            .map(|(name, tag)| {
                let function = workers
                    .as_ref()
                    .and_then(|w| w.functions.iter().find(|f| f.function == name));
                match function {
                    None => format!("call '{name}' #{tag}"),
                    Some(f) => {
                        let pollers = match f.pollers.iter().filter(|p| p.polling).count() {
                            _ if f.pollers.is_empty() => "no worker polls for it".to_string(),
                            0 => format!("{} worker(s) polled for it lately", f.pollers.len()),
                            n => format!("{n} worker(s) polling"),
                        };
                        format!(
                            "call '{name}' #{tag}: a worker function, {} task(s) waiting, {} in \
                             flight, {pollers}",
                            f.waiting, f.in_flight
                        )
                    }
                }
            })
            .collect()
    }

    pub fn execute(self) -> anyhow::Result<()> {
        let client = self.target.client()?;
        let workflow = client.status(&self.id)?;
        // What it waits for that its host cannot give it (a function that host does not
        // serve), and the calls it waits on (a worker's, with how that function's tasks
        // stand): said by a host, so only through a server.
        let open = if workflow.is_finished() || !self.target.is_server() {
            Vec::new()
        } else {
            client.waits(&self.id).map(|w| w.open).unwrap_or_default()
        };
        let unserved: Vec<String> = open.iter().filter_map(|o| o.unserved.clone()).collect();
        let calls = self.calls(&open);
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
                    "run": workflow.run,
                    "unread_messages": workflow.unread,
                    "unserved": unserved,
                    "calls": calls,
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
        if workflow.run > 1 {
            let before: Vec<String> = (1..workflow.run)
                .map(|run| wfhost::run_id(&workflow.id, run))
                .collect();
            outln!(
                "run:      {} (reset; the runs before: {})",
                workflow.run,
                before.join(", ")
            )?;
        }
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
        for call in &calls {
            outln!("waits:    {call}")?;
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
