//! Idle workers park: over one idle second they use almost no CPU.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{Proc, PATIENCE};
use wfcontract::{Command, Payload, Status, Tag};
use wfhost_scheduler::Scheduler;

/// Clock ticks (1/100 s) of CPU used by this process's threads whose name starts with `prefix`.
fn cpu_ticks(prefix: &str) -> u64 {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = task.unwrap().path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // "pid (comm) state ...": the name is inside the parentheses, the fields follow them.
        let (open, close) = (stat.find('(').unwrap(), stat.rfind(')').unwrap());
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        // utime and stime are fields 14 and 15 of stat; 12 and 13 after "pid (comm)".
        ticks += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    ticks
}

#[test]
fn idle_workers_park_and_use_under_five_percent_of_a_core() {
    let scheduler = Scheduler::builder()
        .workers(2)
        .thread_name("idle-probe")
        .build()
        .unwrap();
    // Some work first, including timers, so the workers have been busy and gone idle again.
    let handles: Vec<_> = (0..1_000)
        .map(|_| {
            let process = Proc::new((), |_, env, _, out| {
                if env.first {
                    out.push(Tag(1), Command::Sleep(Duration::from_millis(1)));
                } else {
                    out.status = Status::Done(Payload::empty());
                }
            });
            scheduler
                .spawn_handle(process, "nap", Payload::empty())
                .unwrap()
        })
        .collect();
    for handle in handles {
        handle.wait_timeout(PATIENCE).unwrap().unwrap();
    }
    let before = cpu_ticks("idle-probe");
    // The measurement window: one idle second.
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks("idle-probe") - before;
    assert!(
        used < 5,
        "idle workers used {used} ticks (10 ms each) in one second"
    );
    assert_eq!(scheduler.parked_workers(), 2);
}
