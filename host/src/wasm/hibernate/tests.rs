//! Hibernation's parts on real modules: the load-time analysis and rewrite, and snapshots taken
//! and restored through wasmtime.

use wasmparser::{ExternalKind, Parser, Payload as Section};
use wasmtime::{Global, Memory, Store};

use super::pagemap::CHUNK;
use super::*;

fn module(wat: &str) -> Vec<u8> {
    wat::parse_str(wat).unwrap()
}

#[test]
fn unexported_mutable_globals_are_exported_and_the_rest_is_unchanged() {
    let bytes = module(
        r#"(module
            (memory (export "memory") 1)
            (global $sp (mut i32) (i32.const 1024))
            (global $c i64 (i64.const 7))
            (global $n (export "counter") (mut i64) (i64.const 0))
            (func (export "f") (result i32) global.get $sp)
            (@custom "note" "kept"))"#,
    );
    let prepared = prepare(&bytes);
    let plan = prepared.plan.unwrap();
    assert_eq!(plan.globals, vec!["wfhost:global:0", "counter"]);
    let rewritten = prepared.rewritten.unwrap();
    let mut exports = Vec::new();
    let mut custom = Vec::new();
    for section in Parser::new(0).parse_all(&rewritten) {
        match section.unwrap() {
            Section::ExportSection(reader) => {
                for export in reader {
                    let export = export.unwrap();
                    exports.push((export.name.to_string(), export.kind, export.index));
                }
            }
            Section::CustomSection(c) => custom.push(c.name().to_string()),
            _ => {}
        }
    }
    assert_eq!(
        exports,
        vec![
            ("memory".to_string(), ExternalKind::Memory, 0),
            ("counter".to_string(), ExternalKind::Global, 2),
            ("f".to_string(), ExternalKind::Func, 0),
            ("wfhost:global:0".to_string(), ExternalKind::Global, 0),
        ]
    );
    assert!(custom.iter().any(|name| name == "note"), "{custom:?}");
    wasmparser::Validator::new()
        .validate_all(&rewritten)
        .unwrap();
}

#[test]
fn modules_with_state_beyond_memory_and_globals_are_not_hibernated() {
    let cases = [
        (
            r#"(module (memory 1) (func $s) (start $s))"#,
            "start function",
        ),
        (
            r#"(module (memory 1) (table 1 funcref)
                (func (table.set 0 (i32.const 0) (ref.null func))))"#,
            "changes a table",
        ),
        (
            r#"(module (memory 1) (table 1 funcref)
                (func (drop (table.grow 0 (ref.null func) (i32.const 1)))))"#,
            "changes a table",
        ),
        (
            r#"(module (memory 1) (data "x") (func (data.drop 0)))"#,
            "drops a segment",
        ),
        (r#"(module (func))"#, "0 linear memories"),
        (
            r#"(module (memory 1) (global (mut funcref) (ref.null func)))"#,
            "reference-typed global",
        ),
    ];
    for (wat, reason) in cases {
        let prepared = prepare(&module(wat));
        assert!(prepared.rewritten.is_none(), "{wat}");
        let error = prepared.plan.err().unwrap();
        assert!(error.contains(reason), "{wat}: {error}");
    }
}

#[test]
fn a_module_with_every_mutable_global_exported_is_not_rewritten() {
    let prepared = prepare(&module(
        r#"(module (memory (export "memory") 1) (global (export "g") (mut i32) (i32.const 0)))"#,
    ));
    assert!(prepared.rewritten.is_none());
    assert_eq!(prepared.plan.unwrap().globals, vec!["g"]);
}

/// A module prepared for hibernation and compiled, to run in the tests below.
struct Fixture {
    plan: HibernationPlan,
    engine: wasmtime::Engine,
    module: wasmtime::Module,
}

/// An instance of a [`Fixture`], with its memory and its mutable globals in the plan's order.
struct Running {
    instance: wasmtime::Instance,
    memory: Memory,
    globals: Vec<Global>,
}

impl Fixture {
    fn new(wat: &str) -> Fixture {
        let bytes = module(wat);
        let prepared = prepare(&bytes);
        let engine = wasmtime::Engine::default();
        let source = prepared.rewritten.unwrap_or(bytes);
        Fixture {
            plan: prepared.plan.unwrap(),
            module: wasmtime::Module::new(&engine, source).unwrap(),
            engine,
        }
    }

