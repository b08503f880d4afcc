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
    sender: Sender<Queued>,
    held: Arc<Held>,
}

/// The receiving half, held by whoever started the process.
#[derive(Debug)]
pub struct OutboxReceiver {
    receiver: Receiver<Queued>,
}

/// A message in an outbox. It counts against the outbox's limits until it is taken apart
/// ([`Queued::into_parts`]) or dropped, however it left the channel.
#[derive(Debug)]
pub struct Queued {
    from: Pid,
    data: Payload,
    /// `data`'s size when queued, counted out when this goes.
    size: usize,
    held: Arc<Held>,
}

impl Queued {
    /// The sender and the message; the outbox has room for another from now on.
    pub fn into_parts(mut self) -> (Pid, Payload) {
        let data = std::mem::replace(&mut self.data, Payload::empty());
        (self.from, data)
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.held.messages.fetch_sub(1, Ordering::Relaxed);
        self.held.bytes.fetch_sub(self.size, Ordering::Relaxed);
    }
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
        OutboxReceiver { receiver },
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
        // From here the counts are the message's: a refused send drops it and so counts it out.
        let queued = Queued {
            from,
            data: message,
            size,
            held: Arc::clone(held),
        };
        self.sender.send(queued).map_err(|_| OutboxRefused::Closed)
    }
}

impl OutboxReceiver {
    /// The next message, if one is queued.
    pub fn try_recv(&self) -> Option<(Pid, Payload)> {
        self.receiver.try_recv().ok().map(Queued::into_parts)
    }

    /// The next message, waiting up to `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<(Pid, Payload), RecvTimeoutError> {
        self.receiver.recv_timeout(timeout).map(Queued::into_parts)
    }

    /// The channel underneath, for `crossbeam_channel::select!`. What it yields counts against
    /// the outbox until taken apart or dropped.
    pub fn channel(&self) -> &Receiver<Queued> {
        &self.receiver
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
        // The refused message and the one still queued at the drop are both counted out.
        assert_eq!(outbox.held.messages.load(Ordering::Relaxed), 0);
        assert_eq!(outbox.held.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_message_taken_from_the_raw_channel_frees_its_place_however_it_goes() {
        let (outbox, receiver) = outbox(1, 10);
        assert_eq!(outbox.send(Pid(1), Payload::opaque(vec![0; 4])), Ok(()));
        assert_eq!(
            outbox.send(Pid(1), Payload::empty()),
            Err(OutboxRefused::Full)
        );
        // Dropped unread.
        drop(receiver.channel().try_recv().unwrap());
        assert_eq!(outbox.send(Pid(2), Payload::opaque(vec![0; 10])), Ok(()));
        // Taken apart.
        let (from, data) = receiver.channel().try_recv().unwrap().into_parts();
        assert_eq!((from, data.bytes.len()), (Pid(2), 10));
        assert_eq!(outbox.send(Pid(3), Payload::opaque(vec![0; 10])), Ok(()));
    }
}
