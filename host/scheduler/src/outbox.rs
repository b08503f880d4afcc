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
    held: Arc<Held>,
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
    /// Set by [`OutboxReceiver::close`]. A send queues under this lock, and `close` drains
    /// under it: every message is either queued before the close (and returned by it) or
    /// refused as `Closed` after it, none left unread in between.
    closed: parking_lot::Mutex<bool>,
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
        closed: parking_lot::Mutex::new(false),
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
        // From here the counts are the message's: a refused send drops it and so counts it out.
        let queued = Queued {
            from,
            data: message,
            size,
            held: Arc::clone(held),
        };
        let closed = held.closed.lock();
        if *closed {
            return Err(OutboxRefused::Closed);
        }
        self.sender.send(queued).map_err(|_| OutboxRefused::Closed)
    }
}

impl OutboxReceiver {
    /// Stops taking messages: from now on a send is refused as if nobody read the outbox (a
    /// durable workflow's is then logged, and kept in its store). Returns what was queued and
    /// not yet read, which nothing else will.
    pub fn close(self) -> Vec<(Pid, Payload)> {
        let mut closed = self.held.closed.lock();
        *closed = true;
        self.receiver.try_iter().map(Queued::into_parts).collect()
    }

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
    fn closing_returns_every_message_queued_and_refuses_the_rest() {
        let (outbox, receiver) = outbox(100, 1_000);
        assert_eq!(outbox.send(Pid(1), Payload::opaque(vec![1])), Ok(()));
        assert_eq!(outbox.send(Pid(2), Payload::opaque(vec![2])), Ok(()));
        assert_eq!(receiver.try_recv().map(|m| m.0), Some(Pid(1)));
        let unread: Vec<Pid> = receiver.close().into_iter().map(|m| m.0).collect();
        assert_eq!(unread, [Pid(2)]);
        assert_eq!(
            outbox.send(Pid(3), Payload::empty()),
            Err(OutboxRefused::Closed)
        );
        assert_eq!(outbox.held.messages.load(Ordering::Relaxed), 0);
    }

    /// A close racing sends from other threads: each message accepted is among those the
    /// close returns, each one after it is refused; none is left unread in between.
    #[test]
    fn a_close_racing_sends_loses_none_that_was_accepted() {
        for round in 0..200 {
            let (outbox, receiver) = outbox(10_000, 1_000_000);
            let accepted = std::sync::atomic::AtomicUsize::new(0);
            let unread = std::thread::scope(|scope| {
                for sender in 0..2 {
                    let (outbox, accepted) = (outbox.clone(), &accepted);
                    scope.spawn(move || {
                        for _ in 0..200 {
                            if outbox.send(Pid(sender), Payload::empty()).is_ok() {
                                accepted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
                // Somewhere among the sends.
                for _ in 0..round {
                    std::hint::spin_loop();
                }
                receiver.close().len()
            });
            assert_eq!(unread, accepted.load(Ordering::Relaxed), "round {round}");
        }
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
