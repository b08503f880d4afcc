//! Exporting a module's unexported mutable globals, so that the host can read and set them: a
//! rewrite of the export section only, every other section copied byte for byte.

use wasmparser::{ExternalKind, Parser, Payload as Section};

/// The module with `added` (name, global index) appended to its exports; every other section is
/// copied as it is.
pub(super) fn export_globals(bytes: &[u8], added: &[(String, u32)]) -> Result<Vec<u8>, String> {
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
