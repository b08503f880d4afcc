//! `wfhost history`: one workflow's journal, step by step, in words for people or (with
//! `--json`) as objects for tools. Commands read as what they ask (`sleep 5s`, `send to the
//! host: {...}`), completions as what they answered (a time, a child's pid and id, a result),
//! and payloads as JSON where their encoding is JSON (the SDK's, for a workflow started with
//! JSON); others show their encoding, size and bytes.

use std::collections::HashMap;
use std::io::Write;

use serde_json::{json, Value};
use wfhost::contract::{Command, Event, EventKind, Pid, Status, Yield};
use wfhost::store::Location;
use wfhost::{Client, Encoding, HistoryStep, Payload, WorkflowStatus};

use super::durable::{status_word, time};
use crate::output::stdout_error;

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

/// The most of a payload the text shows; `--json` has all of it.
const SHOWN: usize = 1_000;

impl HistoryCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let client = Client::open(&self.store);
        let workflow = client.status(&self.id)?;
        let mut words = Words {
            client: &client,
            ids: HashMap::new(),
            asked: HashMap::new(),
        };
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", workflow_json(&workflow)).map_err(stdout_error)?;
        } else {
            write_workflow(&mut out, &workflow).map_err(stdout_error)?;
        }
        let mut previous: Option<u64> = None;
        let mut cursor: Option<String> = None;
        loop {
            let page = client.history(&self.id, cursor.as_deref(), PAGE)?;
            for step in &page.items {
                self.write_step(&mut out, &mut words, step, &mut previous)?;
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

    /// Writes one step, `previous` the time of the one before.
    fn write_step(
        &self,
        out: &mut impl Write,
        words: &mut Words<'_>,
        step: &HistoryStep,
        previous: &mut Option<u64>,
    ) -> anyhow::Result<()> {
        {
            let record = step;
            let after = previous.map(|p| step.at.saturating_sub(p));
            *previous = Some(step.at);
            if self.json {
                let events: Vec<Value> =
                    record.events.iter().map(|e| words.event_json(e)).collect();
                let yields: Vec<Value> =
                    record.yields.iter().map(|y| words.yield_json(y)).collect();
                let value = json!({
                    "step": step.seq,
                    "at": step.at,
                    "after_ms": after,
                    "events": events,
                    "reads": record.reads.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "yields": yields,
                    "status": status_json(&record.status),
                });
                writeln!(out, "{value}").map_err(stdout_error)?;
                return Ok(());
            }
            let after = after.map_or_else(String::new, |ms| format!(" (+{})", duration(ms)));
            writeln!(out, "step {} at {}{after}", step.seq, time(step.at)).map_err(stdout_error)?;
            for event in &record.events {
                writeln!(out, "  in     {}", words.event_text(event)).map_err(stdout_error)?;
            }
            for read in &record.reads {
                writeln!(out, "  read   {read}").map_err(stdout_error)?;
            }
            for y in &record.yields {
                writeln!(out, "  out    {}", words.yield_text(y)).map_err(stdout_error)?;
            }
            writeln!(out, "  status {}", status_text(&record.status)).map_err(stdout_error)?;
        }
        Ok(())
    }
}

/// The steps read from the store at a time.
const PAGE: usize = 500;

/// What reading a journal in words needs: the commands its completions answer, and the ids of
/// the workflows it names.
struct Words<'a> {
    client: &'a Client,
    ids: HashMap<u64, Option<String>>,
    /// The commands yielded so far, by tag, until answered.
    asked: HashMap<u64, Command>,
}

