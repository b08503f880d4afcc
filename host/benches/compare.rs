//! wfhost's scheduler (native processes) against tokio (tasks and channels) on the same workloads,
//! alternating in one run. `cargo bench -p wfhost --bench compare [-- workload ...]`.
//!
//! Each workload runs `WFHOST_BENCH_ROUNDS` (default 5) times on each side, alternating; the line it
//! prints gives both medians and ends in `ratio=<wfhost throughput / tokio throughput>`. The
//! spawn-idle workload runs each round in a fresh child process, so that resident memory per
//! process is measured from a clean heap. `--cores 2,4,8,16` runs everything once per core count,
//! in a child pinned to that many cores, each line prefixed with `cores=N`.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::process::Command as OsCommand;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wfhost::contract::{EventKind, Payload, Pid, Status, Tag};
use wfhost_scheduler::{Events, InitContext, Process, ProcessError, Scheduler, StepOutput};

const SKYNET_LEAVES: u64 = 1_000_000;
const RING_MEMBERS: usize = 1_000;
const RING_HOPS: u64 = 1_000_000;
const PAIRS: usize = 100;
const ROUND_TRIPS: u64 = 10_000;
const IDLE_PROCESSES: usize = 100_000;

use common::{alternate, decode, median, pc, resident_bytes, send, time};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if common::cores::per_core_count(&args) {
        return;
    }
    if let [flag, engine, ..] = args.as_slice() {
        if flag == "--spawn-idle-child" {
            let (rate, kib) = match engine.as_str() {
                "wfhost" => wfhost_spawn_idle(),
                _ => tokio_spawn_idle(),
            };
            println!("{rate} {kib}");
            return;
        }
    }
    let wanted = common::wanted(&args);
    let rounds = common::env_count("WFHOST_BENCH_ROUNDS", 5);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("compare: {workers} workers each side, {rounds} rounds each, alternating; medians");

    if wanted("skynet") {
        let (w, t) = alternate(
            rounds,
            || time(|| common::native_skynet(workers, SKYNET_LEAVES)),
            || time(|| tokio_skynet(workers)),
        );
        let processes = skynet_processes() as f64;
        println!(
            "skynet: wfhost {:.3} s ({:.2}M procs/s)  tokio {:.3} s ({:.2}M tasks/s)  ratio={:.2}",
            w,
            processes / w / 1e6,
            t,
            processes / t / 1e6,
            t / w
        );
    }
    if wanted("ring") {
        let (w, t) = alternate(
            rounds,
            || common::native_ring(workers, RING_MEMBERS, RING_HOPS),
            || tokio_ring(workers),
        );
        let hops = RING_HOPS as f64;
        println!(
            "ring: wfhost {:.2}M hops/s  tokio {:.2}M hops/s  ratio={:.2}",
            hops / w / 1e6,
            hops / t / 1e6,
            t / w
        );
    }
    if wanted("pingpong") {
        let (w, t) = alternate(
            rounds,
            || time(|| wfhost_pingpong(workers)),
            || time(|| tokio_pingpong(workers)),
        );
        let messages = (PAIRS as u64 * ROUND_TRIPS * 2) as f64;
        println!(
            "pingpong: wfhost {:.2}M msgs/s  tokio {:.2}M msgs/s  ratio={:.2}",
            messages / w / 1e6,
            messages / t / 1e6,
            t / w
        );
    }
    if wanted("spawn-idle") {
        let mut wfhost = Vec::new();
        let mut tokio = Vec::new();
        for _ in 0..rounds {
            wfhost.push(spawn_idle_child("wfhost"));
            tokio.push(spawn_idle_child("tokio"));
        }
        let median_of =
            |v: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| median(v.iter().map(pick).collect());
        let (w_rate, w_kib) = (median_of(&wfhost, |r| r.0), median_of(&wfhost, |r| r.1));
        let (t_rate, t_kib) = (median_of(&tokio, |r| r.0), median_of(&tokio, |r| r.1));
        println!(
            "spawn-idle: wfhost {:.2}M spawns/s {:.2} KiB/proc  tokio {:.2}M spawns/s {:.2} KiB/task  \
             memory ratio={:.2}  ratio={:.2}",
            w_rate / 1e6,
            w_kib,
            t_rate / 1e6,
            t_kib,
            t_kib / w_kib,
            w_rate / t_rate
        );
    }
}

fn tokio_runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .build()
        .expect("tokio runtime")
}

