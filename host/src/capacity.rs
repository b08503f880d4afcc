//! How many processes a host can hold at once, worked out at start-up.
//!
//! Three things bound it: the configured process limit, the pooling allocator's slots, and the
//! operating system's cap on memory mappings (`vm.max_map_count` on Linux, 65,530 by default).
//! Each live instance costs mappings: about 2 (its linear memory's accessible part and the rest
//! of its reservation), plus 2 more when its initial memory is a copy-on-write image. The host
//! picks the image strategy that fits (copy-on-write when the mapping limit allows every process
//! one, plain copies otherwise), sets its process limit to what fits, logs it, and refuses a spawn
//! past it with a message that says which bound was hit and how to raise it.

use std::fmt;

/// Mappings a live instance costs when its memory is copied in.
const MAPS_PER_PROCESS_COPY: usize = 2;
/// Mappings a live instance costs with a copy-on-write memory image.
const MAPS_PER_PROCESS_COW: usize = 4;
/// Mappings kept back for the host itself: thread stacks, compiled modules, the allocator.
const MAPS_RESERVED: usize = 4_096;

/// Address space wasmtime reserves per memory by default (4 GiB and a 32 MiB guard), which lets it
/// leave out bounds checks.
const FULL_RESERVATION: u64 = (4 << 30) + (32 << 20);
/// Address space the host lets full reservations take: half of the 128 TiB a Linux process has.
const ADDRESS_SPACE_FOR_MEMORIES: u64 = 64 << 40;

/// How a new instance's linear memory gets the module's initial data.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum MemoryImages {
    /// Copy-on-write when the OS mapping limit leaves room for it at the process limit, copies
    /// otherwise. The default.
    #[default]
    Auto,
    /// Map the module's initial memory copy-on-write: pages the guest only reads are shared among
    /// its instances (less resident memory), at two more memory mappings per process.
    CopyOnWrite,
    /// Copy the initial data into each instance: fewer mappings, so more live processes at the
    /// default `vm.max_map_count`, at the cost of each instance owning its data pages.
    Copy,
}

/// What bounds a host's live processes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CapacityLimit {
    /// The configured process limit (`HostBuilder::max_processes`).
    MaxProcesses,
    /// The pooling allocator's slots (`HostBuilder::pooling`).
    Pooling,
    /// The operating system's memory-mapping limit.
    MapCount {
        /// `vm.max_map_count`.
        max_map_count: usize,
        /// Mappings each live process costs.
        per_process: usize,
    },
}

/// How many processes the host can hold at once, and why that many.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// The most live processes.
    pub processes: usize,
    /// What sets that number.
    pub limited_by: CapacityLimit,
    /// Whether instances map their initial memory copy-on-write.
    pub copy_on_write: bool,
    /// Whether memories reserve only their limit of address space (64 MiB by default) instead of
    /// wasmtime's 4 GiB: needed when more than about 16,000 processes may be live at once, and
    /// paid for with a bounds check on each memory access (a step of a small guest takes about a
    /// quarter longer).
    pub compact_memories: bool,
}

impl Capacity {
    /// Works the capacity out. `max_map_count` is the OS limit, when there is one (Linux);
    /// `mapped` is how many mappings the process already has.
    pub(crate) fn plan(
        max_processes: Option<usize>,
        pooling: Option<u32>,
        images: MemoryImages,
        os: Option<(usize, usize)>,
    ) -> Capacity {
        let configured = match (max_processes, pooling) {
            (Some(max), Some(slots)) if (slots as usize) < max => {
                (slots as usize, CapacityLimit::Pooling)
            }
            (None, Some(slots)) => (slots as usize, CapacityLimit::Pooling),
            (Some(max), _) => (max, CapacityLimit::MaxProcesses),
            (None, None) => (usize::MAX, CapacityLimit::MaxProcesses),
        };
        let Some((max_map_count, mapped)) = os else {
            return Capacity {
                processes: configured.0,
                limited_by: configured.1,
                copy_on_write: images != MemoryImages::Copy,
                compact_memories: needs_compact(configured.0),
            };
        };
        let room = max_map_count.saturating_sub(mapped + MAPS_RESERVED);
        let copy_on_write = match images {
            MemoryImages::CopyOnWrite => true,
            MemoryImages::Copy => false,
            MemoryImages::Auto => room / MAPS_PER_PROCESS_COW >= configured.0,
        };
        let per_process = if copy_on_write {
            MAPS_PER_PROCESS_COW
        } else {
            MAPS_PER_PROCESS_COPY
        };
        let by_os = (room / per_process).max(1);
        let (processes, limited_by) = if by_os < configured.0 {
            (
                by_os,
                CapacityLimit::MapCount {
                    max_map_count,
                    per_process,
                },
            )
        } else {
            configured
        };
        Capacity {
            processes,
            limited_by,
            copy_on_write,
            compact_memories: needs_compact(processes),
        }
    }

