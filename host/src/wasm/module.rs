//! Reading and checking workflow modules. Inspection only parses: it runs no guest code and does not
//! even compile, so it is safe on modules nobody trusts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmparser::{Parser, Payload as Section, TypeRef};
use wasmtime::{ExternType, InstancePre, Module, ModuleExport, ValType};
use wfcontract::abi::{self, WASI_MODULE};
use wfcontract::manifest::{self, Manifest};

use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::wasm::hibernate::HibernationPlan;
use crate::wasm::instances::Instances;
use crate::wasm::warm::WarmPool;
use crate::wasm::{GuestState, Limits, WasmRuntime};

/// What a module declares about itself, read without running it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModuleInfo {
    /// The ABI version it was built for.
    pub abi_version: u32,
    /// Its entry points, in declaration order.
    pub entries: Vec<String>,
    /// Its imports, as `(module, name)`.
    pub imports: Vec<(String, String)>,
    /// Its exports' names.
    pub exports: Vec<String>,
    /// SHA-256 of its bytes, in hex: the key of the host's compiled-module cache.
    pub sha256: String,
    /// Its size in bytes.
    pub size: usize,
    /// The linear memories it defines, as their initial sizes in bytes.
    pub memories: Vec<u64>,
    /// The tables it defines, as their initial numbers of elements.
    pub tables: Vec<u64>,
}

pub(crate) fn bad(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::BadModule, message)
}

impl ModuleInfo {
    /// Reads a module's manifest, imports and exports, and checks that it is a workflow module for
    /// this host's ABI. Runs and compiles nothing.
    pub fn inspect(bytes: &[u8]) -> Result<ModuleInfo> {
        check_header(bytes)?;
        let sections = Sections::read(bytes)?;
        let manifest = sections.manifest()?;
        sections.check_abi_exports()?;
        sections.check_imports()?;
        Ok(ModuleInfo {
            abi_version: manifest.abi_version,
            entries: manifest.entries,
            imports: sections.imports,
            exports: sections.exports,
            sha256: hex(&Sha256::digest(bytes)),
            size: bytes.len(),
            memories: sections.memories,
            tables: sections.tables,
        })
    }

    /// Refuses a module that could not run within `limits`, saying which limit and how to raise
    /// it, before anything is compiled.
    pub(crate) fn check_limits(&self, limits: &Limits) -> Result<()> {
        let over = |message: String| Err(Error::new(ErrorKind::Limit, message));
        if self.memories.len() > limits.max_memories {
            return over(format!(
                "the module defines {} linear memories, more than the limit of {} \
                 (Limits::max_memories, --max-memories)",
                self.memories.len(),
                limits.max_memories
            ));
        }
        if let Some(initial) = self
            .memories
            .iter()
            .find(|&&m| m > limits.max_memory_bytes as u64)
        {
            return over(format!(
                "the module declares an initial memory of {}, more than the per-process limit of \
                 {} (Limits::max_memory_bytes, --max-memory)",
                bytes(*initial),
                bytes(limits.max_memory_bytes as u64)
            ));
        }
        if self.tables.len() > limits.max_tables {
            return over(format!(
                "the module defines {} tables, more than the limit of {} (Limits::max_tables, \
                 --max-tables)",
                self.tables.len(),
                limits.max_tables
            ));
        }
        if let Some(initial) = self
            .tables
            .iter()
            .find(|&&t| t > limits.max_table_elements as u64)
        {
            return over(format!(
                "the module declares a table of {initial} elements, more than the limit of {} \
                 (Limits::max_table_elements, --max-table-elements)",
                limits.max_table_elements
            ));
        }
        Ok(())
    }

    /// True when `entry` is one of its entry points.
    pub fn has_entry(&self, entry: &str) -> bool {
        self.entries.iter().any(|e| e == entry)
    }

