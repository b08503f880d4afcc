//! Wasm processes at scale, next to raw wasmtime and native processes measured in the same run:
//! `cargo bench -p wfhost --bench wasm [-- workload ...]`.
//!
//! Each workload prints one line: its figure and, where a floor applies, `floor=<the floor measured
//! in this run>` and `ratio=` (this project's throughput over the floor's; for the step, the
//! floor's time over ours).
//!
//! - `spawn`: instantiate + `init` (+ drop) of the tiny workflow, per second; floor: raw
//!   `InstancePre::instantiate` with a WASI context (+ drop). On-demand and pooling allocators.
//! - `step`: one message in, one yielded send out; floor: one raw call that reserves 32 bytes and a
//!   32-byte write into guest memory.
//! - `ring`: 1,000 wasm processes pass a token 1,000,000 hops; floor: the same ring of native
//!   processes on the same scheduler.
//! - `skynet`: a 10-ary tree of wasm processes with 100,000 leaves; floor: the same tree of native
//!   processes.
//! - `churn`: steady-state spawn and exit: 200,000 processes that answer at once, spawned from
//!   outside in batches of 1,000 (each batch waited for before the next), so the live set stays
//!   small and every instance slot is reused. Per spawn: the rate and what it cost the OS.
//! - `idle`: `WFHOST_BENCH_IDLE` (default 100,000) wasm processes blocked in `recv()`: spawn rate,
//!   resident memory per process, how many are hibernated, then the time to message all of them
//!   and see all finish. Once per hibernation policy, each in a fresh child process (clean heap).
//! - `timers`: `WFHOST_BENCH_TIMERS` (default 100,000) wasm processes each sleeping 10 ms; p50 and
//!   p99 of how late they woke, by the host's clock. In a fresh child process.
//!
//! `WFHOST_BENCH_ROUNDS` (default 5) sets the rounds of the alternating workloads; figures are
//! medians. `WFHOST_BENCH_ALLOCATOR=on-demand` maps each instance's memory on demand instead of
//! reusing pooled slots, `=page-scan` resets pooled slots in place; `WFHOST_BENCH_POOLING=<slots>` runs idle and timers with that many slots;
//! `WFHOST_BENCH_DEBUG=1` also prints the timers' lateness at every 5th percentile.
//! `--child <idle|timers> <off|when-full|always>` (and `--child idle raw`) runs one round in this
//! process. `--cores 1,2,4` runs everything once per core count, pinned (`common/cores.rs`).
//!
//! The idle and skynet lines end with what the work cost the operating system per spawn (or per
//! process): minor page faults, voluntary and involuntary context switches, TLB-shootdown
//! interrupts, and system and user time (`common/usage.rs`). The system calls behind them:
//! `strace -c -f <bench binary> skynet` (BENCHMARKS.md).

mod common;

use std::process::Command as OsCommand;
use std::time::{Duration, Instant};

use common::usage::Usage;
use common::{alternate, env_count as count, median, proportional_bytes, resident_bytes};
use wfhost::__testing::bench::Harness;
use wfhost::contract::{Event, Payload, Pid, StepOutput};
use wfhost::{Hibernation, Host};
use wfhost_scheduler::Events;
use wfhost_test_programs::{PROBE, RING, TINY};

const RING_MEMBERS: usize = 1_000;
const RING_HOPS: u64 = 1_000_000;
const SKYNET_LEAVES: u64 = 100_000;
const SPAWNS_PER_ROUND: usize = 2_000;
const STEPS_PER_ROUND: usize = 200_000;
const PATIENCE: Duration = Duration::from_secs(600);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if common::cores::per_core_count(&args) {
        return;
    }
    if let [flag, workload, policy, ..] = args.as_slice() {
        if flag == "--child" {
            if policy == "raw" {
                idle_raw(count("WFHOST_BENCH_IDLE", 100_000));
                return;
            }
            let hibernation = Hibernation::parse(policy).expect("a hibernation policy");
            match workload.as_str() {
                "idle" => idle(count("WFHOST_BENCH_IDLE", 100_000), hibernation),
                _ => timers(count("WFHOST_BENCH_TIMERS", 100_000), hibernation),
            }
            return;
        }
    }
    let wanted = common::wanted(&args);
    let rounds = count("WFHOST_BENCH_ROUNDS", 5);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("wasm: {workers} workers, {rounds} rounds each where alternating; medians");
    if wanted("spawn") {
        spawn(rounds);
    }
    if wanted("step") {
        step(rounds);
    }
    if wanted("ring") {
        ring(rounds, workers);
    }
    if wanted("skynet") {
        skynet(rounds, workers);
    }
    if wanted("churn") {
        churn(rounds);
    }
    if wanted("idle") {
        for policy in ["off", "raw", "when-full", "always"] {
            child("idle", policy);
        }
    }
    if wanted("timers") {
        for policy in ["off", "when-full"] {
            child("timers", policy);
        }
    }
}

