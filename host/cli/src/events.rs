//! `wfhost run --events`: one line on stderr per thing that happens to a process.

use std::io::Write;

use wfhost::contract::{Command, Event, EventKind, Pid, Yield};
use wfhost::{Encoding, Observer, Payload};

/// Prints every spawn, event, yield and exit.
#[derive(Debug)]
pub struct EventPrinter;

/// The most of a payload a line shows; the rest is left out, with the size said.
const SHOWN: usize = 200;

/// One line on stderr; a closed stderr (`| head`) is not worth failing over.
macro_rules! line {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// Text a guest chose (a log line, an error message, a name) for one line: cut at [`SHOWN`]
/// bytes with its size, and its line breaks and other control characters escaped.
pub fn text(text: &str) -> String {
    let mut end = text.len().min(SHOWN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let shown: String = text[..end]
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    if end < text.len() {
        format!("{shown}... ({} bytes in all)", text.len())
    } else {
        shown
    }
}

/// A payload for a human: its text (JSON) or its bytes in hex, cut at [`SHOWN`] with its size.
pub fn show(payload: &Payload) -> String {
    let bytes = &payload.bytes;
    let shown = match (payload.encoding, std::str::from_utf8(bytes)) {
        (Encoding::Json, Ok(json)) => return format!("json:{}", text(json)),
        (encoding, _) => {
            let hex: String = bytes
                .iter()
                .take(SHOWN / 2)
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("{}:{hex}", encoding.name())
        }
    };
    if bytes.len() > SHOWN / 2 {
        format!("{shown}... ({} bytes in all)", bytes.len())
    } else {
        shown
    }
}

fn command(command: &Command) -> String {
    match command {
        Command::Sleep(duration) => format!("sleep {duration:?}"),
        Command::SleepUntil(nanos) => format!("sleep until {nanos} ns after the Unix epoch"),
        Command::Log(record) => format!("log {:?}: {}", record.level, text(&record.message)),
        Command::Send(send) => format!("send to {}: {}", send.to, show(&send.message)),
        Command::Spawn(spawn) => format!(
            "spawn {}::{} {}",
            text(spawn.module.as_deref().unwrap_or("(self)")),
            text(&spawn.entry),
            show(&spawn.input)
        ),
        Command::Join(pid) => format!("join {pid}"),
        Command::Cancel(pid) => format!("cancel {pid}"),
        Command::Call(call) => format!("call {} {}", text(&call.name), show(&call.input)),
        Command::Now => "now".into(),
        Command::Random => "random".into(),
        Command::Forget(tag) => format!("forget {tag}"),
        Command::Retry(retry) => format!(
            "call {} again (attempt {} of {}) {}",
            text(&retry.call.name),
            retry.attempt,
            retry.first,
            show(&retry.call.input)
        ),
    }
}

impl Observer for EventPrinter {
    fn spawned(&self, pid: Pid, parent: Option<Pid>, entry: &str) {
        let entry = text(entry);
        match parent {
            Some(parent) => line!("event: {pid} spawned '{entry}' (parent {parent})"),
            None => line!("event: {pid} spawned '{entry}'"),
        }
    }

    fn event(&self, pid: Pid, event: &Event) {
        match event.kind {
            EventKind::YieldComplete => match &event.error {
                None => line!(
                    "event: {pid} completion {}: {}",
                    event.tag,
                    show(&event.data)
                ),
                Some(error) => line!(
                    "event: {pid} completion {}: error {}",
                    event.tag,
                    text(&error.to_string())
                ),
            },
            EventKind::Message => {
                line!(
                    "event: {pid} message from {}: {}",
                    event.from,
                    show(&event.data)
                )
            }
            EventKind::Cancel => line!("event: {pid} cancel"),
        }
    }

    fn yielded(&self, pid: Pid, y: &Yield) {
        line!("event: {pid} yield {}: {}", y.tag, command(&y.command));
    }

    fn finished(&self, pid: Pid, result: &wfhost::Result<Payload>) {
        match result {
            Ok(payload) => line!("event: {pid} finished: {}", show(payload)),
            Err(error) => line!("event: {pid} failed: {}", text(&error.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_payloads_are_cut_with_their_size() {
        let small = Payload::json_bytes(br#""hi""#.to_vec());
        assert_eq!(show(&small), r#"json:"hi""#);
        let big = Payload::to_json(&"x".repeat(300_000)).unwrap();
        let shown = show(&big);
        assert!(shown.ends_with("... (300002 bytes in all)"), "{shown}");
        assert_eq!(
            shown.len(),
            "json:".len() + SHOWN + "... (300002 bytes in all)".len()
        );
        let raw = Payload::opaque(vec![0xab; 1000]);
        assert!(show(&raw).ends_with("... (1000 bytes in all)"));
    }

    #[test]
    fn text_a_guest_chose_is_cut_with_its_size_and_kept_on_one_line() {
        assert_eq!(text("two\nlines"), "two\\nlines");
        let long = "é".repeat(1_000);
        let shown = text(&long);
        assert_eq!(
            shown,
            format!("{}... (2000 bytes in all)", "é".repeat(SHOWN / 2))
        );
        let log = Command::Log(wfhost::contract::LogRecord {
            level: wfhost::contract::Level::Info,
            message: "y".repeat(1 << 20),
            fields: Vec::new(),
        });
        assert_eq!(
            command(&log),
            format!("log Info: {}... (1048576 bytes in all)", "y".repeat(SHOWN))
        );
    }
}
