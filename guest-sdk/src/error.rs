use std::fmt;

use wfcontract::{CommandError, ErrorKind, Payload, PayloadError, Pid};

/// Why an awaited command, or a workflow, failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The process was cancelled while this was pending. An entry point that returns it (with
    /// `?`, say) ends as cancelled: a joining parent sees `child-cancelled`, not `child-failed`.
    Cancelled,
    /// The host reported a failure of the command; [`Error::kind`] says which.
    Command(CommandError),
    /// A message arrived that does not decode as the type asked for. It is not lost: it is here,
    /// to inspect or pass on. See [`Ctx::recv`](crate::Ctx::recv).
    Undecodable(Box<Undecodable>),
    /// A value could not be encoded or decoded.
    Payload(String),
    /// A failure of the workflow's own making.
    Failed(String),
}

/// A message that did not decode as the type a receive asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecodable {
    /// Its sender ([`Pid::HOST`] for the host).
    pub from: Pid,
    /// The message as it came.
    pub data: Payload,
    /// The type it was to be.
    pub wanted: &'static str,
    /// Why it did not decode.
    pub reason: String,
}

impl Error {
    /// A workflow failure with this message.
    pub fn msg(message: impl fmt::Display) -> Error {
        Error::Failed(message.to_string())
    }

    /// The kind of the host's error, if the host reported one.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Error::Command(error) => Some(error.kind),
            _ => None,
        }
    }

    /// True when this process was cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cancelled => f.write_str("cancelled"),
            Error::Command(error) => error.fmt(f),
            Error::Undecodable(bad) => write!(
                f,
                "a message from process {} is not a {}: {} ({} bytes of {})",
                bad.from,
                bad.wanted,
                bad.reason,
                bad.data.bytes.len(),
                bad.data.encoding.name()
            ),
            Error::Payload(message) => write!(f, "bad payload: {message}"),
            Error::Failed(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

impl From<CommandError> for Error {
    fn from(error: CommandError) -> Error {
        if error.kind == ErrorKind::Cancelled {
            Error::Cancelled
        } else {
            Error::Command(error)
        }
    }
}

impl From<PayloadError> for Error {
    fn from(error: PayloadError) -> Error {
        Error::Payload(error.to_string())
    }
}

/// What entry points and commands return.
pub type Result<T, E = Error> = std::result::Result<T, E>;
