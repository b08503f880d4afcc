//! Pre-initialization: runs a runtime's `wizer-initialize` export once, with the workflow's
//! sources on stdin, and snapshots the instance into a new module (`wasmtime-wizer`).
//!
//! The initialization is the workflow's own top-level code, run here on the builder's machine:
//! it gets no files, no network, no environment and no arguments, only stdin and stdout; it
//! cannot wait (WASI's `poll_oneoff` traps, as on a host), its memory is bounded by
//! [`MAX_MEMORY`], and it is stopped after [`TIME_LIMIT`]. Its clocks are fixed and its
//! randomness one fixed stream, so the same sources build the same module.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use wasmtime::{
    Caller, Config, Engine, Instance, Linker, Module, Store, StoreLimits, StoreLimitsBuilder, Val,
};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{Deterministic, HostMonotonicClock, HostWallClock, WasiCtxBuilder};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

/// How long a workflow's top-level code may run at build time.
pub(crate) const TIME_LIMIT: Duration = Duration::from_secs(60);

/// The most the initialization may print.
const MAX_OUTPUT: usize = 16 << 20;

/// The most memory the initialization may grow to.
pub(crate) const MAX_MEMORY: usize = 512 << 20;

/// The wasm stack the initialization may use, and the thread it runs on (with room for the host's
/// own frames): an interpreter importing modules recurses deeply.
const WASM_STACK: usize = 8 << 20;
const THREAD_STACK: usize = 32 << 20;

/// What the initialization's store holds.
struct Building {
    wasi: WasiP1Ctx,
    limits: StoreLimits,
}

/// The build's clocks: one instant, always (2000-01-01T00:00:00Z).
struct Fixed;

impl HostWallClock for Fixed {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::from_secs(946_684_800)
    }
}

impl HostMonotonicClock for Fixed {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

/// 64 KiB of randomness, the same for every build: top-level code that draws random numbers
/// draws the same ones whatever else changed in the sources, so that a new build of the script
/// replays what the old one started (a stream that followed the sources would change with any
/// edit, and a workflow whose commands depend on it would no longer replay).
fn stream() -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let seed = Sha256::digest(b"wfhost build");
    (0u32..2048)
        .flat_map(|block| {
            let mut hasher = Sha256::new();
            hasher.update(seed);
            hasher.update(block.to_le_bytes());
            hasher.finalize().to_vec()
        })
        .collect()
}

/// What the initialization left.
pub(crate) struct Initialized {
    /// The snapshot, when the initialization returned.
    pub(crate) module: Option<Vec<u8>>,
    /// What it printed on stdout.
    pub(crate) stdout: Vec<u8>,
    /// What it printed on stderr.
    pub(crate) stderr: Vec<u8>,
}

/// Runs `runtime`'s initialization with `stdin`; an error is the runtime's failure (a trap, a
/// snapshot that could not be taken), not the workflow's (that is on stdout).
pub(crate) fn run(runtime: &[u8], stdin: Vec<u8>) -> Result<Initialized, String> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("wfhost-build".into())
            .stack_size(THREAD_STACK)
            .spawn_scoped(scope, || run_here(runtime, stdin))
            .map_err(|e| format!("cannot start the build's thread: {e}"))?
            .join()
            .map_err(|_| "the build's thread panicked".to_string())?
    })
}

