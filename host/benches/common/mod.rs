//! What the benchmarks share: timing, payload helpers, resident memory, and the native ring the
//! wasm ring is compared with. Each bench uses part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

pub mod cores;
pub mod filled;
pub mod usage;

use crossbeam_channel::{unbounded, Sender};
use wfhost::contract::{Command, EventKind, Payload, Pid, SendRequest, SpawnRequest, Status, Tag};
use wfhost_scheduler::{
    Context, Events, InitContext, Process, ProcessError, Request, Scheduler, Spawn, StepOutput,
};

/// Whether a workload was asked for: those named on the command line (`cargo bench ... -- ring
/// skynet`), or all when none is. A flag's value (`--cores 2,4`) names no workload.
pub fn wanted(args: &[String]) -> impl Fn(&str) -> bool + '_ {
    let mut selected: Vec<&str> = Vec::new();
    let mut after_flag = false;
    for arg in args {
        if arg.starts_with('-') {
            after_flag = FLAGS_WITH_VALUES.contains(&arg.as_str());
        } else if !std::mem::take(&mut after_flag) {
            selected.push(arg);
        }
    }
    move |name| selected.is_empty() || selected.contains(&name)
}

/// The flags that take a value (`--cores 2,4`, `--workflows 1000000`).
const FLAGS_WITH_VALUES: [&str; 2] = ["--cores", "--workflows"];

/// The value given to `flag` on the command line, as a count.
pub fn flag_value(args: &[String], flag: &str) -> Option<usize> {
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1)?.replace(['_', ','], "").parse().ok()
}

/// A count from the environment variable `variable`, or `default`.
pub fn env_count(variable: &str, default: usize) -> usize {
    std::env::var(variable)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `a` and `b` alternately, `rounds` times each; returns their median seconds.
/// `WFHOST_BENCH_ONLY=wfhost` (or `tokio`) runs one side alone, for profiling.
pub fn alternate(
    rounds: usize,
    mut a: impl FnMut() -> f64,
    mut b: impl FnMut() -> f64,
) -> (f64, f64) {
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

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn time(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64()
}

pub fn pc<T: serde::Serialize>(value: T) -> Payload {
    Payload::to_postcard(&value).expect("bench values encode")
}

pub fn decode<T: serde::de::DeserializeOwned>(payload: &Payload) -> T {
    payload.decode().expect("bench values decode")
}

pub fn send(to: Pid, message: Payload) -> Command {
    Command::Send(SendRequest { to, message })
}

/// The process's proportional set size (`Pss` in `/proc/self/smaps_rollup`): resident memory with
/// each shared page counted once, however many times it is mapped. Copy-on-write memory images map
/// the same pages into every instance, which plain resident memory counts once per instance.
pub fn proportional_bytes() -> f64 {
    kib_field("/proc/self/smaps_rollup", "Pss:")
}

/// The process's peak resident memory (`VmHWM`), since it started or since [`reset_peak`].
pub fn peak_bytes() -> f64 {
    kib_field("/proc/self/status", "VmHWM:")
}

/// The value of the line of `file` that starts with `field`, in kB, as bytes.
fn kib_field(file: &str, field: &str) -> f64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib * 1024.0)
}

/// Starts [`peak_bytes`] again from the resident memory now.
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

pub fn resident_bytes() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0
}

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
        // Native processes take every message they are sent.
        out.receive = u32::MAX;
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

/// Seconds for `hops` hops round a ring of `members` native processes.
pub fn native_ring(workers: usize, members: usize, hops: u64) -> f64 {
    let scheduler = Scheduler::builder()
        .workers(workers)
        .build()
        .expect("scheduler");
    let (finished, done) = unbounded();
    let pids: Vec<Pid> = (0..members)
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
            .send(*pid, pc(pids[(i + 1) % members]))
            .expect("member alive");
    }
    let start = Instant::now();
    scheduler.send(pids[0], pc(hops - 1)).expect("member alive");
    let end = done.recv().expect("the token went round");
    scheduler.shutdown(Duration::from_secs(10));
    (end - start).as_secs_f64()
}

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
        // Native processes take every message they are sent.
        out.receive = u32::MAX;
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

/// Runs a native skynet tree of `leaves` leaves to the end.
pub fn native_skynet(workers: usize, leaves: u64) {
    let scheduler = Scheduler::builder()
        .workers(workers)
        .handler(wfhost::contract::CommandKind::Spawn, spawn_skynet)
        .build()
        .expect("scheduler");
    let root = scheduler
        .spawn_handle(SkynetNode::default(), "skynet", pc((0, leaves)))
        .expect("spawn");
    let sum: u64 = decode(&root.wait().expect("skynet finishes"));
    assert_eq!(sum, leaves * (leaves - 1) / 2);
    scheduler.shutdown(Duration::from_secs(10));
}
