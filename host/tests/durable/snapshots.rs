//! Snapshots bound replay: a workflow with a history of 100,000 events recovers from its latest
//! snapshot and replays only the steps after it; a snapshot that is damaged or missing costs a
//! whole replay, never a wrong result.

use std::path::Path;
use std::time::Duration;

use serde_json::json as value;
use wfhost::__testing::{NewSnapshot, Op, Read as _, SqliteStore, StepRecord, Store as _};
use wfhost::{DurableCounters, Hibernation, Host, Payload, Snapshots, SyncMode};

use super::common::{host_on, json, tempdir, PATIENCE};

/// `long_history` with 100 steps of 1,000 random numbers each.
const STEPS: u32 = 100;
const WIDTH: u32 = 1_000;
/// The events its journal holds: the 100,000 numbers, and the answer to its message to the host
/// (then it waits for a number). How many steps took them depends on how the answers came.
const JOURNAL_EVENTS: u64 = (STEPS * WIDTH) as u64 + 1;

/// What `long_history` told the host: the count and the sum of its numbers.
type Told = (u64, u64);

/// Runs `long_history` as workflow "long" on a new store until it waits for its number; returns
/// what it told the host.
fn long_history(store: &Path, hibernation: Hibernation, snapshots: Snapshots) -> Told {
    let host = host_on(
        Host::builder()
            .hibernation(hibernation)
            .snapshots(snapshots),
        store,
    );
    let run = host
        .start(
            "long",
            "probe",
            "long_history",
            json(value!([STEPS, WIDTH])),
        )
        .unwrap();
    let told = run
        .recv_message_timeout(PATIENCE)
        .expect("it tells the host");
    let told: Told = told.data.decode().unwrap();
    wait_until_waiting(store);
    host.shutdown(Duration::from_secs(5));
    told
}

