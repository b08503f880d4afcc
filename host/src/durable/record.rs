//! What one journaled step holds, and how it reads in a history.

use serde::{Deserialize, Serialize};
use wfcontract::{Event, Pid, StepOutput, Tag};

use crate::wasm::reads::Read;

/// One step of a durable workflow: everything that entered it and what it answered, with what
/// the host decided about its yields (so that recovery re-arms them as they were).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The events, in delivery order (a message's tag is its number in the store).
    pub events: Vec<Event>,
    /// What it read from WASI (clocks, randomness) since the last record, its `init` included
    /// for the first.
    pub reads: Vec<Read>,
    /// What it answered.
    pub output: StepOutput,
    /// When each `sleep` it yielded is due, in nanoseconds since the Unix epoch.
    pub dues: Vec<(Tag, u64)>,
    /// The number given to each message it sent to a durable workflow.
    pub sent: Vec<(Tag, u64)>,
    /// The pid given to each child it spawned.
    pub spawned: Vec<(Tag, Pid)>,
}

impl StepRecord {
    /// What the step counts toward the next snapshot: its events, and at least one.
    pub fn weight(&self) -> u64 {
        self.events.len().max(1) as u64
    }

    /// Decodes a record from the store.
    pub fn decode(bytes: &[u8]) -> Result<StepRecord, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}
