//! The executor that turns an `async fn` into the step state machine the host drives.
//!
//! Each command a workflow awaits is yielded with a fresh tag and gets a slot here; the host's
//! completion event fills the slot and wakes the future waiting on it. A step delivers the events,
//! polls the entry point's future until it stops making progress, and reports what it waits for:
//! completions (status `Wait`), or only messages (`Idle`), and how many messages it takes next
//! (one per receive waiting for one). Messages it did not ask for stay queued at the host.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use wfcontract::{Command, CommandError, Event, EventKind, Payload, Pid, Status, Tag, Yield};

use crate::error::Error;
use crate::joins::Joins;

/// A message another process sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The sender; [`Pid::HOST`] when the host sent it.
    pub from: Pid,
    /// What it sent.
    pub data: Payload,
}

enum Slot {
    Pending(Option<Waker>),
    Done(Result<Payload, CommandError>),
}

/// The per-process state shared by the context and the futures it hands out.
pub(crate) struct ProcessState {
    next_tag: u64,
    slots: BTreeMap<u64, Slot>,
    /// Yields produced and not yet handed to the host (more than a step may carry wait here).
    pub(crate) yields: VecDeque<Yield>,
    /// Messages the host delivered that no receive has taken yet. Only as many arrive as
    /// receives asked for, so this stays small.
    mailbox: VecDeque<Message>,
    /// Receives waiting for a message, by receive id. A receive removes its entry when dropped,
    /// so abandoned ones (a `recv_timeout` that timed out) leave nothing behind.
    recv_wakers: BTreeMap<u64, Waker>,
    next_recv: u64,
    /// Cancels received so far; a receive or join begun before the latest cancel fails with
    /// `Cancelled`.
    pub(crate) cancels: u64,
    /// A cancel arrived while nothing was waiting: the next await fails with `Cancelled`, so the
    /// workflow sees it even if it had not started waiting yet.
    pub(crate) unobserved_cancel: bool,
    /// Joins in flight, and results of joins whose futures were dropped.
    pub(crate) joins: Joins,
    /// The most yields the host takes from one step.
    pub(crate) max_yields: usize,
    /// The host's retry policies asked for so far, by function (`None`: the host has none). A
    /// `BTreeMap`: a `HashMap` would read WASI's randomness for its keys, a read a replay must
    /// make the same.
    pub(crate) policies: BTreeMap<String, Option<wfcontract::RetryPolicy>>,
}

pub(crate) type Shared = Rc<RefCell<ProcessState>>;

impl ProcessState {
    pub(crate) fn new(max_yields: u32) -> Shared {
        Rc::new(RefCell::new(ProcessState {
            next_tag: 1,
            slots: BTreeMap::new(),
            yields: VecDeque::new(),
            mailbox: VecDeque::new(),
            recv_wakers: BTreeMap::new(),
            next_recv: 0,
            cancels: 0,
            unobserved_cancel: false,
            joins: Joins::default(),
            max_yields: (max_yields as usize).max(1),
            policies: BTreeMap::new(),
        }))
    }

    /// Queues `command` and returns its tag, with a slot for the completion.
    pub(crate) fn issue(&mut self, command: Command) -> Tag {
        let tag = self.issue_untracked(command);
        self.slots.insert(tag.0, Slot::Pending(None));
        tag
    }

    /// Queues `command` with a fresh tag whose completion is routed elsewhere (a join).
    pub(crate) fn issue_untracked(&mut self, command: Command) -> Tag {
        let tag = Tag(self.next_tag);
        self.next_tag += 1;
        self.yields.push_back(Yield { tag, command });
        tag
    }

    /// Queues a command that expects no completion.
    pub(crate) fn issue_unanswered(&mut self, command: Command) {
        self.yields.push_back(Yield {
            tag: Tag(0),
            command,
        });
    }

    /// The workflow asked whether it was cancelled: it has seen the cancel.
    pub(crate) fn observe_cancel(&mut self) -> bool {
        self.unobserved_cancel = false;
        self.cancels > 0
    }

