//! Warm instances: instances given up by hibernating or finished processes, kept so that the next
//! restore of the same module rewrites a few pages of one instead of instantiating (and later
//! unmapping) another.
//!
//! They count against the instance capacity, so they are kept only while there is room, given up
//! first when a process needs an instance and none is free, and dropped with their module when
//! nothing runs it any more.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::wasm::instances::Instances;
use crate::wasm::process::Live;

/// Warm instances kept per module at most.
const WARM_PER_MODULE: usize = 16;

/// A warm instance's memory may be at most this large, or as large as a fresh instance's (a
/// module whose initialized heap is larger, such as a language runtime's): a process that grew
/// its memory does not leave it resident for others.
const WARM_MAX_MEMORY: usize = 4 << 20;

/// The host's warm instances, by module.
#[derive(Default)]
pub(crate) struct WarmPool {
    by_module: Mutex<HashMap<u64, Vec<Live>>>,
}

impl WarmPool {
    /// Keeps `live`, an instance of module `module` whose fresh instances have `fresh` bytes of
    /// memory, if there is room here and in the host's instance capacity; otherwise it is
    /// dropped (and its instance given back).
    pub(crate) fn offer(&self, module: u64, fresh: usize, live: Live, instances: &Instances) {
        if !instances.may_keep_warm() || live.memory_size() > WARM_MAX_MEMORY.max(fresh) {
            return;
        }
        let refused = {
            let mut pool = self.by_module.lock();
            let kept = pool.entry(module).or_default();
            if kept.len() < WARM_PER_MODULE {
                kept.push(live);
                instances.warm(true);
                None
            } else {
                Some(live)
            }
        };
        // Dropped outside the lock: giving an instance back may hand it to a waiter.
        drop(refused);
    }

    /// A warm instance of module `module` whose memory has `bytes` bytes (what a restore over
    /// it needs), if one is kept.
    pub(crate) fn take(&self, module: u64, bytes: usize, instances: &Instances) -> Option<Live> {
        let live = {
            let mut pool = self.by_module.lock();
            let kept = pool.get_mut(&module)?;
            let at = kept.iter().rposition(|live| live.memory_size() == bytes)?;
            kept.swap_remove(at)
        };
        instances.warm(false);
        Some(live)
    }

    /// Gives up one warm instance, of the module that has most, so that a process that needs an
    /// instance gets it. False when there is none.
    pub(crate) fn evict_one(&self, instances: &Instances) -> bool {
        let evicted = {
            let mut pool = self.by_module.lock();
            let fullest = pool
                .iter_mut()
                .max_by_key(|(_, kept)| kept.len())
                .and_then(|(_, kept)| kept.pop());
            pool.retain(|_, kept| !kept.is_empty());
            fullest
        };
        let Some(live) = evicted else {
            return false;
        };
        instances.warm(false);
        drop(live);
        true
    }

    /// Drops module `module`'s warm instances: nothing runs it any more.
    pub(crate) fn drop_module(&self, module: u64, instances: &Instances) {
        let dropped = self.by_module.lock().remove(&module).unwrap_or_default();
        for _ in &dropped {
            instances.warm(false);
        }
        drop(dropped);
    }

    /// Drops them all (at shutdown).
    pub(crate) fn clear(&self, instances: &Arc<Instances>) {
        let dropped: Vec<Live> = self
            .by_module
            .lock()
            .drain()
            .flat_map(|(_, kept)| kept)
            .collect();
        for _ in &dropped {
            instances.warm(false);
        }
        drop(dropped);
    }
}
