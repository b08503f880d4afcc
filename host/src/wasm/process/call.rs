//! One call into the guest: its input encoded into guest memory, the export called within the
//! process's budgets, the answer read back out and checked against the limits.

use std::time::Instant;

use serde::Serialize;
use wfcontract::abi::{self, DecodeError, MAX_TAG};
use wfcontract::{Command, StepOutput, Tag};
use wfhost_scheduler::{FailureKind, ProcessError};

use super::WasmProcess;
use crate::wasm::module::bytes as size;

/// The guest exports a process calls with an input.
#[derive(Clone, Copy)]
pub(super) enum Export {
    Init,
    Step,
}

impl WasmProcess {
    /// Encodes `request` into guest memory, calls `export`, returns the answer's bytes.
    pub(super) fn call<Req: Serialize + ?Sized>(
        &mut self,
        export: Export,
        request: &Req,
    ) -> Result<Vec<u8>, ProcessError> {
        self.refuse_if_shut_down(match export {
            Export::Init => "before its init",
            Export::Step => "before its step",
        })?;
        let mut scratch = std::mem::take(&mut self.scratch);
        let before = scratch.capacity();
        scratch.clear();
        let encoded = postcard::to_extend(request, scratch);
        let scratch = match encoded {
            Ok(scratch) => scratch,
            Err(e) => {
                self.runtime.instances.buffer(before, 0);
                return Err(self.fail(
                    FailureKind::Failed,
                    format_args!("could not be sent its input: {e}"),
                ));
            }
        };
        self.runtime.instances.buffer(before, scratch.capacity());
        self.arm();
        let started = Instant::now();
        self.swap_reads();
        let result = self.call_encoded(export, &scratch);
        self.swap_reads();
        let took = started.elapsed();
        self.cpu += took;
        if let (Export::Step, Some(metrics)) = (export, &self.runtime.metrics) {
            metrics.core.step_seconds.observe_duration(took);
        }
        self.scratch = scratch;
        result
    }

    pub(super) fn malformed(&self, error: impl std::fmt::Display) -> ProcessError {
        self.fail(
            FailureKind::BadOutput,
            format_args!(
                "returned a malformed answer ({error}): the module does not follow the wfhost ABI"
            ),
        )
    }

    /// Decodes a step's answer within the yield limit (see [`abi::decode_step_output`]).
    pub(super) fn decode_step(&self, bytes: &[u8]) -> Result<StepOutput, ProcessError> {
        let max = self.spec.limits.max_yields_per_step;
        let output = abi::decode_step_output(bytes, max).map_err(|error| match error {
            DecodeError::TooManyYields { count, limit } => self.fail(
                FailureKind::Limit,
                format_args!(
                    "yielded {count} commands in one step, more than the limit of {limit} \
                     (Limits::max_yields_per_step, --max-yields)"
                ),
            ),
            DecodeError::Malformed(e) => self.malformed(e),
            DecodeError::TrailingBytes(n) => {
                self.malformed(format_args!("{n} bytes left over after it"))
            }
        })?;
        // Tags name yields in the journal and in the stores' rows (signed 64-bit numbers in
        // PostgreSQL): one past them is this guest's fault, never the store's.
        let past = |tag: Tag| tag.0 > MAX_TAG;
        let bad = output.yields.iter().find_map(|y| match &y.command {
            _ if past(y.tag) => Some(y.tag),
            Command::Forget(tag) if past(*tag) => Some(*tag),
            _ => None,
        });
        if let Some(tag) = bad {
            return Err(self.malformed(format_args!(
                "a yield's tag is {}, past the largest a tag may be ({MAX_TAG})",
                tag.0
            )));
        }
        Ok(output)
    }

    fn call_encoded(&mut self, export: Export, input: &[u8]) -> Result<Vec<u8>, ProcessError> {
        let max_output = self.spec.limits.max_output_bytes;
        let Some(live) = self.live.as_mut() else {
            return Err(self.fail(FailureKind::Failed, "has no instance"));
        };
        let Ok(len) = u32::try_from(input.len()) else {
            return Err(self.fail(
                FailureKind::Limit,
                "cannot be sent an input larger than 4 GiB",
            ));
        };
        let ptr = match live.reserve.call(&mut live.store, len) {
            Ok(ptr) => ptr,
            Err(error) => return Err(self.trapped(error)),
        };
        if live
            .memory
            .write(&mut live.store, ptr as usize, input)
            .is_err()
        {
            return Err(self.fail(
                FailureKind::BadOutput,
                format_args!(
                    "reserved an input buffer outside its memory ({len} bytes at {ptr:#x}): \
                     the module does not follow the wfhost ABI"
                ),
            ));
        }
        let func = match export {
            Export::Init => &live.init,
            Export::Step => &live.step,
        };
        let packed = match func.call(&mut live.store, len) {
            Ok(packed) => packed,
            Err(error) => return Err(self.trapped(error)),
        };
        let (ptr, len) = abi::unpack(packed);
        if len as usize > max_output {
            return Err(self.fail(
                FailureKind::Limit,
                format_args!(
                    "returned an answer of {}, more than the limit of {} \
                     (Limits::max_output_bytes, --max-output)",
                    size(u64::from(len)),
                    size(max_output as u64)
                ),
            ));
        }
        let live = self.live.as_ref().expect("checked above");
        let start = ptr as usize;
        start
            .checked_add(len as usize)
            .and_then(|end| live.memory.data(&live.store).get(start..end))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| {
                self.fail(
                    FailureKind::BadOutput,
                    format_args!(
                        "returned an answer outside its memory ({len} bytes at {ptr:#x}): the \
                         module does not follow the wfhost ABI"
                    ),
                )
            })
    }

    /// `message` cut to the payload limit: a failure's text is kept and copied like a result.
    pub(super) fn capped(&self, mut message: String) -> String {
        let limit = self.spec.limits.max_payload_bytes;
        if message.len() > limit {
            let mut cut = limit;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" [cut at the payload limit]");
        }
        message
    }
}