    /// Reads the OS limit and this process's mappings (Linux); `None` elsewhere.
    pub(crate) fn os_mappings() -> Option<(usize, usize)> {
        let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count").ok()?;
        let limit = limit.trim().parse().ok()?;
        let mapped = std::fs::read_to_string("/proc/self/maps")
            .map(|maps| maps.lines().count())
            .unwrap_or(0);
        Some((limit, mapped))
    }

    /// Why a spawn past the capacity is refused, and what to do about it.
    pub fn refusal(&self) -> String {
        let n = self.processes;
        match self.limited_by {
            CapacityLimit::MaxProcesses => format!(
                "the host already runs its limit of {n} processes (HostBuilder::max_processes, \
                 --max-processes); try again when some have finished"
            ),
            CapacityLimit::Pooling => format!(
                "the host already runs {n} processes, one in each of its pooled instance slots \
                 (HostBuilder::pooling, --pooling); try again when some have finished"
            ),
            CapacityLimit::MapCount {
                max_map_count,
                per_process,
            } => format!(
                "the host already runs {n} processes, as many as the operating system's \
                 memory-mapping limit allows (vm.max_map_count = {max_map_count}, about \
                 {per_process} mappings per process); raise it (e.g. `sysctl -w \
                 vm.max_map_count={}`) or try again when some have finished",
                suggested_map_count(max_map_count)
            ),
        }
    }
}

/// Whether `processes` full reservations would take more address space than they may.
fn needs_compact(processes: usize) -> bool {
    (processes as u64).saturating_mul(FULL_RESERVATION) > ADDRESS_SPACE_FOR_MEMORIES
}

/// A `vm.max_map_count` worth suggesting: 2,000,000 (room for about a million processes), or
/// double the current one if that is already more.
fn suggested_map_count(current: usize) -> usize {
    if current < 2_000_000 {
        2_000_000
    } else {
        current.saturating_mul(2)
    }
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let images = match (self.copy_on_write, self.compact_memories) {
            (true, false) => "copy-on-write memory images",
            (false, false) => "copied memory images",
            (true, true) => "copy-on-write memory images, compact memory reservations",
            (false, true) => "copied memory images, compact memory reservations",
        };
        match self.limited_by {
            CapacityLimit::MaxProcesses => write!(
                f,
                "{} live processes (the configured limit), {images}",
                self.processes
            ),
            CapacityLimit::Pooling => write!(
                f,
                "{} live processes (the pooled instance slots), {images}",
                self.processes
            ),
            CapacityLimit::MapCount {
                max_map_count,
                per_process,
            } => write!(
                f,
                "{} live processes (vm.max_map_count = {max_map_count} at about {per_process} \
                 mappings each), {images}",
                self.processes
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT_OS: Option<(usize, usize)> = Some((65_530, 100));

    #[test]
    fn at_the_default_map_count_copies_fit_twice_as_many_processes() {
        let auto = Capacity::plan(Some(1_000_000), None, MemoryImages::Auto, DEFAULT_OS);
        assert!(!auto.copy_on_write);
        assert_eq!(auto.processes, (65_530 - 100 - 4_096) / 2);
        assert_eq!(
            auto.limited_by,
            CapacityLimit::MapCount {
                max_map_count: 65_530,
                per_process: 2
            }
        );
        let cow = Capacity::plan(Some(1_000_000), None, MemoryImages::CopyOnWrite, DEFAULT_OS);
        assert_eq!(cow.processes, (65_530 - 100 - 4_096) / 4);
        assert!(auto.refusal().contains("sysctl -w vm.max_map_count="));
    }

    #[test]
    fn a_raised_map_count_or_a_small_limit_allows_copy_on_write() {
        let raised = Capacity::plan(
            Some(100_000),
            None,
            MemoryImages::Auto,
            Some((2_000_000, 100)),
        );
        assert!(raised.copy_on_write);
        assert_eq!(raised.processes, 100_000);
        assert_eq!(raised.limited_by, CapacityLimit::MaxProcesses);
        let small = Capacity::plan(Some(1_000), None, MemoryImages::Auto, DEFAULT_OS);
        assert!(small.copy_on_write);
        let pooled = Capacity::plan(Some(1_000_000), Some(500), MemoryImages::Auto, DEFAULT_OS);
        assert_eq!(
            (pooled.processes, pooled.limited_by),
            (500, CapacityLimit::Pooling)
        );
        let elsewhere = Capacity::plan(Some(7), None, MemoryImages::Auto, None);
        assert_eq!(elsewhere.processes, 7);
        // A thousand processes can have wasmtime's full reservations; thirty thousand cannot.
        assert!(!small.compact_memories);
        assert!(
            Capacity::plan(Some(1_000_000), None, MemoryImages::Auto, DEFAULT_OS).compact_memories
        );
    }
}