    /// The error for an entry point it does not have.
    pub(crate) fn unknown_entry(&self, entry: &str) -> Error {
        Error::new(
            ErrorKind::UnknownEntry,
            format!(
                "unknown entry point '{entry}' (module exposes: {})",
                self.entries.join(", ")
            ),
        )
    }
}

/// Refuses bytes that are not a core WebAssembly module (a component, another wasm version).
fn check_header(bytes: &[u8]) -> Result<()> {
    if !bytes.starts_with(b"\0asm") {
        return Err(bad(
            "not a WebAssembly module: the file does not start with the wasm magic number",
        ));
    }
    if bytes.len() >= 8 && bytes[4..8] != [1, 0, 0, 0] {
        return Err(bad(
            "a WebAssembly component or an unknown wasm version: wfhost runs core modules \
             built for wasm32-wasip1",
        ));
    }
    Ok(())
}

/// What [`ModuleInfo::inspect`] reads of a module's sections.
#[derive(Default)]
struct Sections {
    /// The manifest sections' text, one line each; `None` when there is none.
    manifest: Option<Vec<u8>>,
    imports: Vec<(String, String)>,
    exports: Vec<String>,
    memories: Vec<u64>,
    tables: Vec<u64>,
}

impl Sections {
    /// Reads the sections inspection needs; refuses a malformed module, or one importing
    /// anything but functions.
    fn read(bytes: &[u8]) -> Result<Sections> {
        let mut sections = Sections::default();
        for section in Parser::new(0).parse_all(bytes) {
            match section.map_err(malformed)? {
                Section::CustomSection(custom) if custom.name() == manifest::SECTION => {
                    let text = sections.manifest.get_or_insert_with(Vec::new);
                    text.extend_from_slice(custom.data());
                    text.push(b'\n');
                }
                Section::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.map_err(malformed)?;
                        if !matches!(import.ty, TypeRef::Func(_)) {
                            return Err(bad(format!(
                                "imports a non-function '{}::{}': a workflow may import only \
                                 WASI preview 1 functions",
                                import.module, import.name
                            )));
                        }
                        let import = (import.module.to_string(), import.name.to_string());
                        sections.imports.push(import);
                    }
                }
                Section::MemorySection(reader) => {
                    for memory in reader {
                        let memory = memory.map_err(malformed)?;
                        let page = 1u64
                            .checked_shl(memory.page_size_log2.unwrap_or(16))
                            .unwrap_or(u64::MAX);
                        sections.memories.push(memory.initial.saturating_mul(page));
                    }
                }
                Section::TableSection(reader) => {
                    for table in reader {
                        sections.tables.push(table.map_err(malformed)?.ty.initial);
                    }
                }
                Section::ExportSection(reader) => {
                    for export in reader {
                        let export = export.map_err(malformed)?;
                        sections.exports.push(export.name.to_string());
                    }
                }
                _ => {}
            }
        }
        Ok(sections)
    }

    /// The module's manifest, for this host's ABI version.
    fn manifest(&self) -> Result<Manifest> {
        let Some(text) = &self.manifest else {
            return Err(bad(format!(
                "not a wfhost workflow: the module has no '{}' section (build it with the wfguest \
                 SDK and its entry_points! macro)",
                manifest::SECTION
            )));
        };
        let manifest =
            Manifest::parse(text).map_err(|e| bad(format!("not a wfhost workflow: {e}")))?;
        if !abi::READS.contains(&manifest.abi_version) {
            return Err(bad(format!(
                "the module was built for wfhost ABI version {}, but this host runs versions {} \
                 to {} (rebuild it against a matching wfguest)",
                manifest.abi_version,
                abi::READS.start(),
                abi::READS.end()
            )));
        }
        Ok(manifest)
    }

    /// Refuses a module without one of the ABI's exports (their types are checked at link time).
    fn check_abi_exports(&self) -> Result<()> {
        for required in [
            abi::EXPORT_MEMORY,
            abi::EXPORT_RESERVE,
            abi::EXPORT_INIT,
            abi::EXPORT_STEP,
            abi::EXPORT_PANIC_MESSAGE,
        ] {
            if !self.exports.iter().any(|e| e == required) {
                return Err(bad(format!(
                    "not a wfhost workflow: the module does not export '{required}' (the wfguest \
                     SDK's entry_points! macro provides it)"
                )));
            }
        }
        Ok(())
    }

    /// Refuses an import from anywhere but WASI preview 1.
    fn check_imports(&self) -> Result<()> {
        match self.imports.iter().find(|(module, name)| {
            module != WASI_MODULE && !(module == abi::IMPORT_MODULE && name == abi::IMPORT_PATCHED)
        }) {
            Some((module, name)) => Err(bad(format!(
                "the module imports '{module}::{name}', which wfhost does not provide: a workflow \
                 may import only WASI preview 1 ({WASI_MODULE}) and '{}::{}'",
                abi::IMPORT_MODULE,
                abi::IMPORT_PATCHED
            ))),
            None => Ok(()),
        }
    }
}

