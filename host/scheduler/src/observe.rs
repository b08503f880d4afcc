//! Watching what processes do, for debugging and tooling (`wfhost run --events`).

use wfcontract::{Event, Pid, Yield};

use crate::process::ProcessResult;

/// Hears about every process's life. Called on the thread where the thing happens (often a
/// worker, right before or after a step), so implementations must be quick and must not block.
/// Every method has an empty default.
pub trait Observer: Send + Sync + 'static {
    /// A process was spawned to run `entry`.
    fn spawned(&self, pid: Pid, parent: Option<Pid>, entry: &str) {
        let _ = (pid, parent, entry);
    }

    /// `event` is about to be handed to the process's step.
    fn event(&self, pid: Pid, event: &Event) {
        let _ = (pid, event);
    }

    /// The process's step yielded `command`.
    fn yielded(&self, pid: Pid, command: &Yield) {
        let _ = (pid, command);
    }

    /// The process ended.
    fn finished(&self, pid: Pid, result: &ProcessResult) {
        let _ = (pid, result);
    }
}
