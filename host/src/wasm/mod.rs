//! WebAssembly processes: the only module that names wasmtime types.
//!
//! One [`Engine`] per host; each distinct module compiled once (by content hash) into an
//! `InstancePre`; one `Store` and instance per process, dropped when the process closes. A ticker
//! thread advances the engine's epoch so that a step that runs too long is interrupted.

#[doc(hidden)]
pub mod bench;
mod module;
mod process;
mod wasi;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, Linker, PoolingAllocationConfig, StoreLimits,
};
use wasmtime_wasi::p1::WasiP1Ctx;

pub use module::ModuleInfo;
pub(crate) use module::{Compiled, ModuleCache};
pub(crate) use process::WasmProcess;

use crate::error::{Error, ErrorKind, Result};

/// How often the epoch advances: the granularity of the step time limit.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Per-process limits, enforced by the sandbox.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The largest linear memory a process may grow to, in bytes. Default: 64 MiB.
    pub max_memory_bytes: usize,
    /// How long one call into a guest (`init` or a step) may run before it is interrupted and the
    /// process fails. Granularity 10 ms. Default: 10 s.
    pub step_time_limit: Duration,
    /// The most yields one step may return. Default: 10,000.
    pub max_yields_per_step: usize,
    /// The largest answer (step output or init result) a guest may return, in bytes.
    /// Default: 16 MiB.
    pub max_output_bytes: usize,
    /// The most elements a process's tables may hold (each costs host memory). Default: 100,000.
    pub max_table_elements: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_memory_bytes: 64 << 20,
            step_time_limit: Duration::from_secs(10),
            max_yields_per_step: 10_000,
            max_output_bytes: 16 << 20,
            max_table_elements: 100_000,
        }
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
    pub(crate) limits: StoreLimits,
}

/// The engine, linker and module cache a host shares among its processes.
pub(crate) struct WasmRuntime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<GuestState>,
    pub(crate) cache: ModuleCache,
    pub(crate) limits: Limits,
    ticker: Ticker,
}

impl WasmRuntime {
    /// `pooling`: instances to pre-allocate for wasmtime's pooling allocator (`None`: allocate on
    /// demand).
    pub(crate) fn new(limits: Limits, pooling: Option<u32>) -> Result<WasmRuntime> {
        let config_error = |e: wasmtime::Error| {
            Error::new(
                ErrorKind::Config,
                format!("could not configure wasmtime: {e:#}"),
            )
        };
        let mut config = Config::new();
        config.epoch_interruption(true);
        if let Some(instances) = pooling {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_core_instances(instances)
                .total_memories(instances)
                .total_tables(instances)
                .max_memories_per_module(1)
                .max_tables_per_module(1)
                .max_memory_size(limits.max_memory_bytes)
                .table_elements(limits.max_table_elements);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            // Reserve only what a memory may grow to, so many slots fit in the address space.
            config.memory_reservation(limits.max_memory_bytes as u64);
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
        linker.allow_shadowing(false);
        let ticker = Ticker::start(engine.clone())?;
        Ok(WasmRuntime {
            engine,
            linker,
            cache: ModuleCache::default(),
            limits,
            ticker,
        })
    }

    /// Compiles (or finds in the cache) a module.
    pub(crate) fn compile(&self, bytes: &[u8]) -> Result<Arc<Compiled>> {
        self.cache.get_or_compile(&self.engine, &self.linker, bytes)
    }

    /// Epoch ticks a call may run.
    pub(crate) fn deadline_ticks(&self) -> u64 {
        (self.limits.step_time_limit.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64
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
