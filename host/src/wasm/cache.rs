//! Compiling each distinct module once: in memory while anything uses it, and on disk (when the
//! host has a cache directory) so that the next start of the host does not compile it again.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasmtime::{Engine, Module};

use crate::error::{Error, ErrorKind, Result};
use crate::wasm::hibernate;
use crate::wasm::module::{bad, bytes as size, link, Compiled, ModuleInfo};
use crate::wasm::WasmRuntime;

/// Compiles each distinct module once (keyed by content hash).
pub(crate) struct ModuleCache {
    /// What is compiled, while something (a module name, a process) holds it: a module nobody
    /// loads or runs any more is freed, its compiled code, image and warm instances with it.
    compiled: Mutex<HashMap<String, Weak<Compiled>>>,
    /// Hashes of modules whose compile overran the limit: refused at once from then on.
    too_slow: Mutex<HashSet<String>>,
    /// Compiles running, including ones that overran their limit and finish in the background.
    compiles: Arc<CompileSlots>,
    /// Where compiled code is kept between runs, if anywhere.
    disk: Option<DiskCache>,
}

/// At most this many compiles run at once, counting overrunning ones still finishing in the
/// background; a load waits for a free slot, up to its compile time limit.
const MAX_COMPILES: usize = 4;

/// A counting semaphore for compiles.
#[derive(Default)]
struct CompileSlots {
    running: Mutex<usize>,
    freed: parking_lot::Condvar,
}

/// A compile slot, given back when dropped (also if the compiler panics).
struct CompileSlot(Arc<CompileSlots>);

impl CompileSlots {
    /// Takes a slot, waiting until `deadline` for one to free up.
    fn take(self: &Arc<Self>, deadline: Instant) -> Option<CompileSlot> {
        let mut running = self.running.lock();
        while *running >= MAX_COMPILES {
            if self.freed.wait_until(&mut running, deadline).timed_out() {
                return None;
            }
        }
        *running += 1;
        Some(CompileSlot(Arc::clone(self)))
    }
}

impl Drop for CompileSlot {
    fn drop(&mut self) {
        *self.0.running.lock() -= 1;
        self.0.freed.notify_one();
    }
}

impl ModuleCache {
    /// A cache for `engine`'s compiled code, kept on disk in `dir` if given.
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>) -> ModuleCache {
        ModuleCache {
            compiled: Mutex::new(HashMap::new()),
            too_slow: Mutex::new(HashSet::new()),
            compiles: Arc::default(),
            disk: dir.and_then(|dir| DiskCache::open(engine, dir)),
        }
    }

    /// The compiled form of `bytes`, compiling it on first sight. Refuses a module over the
    /// runtime's limits.
    pub(crate) fn get_or_compile(
        &self,
        runtime: &Arc<WasmRuntime>,
        bytes: &[u8],
    ) -> Result<Arc<Compiled>> {
        let limits = &runtime.limits;
        if bytes.len() > limits.max_module_bytes {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "the module is {}, more than the limit of {} (Limits::max_module_bytes, \
                     --max-module-size)",
                    size(bytes.len() as u64),
                    size(limits.max_module_bytes as u64)
                ),
            ));
        }
        let info = ModuleInfo::inspect(bytes)?;
        info.check_limits(limits)?;
        if let Some(compiled) = self.lookup(&info.sha256) {
            return Ok(compiled);
        }
        if self.too_slow.lock().contains(&info.sha256) {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "compiling this module took longer than the limit of {:?} before \
                     (Limits::compile_time_limit, --compile-limit); it is not compiled again",
                    limits.compile_time_limit
                ),
            ));
        }
        let prepared = hibernate::prepare(bytes);
        let source = prepared.rewritten.as_deref().unwrap_or(bytes);
        let module = match self
            .disk
            .as_ref()
            .and_then(|disk| disk.load(&runtime.engine, source))
        {
            Some(module) => {
                tracing::debug!(
                    module = %info.sha256,
                    "loaded its compiled code from the module cache"
                );
                module
            }
            None => {
                let started = Instant::now();
                let module =
                    self.compile(&runtime.engine, &info, source, limits.compile_time_limit)?;
                tracing::debug!(module = %info.sha256, "compiled in {:?}", started.elapsed());
                if let Some(disk) = &self.disk {
                    disk.store(&module, source);
                }
                module
            }
        };
        if let Err(reason) = &prepared.plan {
            tracing::info!(
                module = %info.sha256,
                "processes of this module will not hibernate: {reason}"
            );
        }
        let compiled = Arc::new(link(runtime, info, module, prepared.plan)?);
        let mut cache = self.compiled.lock();
        cache.retain(|_, weak| weak.strong_count() > 0);
        // Another load of the same bytes may have finished first: share its compile.
        if let Some(existing) = cache.get(&compiled.info.sha256).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        cache.insert(compiled.info.sha256.clone(), Arc::downgrade(&compiled));
        Ok(compiled)
    }

    fn lookup(&self, sha256: &str) -> Option<Arc<Compiled>> {
        self.compiled.lock().get(sha256).and_then(Weak::upgrade)
    }

    /// Compiles within the compile time limit, one of at most [`MAX_COMPILES`] at once.
    fn compile(
        &self,
        engine: &Engine,
        info: &ModuleInfo,
        source: &[u8],
        limit: Duration,
    ) -> Result<Module> {
        let deadline = Instant::now() + limit;
        let Some(slot) = self.compiles.take(deadline) else {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "{MAX_COMPILES} other compiles kept the compiler busy for the whole compile \
                     time limit of {limit:?} (some may be modules that overran it); try again later"
                ),
            ));
        };
        // Compiled outside every lock: compilation takes a while and other modules may be
        // loading. Only a compile that overran is remembered as too slow, not one that waited
        // for a slot.
        let compile_deadline = Instant::now() + limit;
        compile_in_time(engine, source, compile_deadline, limit, slot).inspect_err(|e| {
            if e.kind() == ErrorKind::Limit {
                self.too_slow.lock().insert(info.sha256.clone());
            }
        })
    }
}

