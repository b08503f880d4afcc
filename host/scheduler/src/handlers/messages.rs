//! `send` and `log`: messages to other processes or to the host, and records for the host's log.

use wfcontract::{Command, CommandError, ErrorKind, Level, LogRecord, Payload, Pid};

use crate::error::Error;
use crate::handlers::{Context, Request};
use crate::outbox::OutboxRefused;

/// The built-in `send`: to another process's mailbox, or to the host's outbox for [`Pid::HOST`].
pub fn send(request: Request, cx: &Context<'_>) {
    if let Command::Send(send) = request.command {
        let result = if send.to == Pid::HOST {
            send_to_host(cx, send.message)
        } else {
            cx.send_numbered(send.to, 0, send.message)
                .map_err(Error::into_command_error)
        };
        cx.complete(request.tag, result.map(|()| Payload::empty()));
    }
}

/// A message to [`Pid::HOST`]: into the outbox of whoever started this process (or its nearest
/// ancestor started from outside).
fn send_to_host(cx: &Context<'_>, message: Payload) -> Result<(), CommandError> {
    if cx.slot.outbox.is_none() {
        return Err(CommandError::new(
            ErrorKind::NoSuchProcess,
            "the host takes no messages from this process (whoever started it listens for none)",
        ));
    }
    offer_to_host(cx, message).into_result()
}

/// What became of a message offered to the host's outbox ([`offer_to_host`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostOffer {
    /// Queued for whoever started the process (or its nearest ancestor started from outside).
    Queued,
    /// The outbox holds its limit: its reader is not keeping up.
    Full,
    /// Nobody reads messages from this process (none was asked for, or the reader went away).
    NoReader,
}

impl HostOffer {
    /// The completion the built-in `send` gives for it: refused unless queued.
    pub fn into_result(self) -> Result<(), CommandError> {
        match self {
            HostOffer::Queued => Ok(()),
            HostOffer::Full => Err(CommandError::new(
                ErrorKind::MailboxFull,
                "the host's queue of messages from this workflow is full (its message or byte \
                 limit); the host is not reading them",
            )),
            HostOffer::NoReader => Err(CommandError::new(
                ErrorKind::NoSuchProcess,
                "the host no longer listens for messages from this workflow",
            )),
        }
    }
}

/// Offers `message` from the process `cx` runs to the host's outbox, as the built-in `send` to
/// [`Pid::HOST`] does, and says what became of it: for a handler that keeps such messages
/// elsewhere too (a durable host journals them) and need not fail a send nobody reads.
pub fn offer_to_host(cx: &Context<'_>, message: Payload) -> HostOffer {
    let Some(outbox) = &cx.slot.outbox else {
        return HostOffer::NoReader;
    };
    match outbox.send(cx.pid(), message) {
        Ok(()) => HostOffer::Queued,
        Err(OutboxRefused::Full) => HostOffer::Full,
        Err(OutboxRefused::Closed) => HostOffer::NoReader,
    }
}

pub(crate) fn log(request: Request, cx: &Context<'_>) {
    if let Command::Log(record) = request.command {
        emit(cx.pid(), None, &record);
    }
}

/// Writes a guest's log record to `tracing`, under target `wfhost::guest`, with the pid, the
/// workflow id when the process has one (a durable workflow), and the record's fields (as one
/// `key=value` list: `tracing` field names are fixed at compile time).
pub fn emit(pid: wfcontract::Pid, workflow: Option<&str>, record: &LogRecord) {
    let fields = FieldList(&record.fields);
    macro_rules! emit_at {
        ($level:expr) => {
            match (workflow, record.fields.is_empty()) {
                (None, true) => {
                    tracing::event!(target: "wfhost::guest", $level, pid = pid.0, "{}", record.message)
                }
                (None, false) => {
                    tracing::event!(target: "wfhost::guest", $level, pid = pid.0, fields = %fields, "{}", record.message)
                }
                (Some(id), true) => {
                    tracing::event!(target: "wfhost::guest", $level, pid = pid.0, workflow = id, "{}", record.message)
                }
                (Some(id), false) => {
                    tracing::event!(target: "wfhost::guest", $level, pid = pid.0, workflow = id, fields = %fields, "{}", record.message)
                }
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
