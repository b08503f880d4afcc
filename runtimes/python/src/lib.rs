//! Python workflows for wfhost: RustPython inside an ordinary wfhost module.
//!
//! `wfhost build shop.py` takes this module, runs its `wizer-initialize` export once (the
//! interpreter starts, imports the workflow's sources, which `wfhost build` hands it on stdin, and
//! prints the entry points it found), and snapshots the memory into a new module with
//! `wasmtime-wizer`: a workflow starts from an interpreter that has already imported its code.
//! The result is an ordinary wfhost module (the ABI of `wfguest`, a manifest `wfhost build`
//! writes), which every host runs, hibernates and journals as it does one written in Rust.
//!
//! Each entry point's coroutine is driven here, not by asyncio: awaiting one of the context's
//! commands yields it to the driver, which awaits the SDK's future for it and sends the result
//! back in (`drive.rs`). The commands themselves are the SDK's (`native.rs`), so a Python
//! workflow yields exactly what a Rust one does.

mod drive;
mod native;
mod values;

use std::cell::RefCell;
use std::io::{Read as _, Write as _};

use rustpython_vm::{Interpreter, PyObjectRef, PyResult, VirtualMachine};

/// The `wfhost` package, as Python sees it.
const WFHOST_PY: &str = include_str!("../py/wfhost.py");

/// The interpreter and what it loaded: made by `wizer-initialize`, kept in the snapshot.
struct Runtime {
    interpreter: Interpreter,
    /// The `wfhost` module.
    wfhost: PyObjectRef,
    /// Entry point names, sorted; leaked once, for the SDK's "unknown entry point" message.
    names: &'static [&'static str],
}

thread_local! {
    static RUNTIME: RefCell<Option<Runtime>> = const { RefCell::new(None) };
}

/// Runs `f` inside the interpreter. Panics before `wizer-initialize` ran, which a module built
/// by `wfhost build` never is.
fn with_vm<R>(f: impl FnOnce(&VirtualMachine, &PyObjectRef) -> R) -> R {
    RUNTIME.with(|runtime| {
        let runtime = runtime.borrow();
        let runtime = runtime
            .as_ref()
            .expect("the Python runtime runs only as built by `wfhost build`");
        runtime.interpreter.enter(|vm| f(vm, &runtime.wfhost))
    })
}

fn interpreter() -> Interpreter {
    let mut settings = rustpython_vm::Settings::default();
    // Fixed, so that building the same sources twice gives the same module, and str hashes do
    // not read entropy the journal would have to keep.
    settings.hash_seed = Some(0);
    settings.import_site = false;
    settings.install_signal_handlers = false;
    settings.allow_external_library = false;
    settings.ignore_environment = true;
    settings.path_list = Vec::new();
    let builder = Interpreter::builder(settings);
    let stdlib = rustpython_stdlib::stdlib_module_defs(&builder.ctx);
    let native = native::_wfhost::module_def(&builder.ctx);
    builder
        .add_native_modules(&stdlib)
        .add_native_module(native)
        .add_frozen_modules(rustpython_pylib::FROZEN_STDLIB)
        .build()
}

/// What `wfhost build` hands the initialization on stdin.
#[derive(serde::Deserialize)]
struct Sources {
    /// The module to import, as Python names it (`shop`, `orders.flows`).
    main: String,
    /// Every source file, by path relative to its root (`shop.py`, `orders/__init__.py`).
    files: std::collections::BTreeMap<String, String>,
}

/// Loads the sources and finds the entry points; what to print on stdout.
fn load(sources: Sources) -> Result<(Runtime, serde_json::Value), String> {
    let interpreter = interpreter();
    let loaded = interpreter.enter(|vm| -> PyResult<(PyObjectRef, Vec<String>)> {
        let wfhost = rustpython_vm::import::import_source(vm, "wfhost", WFHOST_PY)?;
        let files = vm.ctx.new_dict();
        for (path, source) in &sources.files {
            files.set_item(path.as_str(), vm.ctx.new_str(source.as_str()).into(), vm)?;
        }
        let names = vm.call_method(
            &wfhost,
            "_load",
            (files, vm.ctx.new_str(sources.main.as_str())),
        )?;
        let names: Vec<String> = names.try_into_value(vm)?;
        Ok((wfhost, names))
    });
    let (wfhost, names) = match loaded {
        Ok(loaded) => loaded,
        Err(exception) => {
            return Err(interpreter.enter(|vm| values::traceback(vm, &exception)));
        }
    };
    let manifest = serde_json::json!({ "entries": names });
    let names: Vec<&'static str> = names
        .into_iter()
        .map(|name| &*Box::leak(name.into_boxed_str()))
        .collect();
    Ok((
        Runtime {
            interpreter,
            wfhost,
            names: Box::leak(names.into_boxed_slice()),
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

fn names() -> &'static [&'static str] {
    RUNTIME.with(|runtime| runtime.borrow().as_ref().map_or(&[][..], |r| r.names))
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
    wfguest::__private::init(len, names(), lookup)
}

#[no_mangle]
extern "C" fn wfhost_step(len: u32) -> u64 {
    wfguest::__private::step(len)
}

#[no_mangle]
extern "C" fn wfhost_panic_message() -> u64 {
    wfguest::__private::panic_message()
}
