//! Recovery at scale: an application with 10,000 durable workflows waiting (half on a timer, half
//! for a message) is killed as `kill -9` kills it, and the host started on its store brings every
//! one back: each timer fires once, each message reaches its workflow, and every workflow ends with
//! the result an uninterrupted run gives. The benchmark of the same at a million is `cargo bench -p
//! wfhost --bench durable -- recover`. And what makes that fast: recovered workflows wait dormant
//! (no instance, nothing replayed) until their first event, and one restored without a snapshot
//! saves one when it next hibernates.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;

use serde_json::json;
use wfhost::__testing::Open as _;
use wfhost::store::Location;
use wfhost::{Host, WorkflowResult};

use super::common::{host_on, json, tempdir, PATIENCE};

const WORKFLOWS: usize = 10_000;
/// How long each napping workflow sleeps from its first step: long enough that (nearly) none
/// wakes before the application is killed once all have taken their first step, short enough
/// that the test waits for the timers only briefly after the restart.
const NAP_MILLIS: u64 = 4_000;
/// Set in the copy of this test binary that plays the application: the store to use.
const STORE: &str = "WFHOST_TEST_RECOVERY_STORE";
const THIS_TEST: &str = "durable::recovery::ten_thousand_waiting_workflows_all_answer_after_a_kill";

fn id(n: usize) -> String {
    if n.is_multiple_of(2) {
        format!("nap-{n}")
    } else {
        format!("waiter-{n}")
    }
}

/// The application: starts the workflows from 16 threads (as many clients would), waits until
/// each has taken its first step, and dies without a word, as `kill -9` would end it.
fn application(store: &Path) -> ! {
    let host = host_on(Host::builder(), store);
    std::thread::scope(|scope| {
        for thread in 0..16 {
            let host = &host;
            scope.spawn(move || {
                for n in (thread..WORKFLOWS).step_by(16) {
                    let (entry, input) = if n.is_multiple_of(2) {
                        ("nap", json!(NAP_MILLIS))
                    } else {
                        ("wait_message", json!(3_600_000))
                    };
                    host.start(&id(n), "probe", entry, json(input)).unwrap();
                }
            });
        }
    });
    while host.counters().steps < WORKFLOWS as u64 {
        std::thread::yield_now();
    }
    std::process::abort();
}

