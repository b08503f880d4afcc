//! How many processes a host can hold at once, worked out at start-up.
//!
//! Live wasm instances are bounded by the configured process limit, the pooling allocator's
//! slots, the address space, and the operating system's cap on memory mappings
//! (`vm.max_map_count` on Linux, 65,530 by default). Processes are bounded by the same, unless
//! they hibernate ([`Hibernation`]): then only the configured process limit bounds them, and the
//! instances are shared by the processes that are running.
//! Each live instance costs mappings: about 2 (its linear memory's accessible part and the rest
//! of its reservation), plus 2 more when its initial memory is a copy-on-write image. The host
//! picks the image strategy that fits (copy-on-write when the mapping limit allows every process
//! one, plain copies otherwise), sets its process limit to what fits, logs it, and refuses a spawn
//! past it with a message that says which bound was hit and how to raise it.

use std::fmt;

use crate::wasm::Hibernation;

/// Mappings a live instance costs when its memory is copied in.
const MAPS_PER_PROCESS_COPY: usize = 2;
/// Mappings a live instance costs with a copy-on-write memory image.
const MAPS_PER_PROCESS_COW: usize = 4;
/// Mappings kept back for the host itself: thread stacks, compiled modules, the allocator.
const MAPS_RESERVED: usize = 4_096;
/// Mappings the pooling allocator takes whatever its slots: its pool of 1,000 execution stacks
/// (for async calls, which the host makes none of), each with a guard page.
const MAPS_POOL: usize = 2_048;

/// How instances get their memory, as the builder was told.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slots {
    /// Pooled slots, one per live instance, when memories are compact; on demand otherwise.
    Auto,
    /// Mapped per instance (`HostBuilder::on_demand`).
    OnDemand,
    /// This many pooled slots (`HostBuilder::pooling`).
    Pooled(u32),
}

/// Address space wasmtime reserves per memory by default (4 GiB, with a 32 MiB guard before and
/// after), which lets it leave out bounds checks.
const FULL_RESERVATION: u64 = (4 << 30) + (64 << 20);
/// The guards around a compact memory (32 MiB before and after).
const COMPACT_GUARDS: u64 = 64 << 20;
/// Address space the host lets full reservations take: half of the 128 TiB a Linux process has.
const ADDRESS_SPACE_FOR_FULL: u64 = 64 << 40;
/// Address space the host lets memories take at all: three quarters of it.
const ADDRESS_SPACE_FOR_MEMORIES: u64 = 96 << 40;

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
#[non_exhaustive]
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
    /// The address space the processes' memories reserve (each its memory limit and guards).
    AddressSpace {
        /// Bytes of address space each process reserves.
        per_process: u64,
    },
}

/// How many processes the host can hold at once, and why that many. An estimate, worked out at
/// start-up: see the module's constants for what it assumes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capacity {
    /// The most live processes.
    pub processes: usize,
    /// What sets that number.
    pub limited_by: CapacityLimit,
    /// The most live wasm instances. Without hibernation, the same as `processes`.
    pub instances: usize,
    /// What sets that number.
    pub instances_limited_by: CapacityLimit,
    /// When waiting processes give their instances back.
    pub hibernation: Hibernation,
    /// Whether instances map their initial memory copy-on-write.
    pub copy_on_write: bool,
    /// Whether memories reserve only their limit of address space (64 MiB by default) instead of
    /// wasmtime's 4 GiB: needed when more than about 16,000 processes may be live at once, and
    /// paid for with a bounds check on each memory access (a step of a small guest takes about a
    /// quarter longer).
    pub compact_memories: bool,
    /// Whether instances take pooled slots (wasmtime's pooling allocator, one slot per live
    /// instance, reused with its pages resident) rather than memory mapped on demand: the default
    /// with compact memories.
    pub pooled: bool,
}

