//! Waiting for durable workflows to end, or to send the host a message, without a thread per
//! waiter: a waiter registers the workflow's number, and the journal's writer fires every
//! waiter of the workflows a commit ended (or that sent the host something) once that commit is
//! on disk. A store hosts share also ends workflows on other hosts: their waiters are fired by
//! whoever polls the store for them ([`Waiters::watched`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::store::Op;

/// What a waiter waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Topic {
    /// The workflow's end.
    End,
    /// A message from the workflow to the host.
    Outbox,
}

/// How a waiter hears.
enum Notify {
    Async(tokio::sync::oneshot::Sender<()>),
    Blocking(crossbeam_channel::Sender<()>),
}

impl Notify {
    fn fire(self) {
        match self {
            Notify::Async(sender) => {
                let _ = sender.send(());
            }
            Notify::Blocking(sender) => {
                let _ = sender.try_send(());
            }
        }
    }
}

/// A waiter: its key, how it hears, and (for the outbox) the tag it has read up to.
struct Waiter {
    key: u64,
    notify: Notify,
    after: u64,
}

type Registry = Mutex<HashMap<u64, Vec<Waiter>>>;

/// The waiters of one host, by workflow number.
#[derive(Default)]
pub(crate) struct Waiters {
    next: AtomicU64,
    /// Waiters registered and not yet fired or dropped: none, and a commit looks at nothing.
    count: AtomicUsize,
    ends: Registry,
    outbox: Registry,
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters")
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish()
    }
}

impl Waiters {
    fn registry(&self, topic: Topic) -> &Registry {
        match topic {
            Topic::End => &self.ends,
            Topic::Outbox => &self.outbox,
        }
    }

    /// Waits for `topic` of workflow `num` (for the outbox: a message after tag `after`), from
    /// an async task. Register before reading the store: what happens after the read fires the
    /// watch.
    pub(crate) fn watch(self: &Arc<Self>, topic: Topic, num: u64, after: u64) -> Watch {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.register(
            topic,
            num,
            after,
            Notify::Async(sender),
            Receiver::Async(receiver),
        )
    }

    /// As [`watch`](Self::watch), for a thread that blocks.
    pub(crate) fn watch_blocking(self: &Arc<Self>, topic: Topic, num: u64, after: u64) -> Watch {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        self.register(
            topic,
            num,
            after,
            Notify::Blocking(sender),
            Receiver::Blocking(receiver),
        )
    }

    /// Waits, blocking, for workflow `num`'s next message to the host after tag `after` or its
    /// end, whichever comes first: either watch fires both.
    pub(crate) fn watch_sent_or_end_blocking(
        self: &Arc<Self>,
        num: u64,
        after: u64,
    ) -> (Watch, Watch) {
        let (sender, receiver) = crossbeam_channel::bounded(2);
        let sent = self.register(
            Topic::Outbox,
            num,
            after,
            Notify::Blocking(sender.clone()),
            Receiver::Blocking(receiver.clone()),
        );
        let end = self.register(
            Topic::End,
            num,
            0,
            Notify::Blocking(sender),
            Receiver::Blocking(receiver),
        );
        (sent, end)
    }

    fn register(
        self: &Arc<Self>,
        topic: Topic,
        num: u64,
        after: u64,
        notify: Notify,
        receiver: Receiver,
    ) -> Watch {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut registry = self.registry(topic).lock();
            registry
                .entry(num)
                .or_default()
                .push(Waiter { key, notify, after });
            // Counted under the lock, and SeqCst: a commit that ends `num` after this
            // registration reads the count after its commit, sees it, and looks.
            self.count.fetch_add(1, Ordering::SeqCst);
        }
        Watch {
            waiters: Arc::clone(self),
            topic,
            num,
            key,
            receiver,
        }
    }

    /// Fires every waiter of `topic` of the workflows numbered `nums`.
    pub(crate) fn fire(&self, topic: Topic, nums: &[u64]) {
        if nums.is_empty() || self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut fired = Vec::new();
        {
            let mut registry = self.registry(topic).lock();
            for num in nums {
                if let Some(waiters) = registry.remove(num) {
                    fired.extend(waiters);
                }
            }
            self.count.fetch_sub(fired.len(), Ordering::SeqCst);
        }
        for waiter in fired {
            waiter.notify.fire();
        }
    }

    /// Fires the outbox waiters of the workflows in `latest` (a workflow's number and the tag of
    /// its latest message to the host) that wait for a message after an earlier tag.
    pub(crate) fn fire_sent(&self, latest: &[(u64, u64)]) {
        if latest.is_empty() || self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut fired = Vec::new();
        {
            let mut registry = self.outbox.lock();
            for &(num, tag) in latest {
                let Some(waiters) = registry.get_mut(&num) else {
                    continue;
                };
                let mut kept = Vec::with_capacity(waiters.len());
                for waiter in waiters.drain(..) {
                    if waiter.after < tag {
                        fired.push(waiter);
                    } else {
                        kept.push(waiter);
                    }
                }
                if kept.is_empty() {
                    registry.remove(&num);
                } else {
                    *waiters = kept;
                }
            }
            self.count.fetch_sub(fired.len(), Ordering::SeqCst);
        }
        for waiter in fired {
            waiter.notify.fire();
        }
    }

    /// After a commit of `ops`: fires the waiters of the workflows they ended and of those
    /// that sent the host a message.
    pub(crate) fn committed(&self, ops: &[Op]) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut ended = Vec::new();
        let mut sent = Vec::new();
        for op in ops {
            match op {
                Op::End { num, .. } => ended.push(*num),
                Op::HostMessage(message) => sent.push(message.num),
                _ => {}
            }
        }
        self.fire(Topic::End, &ended);
        self.fire(Topic::Outbox, &sent);
    }

    /// The workflows someone waits for `topic` of.
    pub(crate) fn watched(&self, topic: Topic) -> Vec<u64> {
        self.registry(topic).lock().keys().copied().collect()
    }

    /// Whether anyone waits for anything.
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }
}