    fn store(&self) -> Store<()> {
        Store::new(&self.engine, ())
    }

    fn instantiate(&self, store: &mut Store<()>) -> Running {
        let instance = wasmtime::Instance::new(&mut *store, &self.module, &[]).unwrap();
        let memory = instance.get_memory(&mut *store, "memory").unwrap();
        let globals = self
            .plan
            .globals
            .iter()
            .map(|name| instance.get_global(&mut *store, name).unwrap())
            .collect();
        Running {
            instance,
            memory,
            globals,
        }
    }
}

impl Running {
    fn call<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
        &self,
        store: &mut Store<()>,
        name: &str,
        params: P,
    ) -> R {
        self.instance
            .get_typed_func::<P, R>(&mut *store, name)
            .unwrap()
            .call(&mut *store, params)
            .unwrap()
    }

    fn take(&self, store: &mut Store<()>, image: &[u8]) -> Snapshot {
        Snapshot::take(store, self.memory, &self.globals, image)
    }
}

/// A hibernated instance, restored into a fresh one, carries on where it was: a counter in a
/// global the module does not export, a page it wrote, the memory it grew.
#[test]
fn a_snapshot_restores_globals_written_pages_and_grown_memory() {
    let fixture = Fixture::new(
        r#"(module
            (memory (export "memory") 1)
            (data (i32.const 100) "initial")
            (global $count (mut i32) (i32.const 0))
            (func (export "bump") (result i32)
                (global.set $count (i32.add (global.get $count) (i32.const 1)))
                (i32.store (i32.const 70000) (global.get $count))
                (global.get $count))
            (func (export "grow") (drop (memory.grow (i32.const 2))))
            (func (export "read") (param i32) (result i32) (i32.load (local.get 0))))"#,
    );
    let image = &fixture.plan.image;
    assert_eq!(&image[100..107], b"initial");
    let mut store = fixture.store();
    let running = fixture.instantiate(&mut store);
    running.call::<(), ()>(&mut store, "grow", ());
    for _ in 0..3 {
        running.call::<(), i32>(&mut store, "bump", ());
    }
    let snapshot = running.take(&mut store, image);
    // One chunk differs: the one holding the counter's copy in memory.
    assert_eq!(&snapshot.chunks[..], &[70000 / CHUNK as u32]);
    drop(store);

    let mut store = fixture.store();
    let running = fixture.instantiate(&mut store);
    snapshot
        .restore(&mut store, running.memory, &running.globals)
        .unwrap();
    assert_eq!(running.memory.data_size(&store), 3 << 16);
    assert_eq!(running.call::<i32, i32>(&mut store, "read", 70000), 3);
    assert_eq!(running.call::<(), i32>(&mut store, "bump", ()), 4);
    assert_eq!(&running.memory.data(&store)[100..107], b"initial");
}

/// The chunk holding the end of the initial data is compared with the image, not with
/// zeros: data set to zero there is saved, and stays zero after a restore.
#[test]
fn zeroed_initial_data_in_a_partly_initialised_chunk_stays_zero() {
    let fixture = Fixture::new(
        r#"(module
            (memory (export "memory") 1)
            (data (i32.const 100) "initial")
            (func (export "zero") (i64.store (i32.const 100) (i64.const 0)))
            (func (export "read") (result i64) (i64.load (i32.const 100))))"#,
    );
    let image = &fixture.plan.image;
    assert_eq!(image.len(), CHUNK);
    let mut store = fixture.store();
    let running = fixture.instantiate(&mut store);
    running.call::<(), ()>(&mut store, "zero", ());
    let snapshot = running.take(&mut store, image);
    assert_eq!(&snapshot.chunks[..], &[0]);

    let mut store = fixture.store();
    let running = fixture.instantiate(&mut store);
    snapshot
        .restore(&mut store, running.memory, &running.globals)
        .unwrap();
    assert_eq!(running.call::<(), i64>(&mut store, "read", ()), 0);
}

#[test]
fn a_data_segment_outside_the_initial_memory_is_not_imaged() {
    let prepared = prepare(&module(
        r#"(module (memory 1) (data (i32.const 0xFFFFFFF0) "x"))"#,
    ));
    let error = prepared.plan.err().unwrap();
    assert!(error.contains("outside its initial memory"), "{error}");
}