impl Capacity {
    /// Works the capacity out. `memories` is how many linear memories a process may have and
    /// `memory_bytes` how large each may grow; `os` is the OS mapping limit and the mappings the
    /// process already has, when there is such a limit (Linux).
    pub(crate) fn plan(
        max_processes: Option<usize>,
        slots: Slots,
        images: MemoryImages,
        hibernation: Hibernation,
        memories: usize,
        memory_bytes: usize,
        os: Option<(usize, usize)>,
    ) -> Capacity {
        let memories = memories.max(1);
        let pooling = match slots {
            Slots::Pooled(slots) => Some(slots),
            _ => None,
        };
        let mut bound = match (max_processes, pooling) {
            (Some(max), Some(slots)) if (slots as usize) < max => {
                (slots as usize, CapacityLimit::Pooling)
            }
            (None, Some(slots)) => (slots as usize, CapacityLimit::Pooling),
            (Some(max), _) => (max, CapacityLimit::MaxProcesses),
            (None, None) => (usize::MAX, CapacityLimit::MaxProcesses),
        };
        fn tighten(bound: &mut (usize, CapacityLimit), processes: usize, limit: CapacityLimit) {
            if processes < bound.0 {
                *bound = (processes, limit);
            }
        }
        // Address space: compact reservations hold more processes than full ones.
        let compact_per_process = (memory_bytes as u64)
            .saturating_add(COMPACT_GUARDS)
            .saturating_mul(memories as u64);
        let by_address = ADDRESS_SPACE_FOR_MEMORIES / compact_per_process.max(1);
        tighten(
            &mut bound,
            usize::try_from(by_address).unwrap_or(usize::MAX),
            CapacityLimit::AddressSpace {
                per_process: compact_per_process,
            },
        );
        let mut copy_on_write = images != MemoryImages::Copy;
        let mut by_maps = None;
        if let Some((max_map_count, mapped)) = os {
            let room = max_map_count.saturating_sub(mapped + MAPS_RESERVED);
            copy_on_write = match images {
                MemoryImages::CopyOnWrite => true,
                MemoryImages::Copy => false,
                MemoryImages::Auto => room / (MAPS_PER_PROCESS_COW * memories) >= bound.0,
            };
            let per_process = memories
                * if copy_on_write {
                    MAPS_PER_PROCESS_COW
                } else {
                    MAPS_PER_PROCESS_COPY
                };
            let limit = CapacityLimit::MapCount {
                max_map_count,
                per_process,
            };
            tighten(&mut bound, room / per_process, limit);
            by_maps = Some((room, per_process, limit));
        }
        let full = FULL_RESERVATION.saturating_mul(memories as u64);
        // Pooling reserves every slot up front, whether or not the slots are ever used.
        let reserved = pooling.map_or(bound.0, |slots| slots as usize);
        let compact_memories = (reserved as u64).saturating_mul(full) > ADDRESS_SPACE_FOR_FULL;
        let pooled = match slots {
            Slots::Auto => compact_memories,
            Slots::OnDemand => false,
            Slots::Pooled(_) => true,
        };
        if let (true, Some((room, per_process, limit))) = (pooled, by_maps) {
            tighten(
                &mut bound,
                room.saturating_sub(MAPS_POOL) / per_process,
                limit,
            );
        }
        let instances = bound.0;
        let (processes, limited_by) = match hibernation {
            Hibernation::Off => bound,
            _ => (
                max_processes.unwrap_or(usize::MAX),
                CapacityLimit::MaxProcesses,
            ),
        };
        Capacity {
            processes,
            limited_by,
            instances,
            instances_limited_by: bound.1,
            hibernation,
            copy_on_write,
            compact_memories,
            pooled,
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
        refusal(self.processes, self.limited_by, "processes")
    }

    /// Why an instance past the capacity is refused (a process that cannot hibernate, or one
    /// waking while every instance is taken), and what to do about it.
    pub fn instance_refusal(&self) -> String {
        let why = refusal(self.instances, self.instances_limited_by, "live instances");
        match self.hibernation {
            Hibernation::Off => why,
            _ => format!("{why} (each process that runs, or cannot hibernate, needs one)"),
        }
    }

    /// What a guest whose spawn was refused is told: that the host is full, without the host's
    /// configuration, which is the operator's business.
    pub fn guest_refusal(&self) -> String {
        format!(
            "the host is at its capacity of {} live processes; try again when some have finished",
            self.processes
        )
    }
}

/// "the host already runs `n` processes, ...": why one more is refused, when `limit` bounds them.
fn refusal(n: usize, limit: CapacityLimit, what: &str) -> String {
    match limit {
        CapacityLimit::MaxProcesses => format!(
            "the host already runs its limit of {n} processes (HostBuilder::max_processes, \
                 --max-processes); try again when some have finished"
        ),
        CapacityLimit::Pooling => format!(
            "the host already runs {n} {what}, one in each of its pooled instance slots \
                 (HostBuilder::pooling, --pooling); try again when some have finished"
        ),
        CapacityLimit::MapCount {
            max_map_count,
            per_process,
        } => format!(
            "the host already runs {n} {what}, as many as the operating system's \
                 memory-mapping limit allows (vm.max_map_count = {max_map_count}, about \
                 {per_process} mappings per process); raise it (e.g. `sysctl -w \
                 vm.max_map_count={}`) or try again when some have finished",
            suggested_map_count(max_map_count)
        ),
        CapacityLimit::AddressSpace { per_process } => format!(
            "the host already runs {n} {what}, as many as fit in its address space at \
                 {} MiB reserved per process (the memory limit and its guards); lower the memory \
                 limit (Limits::max_memory_bytes, --max-memory) for more, or try again when some \
                 have finished",
            per_process >> 20
        ),
    }
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
        let images = if self.pooled {
            format!("{images}, pooled instance slots")
        } else {
            images.to_string()
        };
        if self.hibernation != Hibernation::Off {
            let policy = match self.hibernation {
                Hibernation::Always => "after every step",
                _ => "when 7/8 of the instances are live",
            };
            write!(
                f,
                "{} live processes (the configured limit), waiting ones hibernating {policy}; \
                 ",
                self.processes
            )?;
        }
        match self.instances_limited_by {
            CapacityLimit::MaxProcesses => write!(
                f,
                "{} live instances (the configured limit), {images}",
                self.instances
            ),
            CapacityLimit::Pooling => write!(
                f,
                "{} live instances (the pooled instance slots), {images}",
                self.instances
            ),
            CapacityLimit::MapCount {
                max_map_count,
                per_process,
            } => write!(
                f,
                "{} live instances (vm.max_map_count = {max_map_count} at about {per_process} \
                 mappings each), {images}",
                self.instances
            ),
            CapacityLimit::AddressSpace { per_process } => write!(
                f,
                "{} live instances (the address space, at {} MiB each), {images}",
                self.instances,
                per_process >> 20
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT_OS: Option<(usize, usize)> = Some((65_530, 100));
    const MIB_64: usize = 64 << 20;

    fn plan(
        max: Option<usize>,
        pooling: Option<u32>,
        images: MemoryImages,
        os: Option<(usize, usize)>,
    ) -> Capacity {
        let slots = pooling.map_or(Slots::OnDemand, Slots::Pooled);
        Capacity::plan(max, slots, images, Hibernation::Off, 1, MIB_64, os)
    }

    #[test]
    fn at_the_default_map_count_copies_fit_twice_as_many_processes() {
        let auto = plan(Some(1_000_000), None, MemoryImages::Auto, DEFAULT_OS);
        assert!(!auto.copy_on_write);
        assert!(auto.compact_memories);
        assert_eq!(auto.processes, (65_530 - 100 - 4_096) / 2);
        assert_eq!(
            auto.limited_by,
            CapacityLimit::MapCount {
                max_map_count: 65_530,
                per_process: 2
            }
        );
        let cow = plan(Some(1_000_000), None, MemoryImages::CopyOnWrite, DEFAULT_OS);
        assert_eq!(cow.processes, (65_530 - 100 - 4_096) / 4);
        assert!(auto
            .refusal()
            .contains("sysctl -w vm.max_map_count=2000000"));
        assert!(!auto.guest_refusal().contains("sysctl"));
        // Two memories per process cost twice the mappings.
        let two = Capacity::plan(
            Some(1_000_000),
            Slots::OnDemand,
            MemoryImages::Auto,
            Hibernation::Off,
            2,
            MIB_64,
            DEFAULT_OS,
        );
        assert_eq!(two.processes, (65_530 - 100 - 4_096) / 4);
    }

    #[test]
    fn a_raised_map_count_or_a_small_limit_allows_copy_on_write_and_full_reservations() {
        let raised = plan(
            Some(100_000),
            None,
            MemoryImages::Auto,
            Some((2_000_000, 100)),
        );
        assert!(raised.copy_on_write);
        assert_eq!(raised.processes, 100_000);
        assert_eq!(raised.limited_by, CapacityLimit::MaxProcesses);
        let small = plan(Some(1_000), None, MemoryImages::Auto, DEFAULT_OS);
        assert!(small.copy_on_write);
        assert!(!small.compact_memories);
        let elsewhere = plan(Some(7), None, MemoryImages::Auto, None);
        assert_eq!(elsewhere.processes, 7);
    }

    #[test]
    fn pooling_slots_bound_processes_and_decide_the_reservation() {
        let pooled = plan(Some(1_000_000), Some(500), MemoryImages::Auto, DEFAULT_OS);
        assert_eq!(
            (pooled.processes, pooled.limited_by),
            (500, CapacityLimit::Pooling)
        );
        assert!(!pooled.compact_memories);
        // Every slot is reserved up front, used or not.
        let many_slots = plan(Some(10_000), Some(25_000), MemoryImages::Auto, None);
        assert_eq!(many_slots.processes, 10_000);
        assert!(many_slots.compact_memories);
    }

    #[test]
    fn the_address_space_bounds_processes_with_large_memories() {
        let big = Capacity::plan(
            None,
            Slots::OnDemand,
            MemoryImages::Auto,
            Hibernation::Off,
            1,
            4 << 30,
            None,
        );
        let per_process = (4u64 << 30) + COMPACT_GUARDS;
        assert_eq!(
            (big.processes as u64, big.limited_by),
            (
                ADDRESS_SPACE_FOR_MEMORIES / per_process,
                CapacityLimit::AddressSpace { per_process }
            )
        );
        assert!(big.refusal().contains("lower the memory limit"));
    }

    #[test]
    fn with_hibernation_the_process_limit_bounds_processes_and_the_os_bounds_instances() {
        let capacity = Capacity::plan(
            Some(1_000_000),
            Slots::OnDemand,
            MemoryImages::Auto,
            Hibernation::WhenFull,
            1,
            MIB_64,
            DEFAULT_OS,
        );
        assert_eq!(
            (capacity.processes, capacity.limited_by),
            (1_000_000, CapacityLimit::MaxProcesses)
        );
        assert_eq!(capacity.instances, (65_530 - 100 - 4_096) / 2);
        assert!(capacity
            .instance_refusal()
            .contains("sysctl -w vm.max_map_count=2000000"));
        assert!(capacity.to_string().contains("hibernating"));
        let off = plan(Some(1_000_000), None, MemoryImages::Auto, DEFAULT_OS);
        assert_eq!(off.processes, off.instances);
    }

    #[test]
    fn compact_memories_are_pooled_unless_on_demand_is_asked_for() {
        let auto = |max, os| {
            Capacity::plan(
                Some(max),
                Slots::Auto,
                MemoryImages::Auto,
                Hibernation::Off,
                1,
                MIB_64,
                os,
            )
        };
        let pooled = auto(1_000_000, DEFAULT_OS);
        assert!(pooled.pooled && pooled.compact_memories);
        // The pool's stacks take their mappings from the room the processes have.
        assert_eq!(pooled.instances, (65_530 - 100 - 4_096 - MAPS_POOL) / 2);
        assert!(pooled.to_string().contains("pooled instance slots"));
        let elsewhere = auto(1_000_000, None);
        assert!(elsewhere.pooled);
        // Full reservations would not fit in the address space as slots: on demand.
        let small = auto(1_000, DEFAULT_OS);
        assert!(!small.pooled && !small.compact_memories);
        assert!(!plan(Some(1_000_000), None, MemoryImages::Auto, DEFAULT_OS).pooled);
    }
}