#[test]
fn ten_thousand_waiting_workflows_all_answer_after_a_kill() {
    if let Some(store) = std::env::var_os(STORE) {
        application(Path::new(&store));
    }
    let dir = tempdir("recovery");
    let store = dir.join("wf.db");
    let killed = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", THIS_TEST, "--nocapture", "--test-threads", "1"])
        .env(STORE, &store)
        .output()
        .unwrap();
    assert!(
        !killed.status.success(),
        "the application was to die: {}",
        String::from_utf8_lossy(&killed.stderr)
    );

    // Every start was acknowledged, so every workflow is in the store. The waiters wait for
    // messages nobody sent; the naps for timers due after the kill (on a machine slow enough to
    // take longer than a nap to start them all, some may have ended before it).
    let mut read = Location::from(&store).open_existing().unwrap();
    assert_eq!(read.workflows(false).unwrap().len(), WORKFLOWS);
    let unfinished: HashSet<String> = read
        .workflows(true)
        .unwrap()
        .into_iter()
        .map(|w| w.start.id)
        .collect();
    drop(read);
    assert!((1..WORKFLOWS)
        .step_by(2)
        .all(|n| unfinished.contains(&id(n))));

    let host = host_on(Host::builder(), &store);
    let runs: HashMap<String, wfhost::Run> = host.recover().unwrap().into_iter().collect();
    // Exactly the unfinished ones come back.
    assert_eq!(runs.len(), unfinished.len());
    assert!(runs.keys().all(|id| unfinished.contains(id)));
    for n in (1..WORKFLOWS).step_by(2) {
        let pid = runs[&id(n)].pid();
        host.send(pid, json(json!(format!("m-{n}")))).unwrap();
    }
    let mut rested = 0;
    let mut answered = 0;
    for n in 0..WORKFLOWS {
        let Some(run) = runs.get(&id(n)) else {
            // Ended before the kill: the store has its result.
            assert_eq!(
                host.result(&id(n)).unwrap(),
                WorkflowResult::Done(json(json!("rested")))
            );
            rested += 1;
            continue;
        };
        let result = run
            .wait_timeout(PATIENCE)
            .unwrap_or_else(|| panic!("{} did not end", id(n)))
            .unwrap_or_else(|error| panic!("{} failed: {error}", id(n)));
        if n.is_multiple_of(2) {
            assert_eq!(result.decode::<String>().unwrap(), "rested");
            rested += 1;
        } else {
            let message: Option<String> = result.decode().unwrap();
            assert_eq!(message, Some(format!("m-{n}")));
            answered += 1;
        }
    }
    assert_eq!((rested, answered), (WORKFLOWS / 2, WORKFLOWS / 2));
    assert_eq!(host.live(), 0);
    assert_eq!(
        host.result(&id(0)).unwrap(),
        WorkflowResult::Done(json(json!("rested")))
    );
    host.shutdown(std::time::Duration::from_secs(10));
    drop(host);
    // And so the store says: none is left unfinished.
    let mut read = Location::from(&store).open_existing().unwrap();
    assert_eq!(read.workflows(true).unwrap().len(), 0);
    assert_eq!(read.workflows(false).unwrap().len(), WORKFLOWS);
    let _ = std::fs::remove_dir_all(dir);
}

