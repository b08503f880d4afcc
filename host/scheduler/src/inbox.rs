//! A process's event queue: many producers, one consumer (the worker stepping the process).
//!
//! Three lanes, drained in this order: signals (cancels), completions of the process's own yields
//! (bounded by what it asked for), and the mailbox of messages (bounded per process: a send beyond
//! its message or byte limit is refused). So a cancel is never stuck behind a backlog of messages:
//! at most one budget of messages is delivered before it.
//!
//! A message leaves the mailbox only when the process has asked for messages: each step says how
//! many it takes with the next one (`StepOutput::receive`, kept here as `accept`). The rest stay
//! here, inside the mailbox limits, so whatever the senders do, a process holds in its own memory
//! only the messages it asked for.
//!
//! What wakes a waiting process depends on what it waits for (see `state.rs`): a `Blocked` process
//! (status `Wait`) wakes for any event it would take; an `Idle` one (status `Idle`, waiting for
//! messages) wakes for messages and cancels, and finds any completions that arrived meanwhile at
//! its next step. A message that the process has not asked for wakes neither.
//!
//! The lanes sit behind one mutex, so a drain sees a consistent snapshot and "empty" is exact.
//! Events from one producer keep their order: each producer pushes under the mutex, in program
//! order.

use std::collections::VecDeque;

use wfcontract::{Event, EventKind, Pid};

use crate::error::Error;
use crate::process::FailureKind;
use crate::state::Wake;

/// Why an event was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The process has finished; its inbox accepts nothing more.
    Closed,
    /// The mailbox holds its limit of messages or bytes (cancels and completions are never
    /// refused so).
    Full,
}

impl Refused {
    /// The error a send to `to` that was refused so returns.
    pub(crate) fn into_send_error(self, to: Pid) -> Error {
        match self {
            Refused::Closed => Error::NoSuchProcess(to),
            Refused::Full => Error::MailboxFull(to),
        }
    }
}

/// Completions given inline: room for one in place, the most a process that yields one command
/// at a time ever has (a send, then the reply it waits for), so that it never allocates for them.
pub(crate) type Inline = smallvec::SmallVec<[Event; 1]>;

/// What an event weighs against a step's byte budget: its payload and any error text.
fn event_bytes(event: &Event) -> usize {
    event.data.bytes.len() + event.error.as_ref().map_or(0, |e| e.message.len())
}

#[derive(Debug)]
pub(crate) struct Inbox {
    /// A cancel waits (the signal lane: one is as good as many, and every cancel is the same
    /// event, `Event::cancel()`).
    cancelled: bool,
    completions: VecDeque<Event>,
    mailbox: VecDeque<Event>,
    /// Set by `terminate` (boxed: rare, and every inbox carries the field): the next turn ends
    /// the process, with this kind and reason, without stepping it.
    terminate: Option<Box<(FailureKind, String)>>,
    /// Set once, when the process finishes; pushes fail from then on.
    closed: bool,
    /// The size of the payloads in the mailbox.
    mailbox_bytes: usize,
    /// How many messages the process takes with its next step(s): set after each step from its
    /// `receive`, counted down as messages are drained.
    accept: usize,
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
    /// An empty inbox whose mailbox holds at most `limit`. It takes no messages until told to
    /// ([`Inbox::accept`]).
    pub(crate) fn with_limit(limit: MailboxLimit) -> Inbox {
        Inbox {
            cancelled: false,
            completions: VecDeque::new(),
            mailbox: VecDeque::new(),
            terminate: None,
            closed: false,
            mailbox_bytes: 0,
            accept: 0,
            limit,
        }
    }

    /// Queues an event in its lane. Returns what it wakes: `None` for a message the process has
    /// not asked for.
    pub(crate) fn push(&mut self, event: Event) -> Result<Option<Wake>, Refused> {
        if self.closed {
            return Err(Refused::Closed);
        }
        Ok(match event.kind {
            EventKind::Cancel => {
                // A cancel is a cancel: one waiting is enough, however many are sent.
                self.cancelled = true;
                Some(Wake::Message)
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
                (self.accept > 0).then_some(Wake::Message)
            }
            EventKind::YieldComplete => {
                self.completions.push_back(event);
                Some(Wake::Completion)
            }
        })
    }

    /// The process takes up to `messages` messages with its next step(s) (its latest step's
    /// `receive`). Returns whether messages it now takes are already queued.
    pub(crate) fn accept(&mut self, messages: u32) -> bool {
        self.accept = match messages {
            u32::MAX => usize::MAX,
            n => n as usize,
        };
        self.accept > 0 && !self.mailbox.is_empty()
    }

    /// Whether the process has finished: pushes fail.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// How many completions wait to be taken.
    pub(crate) fn completions(&self) -> usize {
        self.completions.len()
    }

    /// Asks the next turn to end the process with `reason` (of `kind`) instead of stepping it.
    pub(crate) fn terminate(&mut self, kind: FailureKind, reason: String) -> Result<(), Refused> {
        if self.closed {
            return Err(Refused::Closed);
        }
        self.terminate
            .get_or_insert_with(|| Box::new((kind, reason)));
        Ok(())
    }

