//! `wfhost run --events`: one line on stderr per thing that happens to a process.

use std::io::Write;

use wfhost::contract::{Command, Event, EventKind, Pid, Yield};
use wfhost::scheduler::{Observer, ProcessResult};

/// Prints every spawn, event, yield and exit.
#[derive(Debug)]
pub struct EventPrinter;

/// One line on stderr; a closed stderr (`| head`) is not worth failing over.
macro_rules! line {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

fn command(command: &Command) -> String {
    match command {
        Command::Sleep(duration) => format!("sleep {duration:?}"),
        Command::Log(record) => format!("log {:?}: {}", record.level, record.message),
        Command::Send(send) => format!("send to {}: {:?}", send.to, send.message),
        Command::Spawn(spawn) => format!(
            "spawn {}::{}",
            spawn.module.as_deref().unwrap_or("(self)"),
            spawn.entry
        ),
        Command::Join(pid) => format!("join {pid}"),
        Command::Cancel(pid) => format!("cancel {pid}"),
        Command::Call(call) => format!("call {}", call.name),
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
                None => line!("event: {pid} completion {}: {:?}", event.tag, event.data),
                Some(error) => line!("event: {pid} completion {}: error {error}", event.tag),
            },
            EventKind::Message => {
                line!("event: {pid} message from {}: {:?}", event.from, event.data)
            }
            EventKind::Cancel => line!("event: {pid} cancel"),
        }
    }

    fn yielded(&self, pid: Pid, y: &Yield) {
        line!("event: {pid} yield {}: {}", y.tag, command(&y.command));
    }

    fn finished(&self, pid: Pid, result: &ProcessResult) {
        match result {
            Ok(payload) => line!("event: {pid} finished: {payload:?}"),
            Err(error) => line!("event: {pid} failed: {error}"),
        }
    }
}
