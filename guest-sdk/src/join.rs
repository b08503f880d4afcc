//! Joins: waiting for another process's result without ever losing it.
//!
//! The host hands a finished child's result over once, to the join that asked for it. So a join
//! future dropped before the result came (the losing side of a `select`, a timeout around it) must
//! not let the result go: the join stays in flight at the host, and its result, when it comes, is
//! kept here for the next `join` of the same process. Joins of one process that overlap share the
//! one request, and each gets the result.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use wfcontract::{Command, Pid};

use crate::error::Error;
use crate::joins::{Join, Joins};
use crate::runtime::{cancelled, Shared};

/// The result of another process, once it finishes: see [`Ctx::join`](crate::Ctx::join).
/// Dropping it before then abandons the wait, not the result: the next join of the same process
/// gets it.
#[must_use = "a join does nothing unless awaited"]
pub struct JoinFuture<T> {
    state: Shared,
    pid: Pid,
    id: u64,
    cancels_at_start: u64,
    finished: bool,
    types: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for JoinFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinFuture")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl<T> JoinFuture<T> {
    pub(crate) fn new(state: &Shared, pid: Pid) -> JoinFuture<T> {
        let mut shared = state.borrow_mut();
        let cancels_at_start = shared.cancels;
        let joins = &mut shared.joins;
        let id = joins.next_future;
        joins.next_future += 1;
        let ask = match joins.by_pid.get_mut(&pid.0) {
            Some(join) => {
                join.futures.insert(id, None);
                false
            }
            None => {
                joins.by_pid.insert(
                    pid.0,
                    Join {
                        tag: None,
                        result: None,
                        futures: BTreeMap::from([(id, None)]),
                    },
                );
                true
            }
        };
        if ask {
            let tag = shared.issue_untracked(Command::Join(pid));
            let joins = &mut shared.joins;
            joins.by_tag.insert(tag.0, pid.0);
            if let Some(join) = joins.by_pid.get_mut(&pid.0) {
                join.tag = Some(tag);
            }
        }
        drop(shared);
        JoinFuture {
            state: Rc::clone(state),
            pid,
            id,
            cancels_at_start,
            finished: false,
            types: PhantomData,
        }
    }

    /// Stops being one of the join's futures; the join itself, and any result, stay.
    fn leave(&mut self, joins: &mut Joins) {
        if let Some(join) = joins.by_pid.get_mut(&self.pid.0) {
            join.futures.remove(&self.id);
        }
    }
}

impl<T: DeserializeOwned> Future for JoinFuture<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.finished {
            return Poll::Ready(Err(Error::msg("a join was polled after it finished")));
        }
        let state = Rc::clone(&self.state);
        let mut state = state.borrow_mut();
        if state.cancels > self.cancels_at_start || state.unobserved_cancel {
            // This wait ends; the join goes on, and its result is kept for a later join.
            state.unobserved_cancel = false;
            self.finished = true;
            self.leave(&mut state.joins);
            return Poll::Ready(Err(Error::from(cancelled())));
        }
        let (pid, id) = (self.pid.0, self.id);
        let Some(join) = state.joins.by_pid.get_mut(&pid) else {
            self.finished = true;
            return Poll::Ready(Err(Error::msg("a join lost its record")));
        };
        let Some(result) = &join.result else {
            join.futures.insert(id, Some(cx.waker().clone()));
            return Poll::Pending;
        };
        // The last future of the join takes the result; the others get a copy.
        join.futures.remove(&id);
        let result = if join.futures.is_empty() {
            let join = state.joins.by_pid.remove(&pid).expect("looked up above");
            join.result.expect("checked above")
        } else {
            result.clone()
        };
        self.finished = true;
        Poll::Ready(
            result
                .map_err(Error::from)
                .and_then(|payload| payload.decode().map_err(Error::from)),
        )
    }
}

impl<T> Drop for JoinFuture<T> {
    fn drop(&mut self) {
        if !self.finished {
            let state = Rc::clone(&self.state);
            let borrowed = state.try_borrow_mut();
            if let Ok(mut state) = borrowed {
                self.leave(&mut state.joins);
            }
        }
    }
}
