//! What a guest reads from WASI that differs from run to run: the clocks and `random_get`.
//!
//! Rust's std reads them without asking (a `HashMap` seeds itself from `random_get`, an
//! `Instant` reads the monotonic clock), so a durable process must journal every value it was
//! given during a step and be given the same values when the step is replayed. The two calls are
//! served here instead of by wasmtime-wasi: live (as before), live and recorded, or replayed from
//! a journal; a replay asked for something the journal does not hold has diverged, and the call
//! traps.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use wasmtime::{Caller, Linker};

use wfcontract::abi;

use crate::wasm::GuestState;
use wfcontract::abi::WASI_MODULE;

/// One value a guest read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Read {
    /// `clock_time_get` of clock `id` (0 realtime, 1 monotonic, 2 and 3 CPU time) answered this.
    Clock {
        /// The WASI clock id.
        id: u32,
        /// Nanoseconds.
        nanos: u64,
    },
    /// `random_get` filled its buffer with these bytes.
    Random(Vec<u8>),
    /// `wfhost::patched` was asked about this patch in a live step, and said it applies. A
    /// replay answers the same where it finds one, and "does not apply" where it finds none (the
    /// step ran before the code had the patch).
    Patched(String),
}

impl std::fmt::Display for Read {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Read::Clock { id, nanos } => write!(f, "clock {id} = {nanos} ns"),
            Read::Random(bytes) => write!(f, "{} random bytes", bytes.len()),
            Read::Patched(name) => write!(f, "patch '{name}'"),
        }
    }
}

/// How a process's WASI reads are served.
#[derive(Debug, Default)]
pub(crate) enum Reads {
    /// Live values, not kept: a process that is not durable.
    #[default]
    Live,
    /// Live values, kept for the journal.
    Record(Vec<Read>),
    /// Values from the journal, in order.
    Replay {
        reads: VecDeque<Read>,
        /// Set when the guest asked for something the journal does not hold.
        diverged: Option<String>,
    },
}

/// A clock a test moves (`wfhost::testing`): nanoseconds since the Unix epoch, and the reading
/// its monotonic clock counts from.
#[derive(Clone, Debug)]
pub(crate) struct VirtualClock {
    pub(crate) now: Arc<AtomicU64>,
    pub(crate) start: u64,
}

/// Where a process's monotonic clock counts from, and how its reads are served.
#[derive(Debug)]
pub(crate) struct ReadState {
    pub(crate) origin: Instant,
    pub(crate) reads: Reads,
    /// What its clocks read instead of the machine's, under a test's virtual clock.
    pub(crate) virtual_clock: Option<VirtualClock>,
}

impl Default for ReadState {
    fn default() -> ReadState {
        ReadState {
            origin: Instant::now(),
            reads: Reads::Live,
            virtual_clock: None,
        }
    }
}

/// WASI's `errno::fault` and `errno::inval`.
const ERRNO_FAULT: i32 = 21;
const ERRNO_INVAL: i32 = 28;

/// A replay that diverged from its journal: the call traps with this.
#[derive(Debug)]
pub(crate) struct Diverged;

impl std::fmt::Display for Diverged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a WASI read differs from the journal")
    }
}

impl std::error::Error for Diverged {}

impl ReadState {
    /// The value for `wanted` (a live read, made by `live`), recorded or replayed.
    fn serve(&mut self, wanted: &str, live: impl FnOnce() -> Read) -> Result<Read, Diverged> {
        match &mut self.reads {
            Reads::Live => Ok(live()),
            Reads::Record(kept) => {
                let read = live();
                kept.push(read.clone());
                Ok(read)
            }
            Reads::Replay { reads, diverged } => {
                // The patches are not in order with the clocks and randomness, and stay for
                // `patched` to find.
                let next = reads
                    .iter()
                    .position(|read| !matches!(read, Read::Patched(_)))
                    .and_then(|at| reads.remove(at));
                let fits = matches!(
                    (&next, wanted),
                    (Some(Read::Clock { .. }), "clock") | (Some(Read::Random(_)), "random")
                );
                match next {
                    Some(read) if fits => Ok(read),
                    other => {
                        *diverged = Some(match other {
                            Some(read) => format!(
                                "it read {wanted} where the journal has {read} (a WASI read)"
                            ),
                            None => format!(
                                "it read {wanted}, and the journal has no more WASI reads for \
                                 this step"
                            ),
                        });
                        Err(Diverged)
                    }
                }
            }
        }
    }

