//! What a failed call into the guest means: a limit it hit, a forbidden call, an exit, a panic, or
//! the trap itself, said in words that name the process and the setting that raises the limit.

use std::sync::atomic::Ordering;

use wasmtime::Trap;
use wasmtime_wasi::I32Exit;
use wfcontract::abi;
use wfhost_scheduler::{FailureKind, ProcessError};

use super::{Deadline, WasmProcess};
use crate::wasm::module::bytes as size;
use crate::wasm::{Forbidden, Refusal};

/// Fuel for the call that reads a panic message: plenty for a copy, nothing for a loop.
const PANIC_MESSAGE_FUEL: u64 = 1_000_000;

/// A failure that is the guest's doing (a trap, an exit, a forbidden call), as opposed to a
/// resource the host could not provide.
pub(super) fn is_guest_fault(error: &wasmtime::Error) -> bool {
    error.downcast_ref::<Trap>().is_some()
        || error.downcast_ref::<I32Exit>().is_some()
        || error.downcast_ref::<Forbidden>().is_some()
        || error
            .downcast_ref::<crate::wasm::reads::Diverged>()
            .is_some()
}

impl WasmProcess {
    /// Turns a failed call into the process's failure, naming the cause.
    pub(super) fn trapped(&mut self, error: wasmtime::Error) -> ProcessError {
        // Read before the panic-message call runs guest code of its own.
        let refused = self
            .live
            .as_ref()
            .and_then(|live| live.store.data().limits.refused);
        // A guest panic traps (as `unreachable`, say); the SDK kept its message.
        let panic = match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt | Trap::OutOfFuel | Trap::StackOverflow) | None => None,
            Some(_) => self.panic_message(),
        };
        self.classify(error, refused, panic, "")
    }

    /// Names the cause of a failed call into the guest: a limit it hit, a forbidden call, an exit,
    /// or the trap itself (with its last words on stderr, if any). `during` says where, when that
    /// is not a plain step ("in its start function").
    pub(super) fn classify(
        &self,
        error: wasmtime::Error,
        refused: Option<Refusal>,
        panic: Option<String>,
        during: &str,
    ) -> ProcessError {
        let during = if during.is_empty() {
            String::new()
        } else {
            format!(" {during}")
        };
        if let Some(exit) = error.downcast_ref::<I32Exit>() {
            return self.fail(
                FailureKind::Failed,
                format_args!("exited{during} with code {}", exit.0),
            );
        }
        if let Some(forbidden) = error.downcast_ref::<Forbidden>() {
            return self.fail(FailureKind::Trap, forbidden);
        }
        match error.downcast_ref::<Trap>() {
            Some(trap) => self
                .stopped_by_limit(trap, &during)
                .unwrap_or_else(|| self.guest_trap(trap, panic, refused, &during)),
            None => self.fail(
                FailureKind::Trap,
                format_args!("failed{during}: {error:#}{}", self.last_words()),
            ),
        }
    }

    /// The failure of a call the host stopped, `trap` being how: the host shut down, or the call
    /// ran out of its time, CPU time, fuel or stack. `None` for any other trap.
    fn stopped_by_limit(&self, trap: &Trap, during: &str) -> Option<ProcessError> {
        let limits = &*self.spec.limits;
        Some(match trap {
            Trap::Interrupt if self.runtime.interrupted.load(Ordering::Acquire) => self.fail(
                FailureKind::Terminated,
                format_args!("was stopped{during}: the host shut down"),
            ),
            Trap::Interrupt if self.deadline == Deadline::Cpu => self.out_of_cpu(),
            Trap::Interrupt => self.fail(
                FailureKind::Limit,
                format_args!(
                    "ran longer than the step time limit of {:?}{during} and was stopped \
                     (Limits::step_time_limit, --step-limit)",
                    limits.step_time_limit
                ),
            ),
            Trap::OutOfFuel => self.fail(
                FailureKind::Limit,
                format_args!(
                    "used up its fuel of {}{during} and was stopped (Limits::fuel_per_step, \
                     --fuel)",
                    limits.fuel_per_step.unwrap_or(0)
                ),
            ),
            Trap::StackOverflow => self.fail(
                FailureKind::Limit,
                format_args!(
                    "overflowed its stack{during}: its wasm frames may use {} \
                     (Limits::max_stack_bytes, --max-stack)",
                    size(limits.max_stack_bytes as u64)
                ),
            ),
            _ => return None,
        })
    }

    /// The failure of a guest that trapped on its own: a panic (with its message), memory or a
    /// table refused to it (an allocator's abort), or the trap itself.
    fn guest_trap(
        &self,
        trap: &Trap,
        panic: Option<String>,
        refused: Option<Refusal>,
        during: &str,
    ) -> ProcessError {
        let limits = &*self.spec.limits;
        match (panic, refused, trap) {
            (Some(message), _, _) => self.fail(
                FailureKind::Trap,
                format_args!("panicked{during}: {message}"),
            ),
            // Rust's allocator (and others) abort with `unreachable` when the memory they asked
            // for is refused.
            (None, Some(Refusal::Memory(wanted)), Trap::UnreachableCodeReached) => self.fail(
                FailureKind::Limit,
                format_args!(
                    "ran out of memory{during}: it asked to grow its memory to {}, past the limit \
                     of {} (Limits::max_memory_bytes, --max-memory), and then trapped \
                     ({trap}){}",
                    size(wanted as u64),
                    size(limits.max_memory_bytes as u64),
                    self.last_words()
                ),
            ),
            (None, Some(Refusal::Table(wanted)), Trap::UnreachableCodeReached) => self.fail(
                FailureKind::Limit,
                format_args!(
                    "ran out of table space{during}: it asked to grow a table to {wanted} \
                     elements, past the limit of {} (Limits::max_table_elements, \
                     --max-table-elements), and then trapped ({trap})",
                    limits.max_table_elements
                ),
            ),
            (None, refused, trap) => self.fail(
                FailureKind::Trap,
                format_args!(
                    "trapped{during}: {trap}{}{}",
                    refusal_note(refused),
                    self.last_words()
                ),
            ),
        }
    }

    /// " (its last words on stderr: ...)", or nothing.
    fn last_words(&self) -> String {
        self.logs
            .as_ref()
            .map(|logs| logs.stderr.last_line())
            .filter(|line| !line.is_empty())
            .map(|line| format!(" (its last words on stderr: {line})"))
            .unwrap_or_default()
    }

    /// The guest's last panic message, if it recorded one. The guest gets one epoch tick (and
    /// a little fuel) to answer: the call is not a second chance at the step's budget.
    fn panic_message(&mut self) -> Option<String> {
        let live = self.live.as_mut()?;
        live.store.set_epoch_deadline(1);
        if self.spec.limits.fuel_per_step.is_some() {
            let _ = live.store.set_fuel(PANIC_MESSAGE_FUEL);
        }
        let packed = live.panic_message.call(&mut live.store, ()).ok()?;
        let (ptr, len) = abi::unpack(packed);
        if len == 0 || len as usize > 64 * 1024 {
            return None;
        }
        let start = ptr as usize;
        let bytes = live
            .memory
            .data(&live.store)
            .get(start..start.checked_add(len as usize)?)?;
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// " (after a refused memory.grow to 2 GiB)", or nothing when nothing was refused.
fn refusal_note(refused: Option<Refusal>) -> String {
    match refused {
        Some(Refusal::Memory(wanted)) => {
            format!(" (after a refused memory.grow to {})", size(wanted as u64))
        }
        Some(Refusal::Table(wanted)) => {
            format!(" (after a refused table.grow to {wanted} elements)")
        }
        None => String::new(),
    }
}
