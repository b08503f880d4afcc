//! A workflow's sources: the entry file, the files beside it, and the folders named with
//! `--path` (pure-Python or pure-JavaScript dependencies), by path relative to their root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::BuildError;

/// At most this many bytes of sources in all.
const MAX_BYTES: u64 = 32 << 20;

/// At most this many source files.
const MAX_FILES: usize = 20_000;

/// What a language's sources are: files with these extensions, outside folders of these names.
pub(crate) struct Language {
    pub(crate) extensions: &'static [&'static str],
    pub(crate) skipped: &'static [&'static str],
}

/// Python's: `.py` files; no caches, packages of other languages or build output.
pub(crate) const PYTHON: Language = Language {
    extensions: &["py"],
    skipped: &["__pycache__", "node_modules", "target"],
};

/// JavaScript's: modules and JSON (`package.json` among them). `node_modules` is added package
/// by package, as the workflow's `package.json` names them (`js.rs`).
pub(crate) const JAVASCRIPT: Language = Language {
    extensions: &["js", "mjs", "cjs", "json"],
    skipped: &["node_modules", "target", "__pycache__"],
};

/// Folders never searched: hidden ones (version control, caches), the language's skipped names,
/// virtual environments.
fn skipped(dir: &Path, language: &Language) -> bool {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with('.') || language.skipped.contains(&name) || dir.join("pyvenv.cfg").is_file()
}

/// Source files by path relative to the workflow's root, with `/` between names.
#[derive(Default)]
pub(crate) struct Sources {
    files: BTreeMap<String, String>,
    total: u64,
}

impl Sources {
    /// The sources with `language`'s extensions under each of `roots` (the first root's files
    /// win over a later root's of the same path).
    pub(crate) fn collect(roots: &[PathBuf], language: &Language) -> Result<Sources, BuildError> {
        let mut sources = Sources::default();
        for root in roots {
            if !root.is_dir() {
                return Err(BuildError::Sources(format!(
                    "{} is not a folder: --path names folders of sources",
                    root.display()
                )));
            }
            sources.add_tree(root, "", language)?;
        }
        Ok(sources)
    }

    /// The source of `path`, if there.
    pub(crate) fn get(&self, path: &str) -> Option<&str> {
        self.files.get(path).map(String::as_str)
    }

    /// The files, by path.
    pub(crate) fn into_files(self) -> BTreeMap<String, String> {
        self.files
    }

    /// Adds the plain file at `path` (not a link), named `name`, if it is not there already.
    pub(crate) fn add_file(&mut self, path: &Path, name: &str) -> Result<(), BuildError> {
        let Ok(metadata) = std::fs::symlink_metadata(path) else {
            return Ok(());
        };
        if !metadata.is_file() || self.files.contains_key(name) {
            return Ok(());
        }
        self.read(path, name.to_string(), metadata.len())
    }

    /// Adds the files under `dir` (those not there already), each named `prefix` and its path
    /// under `dir`.
    pub(crate) fn add_tree(
        &mut self,
        dir: &Path,
        prefix: &str,
        language: &Language,
    ) -> Result<(), BuildError> {
        let mut pending = vec![dir.to_path_buf()];
        while let Some(folder) = pending.pop() {
            // A folder this user cannot read holds nothing of theirs to build.
            let Ok(entries) = std::fs::read_dir(&folder) else {
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
                    if !skipped(&path, language) {
                        pending.push(path);
                    }
                    continue;
                }
                let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
                if !metadata.is_file() || !language.extensions.contains(&extension) {
                    continue;
                }
                let Some(relative) = relative(dir, &path) else {
                    continue;
                };
                let relative = if prefix.is_empty() {
                    relative
                } else {
                    format!("{prefix}/{relative}")
                };
                if self.files.contains_key(&relative) {
                    continue;
                }
                self.read(&path, relative, metadata.len())?;
            }
        }
        Ok(())
    }

    /// Reads the source at `path` (of `len` bytes) as `name`, within the limits.
    fn read(&mut self, path: &Path, name: String, len: u64) -> Result<(), BuildError> {
        self.total += len;
        if self.total > MAX_BYTES || self.files.len() >= MAX_FILES {
            return Err(BuildError::Sources(format!(
                "the sources come to more than {} MiB or {MAX_FILES} files: is a large folder \
                 among them? Build from a folder that holds only the workflow",
                MAX_BYTES >> 20
            )));
        }
        let mut source = String::new();
        std::fs::File::open(path)
            .and_then(|file| {
                use std::io::Read as _;
                file.take(len).read_to_string(&mut source)
            })
            .map_err(|e| BuildError::Sources(format!("reading {}: {e}", path.display())))?;
        self.files.insert(name, source);
        Ok(())
    }
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
