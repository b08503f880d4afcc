//! The handlers every scheduler has: the commands that need nothing but the scheduler itself.

use std::sync::Arc;

use wfcontract::{Command, CommandError, CommandKind, ErrorKind, Level, LogRecord, Payload, Pid};

use crate::dispatch::{Context, Handlers, Request};
use crate::handle::Error;
use crate::timer::{Forget, Sleep};

pub(crate) fn register(handlers: &mut Handlers) {
    handlers.set(CommandKind::Sleep, Arc::new(Sleep));
    handlers.set(CommandKind::Forget, Arc::new(Forget));
    handlers.set(CommandKind::Log, Arc::new(log));
    handlers.set(CommandKind::Send, Arc::new(send));
    handlers.set(CommandKind::Cancel, Arc::new(cancel));
    handlers.set(CommandKind::Join, Arc::new(join));
}

fn send(request: Request, cx: &Context<'_>) {
    if let Command::Send(send) = request.command {
        let result = cx.scheduler().send_from(cx.pid(), send.to, send.message);
        cx.complete(
            request.tag,
            result
                .map(|()| Payload::empty())
                .map_err(Error::into_command_error),
        );
    }
}

/// A confined process may act only on its own children.
fn within_reach(cx: &Context<'_>, target: Pid, verb: &str) -> Result<(), CommandError> {
    if !cx.slot.confined {
        return Ok(());
    }
    match cx.scheduler().shared.slot(target).map(|slot| slot.parent) {
        Some(parent) if parent == Some(cx.pid()) => Ok(()),
        // Gone, or never was: the same answer as for an unconfined process.
        None => Err(Error::NoSuchProcess(target).into_command_error()),
        Some(_) => Err(CommandError::new(
            ErrorKind::NotAllowed,
            format!(
                "process {target} is not a child of this process; this module may {verb} only \
                 its own children"
            ),
        )),
    }
}

fn cancel(request: Request, cx: &Context<'_>) {
    if let Command::Cancel(pid) = request.command {
        if let Err(error) = within_reach(cx, pid, "cancel") {
            return cx.complete(request.tag, Err(error));
        }
        let result = cx.scheduler().cancel(pid);
        cx.complete(
            request.tag,
            result
                .map(|()| Payload::empty())
                .map_err(Error::into_command_error),
        );
    }
}

fn join(request: Request, cx: &Context<'_>) {
    if let Command::Join(pid) = request.command {
        if let Err(error) = within_reach(cx, pid, "join") {
            return cx.complete(request.tag, Err(error));
        }
        cx.scheduler().join(pid, cx.pid(), request.tag);
    }
}

fn log(request: Request, cx: &Context<'_>) {
    if let Command::Log(record) = request.command {
        emit(cx.pid(), &record);
    }
}

/// Writes a guest's log record to `tracing`, under target `wfhost::guest`, with the pid and the
/// record's fields (as one `key=value` list: `tracing` field names are fixed at compile time).
pub fn emit(pid: wfcontract::Pid, record: &LogRecord) {
    let fields = FieldList(&record.fields);
    macro_rules! emit_at {
        ($level:expr) => {
            if record.fields.is_empty() {
                tracing::event!(target: "wfhost::guest", $level, pid = pid.0, "{}", record.message)
            } else {
                tracing::event!(target: "wfhost::guest", $level, pid = pid.0, fields = %fields, "{}", record.message)
            }
        };
    }
    match record.level {
        Level::Trace => emit_at!(tracing::Level::TRACE),
        Level::Debug => emit_at!(tracing::Level::DEBUG),
        Level::Info => emit_at!(tracing::Level::INFO),
        Level::Warn => emit_at!(tracing::Level::WARN),
        Level::Error => emit_at!(tracing::Level::ERROR),
    }
}

struct FieldList<'a>(&'a [wfcontract::Field]);

impl std::fmt::Display for FieldList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, field) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", field.key, field.value)?;
        }
        Ok(())
    }
}
