//! An application's host killed after N journal commits, for many N, then started again: every
//! order saga ends as in an uninterrupted run, and a host call whose answer was journaled is never
//! made again (one whose answer was not may be, with the same idempotency key). Some sagas are
//! the children of a workflow whose steps go on before they are on disk, and which, after each,
//! calls a host function with a random number it drew: a call made before the draw was on disk
//! would be made again, after a crash, under the same key with another number.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use wfhost::__testing::{Open as _, StepRecord};
use wfhost::contract::{Command as Yielded, EventKind, Tag};
use wfhost::store::Location;
use wfhost::{Host, Snapshots};
use wfhost_test_programs::postgres::Postgres;

use super::common::{host_on, json, order_functions, saga_calls, saga_result, tempdir, PATIENCE};

const ORDERS: u32 = 10;
/// Orders `ORDERS..ORDERS + TREE_ORDERS` run as the children of one workflow, `tree`, which
/// spawns and joins them one after another and, after each, calls `charge` with a random number:
/// steps that go on before they are on disk (see `order_tree`).
const TREE_ORDERS: u32 = 3;

/// The host calls of a run: the sagas' and `tree`'s own.
fn total_calls() -> usize {
    (0..ORDERS + TREE_ORDERS).map(saga_calls).sum::<usize>() + TREE_ORDERS as usize
}
/// Set in the copy of this test binary that plays the application: the store to use.
const STORE: &str = "WFHOST_TEST_ORDERS_STORE";
const LOG: &str = "WFHOST_TEST_ORDERS_LOG";
const PHASE: &str = "WFHOST_TEST_ORDERS_PHASE";
/// How many events between snapshots (`Snapshots::every`).
const SNAPSHOT_EVERY: &str = "WFHOST_TEST_ORDERS_SNAPSHOT_EVERY";
const THIS_TEST: &str = "durable::crashes::order_sagas_call_each_host_function_once_per_key";

/// The application: recovers what the store holds, starts orders 0..ORDERS (idempotently), and
/// prints their results as one JSON line.
fn application(store: &Path, log: &Path, phase: &str, snapshot_every: u64) -> Value {
    let snapshots = Snapshots::every(snapshot_every);
    // On PostgreSQL the crashed host's lease must run out before its workflows are claimed.
    let builder = Host::builder()
        .snapshots(snapshots)
        .lease(std::time::Duration::from_millis(300));
    let host = host_on(order_functions(builder, log, phase), store);
    host.recover().unwrap();
    let starts = (0..ORDERS)
        .map(|n| (format!("order-{n}"), "order_saga", json!(n)))
        .chain([(
            "tree".to_string(),
            "order_tree",
            json!([ORDERS, TREE_ORDERS]),
        )]);
    let runs: Vec<_> = starts
        .map(|(id, entry, input)| loop {
            match host.start(&id, "probe", entry, json(input.clone())) {
                Ok(run) => break run,
                // Owned by the crashed host until its lease runs out; then claimed here.
                Err(error) if error.kind() == wfhost::ErrorKind::Unavailable => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    host.claim(usize::MAX).unwrap();
                }
                Err(error) => panic!("{id}: {error}"),
            }
        })
        .collect();
    let results: Vec<Value> = runs
        .into_iter()
        .map(|run| {
            run.wait_timeout(PATIENCE)
                .expect("the saga ends")
                .expect("the saga succeeds")
                .decode()
                .unwrap()
        })
        .collect();
    host.shutdown(std::time::Duration::from_secs(5));
    Value::Array(results)
}

fn expected() -> Value {
    let tree = (ORDERS..ORDERS + TREE_ORDERS).map(saga_result).collect();
    Value::Array(
        (0..ORDERS)
            .map(saga_result)
            .chain([Value::Array(tree)])
            .collect(),
    )
}

/// The log's calls: key → phases it ran in, in order. Every call made under one key carried
/// the same function and input (what an idempotency key promises the service it reaches).
fn calls(log: &Path) -> BTreeMap<String, Vec<String>> {
    let mut calls: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut made: BTreeMap<String, String> = BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let mut words = line.splitn(3, ' ');
        let (phase, key) = (words.next().unwrap(), words.next().unwrap());
        let call = words.next().unwrap_or_default();
        let first = made
            .entry(key.to_string())
            .or_insert_with(|| call.to_string());
        assert_eq!(first, call, "key {key} was called with two inputs");
        calls
            .entry(key.to_string())
            .or_default()
            .push(phase.to_string());
    }
    calls
}

/// The keys of the host calls whose answers the store's journal holds.
fn journaled_answers(store: &Path) -> BTreeSet<String> {
    let mut store = Location::from(store).open_existing().unwrap();
    let mut keys = BTreeSet::new();
    for workflow in store.workflows(false).unwrap() {
        let mut is_call: HashMap<Tag, bool> = HashMap::new();
        for step in store.steps(workflow.start.num, 0).unwrap() {
            let record = StepRecord::decode(&step.record).unwrap();
            for event in &record.events {
                if event.kind == EventKind::YieldComplete && is_call.get(&event.tag) == Some(&true)
                {
                    keys.insert(format!("{}#{}", workflow.start.id, event.tag.0));
                }
            }
            for y in &record.output.yields {
                // Calls of the application's functions (not the host's own: a failed call asks
                // the host's retry policy, `wfhost.retry-policy`, which has no effects).
                let is_function = matches!(&y.command, Yielded::Call(call)
                    if !call.name.starts_with(wfhost::contract::builtin::RESERVED_PREFIX));
                is_call.insert(y.tag, is_function);
            }
        }
    }
    keys
}

