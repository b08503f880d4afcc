//! `send` and `log`: messages to other processes or to the host, and records for the host's log.

use wfcontract::{Command, CommandError, ErrorKind, Level, LogRecord, Payload, Pid};

use crate::handle::Error;
use crate::handlers::{Context, Request};
use crate::outbox::OutboxRefused;

/// The built-in `send`: to another process's mailbox, or to the host's outbox for [`Pid::HOST`].
pub fn send(request: Request, cx: &Context<'_>) {
    if let Command::Send(send) = request.command {
        let result = if send.to == Pid::HOST {
            send_to_host(cx, send.message)
        } else {
            cx.scheduler()
                .send_from(cx.pid(), send.to, send.message)
                .map_err(Error::into_command_error)
        };
        cx.complete(request.tag, result.map(|()| Payload::empty()));
    }
}

/// A message to [`Pid::HOST`]: into the outbox of whoever started this process (or its nearest
/// ancestor started from outside).
fn send_to_host(cx: &Context<'_>, message: Payload) -> Result<(), CommandError> {
    let Some(outbox) = &cx.slot.outbox else {
        return Err(CommandError::new(
            ErrorKind::NoSuchProcess,
            "the host takes no messages from this process (whoever started it listens for none)",
        ));
    };
    outbox
        .send(cx.pid(), message)
        .map_err(|refused| match refused {
            OutboxRefused::Full => CommandError::new(
                ErrorKind::MailboxFull,
                "the host's queue of messages from this workflow is full (its message or byte \
             limit); the host is not reading them",
            ),
            OutboxRefused::Closed => CommandError::new(
                ErrorKind::NoSuchProcess,
                "the host no longer listens for messages from this workflow",
            ),
        })
}

pub(crate) fn log(request: Request, cx: &Context<'_>) {
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
