//! JavaScript workflows for wfhost: Boa inside an ordinary wfhost module.
//!
//! `wfhost build shop.js` takes this module, runs its `wizer-initialize` export once (the engine
//! starts, loads the workflow's ES modules, which `wfhost build` hands it on stdin, and prints
//! the entry points it found: the main module's exported `async function`s), and snapshots the
//! memory into a new module with `wasmtime-wizer`: a workflow starts from an engine that has
//! already loaded its code. The result is an ordinary wfhost module (the ABI of `wfguest`, a
//! manifest `wfhost build` writes), which every host runs, hibernates and journals as it does one
//! written in Rust.
//!
//! The context's commands are the SDK's (`native.rs`): each returns a promise, settled by the
//! driver (`drive.rs`) when the SDK's future for it completes, so a JavaScript workflow yields
//! exactly what a Rust one does. What would read the host's clock or entropy outside the journal
//! is routed through WASI's journaled reads or taken away (`engine.rs`).

mod cjs;
mod drive;
mod engine;
mod loader;
mod native;
mod values;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};

use boa_engine::{js_string, Context, JsObject};

/// The interpreter and what it loaded: made by `wizer-initialize`, kept in the snapshot.
struct Runtime {
    context: Context,
    loaded: Loaded,
}

/// What the workflow's code made.
struct Loaded {
    /// The entry points, by name.
    entries: BTreeMap<String, JsObject>,
    /// The `wfhost` module's namespace (`Context`, `Cancelled`, `CommandError`).
    wfhost: JsObject,
    /// Entry point names, sorted; leaked once, for the SDK's "unknown entry point" message.
    names: &'static [&'static str],
}

thread_local! {
    static RUNTIME: RefCell<Option<Runtime>> = const { RefCell::new(None) };
}

/// Runs `f` with the engine. Panics before `wizer-initialize` ran, which a module built by
/// `wfhost build` never is, and when called from inside JavaScript, which nothing here does.
fn with_js<R>(f: impl FnOnce(&mut Context, &Loaded) -> R) -> R {
    RUNTIME.with(|runtime| {
        let mut runtime = runtime.borrow_mut();
        let Runtime { context, loaded } = runtime
            .as_mut()
            .expect("the JavaScript runtime runs only as built by `wfhost build`");
        f(context, loaded)
    })
}

/// What `wfhost build` hands the initialization on stdin.
#[derive(serde::Deserialize)]
struct Sources {
    /// The main module's path among `files` (`shop.js`, `src/main.mjs`).
    main: String,
    /// Every source file, by path relative to its root (`shop.js`, `lib/prices.js`,
    /// `node_modules/left-pad/package.json`).
    files: BTreeMap<String, String>,
}

/// Loads the sources and finds the entry points; what to print on stdout.
fn load(sources: Sources) -> Result<(Runtime, serde_json::Value), String> {
    let loader = loader::Loader::new(sources.files);
    let mut context = engine::context(loader.clone())?;
    let main = loader
        .main(&sources.main, &mut context)
        .map_err(|error| values::describe(&error, &mut context))?;
    let namespace = main.namespace(&mut context);
    let mut entries = BTreeMap::new();
    let mut sync = Vec::new();
    let keys = namespace
        .own_property_keys(&mut context)
        .map_err(|error| values::describe(&error, &mut context))?;
    for key in keys {
        let boa_engine::property::PropertyKey::String(name) = &key else {
            continue;
        };
        let name = name.to_std_string_escaped();
        let value = namespace
            .get(key.clone(), &mut context)
            .map_err(|error| values::describe(&error, &mut context))?;
        let Some(function) = value.as_callable() else {
            continue;
        };
        if !engine::is_async_function(&function, &context) {
            sync.push(name);
            continue;
        }
        if !wfcontract::manifest::is_entry_name(&name) {
            return Err(format!(
                "'{name}' cannot name an entry point: ASCII letters, digits, '_', '-' and '.', \
                 starting with a letter or '_'. Export it under another name \
                 (export {{ {name} as another_name }})"
            ));
        }
        entries.insert(name, function.clone());
    }
    if entries.is_empty() {
        let hint = if sync.is_empty() {
            String::new()
        } else {
            format!(
                " ({} {} exported but not async)",
                sync.join(", "),
                if sync.len() == 1 { "is" } else { "are" }
            )
        };
        return Err(format!(
            "{} exports no entry point: an entry point is an exported 'async function'{hint}",
            sources.main
        ));
    }
    let wfhost = loader
        .wfhost_namespace(&mut context)
        .map_err(|error| values::describe(&error, &mut context))?;
    engine::settle_heap(&mut context);
    let manifest = serde_json::json!({ "entries": entries.keys().collect::<Vec<_>>() });
    let names: Vec<&'static str> = entries
        .keys()
        .map(|name| &*Box::leak(name.clone().into_boxed_str()))
        .collect();
    Ok((
        Runtime {
            context,
            loaded: Loaded {
                entries,
                wfhost,
                names: Box::leak(names.into_boxed_slice()),
            },
        },
        manifest,
    ))
}

/// Run once by `wfhost build` (through `wasmtime-wizer`), never by a host: reads the sources from
/// stdin, loads them, and prints `{"entries": [...]}`, or `{"error": "..."}` and exits 1.
#[export_name = "wizer-initialize"]
pub extern "C" fn initialize() {
    let mut input = Vec::new();
    let answer = std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| format!("reading the sources: {e}"))
        .and_then(|_| {
            serde_json::from_slice::<Sources>(&input)
                .map_err(|e| format!("the sources are not what this runtime reads: {e}"))
        })
        .and_then(load);
    let mut stdout = std::io::stdout();
    match answer {
        Ok((runtime, manifest)) => {
            RUNTIME.with(|slot| *slot.borrow_mut() = Some(runtime));
            let _ = writeln!(stdout, "{manifest}");
            let _ = stdout.flush();
        }
        Err(error) => {
            let _ = writeln!(stdout, "{}", serde_json::json!({ "error": error }));
            let _ = stdout.flush();
            std::process::exit(1);
        }
    }
}

/// The class `name` the `wfhost` module exports (`Context`, `Cancelled`, `CommandError`).
fn wfhost_class(loaded: &Loaded, name: &str, context: &mut Context) -> Option<JsObject> {
    loaded
        .wfhost
        .get(js_string!(name), context)
        .ok()
        .and_then(|value| value.as_object())
        .filter(|object| object.is_constructor())
}

fn names() -> &'static [&'static str] {
    RUNTIME.with(|runtime| {
        runtime
            .borrow()
            .as_ref()
            .map_or(&[][..], |r| r.loaded.names)
    })
}

fn lookup(name: &str) -> Option<Box<dyn wfguest::Entry>> {
    if !names().contains(&name) {
        return None;
    }
    let name = name.to_string();
    Some(wfguest::__private::into_entry(
        move |ctx: wfguest::Ctx, input: serde_json::Value| drive::run(name.clone(), ctx, input),
    ))
}

#[no_mangle]
extern "C" fn wfhost_reserve(len: u32) -> u32 {
    wfguest::__private::reserve(len)
}

#[no_mangle]
extern "C" fn wfhost_init(len: u32) -> u64 {
    engine::new_step();
    wfguest::__private::init(len, names(), lookup)
}

#[no_mangle]
extern "C" fn wfhost_step(len: u32) -> u64 {
    engine::new_step();
    wfguest::__private::step(len)
}

#[no_mangle]
extern "C" fn wfhost_panic_message() -> u64 {
    wfguest::__private::panic_message()
}
