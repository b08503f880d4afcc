//! The workflow's modules, from the sources `wfhost build` packed: ES modules, JSON files, and
//! CommonJS files from `node_modules` (`cjs.rs`), found as Node and bundlers find them; the
//! `wfhost` module; nothing from the machine.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;

use boa_engine::module::{ModuleLoader, Referrer, SyntheticModuleInitializer};
use boa_engine::{
    js_error, js_string, Context, JsError, JsObject, JsResult, JsString, JsValue, Module, Source,
};

use crate::{cjs, native};

/// The `wfhost` module's source.
const WFHOST_JS: &str = include_str!("../js/wfhost.js");

/// The `wfhost` module's path: no source file can have it.
pub(crate) const WFHOST: &str = "<wfhost>";

/// The context's commands, importable by the `wfhost` module only.
const NATIVE: &str = "wfhost:native";

/// Node's built-in modules, refused by name with the reason.
const NODE_BUILTINS: &[&str] = &[
    "assert",
    "buffer",
    "child_process",
    "cluster",
    "crypto",
    "dgram",
    "dns",
    "events",
    "fs",
    "fs/promises",
    "http",
    "http2",
    "https",
    "net",
    "os",
    "path",
    "process",
    "readline",
    "stream",
    "timers",
    "tls",
    "url",
    "util",
    "worker_threads",
    "zlib",
];

/// The most `package.json`s one resolution follows, one naming the next's folder.
const MAX_HOPS: usize = 8;

/// The sources and the modules made of them.
pub(crate) struct Loader {
    files: BTreeMap<String, String>,
    /// Modules by path, each made once.
    modules: RefCell<HashMap<String, Module>>,
    /// CommonJS modules' `module` objects by path, each run once (`cjs.rs`).
    pub(crate) required: RefCell<HashMap<String, JsObject>>,
}

thread_local! {
    /// The loader, for `require` (a native function cannot hold it).
    static LOADER: RefCell<Option<Rc<Loader>>> = const { RefCell::new(None) };
}

/// The loader `wfhost build` made.
pub(crate) fn current() -> Option<Rc<Loader>> {
    LOADER.with(|loader| loader.borrow().clone())
}

impl Loader {
    pub(crate) fn new(files: BTreeMap<String, String>) -> Rc<Loader> {
        let loader = Rc::new(Loader {
            files,
            modules: RefCell::new(HashMap::new()),
            required: RefCell::new(HashMap::new()),
        });
        LOADER.with(|slot| *slot.borrow_mut() = Some(loader.clone()));
        loader
    }

    /// The source at `path`, if packed.
    pub(crate) fn source(&self, path: &str) -> Option<&str> {
        self.files.get(path).map(String::as_str)
    }

    /// Loads, links and runs the main module at `path`.
    pub(crate) fn main(&self, path: &str, context: &mut Context) -> JsResult<Module> {
        let module = self.module(path, context)?;
        evaluated(&module, context)?;
        Ok(module)
    }

    /// The `wfhost` module's exports (loaded now if the workflow never imported it).
    pub(crate) fn wfhost_namespace(&self, context: &mut Context) -> JsResult<JsObject> {
        let module = self.module(WFHOST, context)?;
        evaluated(&module, context)?;
        Ok(module.namespace(context))
    }

    /// The module at resolved `path`, made once.
    fn module(&self, path: &str, context: &mut Context) -> JsResult<Module> {
        if let Some(module) = self.modules.borrow().get(path) {
            return Ok(module.clone());
        }
        let module = if path == WFHOST {
            Module::parse(
                Source::from_bytes(WFHOST_JS).with_path(Path::new(WFHOST)),
                None,
                context,
            )?
        } else if path == NATIVE {
            native::module(context)
        } else {
            let source = self
                .source(path)
                .ok_or_else(|| js_error!(Error: "cannot find module '{}'", path))?;
            if path.ends_with(".json") {
                Module::parse_json(JsString::from(source), context)
                    .map_err(|error| js_error!(SyntaxError: "{}: {}", path, error))?
            } else if cjs::is_commonjs(self, path) {
                let exports = cjs::require_path(self, path, context)?;
                exports_module(exports, context)?
            } else {
                Module::parse(
                    Source::from_bytes(source).with_path(Path::new(path)),
                    None,
                    context,
                )?
            }
        };
        self.modules
            .borrow_mut()
            .insert(path.to_string(), module.clone());
        Ok(module)
    }

