//! A worker's cache of the processes its processes send to: a send from a step looks its
//! receiver up here first, and only on a miss in the pid table.
//!
//! A hit costs a load and a comparison, where the table costs a hash, a shard lock taken and given
//! back (two atomic read-modify-writes, on a line every worker writes) and a probe. A process that
//! talks to the same few others (a ring, a request and its reply, a parent and its children)
//! hits nearly always.
//!
//! Why a cached slot is never wrong: a slot is one process, for ever. While that process lives
//! it is the pid's only slot in the table, so a message delivered to it is delivered to the pid.
//! Once it has ended its inbox is closed: a delivery to it gives the message back
//! (`Shared::deliver_or_return`), the entry is dropped, and the send looks the pid up in the
//! table as if it had missed (a durable host may have started the pid again since). The cache
//! holds a strong reference to each slot it keeps, so a slot stays in memory while cached, at
//! most one per entry, closed ones included (a closed slot holds no events and no process).

use std::sync::Arc;

use wfcontract::Pid;

use crate::slot::Slot;

/// Entries per worker: a direct-mapped table, one slot per entry.
const ENTRIES: usize = 1024;

pub(crate) struct Targets {
    entries: Box<[Option<Arc<Slot>>]>,
}

impl std::fmt::Debug for Targets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.entries.iter().filter(|e| e.is_some()).count();
        f.debug_struct("Targets").field("cached", &cached).finish()
    }
}

impl Default for Targets {
    fn default() -> Targets {
        Targets {
            entries: (0..ENTRIES).map(|_| None).collect(),
        }
    }
}

impl Targets {
    /// The entry `pid` maps to: Fibonacci hashing, whose high bits differ for neighbouring pids.
    fn index(pid: Pid) -> usize {
        (pid.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - ENTRIES.trailing_zeros())) as usize
    }

    /// The cached slot of `pid`, if any (possibly of a process that has ended).
    pub(crate) fn get(&self, pid: Pid) -> Option<&Arc<Slot>> {
        self.entries[Self::index(pid)]
            .as_ref()
            .filter(|slot| slot.pid == pid)
    }

    /// Caches `slot`, in place of whatever its entry held.
    pub(crate) fn insert(&mut self, slot: Arc<Slot>) {
        let index = Self::index(slot.pid);
        self.entries[index] = Some(slot);
    }

    /// Drops the cached slot of `pid`, if any.
    pub(crate) fn forget(&mut self, pid: Pid) {
        let entry = &mut self.entries[Self::index(pid)];
        if entry.as_ref().is_some_and(|slot| slot.pid == pid) {
            *entry = None;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn neighbouring_pids_take_different_entries() {
        let taken: std::collections::HashSet<usize> = (1..=ENTRIES as u64)
            .map(|n| Targets::index(Pid(n)))
            .collect();
        assert!(taken.len() > ENTRIES * 6 / 10, "{}", taken.len());
        assert!((0..1000).all(|n| Targets::index(Pid(n)) < ENTRIES));
    }
}
