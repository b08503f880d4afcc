//! A host stopped and started again on the same store: timers keep their due time, starts are
//! idempotent, and a module that behaves differently is caught replaying the journal.

use std::time::{Duration, Instant};

use serde_json::json as value;
use wfhost::__testing::{Read as _, SqliteStore, StepRecord};
use wfhost::{ErrorKind, Host, Payload, WorkflowResult};
use wfhost_test_programs::TINY;

use super::common::{host_on, json, tempdir, PATIENCE};

/// The completions the journal of workflow `id` holds, in all.
fn completions(store: &std::path::Path, id: &str) -> usize {
    let mut store = SqliteStore::open_existing(store).unwrap();
    let workflow = store.workflow(id).unwrap().unwrap();
    store
        .steps(workflow.start.num, 0)
        .unwrap()
        .iter()
        .map(|step| {
            StepRecord::decode(&step.record)
                .unwrap()
                .events
                .iter()
                .filter(|e| e.kind == wfhost::contract::EventKind::YieldComplete)
                .count()
        })
        .sum()
}

/// A 400 ms nap, its host stopped at once: the next host fires it at its due time, once.
#[test]
fn a_timer_fires_once_at_its_due_time_after_a_restart() {
    let dir = tempdir("timer");
    let store = dir.join("wf.db");
    let started = Instant::now();
    {
        let host = host_on(Host::builder(), &store);
        host.start("nap", "probe", "nap", json(value!(400)))
            .unwrap();
        host.shutdown(Duration::from_secs(5));
        assert_eq!(host.result("nap").unwrap(), WorkflowResult::Running);
    }
    let host = host_on(Host::builder(), &store);
    let runs = host.recover().unwrap();
    assert_eq!(runs.len(), 1);
    let (id, run) = runs.into_iter().next().unwrap();
    assert_eq!(id, "nap");
    let result = run.wait_timeout(PATIENCE).expect("it ends").unwrap();
    assert_eq!(result.decode::<String>().unwrap(), "rested");
    // Not before its due time, counted from the first start.
    assert!(started.elapsed() >= Duration::from_millis(400));
    host.shutdown(Duration::from_secs(5));
    assert_eq!(completions(&store, "nap"), 1, "the timer fired once");
    let _ = std::fs::remove_dir_all(dir);
}

/// A start of an id that runs follows it; of one that ended, gives its stored result; of one
/// unfinished that this host did not recover, is refused with what to do. A start of an id that
/// exists with another entry point or input is a conflict that names what differs; JSON inputs
/// are compared as values.
#[test]
fn starting_an_id_again_is_idempotent() {
    let dir = tempdir("idempotent");
    let store = dir.join("wf.db");
    {
        let host = host_on(Host::builder(), &store);
        let first = host.start("w", "probe", "nap", json(value!(50))).unwrap();
        let second = host.start("w", "probe", "nap", json(value!(50))).unwrap();
        assert_eq!(first.pid(), second.pid());
        let a = first.wait_timeout(PATIENCE).unwrap().unwrap();
        let b = second.wait_timeout(PATIENCE).unwrap().unwrap();
        assert_eq!(a, b);
        let again = host
            .start("w", "probe", "nap", Payload::json_bytes(b" 50 ".to_vec()))
            .unwrap();
        assert_eq!(again.wait_timeout(PATIENCE).unwrap().unwrap(), a);
        let other = host
            .start("w", "probe", "echo", json(value!("other input")))
            .unwrap_err();
        assert_eq!(other.kind(), ErrorKind::Conflict);
        assert!(
            other.message().contains(
                "exists with another entry point (it runs 'nap', this start names 'echo') and \
                 another input"
            ),
            "{other}"
        );
        let other = host
            .start("w", "probe", "nap", json(value!(51)))
            .unwrap_err();
        assert_eq!(other.kind(), ErrorKind::Conflict);
        assert!(
            other.message().contains("exists with another input"),
            "{other}"
        );
        host.start("sleeper", "probe", "nap", json(value!(60_000)))
            .unwrap();
        host.shutdown(Duration::from_secs(5));
    }
    let host = host_on(Host::builder(), &store);
    let error = host
        .start("sleeper", "probe", "nap", json(value!(60_000)))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert!(error.message().contains("recover it first"), "{error}");
    let error = host.result("never-started").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnknownWorkflow);
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

/// `tiny`'s `tally` and the probe's, which naps after each number: the journal the first wrote
/// replays with the first, and the second is caught at the step where it naps.
#[test]
fn a_rebuilt_module_that_behaves_differently_fails_its_replay() {
    let dir = tempdir("replay");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    host.load_module("tiny", TINY).unwrap();
    let run = host
        .start("tally", "tiny", "tally", json(value!(3)))
        .unwrap();
    for n in [5u64, 6, 7] {
        host.send(run.pid(), Payload::to_json(&n).unwrap()).unwrap();
    }
    let result: (u32, u64) = run
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(result, (3, 18));
    let steps = SqliteStore::open_existing(&store)
        .unwrap()
        .workflow("tally")
        .unwrap()
        .unwrap()
        .steps;
    assert_eq!(host.replay("tally", "tiny").unwrap(), steps);
    let error = host.replay("tally", "probe").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Nondeterminism);
    let message = error.message();
    assert!(
        message.contains("workflow 'tally'")
            && message.contains("diverged from its journal at step 2"),
        "{message}"
    );
    assert!(
        message.contains("was nothing and is now sleep"),
        "{message}"
    );
    let error = host.replay("nope", "tiny").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnknownWorkflow);
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}
