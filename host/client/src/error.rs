//! What a call to the server can end in, other than its answer.

/// A call that failed: the server refused it (with its status, and the code and message of its
/// `{"error"}` body), or no answer came (no status).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    status: Option<u16>,
    code: String,
    message: String,
}

/// The result of a call.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A refusal: the server answered `status` with this code and message.
    pub(crate) fn refused(status: u16, code: String, message: String) -> Error {
        Error {
            status: Some(status),
            code,
            message,
        }
    }

    /// A call that got no answer, or one this client could not read: `refused` (no server
    /// listened: nothing was sent), `unreachable`, `timeout`, `bad_answer`, `bad_request` (the
    /// call was never sent).
    pub(crate) fn local(code: &str, message: impl Into<String>) -> Error {
        Error {
            status: None,
            code: code.to_string(),
            message: message.into(),
        }
    }

    /// The HTTP status of the refusal; none when no answer came.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// A word programs can match (see [`ErrorDetail::code`](crate::wire::ErrorDetail::code)),
    /// or, for a call that got no answer, `refused`, `unreachable`, `timeout` or
    /// `bad_answer`.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// What was wrong and what to do about it.
    pub fn message(&self) -> &str {
        &self.message
    }
}
