//! WebAssembly processes: the only module that names wasmtime types.
//!
//! One [`Engine`] per host; each distinct module compiled once (by content hash, and kept on disk
//! when the host has a module cache directory) into an `InstancePre`; one `Store` and instance per
//! running process, or, hibernated, the pages and globals that differ from a fresh one. A ticker
//! thread advances the engine's epoch so that a call that runs too long is interrupted.
//!
//! | File | What |
//! |---|---|
//! | `limits.rs` | The sandbox's limits and the store limiter. |
//! | `module.rs`, `cache.rs` | Reading and checking modules; compiling each once, in memory and on disk. |
//! | `wasi.rs` | WASI preview 1 with nothing behind it; guest output to the log. |
//! | `process/` | A wasm instance as a scheduler `Process`: life cycle, calls into the guest, traps. |
//! | `instances.rs`, `warm.rs` | Counting instances against the capacity, the queue for one, warm instances. |
//! | `hibernate/` | Saving a waiting process as the pages and globals that differ, and restoring it. |

#[doc(hidden)]
#[cfg(feature = "testing")]
pub mod bench;
mod cache;
pub(crate) mod capacity;
mod hibernate;
mod instances;
mod limits;
mod module;
mod process;
pub(crate) mod reads;
mod warm;
mod wasi;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, Linker, PoolingAllocationConfig};
use wasmtime_wasi::p1::WasiP1Ctx;
use wfcontract::Pid;
use wfhost_scheduler::Waker;

pub use hibernate::Hibernation;
pub use instances::Residency;
pub(crate) use instances::{InstanceSlot, Instances, Ticket};
pub(crate) use limits::{GuestLimiter, Refusal};
pub use limits::{Limits, DEFAULT_MAX_CPU_TIME};
pub use module::ModuleInfo;
pub(crate) use module::{Compiled, Loaded};
pub(crate) use process::{ProcessSpec, SavedProcess, WasmProcess};

use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use cache::ModuleCache;
use warm::WarmPool;

/// How often the epoch advances: the granularity of the step time limit.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

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
    /// How the WASI clocks and `random_get` are answered: the running process's, swapped in for
    /// each call into the guest.
    pub(crate) reads: reads::ReadState,
}

/// Bytes of a pooled slot's linear memory kept resident when its instance goes, with the page
/// scan ([`HostBuilder::page_scan_reset`](crate::HostBuilder::page_scan_reset)): the pages the
/// instance wrote, up to this many, are set back to the module's image in place, so the next
/// instance in the slot faults none of them in.
const MEMORY_KEEP_RESIDENT: usize = 1 << 20;
/// Bytes of a pooled slot's tables kept resident, zeroed in place when its instance goes (all of
/// a small table; with the page scan, the pages written).
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// The pooling allocator's settings for `instances` slots within `limits`; `page_scan`: reset
/// memory in place, finding the pages written with the kernel's page-map scan.
fn pooling(instances: u32, limits: &Limits, page_scan: bool) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    let memories = u32::try_from(limits.max_memories).unwrap_or(u32::MAX);
    let tables = u32::try_from(limits.max_tables).unwrap_or(u32::MAX);
    pool.total_core_instances(instances)
        .total_memories(instances.saturating_mul(memories))
        .total_tables(instances.saturating_mul(tables))
        .max_memories_per_module(memories)
        .max_tables_per_module(tables)
        .max_memory_size(limits.max_memory_bytes)
        .table_elements(limits.max_table_elements)
        // An instance's own state (its vmctx) grows with the module: do not refuse a module that
        // would load on demand.
        .max_core_instance_size(limits.max_module_bytes.saturating_mul(4).max(1 << 20))
        // Reuse a slot another instance left before taking one never used: its pages are
        // already faulted in, and fewer slots hold resident pages.
        .max_unused_warm_slots(0);
    if page_scan && PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            .pagemap_scan(wasmtime::Enabled::Yes);
    } else {
        // Without the scan, keeping memory resident would rewrite the first bytes of every slot
        // whether touched or not (a Rust guest's stack lies there, mostly untouched): give the
        // pages back instead, in batches (of at most 1/256 of the slots, which wait in the batch
        // meanwhile). A table's first page is zeroed in place.
        let batch = (instances as usize / 256).clamp(1, 64);
        pool.table_keep_resident(4096).decommit_batch_size(batch);
    }
    pool
}

