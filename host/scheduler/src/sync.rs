//! The synchronisation primitives the scheduler's protocols are built from, swapped for loom's
//! under `--cfg loom` so that the models in `loom_models.rs` explore the interleavings of the
//! real code.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU8, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU8, AtomicUsize, Ordering};

/// A mutex with parking_lot's interface (no poisoning).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        return self.inner.lock();
        #[cfg(loom)]
        return self.inner.lock().expect("loom mutex poisoned");
    }
}

/// A condition variable over [`Mutex`].
#[derive(Debug, Default)]
pub(crate) struct Condvar {
    #[cfg(not(loom))]
    inner: parking_lot::Condvar,
    #[cfg(loom)]
    inner: loom::sync::Condvar,
}

impl Condvar {
    pub(crate) fn new() -> Self {
        Condvar::default()
    }

    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        #[cfg(not(loom))]
        {
            let mut guard = guard;
            self.inner.wait(&mut guard);
            guard
        }
        #[cfg(loom)]
        {
            self.inner.wait(guard).expect("loom mutex poisoned")
        }
    }

    pub(crate) fn notify_one(&self) {
        self.inner.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.inner.notify_all();
    }
}
