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

/// A payload for a human: its text (JSON) or its bytes in hex, cut at [`SHOWN`] with its size.
pub fn show(payload: &Payload) -> String {
    let bytes = &payload.bytes;
    let shown = match (payload.encoding, std::str::from_utf8(bytes)) {
        (Encoding::Json, Ok(text)) => {
            let mut end = text.len().min(SHOWN);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("json:{}", &text[..end])
        }
        (encoding, _) => {
            let hex: String = bytes
                .iter()
                .take(SHOWN / 2)
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("{}:{hex}", encoding.name())
        }
    };
    let cut = match payload.encoding {
        Encoding::Json if std::str::from_utf8(bytes).is_ok() => bytes.len() > SHOWN,
        _ => bytes.len() > SHOWN / 2,
    };
    if cut {
        format!("{shown}... ({} bytes in all)", bytes.len())
    } else {
        shown
    }
}

fn command(command: &Command) -> String {
    match command {
        Command::Sleep(duration) => format!("sleep {duration:?}"),
        Command::SleepUntil(nanos) => format!("sleep until {nanos} ns after the Unix epoch"),
        Command::Log(record) => format!("log {:?}: {}", record.level, record.message),
        Command::Send(send) => format!("send to {}: {}", send.to, show(&send.message)),
        Command::Spawn(spawn) => format!(
            "spawn {}::{} {}",
            spawn.module.as_deref().unwrap_or("(self)"),
            spawn.entry,
            show(&spawn.input)
        ),
        Command::Join(pid) => format!("join {pid}"),
        Command::Cancel(pid) => format!("cancel {pid}"),
        Command::Call(call) => format!("call {} {}", call.name, show(&call.input)),
        Command::Now => "now".into(),
        Command::Random => "random".into(),
        Command::Forget(tag) => format!("forget {tag}"),
    }
}

impl Observer for EventPrinter {
    fn spawned(&self, pid: Pid, parent: Option<Pid>, entry: &str) {
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
                Some(error) => line!("event: {pid} completion {}: error {error}", event.tag),
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
            Err(error) => line!("event: {pid} failed: {error}"),
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
}