/// Runs the application in a copy of this test binary.
fn application_process(
    store: &Path,
    log: &Path,
    phase: &str,
    crash_after: Option<u64>,
    snapshot_every: u64,
) -> (bool, Value) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", THIS_TEST, "--nocapture", "--test-threads", "1"])
        .env(STORE, store)
        .env(LOG, log)
        .env(PHASE, phase)
        .env(SNAPSHOT_EVERY, snapshot_every.to_string())
        .env_remove("WFHOST_CRASH_AFTER_COMMITS");
    if let Some(n) = crash_after {
        command.env("WFHOST_CRASH_AFTER_COMMITS", n.to_string());
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result = stdout
        .lines()
        .find_map(|line| line.split_once("RESULT ").map(|(_, result)| result))
        .map(|line| serde_json::from_str(line).unwrap())
        .unwrap_or(Value::Null);
    if crash_after.is_none() && !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        eprintln!("{stdout}");
    }
    (output.status.success(), result)
}

/// Run plainly, it is the uninterrupted run; in the copy the crash test starts, the application.
#[test]
fn order_sagas_call_each_host_function_once_per_key() {
    if let Some(store) = std::env::var_os(STORE) {
        let log = std::env::var_os(LOG).unwrap();
        let phase = std::env::var(PHASE).unwrap();
        let every = std::env::var(SNAPSHOT_EVERY).unwrap().parse().unwrap();
        let result = application(Path::new(&store), Path::new(&log), &phase, every);
        println!("RESULT {result}");
        return;
    }
    let dir = tempdir("orders");
    let (store, log) = (dir.join("wf.db"), dir.join("calls.log"));
    assert_eq!(application(&store, &log, "run", 1_000), expected());
    let calls = calls(&log);
    let total = total_calls();
    assert_eq!(calls.len(), total, "{calls:?}");
    assert!(calls.values().all(|phases| phases.len() == 1), "{calls:?}");
    assert_eq!(journaled_answers(&store).len(), total);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_application_killed_after_any_commit_makes_each_journaled_call_once() {
    let dir = tempdir("order-crashes");
    let crashed = sweep(&dir, 1.., |n| dir.join(format!("{n}.db")));
    // Every commit of the run is a crash point; how many commits it takes depends on how group
    // commit batches steps under load (29 to 38 here, fewer as the journal gets faster). This
    // checks that the sweep covered a run's worth of them, not a count of commits.
    assert!(crashed >= 20, "only {crashed} crash points were reached");
    let _ = std::fs::remove_dir_all(dir);
}

/// The same on PostgreSQL, at every other crash point: a fresh database for each.
#[test]
fn an_application_on_postgres_killed_after_any_commit_makes_each_journaled_call_once() {
    let dir = tempdir("order-crashes-postgres");
    let server = Postgres::shared();
    let crashed = sweep(&dir, (1..).step_by(2), |n| {
        server.database(&format!("crash{n}")).into()
    });
    assert!(crashed >= 8, "only {crashed} crash points were reached");
    let _ = std::fs::remove_dir_all(dir);
}

/// Crashes the application after commit `n` for each `n` of `points` (up to 300) until a run
/// finishes without reaching it, on the store `store_for(n)`, and checks each restart: the
/// crash points reached.
fn sweep(
    dir: &Path,
    points: impl Iterator<Item = u64>,
    mut store_for: impl FnMut(u64) -> std::path::PathBuf,
) -> usize {
    let total = total_calls();
    let mut crashed = 0;
    let mut repeated = 0;
    for n in points.take_while(|n| *n <= 300) {
        let (store, log) = (store_for(n), dir.join(format!("{n}.log")));
        // At odd points a snapshot after every step: the restart starts from snapshots.
        let every = if n % 2 == 1 { 1 } else { 1_000 };
        let (finished, result) = application_process(&store, &log, "crashed", Some(n), every);
        if finished {
            assert_eq!(result, expected(), "a run of fewer than {n} commits");
            break;
        }
        crashed += 1;
        let answered = journaled_answers(&store);
        let (finished, result) = application_process(&store, &log, "resumed", None, every);
        assert!(finished, "crash after commit {n}: the restart failed");
        assert_eq!(result, expected(), "crash after commit {n}");
        let calls = calls(&log);
        assert_eq!(calls.len(), total, "crash after commit {n}: {calls:?}");
        for (key, phases) in &calls {
            let again = phases.iter().filter(|p| *p == "resumed").count();
            if answered.contains(key) {
                assert_eq!(
                    again, 0,
                    "crash after commit {n}: {key} ran again: {phases:?}"
                );
            }
            // At most once before the crash and once after it.
            assert!(
                phases.len() <= 2,
                "crash after commit {n}: {key}: {phases:?}"
            );
            if phases.len() == 2 {
                repeated += 1;
            }
        }
        let _ = std::fs::remove_file(&store);
    }
    eprintln!(
        "{crashed} crash points, {repeated} calls made again (their answers were not on disk)"
    );
    crashed
}
