//! Hibernation: a process waiting for events gives its instance back and keeps only what makes it
//! itself.
//!
//! Between steps a workflow has no live wasm frames: the SDK's executor returns from `step` with
//! every future parked in linear memory. So a waiting process is fully described by its linear
//! memory and its mutable globals (the stack pointer among them). Hibernating saves the memory pages
//! that differ from the module's initial image and the globals' values, then drops the instance
//! (its memory mappings and resident pages go back to the OS). The next event restores it: a fresh
//! instance of the same module, grown to the saved size, the saved pages written back, the globals
//! set. The guest cannot tell; `step` stays a function of the events it is given.
//!
//! That is sound only for modules whose whole state is memory and globals, which the host checks
//! when it loads a module ([`prepare`]): no start function (it would run again at each restore),
//! one memory, no instruction that changes a table or drops a segment at run time, no mutable
//! reference-typed global. Rust, C and Go toolchains emit such modules for `wasm32-wasip1`. A module
//! that fails the check runs normally and never hibernates; the reason is logged once at load.
//!
//! wasmtime reads and writes only exported globals, so mutable globals a module does not export
//! (Rust's `__stack_pointer`) are exported under `wfhost:global:<index>` by a rewrite of the export
//! section before compiling; nothing else in the module changes.
//!
//! Which pages differ: on Linux, `/proc/self/pagemap` says which pages of the memory were ever
//! touched (present or swapped out); a page never touched still holds its initial contents and is
//! not even read. Touched pages are compared with the initial image. Elsewhere every page is
//! compared.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
#[cfg(target_os = "linux")]
use std::sync::OnceLock;

use wasmparser::{DataKind, ExternalKind, Operator, Parser, Payload as Section, TypeRef, ValType};
use wasmtime::{Global, Memory, Store, Val};

/// When a process that waits for events gives its instance back.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Hibernation {
    /// Never: a process keeps its instance until it finishes, so the host holds at most its
    /// capacity of live instances (see [`Capacity`](crate::Capacity)).
    Off,
    /// When the host is nearly full: a step that leaves its process waiting hibernates it if
    /// more than seven eighths of the host's instance capacity is live. Below that, processes
    /// keep their instances and steps cost nothing extra. The default.
    #[default]
    WhenFull,
    /// After every step that leaves its process waiting: the least memory per waiting process, at
    /// the cost of an instantiation (tens of microseconds) on the next event.
    Always,
}

impl Hibernation {
    /// Parses `off`, `when-full` or `always`.
    pub fn parse(text: &str) -> Option<Hibernation> {
        match text {
            "off" => Some(Hibernation::Off),
            "when-full" => Some(Hibernation::WhenFull),
            "always" => Some(Hibernation::Always),
            _ => None,
        }
    }
}

/// How many processes hold an instance, how many are hibernated, and what the hibernated ones
/// hold: [`Host::residency`](crate::Host::residency).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Residency {
    /// Processes holding a live wasm instance.
    pub live_instances: usize,
    /// Instances kept for reuse: given up by hibernating or finished processes, taken by the next
    /// restore of the same module instead of a new instantiation. At most 16 per module, and only
    /// while the instance capacity has room for them.
    pub warm_instances: usize,
    /// Processes hibernated: waiting, with no instance.
    pub hibernated: usize,
    /// Bytes the hibernated processes' saved state takes on the host's heap.
    pub hibernated_bytes: usize,
    /// Hibernations since the host started.
    pub hibernations: u64,
    /// Restores from hibernation since the host started.
    pub restores: u64,
}

/// The host's instances: how many may be live, when a waiting process hibernates, and the
/// counts behind [`Residency`].
#[derive(Debug)]
pub(crate) struct Instances {
    /// The most live instances (the capacity); one more is refused.
    max: usize,
    /// The policy.
    policy: Hibernation,
    /// Under [`Hibernation::WhenFull`], hibernate when more than this many are live: the capacity
    /// less an eighth of it, and less at least one per worker, so that the processes running at
    /// once always find an instance.
    above: usize,
    /// Why an instance past `max` is refused.
    refusal: String,
    /// Worker threads: processes that may be running, each with an instance, at once.
    workers: usize,
    live: AtomicUsize,
    /// Of `live`, the instances kept warm for reuse.
    warm: AtomicUsize,
    hibernated: AtomicUsize,
    hibernated_bytes: AtomicUsize,
    hibernations: AtomicU64,
    restores: AtomicU64,
}

