//! What a workflow keeps of its joins: each process joined, its `join` yield's tag, its result
//! once it arrived, and the join futures waiting for it ([`JoinFuture`](crate::JoinFuture)s).

use std::collections::BTreeMap;
use std::task::Waker;

use wfcontract::{CommandError, Event, Payload, Tag};

/// One process being joined, or its result kept for a later join.
pub(crate) struct Join {
    /// The `join` yield at the host, until its completion arrives.
    pub(crate) tag: Option<Tag>,
    /// The result, once it arrived, until a join future takes it.
    pub(crate) result: Option<Result<Payload, CommandError>>,
    /// The live join futures for this process, with their wakers once they have waited.
    pub(crate) futures: BTreeMap<u64, Option<Waker>>,
}

/// Every join of this workflow, by target.
#[derive(Default)]
pub(crate) struct Joins {
    pub(crate) by_pid: BTreeMap<u64, Join>,
    /// Which target a `join` yield's tag is for.
    pub(crate) by_tag: BTreeMap<u64, u64>,
    pub(crate) next_future: u64,
}

impl Joins {
    /// Routes a completion to its join, if it is one. Returns false for other completions.
    pub(crate) fn complete(&mut self, tag: Tag, event: &Event) -> bool {
        let Some(pid) = self.by_tag.remove(&tag.0) else {
            return false;
        };
        if let Some(join) = self.by_pid.get_mut(&pid) {
            join.tag = None;
            join.result = Some(event.clone().into_result());
            for waker in join.futures.values_mut().filter_map(Option::take) {
                waker.wake();
            }
        }
        true
    }

    /// Wakes every waiting join future (a cancel arrived). Returns whether any was waiting.
    pub(crate) fn wake_all(&mut self) -> bool {
        let mut any = false;
        for join in self.by_pid.values_mut() {
            for waker in join.futures.values_mut().filter_map(Option::take) {
                waker.wake();
                any = true;
            }
        }
        any
    }

    /// True while a join future waits for a result that has not arrived.
    pub(crate) fn awaited(&self) -> bool {
        self.by_pid
            .values()
            .any(|join| join.tag.is_some() && !join.futures.is_empty())
    }
}
