//! Watching what processes do: for debugging and tooling (`wfhost run --events`).

use std::sync::Arc;

use wfcontract::{Event, Payload, Pid, Yield};
use wfhost_scheduler::ProcessResult;

use crate::error::{Error, Result};

/// Hears about every process's life: [`HostBuilder::observer`](crate::HostBuilder::observer).
/// Called on the thread where the thing happens (often a worker, right before or after a step),
/// so implementations must be quick and must not block; one that panics is logged and otherwise
/// ignored. Every method has an empty default.
pub trait Observer: Send + Sync + 'static {
    /// A process was spawned to run `entry`.
    fn spawned(&self, pid: Pid, parent: Option<Pid>, entry: &str) {
        let _ = (pid, parent, entry);
    }

    /// `event` is about to be handed to the process's step.
    fn event(&self, pid: Pid, event: &Event) {
        let _ = (pid, event);
    }

    /// The process's step yielded this command.
    fn yielded(&self, pid: Pid, command: &Yield) {
        let _ = (pid, command);
    }

    /// The process ended with its result, or why it failed.
    fn finished(&self, pid: Pid, result: &Result<Payload>) {
        let _ = (pid, result);
    }
}

/// The host's observer, as the scheduler calls it.
pub(crate) struct Adapter(pub(crate) Arc<dyn Observer>);

impl wfhost_scheduler::Observer for Adapter {
    fn spawned(&self, pid: Pid, parent: Option<Pid>, entry: &str) {
        self.0.spawned(pid, parent, entry);
    }

    fn event(&self, pid: Pid, event: &Event) {
        self.0.event(pid, event);
    }

    fn yielded(&self, pid: Pid, command: &Yield) {
        self.0.yielded(pid, command);
    }

    fn finished(&self, pid: Pid, result: &ProcessResult) {
        let result = result.clone().map_err(|error| Error::failed(&error));
        self.0.finished(pid, &result);
    }
}

/// A message to the host as a log line shows it: JSON in full up to a few KiB, else its
/// encoding and size (the store of a durable workflow keeps all of it).
pub(crate) fn shown(message: &Payload) -> String {
    const SHOWN: usize = 4096;
    match message.encoding {
        wfcontract::Encoding::Json if message.bytes.len() <= SHOWN => {
            String::from_utf8_lossy(&message.bytes).into_owned()
        }
        encoding => format!(
            "({}, {} bytes: `wfhost history` shows it)",
            encoding.name(),
            message.bytes.len()
        ),
    }
}