// ---------------------------------------------------------------------------------------------
// skynet: a 10-ary tree of 1,111,111 processes; each leaf reports its number, each parent the sum.

fn skynet_processes() -> u64 {
    let mut total = 0;
    let mut level = 1;
    while level <= SKYNET_LEAVES {
        total += level;
        level *= 10;
    }
    total
}

const SKYNET_SUM: u64 = SKYNET_LEAVES * (SKYNET_LEAVES - 1) / 2;

fn tokio_skynet_node(num: u64, size: u64) -> Pin<Box<dyn Future<Output = u64> + Send>> {
    Box::pin(async move {
        if size == 1 {
            return num;
        }
        let child = size / 10;
        let handles: Vec<_> = (0..10)
            .map(|i| tokio::spawn(tokio_skynet_node(num + i * child, child)))
            .collect();
        let mut sum = 0;
        for handle in handles {
            sum += handle.await.expect("child task");
        }
        sum
    })
}

fn tokio_skynet(workers: usize) {
    let runtime = tokio_runtime(workers);
    let sum = runtime.block_on(async { tokio::spawn(tokio_skynet_node(0, SKYNET_LEAVES)).await });
    assert_eq!(sum.expect("root task"), SKYNET_SUM);
}

// ---------------------------------------------------------------------------------------------
// ring: 1,000 processes pass a token 1,000,000 hops.

fn tokio_ring(workers: usize) -> f64 {
    let runtime = tokio_runtime(workers);
    runtime.block_on(async {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..RING_MEMBERS)
            .map(|_| tokio::sync::mpsc::unbounded_channel::<u64>())
            .unzip();
        let (finished, done) = tokio::sync::oneshot::channel::<Instant>();
        let finished = Arc::new(std::sync::Mutex::new(Some(finished)));
        for (i, mut receiver) in receivers.into_iter().enumerate() {
            let next = senders[(i + 1) % RING_MEMBERS].clone();
            let finished = Arc::clone(&finished);
            tokio::spawn(async move {
                while let Some(left) = receiver.recv().await {
                    if left == 0 {
                        if let Some(finished) = finished.lock().expect("lock").take() {
                            let _ = finished.send(Instant::now());
                        }
                    } else if next.send(left - 1).is_err() {
                        return;
                    }
                }
            });
        }
        let start = Instant::now();
        senders[0].send(RING_HOPS - 1).expect("member alive");
        let end = done.await.expect("the token went round");
        drop(senders);
        (end - start).as_secs_f64()
    })
}

// ---------------------------------------------------------------------------------------------
// pingpong: 100 pairs, 10,000 round trips each.

/// Serves: answers every message to its sender.
struct Echo;

impl Process for Echo {
    fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        // Native processes take every message they are sent.
        out.receive = u32::MAX;
        out.status = Status::Idle;
        for event in events {
            match event.kind {
                EventKind::Message => out.push(Tag(1), send(event.from, event.data)),
                EventKind::Cancel => out.status = Status::Done(Payload::empty()),
                EventKind::YieldComplete => {}
            }
        }
        Ok(())
    }
}

/// Serves the first ball to its echo and counts the returns.
struct Pinger {
    echo: Pid,
    returns: u64,
}

impl Process for Pinger {
    fn init(&mut self, _: &InitContext, _: &str, input: Payload) -> Result<(), ProcessError> {
        self.echo = decode(&input);
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        // Native processes take every message they are sent.
        out.receive = u32::MAX;
        out.status = Status::Idle;
        if self.returns == 0 && events.len() == 0 {
            out.push(Tag(1), send(self.echo, pc(0)));
        }
        for event in events {
            if event.kind == EventKind::Message {
                self.returns += 1;
                if self.returns == ROUND_TRIPS {
                    out.status = Status::Done(Payload::empty());
                    return Ok(());
                }
                out.push(Tag(1), send(self.echo, pc(self.returns)));
            }
        }
        Ok(())
    }
}

fn wfhost_pingpong(workers: usize) {
    let scheduler = Scheduler::builder()
        .workers(workers)
        .build()
        .expect("scheduler");
    let handles: Vec<_> = (0..PAIRS)
        .map(|_| {
            let echo = scheduler
                .spawn(Echo, "echo", Payload::empty())
                .expect("spawn");
            let pinger = Pinger {
                echo: Pid::HOST,
                returns: 0,
            };
            scheduler
                .spawn_handle(pinger, "ping", pc(echo))
                .expect("spawn")
        })
        .collect();
    for handle in handles {
        handle.wait().expect("pinger finishes");
    }
    scheduler.shutdown(Duration::from_secs(10));
}