/// Compiled modules kept on disk, one file per module and engine configuration.
///
/// Loading compiled code runs it as native code, so the directory must be trusted like the host's
/// own binary: it is used only when it belongs to the user the host runs as and nobody else may
/// write to it (`SECURITY.md`). wasmtime refuses files written by another version or
/// configuration (then the module is compiled again and the file replaced).
struct DiskCache {
    dir: PathBuf,
    /// Names the engine's configuration in file names, so engines configured differently (fuel,
    /// memory reservations) do not share files.
    engine: u64,
}

impl DiskCache {
    /// The cache in `dir` (created if missing), or `None`, with a warning, when it cannot be
    /// used.
    fn open(engine: &Engine, dir: PathBuf) -> Option<DiskCache> {
        if let Err(error) = std::fs::create_dir_all(&dir) {
            tracing::warn!(
                dir = %dir.display(),
                "cannot create the module cache directory ({error}); modules are compiled at \
                 every start"
            );
            return None;
        }
        if let Err(reason) = trusted(&dir) {
            tracing::warn!(
                dir = %dir.display(),
                "not using the module cache directory: {reason}; modules are compiled at every \
                 start"
            );
            return None;
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Some(DiskCache {
            dir,
            engine: hasher.finish(),
        })
    }

    fn path(&self, source: &[u8]) -> PathBuf {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(source);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}-{:016x}.cwasm", self.engine))
    }

    /// The module compiled from `source`, if a usable file holds it.
    fn load(&self, engine: &Engine, source: &[u8]) -> Option<Module> {
        let path = self.path(source);
        let bytes = std::fs::read(&path).ok()?;
        if let Err(reason) = trusted(&path) {
            tracing::warn!(path = %path.display(), "not loading a compiled module: {reason}");
            return None;
        }
        // SAFETY: the file was written by `store` below from wasmtime's own serialization, in a
        // directory only this user can write to (checked at open and for the file just now);
        // wasmtime checks that its version and configuration match this engine's. The bytes
        // are read into memory first, so a later change to the file changes nothing.
        match unsafe { Module::deserialize(engine, &bytes) } {
            Ok(module) => Some(module),
            Err(error) => {
                tracing::debug!(
                    path = %path.display(),
                    "a cached module does not fit this engine ({error:#}); compiling it again"
                );
                None
            }
        }
    }

    /// Writes `module` (compiled from `source`) for the next start; a failure only costs that
    /// start a compile, and is logged.
    fn store(&self, module: &Module, source: &[u8]) {
        let path = self.path(source);
        let written = module
            .serialize()
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                // Written aside and renamed, so that a crash or a concurrent host never leaves a
                // torn file under the real name.
                let temp = path.with_extension(format!("tmp{}", std::process::id()));
                std::fs::write(&temp, bytes)
                    .and_then(|()| std::fs::rename(&temp, &path))
                    .map_err(|e| {
                        let _ = std::fs::remove_file(&temp);
                        e.to_string()
                    })
            });
        if let Err(error) = written {
            tracing::warn!(path = %path.display(), "could not cache a compiled module: {error}");
        }
    }
}

/// Whether `path` may be trusted with native code: owned by this user, and writable by nobody
/// else.
#[cfg(unix)]
fn trusted(path: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read its metadata ({e})"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "it belongs to user {}, not to this one ({me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "others may write to it (mode {:o}); chmod go-w it",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// Elsewhere, the directory is taken on trust.
#[cfg(not(unix))]
fn trusted(_: &Path) -> std::result::Result<(), String> {
    Ok(())
}

/// Compiles `bytes` on a thread of its own, holding `slot`, giving up at `deadline`. Cranelift
/// cannot be interrupted, so an overrunning compile finishes in the background (still holding its
/// slot) and its result is dropped; the module size limit bounds how long that can be.
fn compile_in_time(
    engine: &Engine,
    bytes: &[u8],
    deadline: Instant,
    limit: Duration,
    slot: CompileSlot,
) -> Result<Module> {
    let (sender, receiver) = crossbeam_channel::bounded(1);
    let engine = engine.clone();
    let owned = bytes.to_vec();
    std::thread::Builder::new()
        .name("wfhost-compile".into())
        .spawn(move || {
            let _slot = slot;
            let _ = sender.send(Module::from_binary(&engine, &owned));
        })
        .map_err(|e| Error::new(ErrorKind::Config, format!("could not start a thread: {e}")))?;
    let compiled =
        match receiver.recv_deadline(deadline) {
            Ok(compiled) => compiled,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                return Err(Error::new(
                    ErrorKind::Limit,
                    format!(
                        "compiling the module took longer than the limit of {limit:?} \
                     (Limits::compile_time_limit, --compile-limit)"
                    ),
                ))
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Err(bad(
                "the compiler stopped without an answer (it panicked); the module cannot be loaded",
            )),
        };
    compiled.map_err(|e| bad(format!("invalid WebAssembly module: {e:#}")))
}