    /// Whether patch `name` applies: yes in a live step (and recorded); in a replay, yes where
    /// the journal recorded it, no where it did not (the step was recorded by code before the
    /// patch). Never a divergence: a patch is how code changes without one.
    fn patched(&mut self, name: &str) -> bool {
        let asked = |read: &Read| matches!(read, Read::Patched(recorded) if recorded == name);
        match &mut self.reads {
            Reads::Live => true,
            Reads::Record(kept) => {
                // Once a step: a loop that asks again does not grow the journal.
                if !kept.iter().any(asked) {
                    kept.push(Read::Patched(name.to_string()));
                }
                true
            }
            // The patches a step asked about are a set: where in the step it asked (before or
            // after a clock read, before or after another patch) does not matter.
            Reads::Replay { reads, .. } => reads.iter().any(asked),
        }
    }
}

/// What is left of a replayed step's reads that counts: the patches a step asked about and
/// this code no longer does are not a difference.
pub(crate) fn unread(reads: &VecDeque<Read>) -> usize {
    reads
        .iter()
        .filter(|read| !matches!(read, Read::Patched(_)))
        .count()
}

fn nanos_since(origin: SystemTime) -> u64 {
    origin
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn write_guest(caller: &mut Caller<'_, GuestState>, ptr: i32, bytes: &[u8]) -> bool {
    let Some(memory) = caller
        .get_export("memory")
        .and_then(wasmtime::Extern::into_memory)
    else {
        return false;
    };
    let Ok(offset) = usize::try_from(ptr as u32) else {
        return false;
    };
    memory.write(caller, offset, bytes).is_ok()
}

/// Replaces wasmtime-wasi's `clock_time_get` and `random_get` in `linker` (which must allow
/// shadowing).
pub(crate) fn shadow(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        WASI_MODULE,
        "clock_time_get",
        |mut caller: Caller<'_, GuestState>,
         id: i32,
         _precision: i64,
         ptr: i32|
         -> wasmtime::Result<i32> {
            let Ok(id) = u32::try_from(id) else {
                return Ok(ERRNO_INVAL);
            };
            if id > 3 {
                return Ok(ERRNO_INVAL);
            }
            let state = &mut caller.data_mut().reads;
            let origin = state.origin;
            let moved = state.virtual_clock.clone();
            let read = state.serve("clock", || Read::Clock {
                id,
                nanos: match (id, moved) {
                    (0, None) => nanos_since(SystemTime::now()),
                    // The CPU clocks are not kept apart: the monotonic one answers for them.
                    (_, None) => u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX),
                    (0, Some(clock)) => clock.now.load(Ordering::Acquire),
                    (_, Some(clock)) => clock
                        .now
                        .load(Ordering::Acquire)
                        .saturating_sub(clock.start),
                },
            })?;
            let Read::Clock { nanos, .. } = read else {
                return Err(Diverged.into());
            };
            Ok(if write_guest(&mut caller, ptr, &nanos.to_le_bytes()) {
                0
            } else {
                ERRNO_FAULT
            })
        },
    )?;
    linker.func_wrap(
        WASI_MODULE,
        "random_get",
        |mut caller: Caller<'_, GuestState>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let Ok(len) = usize::try_from(len as u32) else {
                return Ok(ERRNO_INVAL);
            };
            // What one call may ask for: more than a guest ever needs, less than a large buffer.
            if len > 1 << 20 {
                return Ok(ERRNO_INVAL);
            }
            let read = caller.data_mut().reads.serve("random", || {
                let mut bytes = vec![0; len];
                // No randomness from the OS: zeros would be a silent failure; trap instead.
                if getrandom::fill(&mut bytes).is_err() {
                    bytes.clear();
                }
                Read::Random(bytes)
            })?;
            let Read::Random(bytes) = read else {
                return Err(Diverged.into());
            };
            if bytes.len() != len {
                if let Reads::Replay { diverged, .. } = &mut caller.data_mut().reads.reads {
                    *diverged = Some(format!(
                        "it read {len} random bytes where the journal has {} (a WASI read)",
                        bytes.len()
                    ));
                    return Err(Diverged.into());
                }
                return Err(wasmtime::Error::msg("the OS gave no random bytes"));
            }
            Ok(if write_guest(&mut caller, ptr, &bytes) {
                0
            } else {
                ERRNO_FAULT
            })
        },
    )?;
    linker.func_wrap(
        abi::IMPORT_MODULE,
        abi::IMPORT_PATCHED,
        |mut caller: Caller<'_, GuestState>, ptr: i32, len: i32| -> i32 {
            let Ok(len) = usize::try_from(len as u32) else {
                return -1;
            };
            if len > abi::MAX_PATCH_NAME {
                return -1;
            }
            let Some(memory) = caller
                .get_export("memory")
                .and_then(wasmtime::Extern::into_memory)
            else {
                return -1;
            };
            let mut name = vec![0; len];
            if memory
                .read(&caller, ptr as u32 as usize, &mut name)
                .is_err()
            {
                return -1;
            }
            let Ok(name) = String::from_utf8(name) else {
                return -1;
            };
            i32::from(caller.data_mut().reads.patched(&name))
        },
    )?;
    Ok(())
}
