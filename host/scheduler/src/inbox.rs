//! A process's event queue: many producers, one consumer (the worker stepping the process).
//!
//! Three lanes, drained in this order: signals (cancels), completions of the process's own yields
//! (bounded by what it asked for), and the mailbox of messages (which other processes can pile up
//! without bound). So a cancel is never stuck behind a backlog of messages: at most one budget of
//! messages is delivered before it.
//!
//! What wakes a waiting process depends on what it waits for (see `state.rs`): a `Blocked` process
//! (status `Wait`) wakes for any event; an `Idle` one (status `Idle`, waiting for messages) wakes
//! for messages and cancels, and finds any completions that arrived meanwhile at its next step.
//!
//! Both lanes sit behind one mutex, so a drain sees a consistent snapshot and "empty" is exact.
//! Events from one producer keep their order: each producer pushes under the mutex, in program order.

use std::collections::VecDeque;

use wfcontract::{Event, EventKind};

/// Why an event was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The process has finished; its inbox accepts nothing more.
    Closed,
    /// The mailbox holds its limit of messages or bytes (cancels and completions are never
    /// refused so).
    Full,
}

/// What an event weighs against a step's byte budget: its payload and any error text.
fn event_bytes(event: &Event) -> usize {
    event.data.bytes.len() + event.error.as_ref().map_or(0, |e| e.message.len())
}

#[derive(Debug)]
pub(crate) struct Inbox {
    signals: VecDeque<Event>,
    completions: VecDeque<Event>,
    mailbox: VecDeque<Event>,
    /// Set by `terminate`: the next turn ends the process without stepping it.
    terminate: Option<String>,
    /// Set once, when the process finishes; pushes fail from then on.
    closed: bool,
    /// The size of the payloads in the mailbox.
    mailbox_bytes: usize,
    limit: MailboxLimit,
}

/// How much a mailbox may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MailboxLimit {
    /// The most messages.
    pub(crate) messages: usize,
    /// The most payload bytes, summed over the queued messages.
    pub(crate) bytes: usize,
}

impl MailboxLimit {
    pub(crate) const NONE: MailboxLimit = MailboxLimit {
        messages: usize::MAX,
        bytes: usize::MAX,
    };
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox::with_limit(MailboxLimit::NONE)
    }
}

impl Inbox {
    /// An empty inbox whose mailbox holds at most `limit`.
    pub(crate) fn with_limit(limit: MailboxLimit) -> Inbox {
        Inbox {
            signals: VecDeque::new(),
            completions: VecDeque::new(),
            mailbox: VecDeque::new(),
            terminate: None,
            closed: false,
            mailbox_bytes: 0,
            limit,
        }
    }

    /// Queues an event in its lane. Returns whether it wakes an `Idle` process.
    pub(crate) fn push(&mut self, event: Event) -> Result<bool, Refused> {
        if self.closed {
            return Err(Refused::Closed);
        }
        Ok(match event.kind {
            EventKind::Cancel => {
                self.signals.push_back(event);
                true
            }
            EventKind::Message => {
                let size = event.data.bytes.len();
                if self.mailbox.len() >= self.limit.messages
                    || self.mailbox_bytes.saturating_add(size) > self.limit.bytes
                {
                    return Err(Refused::Full);
                }
                self.mailbox_bytes += size;
                self.mailbox.push_back(event);
                true
            }
            EventKind::YieldComplete => {
                self.completions.push_back(event);
                false
            }
        })
    }

    /// Asks the next turn to end the process with `reason` instead of stepping it.
    pub(crate) fn terminate(&mut self, reason: String) -> Result<(), Refused> {
        if self.closed {
            return Err(Refused::Closed);
        }
        self.terminate.get_or_insert(reason);
        Ok(())
    }

    /// The pending termination, if any.
    pub(crate) fn take_terminate(&mut self) -> Option<String> {
        self.terminate.take()
    }

    /// Moves up to `budget` events into `out`: signals, then completions, then messages; and no
    /// more payload bytes than `max_bytes`, except that the first event always goes. Returns how
    /// many.
    pub(crate) fn drain_into(
        &mut self,
        out: &mut Vec<Event>,
        budget: usize,
        max_bytes: usize,
    ) -> usize {
        let mut taken = 0;
        let mut bytes = 0usize;
        for lane in [&mut self.signals, &mut self.completions, &mut self.mailbox] {
            while taken < budget {
                let Some(size) = lane.front().map(event_bytes) else {
                    break;
                };
                if taken > 0 && bytes.saturating_add(size) > max_bytes {
                    return taken;
                }
                let event = lane.pop_front().expect("looked at above");
                if event.kind == EventKind::Message {
                    self.mailbox_bytes -= event.data.bytes.len();
                }
                bytes = bytes.saturating_add(size);
                out.push(event);
                taken += 1;
            }
        }
        taken
    }

    /// True when a turn would find nothing to do.
    pub(crate) fn is_empty(&self) -> bool {
        self.completions.is_empty() && !self.wakes_idle()
    }

    /// True when something is queued that wakes an `Idle` process.
    pub(crate) fn wakes_idle(&self) -> bool {
        !self.signals.is_empty() || !self.mailbox.is_empty() || self.terminate.is_some()
    }