    /// Hands the step's events to whoever waits for them.
    pub(crate) fn deliver(&mut self, events: Vec<Event>) {
        for event in events {
            match event.kind {
                EventKind::YieldComplete => {
                    let tag = event.tag;
                    if self.joins.complete(tag, &event) {
                        continue;
                    }
                    // A completion for a future that was dropped has no slot any more, and one for
                    // an await a cancel already failed must not undo that: both are ignored.
                    if let Some(slot @ Slot::Pending(_)) = self.slots.get_mut(&tag.0) {
                        if let Slot::Pending(Some(waker)) =
                            std::mem::replace(slot, Slot::Done(event.into_result()))
                        {
                            waker.wake();
                        }
                    }
                }
                EventKind::Message => {
                    self.mailbox.push_back(Message {
                        from: event.from,
                        data: event.data,
                    });
                    self.wake_receivers();
                }
                EventKind::Cancel => {
                    self.cancels += 1;
                    let mut observed = !self.recv_wakers.is_empty();
                    for slot in self.slots.values_mut() {
                        if let Slot::Pending(waker) = slot {
                            if let Some(waker) = waker.take() {
                                waker.wake();
                            }
                            *slot = Slot::Done(Err(cancelled()));
                            observed = true;
                        }
                    }
                    observed |= self.joins.wake_all();
                    self.unobserved_cancel = !observed;
                    self.wake_receivers();
                }
            }
        }
    }

    fn wake_receivers(&mut self) {
        for (_, waker) in std::mem::take(&mut self.recv_wakers) {
            waker.wake();
        }
    }

    #[cfg(test)]
    pub(crate) fn recv_wakers_is_empty(&self) -> bool {
        self.recv_wakers.is_empty()
    }

    /// True while some live future waits for a completion.
    pub(crate) fn awaits_completion(&self) -> bool {
        self.slots
            .values()
            .any(|slot| matches!(slot, Slot::Pending(_)))
            || self.joins.awaited()
    }

    /// How many messages the next step should bring: one per receive still waiting, less those
    /// already here.
    pub(crate) fn wanted_messages(&self) -> u32 {
        let wanted = self.recv_wakers.len().saturating_sub(self.mailbox.len());
        u32::try_from(wanted).unwrap_or(u32::MAX)
    }
}

pub(crate) fn cancelled() -> CommandError {
    CommandError::new(wfcontract::ErrorKind::Cancelled, "cancelled")
}

/// A command in flight. Awaiting it gives the command's result; dropping it abandons the result
/// (the command itself has already been sent to the host).
#[must_use = "the command is sent either way; await it for its result"]
pub struct CommandFuture<T> {
    state: Shared,
    tag: Tag,
    decode: fn(Payload) -> Result<T, Error>,
    finished: bool,
    /// Set when the command could not even be built (its input did not encode).
    refused: Option<Error>,
    /// Tell the host when this is dropped unfinished, so it can stop the work (a timer).
    forget_on_drop: bool,
}

impl<T> std::fmt::Debug for CommandFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandFuture")
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

impl<T> CommandFuture<T> {
    pub(crate) fn new(
        state: &Shared,
        command: Command,
        decode: fn(Payload) -> Result<T, Error>,
    ) -> CommandFuture<T> {
        let tag = state.borrow_mut().issue(command);
        CommandFuture {
            state: Rc::clone(state),
            tag,
            decode,
            finished: false,
            refused: None,
            forget_on_drop: false,
        }
    }

    /// The tag of the command this future waits for.
    pub(crate) fn tag(&self) -> Tag {
        self.tag
    }

    /// Makes dropping this future before it finishes tell the host to forget the command.
    pub(crate) fn forget_on_drop(mut self) -> CommandFuture<T> {
        self.forget_on_drop = true;
        self
    }

    /// A future that fails with `error` without sending anything.
    pub(crate) fn refused(state: &Shared, error: Error) -> CommandFuture<T> {
        CommandFuture {
            state: Rc::clone(state),
            tag: Tag(0),
            decode: |_| Err(Error::msg("unreachable")),
            finished: false,
            refused: Some(error),
            forget_on_drop: false,
        }
    }
}

impl<T> Future for CommandFuture<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.finished {
            return Poll::Ready(Err(Error::msg(
                "a command future was polled after it finished",
            )));
        }
        if let Some(error) = self.refused.take() {
            self.finished = true;
            return Poll::Ready(Err(error));
        }
        let mut state = self.state.borrow_mut();
        if state.unobserved_cancel && matches!(state.slots.get(&self.tag.0), Some(Slot::Pending(_)))
        {
            state.unobserved_cancel = false;
            state.slots.insert(self.tag.0, Slot::Done(Err(cancelled())));
        }
        match state.slots.get_mut(&self.tag.0) {
            Some(Slot::Pending(waker)) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            Some(Slot::Done(_)) => {
                let Some(Slot::Done(result)) = state.slots.remove(&self.tag.0) else {
                    unreachable!("matched above");
                };
                drop(state);
                self.finished = true;
                Poll::Ready(result.map_err(Error::from).and_then(self.decode))
            }
            None => Poll::Ready(Err(Error::msg("a command lost its completion slot"))),
        }
    }
}