    /// The path `specifier` names, imported from `referrer` (a path among the sources).
    pub(crate) fn resolve(&self, referrer: &str, specifier: &str) -> JsResult<String> {
        if specifier == "wfhost" {
            return Ok(WFHOST.to_string());
        }
        if specifier == NATIVE {
            return if referrer == WFHOST {
                Ok(NATIVE.to_string())
            } else {
                Err(js_error!(
                    TypeError: "'{}' is wfhost's own: import the context's types from 'wfhost'",
                    NATIVE
                ))
            };
        }
        if let Some(name) = specifier.strip_prefix("node:") {
            return Err(node_builtin(name));
        }
        let found = if specifier.starts_with("./")
            || specifier.starts_with("../")
            || specifier.starts_with('/')
        {
            let base = if specifier.starts_with('/') {
                String::new()
            } else {
                parent(referrer).to_string()
            };
            let joined = join(&base, specifier).ok_or_else(|| {
                js_error!(
                    Error: "'{}' (imported by {}) lies outside the workflow's sources",
                    specifier,
                    referrer
                )
            })?;
            self.file_or_folder(&joined)
        } else {
            if NODE_BUILTINS.contains(&specifier) {
                return Err(node_builtin(specifier));
            }
            self.package(referrer, specifier)
        };
        found.ok_or_else(|| {
            js_error!(
                Error: "cannot find module '{}' imported by {}: a relative import names the file \
                 (./prices.js), a package lies in node_modules beside the sources or in a folder \
                 given with --path, and only pure-JavaScript packages can be packed",
                specifier,
                referrer
            )
        })
    }

    /// `path` itself, with `.js`, `.mjs`, `.cjs` or `.json` added, or its folder's index or
    /// package entry.
    fn file_or_folder(&self, path: &str) -> Option<String> {
        self.file_or_folder_within(path, 0)
    }

    /// [`file_or_folder`](Self::file_or_folder), `depth` folders' `package.json`s in: a
    /// package whose entry names a folder whose entry names ... ends at [`MAX_HOPS`].
    fn file_or_folder_within(&self, path: &str, depth: usize) -> Option<String> {
        if self.files.contains_key(path) {
            return Some(path.to_string());
        }
        for extension in [".js", ".mjs", ".cjs", ".json"] {
            let candidate = format!("{path}{extension}");
            if self.files.contains_key(&candidate) {
                return Some(candidate);
            }
        }
        let folder = path.trim_end_matches('/');
        if depth < MAX_HOPS {
            if let Some(entry) = self.package_entry_within(folder, ".", depth + 1) {
                return Some(entry);
            }
        }
        ["index.js", "index.mjs", "index.cjs", "index.json"]
            .iter()
            .map(|index| join_name(folder, index))
            .find(|candidate| self.files.contains_key(candidate))
    }

