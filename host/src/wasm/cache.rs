//! Compiling each distinct module once: in memory while anything uses it, and on disk (when the
//! host has a cache directory) so that the next start of the host does not compile it again.
//!
//! Loading compiled code from disk runs it as native code (`Module::deserialize` is unsafe), so a
//! file is loaded only when: the cache directory belongs to this user and nobody else may write to
//! it (checked when the cache is opened); the file, opened without following a symlink, is a
//! regular file that belongs to this user and nobody else may write to (checked on the open
//! handle, which the file is then read through); and the SHA-256 digest stored in its trailer
//! matches the serialized module. Anything else is a miss: the module is compiled and the file
//! written again. The directory is created with mode 0700 and files with mode 0600, whatever the
//! umask, each written under a name of its own, synced, then renamed into place. What remains
//! trusted: whoever can write as this user can write the cache (as they could the host's binary).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
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
    /// A lock per module being compiled: loads of the same bytes that come together compile
    /// them once, the others waiting for that compile rather than compiling again.
    compiling: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Modules compiled so far (not loaded from disk).
    compiled_count: AtomicU64,
}

/// Removes a module's compile lock once its load is over (whatever its outcome).
struct Compiling<'a> {
    cache: &'a ModuleCache,
    sha256: &'a str,
}

impl Drop for Compiling<'_> {
    fn drop(&mut self) {
        self.cache.compiling.lock().remove(self.sha256);
    }
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
            compiling: Mutex::new(HashMap::new()),
            compiled_count: AtomicU64::new(0),
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
        let gate = Arc::clone(
            self.compiling
                .lock()
                .entry(info.sha256.clone())
                .or_default(),
        );
        let _turn = gate.lock();
        let sha256 = info.sha256.clone();
        let _compiling = Compiling {
            cache: self,
            sha256: &sha256,
        };
        // Compiled meanwhile, by the load that had the turn before.
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
                self.compiled_count.fetch_add(1, Ordering::Relaxed);
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

    /// Modules compiled so far.
    pub(crate) fn compiles(&self) -> u64 {
        self.compiled_count.load(Ordering::Relaxed)
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
/// write to it (`SECURITY.md`). Each file is trusted on its own too: it is opened without
/// following a symlink, and the open handle's owner and mode are checked as the directory's are,
/// before it is read through that same handle. The file ends in a SHA-256 digest of the
/// serialized module (see [`TRAILER_MAGIC`]), checked before the module is deserialized, so a
/// torn or damaged file is compiled again rather than loaded. wasmtime refuses files written by
/// another version or configuration (then too the module is compiled again and the file
/// replaced).
///
/// The directory is created with mode 0700 and files with mode 0600, so that they pass these
/// checks whatever the umask; files are written under a unique temporary name, synced, and
/// renamed into place.
struct DiskCache {
    dir: PathBuf,
    /// Names the engine's configuration in file names, so engines configured differently (fuel,
    /// memory reservations) do not share files.
    engine: u64,
}

/// Closes every cache file: `<wasmtime's serialized module> <SHA-256 of it: 32 bytes> <this>`.
/// The last byte is the format's version; a file without it (an older format, a torn write) is a
/// miss.
const TRAILER_MAGIC: &[u8; 8] = b"wfhcwsm\x01";

/// The length of the trailer after the serialized module: its digest and [`TRAILER_MAGIC`].
const TRAILER_LEN: usize = DIGEST_LEN + TRAILER_MAGIC.len();

/// The length of a SHA-256 digest.
const DIGEST_LEN: usize = 32;

/// Numbers this process's temporary files, so that concurrent stores (of the same module, too)
/// never write to the same file.
static TEMP_FILES: AtomicU64 = AtomicU64::new(0);

impl DiskCache {
    /// The cache in `dir` (created if missing, with mode 0700), or `None`, with a warning, when
    /// it cannot be used.
    fn open(engine: &Engine, dir: PathBuf) -> Option<DiskCache> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            // Only what is created here gets this mode: an existing directory keeps its own, and
            // is checked below.
            builder.mode(0o700);
        }
        if let Err(error) = builder.create(&dir) {
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

    /// The name of the file holding the module compiled from `source`.
    fn file_name(&self, source: &[u8]) -> String {
        let digest = Sha256::digest(source);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}-{:016x}.cwasm", self.engine)
    }

    /// The module compiled from `source`, if a usable file holds it.
    fn load(&self, engine: &Engine, source: &[u8]) -> Option<Module> {
        let path = self.dir.join(self.file_name(source));
        let contents = match read_trusted(&path) {
            Ok(Some(contents)) => contents,
            Ok(None) => return None,
            Err(reason) => {
                tracing::warn!(
                    path = %path.display(),
                    "not loading a compiled module: {reason}; compiling it again"
                );
                return None;
            }
        };
        let serialized = match verified(&contents) {
            Ok(serialized) => serialized,
            Err(Unverified::Format) => {
                tracing::debug!(
                    path = %path.display(),
                    "a cached module is not in this host's format (an older one, or cut short); \
                     compiling it again"
                );
                return None;
            }
            Err(Unverified::Digest) => {
                tracing::warn!(
                    path = %path.display(),
                    "a cached module is damaged (its SHA-256 digest does not match); compiling \
                     it again"
                );
                return None;
            }
        };
        // SAFETY: `Module::deserialize` requires bytes from wasmtime's own serialization, not
        // tampered with. What guards that here: the directory belonged to this user and was
        // writable by nobody else when the cache was opened; the file was opened without
        // following a symlink and its handle's owner (this user), type (a regular file) and mode
        // (writable by nobody else) were checked, then read through that same handle, so no
        // path lookup comes between the check and the read; its SHA-256 digest, written by
        // `store` with wasmtime's serialization, matches, so a torn write or a damaged disk is
        // refused; and wasmtime checks that its version and configuration match this engine's.
        // The bytes are in memory (and wasmtime copies them), so a later change to the file
        // changes nothing. What remains trusted: whoever can write as this user (who could as
        // well replace the host's binary) can write files that pass all of these checks.
        match unsafe { Module::deserialize(engine, serialized) } {
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
        let name = self.file_name(source);
        let path = self.dir.join(&name);
        let serialized = match module.serialize() {
            Ok(serialized) => serialized,
            Err(error) => {
                tracing::warn!(
                    path = %path.display(),
                    "could not cache a compiled module: cannot serialize it ({error:#})"
                );
                return;
            }
        };
        let digest = Sha256::digest(&serialized);
        // Written aside under a name no other store uses (this process's id and a number of its
        // own; a clash with another process's file fails to create it rather than sharing it),
        // synced, and renamed, so that a crash or a concurrent store never leaves a torn file
        // under the real name.
        let temp = self.dir.join(format!(
            "{name}.{}-{}.tmp",
            std::process::id(),
            TEMP_FILES.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = match create_private(&temp) {
            Ok(file) => file,
            Err(error) => {
                tracing::warn!(
                    path = %temp.display(),
                    "could not cache a compiled module: cannot create the file ({error})"
                );
                return;
            }
        };
        let written = file
            .write_all(&serialized)
            .and_then(|()| file.write_all(&digest))
            .and_then(|()| file.write_all(TRAILER_MAGIC))
            .and_then(|()| file.sync_all());
        drop(file);
        if let Err(error) = written.and_then(|()| std::fs::rename(&temp, &path)) {
            if let Err(remove) = std::fs::remove_file(&temp) {
                tracing::debug!(
                    path = %temp.display(),
                    "could not remove a temporary file of the module cache ({remove})"
                );
            }
            tracing::warn!(path = %path.display(), "could not cache a compiled module: {error}");
        }
    }
}

/// Why a cache file's contents were not taken.
enum Unverified {
    /// No trailer of this format: too short, an older format, or cut short.
    Format,
    /// The trailer is there but the digest does not match the serialized module.
    Digest,
}

/// The serialized module in `contents` (a cache file's), once its trailer's digest matches.
fn verified(contents: &[u8]) -> std::result::Result<&[u8], Unverified> {
    let Some(body_len) = contents.len().checked_sub(TRAILER_LEN) else {
        return Err(Unverified::Format);
    };
    let (serialized, trailer) = contents.split_at(body_len);
    let (digest, magic) = trailer.split_at(DIGEST_LEN);
    if magic != TRAILER_MAGIC.as_slice() {
        return Err(Unverified::Format);
    }
    if Sha256::digest(serialized).as_slice() != digest {
        return Err(Unverified::Digest);
    }
    Ok(serialized)
}

/// The contents of the cache file at `path`, read through one handle whose owner and mode were
/// checked (see [`trusted_metadata`]); on unix a symlink is refused, not followed. `Ok(None)`:
/// there is no such file.
fn read_trusted(path: &Path) -> std::result::Result<Option<Vec<u8>>, String> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking too: a FIFO planted under a cache name must not hang the load (reads of
        // a regular file ignore the flag).
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let mut file = match options.open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot open it ({error})")),
    };
    // The open file's own metadata (fstat): what is checked is what is read.
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read its metadata ({e})"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".to_owned());
    }
    trusted_metadata(&meta)?;
    let mut contents = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut contents)
        .map_err(|e| format!("cannot read it ({e})"))?;
    Ok(Some(contents))
}

/// Creates a new file at `path` for writing, failing if anything (a symlink too) is there
/// already; on unix with mode 0600, so that it passes [`trusted_metadata`] whatever the umask.
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// Whether `path` (the cache directory) may be trusted with native code: see
/// [`trusted_metadata`].
fn trusted(path: &Path) -> std::result::Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read its metadata ({e})"))?;
    trusted_metadata(&meta)
}

/// Whether what `meta` describes may be trusted with native code: owned by this user, and
/// writable by nobody else.
#[cfg(unix)]
fn trusted_metadata(meta: &std::fs::Metadata) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
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

/// Elsewhere, the directory and its files are taken on trust (their digests are still checked).
#[cfg(not(unix))]
fn trusted_metadata(_: &std::fs::Metadata) -> std::result::Result<(), String> {
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
