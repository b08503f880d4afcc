//! `wfhost history`: one workflow's journal, step by step, in words for people or (with
//! `--json`) as objects for tools. Commands read as what they ask (`sleep 5s`, `send to the
//! host: {...}`), completions as what they answered (a time, a child's pid and id, a result),
//! and payloads as JSON where their encoding is JSON (the SDK's, for a workflow started with
//! JSON); others show their encoding, size and bytes.

use std::io::Write;

use serde_json::{json, Value};
use wfhost::contract::Pid;
use wfhost::{HistoryStep, Narrator, WorkflowStatus};

use crate::args::show::{status_word, time};
use crate::output::stdout_error;

/// Shows the journal of one workflow: each step's events, WASI reads and yields, with times.
#[derive(Debug, clap::Parser)]
pub struct HistoryCommand {
    #[command(flatten)]
    target: crate::args::target::Target,

    /// The workflow's id.
    id: String,

    /// One JSON object per line (the workflow, then one per step), for tools.
    #[arg(long)]
    json: bool,
}

impl HistoryCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let client = self.target.client()?;
        let workflow = client.status(&self.id)?;
        let mut words = client.narrator();
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", workflow_json(&workflow)).map_err(stdout_error)?;
        } else {
            write_workflow(&mut out, &workflow).map_err(stdout_error)?;
        }
        let mut cursor: Option<String> = None;
        loop {
            let page = client.history(&self.id, cursor.as_deref(), PAGE)?;
            for step in &page.items {
                self.write_step(&mut out, &mut words, step)?;
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        // A reader that went away (`| head`) ends the command quietly (main).
        out.flush().map_err(stdout_error)?;
        Ok(())
    }

    /// Writes one step.
    fn write_step(
        &self,
        out: &mut impl Write,
        words: &mut Narrator<'_>,
        step: &HistoryStep,
    ) -> anyhow::Result<()> {
        if self.json {
            writeln!(out, "{}", words.step_json(step)).map_err(stdout_error)?;
            return Ok(());
        }
        for line in words.step_lines(step) {
            writeln!(out, "{line}").map_err(stdout_error)?;
        }
        Ok(())
    }
}

/// The steps read from the store at a time.
const PAGE: usize = 500;

pub(super) fn ending_text(workflow: &WorkflowStatus) -> String {
    match (&workflow.result, &workflow.error) {
        (_, Some(e)) => format!("{}: {}", e.kind, e.message),
        (Some(payload), None) => crate::args::show::render(payload).unwrap_or_default(),
        (None, None) if workflow.is_finished() => "(a result that does not decode)".into(),
        (None, None) => String::new(),
    }
}

fn write_workflow(out: &mut impl Write, w: &WorkflowStatus) -> std::io::Result<()> {
    writeln!(
        out,
        "workflow {} ({}): entry '{}' of module {} ({}), {}, started {}",
        w.id,
        Pid(w.number),
        w.entry,
        w.module_name,
        w.module.get(..12).unwrap_or(&w.module),
        status_word(w),
        time(w.started)
    )?;
    if let Some(input) = &w.input {
        writeln!(out, "input: {}", Narrator::payload_text(input))?;
    }
    if w.is_finished() {
        writeln!(out, "result: {}", ending_text(w))?;
    }
    if let Some(why) = &w.damaged {
        writeln!(out, "damaged: {why}")?;
    }
    Ok(())
}

fn workflow_json(w: &WorkflowStatus) -> Value {
    json!({
        "id": w.id,
        "pid": w.number,
        "parent": w.parent,
        "entry": w.entry,
        "module": w.module,
        "module_name": w.module_name,
        "status": status_word(w),
        "started": w.started,
        "finished": w.finished,
        "steps": w.steps,
        "input": w.input.as_ref().map(Narrator::payload_json),
        "result": ending_text(w),
        "damaged": w.damaged,
    })
}