    /// Bare `specifier` (`left-pad`, `@scope/name/sub`): in the `node_modules` of the referrer's
    /// folder and each folder above it, then at the root (a folder given with `--path`).
    fn package(&self, referrer: &str, specifier: &str) -> Option<String> {
        let mut parts = specifier.splitn(if specifier.starts_with('@') { 3 } else { 2 }, '/');
        let name = if specifier.starts_with('@') {
            format!("{}/{}", parts.next()?, parts.next()?)
        } else {
            parts.next()?.to_string()
        };
        let subpath = parts.next().map(|rest| format!("./{rest}"));
        let mut folder = parent(referrer).to_string();
        let mut candidates = Vec::new();
        loop {
            candidates.push(join_name(&join_name(&folder, "node_modules"), &name));
            if folder.is_empty() {
                break;
            }
            folder = parent(&folder).to_string();
        }
        candidates.push(name);
        for root in candidates {
            let found = match &subpath {
                None => self.file_or_folder(&root),
                Some(subpath) => self
                    .package_entry(&root, subpath)
                    .or_else(|| self.file_or_folder(&join_name(&root, &subpath[2..]))),
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// What `folder/package.json` names for `subpath` (`.` or `./sub`): its `exports`, or for
    /// `.` its `module` or `main`.
    fn package_entry(&self, folder: &str, subpath: &str) -> Option<String> {
        self.package_entry_within(folder, subpath, 0)
    }

    fn package_entry_within(&self, folder: &str, subpath: &str, depth: usize) -> Option<String> {
        let manifest = self.files.get(&join_name(folder, "package.json"))?;
        let manifest: serde_json::Value = serde_json::from_str(manifest).ok()?;
        let target = match manifest.get("exports") {
            Some(exports) => export_target(exports, subpath)?,
            None if subpath == "." => ["module", "main"]
                .iter()
                .find_map(|key| manifest.get(*key).and_then(|v| v.as_str()))?
                .to_string(),
            None => return None,
        };
        let path = join(folder, &target)?;
        if self.files.contains_key(&path) {
            return Some(path);
        }
        // An entry naming its own folder (`"main": "."`) is that folder's index.
        if path == folder {
            return None;
        }
        self.file_or_folder_within(&path, depth)
    }
}

/// What `exports` maps `subpath` to: a string, a `{".": ..., "./sub": ...}` map, or conditions
/// (`import`, `module`, `default`, `require`, `node`, in that order of preference).
fn export_target(exports: &serde_json::Value, subpath: &str) -> Option<String> {
    fn conditions(value: &serde_json::Value) -> Option<String> {
        match value {
            serde_json::Value::String(target) => Some(target.clone()),
            serde_json::Value::Object(map) => ["import", "module", "default", "require", "node"]
                .iter()
                .find_map(|condition| map.get(*condition).and_then(conditions)),
            serde_json::Value::Array(choices) => choices.iter().find_map(conditions),
            _ => None,
        }
    }
    match exports {
        serde_json::Value::Object(map) if map.keys().any(|key| key.starts_with('.')) => {
            conditions(map.get(subpath)?)
        }
        other if subpath == "." => conditions(other),
        _ => None,
    }
}

fn node_builtin(name: &str) -> JsError {
    js_error!(
        Error: "module '{}' is not available: a workflow runs in wfhost's sandbox, without files, \
         sockets or processes. The host makes its HTTP requests (ctx.http, to the URLs it \
         allows) and its worker functions reach everything else (ctx.call)",
        name
    )
}

/// The folder of `path` (`""` at the root).
pub(crate) fn parent(path: &str) -> &str {
    path.rfind('/').map_or("", |at| &path[..at])
}

fn join_name(folder: &str, name: &str) -> String {
    if folder.is_empty() {
        name.to_string()
    } else {
        format!("{folder}/{name}")
    }
}

/// `relative` (`./a`, `../b/c`, `/d`) from `folder`, with `.` and `..` taken away; `None` if it
/// climbs above the root.
pub(crate) fn join(folder: &str, relative: &str) -> Option<String> {
    let mut parts: Vec<&str> = if relative.starts_with('/') {
        Vec::new()
    } else {
        folder.split('/').filter(|part| !part.is_empty()).collect()
    };
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    Some(parts.join("/"))
}

/// A module whose exports are a CommonJS module's: `default` is `module.exports`, and each of
/// its own enumerable names (when it is an object) is a named export, as Node gives them.
fn exports_module(exports: JsValue, context: &mut Context) -> JsResult<Module> {
    let mut names = vec![js_string!("default")];
    if let Some(object) = exports.as_object() {
        for key in object.own_property_keys(context)? {
            if let boa_engine::property::PropertyKey::String(name) = key {
                if name != js_string!("default") {
                    names.push(name);
                }
            }
        }
    }
    let exported = names.clone();
    Ok(Module::synthetic(
        &names,
        SyntheticModuleInitializer::from_copy_closure_with_captures(
            |module, (exports, names), context| {
                for name in names {
                    let value = if *name == js_string!("default") {
                        exports.clone()
                    } else {
                        match exports.as_object() {
                            Some(object) => object.get(name.clone(), context)?,
                            None => JsValue::undefined(),
                        }
                    };
                    module.set_export(name, value)?;
                }
                Ok(())
            },
            (exports, exported),
        ),
        None,
        None,
        context,
    ))
}

/// Runs `module`'s loading, linking and evaluation to their end.
fn evaluated(module: &Module, context: &mut Context) -> JsResult<()> {
    let promise = module.load_link_evaluate(context);
    context.run_jobs()?;
    match promise.state() {
        boa_engine::builtins::promise::PromiseState::Fulfilled(_) => Ok(()),
        boa_engine::builtins::promise::PromiseState::Rejected(error) => {
            Err(JsError::from_opaque(error))
        }
        boa_engine::builtins::promise::PromiseState::Pending => Err(js_error!(
            Error: "the module's top-level code waits for something that never comes: the \
             context's commands run only inside a workflow"
        )),
    }
}

impl ModuleLoader for Loader {
    async fn load_imported_module(
        self: Rc<Self>,
        referrer: Referrer,
        request: boa_engine::module::ModuleRequest,
        context: &RefCell<&mut Context>,
    ) -> JsResult<Module> {
        let from = referrer
            .path()
            .and_then(Path::to_str)
            .unwrap_or("")
            .to_string();
        let path = self.resolve(&from, &request.specifier().to_std_string_escaped())?;
        self.module(&path, &mut context.borrow_mut())
    }
}