enum Receiver {
    Async(tokio::sync::oneshot::Receiver<()>),
    Blocking(crossbeam_channel::Receiver<()>),
}

/// One waiter; dropping it stops the wait.
pub(crate) struct Watch {
    waiters: Arc<Waiters>,
    topic: Topic,
    num: u64,
    key: u64,
    receiver: Receiver,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("topic", &self.topic)
            .field("num", &self.num)
            .finish()
    }
}

impl Watch {
    /// Whether it fired within `timeout` (async watches only; a blocking one waits as
    /// [`fired_blocking`](Self::fired_blocking)).
    pub(crate) async fn fired(&mut self, timeout: Duration) -> bool {
        match &mut self.receiver {
            Receiver::Async(receiver) => {
                matches!(tokio::time::timeout(timeout, receiver).await, Ok(Ok(())))
            }
            Receiver::Blocking(receiver) => receiver.recv_timeout(timeout).is_ok(),
        }
    }

    /// Whether it fired within `timeout`, blocking the thread.
    pub(crate) fn fired_blocking(&mut self, timeout: Duration) -> bool {
        match &mut self.receiver {
            Receiver::Blocking(receiver) => receiver.recv_timeout(timeout).is_ok(),
            Receiver::Async(receiver) => {
                let deadline = std::time::Instant::now() + timeout;
                loop {
                    if receiver.try_recv().is_ok() {
                        return true;
                    }
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    std::thread::sleep(left.min(Duration::from_millis(10)));
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut registry = self.waiters.registry(self.topic).lock();
        if let Some(waiters) = registry.get_mut(&self.num) {
            if let Some(at) = waiters.iter().position(|waiter| waiter.key == self.key) {
                waiters.swap_remove(at);
                self.waiters.count.fetch_sub(1, Ordering::SeqCst);
            }
            if waiters.is_empty() {
                registry.remove(&self.num);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_fires_the_waiters_of_what_it_ended_and_only_those() {
        let waiters = Arc::new(Waiters::default());
        let mut first = waiters.watch_blocking(Topic::End, 7, 0);
        let mut second = waiters.watch_blocking(Topic::End, 7, 0);
        let mut other = waiters.watch_blocking(Topic::End, 8, 0);
        let mut outbox = waiters.watch_blocking(Topic::Outbox, 7, 3);
        assert_eq!(waiters.count.load(Ordering::Relaxed), 4);
        waiters.committed(&[Op::End {
            num: 7,
            ending: crate::durable::store::Ending::Done(Vec::new()),
            at: 1,
        }]);
        assert!(first.fired_blocking(Duration::ZERO));
        assert!(second.fired_blocking(Duration::ZERO));
        assert!(!other.fired_blocking(Duration::ZERO));
        assert!(!outbox.fired_blocking(Duration::ZERO));
        assert_eq!(waiters.watched(Topic::End), vec![8]);
        drop((first, second));
        assert_eq!(waiters.count.load(Ordering::Relaxed), 2);
        drop(other);
        drop(outbox);
        assert_eq!(waiters.count.load(Ordering::Relaxed), 0);
        assert!(waiters.watched(Topic::End).is_empty());
        assert!(waiters.watched(Topic::Outbox).is_empty());
    }

    #[test]
    fn an_outbox_waiter_hears_only_of_messages_past_its_cursor() {
        let waiters = Arc::new(Waiters::default());
        let mut behind = waiters.watch_blocking(Topic::Outbox, 7, 2);
        let mut ahead = waiters.watch_blocking(Topic::Outbox, 7, 5);
        waiters.fire_sent(&[(7, 4), (9, 100)]);
        assert!(behind.fired_blocking(Duration::ZERO));
        assert!(!ahead.fired_blocking(Duration::ZERO));
        assert_eq!(waiters.watched(Topic::Outbox), vec![7]);
        drop((behind, ahead));
        assert!(!waiters.any());
    }
}
