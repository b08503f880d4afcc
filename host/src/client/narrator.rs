//! A workflow's journal in words: [`Narrator`].

use std::collections::HashMap;

use serde_json::{json, Value};
use wfcontract::{Command, Encoding, Event, EventKind, Payload, Pid, Status, Yield};

use super::builtin_words;
use super::types::{HistoryStep, Page};
use super::Client;
use crate::error::Result;

/// The most of a payload the text shows; the JSON has all of it.
const SHOWN: usize = 1_000;

/// Tells a workflow's journal in words, step by step, as `wfhost history` prints it and as the
/// HTTP API's history shows it: commands as what they ask (`sleep 5s`, `send to the host:
/// {...}`), completions as what they answered (a time, a child's pid and id, a result), payloads
/// as JSON where they are JSON (others: their encoding, size and bytes). Hand it the steps in
/// order: a completion is told in the words of the command it answers, which an earlier step
/// yielded.
pub struct Narrator<'a> {
    /// The id of the workflow numbered so, if the store has it.
    resolve: Box<dyn FnMut(u64) -> Option<String> + Send + 'a>,
    ids: HashMap<u64, Option<String>>,
    /// The commands yielded so far, by tag, until answered.
    asked: HashMap<u64, Command>,
    /// When the step before the next ran.
    previous: Option<u64>,
}

