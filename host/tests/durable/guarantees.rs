//! What a store guarantees an embedder: one host per SQLite file (however many try at once), no
//! start written that could not run, messages to the host kept, no message deleted unread, and a
//! reader beside the host that changes nothing.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::json as value;
use wfhost::__testing::{Read as _, SqliteStore};
use wfhost::{ErrorKind, Host, Payload, SyncMode, WorkflowResult};

use super::common::{host_on, json, module_cache, tempdir, PATIENCE};

/// Eight threads open one new file as its host at the same moment: exactly one holds it (and
/// created its tables), the others are refused with who holds it, and nobody sees a half-made
/// schema. Once the holder lets go, the next one opens it.
#[test]
fn hosts_opening_a_new_file_at_once_make_one_holder_and_one_schema() {
    let dir = tempdir("lock-race");
    let path = dir.join("new.db");
    let barrier = Arc::new(Barrier::new(8));
    let opened: Vec<_> = (0..8)
        .map(|_| {
            let (barrier, path) = (Arc::clone(&barrier), path.clone());
            std::thread::spawn(move || {
                barrier.wait();
                SqliteStore::open(&path, SyncMode::Full)
            })
        })
        .collect();
    let results: Vec<_> = opened.into_iter().map(|t| t.join().unwrap()).collect();
    let (held, refused): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.is_ok());
    assert_eq!(held.len(), 1);
    for refusal in &refused {
        let why = refusal.as_ref().unwrap_err().to_string();
        assert!(
            why.contains(&format!("held by another host (pid {}", std::process::id())),
            "{why}"
        );
    }
    let holder = SqliteStore::holder(&path).expect("one holds it");
    assert_eq!(holder.pid, Some(std::process::id()));
    // A reader beside the holder reads the schema the holder made.
    let mut reader = SqliteStore::open_existing(&path).unwrap();
    assert_eq!(reader.workflows(false).unwrap().len(), 0);
    drop(held);
    assert_eq!(SqliteStore::holder(&path), None);
    SqliteStore::open(&path, SyncMode::Full).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// A start whose input is over the payload limit, or that the entry point cannot take, writes
/// nothing: no workflow under its id, and the id stays free for a good start.
#[test]
fn a_start_that_could_not_run_writes_nothing() {
    let dir = tempdir("refused-starts");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    let big = Payload::json_bytes(format!("\"{}\"", "x".repeat(5 << 20)).into_bytes());
    let error = host.start("big", "probe", "echo", big).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Limit, "{error}");
    assert!(error.message().contains("payload limit"), "{error}");
    let error = host
        .start("typed", "probe", "nap", json(value!({ "id": "x" })))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    assert!(error.message().contains("cannot use its input"), "{error}");
    let mut reader = SqliteStore::open_existing(&store).unwrap();
    assert_eq!(reader.workflow("big").unwrap(), None);
    assert_eq!(reader.workflow("typed").unwrap(), None);
    assert_eq!(reader.workflows(false).unwrap().len(), 0);
    let run = host
        .start("typed", "probe", "nap", json(value!(1)))
        .unwrap();
    assert_eq!(
        run.wait_timeout(PATIENCE)
            .unwrap()
            .unwrap()
            .decode::<String>()
            .unwrap(),
        "rested"
    );
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

