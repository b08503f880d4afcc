//! Durable workflows next to the same workflows in memory, side by side in one run:
//! `cargo bench -p wfhost --bench durable [-- workload ...]`.
//!
//! - `ring`: 1,000 wasm processes pass a token `WFHOST_BENCH_RING_HOPS` (default 200,000) hops,
//!   each hop a step; in memory, and durable with `synchronous=FULL` (every hop journaled; the
//!   token goes on before the commit, which every effect outside the journal waits for); and the
//!   store's size after a durable round.
//! - `sagas`: 10,000 order sagas at once, each three host calls with a 1 ms timer before each
//!   (about 7 steps a saga); steps per second in memory and durable.
//! - `latency`: one workflow asking for the time 2,000 times in a row, nothing else running: p50
//!   and p99 of the gap between answers. A reading stays inside the journal, so a step goes on
//!   before its commit: up to 32 in a row, and the next waits for the commit of them all (p99).
//! - `bytes`: journal bytes per step and the store's size, after the sagas.
//! - `children`: one workflow spawning 1,000 child workflows one after another, joining each
//!   before the next (`WFHOST_BENCH_CHILDREN`), durable with `synchronous=FULL`: the time, and
//!   the commits (each one sync) per child.
//! - `recover`: `--workflows N` (or `WFHOST_BENCH_RECOVER`; default 1,000,000) workflows, half
//!   sleeping an hour and half waiting an hour for a message, in a store as a crash leaves it
//!   (copied from two real ones, which is much faster than starting them); then a new host on
//!   the store: the time until `recover` returns, until every workflow has taken its first
//!   step (timers armed), and until a sample of 1,000 of the waiting ones has
//!   answered a message; the process's resident and peak memory, and the bytes held per
//!   workflow once the free heap is given back (`malloc_trim`).
//! - `history`: one workflow with `WFHOST_BENCH_HISTORY` (default 1,000,000) journaled events
//!   (steps of 1,000 random numbers each), its host stopped; then a new host on a copy of the
//!   store: the time from `recover` until the workflow has answered a message, from its snapshot
//!   and with snapshots off (its whole journal replayed).
//!
//! - `hosts`: 3,000 order sagas started by a client on a PostgreSQL store, then run by 1, 2 and 3
//!   hosts in this process (sharing its cores: what it measures is the cost of coordinating, not
//!   more machines): steps and sagas per second from the hosts' start to the last saga's end.
//! - `failover`: a host in a child process owns 10 sleeping workflows and is killed (SIGKILL);
//!   another host, polling every 50 ms, measures the time from the kill until it has claimed them
//!   and taken their first step, with the default lease (10 s).
//! - `stores`: the sagas and the ring, durable on SQLite (`synchronous=FULL`) and on PostgreSQL
//!   (a server the bench starts, as the tests do: `synchronous_commit=on`, fsync on), alternating:
//!   steps and workflow completions per second on each.
//!
//! - `prune`: a SQLite store (`synchronous=FULL`) of `WFHOST_BENCH_PRUNE` (default 100,000)
//!   finished workflows of 5 steps each, and 1,000 workflows that run beside them, each counting
//!   down 100 timers 30 ms apart (a step and its commit each): the commits and how many took
//!   over 100 ms (from the commit-duration histogram), with nothing else going on and while
//!   `Client::prune` removes every finished one (alternating); and how long the prune took.
//! - `traced`: the durable sagas with a tracer (`HostBuilder::tracer`: OpenTelemetry's SDK, its
//!   batch processor handing the spans to an exporter that counts and drops them) and without,
//!   alternating: steps per second each, and the spans exported per round; then, each in a
//!   process of its own, 20,000 workflows started and sleeping an hour (`WFHOST_BENCH_NAPS`),
//!   traced and not: the resident bytes a workflow adds once the free heap is given back (a
//!   traced one holds its run's span while it waits).
//!
//! `WFHOST_BENCH_ROUNDS` (default 3) sets the rounds; figures are medians. Stores go to a fresh
//! temporary directory (`TMPDIR`), on the disk whose sync cost they measure.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{alternate, env_count as count, median};
use serde_json::json;
use wfhost::__testing::{Ending, NewStep, Op, Open as _};
use wfhost::store::Location;
use wfhost::{Grants, Host, HostBuilder, Payload, Snapshots, SyncMode};
use wfhost_test_programs::postgres::Postgres;
use wfhost_test_programs::{PROBE, RING};