impl std::fmt::Debug for Narrator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Narrator")
            .field("asked", &self.asked.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Narrator<'a> {
    /// A narrator that names other workflows by the ids `resolve` finds for their numbers
    /// (`Client::id_of`).
    pub fn new(resolve: impl FnMut(u64) -> Option<String> + Send + 'a) -> Narrator<'a> {
        Narrator {
            resolve: Box::new(resolve),
            ids: HashMap::new(),
            asked: HashMap::new(),
            previous: None,
        }
    }

    /// Takes in the commands `step` yielded without telling it: for a narration that starts
    /// after the first step, the steps before it.
    pub fn learn(&mut self, step: &HistoryStep) {
        for y in &step.yields {
            if y.command.kind().expects_completion() {
                self.asked.insert(y.tag.0, y.command.clone());
            }
        }
        for event in &step.events {
            if event.kind == EventKind::YieldComplete {
                self.asked.remove(&event.tag.0);
            }
        }
        self.previous = Some(step.at);
    }

    /// Takes in that the command yielded with `tag` was `command`: for a narration that starts
    /// after the step that yielded it.
    pub fn learn_command(&mut self, tag: u64, command: Command) {
        if command.kind().expects_completion() {
            self.asked.insert(tag, command);
        }
    }

    /// Whether the command a completion of `tag` answers is known.
    pub fn knows(&self, tag: u64) -> bool {
        self.asked.contains_key(&tag)
    }

    /// `step` as one JSON object: `step`, `at`, `after_ms`, `events`, `reads`, `yields` (each
    /// with its `words`) and `status` (as `wfhost history --json` prints it).
    pub fn step_json(&mut self, step: &HistoryStep) -> Value {
        let after = self.previous.map(|p| step.at.saturating_sub(p));
        self.previous = Some(step.at);
        let events: Vec<Value> = step.events.iter().map(|e| self.event_json(e)).collect();
        let yields: Vec<Value> = step.yields.iter().map(|y| self.yield_json(y)).collect();
        json!({
            "step": step.seq,
            "at": step.at,
            "after_ms": after,
            "events": events,
            "reads": step.reads.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "yields": yields,
            "status": status_json(&step.status),
        })
    }

    /// `step` in lines of text (`step 3 at ... (+1.2s)`, then `  in`, `  read`, `  out` and
    /// `  status` lines), as `wfhost history` prints it.
    pub fn step_lines(&mut self, step: &HistoryStep) -> Vec<String> {
        let after = self.previous.map(|p| step.at.saturating_sub(p));
        self.previous = Some(step.at);
        let after = after.map_or_else(String::new, |ms| format!(" (+{})", duration(ms)));
        let mut lines = vec![format!("step {} at {}{after}", step.seq, utc_time(step.at))];
        for event in &step.events {
            lines.push(format!("  in     {}", self.event_text(event)));
        }
        for read in &step.reads {
            lines.push(format!("  read   {read}"));
        }
        for y in &step.yields {
            lines.push(format!("  out    {}", self.yield_text(y)));
        }
        lines.push(format!("  status {}", status_text(&step.status)));
        lines
    }

    /// A payload in words: its JSON text (cut at 1,000 bytes, with its size), or its encoding,
    /// size and first bytes.
    pub fn payload_text(payload: &Payload) -> String {
        payload_text(payload)
    }

    /// A payload as JSON: itself when it is JSON, else its encoding, size and bytes in hex.
    pub fn payload_json(payload: &Payload) -> Value {
        payload_json(payload)
    }

    /// `<5>`, with the workflow's id when the store has one for it.
    fn pid(&mut self, pid: Pid) -> String {
        if pid == Pid::HOST {
            return "the host".into();
        }
        let resolve = &mut self.resolve;
        let id = self
            .ids
            .entry(pid.0)
            .or_insert_with(|| resolve(pid.0))
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
            Command::Call(call) => match builtin_words::input(&call.name, &call.input) {
                Some((words, _)) => format!("call '{}': {words}", call.name),
                None => format!("call '{}' with {}", call.name, payload_text(&call.input)),
            },
            Command::Retry(retry) => format!(
                "call '{}' again (attempt {} of {}){}",
                retry.call.name,
                retry.attempt,
                retry.first,
                match builtin_words::input(&retry.call.name, &retry.call.input) {
                    Some((words, _)) => format!(": {words}"),
                    None => format!(" with {}", payload_text(&retry.call.input)),
                }
            ),
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

    /// A yield as JSON: `tag`, `kind`, `words` and the command's own fields (as in
    /// [`step_json`](Self::step_json)'s `yields`).
    pub fn yield_json(&mut self, y: &Yield) -> Value {
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
            Command::Call(call) => json!({ "name": call.name, "input": call_input_json(call) }),
            Command::Retry(retry) => json!({
                "name": retry.call.name,
                "input": call_input_json(&retry.call),
                "first": retry.first.0,
                "attempt": retry.attempt,
            }),
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
            Some(Command::Call(call) | Command::Retry(wfcontract::RetryRequest { call, .. })) => {
                match builtin_words::answer(&call.name, data) {
                    Some((words, value)) => (format!("'{}' answered {words}", call.name), value),
                    None => (
                        format!("'{}' answered {}", call.name, payload_text(data)),
                        payload_json(data),
                    ),
                }
            }
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

fn level(level: wfcontract::Level) -> &'static str {
    use wfcontract::Level;
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

/// A call's input as JSON: the host's own functions' requests as what they ask.
fn call_input_json(call: &wfcontract::CallRequest) -> Value {
    builtin_words::input(&call.name, &call.input)
        .map_or_else(|| payload_json(&call.input), |(_, v)| v)
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
    format!("{} UTC", utc_time(nanos / 1_000_000))
}

/// Milliseconds since the Unix epoch, as UTC "YYYY-MM-DD hh:mm:ss.mmm" (a year past 9999 with a
/// sign; past what a date says, the milliseconds).
pub fn utc_time(millis: u64) -> String {
    i64::try_from(millis)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || format!("{millis} ms after 1970"),
            |time| time.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        )
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

impl Client {
    /// A narrator that names other workflows by their ids in this client's store.
    pub fn narrator(&self) -> Narrator<'static> {
        let client = self.clone();
        Narrator::new(move |number| client.id_of(number).ok().flatten())
    }

    /// A page of workflow `id`'s journal ([`Client::history`]) and a narrator ready to tell it:
    /// one that knows the commands the page's completions answer, read back from the steps
    /// before the page. What `wfhost history` and the HTTP API's history both tell.
    pub fn history_in_words(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Page<HistoryStep>, Narrator<'static>)> {
        let page = self.history(id, after, limit)?;
        let mut narrator = self.narrator();
        learn_what_completions_answer(self, id, &page.items, &mut narrator)?;
        Ok((page, narrator))
    }
}

/// The most steps before a page that are read to find the commands its completions answer
/// (a completion of one yielded further back is told without the command's kind).
const LOOK_BACK: u64 = 100_000;

/// Steps read at a time looking back.
const LOOK_BACK_WINDOW: u64 = 1_000;

/// Teaches `narrator` the commands that the completions in `steps` answer and that were
/// yielded before them: read back from the steps before, a window at a time, until each is
/// found (a completion mostly answers a command of the steps just before it).
fn learn_what_completions_answer(
    client: &Client,
    id: &str,
    steps: &[HistoryStep],
    narrator: &mut Narrator<'_>,
) -> Result<()> {
    let Some(first) = steps.first().map(|step| step.seq) else {
        return Ok(());
    };
    let mut yielded = std::collections::HashSet::new();
    let mut missing = std::collections::HashSet::new();
    for step in steps {
        for event in &step.events {
            if event.kind == EventKind::YieldComplete && !yielded.contains(&event.tag.0) {
                missing.insert(event.tag.0);
            }
        }
        yielded.extend(step.yields.iter().map(|y| y.tag.0));
    }
    let mut before = first;
    while !missing.is_empty() && before > 1 && first - before < LOOK_BACK {
        let from = before.saturating_sub(LOOK_BACK_WINDOW).max(1);
        let window =
            client.history(id, Some(&super::cursor(from - 1)), (before - from) as usize)?;
        for step in window.items.iter().rev() {
            for y in &step.yields {
                if missing.remove(&y.tag.0) {
                    narrator.learn_command(y.tag.0, y.command.clone());
                }
            }
        }
        before = from;
    }
    Ok(())
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
    fn times_read_as_utc() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00.000");
        assert_eq!(utc_time(1_700_000_000_123), "2023-11-14 22:13:20.123");
    }

    #[test]
    fn completions_are_told_in_the_words_of_what_they_answer() {
        use wfcontract::{Tag, Yield};
        let mut narrator = Narrator::new(|n| (n == 9).then(|| "child-9".to_string()));
        let first = HistoryStep {
            seq: 1,
            at: 1_000,
            events: vec![],
            reads: vec![],
            yields: vec![Yield {
                tag: Tag(1),
                command: Command::Join(Pid(9)),
            }],
            status: Status::Wait,
            receive: 0,
            record: vec![],
        };
        let second = HistoryStep {
            seq: 2,
            at: 2_500,
            events: vec![Event::completion(
                Tag(1),
                Ok(Payload::json_bytes(b"7".to_vec())),
            )],
            reads: vec![],
            yields: vec![],
            status: Status::Done(Payload::json_bytes(b"7".to_vec())),
            receive: 0,
            record: vec![],
        };
        let lines = narrator.step_lines(&first);
        assert_eq!(lines[1], "  out    #1 join <9> (child-9)");
        let json = narrator.step_json(&second);
        assert_eq!(json["after_ms"], 1_500);
        assert_eq!(json["events"][0]["answers"], "join");
        assert_eq!(
            json["events"][0]["words"],
            "#1 join: <9> (child-9) ended with 7"
        );
        assert_eq!(json["status"], json!({"done": 7}));
        // Told from the second step on, having learnt the first.
        let mut later = Narrator::new(|_| None);
        later.learn(&first);
        assert_eq!(later.step_json(&second)["events"][0]["answers"], "join");
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
