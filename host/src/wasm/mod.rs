//! WebAssembly processes: the only module that names wasmtime types.
//!
//! One [`Engine`] per host; each distinct module compiled once (by content hash) into an
//! `InstancePre`; one `Store` and instance per process, dropped when the process closes. A ticker
//! thread advances the engine's epoch so that a step that runs too long is interrupted.

#[doc(hidden)]
pub mod bench;
mod hibernate;
mod module;
mod process;
mod wasi;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, Linker, PoolingAllocationConfig, ResourceLimiter,
    StoreLimits, StoreLimitsBuilder,
};
use wasmtime_wasi::p1::WasiP1Ctx;

pub(crate) use hibernate::Instances;
pub use hibernate::{Hibernation, Residency};
pub use module::ModuleInfo;
pub(crate) use module::{Compiled, ModuleCache};
pub(crate) use process::WasmProcess;

use crate::error::{Error, ErrorKind, Result};

/// WASI preview 1's `errno::notsup`.
const WASI_ERRNO_NOTSUP: i32 = 58;

/// How often the epoch advances: the granularity of the step time limit.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

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
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// a host command's input. A yield carrying more completes with a `limit-reached` error; a
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
        if self.compile_time_limit.is_zero() {
            return bad("compile_time_limit must be more than zero");
        }
        Ok(())
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

/// A WASI call workflows may not make, because it would block a worker thread.
#[derive(Debug)]
pub(crate) struct Forbidden(pub(crate) &'static str);

impl std::fmt::Display for Forbidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "called WASI {}, which would block a worker thread (std::thread::sleep does this); \
             a workflow waits with ctx.sleep",
            self.0
        )
    }
}

impl std::error::Error for Forbidden {}

/// What each process's `Store` holds.
pub(crate) struct GuestState {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) limits: GuestLimiter,
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

/// The engine, linker and module cache a host shares among its processes.
pub(crate) struct WasmRuntime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<GuestState>,
    pub(crate) cache: ModuleCache,
    pub(crate) limits: Limits,
    /// Live instances and hibernated processes.
    pub(crate) instances: Arc<Instances>,
    ticker: Ticker,
}