    /// Refuses further events and frees the queued ones.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.terminate = None;
        self.signals = VecDeque::new();
        self.completions = VecDeque::new();
        self.mailbox = VecDeque::new();
        self.mailbox_bytes = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use wfcontract::{Payload, Pid, Tag};

    fn message(n: u64) -> Event {
        Event::message(Pid(n), Payload::empty())
    }

    #[test]
    fn signals_overtake_a_message_backlog() {
        let mut inbox = Inbox::default();
        for n in 0..10_000 {
            inbox.push(message(n)).unwrap();
        }
        inbox.push(Event::cancel()).unwrap();
        let mut out = Vec::new();
        assert_eq!(inbox.drain_into(&mut out, 32, usize::MAX), 32);
        assert_eq!(out[0].kind, EventKind::Cancel);
        assert_eq!(out[1].from, Pid(0));
        assert_eq!(out[31].from, Pid(30));
    }

    #[test]
    fn budget_spans_the_lanes_and_keeps_order() {
        let mut inbox = Inbox::default();
        assert_eq!(inbox.push(message(1)), Ok(true));
        assert_eq!(
            inbox.push(Event::completion(Tag(7), Ok(Payload::empty()))),
            Ok(false)
        );
        assert_eq!(inbox.push(message(2)), Ok(true));
        let mut out = Vec::new();
        assert_eq!(inbox.drain_into(&mut out, 2, usize::MAX), 2);
        assert_eq!((out[0].tag, out[1].from), (Tag(7), Pid(1)));
        assert!(!inbox.is_empty());
        assert_eq!(inbox.drain_into(&mut out, 2, usize::MAX), 1);
        assert!(inbox.is_empty());
    }

    #[test]
    fn completions_alone_do_not_wake_an_idle_process() {
        let mut inbox = Inbox::default();
        inbox
            .push(Event::completion(Tag(1), Ok(Payload::empty())))
            .unwrap();
        assert!(!inbox.is_empty());
        assert!(!inbox.wakes_idle());
        inbox.push(Event::cancel()).unwrap();
        assert!(inbox.wakes_idle());
    }

    #[test]
    fn closed_inbox_refuses_events() {
        let mut inbox = Inbox::default();
        inbox.push(message(1)).unwrap();
        inbox.close();
        assert!(inbox.is_empty());
        assert_eq!(inbox.push(message(2)), Err(Refused::Closed));
        assert_eq!(inbox.terminate("x".into()), Err(Refused::Closed));
    }

    #[test]
    fn a_full_mailbox_refuses_messages_but_not_control_events() {
        let mut inbox = Inbox::with_limit(MailboxLimit {
            messages: 2,
            bytes: usize::MAX,
        });
        inbox.push(message(1)).unwrap();
        inbox.push(message(2)).unwrap();
        assert_eq!(inbox.push(message(3)), Err(Refused::Full));
        assert_eq!(inbox.push(Event::cancel()), Ok(true));
        assert_eq!(
            inbox.push(Event::completion(Tag(1), Ok(Payload::empty()))),
            Ok(false)
        );
    }

    #[test]
    fn the_mailbox_counts_bytes_and_frees_them_as_it_drains() {
        let big = |n: usize| Event::message(Pid(1), Payload::opaque(vec![7; n]));
        let mut inbox = Inbox::with_limit(MailboxLimit {
            messages: 100,
            bytes: 10,
        });
        inbox.push(big(6)).unwrap();
        inbox.push(big(4)).unwrap();
        assert_eq!(inbox.push(big(1)), Err(Refused::Full));
        let mut out = Vec::new();
        assert_eq!(inbox.drain_into(&mut out, 1, usize::MAX), 1);
        assert_eq!(inbox.push(big(6)), Ok(true));
        assert_eq!(inbox.push(big(1)), Err(Refused::Full));
        // A message larger than the whole mailbox never fits.
        let mut empty = Inbox::with_limit(MailboxLimit {
            messages: 100,
            bytes: 10,
        });
        assert_eq!(empty.push(big(11)), Err(Refused::Full));
    }

    #[test]
    fn a_drain_stops_at_its_byte_budget_but_always_takes_one() {
        let sized = |n: usize| Event::message(Pid(1), Payload::opaque(vec![0; n]));
        let mut inbox = Inbox::default();
        for n in [40, 40, 40, 200] {
            inbox.push(sized(n)).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(inbox.drain_into(&mut out, 32, 100), 2);
        assert_eq!(inbox.drain_into(&mut out, 32, 100), 1);
        // Larger than the budget on its own: it still goes, alone.
        assert_eq!(inbox.drain_into(&mut out, 32, 100), 1);
        assert_eq!(out.len(), 4);
        assert!(inbox.is_empty());
    }

    #[test]
    fn an_error_text_weighs_in_the_byte_budget() {
        let failed = |n: usize| {
            Event::completion(
                Tag(1),
                Err(wfcontract::CommandError::new(
                    wfcontract::ErrorKind::ChildFailed,
                    "x".repeat(n),
                )),
            )
        };
        let mut inbox = Inbox::default();
        inbox.push(failed(60)).unwrap();
        inbox.push(failed(60)).unwrap();
        let mut out = Vec::new();
        assert_eq!(inbox.drain_into(&mut out, 32, 100), 1);
        assert_eq!(inbox.drain_into(&mut out, 32, 100), 1);
    }
}