const RING_MEMBERS: u32 = 1_000;
const SAGAS: u32 = 10_000;
/// Threads starting the sagas, each a client starting its share one after another.
const STARTERS: u32 = 32;
const TICKS: u32 = 2_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, url] = args.as_slice() {
        if flag == "--failover-child" {
            return failover_child(url);
        }
    }
    if let [flag, traced, dir] = args.as_slice() {
        if flag == "--napping-child" {
            return napping_child(traced == "traced", Path::new(dir));
        }
    }
    let wanted = common::wanted(&args);
    let rounds = count("WFHOST_BENCH_ROUNDS", 3);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = std::env::temp_dir().join(format!("wfhost-bench-durable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    println!("durable: {workers} workers, {rounds} rounds each, alternating; medians");
    if wanted("ring") {
        ring(
            rounds,
            count("WFHOST_BENCH_RING_HOPS", 200_000) as u64,
            &dir,
        );
    }
    if wanted("sagas") || wanted("bytes") {
        sagas(rounds, &dir);
    }
    if wanted("latency") {
        latency(rounds, &dir);
    }
    if wanted("children") {
        children(rounds, count("WFHOST_BENCH_CHILDREN", 1_000) as u32, &dir);
    }
    if wanted("recover") {
        let n = common::flag_value(&args, "--workflows");
        recover(n.unwrap_or(count("WFHOST_BENCH_RECOVER", 1_000_000)), &dir);
    }
    if wanted("history") {
        history(count("WFHOST_BENCH_HISTORY", 1_000_000), rounds, &dir);
    }
    if wanted("stores") {
        stores(rounds, &dir);
    }
    if wanted("traced") {
        traced(rounds, &dir);
    }
    if wanted("prune") {
        prune(rounds, count("WFHOST_BENCH_PRUNE", 100_000), &dir);
    }
    if wanted("hosts") {
        hosts(rounds);
    }
    if wanted("failover") {
        failover(rounds);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh store path in `dir`.
fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

fn ring(rounds: usize, hops: u64, dir: &Path) {
    let sizes = std::cell::RefCell::new(Vec::new());
    let run = |durable: bool| {
        let path = fresh(dir, "ring.db");
        let mut builder = Host::builder();
        if durable {
            builder = builder.store(&path, SyncMode::Full);
        }
        let host = builder.build().expect("host");
        host.load_module("ring", RING).expect("ring module");
        let plan = Payload::to_postcard(&(RING_MEMBERS, hops)).expect("encodes");
        let run = if durable {
            host.start("ring", "ring", "ring", plan)
        } else {
            host.spawn("ring", "ring", plan)
        };
        let seconds = common::time(|| {
            let report = run.expect("starts").wait().expect("the ring finishes");
            let (members, done, _, _): (u32, u64, f64, f64) = report.decode().expect("a report");
            assert_eq!((members, done), (RING_MEMBERS, hops));
        });
        host.shutdown(Duration::from_secs(10));
        if durable {
            sizes.borrow_mut().push(store_size(&path) as f64);
        }
        seconds
    };
    let (durable, memory) = alternate(rounds, || run(true), || run(false));
    let rate = |seconds: f64| hops as f64 / seconds;
    println!(
        "ring: durable {:.0} hops/s  memory {:.0} hops/s  ({RING_MEMBERS} processes, {hops} \
         hops)  memory/durable={:.2}  store after a round: {:.1} MiB",
        rate(durable),
        rate(memory),
        durable / memory,
        median(sizes.into_inner()) / (1024.0 * 1024.0)
    );
}

/// The bytes of a store's file and its write-ahead log.
fn store_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
        + std::fs::metadata(format!("{}-wal", path.display())).map_or(0, |m| m.len())
}

/// Registers the saga's host functions: each answers at once.
fn functions(builder: HostBuilder) -> HostBuilder {
    let mut builder = builder;
    for name in ["reserve", "charge", "ship", "undo"] {
        builder = builder.function(name, move |order: serde_json::Value| {
            Ok::<_, String>(format!("{name}-{order}"))
        });
    }
    builder
}

/// One round of `SAGAS` order sagas, durable in `store` or in memory: the steps they took and
/// the seconds they took.
fn saga_round(store: Option<Location>) -> (u64, f64) {
    traced_saga_round(store, None)
}

/// As [`saga_round`], the host traced by `tracer` if given.
fn traced_saga_round(
    store: Option<Location>,
    tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
) -> (u64, f64) {
    let mut builder = functions(Host::builder());
    if let Some(store) = &store {
        builder = builder.store(store, SyncMode::Full);
    }
    if let Some(tracer) = tracer {
        builder = builder.tracer(tracer);
    }
    let host = builder.build().expect("host");
    host.load_module_with("probe", PROBE, Grants::default().allow_all_functions())
        .expect("probe module");
    let before = host.counters().steps;
    // Started by `STARTERS` threads at once, as concurrent clients start them: a durable start
    // returns once its workflow is on disk, so one thread starting 10,000 in a row measures
    // 10,000 syncs one after another, not the engine; starts that arrive together share one.
    let seconds = common::time(|| {
        std::thread::scope(|scope| {
            let starters: Vec<_> = (0..STARTERS)
                .map(|starter| {
                    let host = &host;
                    let durable = store.is_some();
                    scope.spawn(move || {
                        let runs: Vec<_> = (starter..SAGAS)
                            .step_by(STARTERS as usize)
                            .map(|n| {
                                let input = Payload::to_json(&json!(n)).expect("encodes");
                                if durable {
                                    host.start(&format!("order-{n}"), "probe", "order_saga", input)
                                } else {
                                    host.spawn("probe", "order_saga", input)
                                }
                                .expect("starts")
                            })
                            .collect();
                        for run in runs {
                            run.wait().expect("the saga ends");
                        }
                    })
                })
                .collect();
            for starter in starters {
                starter.join().expect("a starter thread");
            }
        });
    });
    let steps = host.counters().steps - before;
    host.shutdown(Duration::from_secs(10));
    (steps, seconds)
}

fn sagas(rounds: usize, dir: &Path) {
    let bytes = std::cell::RefCell::new(Vec::new());
    let steps_taken = std::cell::RefCell::new(Vec::new());
    let run = |durable: bool| {
        let path = fresh(dir, "sagas.db");
        let (steps, seconds) = saga_round(durable.then(|| Location::from(&path)));
        if durable {
            let size = store_size(&path);
            let journal = journal_bytes(&path);
            bytes.borrow_mut().push((journal / steps.max(1), size));
        }
        steps_taken.borrow_mut().push(steps as f64);
        steps as f64 / seconds
    };
    let (durable, memory) = alternate(rounds, || 1.0 / run(true), || 1.0 / run(false));
    println!(
        "sagas: durable {:.0} steps/s  memory {:.0} steps/s  ({SAGAS} sagas, {:.0} steps each \
         round)  memory/durable={:.2}",
        1.0 / durable,
        1.0 / memory,
        median(steps_taken.into_inner()),
        durable / memory
    );
    let bytes = bytes.into_inner();
    let per_step = median(bytes.iter().map(|b| b.0 as f64).collect());
    let size = median(bytes.iter().map(|b| b.1 as f64).collect());
    println!(
        "bytes: {per_step:.0} journal bytes per step (records only)  store after one round: \
         {:.1} MiB (with its module and write-ahead log)",
        size / (1024.0 * 1024.0)
    );
}

/// Spans exported, counted and dropped.
#[derive(Debug, Default)]
struct Sink(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl opentelemetry_sdk::trace::SpanExporter for Sink {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0
            .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

fn traced(rounds: usize, dir: &Path) {
    use opentelemetry::trace::TracerProvider as _;
    let spans = std::cell::RefCell::new(Vec::new());
    let run = |traced: bool| {
        let path = fresh(dir, "traced.db");
        let exported = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let provider = traced.then(|| {
            opentelemetry_sdk::trace::SdkTracerProvider::builder()
                .with_batch_exporter(Sink(std::sync::Arc::clone(&exported)))
                .build()
        });
        let tracer = provider.as_ref().map(|p| p.tracer("wfhost"));
        let (steps, seconds) = traced_saga_round(Some(Location::from(&path)), tracer);
        if let Some(provider) = provider {
            provider.shutdown().expect("the provider stops");
            spans
                .borrow_mut()
                .push(exported.load(std::sync::atomic::Ordering::Relaxed) as f64);
        }
        steps as f64 / seconds
    };
    let (traced, plain) = alternate(rounds, || 1.0 / run(true), || 1.0 / run(false));
    println!(
        "traced: durable sagas {:.0} steps/s traced, {:.0} steps/s not  traced/not={:.2}  \
         ({:.0} spans exported a round; the SDK's queue drops past 2,048 waiting)",
        1.0 / traced,
        1.0 / plain,
        plain / traced,
        median(spans.into_inner()),
    );
    let napping = |traced: bool| {
        let output = std::process::Command::new(std::env::current_exe().expect("the bench"))
            .args([
                "--napping-child",
                if traced { "traced" } else { "plain" },
                dir.to_str().expect("a path"),
            ])
            .output()
            .expect("the child runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse::<f64>()
            .expect("bytes")
    };
    let (traced, plain) = alternate(rounds, || napping(true), || napping(false));
    println!(
        "traced: {} workflows sleeping: {traced:.0} bytes a workflow traced, {plain:.0} not \
         (+{:.0})",
        count("WFHOST_BENCH_NAPS", 20_000),
        traced - plain
    );
}

/// Starts `WFHOST_BENCH_NAPS` workflows that sleep an hour on a host of its own (traced, to a
/// sink, or not) and prints the resident bytes each adds once they wait.
fn napping_child(traced: bool, dir: &Path) {
    use opentelemetry::trace::TracerProvider as _;
    let n = count("WFHOST_BENCH_NAPS", 20_000);
    let provider = traced.then(|| {
        opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(Sink::default())
            .build()
    });
    let mut builder = Host::builder().store(
        fresh(dir, &format!("naps-{}.db", std::process::id())),
        SyncMode::Normal,
    );
    if let Some(provider) = &provider {
        builder = builder.tracer(provider.tracer("wfhost"));
    }
    let host = builder.build().expect("host");
    host.load_module("probe", PROBE).expect("probe module");
    // One started first, so that what every host holds once is not counted.
    let start = |i: usize| {
        let input = Payload::to_json(&3_600_000u64).expect("encodes");
        host.start(&format!("nap-{i}"), "probe", "nap", input)
            .expect("starts")
    };
    start(0);
    while host.counters().steps < 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: `malloc_trim` only gives free heap pages back to the OS.
    unsafe { libc::malloc_trim(0) };
    let before = common::resident_bytes();
    for i in 1..=n {
        start(i);
    }
    while host.counters().steps < n as u64 + 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: as above.
    unsafe { libc::malloc_trim(0) };
    let after = common::resident_bytes();
    println!("{}", (after - before) / n as f64);
    std::process::exit(0);
}

/// The bytes of every step record in the store.
fn journal_bytes(path: &Path) -> u64 {
    use wfhost::__testing::{Read as _, SqliteStore};
    let mut store = SqliteStore::open_existing(path).expect("the store opens");
    let mut total = 0;
    for workflow in store.workflows(false).expect("workflows") {
        for step in store.steps(workflow.start.num, 0).expect("steps") {
            total += step.record.len() as u64;
        }
    }
    total
}

fn latency(rounds: usize, dir: &Path) {
    let mut all = Vec::new();
    for round in 0..rounds {
        for durable in [true, false] {
            let mut builder = Host::builder();
            if durable {
                builder = builder.store(fresh(dir, "latency.db"), SyncMode::Full);
            }
            let host = builder.build().expect("host");
            host.load_module("probe", PROBE).expect("probe module");
            let input = Payload::to_json(&TICKS).expect("encodes");
            let run = if durable {
                host.start(&format!("ticks-{round}"), "probe", "ticks", input)
            } else {
                host.spawn("probe", "ticks", input)
            };
            let ticks: Vec<u64> = run
                .expect("starts")
                .wait()
                .expect("it ends")
                .decode()
                .expect("ticks");
            let mut gaps: Vec<f64> = ticks
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]) as f64 / 1e3)
                .collect();
            gaps.sort_by(f64::total_cmp);
            let at = |q: f64| gaps[((gaps.len() - 1) as f64 * q) as usize];
            all.push((durable, at(0.5), at(0.99)));
            host.shutdown(Duration::from_secs(10));
        }
    }
    for durable in [true, false] {
        let of = |pick: fn(&(bool, f64, f64)) -> f64| {
            median(all.iter().filter(|a| a.0 == durable).map(pick).collect())
        };
        println!(
            "latency ({}): p50 {:.0} us  p99 {:.0} us  (one step after another, {TICKS} steps)",
            if durable { "durable, FULL" } else { "memory" },
            of(|a| a.1),
            of(|a| a.2)
        );
    }
}

fn recover(n: usize, dir: &Path) {
    let path = fresh(dir, "recover.db");
    let build = || {
        let host = Host::builder()
            .store(&path, SyncMode::Full)
            .build()
            .expect("host");
        host.load_module("probe", PROBE).expect("probe module");
        host
    };
    let copied = common::time(|| waiting_store(&path, n, build()));
    let peak_before = common::peak_bytes();
    common::reset_peak();
    // The sample: 1,000 of the workflows waiting for a message (at least one), kept to send to.
    let every = (n / 2 / 1_000).max(1);
    let sampled = |i: usize| i % 2 == 1 && (i / 2).is_multiple_of(every);
    let started = std::time::Instant::now();
    let host = build();
    let runs = host.recover().expect("recovers");
    let returned = started.elapsed().as_secs_f64();
    assert_eq!(runs.len(), n);
    let mut sample = Vec::new();
    for (id, run) in runs {
        let i: usize = id
            .trim_start_matches("w-")
            .parse()
            .expect("a copied workflow");
        if sampled(i) {
            sample.push(run);
        }
    }
    // Every workflow has taken its first step after the restart: its timer armed, its mailbox
    // open. Looked at every millisecond (spinning would take a core from the workers).
    while host.counters().steps < n as u64 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let armed = started.elapsed().as_secs_f64();
    // Sent by 16 clients at once (a send returns once the message is on disk: they share
    // commits).
    std::thread::scope(|scope| {
        for part in sample.chunks(sample.len().div_ceil(16)) {
            let host = &host;
            scope.spawn(move || {
                for run in part {
                    host.send(run.pid(), Payload::to_json(&"hello").expect("encodes"))
                        .expect("sends");
                }
            });
        }
    });
    for run in &sample {
        let result = run
            .wait_timeout(Duration::from_secs(120))
            .expect("answers")
            .expect("succeeds");
        let message: Option<String> = result.decode().expect("decodes");
        assert_eq!(message.as_deref(), Some("hello"));
    }
    let answered = started.elapsed().as_secs_f64();
    let resident = common::resident_bytes();
    let peak = common::peak_bytes();
    // What the waiting workflows hold, without the heap the recovery's own lists left free.
    // SAFETY: `malloc_trim` only gives free heap pages back to the OS.
    unsafe { libc::malloc_trim(0) };
    let held = common::resident_bytes();
    let counters = host.durable_counters().expect("durable");
    host.shutdown(Duration::from_secs(60));
    let gib = |bytes: f64| bytes / f64::from(1u32 << 30);
    println!(
        "recover: {n} workflows (half sleeping an hour, half waiting an hour for a message), \
         store as a crash left it: recover returned in {returned:.2} s, every one stepped \
         (timers armed) at {armed:.2} s, {} sampled messages answered at {answered:.2} s \
         ({} steps replayed); resident {:.2} GiB ({:.0} bytes a workflow once the free heap \
         is given back), peak {:.2} GiB (the store was written in {copied:.1} s, peak {:.2} \
         GiB)",
        sample.len(),
        counters.steps_replayed,
        gib(resident),
        held / n as f64,
        gib(peak),
        gib(peak_before),
    );
}

/// Fills the store at `path` with `n` waiting workflows as a crash would leave them: `host`
/// journals two (one sleeping an hour, one waiting an hour for a message) and stops; their rows
/// and first steps are then copied, `w-0` to `w-{n-1}` (even ones sleep, odd ones wait), much
/// faster than `n` starts.
fn waiting_store(path: &Path, n: usize, host: Host) {
    let hour = Payload::to_json(&3_600_000u64).expect("encodes");
    host.start("template-nap", "probe", "nap", hour.clone())
        .expect("starts");
    host.start("template-wait", "probe", "wait_message", hour)
        .expect("starts");
    while host.counters().steps < 2 {
        std::thread::yield_now();
    }
    host.shutdown(Duration::from_secs(10));
    drop(host);
    let location = Location::Sqlite(path.to_path_buf());
    let mut store = location.open(SyncMode::Normal).expect("store");
    let mut templates = Vec::new();
    for id in ["template-nap", "template-wait"] {
        let workflow = store.workflow(id).expect("reads").expect("journaled");
        let steps = store.steps(workflow.start.num, 0).expect("reads");
        assert_eq!(steps.len(), 1, "{id} took one step");
        templates.push((workflow, steps.into_iter().next().expect("one")));
    }
    let first = templates
        .iter()
        .map(|(w, _)| w.start.num)
        .max()
        .expect("two")
        + 1;
    // The templates end, so that exactly the copies are unfinished.
    let ended: Vec<Op> = templates
        .iter()
        .map(|(w, _)| Op::End {
            num: w.start.num,
            ending: Ending::Done(Vec::new()),
            at: 0,
        })
        .collect();
    store.commit(&ended).expect("writes");
    let mut ops = Vec::with_capacity(20_000);
    for i in 0..n {
        let (template, step) = &templates[i % 2];
        let num = first + i as u64;
        let mut start = template.start.clone();
        start.num = num;
        start.id = format!("w-{i}");
        ops.push(Op::Start(start));
        ops.push(Op::Step(NewStep {
            num,
            seq: 1,
            at: step.at,
            record: step.record.clone(),
            consumed: Vec::new(),
            took_cancel: false,
            calls_done: Vec::new(),
        }));
        if ops.len() >= 20_000 || i + 1 == n {
            store.commit(&ops).expect("writes");
            ops.clear();
        }
    }
    store.tidy(true).expect("tidies");
}

fn children(rounds: usize, n: u32, dir: &Path) {
    let mut seconds = Vec::new();
    let mut commits = Vec::new();
    for round in 0..rounds {
        let metrics = wfhost::Metrics::new();
        let host = Host::builder()
            .store(fresh(dir, "children.db"), SyncMode::Full)
            .metrics(&metrics)
            .build()
            .expect("host");
        host.load_module("probe", PROBE).expect("probe module");
        let before = commits_of(&metrics);
        let input = Payload::to_json(&n).expect("encodes");
        let took = common::time(|| {
            let sum: u64 = host
                .start(&format!("chain-{round}"), "probe", "chain", input)
                .expect("starts")
                .wait()
                .expect("it ends")
                .decode()
                .expect("a sum");
            assert_eq!(sum, u64::from(n) * u64::from(n.saturating_sub(1)) / 2);
        });
        commits.push((commits_of(&metrics) - before) / f64::from(n));
        seconds.push(took);
        host.shutdown(Duration::from_secs(10));
    }
    println!(
        "children: {n} child workflows in sequence in {:.2} s ({:.0} us a child)  commits per \
         child: {:.2} (each one sync)",
        median(seconds.clone()),
        median(seconds) * 1e6 / f64::from(n),
        median(commits)
    );
}

/// The journal's commits so far, from the metrics' text.
fn commits_of(metrics: &wfhost::Metrics) -> f64 {
    metrics
        .encode_text()
        .lines()
        .find_map(|line| line.strip_prefix("wfhost_journal_commits_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// Events per step in `history`.
const HISTORY_WIDTH: usize = 1_000;

fn history(events: usize, rounds: usize, dir: &Path) {
    let steps = events.div_ceil(HISTORY_WIDTH);
    for (name, snapshots) in [
        ("snapshot", Snapshots::default()),
        ("replay", Snapshots::off()),
    ] {
        let path = fresh(dir, &format!("history-{name}.db"));
        let host = Host::builder()
            .store(&path, SyncMode::Full)
            .snapshots(snapshots)
            .build()
            .expect("host");
        host.load_module("probe", PROBE).expect("probe module");
        let input = Payload::to_json(&(steps, HISTORY_WIDTH)).expect("encodes");
        let mut told = (0u64, 0u64);
        let built = common::time(|| {
            let run = host
                .start("history", "probe", "long_history", input)
                .expect("starts");
            told = run
                .recv_message()
                .expect("it tells the host")
                .data
                .decode()
                .expect("count and sum");
        });
        host.shutdown(Duration::from_secs(10));
        drop(host);
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        let journaled = {
            use wfhost::__testing::{Read as _, SqliteStore};
            let mut store = SqliteStore::open_existing(&path).expect("the store opens");
            store
                .workflow("history")
                .expect("reads")
                .map_or(0, |w| w.steps)
        };
        let mut times = Vec::new();
        for round in 0..rounds {
            let copy = fresh(dir, &format!("history-{name}-{round}.db"));
            for suffix in ["", "-wal"] {
                let from = format!("{}{suffix}", path.display());
                if Path::new(&from).exists() {
                    std::fs::copy(&from, format!("{}{suffix}", copy.display()))
                        .expect("a copy of the store");
                }
            }
            let host = Host::builder()
                .store(&copy, SyncMode::Full)
                .build()
                .expect("host");
            host.load_module("probe", PROBE).expect("probe module");
            let mut result = (0u64, 0u64, 0u64, 0u64);
            let seconds = common::time(|| {
                let (_, run) = host.recover().expect("recovers").pop().expect("one");
                host.send(run.pid(), Payload::to_json(&1u64).expect("encodes"))
                    .expect("sends");
                result = run.wait().expect("it ends").decode().expect("its result");
            });
            assert_eq!((result.0, result.1), told, "the same history");
            let counters = host.durable_counters().expect("durable");
            times.push((seconds, counters.events_replayed));
            host.shutdown(Duration::from_secs(10));
        }
        let ms = median(times.iter().map(|t| t.0 * 1e3).collect());
        println!(
            "history ({name}): {} events in {journaled} steps (written in {built:.1} s, store \
             {:.0} MiB): answering again {ms:.1} ms after recover, {} events replayed",
            told.0,
            size as f64 / (1024.0 * 1024.0),
            times[0].1
        );
    }
}

/// The sagas and the ring, durable on SQLite and on PostgreSQL, alternating.
fn stores(rounds: usize, dir: &Path) {
    let server = Postgres::start();
    let location = |postgres: bool, name: &str| -> Location {
        if postgres {
            Location::Postgres(server.database(name))
        } else {
            Location::from(fresh(dir, &format!("{name}.db")))
        }
    };
    let completions = std::cell::RefCell::new([Vec::new(), Vec::new()]);
    let sagas = |postgres: bool| {
        let (steps, seconds) = saga_round(Some(location(postgres, "sagas")));
        completions.borrow_mut()[usize::from(postgres)].push(f64::from(SAGAS) / seconds);
        seconds / steps as f64
    };
    let (sqlite, postgres) = alternate(rounds, || sagas(false), || sagas(true));
    let completions = completions.into_inner().map(median);
    println!(
        "stores: sagas on SQLite {:.0} steps/s ({:.0} sagas/s)  on PostgreSQL {:.0} steps/s \
         ({:.0} sagas/s)  postgres/sqlite={:.2}  ({SAGAS} sagas at once, one host)",
        1.0 / sqlite,
        completions[0],
        1.0 / postgres,
        completions[1],
        sqlite / postgres
    );
    let hops = 50_000u64;
    let ring = |postgres: bool| {
        let host = Host::builder()
            .store(location(postgres, "ring"), SyncMode::Full)
            .build()
            .expect("host");
        host.load_module("ring", RING).expect("ring module");
        let plan = Payload::to_postcard(&(RING_MEMBERS, hops)).expect("encodes");
        let run = host.start("ring", "ring", "ring", plan).expect("starts");
        let seconds = common::time(|| {
            run.wait().expect("the ring finishes");
        });
        host.shutdown(Duration::from_secs(10));
        seconds
    };
    let (sqlite, postgres) = alternate(rounds, || ring(false), || ring(true));
    println!(
        "stores: ring on SQLite {:.0} hops/s  on PostgreSQL {:.0} hops/s  postgres/sqlite={:.2}  \
         ({RING_MEMBERS} processes, {hops} hops)",
        hops as f64 / sqlite,
        hops as f64 / postgres,
        sqlite / postgres
    );
}

/// Sagas started by a client, run by 1, 2 and 3 hosts sharing one PostgreSQL store.
fn hosts(rounds: usize) {
    const STARTED: u32 = 3_000;
    let server = Postgres::start();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    for count in 1..=3usize {
        let mut rates = Vec::new();
        let mut steps_per_s = Vec::new();
        for round in 0..rounds {
            let url = server.database(&format!("hosts{count}_{round}"));
            let location = Location::Postgres(url.clone());
            // The client starts every saga before any host runs.
            let client = wfhost::Client::open(&location);
            let bytes = std::fs::read(PROBE).expect("the probe module");
            for n in 0..STARTED {
                let input = Payload::to_json(&json!(n)).expect("encodes");
                let id = format!("order-{n}");
                client
                    .start(Some(&id), &bytes, "probe", "order_saga", &input)
                    .expect("starts");
            }
            let hosts: Vec<Host> = (0..count)
                .map(|_| {
                    let host = functions(Host::builder())
                        .workers((workers / count).max(1))
                        .store(&location, SyncMode::Full)
                        .build()
                        .expect("host");
                    host.load_module_with("probe", PROBE, Grants::default().allow_all_functions())
                        .expect("probe module");
                    host
                })
                .collect();
            let seconds = common::time(|| {
                std::thread::scope(|scope| {
                    for host in &hosts {
                        let client = &location;
                        scope.spawn(move || {
                            let mut store = client.open_existing().expect("the store opens");
                            loop {
                                host.claim(100).expect("claims");
                                if store.workflows(true).expect("reads").is_empty() {
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        });
                    }
                });
            });
            let steps: u64 = hosts.iter().map(|h| h.counters().steps).sum();
            for host in hosts {
                host.shutdown(Duration::from_secs(10));
            }
            rates.push(f64::from(STARTED) / seconds);
            steps_per_s.push(steps as f64 / seconds);
        }
        println!(
            "hosts: {count} host(s) on PostgreSQL: {:.0} steps/s  {:.0} sagas/s  ({STARTED} sagas \
             started by a client, {workers} cores shared)",
            median(steps_per_s),
            median(rates)
        );
    }
}

/// A host that owns 10 sleeping workflows and waits to be killed.
fn failover_child(url: &str) {
    let host = Host::builder()
        .store(url, SyncMode::Full)
        .build()
        .expect("host");
    host.load_module("probe", PROBE).expect("probe module");
    for n in 0..10 {
        let input = Payload::to_json(&2_000u64).expect("encodes");
        host.start(&format!("nap-{n}"), "probe", "nap", input)
            .expect("starts");
    }
    while host.counters().steps < 10 {
        std::thread::yield_now();
    }
    println!("READY");
    loop {
        std::thread::park();
    }
}

/// Kill to first step on the new owner, at the default lease.
fn failover(rounds: usize) {
    use std::io::BufRead;
    let server = Postgres::start();
    let mut times = Vec::new();
    for round in 0..rounds {
        let url = server.database(&format!("failover{round}"));
        let mut child = std::process::Command::new(std::env::current_exe().expect("this bench"))
            .args(["--failover-child", &url])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the child host");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("its stdout"))
            .read_line(&mut line)
            .expect("it says it is ready");
        assert_eq!(line.trim(), "READY");
        let host = Host::builder()
            .store(url.as_str(), SyncMode::Full)
            .build()
            .expect("host");
        host.load_module("probe", PROBE).expect("probe module");
        child.kill().expect("kills the child");
        let killed = std::time::Instant::now();
        let _ = child.wait();
        loop {
            if !host.claim(usize::MAX).expect("claims").is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        while host.counters().steps < 10 {
            std::thread::yield_now();
        }
        times.push(killed.elapsed().as_secs_f64());
        host.shutdown(Duration::from_secs(10));
    }
    println!(
        "failover: {:.2} s from SIGKILL to the first steps on the new owner (median of {rounds}; \
         lease {:?}, renewed every third, polled every 50 ms)",
        median(times),
        wfhost::DEFAULT_LEASE
    );
}

/// Workflows that run in `prune`, each counting down from `PRUNE_TICKS` a timer of
/// `PRUNE_TICK_MS` apart (a step and its commit each).
const PRUNE_RUNNERS: usize = 1_000;
const PRUNE_TICKS: u32 = 100;
const PRUNE_TICK_MS: u64 = 30;

/// The commits' durations so far, from the metrics' text: (upper bound in seconds, commits at
/// or under it), by bound.
fn commit_buckets(metrics: &wfhost::Metrics) -> Vec<(f64, f64)> {
    metrics
        .encode_text()
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("wfhost_journal_commit_duration_seconds_bucket{le=\"")?;
            let (bound, count) = rest.split_once("\"} ")?;
            let bound = if bound == "+Inf" {
                f64::INFINITY
            } else {
                bound.parse().ok()?
            };
            Some((bound, count.trim().parse().ok()?))
        })
        .collect()
}

fn prune(rounds: usize, finished: usize, dir: &Path) {
    let mut all = Vec::new();
    for _ in 0..rounds {
        for pruning in [false, true] {
            let path = fresh(dir, "prune.db");
            {
                let mut store = Location::from(path.as_path())
                    .open(SyncMode::Normal)
                    .expect("a store");
                store
                    .commit(&[Op::Module {
                        hash: "m".into(),
                        bytes: std::sync::Arc::from(&b"not a module"[..]),
                    }])
                    .expect("written");
                let mut ops = Vec::new();
                for n in 0..finished as u64 {
                    let num = n + 1;
                    ops.push(Op::Start(wfhost::__testing::NewWorkflow {
                        num,
                        id: format!("old-{num}"),
                        parent: None,
                        module: "m".into(),
                        module_name: "m".into(),
                        entry: "main".into(),
                        input: vec![0],
                        started: 1,
                        trace: None,
                    }));
                    for seq in 1..=5 {
                        ops.push(Op::Step(NewStep {
                            num,
                            seq,
                            at: seq,
                            record: vec![0; 64],
                            consumed: Vec::new(),
                            took_cancel: false,
                            calls_done: Vec::new(),
                        }));
                    }
                    ops.push(Op::End {
                        num,
                        ending: Ending::Done(vec![0]),
                        at: 2,
                    });
                    if ops.len() >= 70_000 {
                        store.commit(&ops).expect("written");
                        ops.clear();
                    }
                }
                store.commit(&ops).expect("written");
                store.tidy(true).expect("tidied");
            }
            let metrics = wfhost::Metrics::new();
            let host = Host::builder()
                .store(&path, SyncMode::Full)
                .metrics(&metrics)
                .build()
                .expect("host");
            host.load_module("countdown", wfhost_test_programs::COUNTDOWN)
                .expect("countdown module");
            let client = wfhost::Client::serving(&host, Grants::default()).expect("a client");
            let before = commit_buckets(&metrics);
            let input = Payload::json_bytes(
                format!(r#"{{"from":{PRUNE_TICKS},"interval_ms":{PRUNE_TICK_MS}}}"#).into(),
            );
            let running = std::time::Instant::now();
            let runs: Vec<_> = (0..PRUNE_RUNNERS)
                .map(|n| {
                    host.start(&format!("run-{n}"), "countdown", "countdown", input.clone())
                        .expect("starts")
                })
                .collect();
            let pruner = pruning.then(|| {
                std::thread::spawn(move || {
                    let started = std::time::Instant::now();
                    let pruned = client
                        .prune(&wfhost::PruneQuery::finished_before(1_000))
                        .expect("pruned");
                    (pruned.workflows, started.elapsed().as_secs_f64())
                })
            });
            for run in runs {
                run.wait().expect("it ends");
            }
            let ran = running.elapsed().as_secs_f64();
            let pruned = pruner.map(|t| t.join().expect("the pruner"));
            let after = commit_buckets(&metrics);
            let delta: Vec<(f64, f64)> = after
                .iter()
                .zip(&before)
                .map(|(a, b)| (a.0, a.1 - b.1))
                .collect();
            let commits = delta.last().map_or(0.0, |d| d.1);
            // The first bound past 100 ms, and the smallest bound every commit was under.
            let (bound, under) = delta
                .iter()
                .find(|(bound, _)| *bound >= 0.1)
                .copied()
                .unwrap_or((f64::INFINITY, commits));
            let slowest = delta
                .iter()
                .find(|(_, under)| *under >= commits)
                .map_or(f64::INFINITY, |d| d.0);
            all.push((pruning, commits, commits - under, slowest));
            if let Some((workflows, secs)) = pruned {
                assert_eq!(workflows, finished as u64, "the prune removed them all");
                println!(
                    "prune: {workflows} finished workflows removed in {secs:.1} s ({:.0}/s) \
                     while {PRUNE_RUNNERS} others ran ({ran:.1} s); commits past {:.0} ms: {}",
                    workflows as f64 / secs,
                    bound * 1e3,
                    commits - under
                );
            }
            host.shutdown(Duration::from_secs(10));
        }
    }
    for pruning in [false, true] {
        let of = |pick: fn(&(bool, f64, f64, f64)) -> f64| {
            median(all.iter().filter(|a| a.0 == pruning).map(pick).collect())
        };
        println!(
            "prune ({}): {:.0} commits, {:.0} of them past the first bucket bound over 100 ms \
             (262 ms), every one under {:.1} ms (a bucket's bound; {PRUNE_RUNNERS} workflows x \
             {PRUNE_TICKS} timers)",
            if pruning { "while pruning" } else { "no prune" },
            of(|a| a.1),
            of(|a| a.2),
            of(|a| a.3) * 1e3,
        );
    }
}
