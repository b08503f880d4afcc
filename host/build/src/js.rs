//! JavaScript: Boa inside a wfhost module (`runtimes/js`), pre-initialized with the workflow's
//! ES modules.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::sources::{self, Sources, JAVASCRIPT};
use crate::{runtime, BuildError, Built};

/// The types of the `wfhost` module and the context, for TypeScript (`wfhost.d.ts`).
pub const TYPES: &str = include_str!("../../../runtimes/js/js/wfhost.d.ts");

/// Builds the JavaScript workflow whose entry points `main` (an ES module, `.js` or `.mjs`)
/// exports: its exported `async function`s.
///
/// Packed with it: every `.js`, `.mjs`, `.cjs` and `.json` file under `main`'s folder; the
/// project's `package.json` (the nearest at or above that folder) and, from the project's
/// `node_modules`, the packages it names in `dependencies` (and theirs, in turn); then the files
/// under each of `paths`, as if they lay at the project's root. Nothing else above `main`'s
/// folder is read, and no link is followed.
pub fn javascript(main: &Path, paths: &[PathBuf]) -> Result<Built, BuildError> {
    let extension = main.extension().and_then(|e| e.to_str());
    if !matches!(extension, Some("js" | "mjs")) || !main.is_file() {
        return Err(BuildError::Sources(format!(
            "{} is not a JavaScript module: name the .js or .mjs file that exports the entry \
             points (compile TypeScript to JavaScript first, with tsc or esbuild)",
            main.display()
        )));
    }
    let main = main
        .canonicalize()
        .map_err(|e| BuildError::Sources(format!("{}: {e}", main.display())))?;
    let folder = main.parent().unwrap_or(Path::new("/"));
    let root = folder
        .ancestors()
        .find(|dir| dir.join("package.json").is_file())
        .unwrap_or(folder)
        .to_path_buf();
    let mut sources = Sources::default();
    let prefix = sources::relative(&root, folder).ok_or_else(|| {
        BuildError::Sources(format!("{} has a name that is not UTF-8", folder.display()))
    })?;
    sources.add_tree(folder, &prefix, &JAVASCRIPT)?;
    if prefix.is_empty() {
        // The folder is the project: its package.json is among its files already.
    } else {
        sources.add_file(&root.join("package.json"), "package.json")?;
    }
    add_dependencies(&mut sources, &root)?;
    for path in paths {
        if !path.is_dir() {
            return Err(BuildError::Sources(format!(
                "{} is not a folder: --path names folders of sources",
                path.display()
            )));
        }
        sources.add_tree(path, "", &JAVASCRIPT)?;
    }
    let main_path = sources::relative(&root, &main).ok_or_else(|| {
        BuildError::Sources(format!("{} has a name that is not UTF-8", main.display()))
    })?;
    runtime::initialize(
        runtime::JAVASCRIPT,
        serde_json::json!({ "main": main_path, "files": sources.into_files() }),
    )
}

/// The dependencies `package.json` at `folder` (relative to the root) names.
fn dependencies(sources: &Sources, folder: &str) -> Vec<String> {
    let manifest = if folder.is_empty() {
        "package.json".to_string()
    } else {
        format!("{folder}/package.json")
    };
    let Some(manifest) = sources
        .get(&manifest)
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
    else {
        return Vec::new();
    };
    ["dependencies", "optionalDependencies", "peerDependencies"]
        .iter()
        .filter_map(|key| manifest.get(*key).and_then(|deps| deps.as_object()))
        .flat_map(|deps| deps.keys().cloned())
        .collect()
}

/// Packs the packages the root's `package.json` depends on, and theirs in turn, each found as
/// Node finds it: in the `node_modules` of the depending package's folder or a folder above it.
/// A dependency not installed is skipped (an optional one, or one never imported); an import of
/// it fails the build with the module's name.
fn add_dependencies(sources: &mut Sources, root: &Path) -> Result<(), BuildError> {
    let mut done = BTreeSet::new();
    let mut pending: Vec<(String, String)> = dependencies(sources, "")
        .into_iter()
        .map(|name| (String::new(), name))
        .collect();
    while let Some((from, name)) = pending.pop() {
        if name
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
        {
            continue;
        }
        let mut folder = from.clone();
        let found = loop {
            let candidate = if folder.is_empty() {
                format!("node_modules/{name}")
            } else {
                format!("{folder}/node_modules/{name}")
            };
            let on_disk = root.join(&candidate);
            if std::fs::symlink_metadata(&on_disk).is_ok() {
                // A package reached through a link (pnpm's layout, `npm link`, workspaces)
                // could lie anywhere: refused, rather than packing what it points to.
                let real = on_disk.canonicalize().ok();
                if real.as_deref() != Some(on_disk.as_path()) || !on_disk.is_dir() {
                    return Err(BuildError::Sources(format!(
                        "{} is a link or not a folder: wfhost build packs only packages installed \
                         as folders inside the project (npm and yarn install them so; with pnpm, \
                         set node-linker=hoisted)",
                        on_disk.display()
                    )));
                }
                break Some(candidate);
            }
            if folder.is_empty() {
                break None;
            }
            folder = parent_package(&folder);
        };
        let Some(package) = found else {
            continue;
        };
        if !done.insert(package.clone()) {
            continue;
        }
        sources.add_tree(&root.join(&package), &package, &JAVASCRIPT)?;
        pending.extend(
            dependencies(sources, &package)
                .into_iter()
                .map(|dependency| (package.clone(), dependency)),
        );
    }
    Ok(())
}

/// The folder above `folder` in which to look for `node_modules` next: above the `node_modules`
/// that holds it, if it is a package.
fn parent_package(folder: &str) -> String {
    match folder.rfind("/node_modules/") {
        Some(at) => folder[..at].to_string(),
        None if folder.starts_with("node_modules/") => String::new(),
        None => match folder.rfind('/') {
            Some(at) => folder[..at].to_string(),
            None => String::new(),
        },
    }
}
