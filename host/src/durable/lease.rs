//! A host among many on one store: its lease, renewed by a thread of its own, and the connection
//! it claims, starts and gives back workflows with. A host that loses its lease stops every
//! durable workflow where its journal ends, as on a failed store: another host owns them now.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::store::{Cluster, StoreError, StoreErrorKind};
use super::Durable;

/// The lease a host holds on the workflows it owns.
pub(crate) struct Lease {
    /// The host's number in the store.
    pub(crate) host: u64,
    /// Claims, starts and the release.
    pub(crate) store: Mutex<Box<dyn Cluster>>,
    /// Set (and signalled) to stop the renewals.
    stop: Arc<(Mutex<bool>, Condvar)>,
    /// Set to stop listening for new work.
    pub(crate) listening: Arc<std::sync::atomic::AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Lease {
    /// Starts renewing the lease of host `host`, `length` long, every third of it, on `renewer`;
    /// `durable` hears if it is lost.
    pub(crate) fn start(
        host: u64,
        length: Duration,
        renewer: Box<dyn Cluster>,
        store: Box<dyn Cluster>,
        durable: Weak<Durable>,
    ) -> std::io::Result<Lease> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stop_in = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("wfhost-lease".into())
            .spawn(move || renew(renewer, length / 3, &stop_in, &durable))?;
        Ok(Lease {
            host,
            store: Mutex::new(store),
            stop,
            listening: Arc::default(),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops renewing; then gives back what the host owns, unless `keep` (its workflows stay
    /// its own until the lease runs out).
    pub(crate) fn end(&self, keep: bool) {
        self.listening
            .store(true, std::sync::atomic::Ordering::Release);
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
        if !keep {
            if let Err(error) = self.store.lock().release() {
                tracing::warn!(
                    "the workflows of this host could not be given back ({error}): other hosts \
                     take them over when its lease runs out"
                );
            }
        }
    }
}

fn renew(
    mut store: Box<dyn Cluster>,
    every: Duration,
    stop: &(Mutex<bool>, Condvar),
    durable: &Weak<Durable>,
) {
    loop {
        {
            let mut stopped = stop.0.lock();
            if *stopped {
                return;
            }
            // Woken early only to stop.
            let _ = stop.1.wait_for(&mut stopped, every);
            if *stopped {
                return;
            }
        }
        let renewed = store.renew();
        if let Some(metrics) = durable.upgrade().and_then(|d| d.metrics.clone()) {
            let outcome = match &renewed {
                Ok(true) => "renewed",
                Ok(false) => "lost",
                Err(_) => "error",
            };
            metrics
                .core
                .renewals
                .get_or_create(&crate::metrics::Outcome { outcome })
                .inc();
        }
        match renewed {
            Ok(true) => {}
            Ok(false) => {
                let error = StoreError::new(
                    StoreErrorKind::Fenced,
                    "this host lost its lease (it could not renew it in time: paused, cut off \
                     from the database, or overloaded), and another host may have taken its \
                     workflows over",
                );
                tracing::error!("{error}; this host's durable workflows stop");
                if let Some(durable) = durable.upgrade() {
                    durable.lease_lost(&error);
                }
                return;
            }
            // Tried again at the next renewal; the lease is lost only if it ran out meanwhile.
            Err(error) => tracing::warn!("the lease could not be renewed: {error}"),
        }
    }
}

impl Durable {
    /// The lease is gone: the store takes nothing more from this host, and its workflows stop
    /// where their journals end.
    pub(crate) fn lease_lost(&self, error: &StoreError) {
        self.writer.fail(error);
        self.store_failed(error, &[]);
    }
}
