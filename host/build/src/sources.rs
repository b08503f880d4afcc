//! A workflow's sources: the entry file, the files beside it, and the folders named with
//! `--path` (pure-Python or pure-JavaScript dependencies), by path relative to their root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::BuildError;

/// At most this many bytes of sources in all.
const MAX_BYTES: u64 = 32 << 20;

/// At most this many source files.
const MAX_FILES: usize = 20_000;

/// Folders never searched: version control, caches, virtual environments, build output.
fn skipped(dir: &Path) -> bool {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with('.')
        || matches!(name, "__pycache__" | "node_modules" | "target")
        || dir.join("pyvenv.cfg").is_file()
}

/// The sources with extension `extension` under each of `roots` (the first root's files win
/// over a later root's of the same path), by path relative to their root with `/` between names.
pub(crate) fn collect(
    roots: &[PathBuf],
    extension: &str,
) -> Result<BTreeMap<String, String>, BuildError> {
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    for root in roots {
        if !root.is_dir() {
            return Err(BuildError::Sources(format!(
                "{} is not a folder: --path names folders of sources",
                root.display()
            )));
        }
        let mut pending = vec![root.clone()];
        while let Some(dir) = pending.pop() {
            // A folder this user cannot read holds nothing of theirs to build.
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
            entries.sort_by_key(|entry| entry.file_name());
            for entry in entries {
                let path = entry.path();
                // Links are not followed (a link to a secret would be packed into the module,
                // one to a device would never end): only plain files and folders.
                let Ok(metadata) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if metadata.is_dir() {
                    if !skipped(&path) {
                        pending.push(path);
                    }
                    continue;
                }
                if !metadata.is_file()
                    || path.extension().and_then(|e| e.to_str()) != Some(extension)
                {
                    continue;
                }
                let Some(relative) = relative(root, &path) else {
                    continue;
                };
                if files.contains_key(&relative) {
                    continue;
                }
                total += metadata.len();
                if total > MAX_BYTES || files.len() >= MAX_FILES {
                    return Err(BuildError::Sources(format!(
                        "the sources come to more than {} MiB or {MAX_FILES} files: is a large \
                         folder among them? Build from a folder that holds only the workflow",
                        MAX_BYTES >> 20
                    )));
                }
                let mut source = String::new();
                std::fs::File::open(&path)
                    .and_then(|file| {
                        use std::io::Read as _;
                        file.take(metadata.len()).read_to_string(&mut source)
                    })
                    .map_err(|e| BuildError::Sources(format!("reading {}: {e}", path.display())))?;
                files.insert(relative, source);
            }
        }
    }
    Ok(files)
}

/// `path` relative to `root`, names joined with `/`; `None` for a name that is not UTF-8.
pub(crate) fn relative(root: &Path, path: &Path) -> Option<String> {
    let names: Option<Vec<&str>> = path
        .strip_prefix(root)
        .ok()?
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect();
    Some(names?.join("/"))
}
