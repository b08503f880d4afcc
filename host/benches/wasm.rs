//! The cost of a wasm process next to raw wasmtime, in one run:
//! `cargo bench -p wfhost --bench wasm`.
//!
//! - `raw/instantiate`: a store with a WASI context, instantiated from an `InstancePre`, dropped.
//! - `wfhost/spawn`: what spawning the hello module costs a worker: instantiate plus `init`, and
//!   the drop. Both with wasmtime's on-demand and pooling allocators.
//! - `raw/call_write32`: one call into the guest and a 32-byte write into its memory.
//! - `wfhost/step`: one step round trip: a message in, a yielded send out (encode, write, call,
//!   read, decode, vet the yield against the grants and the payload limit).
//! - `wfhost/step/fuel`: the same with fuel accounting on (`Limits::fuel_per_step`).

use criterion::{criterion_group, criterion_main, Criterion};
use wfhost::__bench::Harness;
use wfhost::contract::{Event, Payload, Pid, StepOutput};
use wfhost::scheduler::Events;
use wfhost::Limits;
use wfhost_test_programs::{HELLO, PROBE};

fn spawn(c: &mut Criterion) {
    let bytes = std::fs::read(HELLO).unwrap();
    let input = Payload::to_json("world").unwrap();
    let mut group = c.benchmark_group("spawn");
    for (allocator, pooling) in [("on-demand", None), ("pooling", Some(1_000))] {
        let hello = Harness::new(&bytes, pooling).unwrap();
        // Each iteration also drops what it made, on both sides: a pool slot must come back.
        group.bench_function(format!("raw/instantiate/{allocator}"), |b| {
            b.iter(|| drop(hello.instantiate_raw()))
        });
        group.bench_function(format!("wfhost/spawn/{allocator}"), |b| {
            b.iter(|| drop(hello.spawn("greet", input.clone()).unwrap()))
        });
    }
    group.finish();
}

fn step(c: &mut Criterion) {
    let bytes = std::fs::read(PROBE).unwrap();
    let probe = Harness::new(&bytes, None).unwrap();
    let fueled = Limits {
        fuel_per_step: Some(10_000_000),
        ..Limits::default()
    };
    let probe_with_fuel = Harness::with_limits(&bytes, None, fueled).unwrap();
    let mut group = c.benchmark_group("step");
    let mut raw = probe.instantiate_raw();
    let bytes = [7u8; 32];
    group.bench_function("raw/call_write32", |b| b.iter(|| raw.write32(&bytes)));

    for (name, harness) in [
        ("wfhost/step", &probe),
        ("wfhost/step/fuel", &probe_with_fuel),
    ] {
        let mut relay = harness.spawn("relay", Payload::empty()).unwrap();
        let mut out = StepOutput::new();
        let mut events = Vec::new();
        // The first step starts the loop; after that each message makes one send.
        relay.step(Events::new(&mut events), &mut out).unwrap();
        let message = Event::message(Pid(9), Payload::to_postcard(&42u64).unwrap());
        group.bench_function(name, |b| {
            b.iter(|| {
                events.push(message.clone());
                out.reset();
                relay.step(Events::new(&mut events), &mut out).unwrap();
                assert_eq!(out.yields.len(), 1);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, spawn, step);
criterion_main!(benches);
