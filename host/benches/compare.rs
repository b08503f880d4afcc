//! wfhost's scheduler (native processes) against tokio (tasks and channels) on the same workloads,
//! alternating in one run. `cargo bench -p wfhost --bench compare [-- workload ...]`.
//!
//! Each workload runs `WFHOST_BENCH_ROUNDS` (default 5) times on each side, alternating; the line it
//! prints gives both medians and ends in `ratio=<wfhost throughput / tokio throughput>`. The
//! spawn-idle workload runs each round in a fresh child process, so that resident memory per
//! process is measured from a clean heap.

use std::future::Future;
use std::pin::Pin;
use std::process::Command as OsCommand;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};
use wfhost::contract::{Command, EventKind, Payload, Pid, SendRequest, SpawnRequest, Status, Tag};
use wfhost::scheduler::{
    Context, Events, InitContext, Process, ProcessError, Request, Scheduler, Spawn, StepOutput,
};

const SKYNET_LEAVES: u64 = 1_000_000;
const RING_MEMBERS: usize = 1_000;
const RING_HOPS: u64 = 1_000_000;
const PAIRS: usize = 100;
const ROUND_TRIPS: u64 = 10_000;
const IDLE_PROCESSES: usize = 100_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
    let selected: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| selected.is_empty() || selected.contains(&name);
    let rounds: usize = std::env::var("WFHOST_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("compare: {workers} workers each side, {rounds} rounds each, alternating; medians");

    if wanted("skynet") {
        let (w, t) = alternate(
            rounds,
            || time(|| wfhost_skynet(workers)),
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
        let (w, t) = alternate(rounds, || wfhost_ring(workers), || tokio_ring(workers));
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

/// Runs `a` and `b` alternately, `rounds` times each; returns their median seconds.
/// `WFHOST_BENCH_ONLY=wfhost` (or `tokio`) runs one side alone, for profiling.
fn alternate(rounds: usize, mut a: impl FnMut() -> f64, mut b: impl FnMut() -> f64) -> (f64, f64) {
    let only = std::env::var("WFHOST_BENCH_ONLY").unwrap_or_default();
    let mut xs = vec![f64::NAN];
    let mut ys = vec![f64::NAN];
    for round in 0..rounds {
        if only != "tokio" {
            xs.push(a());
        }
        if only != "wfhost" {
            ys.push(b());
        }
        if round == 0 {
            xs.retain(|x| !x.is_nan());
            ys.retain(|y| !y.is_nan());
        }
    }
    (median(xs), median(ys))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn time(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64()
}

fn pc<T: serde::Serialize>(value: T) -> Payload {
    Payload::to_postcard(&value).expect("bench values encode")
}

fn decode<T: serde::de::DeserializeOwned>(payload: &Payload) -> T {
    payload.decode().expect("bench values decode")
}

fn send(to: Pid, message: Payload) -> Command {
    Command::Send(SendRequest { to, message })
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

/// A skynet node: a leaf reports its number to its parent; an inner node spawns ten children and
/// reports the sum of what they report.
#[derive(Default)]
struct SkynetNode {
    num: u64,
    size: u64,
    parent: Option<Pid>,
    sum: u64,
    reported: u32,
}

impl Process for SkynetNode {
    fn init(&mut self, ctx: &InitContext, _: &str, input: Payload) -> Result<(), ProcessError> {
        (self.num, self.size) = decode(&input);
        self.parent = ctx.parent();
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        if self.size == 1 {
            self.finish(self.num, out);
            return Ok(());
        }
        if self.reported == 0 && self.sum == 0 && events.len() == 0 {
            let child = self.size / 10;
            for i in 0..10 {
                let input = pc((self.num + i * child, child));
                out.push(
                    Tag(i + 1),
                    Command::Spawn(SpawnRequest {
                        module: None,
                        entry: "skynet".into(),
                        input,
                    }),
                );
            }
        }
        for event in events {
            if event.kind == EventKind::Message {
                self.sum += decode::<u64>(&event.data);
                self.reported += 1;
            }
        }
        out.status = Status::Idle;
        if self.reported == 10 {
            self.finish(self.sum, out);
        }
        Ok(())
    }
}

impl SkynetNode {
    fn finish(&self, value: u64, out: &mut StepOutput) {
        if let Some(parent) = self.parent {
            out.push(Tag(0), send(parent, pc(value)));
        }
        out.status = Status::Done(pc(value));
    }
}

/// Spawns native skynet nodes for the `spawn` command.
fn spawn_skynet(request: Request, cx: &Context<'_>) {
    if let Command::Spawn(spawn) = request.command {
        let node = Spawn::new(SkynetNode::default(), spawn.entry, spawn.input);
        let pid = cx.spawn_child(node).expect("scheduler running");
        cx.complete(request.tag, Ok(pc(pid)));
    }
}

fn wfhost_skynet(workers: usize) {
    let scheduler = Scheduler::builder()
        .workers(workers)
        .handler(wfhost::contract::CommandKind::Spawn, spawn_skynet)
        .build()
        .expect("scheduler");
    let root = scheduler
        .spawn_handle(SkynetNode::default(), "skynet", pc((0, SKYNET_LEAVES)))
        .expect("spawn");
    let sum: u64 = decode(&root.wait().expect("skynet finishes"));
    assert_eq!(sum, SKYNET_SUM);
    scheduler.shutdown(Duration::from_secs(10));
}

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

/// A ring member: its first message names the next member; every later one is the token, carrying
/// the hops still to go.
struct RingMember {
    next: Option<Pid>,
    finished: Sender<Instant>,
}

impl Process for RingMember {
    fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        out.status = Status::Idle;
        for event in events {
            match event.kind {
                EventKind::Message => match self.next {
                    None => self.next = Some(decode(&event.data)),
                    Some(next) => match decode::<u64>(&event.data) {
                        0 => self.finished.send(Instant::now()).expect("bench listening"),
                        left => out.push(Tag(1), send(next, pc(left - 1))),
                    },
                },
                EventKind::Cancel => out.status = Status::Done(Payload::empty()),
                EventKind::YieldComplete => {}
            }
        }
        Ok(())
    }
}

/// Seconds for the hops.
fn wfhost_ring(workers: usize) -> f64 {
    let scheduler = Scheduler::builder()
        .workers(workers)
        .build()
        .expect("scheduler");
    let (finished, done) = unbounded();
    let pids: Vec<Pid> = (0..RING_MEMBERS)
        .map(|_| {
            let member = RingMember {
                next: None,
                finished: finished.clone(),
            };
            scheduler
                .spawn(member, "member", Payload::empty())
                .expect("spawn")
        })
        .collect();
    for (i, pid) in pids.iter().enumerate() {
        scheduler
            .send(*pid, pc(pids[(i + 1) % RING_MEMBERS]))
            .expect("member alive");
    }
    let start = Instant::now();
    scheduler
        .send(pids[0], pc(RING_HOPS - 1))
        .expect("member alive");
    let end = done.recv().expect("the token went round");
    scheduler.shutdown(Duration::from_secs(10));
    (end - start).as_secs_f64()
}

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

fn resident_bytes() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0
}

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
