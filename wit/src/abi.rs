//! How the contract travels over a core WebAssembly module boundary.
//!
//! The guest exports linear memory and three functions; every structured value crosses as
//! postcard bytes in guest memory. See `wit/README.md` for the full description.
//!
//! | export | signature | does |
//! |---|---|---|
//! | [`EXPORT_RESERVE`] | `(len: i32) -> i32` | returns a guest pointer with room for `len` bytes of input |
//! | [`EXPORT_INIT`] | `(len: i32) -> i64` | reads an [`InitRequest`](crate::InitRequest) from that buffer, answers an [`InitResponse`] |
//! | [`EXPORT_STEP`] | `(len: i32) -> i64` | reads a `Vec<Event>` from that buffer, answers a [`StepOutput`](crate::StepOutput) |
//! | [`EXPORT_PANIC_MESSAGE`] | `() -> i64` | after a trap, the guest's last panic message (UTF-8), or `(0, 0)` |
//!
//! Answers are returned as [`pack`]ed `(pointer, length)` pairs pointing into guest memory, valid
//! until the next call into the guest.

use alloc::string::String;

/// The version of the host/guest ABI. A host runs only modules that declare this version.
///
/// Bump it on any change to the exports, their signatures or the wire types.
pub const VERSION: u32 = 1;

/// `(len: i32) -> i32`: a guest buffer for `len` input bytes.
pub const EXPORT_RESERVE: &str = "wfhost_reserve";
/// `(len: i32) -> i64`: start an entry point.
pub const EXPORT_INIT: &str = "wfhost_init";
/// `(len: i32) -> i64`: advance with events.
pub const EXPORT_STEP: &str = "wfhost_step";
/// `() -> i64`: the guest's last panic message, read by the host after a trap.
pub const EXPORT_PANIC_MESSAGE: &str = "wfhost_panic_message";
/// The guest's linear memory.
pub const EXPORT_MEMORY: &str = "memory";

/// What `init` answers: `Ok` when the entry point is ready to step, `Err` with a message otherwise.
pub type InitResponse = Result<(), String>;

/// Packs a guest `(pointer, length)` answer into the `i64` an export returns.
pub const fn pack(ptr: u32, len: u32) -> u64 {
    ((ptr as u64) << 32) | len as u64
}

/// Splits a packed answer into `(pointer, length)`.
pub const fn unpack(packed: u64) -> (u32, u32) {
    ((packed >> 32) as u32, packed as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips() {
        assert_eq!(
            unpack(pack(0xdead_beef, 0x1234_5678)),
            (0xdead_beef, 0x1234_5678)
        );
        assert_eq!(unpack(pack(0, u32::MAX)), (0, u32::MAX));
    }
}