impl Words<'_> {
    /// `<5>`, with the workflow's id when the store has one for it.
    fn pid(&mut self, pid: Pid) -> String {
        if pid == Pid::HOST {
            return "the host".into();
        }
        let client = self.client;
        let id = self
            .ids
            .entry(pid.0)
            .or_insert_with(|| client.id_of(pid.0).ok().flatten())
            .clone();
        match id {
            Some(id) => format!("{pid} ({id})"),
            None => pid.to_string(),
        }
    }

    fn yield_text(&mut self, y: &Yield) -> String {
        if y.command.kind().expects_completion() {
            self.asked.insert(y.tag.0, y.command.clone());
        }
        let what = match &y.command {
            Command::Sleep(duration) => format!("sleep {}", duration_text(*duration)),
            Command::SleepUntil(nanos) => format!("sleep until {}", nanos_time(*nanos)),
            Command::Log(record) => {
                let fields: Vec<String> = record
                    .fields
                    .iter()
                    .map(|f| format!(" {}={}", f.key, f.value))
                    .collect();
                format!(
                    "log {}: {}{}",
                    level(record.level),
                    record.message,
                    fields.concat()
                )
            }
            Command::Send(send) => format!(
                "send to {}: {}",
                self.pid(send.to),
                payload_text(&send.message)
            ),
            Command::Spawn(spawn) => format!(
                "spawn '{}'{} with {}",
                spawn.entry,
                spawn
                    .module
                    .as_deref()
                    .map_or_else(String::new, |m| format!(" of module '{m}'")),
                payload_text(&spawn.input)
            ),
            Command::Join(pid) => format!("join {}", self.pid(*pid)),
            Command::Cancel(pid) => format!("cancel {}", self.pid(*pid)),
            Command::Call(call) => {
                format!("call '{}' with {}", call.name, payload_text(&call.input))
            }
            Command::Now => "now".into(),
            Command::Random => "random".into(),
            Command::Forget(tag) => format!("forget {tag}"),
        };
        if y.tag.0 == 0 {
            what
        } else {
            format!("{} {what}", y.tag)
        }
    }

    fn yield_json(&mut self, y: &Yield) -> Value {
        let words = self.yield_text(y);
        let mut value = json!({
            "tag": y.tag.0,
            "kind": y.command.kind().name(),
            "words": words,
        });
        let fields = match &y.command {
            Command::Sleep(duration) => json!({ "duration_ms": duration.as_millis() as u64 }),
            Command::SleepUntil(nanos) => json!({ "until_ms": nanos / 1_000_000 }),
            Command::Log(record) => json!({
                "level": level(record.level),
                "message": record.message,
                "fields": record.fields.iter().map(|f| (f.key.clone(), Value::from(f.value.clone()))).collect::<serde_json::Map<_, _>>(),
            }),
            Command::Send(send) => {
                json!({ "to": send.to.0, "message": payload_json(&send.message) })
            }
            Command::Spawn(spawn) => json!({
                "module": spawn.module,
                "entry": spawn.entry,
                "input": payload_json(&spawn.input),
            }),
            Command::Join(pid) | Command::Cancel(pid) => json!({ "target": pid.0 }),
            Command::Call(call) => json!({ "name": call.name, "input": payload_json(&call.input) }),
            Command::Forget(tag) => json!({ "forgets": tag.0 }),
            Command::Now | Command::Random => json!({}),
        };
        if let (Value::Object(value), Value::Object(fields)) = (&mut value, fields) {
            value.extend(fields);
        }
        value
    }

    /// A completion in words: what the command it answers gave back.
    fn answer(&mut self, asked: Option<&Command>, data: &Payload) -> (String, Value) {
        match asked {
            Some(Command::Now) => match postcard::from_bytes::<u64>(&data.bytes) {
                Ok(nanos) => (nanos_time(nanos), json!(nanos)),
                Err(_) => (payload_text(data), payload_json(data)),
            },
            Some(Command::Random) => match postcard::from_bytes::<u64>(&data.bytes) {
                Ok(n) => (n.to_string(), json!(n)),
                Err(_) => (payload_text(data), payload_json(data)),
            },
            Some(Command::Spawn(_)) => match postcard::from_bytes::<Pid>(&data.bytes) {
                Ok(pid) => {
                    let named = self.pid(pid);
                    let id = self.ids.get(&pid.0).cloned().flatten();
                    (
                        format!("started {named}"),
                        json!({ "pid": pid.0, "id": id }),
                    )
                }
                Err(_) => (payload_text(data), payload_json(data)),
            },
            Some(Command::Sleep(_) | Command::SleepUntil(_)) => {
                ("the time came".into(), Value::Null)
            }
            Some(Command::Send(_)) => ("delivered".into(), Value::Null),
            Some(Command::Cancel(_)) => ("delivered".into(), Value::Null),
            Some(Command::Join(pid)) => (
                format!("{} ended with {}", self.pid(*pid), payload_text(data)),
                payload_json(data),
            ),
            Some(Command::Call(call)) => (
                format!("'{}' answered {}", call.name, payload_text(data)),
                payload_json(data),
            ),
            _ => (payload_text(data), payload_json(data)),
        }
    }

    fn event_text(&mut self, event: &Event) -> String {
        match event.kind {
            EventKind::YieldComplete => {
                let asked = self.asked.remove(&event.tag.0);
                let kind = asked.as_ref().map_or("", |c| c.kind().name());
                match &event.error {
                    None => {
                        let (words, _) = self.answer(asked.as_ref(), &event.data);
                        format!("{} {kind}: {words}", event.tag)
                    }
                    Some(error) => format!(
                        "{} {kind} failed: {}: {}",
                        event.tag,
                        error.kind.name(),
                        error.message
                    ),
                }
            }
            // A message's tag is its number in the store.
            EventKind::Message => format!(
                "message {} from {}: {}",
                event.tag.0,
                self.pid(event.from),
                payload_text(&event.data)
            ),
            EventKind::Cancel => "cancel asked".into(),
        }
    }

    fn event_json(&mut self, event: &Event) -> Value {
        match event.kind {
            EventKind::YieldComplete => {
                let asked = self.asked.get(&event.tag.0).cloned();
                let words = self.event_text(event);
                let kind = asked.as_ref().map(|c| c.kind().name());
                match &event.error {
                    None => {
                        let (_, value) = self.answer(asked.as_ref(), &event.data);
                        json!({
                            "kind": "completion",
                            "tag": event.tag.0,
                            "answers": kind,
                            "ok": value,
                            "words": words,
                        })
                    }
                    Some(error) => json!({
                        "kind": "completion",
                        "tag": event.tag.0,
                        "answers": kind,
                        "error": { "kind": error.kind.name(), "message": error.message },
                        "words": words,
                    }),
                }
            }
            EventKind::Message => json!({
                "kind": "message",
                "number": event.tag.0,
                "from": event.from.0,
                "data": payload_json(&event.data),
                "words": self.event_text(event),
            }),
            EventKind::Cancel => json!({ "kind": "cancel", "words": "cancel asked" }),
        }
    }
}

