//! Many live wasm processes at once, at the operating system's default limits: exact counts, and
//! a clean refusal past the host's capacity.

mod waiting;

use std::time::{Duration, Instant};
use waiting::{message_all_and_check, spawn_waiting};

use wfhost::{ErrorKind, Hibernation, Host, Payload};
use wfhost_test_programs::{PROBE, TINY};

#[test]
fn ten_thousand_processes_wait_in_recv_and_all_answer() {
    const N: usize = 10_000;
    let host = Host::builder().workers(2).build().unwrap();
    host.load_module("probe", PROBE).unwrap();
    let (runs, refused) = spawn_waiting(&host, N);
    assert!(refused.is_none(), "{refused:?}");
    assert_eq!(host.live(), N);
    message_all_and_check(&host, runs);
    assert_eq!(host.live(), 0);
    let counters = host.counters();
    assert_eq!(counters.spawns, N as u64);
    assert_eq!(counters.completions, N as u64);
}

#[test]
fn ten_thousand_hibernated_processes_wait_in_recv_and_all_answer() {
    const N: u64 = 10_000;
    let host = Host::builder()
        .workers(2)
        .hibernation(Hibernation::Always)
        .build()
        .unwrap();
    host.load_module("tiny", TINY).unwrap();
    let runs: Vec<_> = (0..N)
        .map(|_| {
            host.spawn("tiny", "wait", Payload::to_postcard(&()).unwrap())
                .unwrap()
        })
        .collect();
    // Each process takes one step and waits in recv(), hibernated.
    let deadline = Instant::now() + Duration::from_secs(300);
    while host.residency().hibernated < N as usize {
        assert!(Instant::now() < deadline, "{:?}", host.residency());
        std::thread::sleep(Duration::from_millis(5));
    }
    let residency = host.residency();
    assert_eq!((residency.live_instances, residency.hibernations), (0, N));
    for (n, run) in runs.iter().enumerate() {
        host.send(run.pid(), Payload::to_postcard(&(n as u64)).unwrap())
            .unwrap();
    }
    for (n, run) in runs.into_iter().enumerate() {
        let answer = run
            .wait_timeout(Duration::from_secs(300))
            .expect("finished")
            .unwrap();
        assert_eq!(answer.decode::<u64>().unwrap(), n as u64);
    }
    let residency = host.residency();
    assert_eq!(
        (
            residency.hibernated,
            residency.restores,
            residency.hibernated_bytes
        ),
        (0, N, 0)
    );
    assert_eq!(host.counters().completions, N);
}

#[test]
fn a_spawn_past_the_configured_limit_fails_cleanly() {
    let host = Host::builder()
        .workers(2)
        .max_processes(Some(50))
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    assert_eq!(host.capacity().processes, 50);
    let (runs, refused) = spawn_waiting(&host, 51);
    assert_eq!(runs.len(), 50);
    let refused = refused.expect("the 51st is refused");
    assert_eq!(refused.kind(), ErrorKind::Limit);
    assert_eq!(
        refused.message(),
        "the host already runs its limit of 50 processes (HostBuilder::max_processes, \
         --max-processes); try again when some have finished"
    );
    message_all_and_check(&host, runs);
}
