//! Messages processes send to [`Pid::HOST`]: they go to whoever started the process (or its
//! nearest ancestor that was started from outside), through a bounded outbox.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use wfcontract::{Payload, Pid};

/// Why a message to the host was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OutboxRefused {
    /// The outbox holds its limit of messages or bytes: the host is not reading.
    Full,
    /// Nobody reads it any more.
    Closed,
}

/// The sending half: cloned into every process that inherits it.
#[derive(Clone, Debug)]
pub struct Outbox {
    sender: Sender<(Pid, Payload)>,
    held: Arc<Held>,
}

/// The receiving half, held by whoever started the process.
#[derive(Debug)]
pub struct OutboxReceiver {
    receiver: Receiver<(Pid, Payload)>,
    held: Arc<Held>,
}

/// What an outbox holds, against its limits. The channel itself is unbounded (a bounded one would
/// allocate its whole capacity up front, per process); these counts bound it.
#[derive(Debug)]
struct Held {
    messages: AtomicUsize,
    bytes: AtomicUsize,
    max_messages: usize,
    max_bytes: usize,
}

/// An outbox holding at most `messages` messages and `bytes` payload bytes at once; a send beyond
/// either is refused (the sender sees `mailbox-full`), so a host that does not read cannot be made
/// to hold more.
pub fn outbox(messages: usize, bytes: usize) -> (Outbox, OutboxReceiver) {
    let (sender, receiver) = crossbeam_channel::unbounded();
    let held = Arc::new(Held {
        messages: AtomicUsize::new(0),
        bytes: AtomicUsize::new(0),
        max_messages: messages,
        max_bytes: bytes,
    });
    (
        Outbox {
            sender,
            held: Arc::clone(&held),
        },
        OutboxReceiver { receiver, held },
    )
}

impl Outbox {
    /// Queues `message` from `from`, without blocking.
    pub(crate) fn send(&self, from: Pid, message: Payload) -> Result<(), OutboxRefused> {
        let size = message.bytes.len();
        let held = &self.held;
        // Relaxed: the counts are budgets, not a publication of the messages themselves (the
        // channel publishes those).
        let fits = |count: &AtomicUsize, add: usize, max: usize| {
            count
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                    now.checked_add(add).filter(|total| *total <= max)
                })
                .is_ok()
        };
        if !fits(&held.messages, 1, held.max_messages) {
            return Err(OutboxRefused::Full);
        }
        if !fits(&held.bytes, size, held.max_bytes) {
            held.messages.fetch_sub(1, Ordering::Relaxed);
            return Err(OutboxRefused::Full);
        }
        self.sender.send((from, message)).map_err(|_| {
            held.messages.fetch_sub(1, Ordering::Relaxed);
            held.bytes.fetch_sub(size, Ordering::Relaxed);
            OutboxRefused::Closed
        })
    }
}

impl OutboxReceiver {
    fn taken(&self, message: (Pid, Payload)) -> (Pid, Payload) {
        self.held.messages.fetch_sub(1, Ordering::Relaxed);
        self.held
            .bytes
            .fetch_sub(message.1.bytes.len(), Ordering::Relaxed);
        message
    }

    /// The next message, if one is queued.
    pub fn try_recv(&self) -> Option<(Pid, Payload)> {
        self.receiver.try_recv().ok().map(|m| self.taken(m))
    }

    /// The next message, waiting up to `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<(Pid, Payload), RecvTimeoutError> {
        self.receiver.recv_timeout(timeout).map(|m| self.taken(m))
    }

    /// The channel underneath, for `crossbeam_channel::select!`; pass what it yields to
    /// [`OutboxReceiver::received`].
    pub fn channel(&self) -> &Receiver<(Pid, Payload)> {
        &self.receiver
    }

    /// Accounts for a message taken from [`OutboxReceiver::channel`] directly.
    pub fn received(&self, message: (Pid, Payload)) -> (Pid, Payload) {
        self.taken(message)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_outbox_holds_its_limits_and_frees_them_as_it_is_read() {
        let (outbox, receiver) = outbox(2, 10);
        let sized = |n: usize| Payload::opaque(vec![0; n]);
        assert_eq!(outbox.send(Pid(1), sized(6)), Ok(()));
        assert_eq!(outbox.send(Pid(1), sized(5)), Err(OutboxRefused::Full));
        assert_eq!(outbox.send(Pid(1), sized(4)), Ok(()));
        assert_eq!(outbox.send(Pid(1), sized(0)), Err(OutboxRefused::Full));
        assert_eq!(receiver.try_recv().map(|m| m.1.bytes.len()), Some(6));
        assert_eq!(outbox.send(Pid(2), sized(6)), Ok(()));
        assert_eq!(receiver.try_recv().map(|m| m.1.bytes.len()), Some(4));
        drop(receiver);
        assert_eq!(outbox.send(Pid(2), sized(0)), Err(OutboxRefused::Closed));
    }
}
