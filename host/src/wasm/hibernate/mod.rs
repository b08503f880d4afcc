//! Hibernation: a process waiting for events gives its instance back and keeps only what makes it
//! itself.
//!
//! Between steps a workflow has no live wasm frames: the SDK's executor returns from `step` with
//! every future parked in linear memory. So a waiting process is fully described by its linear
//! memory and its mutable globals (the stack pointer among them). Hibernating saves the memory pages
//! that differ from the module's initial image and the globals' values, then gives the instance up:
//! kept warm for the next restore of the same module when there is room (`warm.rs`), dropped
//! otherwise (its memory mappings and resident pages go back to the OS). The next event restores
//! it: into a warm instance, reset to the image first, or a fresh one grown to the saved size; the
//! saved pages are written back and the globals set. The guest cannot tell; `step` stays a
//! function of the events it is given.
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

mod analysis;
mod pagemap;
mod rewrite;
mod snapshot;
#[cfg(test)]
mod tests;

pub(crate) use snapshot::{Image, Snapshot};

use analysis::analyse;
use rewrite::export_globals;

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
    /// rounded up to a whole page (zeros after that).
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