/// Runs a workload in a fresh copy of this binary, passing its line through.
fn child(workload: &str, policy: &str) {
    let exe = std::env::current_exe().expect("bench binary path");
    let output = OsCommand::new(exe)
        .args(["--child", workload, policy])
        .output()
        .expect("run child");
    print!("{}", String::from_utf8_lossy(&output.stdout));
    if !output.status.success() {
        println!(
            "{workload}/{policy}: failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
}

fn spawn(rounds: usize) {
    let bytes = std::fs::read(TINY).expect("tiny module");
    let input = Payload::to_postcard(&()).expect("encodes");
    for (allocator, pooling) in [("on-demand", None), ("pooling", Some(1_000))] {
        let tiny = Harness::new(&bytes, pooling).expect("harness");
        let (ours, raw) = alternate(
            rounds,
            || {
                common::time(|| {
                    for _ in 0..SPAWNS_PER_ROUND {
                        drop(tiny.spawn("wait", input.clone()).expect("spawns"));
                    }
                })
            },
            || {
                common::time(|| {
                    for _ in 0..SPAWNS_PER_ROUND {
                        drop(tiny.instantiate_raw());
                    }
                })
            },
        );
        let per_second = |seconds: f64| SPAWNS_PER_ROUND as f64 / seconds;
        println!(
            "spawn/{allocator}: {:.0} spawns/s ({:.1} us)  floor={:.0}/s ({:.1} us)  ratio={:.2}",
            per_second(ours),
            ours / SPAWNS_PER_ROUND as f64 * 1e6,
            per_second(raw),
            raw / SPAWNS_PER_ROUND as f64 * 1e6,
            raw / ours
        );
    }
}

fn step(rounds: usize) {
    let bytes = std::fs::read(PROBE).expect("probe module");
    let probe = Harness::new(&bytes, None).expect("harness");
    let mut raw = probe.instantiate_raw();
    let mut relay = probe.spawn("relay", Payload::empty()).expect("spawns");
    let mut out = StepOutput::new();
    let mut events = Vec::new();
    // The first step starts the loop; after that each message makes one send.
    relay
        .step(Events::new(&mut events), &mut out)
        .expect("steps");
    let message = Event::message(Pid(9), Payload::to_postcard(&42u64).expect("encodes"));
    let written = [7u8; 32];
    let (ours, floor) = alternate(
        rounds,
        || {
            common::time(|| {
                for _ in 0..STEPS_PER_ROUND {
                    events.push(message.clone());
                    out.reset();
                    relay
                        .step(Events::new(&mut events), &mut out)
                        .expect("steps");
                    assert_eq!(out.yields.len(), 1);
                }
            })
        },
        || {
            common::time(|| {
                for _ in 0..STEPS_PER_ROUND {
                    raw.write32(&written);
                }
            })
        },
    );
    let micros = |seconds: f64| seconds / STEPS_PER_ROUND as f64 * 1e6;
    println!(
        "step: {:.3} us per round trip  floor={:.3} us  ratio={:.3}",
        micros(ours),
        micros(floor),
        floor / ours
    );
}

fn ring(rounds: usize, workers: usize) {
    let (ours, native) = alternate(
        rounds,
        || {
            let host = builder().build().expect("host");
            host.load_module("ring", RING).expect("ring module");
            // Postcard input, so the members speak postcard to one another.
            let plan = (RING_MEMBERS as u32, RING_HOPS);
            let report = host
                .spawn(
                    "ring",
                    "ring",
                    Payload::to_postcard(&plan).expect("encodes"),
                )
                .expect("spawns")
                .wait()
                .expect("the ring finishes");
            // The ring's report: members, hops, seconds, hops per second.
            let (members, hops, seconds, _): (u32, u64, f64, f64) =
                report.decode().expect("a report");
            assert_eq!((members as usize, hops), (RING_MEMBERS, RING_HOPS));
            host.shutdown(Duration::from_secs(10));
            seconds
        },
        || common::native_ring(workers, RING_MEMBERS, RING_HOPS),
    );
    let rate = |seconds: f64| RING_HOPS as f64 / seconds;
    println!(
        "ring: {:.0} hops/s ({RING_MEMBERS} wasm processes)  floor={:.0} hops/s (native processes)  \
         ratio={:.2}",
        rate(ours),
        rate(native),
        native / ours
    );
}

fn skynet(rounds: usize, workers: usize) {
    let processes = (SKYNET_LEAVES * 10 - 1) / 9;
    let mut hibernations = Vec::new();
    let mut usage = Vec::new();
    let (ours, native) = alternate(
        rounds,
        || {
            let host = builder().build().expect("host");
            host.load_module("tiny", TINY).expect("tiny module");
            let before = Usage::now();
            let seconds = common::time(|| {
                let sum: u64 = host
                    .spawn(
                        "tiny",
                        "skynet",
                        Payload::to_postcard(&(0u64, SKYNET_LEAVES)).expect("encodes"),
                    )
                    .expect("spawns")
                    .wait()
                    .expect("skynet finishes")
                    .decode()
                    .expect("a sum");
                assert_eq!(sum, SKYNET_LEAVES * (SKYNET_LEAVES - 1) / 2);
            });
            usage.push((seconds, Usage::now().since(&before, processes)));
            hibernations.push(host.residency().hibernations as f64);
            host.shutdown(Duration::from_secs(10));
            seconds
        },
        || common::time(|| common::native_skynet(workers, SKYNET_LEAVES)),
    );
    // The counts of the median round.
    usage.sort_by(|a, b| a.0.total_cmp(&b.0));
    let counts = usage.get(usage.len() / 2).map_or("", |(_, c)| c.as_str());
    println!(
        "skynet: {ours:.2} s for {processes} wasm processes ({:.0} procs/s, {:.0} hibernations)  \
         floor={native:.3} s (native processes)  ratio={:.3}  per process: {counts}",
        processes as f64 / ours,
        median(hibernations),
        native / ours
    );
}

fn churn(rounds: usize) {
    const SPAWNS: u64 = 200_000;
    const BATCH: u64 = 1_000;
    let mut runs = Vec::new();
    for _ in 0..rounds {
        let host = builder().build().expect("host");
        host.load_module("tiny", TINY).expect("tiny module");
        let leaf = |n: u64| {
            host.spawn(
                "tiny",
                "skynet",
                Payload::to_postcard(&(n, 1u64)).expect("encodes"),
            )
            .expect("spawns")
        };
        // One batch first, so that the slots are touched before counting.
        for run in (0..BATCH).map(leaf).collect::<Vec<_>>() {
            run.wait().expect("answers");
        }
        let before = Usage::now();
        let seconds = common::time(|| {
            for batch in 0..SPAWNS / BATCH {
                let first = batch * BATCH;
                let batch: Vec<_> = (first..first + BATCH).map(leaf).collect();
                for (n, run) in (first..).zip(batch) {
                    let answer: u64 = run.wait().expect("answers").decode().expect("a number");
                    assert_eq!(answer, n);
                }
            }
        });
        runs.push((seconds, Usage::now().since(&before, SPAWNS)));
        host.shutdown(Duration::from_secs(10));
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (seconds, counts) = &runs[runs.len() / 2];
    println!(
        "churn: {:.0} spawns/s (spawn, first step, answer, exit; {SPAWNS} processes, {BATCH} at a \
         time)  per spawn: {counts}",
        SPAWNS as f64 / seconds
    );
}

/// A host builder as the bench configures it: `WFHOST_BENCH_ALLOCATOR=on-demand` maps each
/// instance's memory on demand instead of reusing pooled slots (the default), and `page-scan`
/// resets pooled slots in place (`HostBuilder::page_scan_reset`), for comparison.
fn builder() -> wfhost::HostBuilder {
    match std::env::var("WFHOST_BENCH_ALLOCATOR").as_deref() {
        Ok("on-demand") => Host::builder().on_demand(),
        Ok("pooled") | Err(_) => Host::builder(),
        Ok("page-scan") => Host::builder().page_scan_reset(true),
        Ok(other) => {
            panic!("WFHOST_BENCH_ALLOCATOR is on-demand, pooled or page-scan, not {other}")
        }
    }
}

/// Waits until the host has taken `steps` steps in all.
fn until_steps(host: &Host, steps: u64) {
    let deadline = Instant::now() + PATIENCE;
    while host.counters().steps < steps {
        assert!(Instant::now() < deadline, "the processes did not start");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn policy_name(hibernation: Hibernation) -> &'static str {
    match hibernation {
        Hibernation::Off => "off",
        Hibernation::WhenFull => "when-full",
        Hibernation::Always => "always",
    }
}

fn idle(n: usize, hibernation: Hibernation) {
    let mut builder = builder().hibernation(hibernation);
    if let Ok(slots) = std::env::var("WFHOST_BENCH_POOLING") {
        builder = builder.pooling(slots.parse().expect("a number of slots"));
    }
    if hibernation == Hibernation::Off {
        // What an operator running this many live instances sets: the host then maps memory
        // images copy-on-write if the OS limit has room for them.
        builder = builder.max_processes(Some(n + 1));
    }
    let host = builder.build().expect("host");
    host.load_module("tiny", TINY).expect("tiny module");
    let capacity = host.capacity();
    let name = format!("idle/{}", policy_name(hibernation));
    if capacity.processes < n {
        println!(
            "{name}: skipped: the host holds {} processes here ({capacity})",
            capacity.processes
        );
        return;
    }
    let wait = Payload::to_postcard(&()).expect("encodes");
    // One process first, so the module's first instance is not counted.
    let first = host.spawn("tiny", "wait", wait.clone()).expect("spawns");
    host.send(first.pid(), Payload::to_postcard(&0u64).expect("encodes"))
        .expect("sends");
    first.wait().expect("finishes");
    let steps = host.counters().steps;
    let base = resident_bytes();
    let base_pss = proportional_bytes();
    let before = Usage::now();
    let start = Instant::now();
    let runs: Vec<_> = (0..n)
        .map(|_| host.spawn("tiny", "wait", wait.clone()).expect("spawns"))
        .collect();
    until_steps(&host, steps + n as u64);
    let spawn_seconds = start.elapsed().as_secs_f64();
    let counts = Usage::now().since(&before, n as u64);
    let resident = resident_bytes() - base;
    let proportional = proportional_bytes() - base_pss;
    let residency = host.residency();
    let start = Instant::now();
    for (i, run) in runs.iter().enumerate() {
        host.send(
            run.pid(),
            Payload::to_postcard(&(i as u64)).expect("encodes"),
        )
        .expect("sends");
    }
    for (i, run) in runs.into_iter().enumerate() {
        let answer: u64 = run
            .wait_timeout(PATIENCE)
            .expect("finished")
            .expect("answers")
            .decode()
            .expect("a number");
        assert_eq!(answer, i as u64);
    }
    let message_seconds = start.elapsed().as_secs_f64();
    println!(
        "{name}: {n} processes  {:.0} spawns/s  {:.1} KiB resident/proc ({:.2} GiB; proportional \
         {:.1} KiB/proc)  {} live instances  {} hibernated ({:.1} KiB saved each)  \
         message all and finish: {:.2} s  per spawn: {counts}",
        n as f64 / spawn_seconds,
        resident / n as f64 / 1024.0,
        resident / (1u64 << 30) as f64,
        proportional / n as f64 / 1024.0,
        residency.live_instances,
        residency.hibernated,
        residency.hibernated_bytes as f64 / residency.hibernated.max(1) as f64 / 1024.0,
        message_seconds
    );
}

/// The floor for `idle/off`: as many bare instances (raw wasmtime, a WASI context each, configured
/// as the host with `n` processes would be), held at once.
fn idle_raw(n: usize) {
    let probe = Host::builder()
        .hibernation(Hibernation::Off)
        .max_processes(Some(n + 1))
        .build()
        .expect("host");
    let capacity = probe.capacity();
    probe.shutdown(Duration::from_secs(1));
    if capacity.processes < n {
        println!(
            "idle/raw: skipped: {} instances fit here",
            capacity.processes
        );
        return;
    }
    let bytes = std::fs::read(TINY).expect("tiny module");
    let tiny = Harness::like_host(&bytes, &capacity).expect("harness");
    drop(tiny.instantiate_raw());
    let base = resident_bytes();
    let base_pss = proportional_bytes();
    let start = Instant::now();
    let instances: Vec<_> = (0..n).map(|_| tiny.instantiate_raw()).collect();
    let seconds = start.elapsed().as_secs_f64();
    let resident = resident_bytes() - base;
    let proportional = proportional_bytes() - base_pss;
    println!(
        "idle/raw: {n} bare instances (the floor for idle/off)  {:.0} instantiations/s  \
         {:.1} KiB resident/instance (proportional {:.1} KiB)",
        n as f64 / seconds,
        resident / n as f64 / 1024.0,
        proportional / n as f64 / 1024.0
    );
    drop(instances);
}

fn timers(n: usize, hibernation: Hibernation) {
    const MILLIS: u64 = 10;
    let mut builder = builder().hibernation(hibernation);
    if let Ok(slots) = std::env::var("WFHOST_BENCH_POOLING") {
        builder = builder.pooling(slots.parse().expect("a number of slots"));
    }
    if hibernation == Hibernation::Off {
        builder = builder.max_processes(Some(n));
    }
    let host = builder.build().expect("host");
    host.load_module("tiny", TINY).expect("tiny module");
    if host.capacity().processes < n {
        println!(
            "timers/off: skipped: the host holds {} processes here",
            host.capacity().processes
        );
        return;
    }
    let nap = Payload::to_postcard(&MILLIS).expect("encodes");
    let start = Instant::now();
    let runs: Vec<_> = (0..n)
        .map(|_| host.spawn("tiny", "nap", nap.clone()).expect("spawns"))
        .collect();
    let spawn_seconds = start.elapsed().as_secs_f64();
    // Each wakes, notes how late, and waits for a word to finish; all are awake after two steps.
    until_steps(&host, 2 * n as u64);
    for run in &runs {
        host.send(run.pid(), Payload::to_postcard(&()).expect("encodes"))
            .expect("sends");
    }
    let mut lateness: Vec<f64> = runs
        .into_iter()
        .map(|run| {
            let slept: u64 = run
                .wait_timeout(PATIENCE)
                .expect("finished")
                .expect("naps")
                .decode()
                .expect("a duration");
            slept.saturating_sub(MILLIS * 1000) as f64
        })
        .collect();
    lateness.sort_by(f64::total_cmp);
    if std::env::var_os("WFHOST_BENCH_DEBUG").is_some() {
        let step = lateness.len() / 20;
        let tail: Vec<_> = lateness
            .iter()
            .step_by(step.max(1))
            .map(|l| (l / 100.0).round() / 10.0)
            .collect();
        eprintln!("lateness ms by 5%: {tail:?}");
    }
    let at = |q: f64| lateness[((lateness.len() - 1) as f64 * q) as usize] / 1000.0;
    println!(
        "timers/{}: {n} processes sleeping {MILLIS} ms (spawned in {spawn_seconds:.2} s)  \
         lateness p50={:.2} ms  p99={:.2} ms  max={:.2} ms  ({} hibernations)",
        policy_name(hibernation),
        at(0.5),
        at(0.99),
        at(1.0),
        host.residency().hibernations
    );
}
