//! Hibernation: a waiting process gives its instance back and comes back intact at its next
//! event: its messages, its timers, its memory.

use std::time::{Duration, Instant};

use wfhost::{Hibernation, Host, Payload, Residency};
use wfhost_test_programs::TINY;

const PATIENCE: Duration = Duration::from_secs(120);

fn host(hibernation: Hibernation) -> Host {
    let host = Host::builder()
        .workers(2)
        .hibernation(hibernation)
        .build()
        .unwrap();
    host.load_module("tiny", TINY).unwrap();
    host
}

/// Waits until `host`'s residency satisfies `done`, polling; fails after [`PATIENCE`].
fn until(host: &Host, what: &str, done: impl Fn(&Residency) -> bool) -> Residency {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let residency = host.residency();
        if done(&residency) {
            return residency;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {residency:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The xorshift pattern and FNV-1a checksum the `hoard` entry point uses.
fn hoard_checksum(seed: u64, len: usize) -> u64 {
    tiny::checksum(&tiny::pattern(seed, len))
}

#[test]
fn messages_and_memory_survive_hibernation() {
    let host = host(Hibernation::Always);
    const KIB: u32 = 256;
    const ROUNDS: u64 = 5;
    let run = host
        .spawn(
            "tiny",
            "hoard",
            Payload::to_postcard(&(KIB, 7u64, ROUNDS as u32)).unwrap(),
        )
        .unwrap();
    for round in 1..=ROUNDS {
        // Each message finds the process hibernated: no instance, its state saved.
        let asleep = until(&host, "the process to hibernate", |r| {
            r.hibernations == round && r.hibernated == 1
        });
        assert_eq!(asleep.live_instances, 0);
        // Its instance is kept warm, and the next wake rewrites it rather than instantiating.
        assert_eq!(asleep.warm_instances, 1);
        // The hoard is saved (random bytes do not compress), and little else: not the untouched
        // rest of its memory.
        let hoard = KIB as usize * 1024;
        assert!(
            asleep.hibernated_bytes > hoard && asleep.hibernated_bytes < hoard + (64 << 10),
            "{asleep:?}"
        );
        host.send(run.pid(), Payload::to_postcard(&round).unwrap())
            .unwrap();
    }
    let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
    assert_eq!(
        result.decode::<(u64, u64)>().unwrap(),
        (hoard_checksum(7, KIB as usize * 1024), 15)
    );
    let residency = host.residency();
    assert_eq!(
        (
            residency.live_instances,
            residency.hibernated,
            residency.hibernated_bytes
        ),
        (0, 0, 0)
    );
    assert_eq!(
        (residency.hibernations, residency.restores),
        (ROUNDS, ROUNDS)
    );
}

#[test]
fn memory_grown_past_its_initial_size_is_restored() {
    let host = host(Hibernation::Always);
    // 4 MiB: more than a small Rust module's initial memory, so it must have grown.
    const KIB: u32 = 4096;
    let run = host
        .spawn(
            "tiny",
            "hoard",
            Payload::to_postcard(&(KIB, 99u64, 1u32)).unwrap(),
        )
        .unwrap();
    until(&host, "the process to hibernate", |r| r.hibernated == 1);
    host.send(run.pid(), Payload::to_postcard(&1u64).unwrap())
        .unwrap();
    let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
    assert_eq!(
        result.decode::<(u64, u64)>().unwrap(),
        (hoard_checksum(99, KIB as usize * 1024), 1)
    );
    assert_eq!(host.residency().restores, 1);
}

#[test]
fn sleeping_processes_hibernate_and_their_timers_wake_them() {
    let host = host(Hibernation::Always);
    const N: usize = 200;
    let runs: Vec<_> = (0..N)
        .map(|_| {
            host.spawn("tiny", "nap", Payload::to_postcard(&20u64).unwrap())
                .unwrap()
        })
        .collect();
    // Each sleeps, then waits for a message to finish: two steps, after each of which it
    // hibernates.
    let settled = until(&host, "every process to wake", |r| {
        r.hibernations == 2 * N as u64 && r.hibernated == N
    });
    assert_eq!(settled.restores, N as u64);
    for run in &runs {
        host.send(run.pid(), Payload::to_postcard(&()).unwrap())
            .unwrap();
    }
    for run in runs {
        let slept: u64 = run
            .wait_timeout(PATIENCE)
            .expect("finished")
            .unwrap()
            .decode()
            .unwrap();
        // By the guest's own monotonic clock, which runs on across a restore into a fresh
        // instance: it slept at least the 20 ms it asked for.
        assert!((20_000..60_000_000).contains(&slept), "{slept}");
    }
    let residency = host.residency();
    assert_eq!(residency.hibernations, 2 * N as u64);
    assert_eq!(residency.restores, 2 * N as u64);
    assert_eq!((residency.live_instances, residency.hibernated), (0, 0));
}

#[test]
fn many_more_processes_than_instances_all_finish() {
    // 16 pooled instance slots for 500 processes: the waiting ones hibernate when the pool is
    // nearly full, and each wakes into a free slot.
    let host = Host::builder().workers(2).pooling(16).build().unwrap();
    host.load_module("tiny", TINY).unwrap();
    let capacity = host.capacity();
    assert_eq!(
        (capacity.instances, capacity.hibernation),
        (16, Hibernation::WhenFull)
    );
    const N: u64 = 500;
    let runs: Vec<_> = (0..N)
        .map(|_| {
            host.spawn("tiny", "tally", Payload::to_postcard(&2u32).unwrap())
                .unwrap()
        })
        .collect();
    let settled = until(&host, "every process to take its first step", |r| {
        r.hibernated as u64 + r.live_instances as u64 == N && r.live_instances <= 14
    });
    assert!(settled.hibernated as u64 >= N - 14, "{settled:?}");
    for round in 0..2 {
        for (n, run) in runs.iter().enumerate() {
            host.send(
                run.pid(),
                Payload::to_postcard(&(n as u64 + round)).unwrap(),
            )
            .unwrap();
        }
    }
    for (n, run) in runs.into_iter().enumerate() {
        let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
        assert_eq!(
            result.decode::<(u32, u64)>().unwrap(),
            (2, 2 * n as u64 + 1)
        );
    }
    let residency = host.residency();
    assert_eq!((residency.live_instances, residency.hibernated), (0, 0));
    assert_eq!(host.counters().completions, N);
}

#[test]
fn a_pool_smaller_than_the_workers_hibernates_every_waiting_process() {
    // Two slots, two workers: processes running at once may take both, so every waiting one
    // hibernates and none is ever refused an instance.
    let host = Host::builder().workers(2).pooling(2).build().unwrap();
    host.load_module("tiny", TINY).unwrap();
    let runs: Vec<_> = (0..50u64)
        .map(|_| {
            host.spawn("tiny", "wait", Payload::to_postcard(&()).unwrap())
                .unwrap()
        })
        .collect();
    until(&host, "every process to hibernate", |r| r.hibernated == 50);
    for (n, run) in runs.iter().enumerate() {
        host.send(run.pid(), Payload::to_postcard(&(n as u64)).unwrap())
            .unwrap();
    }
    for (n, run) in runs.into_iter().enumerate() {
        let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
        assert_eq!(result.decode::<u64>().unwrap(), n as u64);
    }
    assert_eq!(host.residency().restores, 50);
}

#[test]
fn a_guest_cannot_change_its_wasi_context_which_restoring_rebuilds() {
    let host = host(Hibernation::Always);
    host.load_module("probe", wfhost_test_programs::PROBE)
        .unwrap();
    let result = host
        .spawn("probe", "close_stdout", Payload::to_json(&()).unwrap())
        .unwrap()
        .wait_timeout(PATIENCE)
        .expect("finished")
        .unwrap();
    // The close was refused, so stdout is still open.
    assert_eq!(
        result.decode::<serde_json::Value>().unwrap(),
        serde_json::json!({ "open": true })
    );
}

#[test]
fn a_process_woken_while_every_instance_is_taken_waits_for_one() {
    // One instance. A hibernated process gets a message while a spinning process holds the
    // instance; it keeps the message and wakes when the spinner is stopped at the step limit.
    let host = Host::builder()
        .workers(2)
        .pooling(1)
        .hibernation(Hibernation::Always)
        .limits(wfhost::Limits::default().step_time_limit(Duration::from_millis(500)))
        .build()
        .unwrap();
    host.load_module("tiny", TINY).unwrap();
    host.load_module("probe", wfhost_test_programs::PROBE)
        .unwrap();
    let waiter = host
        .spawn("tiny", "wait", Payload::to_postcard(&()).unwrap())
        .unwrap();
    until(&host, "the waiter to hibernate", |r| r.hibernated == 1);
    let spinner = host
        .spawn("probe", "spin", Payload::to_json(&()).unwrap())
        .unwrap();
    until(&host, "the spinner to take the instance", |r| {
        r.live_instances == 1
    });
    host.send(waiter.pid(), Payload::to_postcard(&42u64).unwrap())
        .unwrap();
    let error = spinner
        .wait_timeout(PATIENCE)
        .expect("stopped")
        .unwrap_err();
    assert_eq!(error.kind(), wfhost::ErrorKind::Limit, "{error}");
    let answer = waiter.wait_timeout(PATIENCE).expect("finished").unwrap();
    assert_eq!(answer.decode::<u64>().unwrap(), 42);
    assert_eq!(host.residency().restores, 1);
    // The waiter waited in the queue for an instance without being stepped: its first step, the
    // spinner's one, and the step that took the message. (Retrying would step it again and again
    // until the spinner's step limit.)
    assert_eq!(host.counters().steps, 3);
}

#[test]
fn a_cancel_wakes_a_hibernated_process_and_its_clean_up_runs() {
    let host = host(Hibernation::Always);
    host.load_module("probe", wfhost_test_programs::PROBE)
        .unwrap();
    let run = host
        .spawn("probe", "cleanup_on_cancel", Payload::to_json(&()).unwrap())
        .unwrap();
    // A message first: it wakes, takes it, and hibernates again.
    until(&host, "the process to hibernate", |r| r.hibernated == 1);
    host.send(run.pid(), Payload::to_json(&"hello").unwrap())
        .unwrap();
    until(&host, "the process to hibernate again", |r| {
        r.hibernations == 2 && r.hibernated == 1
    });
    host.cancel(run.pid()).unwrap();
    let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
    assert_eq!(result.decode::<String>().unwrap(), "cleaned up");
    // Woken by the message, by the cancel, and by the clean-up's sleep.
    assert_eq!(host.residency().restores, 3);
}

#[test]
fn without_hibernation_processes_keep_their_instances() {
    let host = host(Hibernation::Off);
    let run = host
        .spawn("tiny", "wait", Payload::to_postcard(&()).unwrap())
        .unwrap();
    host.send(run.pid(), Payload::to_postcard(&5u64).unwrap())
        .unwrap();
    let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
    assert_eq!(result.decode::<u64>().unwrap(), 5);
    let residency = host.residency();
    assert_eq!((residency.hibernations, residency.restores), (0, 0));
}