fn level(level: wfhost::contract::Level) -> &'static str {
    use wfhost::contract::Level;
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

/// A payload as JSON: itself when it is JSON, else its encoding, size and bytes in hex.
fn payload_json(payload: &Payload) -> Value {
    if payload.encoding == Encoding::Json {
        if let Ok(value) = serde_json::from_slice::<Value>(&payload.bytes) {
            return value;
        }
    }
    let hex: String = payload.bytes.iter().map(|b| format!("{b:02x}")).collect();
    json!({ "encoding": payload.encoding.name(), "size": payload.bytes.len(), "bytes": hex })
}

/// A payload in words: its JSON text (cut at [`SHOWN`] bytes, with its size), or its encoding,
/// size and first bytes.
fn payload_text(payload: &Payload) -> String {
    let bytes = &payload.bytes;
    if payload.encoding == Encoding::Json {
        if let Ok(text) = std::str::from_utf8(bytes) {
            if text.len() <= SHOWN {
                return text.to_string();
            }
            let mut end = SHOWN;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            return format!("{}... ({} bytes in all)", &text[..end], text.len());
        }
    }
    let hex: String = bytes.iter().take(32).map(|b| format!("{b:02x}")).collect();
    let more = if bytes.len() > 32 { "..." } else { "" };
    format!(
        "({}, {} bytes: {hex}{more})",
        payload.encoding.name(),
        bytes.len()
    )
}

fn status_text(status: &Status) -> String {
    match status {
        Status::Continue => "continues".into(),
        Status::Wait => "waits".into(),
        Status::Idle => "idle".into(),
        Status::Done(result) => format!("done: {}", payload_text(result)),
        Status::Failed(message) => format!("failed: {message}"),
        Status::Cancelled(message) => format!("cancelled: {message}"),
    }
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

/// A time in nanoseconds since the Unix epoch, in words (UTC).
fn nanos_time(nanos: u64) -> String {
    format!("{} UTC", time(nanos / 1_000_000))
}

/// Milliseconds as `850ms`, `1.2s`, `3m 20s`, `2h 5m`.
fn duration(ms: u64) -> String {
    duration_text(std::time::Duration::from_millis(ms))
}

fn duration_text(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    let secs = d.as_secs();
    match secs {
        0 if ms == 0 && d.as_nanos() > 0 => format!("{}us", d.as_micros()),
        0 => format!("{ms}ms"),
        1..60 => {
            let tenths = (ms % 1000) / 100;
            if tenths == 0 {
                format!("{secs}s")
            } else {
                format!("{secs}.{tenths}s")
            }
        }
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

pub(super) fn ending_text(workflow: &WorkflowStatus) -> String {
    match (&workflow.result, &workflow.error) {
        (_, Some(e)) => format!("{}: {}", e.kind, e.message),
        (Some(payload), None) => super::run::render(payload).unwrap_or_default(),
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
        writeln!(out, "input: {}", payload_text(input))?;
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
        "input": w.input.as_ref().map(payload_json),
        "result": ending_text(w),
        "damaged": w.damaged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(1_200), "1.2s");
        assert_eq!(duration(5_000), "5s");
        assert_eq!(duration(200_000), "3m 20s");
        assert_eq!(duration(7_500_000), "2h 5m");
        assert_eq!(duration_text(std::time::Duration::from_micros(40)), "40us");
    }

    #[test]
    fn payloads_read_as_json_or_as_what_they_are() {
        assert_eq!(
            payload_text(&Payload::json_bytes(br#"{"a":1}"#.to_vec())),
            r#"{"a":1}"#
        );
        assert_eq!(
            payload_text(&Payload::opaque(vec![2])),
            "(bytes, 1 bytes: 02)"
        );
        assert_eq!(
            payload_json(&Payload::json_bytes(b"[1,2]".to_vec())),
            json!([1, 2])
        );
    }
}
