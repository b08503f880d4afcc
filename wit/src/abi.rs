//! How the contract travels over a core WebAssembly module boundary.
//!
//! The guest exports linear memory and four functions; every structured value crosses as
//! postcard bytes in guest memory. See `wit/README.md` for the full description.
//!
//! | export | signature | does |
//! |---|---|---|
//! | [`EXPORT_RESERVE`] | `(len: i32) -> i32` | returns a guest pointer with room for `len` bytes of input |
//! | [`EXPORT_INIT`] | `(len: i32) -> i64` | reads an [`InitRequest`](crate::InitRequest) from that buffer, answers an [`InitResponse`] |
//! | [`EXPORT_STEP`] | `(len: i32) -> i64` | reads a `Vec<Event>` from that buffer, answers a [`StepOutput`] |
//! | [`EXPORT_PANIC_MESSAGE`] | `() -> i64` | after a trap, the guest's last panic message (UTF-8), or `(0, 0)` |
//!
//! It may import one function from the host, besides WASI preview 1: [`IMPORT_PATCHED`] from
//! [`IMPORT_MODULE`] (`ctx.patched` in the SDK).
//!
//! Answers are returned as [`pack`]ed `(pointer, length)` pairs pointing into guest memory, valid
//! until the next call into the guest.

use alloc::string::String;
use alloc::vec::Vec;

use crate::{Status, StepOutput, Yield};

/// The largest tag a yield may have (2^63 - 1): a host keeps tags in signed 64-bit columns. A
/// step that yields a larger one fails its process as a malformed answer.
pub const MAX_TAG: u64 = i64::MAX as u64;

/// The version of the host/guest ABI that guests built now declare.
///
/// Bump it on any change to the exports, their signatures or the wire types. A host runs the
/// modules of the versions in [`READS`].
pub const VERSION: u32 = 3;

/// The versions a host of this build runs: version 3 only added [`Command::Retry`], so a module
/// of version 2 (which never yields one) runs as it did.
///
/// [`Command::Retry`]: crate::Command::Retry
pub const READS: core::ops::RangeInclusive<u32> = 2..=3;

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

/// The module of WASI preview 1's functions, the imports a guest may have besides
/// [`IMPORT_MODULE`]'s.
pub const WASI_MODULE: &str = "wasi_snapshot_preview1";

/// The module of the one function the host gives a guest besides WASI preview 1.
pub const IMPORT_MODULE: &str = "wfhost";
/// `(ptr: i32, len: i32) -> i32`: whether the patch named by the UTF-8 bytes at `ptr` applies
/// (1) or not (0): 1 in a live step, which the journal then records; in a replay, 1 only where
/// the journal recorded it (the step ran code that had the patch), else 0. A negative answer is
/// a name the host refused (not UTF-8, or longer than [`MAX_PATCH_NAME`]).
pub const IMPORT_PATCHED: &str = "patched";
/// The longest patch name, in bytes.
pub const MAX_PATCH_NAME: usize = 256;

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

/// Why a guest's step answer was refused by [`decode_step_output`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not a postcard-encoded [`StepOutput`].
    #[error("malformed answer ({0})")]
    Malformed(postcard::Error),
    /// The answer announces more yields than the caller allows.
    #[error("yielded {count} commands in one step, more than the limit of {limit}")]
    TooManyYields {
        /// Yields announced.
        count: u64,
        /// The most allowed.
        limit: usize,
    },
    /// Bytes are left over after the answer.
    #[error("malformed answer ({0} bytes left over after it)")]
    TrailingBytes(usize),
}

/// Decodes a guest's step answer, refusing more than `max_yields` yields before decoding any, so
/// that a small answer cannot make the host build millions of values. Never panics, whatever the
/// bytes (this is the decoder the fuzz target in `fuzz/` exercises).
pub fn decode_step_output(bytes: &[u8], max_yields: usize) -> Result<StepOutput, DecodeError> {
    let (status, rest) =
        postcard::take_from_bytes::<Status>(bytes).map_err(DecodeError::Malformed)?;
    // A sequence's length is a varint, as a u64 is.
    let (count, mut rest) =
        postcard::take_from_bytes::<u64>(rest).map_err(DecodeError::Malformed)?;
    if count > max_yields as u64 {
        return Err(DecodeError::TooManyYields {
            count,
            limit: max_yields,
        });
    }
    // Every yield takes at least two bytes, so the count cannot reserve more than the input backs.
    let mut yields = Vec::with_capacity((count as usize).min(rest.len() / 2));
    for _ in 0..count {
        let (y, left) = postcard::take_from_bytes::<Yield>(rest).map_err(DecodeError::Malformed)?;
        yields.push(y);
        rest = left;
    }
    let (receive, rest) = postcard::take_from_bytes::<u32>(rest).map_err(DecodeError::Malformed)?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes(rest.len()));
    }
    Ok(StepOutput {
        status,
        yields,
        receive,
    })
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

    #[test]
    fn step_output_decodes_within_its_yield_limit() {
        let mut out = StepOutput::new();
        out.push(crate::Tag(1), crate::Command::Now);
        out.push(crate::Tag(2), crate::Command::Random);
        out.receive = 3;
        let bytes = postcard::to_allocvec(&out).unwrap();
        assert_eq!(decode_step_output(&bytes, 2), Ok(out));
        assert_eq!(
            decode_step_output(&bytes, 1),
            Err(DecodeError::TooManyYields { count: 2, limit: 1 })
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            decode_step_output(&longer, 2),
            Err(DecodeError::TrailingBytes(1))
        );
        assert!(matches!(
            decode_step_output(&bytes[..bytes.len() - 1], 2),
            Err(DecodeError::Malformed(_))
        ));
    }
}
