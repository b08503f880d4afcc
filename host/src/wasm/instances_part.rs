/// How many processes hold an instance, how many are hibernated, and what the hibernated ones
/// hold: [`Host::residency`](crate::Host::residency).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Residency {
    /// Processes holding a live wasm instance.
    pub live_instances: usize,
    /// Instances kept for reuse: given up by hibernating or finished processes, taken by the next
    /// restore of the same module instead of a new instantiation. At most 16 per module, and only
    /// while the instance capacity has room for them.
    pub warm_instances: usize,
    /// Processes hibernated: waiting, with no instance.
    pub hibernated: usize,
    /// Bytes the hibernated processes' saved state takes on the host's heap.
    pub hibernated_bytes: usize,
    /// Hibernations since the host started.
    pub hibernations: u64,
    /// Restores from hibernation since the host started.
    pub restores: u64,
}

/// The host's instances: how many may be live, when a waiting process hibernates, and the
/// counts behind [`Residency`].
#[derive(Debug)]
pub(crate) struct Instances {
    /// The most live instances (the capacity); one more is refused.
    max: usize,
    /// The policy.
    policy: Hibernation,
    /// Under [`Hibernation::WhenFull`], hibernate when more than this many are live: the capacity
    /// less an eighth of it, and less at least one per worker, so that the processes running at
    /// once always find an instance.
    above: usize,
    /// Why an instance past `max` is refused.
    refusal: String,
    /// Worker threads: processes that may be running, each with an instance, at once.
    workers: usize,
    live: AtomicUsize,
    /// Of `live`, the instances kept warm for reuse.
    warm: AtomicUsize,
    hibernated: AtomicUsize,
    hibernated_bytes: AtomicUsize,
    hibernations: AtomicU64,
    restores: AtomicU64,
}

/// A live instance, counted until dropped.
#[derive(Debug)]
pub(crate) struct InstanceSlot(Arc<Instances>);

impl Drop for InstanceSlot {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Instances {
    /// At most `max` live instances, used by `workers` worker threads; `refusal` says why one
    /// more is refused.
    pub(crate) fn new(
        max: usize,
        workers: usize,
        policy: Hibernation,
        refusal: String,
    ) -> Instances {
        Instances {
            max,
            policy,
            above: max.saturating_sub((max / 8).max(workers)),
            refusal,
            workers,
            live: AtomicUsize::new(0),
            warm: AtomicUsize::new(0),
            hibernated: AtomicUsize::new(0),
            hibernated_bytes: AtomicUsize::new(0),
            hibernations: AtomicU64::new(0),
            restores: AtomicU64::new(0),
        }
    }

    /// Counts one more live instance, or says why there cannot be one.
    pub(crate) fn take(self: &Arc<Self>) -> Result<InstanceSlot, &str> {
        self.live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                (live < self.max).then_some(live + 1)
            })
            .map_err(|_| self.refusal.as_str())?;
        Ok(InstanceSlot(Arc::clone(self)))
    }

    /// Whether an instance given up by a process may be kept for reuse: only while the processes
    /// that can run at once (one per worker) still find instances.
    pub(crate) fn may_keep_warm(&self) -> bool {
        self.live.load(Ordering::Relaxed) + self.workers <= self.max
    }

    /// Whether a process that has just stepped and waits should hibernate now.
    pub(crate) fn should_hibernate(&self) -> bool {
        match self.policy {
            Hibernation::Off => false,
            Hibernation::Always => true,
            Hibernation::WhenFull => self.live.load(Ordering::Relaxed) > self.above,
        }
    }

    pub(crate) fn hibernated(&self, bytes: usize) {
        self.hibernated.fetch_add(1, Ordering::Relaxed);
        self.hibernated_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.hibernations.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of `bytes` is gone: restored (`restored`) or dropped with its process.
    pub(crate) fn woken(&self, bytes: usize, restored: bool) {
        self.hibernated.fetch_sub(1, Ordering::Relaxed);
        self.hibernated_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if restored {
            self.restores.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One more instance kept warm (`true`) or one taken back (`false`).
    pub(crate) fn warm(&self, kept: bool) {
        if kept {
            self.warm.fetch_add(1, Ordering::Relaxed);
        } else {
            self.warm.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn residency(&self) -> Residency {
        let warm = self.warm.load(Ordering::Relaxed);
        Residency {
            live_instances: self.live.load(Ordering::Relaxed).saturating_sub(warm),
            warm_instances: warm,
            hibernated: self.hibernated.load(Ordering::Relaxed),
            hibernated_bytes: self.hibernated_bytes.load(Ordering::Relaxed),
            hibernations: self.hibernations.load(Ordering::Relaxed),
            restores: self.restores.load(Ordering::Relaxed),
        }
    }
}

