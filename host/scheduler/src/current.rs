//! What a worker thread keeps where code running on it (handlers, scheduler calls from inside a
//! step) can reach it: which scheduler it works for (its `Shared::id`), its index, and its local run queue.

use std::cell::RefCell;

use crate::queue::{Local, Task};

struct Current {
    /// The scheduler this thread works for (the address of its shared state).
    scheduler: usize,
    index: usize,
    local: Local,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// Makes the calling thread worker `index` of `scheduler`, with its local run queue.
pub(crate) fn enter(scheduler: usize, index: usize, local: Local) {
    CURRENT.with(|current| {
        *current.borrow_mut() = Some(Current {
            scheduler,
            index,
            local,
        })
    });
}

/// The index of the current worker, if this thread is one of `scheduler`'s workers.
pub(crate) fn index(scheduler: usize) -> Option<usize> {
    CURRENT.with(|current| {
        current.try_borrow().ok().and_then(|c| {
            c.as_ref()
                .filter(|c| c.scheduler == scheduler)
                .map(|c| c.index)
        })
    })
}

/// True when the calling thread is one of `scheduler`'s workers.
pub(crate) fn on_worker(scheduler: usize) -> bool {
    index(scheduler).is_some()
}

/// Runs `f(local, task)` if this thread is one of `scheduler`'s workers; otherwise returns the
/// task.
pub(crate) fn with_local_task<R>(
    scheduler: usize,
    task: Task,
    f: impl FnOnce(&mut Local, Task) -> R,
) -> Result<R, Task> {
    CURRENT.with(|current| match current.try_borrow_mut() {
        Ok(mut current) => match current.as_mut() {
            Some(current) if current.scheduler == scheduler => Ok(f(&mut current.local, task)),
            _ => Err(task),
        },
        Err(_) => Err(task),
    })
}

/// Runs `f` on this worker thread's local run queue (the thread must be a worker).
#[inline]
pub(crate) fn with_local<R>(f: impl FnOnce(&mut Local) -> R) -> R {
    CURRENT.with(|current| {
        let mut current = current.borrow_mut();
        f(&mut current.as_mut().expect("worker context").local)
    })
}

/// Makes the calling thread no scheduler's worker again: its local run queue, if it was one.
pub(crate) fn leave() -> Option<Local> {
    CURRENT.with(|current| current.borrow_mut().take().map(|current| current.local))
}
