//! `wfhost history`: one workflow's journal, step by step, for people or (with `--json`) tools.

use std::io::Write;

use anyhow::Context as _;
use serde_json::{json, Value};
use wfhost::contract::{Event, EventKind, Status, Yield};
use wfhost::store::{Ending, Location, Workflow};
use wfhost::{Payload, StepRecord};

use super::durable::{find, open, time};

/// Shows the journal of one workflow: each step's events, WASI reads and yields, with times.
#[derive(Debug, clap::Parser)]
pub struct HistoryCommand {
    /// The store: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// The workflow's id.
    id: String,

    /// One JSON object per line (the workflow, then one per step), for tools.
    #[arg(long)]
    json: bool,
}

impl HistoryCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let mut store = open(&self.store)?;
        let workflow = find(&mut *store, &self.store, &self.id)?;
        let steps = store.steps(workflow.start.num, 0)?;
        let mut out = std::io::stdout().lock();
        let written = (|| -> std::io::Result<()> {
            if self.json {
                writeln!(out, "{}", workflow_json(&workflow))?;
            } else {
                write_workflow(&mut out, &workflow)?;
            }
            for step in steps {
                let record = StepRecord::decode(&step.record).map_err(|e| {
                    std::io::Error::other(format!(
                        "step {} of the journal does not decode: {e}",
                        step.seq
                    ))
                })?;
                if self.json {
                    let value = json!({
                        "step": step.seq,
                        "at": step.at,
                        "events": record.events.iter().map(event_json).collect::<Vec<_>>(),
                        "reads": record.reads.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        "yields": record.output.yields.iter().map(yield_json).collect::<Vec<_>>(),
                        "status": status_json(&record.output.status),
                    });
                    writeln!(out, "{value}")?;
                } else {
                    writeln!(out, "step {} at {}", step.seq, time(step.at))?;
                    for event in &record.events {
                        writeln!(out, "  event  {}", event_text(event))?;
                    }
                    for read in &record.reads {
                        writeln!(out, "  read   {read}")?;
                    }
                    for y in &record.output.yields {
                        writeln!(out, "  yield  #{} {:?}", y.tag.0, y.command)?;
                    }
                    writeln!(out, "  status {}", status_json(&record.output.status))?;
                }
            }
            out.flush()
        })();
        match written {
            // The reader went away (`| head`): nothing more to say.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other.context("writing the history"),
        }
    }
}

/// A payload as JSON: itself when it is JSON, else its encoding and bytes in hex.
fn payload_json(payload: &Payload) -> Value {
    if payload.encoding.name() == "json" {
        if let Ok(value) = serde_json::from_slice::<Value>(&payload.bytes) {
            return value;
        }
    }
    let hex: String = payload.bytes.iter().map(|b| format!("{b:02x}")).collect();
    json!({ "encoding": payload.encoding.name(), "bytes": hex })
}

fn event_json(event: &Event) -> Value {
    match event.kind {
        EventKind::YieldComplete => match &event.error {
            None => {
                json!({ "kind": "completion", "tag": event.tag.0, "ok": payload_json(&event.data) })
            }
            Some(error) => json!({
                "kind": "completion",
                "tag": event.tag.0,
                "error": { "kind": error.kind.name(), "message": error.message },
            }),
        },
        // A message's tag is its number in the store.
        EventKind::Message => json!({
            "kind": "message",
            "number": event.tag.0,
            "from": event.from.0,
            "data": payload_json(&event.data),
        }),
        EventKind::Cancel => json!({ "kind": "cancel" }),
    }
}

fn event_text(event: &Event) -> String {
    match event.kind {
        EventKind::YieldComplete => match &event.error {
            None => format!("#{} ok {}", event.tag.0, payload_json(&event.data)),
            Some(error) => format!(
                "#{} error {}: {}",
                event.tag.0,
                error.kind.name(),
                error.message
            ),
        },
        EventKind::Message => format!(
            "message {} from {}: {}",
            event.tag.0,
            event.from,
            payload_json(&event.data)
        ),
        EventKind::Cancel => "cancel".into(),
    }
}

fn yield_json(y: &Yield) -> Value {
    json!({ "tag": y.tag.0, "kind": y.command.kind().name(), "command": format!("{:?}", y.command) })
}

fn status_json(status: &Status) -> Value {
    match status {
        Status::Continue => json!("continue"),
        Status::Wait => json!("wait"),
        Status::Idle => json!("idle"),
        Status::Done(result) => json!({ "done": payload_json(result) }),
        Status::Failed(message) => json!({ "failed": message }),
        Status::Cancelled(message) => json!({ "cancelled": message }),
    }
}

pub(super) fn ending_text(ending: &Option<Ending>) -> String {
    match ending {
        None => String::new(),
        Some(Ending::Done(bytes)) => match postcard::from_bytes::<Payload>(bytes) {
            Ok(payload) => super::run::render(&payload).unwrap_or_default(),
            Err(_) => "(undecodable)".into(),
        },
        Some(Ending::Failed { kind, message }) => format!("{kind}: {message}"),
    }
}

fn write_workflow(out: &mut impl Write, w: &Workflow) -> std::io::Result<()> {
    writeln!(
        out,
        "workflow {} (pid {}): entry '{}', module {}, {}, started {}",
        w.start.id,
        w.start.num,
        w.start.entry,
        w.start.module,
        w.state.name(),
        time(w.start.started)
    )?;
    if w.ending.is_some() {
        writeln!(out, "result: {}", ending_text(&w.ending))?;
    }
    Ok(())
}

fn workflow_json(w: &Workflow) -> Value {
    json!({
        "id": w.start.id,
        "pid": w.start.num,
        "parent": w.start.parent,
        "entry": w.start.entry,
        "module": w.start.module,
        "status": w.state.name(),
        "started": w.start.started,
        "finished": w.finished,
        "steps": w.steps,
        "result": ending_text(&w.ending),
    })
}