/// The engine, linker and module cache a host shares among its processes.
pub(crate) struct WasmRuntime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<GuestState>,
    cache: ModuleCache,
    /// The host's limits: every process's, unless it was spawned with its own.
    pub(crate) limits: Arc<Limits>,
    /// Live instances, the queue for one, and hibernated processes.
    pub(crate) instances: Arc<Instances>,
    /// Instances kept for the next restore of their module.
    pub(crate) warm: Arc<WarmPool>,
    /// Whether the engine counts fuel (then a process may be given its own fuel limit).
    pub(crate) fuel: bool,
    /// The most epoch ticks any call may be given: what `interrupt_all` advances the epoch by.
    longest_deadline: AtomicU64,
    /// Set once the host interrupted every guest to shut down.
    pub(crate) interrupted: AtomicBool,
    /// What the live processes spawned with their own limits or narrowed grants pass on to their
    /// children.
    inherited: parking_lot::Mutex<HashMap<Pid, Inherited>>,
    ticker: Ticker,
    /// Where steps' durations are counted, if anywhere.
    pub(crate) metrics: Option<crate::metrics::Metrics>,
}

/// How the engine is built: see [`WasmRuntime::new`].
#[derive(Clone, Debug, Default)]
pub(crate) struct EngineSettings {
    /// Instances to pre-allocate for wasmtime's pooling allocator (`None`: allocate on demand).
    pub(crate) pooling: Option<u32>,
    /// Map modules' initial memory copy-on-write (see [`MemoryImages`](crate::MemoryImages)).
    pub(crate) copy_on_write: bool,
    /// Reserve small memories (see [`Capacity::compact_memories`](crate::Capacity::compact_memories)).
    pub(crate) compact: bool,
    /// Where compiled modules are kept between runs; `None`: nowhere.
    pub(crate) cache_dir: Option<PathBuf>,
    /// Reset pooled slots in place, finding the pages written with the kernel's page-map scan
    /// (see [`HostBuilder::page_scan_reset`](crate::HostBuilder::page_scan_reset)).
    pub(crate) page_scan: bool,
    /// Where steps' durations are counted, if anywhere.
    pub(crate) metrics: Option<crate::metrics::Metrics>,
}

impl WasmRuntime {
    /// A runtime for processes within `limits`, with an engine built as `settings` says;
    /// `instances` says how many may be live, and when processes hibernate.
    /// A runtime of its own, outside a host (the benchmarks' harness, `wfhost::testing`): no
    /// bound on live instances, none ever hibernated, no module cache, no metrics.
    pub(crate) fn standalone(
        limits: Limits,
        pooling: Option<u32>,
        copy_on_write: bool,
        compact: bool,
    ) -> Result<WasmRuntime> {
        let instances = Instances::new(
            usize::MAX,
            1,
            Hibernation::Off,
            String::new(),
            limits.step_time_limit,
        );
        let settings = EngineSettings {
            pooling,
            copy_on_write,
            compact,
            cache_dir: None,
            page_scan: false,
            metrics: None,
        };
        WasmRuntime::new(limits, settings, instances)
    }

