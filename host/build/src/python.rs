//! Python: RustPython inside a wfhost module (`runtimes/python`), pre-initialized with the
//! workflow's modules.

use std::path::{Path, PathBuf};

use crate::{manifest, preinit, sources, BuildError, Built};

/// The Python runtime, as `build.rs` built it.
const RUNTIME: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/wfhost_python.wasm"));

/// Builds the Python workflow whose entry points `main` (a `.py` file) registers. Every `.py`
/// file under `main`'s folder is packed with it (importable by its path: `orders/flows.py` is
/// `orders.flows`), and those under each of `paths` (pure-Python packages), after them.
pub fn python(main: &Path, paths: &[PathBuf]) -> Result<Built, BuildError> {
    if main.extension().and_then(|e| e.to_str()) != Some("py") || !main.is_file() {
        return Err(BuildError::Sources(format!(
            "{} is not a Python file: name the .py file that defines the entry points",
            main.display()
        )));
    }
    let main = main
        .canonicalize()
        .map_err(|e| BuildError::Sources(format!("{}: {e}", main.display())))?;
    let root = main.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut roots = vec![root.clone()];
    roots.extend(paths.iter().cloned());
    let files = sources::collect(&roots, "py")?;
    let module_name = sources::relative(&root, &main)
        .and_then(|path| path.strip_suffix(".py").map(|stem| stem.replace('/', ".")))
        .filter(|name| {
            name.split('.')
                .all(|part| !part.is_empty() && !part.starts_with(|c: char| c.is_ascii_digit()))
        })
        .ok_or_else(|| {
            BuildError::Sources(format!(
                "{} cannot be imported as a Python module: name it as Python names modules \
                 (letters, digits and '_', not starting with a digit)",
                main.display()
            ))
        })?;
    let stdin = serde_json::to_vec(&serde_json::json!({ "main": module_name, "files": files }))
        .map_err(|e| BuildError::Sources(e.to_string()))?;
    let initialized = preinit::run(RUNTIME, stdin).map_err(|message| BuildError::Runtime {
        language: "Python",
        message,
    })?;
    let answer: serde_json::Value = serde_json::from_slice(last_line(&initialized.stdout))
        .map_err(|_| BuildError::Runtime {
            language: "Python",
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
            language: "Python",
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