/// The error for a module that could not be parsed.
fn malformed(e: wasmparser::BinaryReaderError) -> Error {
    bad(format!("malformed module: {e}"))
}

/// "64 MiB", "4 GiB", "1500 bytes".
pub(crate) fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A module compiled and linked, ready to instantiate cheaply. Freed, with its warm instances,
/// when nothing loads or runs it any more.
pub(crate) struct Compiled {
    /// Names this compile among the host's, for its warm instances.
    pub(crate) id: u64,
    pub(crate) info: ModuleInfo,
    pub(crate) pre: InstancePre<GuestState>,
    /// The ABI's exports, resolved once so that each instantiation finds them by index.
    pub(crate) exports: AbiExports,
    /// How its processes hibernate, or why they cannot.
    pub(crate) hibernation: std::result::Result<Hibernating, String>,
    instances: Arc<Instances>,
    warm: Arc<WarmPool>,
}

impl Compiled {
    /// The memory it keeps while loaded: its compiled code and its memory image.
    pub(crate) fn memory_bytes(&self) -> usize {
        let code = self.pre.module().image_range();
        (code.end as usize).saturating_sub(code.start as usize) + self.image_bytes()
    }

    fn image_bytes(&self) -> usize {
        self.hibernation
            .as_ref()
            .map_or(0, |hibernating| hibernating.plan.image.len())
    }
}

impl Drop for Compiled {
    fn drop(&mut self) {
        self.warm.drop_module(self.id, &self.instances);
        self.instances.module(self.image_bytes(), false);
    }
}

/// A loaded module: the name it was loaded under, its compiled form, and what it may do.
#[derive(Clone)]
pub(crate) struct Loaded {
    pub(crate) name: Arc<str>,
    pub(crate) compiled: Arc<Compiled>,
    pub(crate) grants: Arc<Grants>,
}

impl Loaded {
    /// What a process of this module runs with: these limits, and its grants unless `grants`
    /// replaces them (which then also bound its children's).
    pub(crate) fn spec(
        &self,
        grants: Option<Arc<Grants>>,
        limits: Arc<Limits>,
    ) -> super::ProcessSpec {
        super::ProcessSpec {
            bound: grants.is_some(),
            grants: grants.unwrap_or_else(|| Arc::clone(&self.grants)),
            module: self.clone(),
            limits,
        }
    }
}

/// A hibernation plan with the module's mutable globals resolved.
pub(crate) struct Hibernating {
    pub(crate) plan: HibernationPlan,
    pub(crate) globals: Vec<ModuleExport>,
    /// What a fresh instance holds before its process's `init` (what differs from the image),
    /// taken from the first fresh instance: a process starts in a warm instance by restoring it.
    pub(crate) fresh: std::sync::OnceLock<crate::wasm::hibernate::Snapshot>,
}

