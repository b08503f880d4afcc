//! The saved state of a hibernated process, and writing it back into an instance.

use serde::{Deserialize, Serialize};
use wasmtime::{Global, Memory, Store, Val, V128};

use super::pagemap::{touched_chunks, CHUNK};

/// A hibernated process: what differs from a fresh instance of its module.
pub(crate) struct Snapshot {
    /// The linear memory's size in bytes.
    memory_bytes: usize,
    /// The mutable globals' values, in the plan's order.
    globals: Box<[Val]>,
    /// The indices of the saved chunks, each [`CHUNK`] bytes of memory.
    pub(super) chunks: Box<[u32]>,
    /// The saved chunks' bytes, one after another (the last may be short, at the memory's end),
    /// LZ4-compressed: what a waiting process leaves in memory is mostly zeros and small numbers.
    data: Box<[u8]>,
    /// The saved chunks' bytes before compression.
    raw_len: usize,
}

/// A WebAssembly page: linear memories grow by these.
const WASM_PAGE: usize = 65_536;

static ZEROS: [u8; CHUNK] = [0; CHUNK];

impl Snapshot {
    /// The size of the linear memory it was taken of, in bytes.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }

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
        let size = memory.data_size(&*store);
        if size != self.memory_bytes {
            return Err(wasmtime::Error::msg(format!(
                "its saved memory has {} bytes and its instance {size}",
                self.memory_bytes
            )));
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
        if globals.len() != self.globals.len() {
            return Err(wasmtime::Error::msg(
                "its saved globals do not match its module's",
            ));
        }
        for (global, value) in globals.iter().zip(self.globals.iter()) {
            global.set(&mut *store, *value)?;
        }
        Ok(())
    }

    /// The snapshot as plain data, to be kept in a durable store. `None` for a global of a
    /// reference type, which a module that hibernates does not have.
    pub(crate) fn to_image(&self) -> Option<Image> {
        let globals = self
            .globals
            .iter()
            .map(|value| match value {
                Val::I32(v) => Some(GlobalValue::I32(*v)),
                Val::I64(v) => Some(GlobalValue::I64(*v)),
                Val::F32(bits) => Some(GlobalValue::F32(*bits)),
                Val::F64(bits) => Some(GlobalValue::F64(*bits)),
                Val::V128(v) => Some(GlobalValue::V128(v.as_u128())),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Image {
            memory_bytes: self.memory_bytes as u64,
            globals,
            chunks: self.chunks.to_vec(),
            data: self.data.to_vec(),
            raw_len: self.raw_len as u64,
        })
    }

    /// A snapshot from an image a store kept, checked against what the module it is for allows:
    /// `globals` mutable globals and at most `max_memory` bytes of memory. The store is not
    /// trusted to be intact: anything that does not fit is refused with what is wrong.
    pub(crate) fn from_image(
        image: Image,
        globals: usize,
        max_memory: usize,
    ) -> Result<Snapshot, String> {
        let (memory_bytes, raw_len) = image.check_shape(globals, max_memory)?;
        Ok(Snapshot {
            memory_bytes,
            globals: image
                .globals
                .into_iter()
                .map(|value| match value {
                    GlobalValue::I32(v) => Val::I32(v),
                    GlobalValue::I64(v) => Val::I64(v),
                    GlobalValue::F32(bits) => Val::F32(bits),
                    GlobalValue::F64(bits) => Val::F64(bits),
                    GlobalValue::V128(v) => Val::V128(V128::from(v)),
                })
                .collect(),
            chunks: image.chunks.into_boxed_slice(),
            data: image.data.into_boxed_slice(),
            raw_len,
        })
    }

    /// Checks the snapshot against the compiled module it is to be restored into: each global of
    /// the type the module declares, the memory within the module's bounds. A snapshot kept in a
    /// store is checked before it is used, so that one that does not fit is set aside rather than
    /// failing when it is restored.
    pub(crate) fn fits(&self, module: &wasmtime::Module, globals: &[String]) -> Result<(), String> {
        fits_module(
            self.memory_bytes as u64,
            self.globals.iter().map(|value| match value {
                Val::I32(_) => Some(wasmtime::ValType::I32),
                Val::I64(_) => Some(wasmtime::ValType::I64),
                Val::F32(_) => Some(wasmtime::ValType::F32),
                Val::F64(_) => Some(wasmtime::ValType::F64),
                Val::V128(_) => Some(wasmtime::ValType::V128),
                _ => None,
            }),
            module,
            globals,
        )
    }

    /// Bytes this snapshot holds on the host's heap.
    pub(crate) fn size(&self) -> usize {
        std::mem::size_of::<Snapshot>()
            + self.data.len()
            + self.chunks.len() * std::mem::size_of::<u32>()
            + self.globals.len() * std::mem::size_of::<Val>()
    }
}

/// A snapshot as plain data: what a durable store keeps of a process between steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Image {
    pub(super) memory_bytes: u64,
    pub(super) globals: Vec<GlobalValue>,
    pub(super) chunks: Vec<u32>,
    /// LZ4-compressed.
    pub(super) data: Vec<u8>,
    pub(super) raw_len: u64,
}

