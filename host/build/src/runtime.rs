//! What every language's build does once its sources are gathered: runs the runtime's
//! initialization with them, reads its answer (the entry points, or why the code did not load),
//! and writes the manifest into the snapshot.

use std::borrow::Cow;

use crate::{manifest, preinit, BuildError, Built};

/// A language's runtime: which module of `runtimes/` it is, as cargo names the file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Runtime {
    /// The language, in words.
    pub(crate) language: &'static str,
    /// The module's file name.
    pub(crate) file: &'static str,
}

/// Python's runtime (RustPython).
pub(crate) const PYTHON: Runtime = Runtime {
    language: "Python",
    file: "wfhost_python.wasm",
};

/// JavaScript's runtime (Boa).
pub(crate) const JAVASCRIPT: Runtime = Runtime {
    language: "JavaScript",
    file: "wfhost_js.wasm",
};

/// The module of `runtime`, as the build script built and included it.
#[cfg(feature = "embedded")]
pub(crate) fn module(runtime: Runtime) -> Result<Cow<'static, [u8]>, BuildError> {
    const PYTHON_MODULE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/wfhost_python.wasm"));
    const JAVASCRIPT_MODULE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/wfhost_js.wasm"));
    Ok(Cow::Borrowed(match runtime.file {
        "wfhost_python.wasm" => PYTHON_MODULE,
        _ => JAVASCRIPT_MODULE,
    }))
}

/// The module of `runtime`, built on first use (once a process) from the repository's
/// `runtimes/` into the build's `<target>/wfhost-runtimes`: several minutes the first time,
/// a look at what changed after that.
#[cfg(not(feature = "embedded"))]
pub(crate) fn module(runtime: Runtime) -> Result<Cow<'static, [u8]>, BuildError> {
    use std::path::Path;
    use std::sync::OnceLock;

    use crate::toolchain;

    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let source = Path::new(env!("WFHOST_RUNTIMES_SOURCE"));
    let target = Path::new(env!("WFHOST_RUNTIMES_TARGET"));
    let file = target
        .join(toolchain::TARGET)
        .join("release")
        .join(runtime.file);
    let failed = |message: String| BuildError::Runtime {
        language: runtime.language,
        message,
    };
    if source.join("Cargo.toml").is_file() {
        let built = BUILT.get_or_init(|| {
            if !file.is_file() {
                eprintln!(
                    "wfhost: building the Python and JavaScript runtimes (RustPython and Boa,                      for {}) into {}, once: several minutes",
                    toolchain::TARGET,
                    target.display()
                );
            }
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            toolchain::build_runtimes(&cargo, source, target)
        });
        built.clone().map_err(failed)?;
    } else if !file.is_file() {
        return Err(failed(format!(
            "this wfhost was built without its language runtimes, and their sources ({}) are not              there to build them from: build wfhost with them included (`cargo install --path              host/cli --features embedded-runtimes`, from the repository)",
            source.display()
        )));
    }
    std::fs::read(&file)
        .map(Cow::Owned)
        .map_err(|e| failed(format!("{} could not be read: {e}", file.display())))
}

/// Initializes `runtime` (a module of `runtimes/`) with `sources` on its stdin.
pub(crate) fn initialize(
    runtime: Runtime,
    sources: serde_json::Value,
) -> Result<Built, BuildError> {
    let language = runtime.language;
    let module = module(runtime)?;
    let stdin = serde_json::to_vec(&sources).map_err(|e| BuildError::Sources(e.to_string()))?;
    let initialized = preinit::run(&module, stdin)
        .map_err(|message| BuildError::Runtime { language, message })?;
    let answer: serde_json::Value = serde_json::from_slice(last_line(&initialized.stdout))
        .map_err(|_| BuildError::Runtime {
            language,
            message: format!(
                "it printed no answer. Its output:\n{}{}",
                String::from_utf8_lossy(&initialized.stdout),
                String::from_utf8_lossy(&initialized.stderr)
            ),
        })?;
    if let Some(error) = answer.get("error").and_then(|e| e.as_str()) {
        return Err(BuildError::Load(error.to_string()));
    }
    let entries: Vec<String> = answer
        .get("entries")
        .and_then(|entries| serde_json::from_value(entries.clone()).ok())
        .unwrap_or_default();
    let Some(mut module) = initialized.module else {
        return Err(BuildError::Runtime {
            language,
            message: "it exited without an answer".into(),
        });
    };
    manifest::write(&mut module, &entries);
    Ok(Built { module, entries })
}

/// The last line `output` holds (what a runtime answers with, after whatever the workflow's
/// top-level code printed).
fn last_line(output: &[u8]) -> &[u8] {
    let trimmed = output.strip_suffix(b"\n").unwrap_or(output);
    match trimmed.iter().rposition(|&b| b == b'\n') {
        Some(at) => &trimmed[at + 1..],
        None => trimmed,
    }
}