/// Waits until the journal of "long" holds the step that took the answer to its message to the
/// host: it waits for its number from then on, and a host stopped now leaves that journal.
fn wait_until_waiting(store: &Path) {
    let mut store = SqliteStore::open_existing(store).unwrap();
    let num = store.workflow("long").unwrap().unwrap().start.num;
    let deadline = std::time::Instant::now() + PATIENCE;
    let (mut seen, mut events) = (0, 0);
    loop {
        for step in store.steps(num, seen).unwrap() {
            seen = step.seq;
            events += StepRecord::decode(&step.record).unwrap().events.len() as u64;
        }
        if events == JOURNAL_EVENTS {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{events} events journaled"
        );
        // The commit is a few milliseconds away at most.
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The journal of "long": its steps and events in all, and those after its snapshot.
struct Journal {
    steps: u64,
    events: u64,
    after_snapshot: (u64, u64),
}

fn journal(store: &Path) -> Journal {
    let mut store = SqliteStore::open_existing(store).unwrap();
    let workflow = store.workflow("long").unwrap().unwrap();
    let num = workflow.start.num;
    let snapshot = store.snapshot(num).unwrap().map_or(0, |s| s.seq);
    let steps: Vec<(u64, u64)> = store
        .steps(num, 0)
        .unwrap()
        .iter()
        .map(|s| {
            (
                s.seq,
                StepRecord::decode(&s.record).unwrap().events.len() as u64,
            )
        })
        .collect();
    let after: Vec<&(u64, u64)> = steps.iter().filter(|(seq, _)| *seq > snapshot).collect();
    Journal {
        steps: steps.len() as u64,
        events: steps.iter().map(|s| s.1).sum(),
        after_snapshot: (after.len() as u64, after.iter().map(|s| s.1).sum()),
    }
}

/// Recovers "long" in a new host, sends it 7, and checks its result against what it told the
/// first host. Returns what the host counted.
fn recover_and_finish(store: &Path, told: Told) -> DurableCounters {
    let host = host_on(Host::builder(), store);
    let runs = host.recover().unwrap();
    assert_eq!(runs.len(), 1);
    let (id, run) = runs.into_iter().next().unwrap();
    assert_eq!(id, "long");
    host.send(run.pid(), Payload::to_json(&7u64).unwrap())
        .unwrap();
    let result = run.wait_timeout(PATIENCE).expect("it ends").unwrap();
    let result: (u64, u64, u64, u64) = result.decode().unwrap();
    // The count, the sum and the map it kept in memory through the restart, and the number.
    assert_eq!(result, (told.0, told.1, 97, 7));
    let counters = host.durable_counters().unwrap();
    host.shutdown(Duration::from_secs(5));
    counters
}

/// A workflow that hibernates when it waits saves a snapshot with that step: recovery replays
/// none of its 100,001 events.
#[test]
fn a_long_history_recovers_from_its_snapshot_without_replaying_it() {
    let dir = tempdir("snapshot-none");
    let store = dir.join("wf.db");
    let told = long_history(&store, Hibernation::Always, Snapshots::at_hibernation());
    assert_eq!(told.0, u64::from(STEPS * WIDTH));
    let journal = journal(&store);
    assert_eq!(journal.events, JOURNAL_EVENTS);
    assert_eq!(journal.after_snapshot, (0, 0));
    let counters = recover_and_finish(&store, told);
    assert_eq!(counters.snapshots_restored, 1);
    assert_eq!(counters.snapshots_ignored, 0);
    assert_eq!(counters.steps_replayed, 0);
    assert_eq!(counters.events_replayed, 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// Without hibernation, a snapshot every 1,000 events: recovery replays exactly the steps after
/// the latest one, fewer than 1,000 events.
#[test]
fn recovery_replays_only_the_steps_after_the_latest_snapshot() {
    let dir = tempdir("snapshot-tail");
    let store = dir.join("wf.db");
    let told = long_history(&store, Hibernation::Off, Snapshots::default());
    let journal = journal(&store);
    assert_eq!(journal.events, JOURNAL_EVENTS);
    let (steps, events) = journal.after_snapshot;
    assert!(
        steps >= 1 && events < 1_000,
        "{steps} steps of {events} events after it"
    );
    let counters = recover_and_finish(&store, told);
    assert_eq!(counters.snapshots_restored, 1);
    assert_eq!(counters.steps_replayed, steps);
    assert_eq!(counters.events_replayed, events);
    let _ = std::fs::remove_dir_all(dir);
}

/// Snapshots off: the whole journal is replayed, to the same result.
#[test]
fn without_snapshots_the_whole_journal_is_replayed() {
    let dir = tempdir("snapshot-off");
    let store = dir.join("wf.db");
    let told = long_history(&store, Hibernation::Always, Snapshots::off());
    let journal = journal(&store);
    assert_eq!(journal.after_snapshot, (journal.steps, JOURNAL_EVENTS));
    let counters = recover_and_finish(&store, told);
    assert_eq!(counters.snapshots_restored, 0);
    assert_eq!(counters.steps_replayed, journal.steps);
    assert_eq!(counters.events_replayed, JOURNAL_EVENTS);
    let _ = std::fs::remove_dir_all(dir);
}

/// A snapshot damaged on disk (one byte of its image changed, or cut short) is set aside: the
/// whole journal is replayed, to the same result.
#[test]
fn a_damaged_snapshot_is_set_aside_and_the_journal_replayed() {
    for (name, cut) in [("flipped", false), ("cut", true)] {
        let dir = tempdir(&format!("snapshot-{name}"));
        let store = dir.join("wf.db");
        let told = long_history(&store, Hibernation::Always, Snapshots::at_hibernation());
        let steps = journal(&store).steps;
        {
            let mut store = SqliteStore::open(&store, SyncMode::Full).unwrap();
            let num = store.workflow("long").unwrap().unwrap().start.num;
            let mut snapshot: NewSnapshot = store.snapshot(num).unwrap().expect("it has one");
            let state = &mut snapshot.state;
            if cut {
                state.truncate(state.len() / 3);
            } else {
                let middle = state.len() / 2;
                state[middle] ^= 0x40;
            }
            store.commit(&[Op::Snapshot(snapshot)]).unwrap();
        }
        let counters = recover_and_finish(&store, told);
        assert_eq!(counters.snapshots_restored, 0, "{name}");
        assert_eq!(counters.snapshots_ignored, 1, "{name}");
        assert_eq!(counters.steps_replayed, steps, "{name}");
        assert_eq!(counters.events_replayed, JOURNAL_EVENTS, "{name}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