    pub(crate) fn new(
        limits: Limits,
        settings: EngineSettings,
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
        config.memory_init_cow(settings.copy_on_write);
        // Compact: reserve only what a memory may grow to (the limiter refuses more), so that
        // many instances fit in the address space: 64 MiB and its guard rather than wasmtime's
        // 4 GiB. The price is an explicit bounds check on each memory access, which the 4 GiB
        // reservation lets wasmtime leave out.
        // The pooling allocator reserves every slot up front: always compact there.
        if settings.compact || settings.pooling.is_some() {
            config.memory_reservation(limits.max_memory_bytes as u64);
            config.memory_reservation_for_growth(0);
        }
        if let Some(instances) = settings.pooling {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(
                instances,
                &limits,
                settings.page_scan,
            )));
        }
        let engine = Engine::new(&config).map_err(config_error)?;
        let linker = wasi::linker(&engine).map_err(config_error)?;
        let instances = Arc::new(instances);
        let ticker = Ticker::start(engine.clone(), Arc::clone(&instances))?;
        let cache = ModuleCache::new(&engine, settings.cache_dir);
        Ok(WasmRuntime {
            engine,
            linker,
            cache,
            fuel: limits.fuel_per_step.is_some(),
            longest_deadline: AtomicU64::new(limits.deadline_ticks()),
            limits: Arc::new(limits),
            instances,
            warm: Arc::new(WarmPool::default()),
            inherited: parking_lot::Mutex::new(HashMap::new()),
            interrupted: AtomicBool::new(false),
            ticker,
            metrics: settings.metrics,
        })
    }

    /// What process `pid` passes on to its children: its limits (its own, or the host's), and the
    /// grants that bound theirs, if its own were narrowed (see [`ProcessSpec::bound`]).
    pub(crate) fn inherited(&self, pid: Pid) -> Inherited {
        self.inherited
            .lock()
            .get(&pid)
            .cloned()
            .unwrap_or_else(|| Inherited {
                limits: Arc::clone(&self.limits),
                bound: None,
            })
    }

    /// Whether a process running with `spec` passes on anything but the host's defaults (and so
    /// has an entry while it lives).
    pub(crate) fn passes_on(&self, spec: &ProcessSpec) -> bool {
        spec.bound || !Arc::ptr_eq(&spec.limits, &self.limits)
    }

    /// Process `pid` runs with `spec` (`None`: it has ended), for its children to inherit.
    pub(crate) fn note_process(&self, pid: Pid, spec: Option<&ProcessSpec>) {
        match spec {
            Some(spec) if self.passes_on(spec) => {
                let inherited = Inherited {
                    limits: Arc::clone(&spec.limits),
                    bound: spec.bound.then(|| Arc::clone(&spec.grants)),
                };
                self.inherited.lock().insert(pid, inherited);
            }
            Some(_) => {}
            None => {
                self.inherited.lock().remove(&pid);
            }
        }
    }

    /// Compiles (or finds in the caches) a module, refusing one over the module limits.
    pub(crate) fn compile(self: &Arc<Self>, bytes: &[u8]) -> Result<Arc<Compiled>> {
        self.cache.get_or_compile(self, bytes)
    }

    /// Modules compiled since the runtime started.
    pub(crate) fn compiles(&self) -> u64 {
        self.cache.compiles()
    }

    /// Checks limits a process is spawned with against what this engine can do, and notes how
    /// long its calls may run.
    pub(crate) fn admit(&self, limits: &Limits) -> Result<()> {
        limits.validate()?;
        let host = &self.limits;
        let refuse = |what: &str| {
            Err(Error::new(
                ErrorKind::Config,
                format!("a process cannot be given {what} than the host's"),
            ))
        };
        if limits.max_memory_bytes > host.max_memory_bytes {
            return refuse("more memory (max_memory_bytes)");
        }
        if limits.max_table_elements > host.max_table_elements
            || limits.max_tables > host.max_tables
            || limits.max_memories > host.max_memories
        {
            return refuse("more tables or memories");
        }
        if limits.max_stack_bytes != host.max_stack_bytes {
            return refuse("another stack size (max_stack_bytes is the engine's)");
        }
        if limits.fuel_per_step.is_some() != self.fuel {
            return refuse("fuel accounting other (fuel_per_step on or off is the engine's)");
        }
        self.longest_deadline
            .fetch_max(limits.deadline_ticks(), Ordering::Relaxed);
        Ok(())
    }

    /// An instance for a new process: a free one, or one a warm instance gives up. The refusal
    /// says why when every instance is taken.
    pub(crate) fn take_instance(&self) -> std::result::Result<InstanceSlot, String> {
        loop {
            if let Some(slot) = self.instances.take() {
                return Ok(slot);
            }
            if !self.warm.evict_one(&self.instances) {
                return Err(self.instances.refusal().to_string());
            }
        }
    }

    /// An instance for a hibernated process that has events to take, or its place in the queue
    /// for one (`waker` runs it when one is counted for it). Warm instances are given up first.
    pub(crate) fn take_instance_or_queue(
        &self,
        waker: impl FnOnce() -> Waker,
    ) -> std::result::Result<InstanceSlot, Arc<Ticket>> {
        if let Some(slot) = self.instances.take() {
            return Ok(slot);
        }
        while self.warm.evict_one(&self.instances) {
            if let Some(slot) = self.instances.take() {
                return Ok(slot);
            }
        }
        self.instances.take_or_queue(waker)
    }

    /// Interrupts every call into a guest now running (the host is shutting down and will not
    /// wait for them): the epoch jumps past every deadline a call can have.
    pub(crate) fn interrupt_all(&self) {
        self.interrupted.store(true, Ordering::Release);
        let ticks = self
            .longest_deadline
            .load(Ordering::Relaxed)
            .saturating_add(1);
        for _ in 0..ticks {
            self.engine.increment_epoch();
        }
    }

    pub(crate) fn stop(&self) {
        self.ticker.stop();
        self.warm.clear(&self.instances);
    }
}

/// What a process passes on to the children it spawns.
#[derive(Clone)]
pub(crate) struct Inherited {
    /// A child runs within its parent's limits: a process spawned with lower ones cannot escape
    /// them through its children.
    pub(crate) limits: Arc<Limits>,
    /// A child's grants are its module's, but never more than these: a process whose grants were
    /// narrowed (by `SpawnOptions::grants`, or by inheriting this) cannot get its module's full
    /// grants back by spawning. `None`: its module's grants.
    pub(crate) bound: Option<Arc<Grants>>,
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until stopped, and fails the queue for an
/// instance when it has stalled.
struct Ticker {
    stop: Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
    stopped: AtomicBool,
}

impl Ticker {
    fn start(engine: Engine, instances: Arc<Instances>) -> Result<Ticker> {
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
                        instances.expire_stalled();
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
