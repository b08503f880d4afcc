//! Python: RustPython inside a wfhost module (`runtimes/python`), pre-initialized with the
//! workflow's modules.

use std::path::{Path, PathBuf};

use crate::{runtime, sources, BuildError, Built};

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
    let files = sources::Sources::collect(&roots, &sources::PYTHON)?.into_files();
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
    runtime::initialize(
        runtime::PYTHON,
        serde_json::json!({ "main": module_name, "files": files }),
    )
}
