//! On a store hosts share, what clients and other hosts write for this host's workflows: the
//! messages and cancels addressed to them, and the ends of workflows its own ones join. Every
//! host that joined takes them (`wfhost run`, `resume` and `serve` alike, and embedders), in a
//! thread of its own: woken at once by the store when a client writes (PostgreSQL's `LISTEN`),
//! and every poll interval otherwise.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use wfcontract::{Payload, Pid};

use super::Durable;

/// How often a host looks for messages and cancels when nothing wakes it (a message from a
/// workflow on another host notifies nobody).
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// Looks between two folds of the store's count changes into its counts (`Cluster::fold_counts`).
const FOLD_EVERY: u32 = 40;

impl Durable {
    /// Starts taking what is written for this host's workflows, until the host stops.
    pub(crate) fn start_inbox(self: &Arc<Durable>) -> std::io::Result<()> {
        let Some(lease) = self.lease.get() else {
            return Ok(());
        };
        let (wake, woken) = crossbeam_channel::bounded::<()>(1);
        let listening = Arc::clone(&lease.listening);
        {
            let wake = wake.clone();
            if let Err(error) = lease.store.lock().listen(
                Arc::new(move || {
                    let _ = wake.try_send(());
                }),
                Arc::clone(&listening),
            ) {
                tracing::warn!("no listener for messages and cancels ({error}): the host polls");
            }
        }
        let durable = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("wfhost-inbox".into())
            .spawn(move || take_until_stopped(&durable, &woken, &listening))
            .map(drop)
    }

    /// Delivers the messages and cancels for this host's workflows that clients and other hosts
    /// wrote, each once, and answers joins of workflows other hosts ran that have ended. The
    /// caller holds [`Durable::taking`].
    pub(crate) fn take_waiting(&self) {
        let Some(lease) = self.lease.get() else {
            return;
        };
        let Some(scheduler) = self.scheduler() else {
            return;
        };
        // Pauses first: a message written after a pause must not reach a workflow the host
        // has not yet held.
        match lease.store.lock().paused_here() {
            Ok(paused) => self.follow_pauses(&paused),
            Err(error) => {
                tracing::warn!("reading which of this host's workflows are paused: {error}")
            }
        }
        let messages = match lease.store.lock().take_messages(None) {
            Ok(messages) => messages,
            Err(error) => {
                tracing::warn!("taking the messages for this host's workflows: {error}");
                Vec::new()
            }
        };
        let mut left = Vec::new();
        for m in messages {
            if self.is_damaged(m.receiver) || self.starting.lock().contains(m.receiver) {
                // Left in the store: for whoever resumes the workflow, or, for one whose start
                // is in flight here, for the next look (at most a poll interval later).
                left.push(m.id);
                continue;
            }
            let payload: Payload = match postcard::from_bytes(&m.payload) {
                Ok(payload) => payload,
                Err(e) => {
                    self.refuse(m.id, &format!("message {} does not decode: {e}", m.id));
                    continue;
                }
            };
            match scheduler.send_numbered(Pid(m.sender), Pid(m.receiver), m.id, payload) {
                Ok(()) => {}
                // Not running here (it has just ended, or the host is stopping): the message
                // stays in the store, unread or for whoever runs its receiver next; it was
                // acknowledged to its sender and is never refused for that.
                Err(
                    wfhost_scheduler::Error::NoSuchProcess(_)
                    | wfhost_scheduler::Error::ShuttingDown,
                ) => left.push(m.id),
                Err(refused) => self.refuse(m.id, &refused.to_string()),
            }
        }
        if !left.is_empty() {
            if let Err(error) = lease.store.lock().untake_messages(&left) {
                tracing::warn!(
                    "{} message(s) this host could not deliver could not be given back \
                     ({error}): they are taken again when their workflows are claimed",
                    left.len()
                );
            }
        }
        let cancels = match lease.store.lock().take_cancels() {
            Ok(cancels) => cancels,
            Err(error) => {
                tracing::warn!("taking the cancels for this host's workflows: {error}");
                Vec::new()
            }
        };
        for num in cancels {
            if !self.starting.lock().keep_cancel(num) {
                let _ = scheduler.cancel(Pid(num));
            }
        }
        self.complete_remote_joins();
    }

    /// Whether a recovery by this host left workflow `num` as it was (damaged, or in a damaged
    /// tree).
    fn is_damaged(&self, num: u64) -> bool {
        let damaged = self.damaged.lock();
        if damaged.is_empty() {
            return false;
        }
        match self.reader.lock().workflow_by_num(num) {
            Ok(Some(workflow)) => damaged.iter().any(|d| d.id == workflow.start.id),
            _ => false,
        }
    }
}

fn take_until_stopped(
    durable: &Weak<Durable>,
    woken: &crossbeam_channel::Receiver<()>,
    stopped: &std::sync::atomic::AtomicBool,
) {
    let mut looks: u32 = 0;
    loop {
        let _ = woken.recv_timeout(POLL);
        if stopped.load(Ordering::Acquire) {
            return;
        }
        let Some(durable) = durable.upgrade() else {
            return;
        };
        if durable.is_stopping() || durable.writer.failed().is_some() {
            return;
        }
        let _taking = durable.taking.lock();
        // A claim may have held the lock while the host began to stop.
        if durable.is_stopping() {
            return;
        }
        durable.take_waiting();
        looks = looks.wrapping_add(1);
        if looks.is_multiple_of(FOLD_EVERY) {
            if let Some(lease) = durable.lease.get() {
                if let Err(error) = lease.store.lock().fold_counts() {
                    tracing::debug!("folding the store's counts by status: {error}");
                }
            }
        }
    }
}