/// A message acknowledged to its sender stays in the store when its receiver ends without
/// reading it, counted as unread.
#[test]
fn a_message_the_workflow_never_read_stays_after_it_ends() {
    let dir = tempdir("unread");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    // It sleeps until cancelled, and never reads.
    let run = host
        .start("napper", "probe", "nap", json(value!(600_000)))
        .unwrap();
    host.send(run.pid(), json(value!("never read"))).unwrap();
    host.cancel(run.pid()).unwrap();
    assert_eq!(
        run.wait_timeout(PATIENCE).unwrap().unwrap_err().kind(),
        ErrorKind::Cancelled
    );
    host.shutdown(Duration::from_secs(5));
    let mut reader = SqliteStore::open_existing(&store).unwrap();
    let workflow = reader.workflow("napper").unwrap().unwrap();
    assert_eq!(workflow.state.name(), "failed");
    assert_eq!(workflow.unread, 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// Messages a durable workflow sends the host are kept in the store in the order sent, each
/// once, whether or not anyone reads them: with nobody reading, a send still succeeds.
#[test]
fn messages_to_the_host_are_kept_whoever_reads_them() {
    let dir = tempdir("outbox");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    let read = host
        .start("read", "probe", "report", json(value!(3)))
        .unwrap();
    let unread = host
        .start("unread", "probe", "report", json(value!(2)))
        .unwrap()
        .without_messages();
    let mut got = Vec::new();
    while let Some(message) = read.recv_message() {
        got.push(message.decode::<String>().unwrap());
    }
    assert_eq!(
        got,
        ["progress 0", "progress 1", "progress 2", "from a child"]
    );
    assert_eq!(read.wait().unwrap().decode::<u32>().unwrap(), 3);
    assert_eq!(unread.wait().unwrap().decode::<u32>().unwrap(), 2);
    host.shutdown(Duration::from_secs(5));
    let mut reader = SqliteStore::open_existing(&store).unwrap();
    for (id, expected) in [
        ("read", vec!["progress 0", "progress 1", "progress 2"]),
        ("unread", vec!["progress 0", "progress 1"]),
        ("read/4.0", vec!["from a child"]),
        ("unread/3.0", vec!["from a child"]),
    ] {
        let num = reader.workflow(id).unwrap().unwrap().start.num;
        let kept: Vec<String> = reader
            .host_messages(num, 0, usize::MAX)
            .unwrap()
            .iter()
            .map(|m| {
                postcard::from_bytes::<Payload>(&m.payload)
                    .unwrap()
                    .decode::<String>()
                    .unwrap()
            })
            .collect();
        assert_eq!(kept, expected, "{id}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A host that only reads a store runs beside the host that holds it: it replays journals and
/// reads results, and refuses to start or recover anything, saying why.
#[test]
fn a_reading_host_replays_beside_the_host_that_holds_the_store() {
    let dir = tempdir("read-store");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    host.start("t", "probe", "tally", json(value!(0)))
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap();
    let sleeper = host
        .start("s", "probe", "nap", json(value!(60_000)))
        .unwrap();
    let reader = Host::builder()
        .workers(1)
        .module_cache(module_cache())
        .read_store(&store)
        .build()
        .unwrap();
    reader
        .load_module("probe", wfhost_test_programs::PROBE)
        .unwrap();
    assert!(reader.replay("t", "probe").unwrap() > 0);
    assert!(matches!(
        reader.result("t").unwrap(),
        WorkflowResult::Done(_)
    ));
    assert_eq!(reader.result("s").unwrap(), WorkflowResult::Running);
    let refused = reader
        .start("new", "probe", "nap", json(value!(1)))
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Store);
    assert!(
        refused.message().contains("only reads the store"),
        "{refused}"
    );
    assert!(reader.recover().is_err());
    reader.shutdown(Duration::from_secs(5));
    // The holder goes on undisturbed.
    host.cancel(sleeper.pid()).unwrap();
    assert!(sleeper.wait_timeout(PATIENCE).is_some());
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

/// A host that stops cleanly leaves the whole store in its file: the write-ahead log is emptied
/// into it, so a copy of the file alone has everything.
#[test]
fn a_clean_stop_leaves_the_whole_store_in_its_file() {
    let dir = tempdir("checkpoint");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    for n in 0..20 {
        host.start(&format!("w-{n}"), "probe", "echo", json(value!(n)))
            .unwrap()
            .wait_timeout(PATIENCE)
            .unwrap()
            .unwrap();
    }
    host.shutdown(Duration::from_secs(5));
    let wal = dir.join("wf.db-wal");
    assert!(
        std::fs::metadata(&wal).map_or(true, |m| m.len() == 0),
        "the write-ahead log still holds {} bytes",
        std::fs::metadata(&wal).map_or(0, |m| m.len())
    );
    let copy = tempdir("checkpoint-copy").join("copy.db");
    std::fs::copy(&store, &copy).unwrap();
    let mut copied = SqliteStore::open_existing(&copy).unwrap();
    assert_eq!(copied.workflows(false).unwrap().len(), 20);
    let nineteen = copied.workflow("w-19").unwrap().unwrap();
    assert!(nineteen.steps > 0);
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(copy.parent().unwrap());
}

/// A workflow whose steps never leave the journal (500 readings of the clock in a row, a step
/// each) goes on before its steps are on disk, up to 32 of them at a time: every reading it
/// returns is the one its journal holds, in the order it took them, and a host that stops
/// cleanly leaves all of it in the store.
#[test]
fn steps_that_go_on_before_their_commit_are_journaled_as_the_workflow_saw_them() {
    use wfhost::__testing::StepRecord;
    use wfhost::contract::EventKind;
    const READINGS: u64 = 500;
    let dir = tempdir("ahead");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    let seen: Vec<u64> = host
        .start("clock", "probe", "ticks", json(value!(READINGS)))
        .unwrap()
        .wait_timeout(PATIENCE)
        .expect("it ends")
        .unwrap()
        .decode()
        .unwrap();
    host.shutdown(Duration::from_secs(5));
    let mut reader = SqliteStore::open_existing(&store).unwrap();
    let workflow = reader.workflow("clock").unwrap().expect("in the store");
    let steps = reader.steps(workflow.start.num, 0).unwrap();
    // One step for each reading, and the one that asked for the first.
    assert_eq!(steps.len() as u64, READINGS + 1);
    let journaled: Vec<u64> = steps
        .iter()
        .flat_map(|step| StepRecord::decode(&step.record).unwrap().events)
        .filter(|event| event.kind == EventKind::YieldComplete)
        .map(|event| event.data.decode::<u64>().unwrap())
        .collect();
    assert_eq!(seen.len() as u64, READINGS);
    assert_eq!(journaled, seen);
    let _ = std::fs::remove_dir_all(dir);
}

/// A durable workflow whose module may cancel only its own children asks to cancel a neighbour:
/// refused, and nothing of it journaled, so the neighbour is not cancelled when a host recovers
/// both after a restart either. (Top-level durable workflows used to run unconfined, and the
/// neighbour was cancelled at once; with them confined, it was still written to the store, where
/// the restart delivered it.)
#[test]
fn a_refused_cancel_of_a_neighbour_is_not_delivered_after_a_restart() {
    let dir = tempdir("confined-cancel");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    let victim = host
        .start("victim", "probe", "wait_message", json(value!(600_000)))
        .unwrap();
    let refused: serde_json::Value = host
        .start(
            "attacker",
            "probe",
            "cancel_unknown",
            json(value!(victim.pid().0)),
        )
        .unwrap()
        .wait_timeout(PATIENCE)
        .expect("it ends")
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(refused["error"], "not-allowed", "{refused}");
    host.shutdown(Duration::from_secs(5));
    let host = host_on(Host::builder(), &store);
    let recovered = host.recover().unwrap();
    assert_eq!(recovered.len(), 1);
    let (id, victim) = &recovered[0];
    assert_eq!(id, "victim");
    host.send(victim.pid(), json(value!("still here"))).unwrap();
    let answer: Option<String> = victim
        .wait_timeout(PATIENCE)
        .expect("it ends")
        .expect("not cancelled")
        .decode()
        .unwrap();
    assert_eq!(answer.as_deref(), Some("still here"));
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}
