//! OS thread count with 100,000 live processes: workers + O(1). Alone in its binary, so no other
//! test's threads are counted.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{pc, Proc, PATIENCE};
use crossbeam_channel::unbounded;
use wfcontract::{Command, EventKind, Payload, Status, Tag};
use wfhost_scheduler::{Scheduler, Spawn};

fn os_threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn thread_count_is_workers_plus_constant_with_100k_live_processes() {
    const N: usize = 100_000;
    const WORKERS: usize = 2;
    let before = os_threads();
    let scheduler = Scheduler::builder().workers(WORKERS).build().unwrap();
    let (started_tx, started_rx) = unbounded();
    let (done_tx, done_rx) = unbounded();
    for _ in 0..N {
        let started = started_tx.clone();
        // Each one sleeps for an hour (a timer entry) and waits for a message.
        let process = Proc::new((), move |_, env, events, out| {
            out.status = Status::Idle;
            if env.first {
                out.push(Tag(1), Command::Sleep(Duration::from_secs(3600)));
                started.send(()).unwrap();
            }
            if events
                .as_slice()
                .iter()
                .any(|e| e.kind == EventKind::Message)
            {
                out.status = Status::Done(pc(&1u8));
            }
        });
        let spawn = Spawn::new(process, "wait", Payload::empty()).notify(done_tx.clone());
        scheduler.spawn_with(spawn).unwrap();
    }
    for i in 0..N {
        started_rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("only {i} processes started"));
    }
    assert_eq!(scheduler.live(), N);
    // The workers and the timer thread; nothing per process.
    assert_eq!(os_threads(), before + WORKERS + 1);

    for pid in 1..=N as u64 {
        scheduler
            .send(wfcontract::Pid(pid), Payload::empty())
            .unwrap();
    }
    for _ in 0..N {
        done_rx.recv_timeout(PATIENCE).unwrap().1.unwrap();
    }
    assert_eq!(os_threads(), before + WORKERS + 1);
    scheduler.shutdown(Duration::from_secs(1));
    assert_eq!(os_threads(), before);
}