fn tokio_pingpong(workers: usize) {
    let runtime = tokio_runtime(workers);
    runtime.block_on(async {
        let pingers: Vec<_> = (0..PAIRS)
            .map(|_| {
                let (to_echo, mut echo_inbox) = tokio::sync::mpsc::unbounded_channel::<u64>();
                let (to_pinger, mut pinger_inbox) = tokio::sync::mpsc::unbounded_channel::<u64>();
                tokio::spawn(async move {
                    while let Some(ball) = echo_inbox.recv().await {
                        if to_pinger.send(ball).is_err() {
                            return;
                        }
                    }
                });
                tokio::spawn(async move {
                    to_echo.send(0).expect("echo alive");
                    let mut returns = 0;
                    while pinger_inbox.recv().await.is_some() {
                        returns += 1;
                        if returns == ROUND_TRIPS {
                            return;
                        }
                        to_echo.send(returns).expect("echo alive");
                    }
                })
            })
            .collect();
        for pinger in pingers {
            pinger.await.expect("pinger task");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// spawn-idle: 100,000 processes that wait for one message; then all are messaged.

/// Runs one spawn-idle round in a fresh process; returns (spawns per second, KiB per process).
fn spawn_idle_child(engine: &str) -> (f64, f64) {
    let exe = std::env::current_exe().expect("bench binary path");
    let output = OsCommand::new(exe)
        .args(["--spawn-idle-child", engine])
        .output()
        .expect("run child");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut parts = text
        .split_whitespace()
        .map(|p| p.parse::<f64>().unwrap_or(f64::NAN));
    (
        parts.next().unwrap_or(f64::NAN),
        parts.next().unwrap_or(f64::NAN),
    )
}

/// Waits for one message, then finishes.
struct Waiter {
    started: Arc<AtomicUsize>,
}

impl Process for Waiter {
    fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        // Native processes take every message they are sent.
        out.receive = u32::MAX;
        if events.len() == 0 {
            self.started.fetch_add(1, Ordering::Relaxed);
            out.status = Status::Idle;
        } else {
            out.status = Status::Done(Payload::empty());
        }
        Ok(())
    }
}

fn wait_for(counter: &AtomicUsize, n: usize) {
    while counter.load(Ordering::Relaxed) < n {
        std::thread::yield_now();
    }
}

fn wfhost_spawn_idle() -> (f64, f64) {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let scheduler = Scheduler::builder()
        .workers(workers)
        .build()
        .expect("scheduler");
    let started = Arc::new(AtomicUsize::new(0));
    let base = resident_bytes();
    let start = Instant::now();
    let pids: Vec<Pid> = (0..IDLE_PROCESSES)
        .map(|_| {
            let waiter = Waiter {
                started: Arc::clone(&started),
            };
            scheduler
                .spawn(waiter, "wait", Payload::empty())
                .expect("spawn")
        })
        .collect();
    wait_for(&started, IDLE_PROCESSES);
    let rate = IDLE_PROCESSES as f64 / start.elapsed().as_secs_f64();
    let kib = (resident_bytes() - base) / IDLE_PROCESSES as f64 / 1024.0;
    for pid in pids {
        scheduler.send(pid, Payload::empty()).expect("waiter alive");
    }
    scheduler.shutdown(Duration::from_secs(10));
    (rate, kib)
}

fn tokio_spawn_idle() -> (f64, f64) {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio_runtime(workers);
    let started = Arc::new(AtomicUsize::new(0));
    let base = resident_bytes();
    let start = Instant::now();
    let (senders, handles): (Vec<_>, Vec<_>) = (0..IDLE_PROCESSES)
        .map(|_| {
            let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<()>();
            let started = Arc::clone(&started);
            let handle = runtime.spawn(async move {
                started.fetch_add(1, Ordering::Relaxed);
                receiver.recv().await;
            });
            (sender, handle)
        })
        .unzip();
    wait_for(&started, IDLE_PROCESSES);
    let rate = IDLE_PROCESSES as f64 / start.elapsed().as_secs_f64();
    let kib = (resident_bytes() - base) / IDLE_PROCESSES as f64 / 1024.0;
    for sender in senders {
        sender.send(()).expect("task alive");
    }
    runtime.block_on(async {
        for handle in handles {
            handle.await.expect("task");
        }
    });
    (rate, kib)
}