/// Recovered workflows are dormant until something happens to them: none is replayed and none
/// holds an instance once all have taken their first step (their timers armed, their mailboxes
/// open); a message restores exactly its receiver, which replays its one journaled step and
/// answers; the rest are untouched, and a cancel restores and ends another.
#[test]
fn recovered_workflows_wait_dormant_until_their_first_event() {
    const WAITERS: usize = 200;
    let dir = tempdir("recovery-dormant");
    let store = dir.join("wf.db");
    {
        let host = host_on(Host::builder(), &store);
        for n in 0..WAITERS {
            let (entry, input) = if n.is_multiple_of(2) {
                ("nap", json!(3_600_000))
            } else {
                ("wait_message", json!(3_600_000))
            };
            host.start(&id(n), "probe", entry, json(input)).unwrap();
        }
        while host.counters().steps < WAITERS as u64 {
            std::thread::yield_now();
        }
        host.shutdown(std::time::Duration::from_secs(10));
    }
    let host = host_on(Host::builder(), &store);
    let runs: HashMap<String, wfhost::Run> = host.recover().unwrap().into_iter().collect();
    assert_eq!(runs.len(), WAITERS);
    while host.counters().steps < WAITERS as u64 {
        std::thread::yield_now();
    }
    let counters = host.durable_counters().unwrap();
    assert_eq!(counters.steps_replayed, 0);
    assert_eq!(counters.snapshots_restored, 0);
    assert_eq!(host.residency().live_instances, 0);
    assert_eq!(host.live(), WAITERS);

    let waiter = &runs[&id(7)];
    host.send(waiter.pid(), json(json!("m-7"))).unwrap();
    let result = waiter.wait_timeout(PATIENCE).expect("it answers").unwrap();
    assert_eq!(
        result.decode::<Option<String>>().unwrap(),
        Some("m-7".into())
    );
    assert_eq!(host.durable_counters().unwrap().steps_replayed, 1);

    let napper = &runs[&id(4)];
    host.cancel(napper.pid()).unwrap();
    let cancelled = napper.wait_timeout(PATIENCE).expect("it ends");
    assert!(cancelled.is_err(), "{cancelled:?}");
    assert_eq!(host.durable_counters().unwrap().steps_replayed, 2);
    assert_eq!(host.live(), WAITERS - 2);
    host.shutdown(std::time::Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(dir);
}

/// A workflow restored without a snapshot (its whole journal replayed) saves one when it next
/// hibernates, so the recovery after that replays nothing.
#[test]
fn a_workflow_restored_without_a_snapshot_saves_one_when_it_next_hibernates() {
    let dir = tempdir("recovery-snapshot-soon");
    let store = dir.join("wf.db");
    // Snapshots every 1,000 events, and at hibernation, which this host does only when full:
    // its first two steps save none.
    {
        let host = host_on(Host::builder(), &store);
        let run = host.start("c", "probe", "collect", json(json!(3))).unwrap();
        host.send(run.pid(), json(json!(1))).unwrap();
        while host.counters().steps < 2 {
            std::thread::yield_now();
        }
        assert_eq!(host.durable_counters().unwrap().snapshots_written, 0);
        host.shutdown(std::time::Duration::from_secs(10));
    }
    let always = || Host::builder().hibernation(wfhost::Hibernation::Always);
    {
        let host = host_on(always(), &store);
        let runs = host.recover().unwrap();
        assert_eq!(runs.len(), 1);
        host.send(runs[0].1.pid(), json(json!(2))).unwrap();
        // Restored: its journal replayed, the message stepped; it waits for one more and
        // hibernates, which saves its snapshot.
        let deadline = std::time::Instant::now() + PATIENCE;
        while host.durable_counters().unwrap().snapshots_written < 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "no snapshot was saved"
            );
            std::thread::yield_now();
        }
        let counters = host.durable_counters().unwrap();
        assert_eq!(counters.snapshots_restored, 0);
        assert!(counters.steps_replayed >= 2, "{counters:?}");
        host.shutdown(std::time::Duration::from_secs(10));
    }
    let host = host_on(always(), &store);
    let runs = host.recover().unwrap();
    host.send(runs[0].1.pid(), json(json!(3))).unwrap();
    let result = runs[0].1.wait_timeout(PATIENCE).expect("it ends").unwrap();
    assert_eq!(result.decode::<Vec<u32>>().unwrap(), [1, 2, 3]);
    let counters = host.durable_counters().unwrap();
    assert_eq!(counters.snapshots_restored, 1);
    assert_eq!(counters.steps_replayed, 0);
    host.shutdown(std::time::Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(dir);
}

/// Restored workflows queue for an instance as hibernated ones do: eight woken at once on a host
/// with one instance all answer, none fails for want of one.
#[test]
fn restored_workflows_wait_for_an_instance_rather_than_fail() {
    const WAITERS: usize = 8;
    let dir = tempdir("recovery-one-instance");
    let store = dir.join("wf.db");
    {
        let host = host_on(Host::builder(), &store);
        for n in 0..WAITERS {
            host.start(
                &id(2 * n + 1),
                "probe",
                "wait_message",
                json(json!(3_600_000)),
            )
            .unwrap();
        }
        while host.counters().steps < WAITERS as u64 {
            std::thread::yield_now();
        }
        host.shutdown(std::time::Duration::from_secs(10));
    }
    let host = host_on(Host::builder().pooling(1), &store);
    let runs = host.recover().unwrap();
    assert_eq!(runs.len(), WAITERS);
    for (id, run) in &runs {
        host.send(run.pid(), json(json!(id))).unwrap();
    }
    for (id, run) in &runs {
        let result = run
            .wait_timeout(PATIENCE)
            .unwrap_or_else(|| panic!("{id} did not answer"))
            .unwrap_or_else(|error| panic!("{id} failed: {error}"));
        assert_eq!(
            result.decode::<Option<String>>().unwrap().as_deref(),
            Some(id.as_str())
        );
    }
    assert_eq!(
        host.durable_counters().unwrap().steps_replayed,
        WAITERS as u64
    );
    host.shutdown(std::time::Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(dir);
}