/// Names each compile.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Where the ABI's exports are in the module.
pub(crate) struct AbiExports {
    pub(crate) memory: ModuleExport,
    pub(crate) reserve: ModuleExport,
    pub(crate) init: ModuleExport,
    pub(crate) step: ModuleExport,
    pub(crate) panic_message: ModuleExport,
    /// WASI reactors export `_initialize`, to be called once before anything else.
    pub(crate) initialize: Option<ModuleExport>,
}

/// Links a compiled module with the runtime's WASI and resolves what its processes need.
pub(crate) fn link(
    runtime: &WasmRuntime,
    info: ModuleInfo,
    module: Module,
    plan: std::result::Result<HibernationPlan, String>,
) -> Result<Compiled> {
    check_exports(&module)?;
    let pre = runtime.linker.instantiate_pre(&module).map_err(|e| {
        bad(format!(
            "the module needs an import wfhost does not provide: {e:#} (a workflow may import \
             only WASI preview 1)"
        ))
    })?;
    let index = |name: &str| {
        module
            .get_export_index(name)
            .ok_or_else(|| bad(format!("the module does not export '{name}'")))
    };
    let exports = AbiExports {
        memory: index(abi::EXPORT_MEMORY)?,
        reserve: index(abi::EXPORT_RESERVE)?,
        init: index(abi::EXPORT_INIT)?,
        step: index(abi::EXPORT_STEP)?,
        panic_message: index(abi::EXPORT_PANIC_MESSAGE)?,
        initialize: match module.get_export("_initialize") {
            Some(ExternType::Func(_)) => module.get_export_index("_initialize"),
            _ => None,
        },
    };
    let hibernation = plan.and_then(|plan| {
        let globals = plan
            .globals
            .iter()
            .map(|name| match module.get_export(name) {
                Some(ExternType::Global(_)) => module
                    .get_export_index(name)
                    .ok_or_else(|| format!("its global '{name}' has no export index")),
                _ => Err(format!("its export '{name}' is not a global")),
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        Ok(Hibernating {
            plan,
            globals,
            fresh: std::sync::OnceLock::new(),
        })
    });
    let compiled = Compiled {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        info,
        pre,
        exports,
        hibernation,
        instances: Arc::clone(&runtime.instances),
        warm: Arc::clone(&runtime.warm),
    };
    runtime.instances.module(compiled.image_bytes(), true);
    Ok(compiled)
}

/// The ABI's exports must have exactly the ABI's signatures.
fn check_exports(module: &Module) -> Result<()> {
    let expect = [
        (
            abi::EXPORT_RESERVE,
            &[ValType::I32][..],
            &[ValType::I32][..],
        ),
        (abi::EXPORT_INIT, &[ValType::I32][..], &[ValType::I64][..]),
        (abi::EXPORT_STEP, &[ValType::I32][..], &[ValType::I64][..]),
        (abi::EXPORT_PANIC_MESSAGE, &[][..], &[ValType::I64][..]),
    ];
    let same = |actual: &mut dyn ExactSizeIterator<Item = ValType>, wanted: &[ValType]| {
        actual.len() == wanted.len() && actual.zip(wanted).all(|(a, w)| ValType::eq(&a, w))
    };
    for (name, params, results) in expect {
        match module.get_export(name) {
            Some(ExternType::Func(func))
                if same(&mut func.params(), params) && same(&mut func.results(), results) => {}
            Some(other) => {
                return Err(bad(format!(
                    "the module's export '{name}' has the wrong type ({other:?}); the ABI wants \
                     a function {params:?} -> {results:?}"
                )))
            }
            None => return Err(bad(format!("the module does not export '{name}'"))),
        }
    }
    match module.get_export(abi::EXPORT_MEMORY) {
        Some(ExternType::Memory(_)) => Ok(()),
        _ => Err(bad(format!(
            "the module's '{}' export is not a linear memory",
            abi::EXPORT_MEMORY
        ))),
    }
}