impl<T> Drop for CommandFuture<T> {
    fn drop(&mut self) {
        if !self.finished && self.refused.is_none() {
            if let Ok(mut state) = self.state.try_borrow_mut() {
                let pending = matches!(state.slots.remove(&self.tag.0), Some(Slot::Pending(_)));
                if pending && self.forget_on_drop {
                    state.issue_unanswered(Command::Forget(self.tag));
                }
            }
        }
    }
}

/// Waits for the next message.
#[must_use = "futures do nothing unless awaited"]
pub struct RecvFuture {
    state: Shared,
    cancels_at_start: u64,
    id: u64,
}

impl std::fmt::Debug for RecvFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvFuture").finish_non_exhaustive()
    }
}

impl RecvFuture {
    pub(crate) fn new(state: &Shared) -> RecvFuture {
        let mut shared = state.borrow_mut();
        let id = shared.next_recv;
        shared.next_recv += 1;
        RecvFuture {
            state: Rc::clone(state),
            cancels_at_start: shared.cancels,
            id,
        }
    }
}

impl Future for RecvFuture {
    type Output = Result<Message, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.state.borrow_mut();
        if state.cancels > self.cancels_at_start || state.unobserved_cancel {
            state.unobserved_cancel = false;
            state.recv_wakers.remove(&self.id);
            return Poll::Ready(Err(Error::Cancelled));
        }
        match state.mailbox.pop_front() {
            Some(message) => {
                state.recv_wakers.remove(&self.id);
                Poll::Ready(Ok(message))
            }
            None => {
                state.recv_wakers.insert(self.id, cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for RecvFuture {
    fn drop(&mut self) {
        if let Ok(mut state) = self.state.try_borrow_mut() {
            state.recv_wakers.remove(&self.id);
        }
    }
}

/// Wakes by raising a flag; the executor polls again while the flag is up.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How a workflow's root future ended, when it did not succeed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// It failed: the text says why.
    Failed(String),
    /// It stopped because it was cancelled.
    Cancelled(String),
}

/// What a workflow's root future produces.
pub(crate) type Outcome = Result<Payload, Ending>;

/// A workflow's root future, polled by steps.
pub(crate) struct Task {
    future: Pin<Box<dyn Future<Output = Outcome>>>,
    flag: Arc<Flag>,
    waker: Waker,
}

/// Polls in one step stop after this many rounds even if something keeps waking: the step then
/// asks to run again (`Continue`), so a busy workflow cannot hold the worker.
const MAX_POLLS_PER_STEP: usize = 64;

impl Task {
    pub(crate) fn new(future: Pin<Box<dyn Future<Output = Outcome>>>) -> Task {
        let flag = Arc::new(Flag(AtomicBool::new(true)));
        let waker = Waker::from(Arc::clone(&flag));
        Task {
            future,
            flag,
            waker,
        }
    }

    /// Polls while woken. `None` when it gave up with the flag still raised.
    pub(crate) fn poll(&mut self) -> Option<Poll<Outcome>> {
        let mut cx = Context::from_waker(&self.waker);
        for _ in 0..MAX_POLLS_PER_STEP {
            if !self.flag.0.swap(false, Ordering::Relaxed) {
                return Some(Poll::Pending);
            }
            if let Poll::Ready(result) = self.future.as_mut().poll(&mut cx) {
                return Some(Poll::Ready(result));
            }
        }
        if self.flag.0.load(Ordering::Relaxed) {
            None
        } else {
            Some(Poll::Pending)
        }
    }

    /// Forces a poll at the next step (after events were delivered).
    pub(crate) fn wake(&self) {
        self.flag.0.store(true, Ordering::Relaxed);
    }
}

/// What a pending workflow waits for, as a step status.
pub(crate) fn waiting_status(state: &ProcessState) -> Status {
    if state.awaits_completion() {
        Status::Wait
    } else {
        Status::Idle
    }
}