impl WasmRuntime {
    /// `pooling`: instances to pre-allocate for wasmtime's pooling allocator (`None`: allocate on
    /// demand). `copy_on_write`: map modules' initial memory copy-on-write (see
    /// [`MemoryImages`](crate::MemoryImages)). `compact`: reserve small memories (see
    /// [`Capacity::compact_memories`](crate::Capacity::compact_memories)). `instances`: how many
    /// may be live, and when processes hibernate.
    pub(crate) fn new(
        limits: Limits,
        pooling: Option<u32>,
        copy_on_write: bool,
        compact: bool,
        instances: Instances,
    ) -> Result<WasmRuntime> {
        let config_error = |e: wasmtime::Error| {
            Error::new(
                ErrorKind::Config,
                format!("could not configure wasmtime: {e:#}"),
            )
        };
        limits.validate()?;
        let mut config = Config::new();
        config.epoch_interruption(true);
        // For profiling: wasmtime writes /tmp/perf-<pid>.map, so `perf report` names guest
        // functions (BENCHMARKS.md shows how).
        if std::env::var_os("WFHOST_PERFMAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        config.max_wasm_stack(limits.max_stack_bytes);
        config.consume_fuel(limits.fuel_per_step.is_some());
        config.memory_init_cow(copy_on_write);
        // Compact: reserve only what a memory may grow to (the limiter refuses more), so that
        // many instances fit in the address space: 64 MiB and its guard rather than wasmtime's
        // 4 GiB. The price is an explicit bounds check on each memory access, which the 4 GiB
        // reservation lets wasmtime leave out.
        // The pooling allocator reserves every slot up front: always compact there.
        if compact || pooling.is_some() {
            config.memory_reservation(limits.max_memory_bytes as u64);
            config.memory_reservation_for_growth(0);
        }
        if let Some(instances) = pooling {
            let mut pool = PoolingAllocationConfig::default();
            let memories = u32::try_from(limits.max_memories).unwrap_or(u32::MAX);
            let tables = u32::try_from(limits.max_tables).unwrap_or(u32::MAX);
            pool.total_core_instances(instances)
                .total_memories(instances.saturating_mul(memories))
                .total_tables(instances.saturating_mul(tables))
                .max_memories_per_module(memories)
                .max_tables_per_module(tables)
                .max_memory_size(limits.max_memory_bytes)
                .table_elements(limits.max_table_elements);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&config).map_err(config_error)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |state: &mut GuestState| {
            &mut state.wasi
        })
        .map_err(config_error)?;
        // WASI's poll_oneoff would put the worker thread itself to sleep (it is how
        // `std::thread::sleep` waits), out of reach of the step time limit. A workflow waits with
        // the `sleep` command instead; calling it fails the process.
        linker.allow_shadowing(true);
        linker
            .func_wrap(
                module::WASI_MODULE,
                "poll_oneoff",
                |_: wasmtime::Caller<'_, GuestState>,
                 _: i32,
                 _: i32,
                 _: i32,
                 _: i32|
                 -> wasmtime::Result<i32> {
                    Err(wasmtime::Error::new(Forbidden("poll_oneoff")))
                },
            )
            .map_err(config_error)?;
        // The WASI context is rebuilt when a hibernated process is restored, so a guest may not
        // change it: closing, renumbering or re-flagging a descriptor answers "not supported"
        // (the only descriptors are stdin, stdout and stderr) and changes nothing.
        linker
            .func_wrap(
                module::WASI_MODULE,
                "fd_close",
                |_: wasmtime::Caller<'_, GuestState>, _: i32| -> i32 { WASI_ERRNO_NOTSUP },
            )
            .map_err(config_error)?;
        linker
            .func_wrap(
                module::WASI_MODULE,
                "fd_renumber",
                |_: wasmtime::Caller<'_, GuestState>, _: i32, _: i32| -> i32 { WASI_ERRNO_NOTSUP },
            )
            .map_err(config_error)?;
        linker
            .func_wrap(
                module::WASI_MODULE,
                "fd_fdstat_set_flags",
                |_: wasmtime::Caller<'_, GuestState>, _: i32, _: i32| -> i32 { WASI_ERRNO_NOTSUP },
            )
            .map_err(config_error)?;
        linker
            .func_wrap(
                module::WASI_MODULE,
                "fd_fdstat_set_rights",
                |_: wasmtime::Caller<'_, GuestState>, _: i32, _: i64, _: i64| -> i32 {
                    WASI_ERRNO_NOTSUP
                },
            )
            .map_err(config_error)?;
        linker.allow_shadowing(false);
        let ticker = Ticker::start(engine.clone())?;
        Ok(WasmRuntime {
            engine,
            linker,
            cache: ModuleCache::default(),
            limits,
            instances: Arc::new(instances),
            ticker,
        })
    }

    /// Compiles (or finds in the cache) a module, refusing one over the module limits.
    pub(crate) fn compile(&self, bytes: &[u8]) -> Result<Arc<Compiled>> {
        self.cache
            .get_or_compile(&self.engine, &self.linker, &self.limits, bytes)
    }

    /// Epoch ticks a call may run.
    pub(crate) fn deadline_ticks(&self) -> u64 {
        let ticks = self.limits.step_time_limit.as_millis() / EPOCH_TICK.as_millis();
        u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
    }

    pub(crate) fn stop(&self) {
        self.ticker.stop();
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until stopped.
struct Ticker {
    stop: Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
    stopped: AtomicBool,
}

impl Ticker {
    fn start(engine: Engine) -> Result<Ticker> {
        let stop = Arc::new((parking_lot::Mutex::new(false), parking_lot::Condvar::new()));
        let signal = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("wfhost-epoch".into())
            .spawn(move || {
                let (lock, condvar) = &*signal;
                let mut stopped = lock.lock();
                while !*stopped {
                    if condvar.wait_for(&mut stopped, EPOCH_TICK).timed_out() {
                        engine.increment_epoch();
                    }
                }
            })
            .map_err(|e| Error::new(ErrorKind::Config, format!("could not start a thread: {e}")))?;
        Ok(Ticker {
            stop,
            thread: parking_lot::Mutex::new(Some(thread)),
            stopped: AtomicBool::new(false),
        })
    }

    fn stop(&self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop();
    }
}
