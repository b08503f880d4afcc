//! Builds wfhost modules from sources in languages other than Rust: Python and JavaScript.
//!
//! A language is a runtime: an interpreter inside an ordinary wfhost module (`runtimes/` in the
//! repository, built for wasm32-wasip1 on first use into the build's target directory, or by
//! this crate's build script and included in it with the feature `embedded`). A build
//! runs the runtime's initialization once, under wasmtime, with the workflow's sources on its
//! stdin: the interpreter starts and imports the workflow's code, which registers its entry
//! points. `wasmtime-wizer` then snapshots the instance's memory into a new module, and the
//! manifest (the entry points, read by hosts without running anything) is written into it. A
//! workflow of that module starts from an interpreter that has already loaded its code.
//!
//! ```no_run
//! let built = wfhost_build::python(std::path::Path::new("shop.py"), &[])?;
//! std::fs::write("shop.wasm", &built.module)?;
//! println!("entry points: {}", built.entries.join(", "));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod js;
mod manifest;
mod preinit;
mod python;
mod runtime;
mod sources;
#[cfg(not(feature = "embedded"))]
mod toolchain;

pub use js::{javascript, TYPES as JAVASCRIPT_TYPES};
pub use python::python;

/// A module built from sources.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Built {
    /// The module's bytes.
    pub module: Vec<u8>,
    /// Its entry points, by name.
    pub entries: Vec<String>,
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The sources could not be read.
    #[error("{0}")]
    Sources(String),
    /// The workflow's code failed as it was loaded (a syntax error, an import that failed, no
    /// entry point): the interpreter's message.
    #[error("{0}")]
    Load(String),
    /// The runtime could not be run or snapshotted.
    #[error("the {language} runtime failed: {message}")]
    Runtime {
        /// The language.
        language: &'static str,
        /// What happened.
        message: String,
    },
}
