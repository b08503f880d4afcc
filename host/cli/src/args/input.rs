//! What the starting commands read: a workflow's input, and its module (a file, or a crate built
//! first).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use wfhost::ModuleInfo;

/// The input (JSON text) from `--input` or `--input-file`; `null` without either.
pub fn read_input(input: Option<&str>, file: Option<&Path>) -> anyhow::Result<String> {
    let (text, source) = match (input, file) {
        (Some(text), _) => (text.to_string(), "--input".to_string()),
        (None, Some(path)) => (
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the input file {}", path.display()))?,
            path.display().to_string(),
        ),
        (None, None) => ("null".to_string(), String::new()),
    };
    if let Err(error) = serde_json::from_str::<serde_json::Value>(&text) {
        bail!("{source} is not valid JSON: {error} (strings need quotes: --input '\"world\"')");
    }
    Ok(text)
}

/// The module at `module` (a `.wasm` file, or a workflow crate's directory, built first): its
/// path and bytes, checked to be a module wfhost runs with entry point `entry`.
pub fn module_with(module: &Path, entry: &str) -> anyhow::Result<(PathBuf, Vec<u8>)> {
    let path = if module.is_dir() {
        wfhost_cli::build::build_workflow(module, true)?
    } else {
        module.to_path_buf()
    };
    let bytes =
        std::fs::read(&path).with_context(|| format!("cannot read module {}", path.display()))?;
    let info = ModuleInfo::inspect(&bytes)
        .with_context(|| format!("{} is not a module wfhost can run", path.display()))?;
    if !info.has_entry(entry) {
        bail!(
            "{} has no entry point '{entry}' (it has: {})",
            path.display(),
            info.entries.join(", ")
        );
    }
    Ok((path, bytes))
}
