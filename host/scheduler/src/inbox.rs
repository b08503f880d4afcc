//! A process's event queue: many producers, one consumer (the worker stepping the process).
//!
//! Two lanes. The control lane holds cancels and yield completions: answers the process is
//! waiting on, bounded by what it asked for. The mailbox holds messages, which other processes can
//! pile up without bound. A turn drains control first, so a cancel is never stuck behind a backlog
//! of messages: at most one budget of messages is delivered before it.
//!
//! Both lanes sit behind one mutex, so a drain sees a consistent snapshot and "empty" is exact.
//! Events from one producer keep their order: each producer pushes under the mutex, in program order.

use std::collections::VecDeque;

use wfcontract::{Event, EventKind};

/// The process has finished; its inbox accepts nothing more.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Closed;

#[derive(Debug, Default)]
pub(crate) struct Inbox {
    control: VecDeque<Event>,
    mailbox: VecDeque<Event>,
    /// Set by `terminate`: the next turn ends the process without stepping it.
    terminate: Option<String>,
    /// Set once, when the process finishes; pushes fail from then on.
    closed: bool,
}

impl Inbox {
    /// Queues an event in its lane.
    pub(crate) fn push(&mut self, event: Event) -> Result<(), Closed> {
        if self.closed {
            return Err(Closed);
        }
        match event.kind {
            EventKind::Message => self.mailbox.push_back(event),
            EventKind::YieldComplete | EventKind::Cancel => self.control.push_back(event),
        }
        Ok(())
    }

    /// Asks the next turn to end the process with `reason` instead of stepping it.
    pub(crate) fn terminate(&mut self, reason: String) -> Result<(), Closed> {
        if self.closed {
            return Err(Closed);
        }
        self.terminate.get_or_insert(reason);
        Ok(())
    }

    /// The pending termination, if any.
    pub(crate) fn take_terminate(&mut self) -> Option<String> {
        self.terminate.take()
    }

    /// Moves up to `budget` events into `out`, control lane first. Returns how many.
    pub(crate) fn drain_into(&mut self, out: &mut Vec<Event>, budget: usize) -> usize {
        let from_control = self.control.len().min(budget);
        out.extend(self.control.drain(..from_control));
        let from_mailbox = self.mailbox.len().min(budget - from_control);
        out.extend(self.mailbox.drain(..from_mailbox));
        from_control + from_mailbox
    }

    /// True when a turn would find nothing to do.
    pub(crate) fn is_empty(&self) -> bool {
        self.control.is_empty() && self.mailbox.is_empty() && self.terminate.is_none()
    }

    /// Refuses further events and frees the queued ones.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.terminate = None;
        self.control = VecDeque::new();
        self.mailbox = VecDeque::new();
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
    fn control_lane_overtakes_a_message_backlog() {
        let mut inbox = Inbox::default();
        for n in 0..10_000 {
            inbox.push(message(n)).unwrap();
        }
        inbox.push(Event::cancel()).unwrap();
        let mut out = Vec::new();
        assert_eq!(inbox.drain_into(&mut out, 32), 32);
        assert_eq!(out[0].kind, EventKind::Cancel);
        assert_eq!(out[1].from, Pid(0));
        assert_eq!(out[31].from, Pid(30));
    }

    #[test]
    fn budget_spans_both_lanes_and_keeps_order() {
        let mut inbox = Inbox::default();
        inbox.push(message(1)).unwrap();
        inbox.push(Event::completion(Tag(7), Ok(Payload::empty()))).unwrap();
        inbox.push(message(2)).unwrap();
        let mut out = Vec::new();
        assert_eq!(inbox.drain_into(&mut out, 2), 2);
        assert_eq!((out[0].tag, out[1].from), (Tag(7), Pid(1)));
        assert!(!inbox.is_empty());
        assert_eq!(inbox.drain_into(&mut out, 2), 1);
        assert!(inbox.is_empty());
    }

    #[test]
    fn closed_inbox_refuses_events() {
        let mut inbox = Inbox::default();
        inbox.push(message(1)).unwrap();
        inbox.close();
        assert!(inbox.is_empty());
        assert_eq!(inbox.push(message(2)), Err(Closed));
        assert_eq!(inbox.terminate("x".into()), Err(Closed));
    }
}