/// A snapshot restored over an instance another process used leaves nothing of that process:
/// its pages go back to the image, the snapshot's are written, the globals set.
#[test]
fn a_snapshot_restored_over_a_used_instance_leaves_nothing_of_its_last_process() {
    let fixture = Fixture::new(
        r#"(module
            (memory (export "memory") 1)
            (data (i32.const 100) "initial")
            (global $g (mut i32) (i32.const 0))
            (func (export "write") (param i32 i32)
                (i32.store (local.get 0) (local.get 1))
                (global.set $g (local.get 1)))
            (func (export "read") (param i32) (result i32) (i32.load (local.get 0)))
            (func (export "global") (result i32) (global.get $g)))"#,
    );
    let image = &fixture.plan.image;
    let mut store = fixture.store();
    // Process A writes page 5 and hibernates.
    let a = fixture.instantiate(&mut store);
    a.call::<(i32, i32), ()>(&mut store, "write", (5 * 4096, 55));
    let snapshot_a = a.take(&mut store, image);
    // Process B, in another instance, writes page 7 and over the initial data.
    let b = fixture.instantiate(&mut store);
    b.call::<(i32, i32), ()>(&mut store, "write", (7 * 4096, 77));
    b.call::<(i32, i32), ()>(&mut store, "write", (100, 0));
    // A is restored over B's instance.
    assert!(snapshot_a
        .restore_over(&mut store, b.memory, &b.globals, image)
        .unwrap());
    assert_eq!(b.call::<i32, i32>(&mut store, "read", 5 * 4096), 55);
    assert_eq!(b.call::<i32, i32>(&mut store, "read", 7 * 4096), 0);
    assert_eq!(&b.memory.data(&store)[100..107], b"initial");
    assert_eq!(b.globals[0].get(&mut store).i32(), Some(55));
}

/// A snapshot kept as an image in a store comes back whole, and an image that does not fit its
/// module (a global of another type, a memory outside the module's bounds or not in whole pages,
/// pages out of order, a length that does not add up) is refused with the reason, never
/// restored.
#[test]
fn an_image_round_trips_and_one_that_does_not_fit_is_refused() {
    use super::snapshot::{GlobalValue, Image};
    let fixture = Fixture::new(
        r#"(module
            (memory (export "memory") 1 4)
            (global $count (mut i32) (i32.const 0))
            (func (export "bump") (result i32)
                (global.set $count (i32.add (global.get $count) (i32.const 1)))
                (i32.store (i32.const 70000) (global.get $count))
                (global.get $count))
            (func (export "grow") (drop (memory.grow (i32.const 1))))
            (func (export "read") (param i32) (result i32) (i32.load (local.get 0))))"#,
    );
    let globals = fixture.plan.globals.len();
    let mut store = fixture.store();
    let running = fixture.instantiate(&mut store);
    running.call::<(), ()>(&mut store, "grow", ());
    running.call::<(), i32>(&mut store, "bump", ());
    running.call::<(), i32>(&mut store, "bump", ());
    let image = running
        .take(&mut store, &fixture.plan.image)
        .to_image()
        .unwrap();
    drop(store);

    let restored = Snapshot::from_image(image.clone(), globals, 1 << 30).unwrap();
    restored
        .fits(&fixture.module, &fixture.plan.globals)
        .unwrap();
    let mut store = fixture.store();
    let running = fixture.instantiate(&mut store);
    restored
        .restore(&mut store, running.memory, &running.globals)
        .unwrap();
    assert_eq!(running.call::<i32, i32>(&mut store, "read", 70000), 2);
    assert_eq!(running.call::<(), i32>(&mut store, "bump", ()), 3);

    let refused = |change: fn(&mut Image)| {
        let mut image = image.clone();
        change(&mut image);
        match Snapshot::from_image(image, globals, 1 << 30) {
            Err(why) => why,
            Ok(snapshot) => snapshot
                .fits(&fixture.module, &fixture.plan.globals)
                .unwrap_err(),
        }
    };
    assert!(refused(|i| i.globals[0] = GlobalValue::I64(2)).contains("type"));
    assert!(refused(|i| i.memory_bytes = 8 << 16).contains("bounds"));
    assert!(refused(|i| i.memory_bytes += 4096).contains("pages"));
    assert!(refused(|i| i.memory_bytes = 64 << 30).contains("limit"));
    assert!(refused(|i| i.globals.clear()).contains("globals"));
    assert!(refused(|i| i.chunks = vec![20, 17]).contains("order"));
    assert!(refused(|i| i.raw_len += 1).contains("hold"));
}
