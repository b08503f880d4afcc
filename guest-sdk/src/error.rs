use std::fmt;

use wfcontract::{CommandError, ErrorKind, PayloadError};

/// Why an awaited command, or a workflow, failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The process was cancelled while this was pending.
    Cancelled,
    /// The host reported a failure of the command.
    Command(CommandError),
    /// A value could not be encoded or decoded.
    Payload(String),
    /// A failure of the workflow's own making.
    Failed(String),
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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cancelled => f.write_str("cancelled"),
            Error::Command(error) => error.fmt(f),
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
