//! A yield a durable workflow made that is not answered yet: what a snapshot keeps of it and a
//! replay re-arms.

use serde::{Deserialize, Serialize};
use wfcontract::{Command, Pid};

/// A yield not yet answered, with what the host decided about it when it was journaled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Pending {
    pub(crate) command: Command,
    /// For a sleep: when it is due, in nanoseconds since the Unix epoch.
    pub(crate) due: Option<u64>,
    pub(crate) sent: Option<u64>,
    pub(crate) spawned: Option<Pid>,
}
