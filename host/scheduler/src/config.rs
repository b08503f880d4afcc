//! Scheduler settings, as a [`Builder`](crate::Builder) makes them.

use std::sync::Arc;
use std::time::Duration;

use crate::inbox::MailboxLimit;

/// Scheduler settings. Build one with [`Builder`](crate::Builder).
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) workers: usize,
    pub(crate) budget: usize,
    pub(crate) thread_name: String,
    pub(crate) cancel_grace: Option<Duration>,
    pub(crate) max_processes: Option<usize>,
    pub(crate) mailbox_limit: Option<usize>,
    pub(crate) mailbox_bytes: Option<usize>,
    pub(crate) max_children: Option<usize>,
    pub(crate) stack_size: Option<usize>,
    pub(crate) max_sleeps: usize,
    pub(crate) max_watchers: usize,
    pub(crate) max_waiting_completions: usize,
    pub(crate) step_bytes: usize,
}

impl Config {
    pub(crate) fn mailbox(&self) -> MailboxLimit {
        MailboxLimit {
            messages: self.mailbox_limit.unwrap_or(usize::MAX),
            bytes: self.mailbox_bytes.unwrap_or(usize::MAX),
        }
    }
}

/// What a shutdown calls when its grace period is over: see [`Builder::interrupt`](crate::Builder::interrupt).
pub(crate) type Interrupt = Arc<dyn Fn() + Send + Sync>;

/// What a shutdown calls once it is over: see [`Builder::on_stopped`](crate::Builder::on_stopped).
pub(crate) type Stopped = Box<dyn FnOnce() + Send>;

/// What a shutdown calls on the embedder's behalf.
#[derive(Default)]
pub(crate) struct Hooks {
    pub(crate) interrupt: Option<Interrupt>,
    pub(crate) stopped: Option<Stopped>,
}
