//! `wfhost run --events`: one line on stderr per thing that happens to a process.

use wfhost::contract::{Command, Event, EventKind, Pid, Yield};
use wfhost::scheduler::{Observer, ProcessResult};

/// Prints every spawn, event, yield and exit.
#[derive(Debug)]
pub struct EventPrinter;

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
    }
}

impl Observer for EventPrinter {
    fn spawned(&self, pid: Pid, parent: Option<Pid>, entry: &str) {
        match parent {
            Some(parent) => eprintln!("event: {pid} spawned '{entry}' (parent {parent})"),
            None => eprintln!("event: {pid} spawned '{entry}'"),
        }
    }

    fn event(&self, pid: Pid, event: &Event) {
        match event.kind {
            EventKind::YieldComplete => match &event.error {
                None => eprintln!("event: {pid} completion {}: {:?}", event.tag, event.data),
                Some(error) => eprintln!("event: {pid} completion {}: error {error}", event.tag),
            },
            EventKind::Message => {
                eprintln!("event: {pid} message from {}: {:?}", event.from, event.data)
            }
            EventKind::Cancel => eprintln!("event: {pid} cancel"),
        }
    }

    fn yielded(&self, pid: Pid, y: &Yield) {
        eprintln!("event: {pid} yield {}: {}", y.tag, command(&y.command));
    }

    fn finished(&self, pid: Pid, result: &ProcessResult) {
        match result {
            Ok(payload) => eprintln!("event: {pid} finished: {payload:?}"),
            Err(error) => eprintln!("event: {pid} failed: {error}"),
        }
    }
}