/// A live instance, counted until dropped.
#[derive(Debug)]
pub(crate) struct InstanceSlot(Arc<Instances>);

impl Drop for InstanceSlot {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Instances {
    /// At most `max` live instances, used by `workers` worker threads; `refusal` says why one
    /// more is refused.
    pub(crate) fn new(
        max: usize,
        workers: usize,
        policy: Hibernation,
        refusal: String,
    ) -> Instances {
        Instances {
            max,
            policy,
            above: max.saturating_sub((max / 8).max(workers)),
            refusal,
            workers,
            live: AtomicUsize::new(0),
            warm: AtomicUsize::new(0),
            hibernated: AtomicUsize::new(0),
            hibernated_bytes: AtomicUsize::new(0),
            hibernations: AtomicU64::new(0),
            restores: AtomicU64::new(0),
        }
    }

    /// Counts one more live instance, or says why there cannot be one.
    pub(crate) fn take(self: &Arc<Self>) -> Result<InstanceSlot, &str> {
        self.live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                (live < self.max).then_some(live + 1)
            })
            .map_err(|_| self.refusal.as_str())?;
        Ok(InstanceSlot(Arc::clone(self)))
    }

    /// Whether an instance given up by a process may be kept for reuse: only while the processes
    /// that can run at once (one per worker) still find instances.
    pub(crate) fn may_keep_warm(&self) -> bool {
        self.live.load(Ordering::Relaxed) + self.workers <= self.max
    }

    /// Whether a process that has just stepped and waits should hibernate now.
    pub(crate) fn should_hibernate(&self) -> bool {
        match self.policy {
            Hibernation::Off => false,
            Hibernation::Always => true,
            Hibernation::WhenFull => self.live.load(Ordering::Relaxed) > self.above,
        }
    }

    pub(crate) fn hibernated(&self, bytes: usize) {
        self.hibernated.fetch_add(1, Ordering::Relaxed);
        self.hibernated_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.hibernations.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of `bytes` is gone: restored (`restored`) or dropped with its process.
    pub(crate) fn woken(&self, bytes: usize, restored: bool) {
        self.hibernated.fetch_sub(1, Ordering::Relaxed);
        self.hibernated_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if restored {
            self.restores.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One more instance kept warm (`true`) or one taken back (`false`).
    pub(crate) fn warm(&self, kept: bool) {
        if kept {
            self.warm.fetch_add(1, Ordering::Relaxed);
        } else {
            self.warm.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn residency(&self) -> Residency {
        let warm = self.warm.load(Ordering::Relaxed);
        Residency {
            live_instances: self.live.load(Ordering::Relaxed).saturating_sub(warm),
            warm_instances: warm,
            hibernated: self.hibernated.load(Ordering::Relaxed),
            hibernated_bytes: self.hibernated_bytes.load(Ordering::Relaxed),
            hibernations: self.hibernations.load(Ordering::Relaxed),
            restores: self.restores.load(Ordering::Relaxed),
        }
    }
}

/// The export name given to a mutable global the module does not export.
fn global_export(index: u32) -> String {
    format!("wfhost:global:{index}")
}

/// A module readied for hibernation: the bytes to compile (with its mutable globals exported) and
/// what the host needs to hibernate its processes, or why it cannot.
pub(crate) struct Prepared {
    /// The module rewritten, when some mutable global had to be exported; `None`: compile the
    /// original bytes.
    pub(crate) rewritten: Option<Vec<u8>>,
    pub(crate) plan: Result<HibernationPlan, String>,
}

/// How to hibernate one module's processes.
pub(crate) struct HibernationPlan {
    /// The export names of its mutable globals, in index order.
    pub(crate) globals: Vec<String>,
    /// The module's initial linear memory, from its data segments, up to the end of the last one
    /// rounded up to a whole [`CHUNK`] (zeros after that).
    pub(crate) image: Box<[u8]>,
}

/// Checks whether a module's processes can hibernate, and exports its mutable globals if so.
/// The module has passed [`ModuleInfo::inspect`](crate::ModuleInfo::inspect); a module this
/// cannot parse is left as it is, for the compiler to reject.
pub(crate) fn prepare(bytes: &[u8]) -> Prepared {
    let unchanged = |reason: String| Prepared {
        rewritten: None,
        plan: Err(reason),
    };
    let mutable = match analyse(bytes) {
        Ok(mutable) => mutable,
        Err(reason) => return unchanged(reason),
    };
    let mut globals = Vec::with_capacity(mutable.globals.len());
    let mut added = Vec::new();
    for index in mutable.globals {
        match mutable.exported.get(&index) {
            Some(name) => globals.push(name.clone()),
            None => {
                let name = global_export(index);
                if mutable.names.contains(&name) {
                    return unchanged(format!("it already exports a '{name}'"));
                }
                globals.push(name.clone());
                added.push((name, index));
            }
        }
    }
    let rewritten = if added.is_empty() {
        None
    } else {
        match export_globals(bytes, &added) {
            Ok(bytes) => Some(bytes),
            Err(reason) => return unchanged(reason),
        }
    };
    Prepared {
        rewritten,
        plan: Ok(HibernationPlan {
            globals,
            image: mutable.image.into_boxed_slice(),
        }),
    }
}

/// What hibernation needs to know of a module: its mutable globals, its exports, its initial
/// memory.
struct Analysis {
    /// Indices of the mutable globals, ascending.
    globals: Vec<u32>,
    /// Exported globals: index to export name.
    exported: HashMap<u32, String>,
    /// Every export name.
    names: HashSet<String>,
    /// The initial memory, up to the end of the last data segment.
    image: Vec<u8>,
}

/// Reads what hibernation needs of a module, or says why its state is more than memory and
/// globals.
fn analyse(bytes: &[u8]) -> Result<Analysis, String> {
    let malformed = |e: wasmparser::BinaryReaderError| format!("it could not be parsed ({e})");
    let mut found = Analysis {
        globals: Vec::new(),
        exported: HashMap::new(),
        names: HashSet::new(),
        image: Vec::new(),
    };
    // Immutable globals with constant values, for data segment offsets.
    let mut constants: HashMap<u32, u64> = HashMap::new();
    let mut imported_globals = 0u32;
    let mut memories = 0usize;
    // The initial size of the defined memory, in bytes (an imported one's is unknown).
    let mut initial_memory: Option<u64> = None;
    for section in Parser::new(0).parse_all(bytes) {
        match section.map_err(malformed)? {
            Section::StartSection { .. } => {
                return Err(
                    "it has a start function, which would run again at every restore".into(),
                )
            }
            Section::ImportSection(reader) => {
                for import in reader.into_imports() {
                    match import.map_err(malformed)?.ty {
                        TypeRef::Global(ty) if ty.mutable => {
                            return Err("it imports a mutable global".into())
                        }
                        TypeRef::Global(_) => imported_globals += 1,
                        TypeRef::Memory(_) => memories += 1,
                        _ => {}
                    }
                }
            }
            Section::MemorySection(reader) => {
                for memory in reader {
                    let memory = memory.map_err(malformed)?;
                    let page = 1u64
                        .checked_shl(memory.page_size_log2.unwrap_or(16))
                        .unwrap_or(u64::MAX);
                    initial_memory = Some(memory.initial.saturating_mul(page));
                    memories += 1;
                }
            }
            Section::GlobalSection(reader) => {
                for (offset, global) in reader.into_iter().enumerate() {
                    let global = global.map_err(malformed)?;
                    let index = imported_globals + offset as u32;
                    if !global.ty.mutable {
                        if let Ok(value) = constant(&global.init_expr, &HashMap::new()) {
                            constants.insert(index, value);
                        }
                        continue;
                    }
                    if !matches!(
                        global.ty.content_type,
                        ValType::I32 | ValType::I64 | ValType::F32 | ValType::F64 | ValType::V128
                    ) {
                        return Err("it has a mutable reference-typed global".into());
                    }
                    found.globals.push(index);
                }
            }
            Section::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(malformed)?;
                    if export.kind == ExternalKind::Global {
                        found.exported.insert(export.index, export.name.to_string());
                    }
                    found.names.insert(export.name.to_string());
                }
            }
            Section::DataSection(reader) => {
                for data in reader {
                    let data = data.map_err(malformed)?;
                    let DataKind::Active { offset_expr, .. } = data.kind else {
                        continue;
                    };
                    let start = constant(&offset_expr, &constants)
                        .map_err(|_| "it computes a data segment's offset".to_string())?;
                    let end = start.saturating_add(data.data.len() as u64);
                    // A segment outside the initial memory fails instantiation anyway; the image
                    // is held on the host's heap, so it is bounded.
                    if initial_memory.is_none_or(|initial| end > initial) {
                        return Err("it has a data segment outside its initial memory".into());
                    }
                    if end > MAX_IMAGE as u64 {
                        return Err(format!(
                            "its initial data spans more than {} MiB",
                            MAX_IMAGE >> 20
                        ));
                    }
                    let (start, end) = (start as usize, end as usize);
                    if found.image.len() < end {
                        found.image.resize(end, 0);
                    }
                    found.image[start..end].copy_from_slice(data.data);
                }
            }
            Section::CodeSectionEntry(body) => {
                let mut operators = body.get_operators_reader().map_err(malformed)?;
                while !operators.eof() {
                    if let Some(what) = state_beyond_memory(&operators.read().map_err(malformed)?) {
                        return Err(format!("its code {what} at run time"));
                    }
                }
            }
            _ => {}
        }
    }
    if memories != 1 {
        return Err(format!("it has {memories} linear memories, not one"));
    }
    // Whole chunks, so that a chunk holding the end of the data compares with the image, not
    // with zeros.
    found
        .image
        .resize(found.image.len().next_multiple_of(CHUNK), 0);
    Ok(found)
}

/// The largest initial image (up to the end of the last data segment) a hibernating module may
/// have: each compiled module keeps its image on the host's heap.
const MAX_IMAGE: usize = 64 << 20;

/// The value of a constant expression that is a single constant, or a read of a global in
/// `constants`.
fn constant(expr: &wasmparser::ConstExpr<'_>, constants: &HashMap<u32, u64>) -> Result<u64, ()> {
    let mut reader = expr.get_operators_reader();
    let value = match reader.read().map_err(|_| ())? {
        Operator::I32Const { value } => u64::from(value as u32),
        Operator::I64Const { value } => value as u64,
        Operator::GlobalGet { global_index } => *constants.get(&global_index).ok_or(())?,
        _ => return Err(()),
    };
    match reader.read().map_err(|_| ())? {
        Operator::End if reader.eof() => Ok(value),
        _ => Err(()),
    }
}

/// What an instruction changes beyond linear memory and globals, if anything.
fn state_beyond_memory(operator: &Operator<'_>) -> Option<&'static str> {
    match operator {
        Operator::TableSet { .. }
        | Operator::TableGrow { .. }
        | Operator::TableFill { .. }
        | Operator::TableCopy { .. }
        | Operator::TableInit { .. } => Some("changes a table"),
        Operator::ElemDrop { .. } | Operator::DataDrop { .. } => Some("drops a segment"),
        Operator::MemoryInit { .. } => Some("copies from a passive data segment"),
        _ => None,
    }
}

/// The module with `added` (name, global index) appended to its exports; every other section is
/// copied as it is.
fn export_globals(bytes: &[u8], added: &[(String, u32)]) -> Result<Vec<u8>, String> {
    let malformed = |e: wasmparser::BinaryReaderError| format!("it could not be parsed ({e})");
    let mut module = wasm_encoder::Module::new();
    let mut exports_written = false;
    let extra = |section: &mut wasm_encoder::ExportSection| {
        for (name, index) in added {
            section.export(name, wasm_encoder::ExportKind::Global, *index);
        }
    };
    for section in Parser::new(0).parse_all(bytes) {
        let section = section.map_err(malformed)?;
        match &section {
            Section::ExportSection(reader) => {
                let mut exports = wasm_encoder::ExportSection::new();
                for export in reader.clone() {
                    let export = export.map_err(malformed)?;
                    let kind = match export.kind {
                        ExternalKind::Func => wasm_encoder::ExportKind::Func,
                        ExternalKind::Table => wasm_encoder::ExportKind::Table,
                        ExternalKind::Memory => wasm_encoder::ExportKind::Memory,
                        ExternalKind::Global => wasm_encoder::ExportKind::Global,
                        ExternalKind::Tag => wasm_encoder::ExportKind::Tag,
                        other => return Err(format!("it has an export of kind {other:?}")),
                    };
                    exports.export(export.name, kind, export.index);
                }
                extra(&mut exports);
                module.section(&exports);
                exports_written = true;
            }
            other => {
                if let Some((id, range)) = other.as_section() {
                    module.section(&wasm_encoder::RawSection {
                        id,
                        data: &bytes[range],
                    });
                }
            }
        }
    }
    // A workflow module always has exports (the ABI's); this is for completeness.
    if !exports_written {
        return Err("it has no export section".into());
    }
    Ok(module.finish())
}

/// A hibernated process: what differs from a fresh instance of its module.
pub(crate) struct Snapshot {
    /// The linear memory's size in bytes.
    memory_bytes: usize,
    /// The mutable globals' values, in the plan's order.
    globals: Box<[Val]>,
    /// The indices of the saved chunks, each [`CHUNK`] bytes of memory.
    chunks: Box<[u32]>,
    /// The saved chunks' bytes, one after another (the last may be short, at the memory's end),
    /// LZ4-compressed: what a waiting process leaves in memory is mostly zeros and small numbers.
    data: Box<[u8]>,
    /// The saved chunks' bytes before compression.
    raw_len: usize,
}

/// The granularity of the diff: the OS page, as the pagemap reports.
const CHUNK: usize = 4096;

static ZEROS: [u8; CHUNK] = [0; CHUNK];

impl Snapshot {
    /// Saves the state of a process's instance: its globals, and the chunks of `memory` that differ
    /// from `image`.
    pub(crate) fn take<T>(
        store: &mut Store<T>,
        memory: Memory,
        globals: &[Global],
        image: &[u8],
    ) -> Snapshot {
        let values: Box<[Val]> = globals.iter().map(|g| g.get(&mut *store)).collect();
        let data = memory.data(&*store);
        let touched = touched_chunks(data);
        let mut chunks = Vec::new();
        let mut saved = Vec::new();
        for index in 0..data.len().div_ceil(CHUNK) {
            if touched.as_ref().is_some_and(|t| !t[index]) {
                continue;
            }
            let start = index * CHUNK;
            let end = (start + CHUNK).min(data.len());
            let now = &data[start..end];
            let initial = image.get(start..end).unwrap_or(&ZEROS[..end - start]);
            if now != initial {
                chunks.push(index as u32);
                saved.extend_from_slice(now);
            }
        }
        Snapshot {
            memory_bytes: data.len(),
            globals: values,
            chunks: chunks.into_boxed_slice(),
            data: lz4_flex::block::compress(&saved).into_boxed_slice(),
            raw_len: saved.len(),
        }
    }

    /// Writes the saved state into a fresh instance of the same module.
    pub(crate) fn restore<T>(
        &self,
        store: &mut Store<T>,
        memory: Memory,
        globals: &[Global],
    ) -> wasmtime::Result<()> {
        let size = memory.data_size(&*store);
        if self.memory_bytes > size {
            let page = memory.page_size(&*store);
            memory.grow(&mut *store, (self.memory_bytes - size) as u64 / page)?;
        }
        self.write(store, memory, globals)
    }

    /// Writes the saved state into an instance of the same module that another process used:
    /// its touched chunks go back to the initial image, the saved ones are written, the globals
    /// set. `false` (and nothing written) when that cannot be done exactly: the memories differ
    /// in size, or the page map cannot be read.
    pub(crate) fn restore_over<T>(
        &self,
        store: &mut Store<T>,
        memory: Memory,
        globals: &[Global],
        image: &[u8],
    ) -> wasmtime::Result<bool> {
        let data = memory.data(&*store);
        if data.len() != self.memory_bytes {
            return Ok(false);
        }
        let Some(touched) = touched_chunks(data) else {
            return Ok(false);
        };
        let data = memory.data_mut(&mut *store);
        let mut saved = self.chunks.iter().copied().peekable();
        for (index, touched) in touched.into_iter().enumerate() {
            // Chunks the snapshot holds are written next; the rest go back to the image.
            if saved.next_if_eq(&(index as u32)).is_some() || !touched {
                continue;
            }
            let start = index * CHUNK;
            let end = (start + CHUNK).min(data.len());
            let initial = image.get(start..end).unwrap_or(&ZEROS[..end - start]);
            if data[start..end] != *initial {
                data[start..end].copy_from_slice(initial);
            }
        }
        self.write(store, memory, globals)?;
        Ok(true)
    }

    /// Writes the saved chunks and sets the globals.
    fn write<T>(
        &self,
        store: &mut Store<T>,
        memory: Memory,
        globals: &[Global],
    ) -> wasmtime::Result<()> {
        let saved = lz4_flex::block::decompress(&self.data, self.raw_len)
            .map_err(|e| wasmtime::Error::msg(format!("its saved memory is corrupt: {e}")))?;
        let data = memory.data_mut(&mut *store);
        let mut saved = &saved[..];
        for &index in self.chunks.iter() {
            let start = index as usize * CHUNK;
            let end = (start + CHUNK).min(data.len());
            let Some((chunk, rest)) = saved.split_at_checked(end - start) else {
                return Err(wasmtime::Error::msg(
                    "its saved memory is shorter than its pages",
                ));
            };
            data[start..end].copy_from_slice(chunk);
            saved = rest;
        }
        for (global, value) in globals.iter().zip(self.globals.iter()) {
            global.set(&mut *store, *value)?;
        }
        Ok(())
    }

    /// Bytes this snapshot holds on the host's heap.
    pub(crate) fn size(&self) -> usize {
        std::mem::size_of::<Snapshot>()
            + self.data.len()
            + self.chunks.len() * std::mem::size_of::<u32>()
            + self.globals.len() * std::mem::size_of::<Val>()
    }
}

/// Elsewhere than Linux every chunk is compared.
#[cfg(not(target_os = "linux"))]
fn touched_chunks(_: &[u8]) -> Option<Vec<bool>> {
    None
}

/// Which [`CHUNK`]s of `memory` were ever touched (resident or swapped out), from the kernel's
/// page map; `None` when that cannot be read (pages larger than a chunk, or no `/proc`), and every
/// chunk must be compared.
#[cfg(target_os = "linux")]
fn touched_chunks(memory: &[u8]) -> Option<Vec<bool>> {
    use std::os::unix::fs::FileExt;
    static PAGEMAP: OnceLock<Option<std::fs::File>> = OnceLock::new();
    let pagemap = PAGEMAP
        .get_or_init(|| {
            if page_size() != CHUNK {
                return None;
            }
            std::fs::File::open("/proc/self/pagemap").ok()
        })
        .as_ref()?;
    let start = memory.as_ptr() as usize;
    if !start.is_multiple_of(CHUNK) || memory.is_empty() {
        return None;
    }
    let pages = memory.len().div_ceil(CHUNK);
    let mut entries = vec![0u8; pages * 8];
    pagemap
        .read_exact_at(&mut entries, (start / CHUNK * 8) as u64)
        .ok()?;
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    Some(
        entries
            .chunks_exact(8)
            .map(|entry| {
                let entry = u64::from_ne_bytes(entry.try_into().expect("eight bytes"));
                entry & (PRESENT | SWAPPED) != 0
            })
            .collect(),
    )
}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(wat: &str) -> Vec<u8> {
        wat::parse_str(wat).unwrap()
    }

    #[test]
    fn unexported_mutable_globals_are_exported_and_the_rest_is_unchanged() {
        let bytes = module(
            r#"(module
                (memory (export "memory") 1)
                (global $sp (mut i32) (i32.const 1024))
                (global $c i64 (i64.const 7))
                (global $n (export "counter") (mut i64) (i64.const 0))
                (func (export "f") (result i32) global.get $sp)
                (@custom "note" "kept"))"#,
        );
        let prepared = prepare(&bytes);
        let plan = prepared.plan.unwrap();
        assert_eq!(plan.globals, vec!["wfhost:global:0", "counter"]);
        let rewritten = prepared.rewritten.unwrap();
        let mut exports = Vec::new();
        let mut custom = Vec::new();
        for section in Parser::new(0).parse_all(&rewritten) {
            match section.unwrap() {
                Section::ExportSection(reader) => {
                    for export in reader {
                        let export = export.unwrap();
                        exports.push((export.name.to_string(), export.kind, export.index));
                    }
                }
                Section::CustomSection(c) => custom.push(c.name().to_string()),
                _ => {}
            }
        }
        assert_eq!(
            exports,
            vec![
                ("memory".to_string(), ExternalKind::Memory, 0),
                ("counter".to_string(), ExternalKind::Global, 2),
                ("f".to_string(), ExternalKind::Func, 0),
                ("wfhost:global:0".to_string(), ExternalKind::Global, 0),
            ]
        );
        assert!(custom.iter().any(|name| name == "note"), "{custom:?}");
        wasmparser::Validator::new()
            .validate_all(&rewritten)
            .unwrap();
    }

    #[test]
    fn modules_with_state_beyond_memory_and_globals_are_not_hibernated() {
        let cases = [
            (
                r#"(module (memory 1) (func $s) (start $s))"#,
                "start function",
            ),
            (
                r#"(module (memory 1) (table 1 funcref)
                    (func (table.set 0 (i32.const 0) (ref.null func))))"#,
                "changes a table",
            ),
            (
                r#"(module (memory 1) (table 1 funcref)
                    (func (drop (table.grow 0 (ref.null func) (i32.const 1)))))"#,
                "changes a table",
            ),
            (
                r#"(module (memory 1) (data "x") (func (data.drop 0)))"#,
                "drops a segment",
            ),
            (r#"(module (func))"#, "0 linear memories"),
            (
                r#"(module (memory 1) (global (mut funcref) (ref.null func)))"#,
                "reference-typed global",
            ),
        ];
        for (wat, reason) in cases {
            let prepared = prepare(&module(wat));
            assert!(prepared.rewritten.is_none(), "{wat}");
            let error = prepared.plan.err().unwrap();
            assert!(error.contains(reason), "{wat}: {error}");
        }
    }

    #[test]
    fn a_module_with_every_mutable_global_exported_is_not_rewritten() {
        let prepared = prepare(&module(
            r#"(module (memory (export "memory") 1) (global (export "g") (mut i32) (i32.const 0)))"#,
        ));
        assert!(prepared.rewritten.is_none());
        assert_eq!(prepared.plan.unwrap().globals, vec!["g"]);
    }

    /// A module prepared for hibernation and compiled, to run in the tests below.
    struct Fixture {
        plan: HibernationPlan,
        engine: wasmtime::Engine,
        module: wasmtime::Module,
    }

    /// An instance of a [`Fixture`], with its memory and its mutable globals in the plan's order.
    struct Running {
        instance: wasmtime::Instance,
        memory: Memory,
        globals: Vec<Global>,
    }

    impl Fixture {
        fn new(wat: &str) -> Fixture {
            let bytes = module(wat);
            let prepared = prepare(&bytes);
            let engine = wasmtime::Engine::default();
            let source = prepared.rewritten.unwrap_or(bytes);
            Fixture {
                plan: prepared.plan.unwrap(),
                module: wasmtime::Module::new(&engine, source).unwrap(),
                engine,
            }
        }

        fn store(&self) -> Store<()> {
            Store::new(&self.engine, ())
        }

        fn instantiate(&self, store: &mut Store<()>) -> Running {
            let instance = wasmtime::Instance::new(&mut *store, &self.module, &[]).unwrap();
            let memory = instance.get_memory(&mut *store, "memory").unwrap();
            let globals = self
                .plan
                .globals
                .iter()
                .map(|name| instance.get_global(&mut *store, name).unwrap())
                .collect();
            Running {
                instance,
                memory,
                globals,
            }
        }
    }

    impl Running {
        fn call<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
            &self,
            store: &mut Store<()>,
            name: &str,
            params: P,
        ) -> R {
            self.instance
                .get_typed_func::<P, R>(&mut *store, name)
                .unwrap()
                .call(&mut *store, params)
                .unwrap()
        }

        fn take(&self, store: &mut Store<()>, image: &[u8]) -> Snapshot {
            Snapshot::take(store, self.memory, &self.globals, image)
        }
    }

    /// A hibernated instance, restored into a fresh one, carries on where it was: a counter in a
    /// global the module does not export, a page it wrote, the memory it grew.
    #[test]
    fn a_snapshot_restores_globals_written_pages_and_grown_memory() {
        let fixture = Fixture::new(
            r#"(module
                (memory (export "memory") 1)
                (data (i32.const 100) "initial")
                (global $count (mut i32) (i32.const 0))
                (func (export "bump") (result i32)
                    (global.set $count (i32.add (global.get $count) (i32.const 1)))
                    (i32.store (i32.const 70000) (global.get $count))
                    (global.get $count))
                (func (export "grow") (drop (memory.grow (i32.const 2))))
                (func (export "read") (param i32) (result i32) (i32.load (local.get 0))))"#,
        );
        let image = &fixture.plan.image;
        assert_eq!(&image[100..107], b"initial");
        let mut store = fixture.store();
        let running = fixture.instantiate(&mut store);
        running.call::<(), ()>(&mut store, "grow", ());
        for _ in 0..3 {
            running.call::<(), i32>(&mut store, "bump", ());
        }
        let snapshot = running.take(&mut store, image);
        // One chunk differs: the one holding the counter's copy in memory.
        assert_eq!(&snapshot.chunks[..], &[70000 / CHUNK as u32]);
        drop(store);

        let mut store = fixture.store();
        let running = fixture.instantiate(&mut store);
        snapshot
            .restore(&mut store, running.memory, &running.globals)
            .unwrap();
        assert_eq!(running.memory.data_size(&store), 3 << 16);
        assert_eq!(running.call::<i32, i32>(&mut store, "read", 70000), 3);
        assert_eq!(running.call::<(), i32>(&mut store, "bump", ()), 4);
        assert_eq!(&running.memory.data(&store)[100..107], b"initial");
    }

    /// The chunk holding the end of the initial data is compared with the image, not with
    /// zeros: data set to zero there is saved, and stays zero after a restore.
    #[test]
    fn zeroed_initial_data_in_a_partly_initialised_chunk_stays_zero() {
        let fixture = Fixture::new(
            r#"(module
                (memory (export "memory") 1)
                (data (i32.const 100) "initial")
                (func (export "zero") (i64.store (i32.const 100) (i64.const 0)))
                (func (export "read") (result i64) (i64.load (i32.const 100))))"#,
        );
        let image = &fixture.plan.image;
        assert_eq!(image.len(), CHUNK);
        let mut store = fixture.store();
        let running = fixture.instantiate(&mut store);
        running.call::<(), ()>(&mut store, "zero", ());
        let snapshot = running.take(&mut store, image);
        assert_eq!(&snapshot.chunks[..], &[0]);

        let mut store = fixture.store();
        let running = fixture.instantiate(&mut store);
        snapshot
            .restore(&mut store, running.memory, &running.globals)
            .unwrap();
        assert_eq!(running.call::<(), i64>(&mut store, "read", ()), 0);
    }

    #[test]
    fn a_data_segment_outside_the_initial_memory_is_not_imaged() {
        let prepared = prepare(&module(
            r#"(module (memory 1) (data (i32.const 0xFFFFFFF0) "x"))"#,
        ));
        let error = prepared.plan.err().unwrap();
        assert!(error.contains("outside its initial memory"), "{error}");
    }

    /// A snapshot restored over an instance another process used leaves nothing of that process:
    /// its pages go back to the image, the snapshot's are written, the globals set.
    #[test]
    fn a_snapshot_restored_over_a_used_instance_leaves_nothing_of_its_last_process() {
        let fixture = Fixture::new(
            r#"(module
                (memory (export "memory") 1)
                (data (i32.const 100) "initial")
                (global $g (mut i32) (i32.const 0))
                (func (export "write") (param i32 i32)
                    (i32.store (local.get 0) (local.get 1))
                    (global.set $g (local.get 1)))
                (func (export "read") (param i32) (result i32) (i32.load (local.get 0)))
                (func (export "global") (result i32) (global.get $g)))"#,
        );
        let image = &fixture.plan.image;
        let mut store = fixture.store();
        // Process A writes page 5 and hibernates.
        let a = fixture.instantiate(&mut store);
        a.call::<(i32, i32), ()>(&mut store, "write", (5 * 4096, 55));
        let snapshot_a = a.take(&mut store, image);
        // Process B, in another instance, writes page 7 and over the initial data.
        let b = fixture.instantiate(&mut store);
        b.call::<(i32, i32), ()>(&mut store, "write", (7 * 4096, 77));
        b.call::<(i32, i32), ()>(&mut store, "write", (100, 0));
        // A is restored over B's instance.
        assert!(snapshot_a
            .restore_over(&mut store, b.memory, &b.globals, image)
            .unwrap());
        assert_eq!(b.call::<i32, i32>(&mut store, "read", 5 * 4096), 55);
        assert_eq!(b.call::<i32, i32>(&mut store, "read", 7 * 4096), 0);
        assert_eq!(&b.memory.data(&store)[100..107], b"initial");
        assert_eq!(b.globals[0].get(&mut store).i32(), Some(55));
    }
}