    /// The pending termination, if any.
    /// Whether a termination waits for the next turn.
    pub(crate) fn terminating(&self) -> bool {
        self.terminate.is_some()
    }

    pub(crate) fn take_terminate(&mut self) -> Option<(FailureKind, String)> {
        self.terminate.take().map(|ended| *ended)
    }

    /// Moves up to `budget` events into `out`: signals, then completions (first those in
    /// `inline`, completed during the process's last step and not queued here, then the queued
    /// ones), then the messages the process asked for; and no more payload bytes than
    /// `max_bytes`, except that the first event always goes. Returns how many.
    pub(crate) fn drain_into(
        &mut self,
        out: &mut Vec<Event>,
        inline: &mut Inline,
        budget: usize,
        max_bytes: usize,
    ) -> usize {
        let mut taken = 0;
        let mut bytes = 0usize;
        // The signal lane; a cancel carries no bytes.
        if self.cancelled && taken < budget {
            self.cancelled = false;
            out.push(Event::cancel());
            taken += 1;
        }
        for lane in 1..3 {
            if lane == 1 && !inline.is_empty() {
                let mut first = 0;
                while taken < budget && first < inline.len() {
                    let size = event_bytes(&inline[first]);
                    if taken > 0 && bytes.saturating_add(size) > max_bytes {
                        break;
                    }
                    bytes = bytes.saturating_add(size);
                    taken += 1;
                    first += 1;
                }
                // One at a time after one reservation: `extend` from a SmallVec's drain takes
                // the slow path (4% of a pingpong message).
                out.reserve(first);
                for event in inline.drain(..first) {
                    out.push(event);
                }
                if !inline.is_empty() {
                    return taken;
                }
            }
            while taken < budget {
                let queue = match lane {
                    1 => &mut self.completions,
                    _ if self.accept == 0 => break,
                    _ => &mut self.mailbox,
                };
                let Some(size) = queue.front().map(event_bytes) else {
                    break;
                };
                if taken > 0 && bytes.saturating_add(size) > max_bytes {
                    return taken;
                }
                let event = queue.pop_front().expect("looked at above");
                if event.kind == EventKind::Message {
                    self.mailbox_bytes -= event.data.bytes.len();
                    if self.accept != usize::MAX {
                        self.accept -= 1;
                    }
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

    /// True when something is queued that wakes an `Idle` process: a cancel, a termination, or a
    /// message it asked for.
    pub(crate) fn wakes_idle(&self) -> bool {
        self.cancelled || (self.accept > 0 && !self.mailbox.is_empty()) || self.terminate.is_some()
    }

    /// Refuses further events and frees the queued ones.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.terminate = None;
        self.cancelled = false;
        self.completions = VecDeque::new();
        self.mailbox = VecDeque::new();
        self.mailbox_bytes = 0;
        self.accept = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use wfcontract::{Payload, Pid, Tag};

    fn message(n: u64) -> Event {
        Event::message(Pid(n), Payload::empty())
    }

    /// However many cancels are sent, one waits: a process cancelling another in a loop cannot
    /// grow its inbox.
    #[test]
    fn repeated_cancels_wait_as_one() {
        let mut inbox = Inbox::default();
        for _ in 0..10_000 {
            assert_eq!(inbox.push(Event::cancel()), Ok(Some(Wake::Message)));
        }
        let mut out = Vec::new();
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), usize::MAX, usize::MAX),
            1
        );
        assert_eq!(out[0].kind, EventKind::Cancel);
        // Taken, the next cancel waits again.
        inbox.push(Event::cancel()).unwrap();
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), usize::MAX, usize::MAX),
            1
        );
    }

    /// Completions given inline during the last step come after a cancel and before queued
    /// completions and messages, within the same budget and byte limit; what does not fit stays
    /// for the next drain.
    #[test]
    fn inline_completions_are_taken_in_the_completion_lane() {
        let completion = |tag: u64, bytes: usize| {
            Event::completion(Tag(tag), Ok(Payload::postcard_bytes(vec![0; bytes])))
        };
        let mut inbox = Inbox::default();
        inbox.accept(u32::MAX);
        inbox.push(message(9)).unwrap();
        inbox.push(completion(5, 0)).unwrap();
        inbox.push(Event::cancel()).unwrap();
        let mut inline: Inline =
            smallvec::smallvec![completion(1, 0), completion(2, 0), completion(3, 0)];
        let mut out = Vec::new();
        assert_eq!(inbox.drain_into(&mut out, &mut inline, 3, usize::MAX), 3);
        let seen: Vec<(EventKind, u64)> = out.iter().map(|e| (e.kind, e.tag.0)).collect();
        assert_eq!(
            seen,
            [
                (EventKind::Cancel, 0),
                (EventKind::YieldComplete, 1),
                (EventKind::YieldComplete, 2)
            ]
        );
        assert_eq!(inline.len(), 1);
        out.clear();
        assert_eq!(inbox.drain_into(&mut out, &mut inline, 32, usize::MAX), 3);
        let seen: Vec<(EventKind, u64)> = out.iter().map(|e| (e.kind, e.tag.0)).collect();
        assert_eq!(
            seen,
            [
                (EventKind::YieldComplete, 3),
                (EventKind::YieldComplete, 5),
                (EventKind::Message, 0)
            ]
        );
        // The byte limit holds for inline ones too; the first event always goes.
        let mut inline: Inline = smallvec::smallvec![completion(1, 60), completion(2, 60)];
        inbox.push(completion(7, 0)).unwrap();
        out.clear();
        assert_eq!(inbox.drain_into(&mut out, &mut inline, 32, 100), 1);
        assert_eq!((inline.len(), inbox.completions()), (1, 1));
    }

    #[test]
    fn signals_overtake_a_message_backlog() {
        let mut inbox = Inbox::default();
        inbox.accept(u32::MAX);
        for n in 0..10_000 {
            inbox.push(message(n)).unwrap();
        }
        inbox.push(Event::cancel()).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, usize::MAX),
            32
        );
        assert_eq!(out[0].kind, EventKind::Cancel);
        assert_eq!(out[1].from, Pid(0));
        assert_eq!(out[31].from, Pid(30));
    }

    #[test]
    fn budget_spans_the_lanes_and_keeps_order() {
        let mut inbox = Inbox::default();
        inbox.accept(10);
        assert_eq!(inbox.push(message(1)), Ok(Some(Wake::Message)));
        assert_eq!(
            inbox.push(Event::completion(Tag(7), Ok(Payload::empty()))),
            Ok(Some(Wake::Completion))
        );
        assert_eq!(inbox.push(message(2)), Ok(Some(Wake::Message)));
        let mut out = Vec::new();
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 2, usize::MAX),
            2
        );
        assert_eq!((out[0].tag, out[1].from), (Tag(7), Pid(1)));
        assert!(!inbox.is_empty());
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 2, usize::MAX),
            1
        );
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
        assert_eq!(
            inbox.terminate(FailureKind::Terminated, "x".into()),
            Err(Refused::Closed)
        );
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
        assert_eq!(inbox.push(Event::cancel()), Ok(Some(Wake::Message)));
        assert_eq!(
            inbox.push(Event::completion(Tag(1), Ok(Payload::empty()))),
            Ok(Some(Wake::Completion))
        );
    }

    #[test]
    fn the_mailbox_counts_bytes_and_frees_them_as_it_drains() {
        let big = |n: usize| Event::message(Pid(1), Payload::opaque(vec![7; n]));
        let mut inbox = Inbox::with_limit(MailboxLimit {
            messages: 100,
            bytes: 10,
        });
        inbox.accept(1);
        inbox.push(big(6)).unwrap();
        inbox.push(big(4)).unwrap();
        assert_eq!(inbox.push(big(1)), Err(Refused::Full));
        let mut out = Vec::new();
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 1, usize::MAX),
            1
        );
        // Took the one it asked for: the next message waits, and wakes nothing.
        assert_eq!(inbox.push(big(6)), Ok(None));
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
        inbox.accept(100);
        for n in [40, 40, 40, 200] {
            inbox.push(sized(n)).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, 100),
            2
        );
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, 100),
            1
        );
        // Larger than the budget on its own: it still goes, alone.
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, 100),
            1
        );
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
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, 100),
            1
        );
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, 100),
            1
        );
    }

    /// Messages stay here until the process asks for them, and then only as many as it asked for:
    /// the mailbox limit keeps applying to the rest.
    #[test]
    fn messages_wait_in_the_mailbox_until_asked_for() {
        let mut inbox = Inbox::with_limit(MailboxLimit {
            messages: 3,
            bytes: usize::MAX,
        });
        for n in 0..3 {
            assert_eq!(inbox.push(message(n)), Ok(None));
        }
        assert_eq!(inbox.push(message(3)), Err(Refused::Full));
        assert!(inbox.is_empty());
        assert!(!inbox.wakes_idle());
        let mut out = Vec::new();
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, usize::MAX),
            0
        );
        assert!(inbox.accept(2));
        assert!(inbox.wakes_idle());
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, usize::MAX),
            2
        );
        assert_eq!(
            out.iter().map(|e| e.from).collect::<Vec<_>>(),
            [Pid(0), Pid(1)]
        );
        assert!(inbox.is_empty());
        assert_eq!(inbox.push(message(4)), Ok(None));
        assert!(inbox.accept(1));
        assert_eq!(inbox.push(message(5)), Ok(Some(Wake::Message)));
        assert_eq!(inbox.push(message(6)), Err(Refused::Full));
        assert_eq!(
            inbox.drain_into(&mut out, &mut Default::default(), 32, usize::MAX),
            1
        );
        assert_eq!(out[2].from, Pid(2));
    }
}
