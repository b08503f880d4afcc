//! A store that cannot be written (full) or whose file lost its tail: clear errors, no panic, and
//! nothing acknowledged lost.

use std::time::Duration;

use serde_json::json as value;
use wfhost::__testing::{Read as _, SqliteStore};
use wfhost::{ErrorKind, Host, SyncMode, WorkflowResult};

use super::common::{host_on, json, tempdir, PATIENCE};

/// A store capped at the size it has: starts go through until a commit finds no room, then every
/// start is refused with the reason; every start that was acknowledged ends "rested" once a host
/// with room resumes what the full one stopped.
#[test]
fn a_full_store_refuses_new_work_and_loses_nothing_acknowledged() {
    let dir = tempdir("full");
    let store = dir.join("wf.db");
    // The first host keeps the module in the store.
    host_on(Host::builder(), &store).shutdown(Duration::from_secs(5));
    let host = host_on(Host::builder().store_limit(1), &store);
    let mut acknowledged = Vec::new();
    let refusal = loop {
        assert!(acknowledged.len() < 100_000, "the store never filled");
        let id = format!("w-{}", acknowledged.len());
        match host.start(&id, "probe", "nap", json(value!(1))) {
            Ok(run) => acknowledged.push((id, run)),
            Err(error) => break error,
        }
    };
    assert_eq!(refusal.kind(), ErrorKind::Store, "{refusal}");
    assert!(refusal.message().contains("is full"), "{refusal}");
    assert!(!acknowledged.is_empty(), "the free pages took no start");
    // Refused from now on, with the same reason.
    let again = host
        .start("late", "probe", "nap", json(value!(1)))
        .unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Store);
    // Each acknowledged workflow either ended or was stopped where its journal ends.
    for (id, run) in &acknowledged {
        match run
            .wait_timeout(PATIENCE)
            .expect("each run ends or is stopped")
        {
            Ok(result) => assert_eq!(result.decode::<String>().unwrap(), "rested", "{id}"),
            Err(error) => assert!(
                error.message().contains("resumes when a host is started"),
                "{id}: {error}"
            ),
        }
    }
    host.shutdown(Duration::from_secs(5));
    // With room again, everything acknowledged ends.
    let host = host_on(Host::builder(), &store);
    for (_, run) in host.recover().unwrap() {
        run.wait_timeout(PATIENCE).expect("it ends").unwrap();
    }
    for (id, _) in &acknowledged {
        match host.result(id).unwrap() {
            WorkflowResult::Done(result) => {
                assert_eq!(result.decode::<String>().unwrap(), "rested", "{id}")
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    assert_eq!(
        host.result("late").unwrap_err().kind(),
        ErrorKind::UnknownWorkflow
    );
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

/// The image of a store whose host died mid-write: its write-ahead log lost its last bytes.
/// SQLite drops the torn commit; the host recovers what the log holds whole.
#[test]
fn a_torn_log_tail_loses_only_the_torn_commit() {
    let dir = tempdir("torn");
    let (store, copy) = (dir.join("wf.db"), dir.join("copy.db"));
    let host = host_on(Host::builder(), &store);
    for n in 0..5 {
        host.start(&format!("s-{n}"), "probe", "nap", json(value!(60_000)))
            .unwrap();
    }
    // Every start is on disk and, once each sleeper took its first step, nothing more is
    // written: a copy then is what a crash would leave.
    let steps = |path: &std::path::Path| -> u64 {
        let mut store = SqliteStore::open_existing(path).unwrap();
        store
            .workflows(false)
            .unwrap()
            .iter()
            .map(|w| w.steps)
            .sum()
    };
    let deadline = std::time::Instant::now() + PATIENCE;
    while steps(&store) < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sleepers never stepped"
        );
        std::thread::yield_now();
    }
    std::fs::copy(&store, &copy).unwrap();
    let wal = std::fs::read(dir.join("wf.db-wal")).unwrap();
    assert!(wal.len() > 100, "the log holds the starts");
    std::fs::write(dir.join("copy.db-wal"), &wal[..wal.len() - 100]).unwrap();
    host.shutdown(Duration::from_secs(5));
    // The torn commit held a sleeper's first step: it is gone, and that sleeper takes it again.
    assert!(steps(&copy) < 5);
    let host = host_on(Host::builder(), &copy);
    let recovered = host.recover().unwrap();
    let ids: Vec<&str> = recovered.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["s-0", "s-1", "s-2", "s-3", "s-4"]);
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

/// A store file cut in half: refused as truncated, never a panic.
#[test]
fn a_truncated_store_file_is_refused_clearly() {
    let dir = tempdir("truncated");
    let store = dir.join("wf.db");
    let host = host_on(Host::builder(), &store);
    for n in 0..20 {
        let run = host
            .start(
                &format!("e-{n}"),
                "probe",
                "echo",
                json(value!("x".repeat(2000))),
            )
            .unwrap();
        run.wait_timeout(PATIENCE).unwrap().unwrap();
    }
    host.shutdown(Duration::from_secs(5));
    drop(host);
    let len = std::fs::metadata(&store).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&store)
        .unwrap();
    file.set_len(len / 2).unwrap();
    drop(file);
    let outcome = Host::builder()
        .workers(1)
        .store(&store, SyncMode::Full)
        .build()
        .and_then(|host| {
            let recovered = host.recover().map(|runs| runs.len());
            host.shutdown(Duration::from_secs(5));
            recovered
        });
    let error = outcome.expect_err("a cut store is not read as whole");
    assert_eq!(error.kind(), ErrorKind::Store, "{error}");
    assert!(error.message().contains("is truncated"), "{error}");
    let _ = std::fs::remove_dir_all(dir);
}