fn run_here(runtime: &[u8], stdin: Vec<u8>) -> Result<Initialized, String> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.max_wasm_stack(WASM_STACK);
    config.async_stack_size(WASM_STACK + (1 << 20));
    let engine = Engine::new(&config).map_err(|e| e.to_string())?;

    let wizer = Wizer::new();
    let (context, instrumented) = wizer.instrument(runtime).map_err(|e| e.to_string())?;
    let module = Module::new(&engine, &instrumented).map_err(|e| e.to_string())?;

    let stdout = MemoryOutputPipe::new(MAX_OUTPUT);
    let stderr = MemoryOutputPipe::new(MAX_OUTPUT);
    let randomness = stream();
    let wasi = WasiCtxBuilder::new()
        .stdin(MemoryInputPipe::new(stdin))
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .wall_clock(Fixed)
        .monotonic_clock(Fixed)
        .secure_random(Deterministic::new(randomness.clone()))
        .insecure_random(Deterministic::new(randomness))
        .insecure_random_seed(0)
        .build_p1();
    let limits = StoreLimitsBuilder::new()
        .memory_size(MAX_MEMORY)
        .trap_on_grow_failure(true)
        .build();
    let mut store = Store::new(&engine, Building { wasi, limits });
    store.limiter(|building| &mut building.limits);
    store.set_epoch_deadline(1);
    let ticker = Ticker::start(engine.clone());

    let mut linker: Linker<Building> = Linker::new(&engine);
    p1::add_to_linker_sync(&mut linker, |building| &mut building.wasi)
        .map_err(|e| e.to_string())?;
    // Waiting blocks the thread where no epoch can stop it: refused, as a host refuses it.
    linker.allow_shadowing(true);
    linker
        .func_wrap(
            "wasi_snapshot_preview1",
            "poll_oneoff",
            |_: Caller<'_, Building>, _: i32, _: i32, _: i32, _: i32| -> wasmtime::Result<i32> {
                Err(wasmtime::Error::msg(
                    "the workflow's top-level code waited (time.sleep): a workflow waits with \
                     `await ctx.sleep(...)` inside an entry point",
                ))
            },
        )
        .map_err(|e| e.to_string())?;
    // The host's own functions (`wfhost::patched`, ...) are for workflows that run: the
    // initialization only loads code, and a call of one fails it.
    linker
        .define_unknown_imports_as_traps(&module)
        .map_err(|e| e.to_string())?;
    let instance = linker
        .instantiate(&mut store, &module)
        .map_err(|e| e.to_string())?;
    let called = (|| -> wasmtime::Result<()> {
        if let Some(start) = instance.get_func(&mut store, "_initialize") {
            start.typed::<(), ()>(&store)?.call(&mut store, ())?;
        }
        instance
            .get_typed_func::<(), ()>(&mut store, wizer.get_init_func())?
            .call(&mut store, ())
    })();
    drop(ticker);
    let snapshot = match called {
        Ok(()) => {
            let mut state = Snapshot {
                store: &mut store,
                instance,
            };
            Some(ready(wizer.snapshot(&context, &mut state)).map_err(|e| e.to_string())?)
        }
        // It exited (the runtime reports a failure of the workflow's code so, after printing
        // it), or it was stopped: the caller reads what it printed.
        Err(error) => {
            if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
                if exit.0 == 0 {
                    return Err("the runtime exited during its initialization".into());
                }
                None
            } else if error.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
                return Err(format!(
                    "the workflow's top-level code ran for more than {} s: it must only define \
                     things (entry points, constants, functions)",
                    TIME_LIMIT.as_secs()
                ));
            } else {
                return Err(format!("{error:#}"));
            }
        }
    };
    drop(store);
    Ok(Initialized {
        module: snapshot,
        stdout: stdout.contents().to_vec(),
        stderr: stderr.contents().to_vec(),
    })
}

/// Interrupts the initialization once [`TIME_LIMIT`] has passed.
struct Ticker {
    stop: std::sync::mpsc::Sender<()>,
}

impl Ticker {
    fn start(engine: Engine) -> Ticker {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if stopped.recv_timeout(TIME_LIMIT) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                engine.increment_epoch();
            }
        });
        Ticker { stop }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

/// The instance, as `wasmtime-wizer` reads it for the snapshot.
struct Snapshot<'a> {
    store: &'a mut Store<Building>,
    instance: Instance,
}

impl InstanceState for Snapshot<'_> {
    async fn global_get(&mut self, name: &str, _type: ValType) -> SnapshotVal {
        let global = self
            .instance
            .get_global(&mut *self.store, name)
            .expect("wizer exports the globals it reads");
        match global.get(&mut *self.store) {
            Val::I32(x) => SnapshotVal::I32(x),
            Val::I64(x) => SnapshotVal::I64(x),
            Val::F32(x) => SnapshotVal::F32(x),
            Val::F64(x) => SnapshotVal::F64(x),
            Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            other => panic!("a global of a type the snapshot does not take: {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self
            .instance
            .get_memory(&mut *self.store, name)
            .expect("wizer exports the memories it reads");
        contents(memory.data(&*self.store))
    }
}

/// The value of a future that never waits (the snapshot of an instance already here).
fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => value,
        Poll::Pending => unreachable!("the snapshot reads an instance that is here"),
    }
}
