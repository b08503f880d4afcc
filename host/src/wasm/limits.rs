//! The sandbox's limits, and the store limiter that enforces the memory and table ones.

use std::time::Duration;

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use crate::error::{Error, ErrorKind, Result};
use crate::wasm::EPOCH_TICK;

/// Whole epoch ticks in `duration`, at least one.
pub(crate) fn ticks(duration: Duration) -> u64 {
    let ticks = duration.as_millis() / EPOCH_TICK.as_millis();
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

/// A process's CPU time over its life, unless [`Limits::max_cpu_time`] says otherwise.
pub const DEFAULT_MAX_CPU_TIME: Duration = Duration::from_secs(5 * 60);

/// The longest step time limit: long enough for anything, short enough that a deadline in ticks
/// never overflows.
const MAX_STEP_TIME: Duration = Duration::from_secs(24 * 3600);

/// The sandbox's limits: what one process, and one module, may consume. Every field has a
/// default suited to running code nobody reviewed; each is also a `wfhost run` flag (named in its
/// documentation). `SECURITY.md` lists them with the host-wide limits on [`HostBuilder`].
///
/// A process that goes over a limit fails with [`ErrorKind::Limit`] and a message naming its pid,
/// its entry point and the limit; a module over a limit is refused at load with
/// [`ErrorKind::Limit`].
///
/// [`HostBuilder`]: crate::HostBuilder
///
/// Build one from the defaults with the setters, named as the fields
/// (`Limits::default().max_memory_bytes(128 << 20)`),
/// or set the fields; new limits may be added without breaking either.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The largest linear memory a process may grow to, in bytes. A module that declares more
    /// initial memory is refused at load; a `memory.grow` past it fails (returns -1, as wasm
    /// specifies), and if the guest then traps, the failure says it ran out of memory.
    /// Default: 64 MiB. CLI: `--max-memory`.
    pub max_memory_bytes: usize,
    /// The most elements each of a process's tables may hold (each costs host memory). A module
    /// that declares more initially is refused at load. Default: 100,000. CLI:
    /// `--max-table-elements`.
    pub max_table_elements: usize,
    /// The most linear memories a module may define. Default: 1 (the ABI needs one; more would
    /// multiply the memory a process can hold). CLI: `--max-memories`.
    pub max_memories: usize,
    /// The most tables a module may define. Default: 1 (what Rust, C and Go toolchains emit).
    /// CLI: `--max-tables`.
    pub max_tables: usize,
    /// How long one call into a guest (`init` with its start function and instantiation, or a
    /// step) may run before it is interrupted and the process fails. Measured by the host's one
    /// epoch ticker, granularity 10 ms. Default: 10 s. CLI: `--step-limit`.
    pub step_time_limit: Duration,
    /// The most time a process may spend running guest code over its whole life, summed over its
    /// `init` and every step: a process that keeps asking to run again, each step just under the
    /// step time limit, ends here instead of holding a worker for ever. Wall time on the worker
    /// thread, with the epoch's 10 ms granularity. `None`: no bound. Default: 5 minutes. CLI:
    /// `--max-cpu`.
    pub max_cpu_time: Option<Duration>,
    /// Fuel (roughly, wasm instructions) one call into a guest may burn, for accounting that is
    /// deterministic where wall time is not: the same step always burns the same fuel. Costs
    /// some speed when on. `None`: off. Default: off. CLI: `--fuel`.
    pub fuel_per_step: Option<u64>,
    /// The most native stack a guest's wasm frames may use, in bytes; deeper recursion traps with
    /// a stack overflow. The worker threads' stacks are sized to fit it. Default: 512 KiB.
    /// CLI: `--max-stack`.
    pub max_stack_bytes: usize,
    /// The most yields one step may return. Default: 10,000. CLI: `--max-yields`.
    pub max_yields_per_step: usize,
    /// The largest payload, in bytes: a process's input and result, a message, a child's input,
    /// a host function's input. A yield carrying more completes with a `limit-reached` error; a
    /// result larger fails the process; the host's own `spawn` and `send` refuse larger ones; a
    /// larger log record is dropped, with a warning in the host's log; a failure message is cut
    /// to it. Default: 4 MiB. CLI: `--max-payload`.
    pub max_payload_bytes: usize,
    /// The largest answer (step output or init result) a guest may return, in bytes.
    /// Default: 16 MiB. CLI: `--max-output`.
    pub max_output_bytes: usize,
    /// The largest module the host loads, in bytes. Default: 64 MiB. CLI: `--max-module-size`.
    pub max_module_bytes: usize,
    /// How long compiling one module may take before loading it fails. A compile that overruns
    /// finishes in the background (Cranelift cannot be interrupted) and its result is dropped.
    /// Default: 60 s. CLI: `--compile-limit`.
    pub compile_time_limit: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_memory_bytes: 64 << 20,
            max_table_elements: 100_000,
            max_memories: 1,
            max_tables: 1,
            step_time_limit: Duration::from_secs(10),
            max_cpu_time: Some(DEFAULT_MAX_CPU_TIME),
            fuel_per_step: None,
            max_stack_bytes: 512 << 10,
            max_yields_per_step: 10_000,
            max_payload_bytes: 4 << 20,
            max_output_bytes: 16 << 20,
            max_module_bytes: 64 << 20,
            compile_time_limit: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// Sets [`max_memory_bytes`](Self::max_memory_bytes).
    pub fn max_memory_bytes(mut self, bytes: usize) -> Limits {
        self.max_memory_bytes = bytes;
        self
    }

    /// Sets [`max_table_elements`](Self::max_table_elements).
    pub fn max_table_elements(mut self, elements: usize) -> Limits {
        self.max_table_elements = elements;
        self
    }

    /// Sets [`max_memories`](Self::max_memories).
    pub fn max_memories(mut self, memories: usize) -> Limits {
        self.max_memories = memories;
        self
    }

    /// Sets [`max_tables`](Self::max_tables).
    pub fn max_tables(mut self, tables: usize) -> Limits {
        self.max_tables = tables;
        self
    }

    /// Sets [`step_time_limit`](Self::step_time_limit).
    pub fn step_time_limit(mut self, limit: Duration) -> Limits {
        self.step_time_limit = limit;
        self
    }

    /// Sets [`max_cpu_time`](Self::max_cpu_time).
    pub fn max_cpu_time(mut self, limit: Option<Duration>) -> Limits {
        self.max_cpu_time = limit;
        self
    }

    /// Sets [`fuel_per_step`](Self::fuel_per_step).
    pub fn fuel_per_step(mut self, fuel: Option<u64>) -> Limits {
        self.fuel_per_step = fuel;
        self
    }

    /// Sets [`max_stack_bytes`](Self::max_stack_bytes).
    pub fn max_stack_bytes(mut self, bytes: usize) -> Limits {
        self.max_stack_bytes = bytes;
        self
    }

    /// Sets [`max_yields_per_step`](Self::max_yields_per_step).
    pub fn max_yields_per_step(mut self, yields: usize) -> Limits {
        self.max_yields_per_step = yields;
        self
    }

    /// Sets [`max_payload_bytes`](Self::max_payload_bytes).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Limits {
        self.max_payload_bytes = bytes;
        self
    }

    /// Sets [`max_output_bytes`](Self::max_output_bytes).
    pub fn max_output_bytes(mut self, bytes: usize) -> Limits {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets [`max_module_bytes`](Self::max_module_bytes).
    pub fn max_module_bytes(mut self, bytes: usize) -> Limits {
        self.max_module_bytes = bytes;
        self
    }

    /// Sets [`compile_time_limit`](Self::compile_time_limit).
    pub fn compile_time_limit(mut self, limit: Duration) -> Limits {
        self.compile_time_limit = limit;
        self
    }

    /// Checks that the limits make sense together, saying which one does not.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::new(ErrorKind::Config, what.to_string()));
        if self.max_memory_bytes < 64 << 10 {
            return bad("max_memory_bytes must be at least one wasm page (64 KiB)");
        }
        if self.max_memories == 0 {
            return bad("max_memories must be at least 1: a workflow exports a linear memory");
        }
        if self.step_time_limit < EPOCH_TICK || self.step_time_limit > MAX_STEP_TIME {
            return bad("step_time_limit must be between 10 ms (the epoch tick) and 24 hours");
        }
        if self.max_cpu_time.is_some_and(|cpu| cpu < EPOCH_TICK) {
            return bad(
                "max_cpu_time must be at least 10 ms (the epoch tick), or None for no bound",
            );
        }
        if self.fuel_per_step == Some(0) {
            return bad("fuel_per_step must be at least 1 (or None for no fuel accounting)");
        }
        if self.max_stack_bytes < 16 << 10 || self.max_stack_bytes > 1 << 30 {
            return bad("max_stack_bytes must be between 16 KiB and 1 GiB");
        }
        if self.max_output_bytes == 0 || self.max_payload_bytes == 0 || self.max_module_bytes == 0 {
            return bad(
                "max_output_bytes, max_payload_bytes and max_module_bytes must be at least 1",
            );
        }
        if self.max_yields_per_step == 0 {
            return bad(
                "max_yields_per_step must be at least 1: a workflow that may yield nothing can \
                 never wait for anything",
            );
        }
        if self.compile_time_limit.is_zero() {
            return bad("compile_time_limit must be more than zero");
        }
        Ok(())
    }

    /// Epoch ticks one call may run: the step time limit.
    pub(crate) fn deadline_ticks(&self) -> u64 {
        ticks(self.step_time_limit)
    }

    /// When `len` bytes are over the payload limit, the words that say so: "more than the
    /// payload limit of ... (Limits::max_payload_bytes, --max-payload)".
    pub(crate) fn over_payload(&self, len: usize) -> Option<String> {
        let limit = self.max_payload_bytes;
        (len > limit).then(|| {
            format!(
                "more than the payload limit of {limit} (Limits::max_payload_bytes, --max-payload)"
            )
        })
    }

    /// The stack a worker thread needs to run guests within these limits: the guest's frames
    /// plus room for the host's own.
    pub(crate) fn worker_stack_bytes(&self) -> usize {
        (self.max_stack_bytes + (2 << 20)).max(4 << 20)
    }
}

/// The store's resource limiter: wasmtime's [`StoreLimits`], remembering whether it refused a
/// growth, so that a guest that then traps (as Rust's allocator does) is reported as out of
/// memory rather than as a bare trap.
pub(crate) struct GuestLimiter {
    inner: StoreLimits,
    /// The size a refused `memory.grow` or `table.grow` asked for.
    pub(crate) refused: Option<Refusal>,
}

/// A growth the limiter refused.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    /// Memory, to this many bytes.
    Memory(usize),
    /// A table, to this many elements.
    Table(usize),
}

impl GuestLimiter {
    pub(crate) fn new(limits: &Limits) -> GuestLimiter {
        GuestLimiter {
            inner: StoreLimitsBuilder::new()
                .memory_size(limits.max_memory_bytes)
                .table_elements(limits.max_table_elements)
                .instances(1)
                .memories(limits.max_memories)
                .tables(limits.max_tables)
                .build(),
            refused: None,
        }
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.inner.memory_growing(current, desired, maximum)?;
        if !allowed {
            self.refused = Some(Refusal::Memory(desired));
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.inner.table_growing(current, desired, maximum)?;
        if !allowed {
            self.refused = Some(Refusal::Table(desired));
        }
        Ok(allowed)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}
