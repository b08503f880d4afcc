//! Whether a module's whole state is its memory and globals, and what its initial memory holds.

use std::collections::{HashMap, HashSet};

use wasmparser::{
    DataKind, DataSectionReader, ExportSectionReader, ExternalKind, FunctionBody,
    GlobalSectionReader, ImportSectionReader, MemorySectionReader, Operator, Parser,
    Payload as Section, TypeRef, ValType,
};

use super::pagemap::CHUNK;

/// What hibernation needs to know of a module: its mutable globals, its exports, its initial
/// memory.
#[derive(Default)]
pub(super) struct Analysis {
    /// Indices of the mutable globals, ascending.
    pub(super) globals: Vec<u32>,
    /// Exported globals: index to export name.
    pub(super) exported: HashMap<u32, String>,
    /// Every export name.
    pub(super) names: HashSet<String>,
    /// The initial memory, up to the end of the last data segment.
    pub(super) image: Vec<u8>,
}

/// Reads what hibernation needs of a module, or says why its state is more than memory and
/// globals.
pub(super) fn analyse(bytes: &[u8]) -> Result<Analysis, String> {
    let mut reading = Reading::default();
    for section in Parser::new(0).parse_all(bytes) {
        match section.map_err(malformed)? {
            Section::StartSection { .. } => {
                return Err(
                    "it has a start function, which would run again at every restore".into(),
                )
            }
            Section::ImportSection(reader) => reading.imports(reader)?,
            Section::MemorySection(reader) => reading.memories(reader)?,
            Section::GlobalSection(reader) => reading.globals(reader)?,
            Section::ExportSection(reader) => reading.exports(reader)?,
            Section::DataSection(reader) => reading.data(reader)?,
            Section::CodeSectionEntry(body) => check_code(&body)?,
            _ => {}
        }
    }
    reading.finish()
}

/// What [`analyse`] has read so far of a module.
#[derive(Default)]
struct Reading {
    found: Analysis,
    /// Immutable globals with constant values, for data segment offsets.
    constants: HashMap<u32, u64>,
    imported_globals: u32,
    memories: usize,
    /// The initial size of the defined memory, in bytes (an imported one's is unknown).
    initial_memory: Option<u64>,
}

impl Reading {
    /// Counts imported globals and memories; refuses an imported mutable global.
    fn imports(&mut self, reader: ImportSectionReader<'_>) -> Result<(), String> {
        for import in reader.into_imports() {
            match import.map_err(malformed)?.ty {
                TypeRef::Global(ty) if ty.mutable => {
                    return Err("it imports a mutable global".into())
                }
                TypeRef::Global(_) => self.imported_globals += 1,
                TypeRef::Memory(_) => self.memories += 1,
                _ => {}
            }
        }
        Ok(())
    }

    /// Counts the defined memories, and keeps the initial size of the last.
    fn memories(&mut self, reader: MemorySectionReader<'_>) -> Result<(), String> {
        for memory in reader {
            let memory = memory.map_err(malformed)?;
            let page = 1u64
                .checked_shl(memory.page_size_log2.unwrap_or(16))
                .unwrap_or(u64::MAX);
            self.initial_memory = Some(memory.initial.saturating_mul(page));
            self.memories += 1;
        }
        Ok(())
    }

    /// Keeps the mutable globals' indices, and the immutable ones' constant values; refuses a
    /// mutable global of a reference type.
    fn globals(&mut self, reader: GlobalSectionReader<'_>) -> Result<(), String> {
        for (offset, global) in reader.into_iter().enumerate() {
            let global = global.map_err(malformed)?;
            let index = self.imported_globals + offset as u32;
            if !global.ty.mutable {
                if let Ok(value) = constant(&global.init_expr, &HashMap::new()) {
                    self.constants.insert(index, value);
                }
                continue;
            }
            if !matches!(
                global.ty.content_type,
                ValType::I32 | ValType::I64 | ValType::F32 | ValType::F64 | ValType::V128
            ) {
                return Err("it has a mutable reference-typed global".into());
            }
            self.found.globals.push(index);
        }
        Ok(())
    }

    /// Keeps every export's name, and the exported globals' names by index.
    fn exports(&mut self, reader: ExportSectionReader<'_>) -> Result<(), String> {
        for export in reader {
            let export = export.map_err(malformed)?;
            if export.kind == ExternalKind::Global {
                self.found
                    .exported
                    .insert(export.index, export.name.to_string());
            }
            self.found.names.insert(export.name.to_string());
        }
        Ok(())
    }

    /// Copies the active data segments into the initial image; refuses one at a computed offset,
    /// outside the initial memory, or past [`MAX_IMAGE`].
    fn data(&mut self, reader: DataSectionReader<'_>) -> Result<(), String> {
        for data in reader {
            let data = data.map_err(malformed)?;
            let DataKind::Active { offset_expr, .. } = data.kind else {
                continue;
            };
            let start = constant(&offset_expr, &self.constants)
                .map_err(|_| "it computes a data segment's offset".to_string())?;
            let end = start.saturating_add(data.data.len() as u64);
            // A segment outside the initial memory fails instantiation anyway; the image is held
            // on the host's heap, so it is bounded.
            if self.initial_memory.is_none_or(|initial| end > initial) {
                return Err("it has a data segment outside its initial memory".into());
            }
            if end > MAX_IMAGE as u64 {
                return Err(format!(
                    "its initial data spans more than {} MiB",
                    MAX_IMAGE >> 20
                ));
            }
            let (start, end) = (start as usize, end as usize);
            let image = &mut self.found.image;
            if image.len() < end {
                image.resize(end, 0);
            }
            image[start..end].copy_from_slice(data.data);
        }
        Ok(())
    }

    /// The analysis, once every section is read: the module must have one memory.
    fn finish(self) -> Result<Analysis, String> {
        let memories = self.memories;
        if memories != 1 {
            return Err(format!("it has {memories} linear memories, not one"));
        }
        let mut found = self.found;
        // Whole chunks, so that a chunk holding the end of the data compares with the image, not
        // with zeros.
        found
            .image
            .resize(found.image.len().next_multiple_of(CHUNK), 0);
        Ok(found)
    }
}

/// Refuses a function whose code changes state beyond memory and globals.
fn check_code(body: &FunctionBody<'_>) -> Result<(), String> {
    let mut operators = body.get_operators_reader().map_err(malformed)?;
    while !operators.eof() {
        if let Some(what) = state_beyond_memory(&operators.read().map_err(malformed)?) {
            return Err(format!("its code {what} at run time"));
        }
    }
    Ok(())
}

/// Why a module that could not be parsed cannot hibernate.
fn malformed(e: wasmparser::BinaryReaderError) -> String {
    format!("it could not be parsed ({e})")
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
pub(super) fn state_beyond_memory(operator: &Operator<'_>) -> Option<&'static str> {
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