impl Image {
    /// Whether the image can start a process of `module`, whose plan has `globals` (by name)
    /// and whose memory may have `max_memory` bytes: what [`Snapshot::from_image`] and
    /// [`Snapshot::fits`] check, looked at in place (a recovery checks every snapshot before it
    /// starts anything).
    pub(crate) fn check(
        &self,
        module: &wasmtime::Module,
        globals: &[String],
        max_memory: usize,
    ) -> Result<(), String> {
        self.check_shape(globals.len(), max_memory)?;
        fits_module(
            self.memory_bytes,
            self.globals.iter().map(|value| {
                Some(match value {
                    GlobalValue::I32(_) => wasmtime::ValType::I32,
                    GlobalValue::I64(_) => wasmtime::ValType::I64,
                    GlobalValue::F32(_) => wasmtime::ValType::F32,
                    GlobalValue::F64(_) => wasmtime::ValType::F64,
                    GlobalValue::V128(_) => wasmtime::ValType::V128,
                })
            }),
            module,
            globals,
        )
    }

    /// Checks the image's own shape: its memory within `max_memory` and in whole pages,
    /// `globals` globals, its pages in order and within its memory, and its data as long as its
    /// pages say. Returns its memory's size and its pages' size before compression.
    fn check_shape(&self, globals: usize, max_memory: usize) -> Result<(usize, usize), String> {
        let memory_bytes = usize::try_from(self.memory_bytes)
            .ok()
            .filter(|&bytes| bytes <= max_memory)
            .ok_or_else(|| {
                format!(
                    "its memory of {} bytes is over the limit of {max_memory} bytes",
                    self.memory_bytes
                )
            })?;
        if !memory_bytes.is_multiple_of(WASM_PAGE) {
            return Err(format!(
                "its memory of {memory_bytes} bytes is not a whole number of pages"
            ));
        }
        if self.globals.len() != globals {
            return Err(format!(
                "it has {} globals where the module has {globals}",
                self.globals.len()
            ));
        }
        let mut expected = 0usize;
        let mut previous = None;
        for &index in &self.chunks {
            let start = index as usize * CHUNK;
            if previous.is_some_and(|p| p >= index) || start >= memory_bytes {
                return Err(format!(
                    "its page {index} is out of order or out of its memory"
                ));
            }
            previous = Some(index);
            expected += (start + CHUNK).min(memory_bytes) - start;
        }
        if self.raw_len != expected as u64 {
            return Err(format!(
                "its pages hold {} bytes where they should hold {expected}",
                self.raw_len
            ));
        }
        Ok((memory_bytes, expected))
    }
}

/// Whether a memory of `memory_bytes` and globals of the value types `kinds` (`None`: a
/// reference) fit `module`: each global of the type the module declares for its name in
/// `globals`, the memory within the module's bounds.
fn fits_module(
    memory_bytes: u64,
    kinds: impl Iterator<Item = Option<wasmtime::ValType>>,
    module: &wasmtime::Module,
    globals: &[String],
) -> Result<(), String> {
    use wasmtime::{ExternType, ValType};
    for (name, kind) in globals.iter().zip(kinds) {
        let Some(ExternType::Global(global)) = module.get_export(name) else {
            return Err(format!("the module has no global '{name}'"));
        };
        let same = matches!(
            (global.content(), kind),
            (ValType::I32, Some(ValType::I32))
                | (ValType::I64, Some(ValType::I64))
                | (ValType::F32, Some(ValType::F32))
                | (ValType::F64, Some(ValType::F64))
                | (ValType::V128, Some(ValType::V128))
        );
        if !same {
            return Err(format!("its global '{name}' is not of the module's type"));
        }
    }
    let memory = module.exports().find_map(|export| match export.ty() {
        ExternType::Memory(memory) => Some(memory),
        _ => None,
    });
    let Some(memory) = memory else {
        return Err("the module exports no memory".into());
    };
    let page = memory.page_size();
    let pages = memory_bytes / page;
    if !memory_bytes.is_multiple_of(page)
        || pages < memory.minimum()
        || memory.maximum().is_some_and(|max| pages > max)
    {
        return Err(format!(
            "its memory of {memory_bytes} bytes is outside the module's bounds"
        ));
    }
    Ok(())
}

/// The value of a mutable global (floats by their bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum GlobalValue {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
    V128(u128),
}
