//! A durable host on PostgreSQL whose database server stops mid-run, cleanly or as a crash, and
//! comes back: the host reconnects and goes on, and nothing it acknowledged is lost.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use wfhost::__testing::{Open as _, State};
use wfhost::store::Location;
use wfhost::Host;
use wfhost_test_programs::postgres::Postgres;

use super::common::{host_on, json, order_functions, saga_result, tempdir, PATIENCE};

const ORDERS: u32 = 20;

fn restarted_mid_run(mode: &str) {
    let dir = tempdir(&format!("postgres-restart-{mode}"));
    let server = Postgres::start();
    let url = server.database("restart");
    let host = host_on(
        order_functions(Host::builder(), &dir.join("calls.log"), "run"),
        Path::new(&url),
    );
    let mut runs: Vec<_> = (0..ORDERS)
        .map(|n| {
            host.start(&format!("order-{n}"), "probe", "order_saga", json(json!(n)))
                .unwrap()
        })
        .collect();
    server.stop(mode);
    // Started while the server is down: it returns once the start is on disk, after the server
    // is back.
    let late = std::thread::scope(|scope| {
        let late = scope.spawn(|| {
            host.start("order-late", "probe", "order_saga", json(json!(ORDERS)))
                .unwrap()
        });
        server.start_again();
        late.join().unwrap()
    });
    runs.push(late);
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
    let expected: Vec<Value> = (0..=ORDERS).map(saga_result).collect();
    assert_eq!(results, expected);
    host.shutdown(Duration::from_secs(5));
    // Every workflow is in the store once, done.
    let mut store = Location::parse(&url).open_existing().unwrap();
    let workflows = store.workflows(false).unwrap();
    assert_eq!(workflows.len(), ORDERS as usize + 1);
    assert!(workflows.iter().all(|w| w.state == State::Done));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_database_stopped_mid_run_is_reconnected_to_and_nothing_is_lost() {
    restarted_mid_run("fast");
}

#[test]
fn a_database_crashed_mid_run_is_reconnected_to_and_nothing_is_lost() {
    restarted_mid_run("immediate");
}

#[test]
fn a_database_that_is_not_there_is_refused_clearly() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres:secret@127.0.0.1:{port}/nowhere");
    let error = Host::builder()
        .store(url.as_str(), wfhost::SyncMode::Full)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("could not connect to the PostgreSQL store"),
        "{error}"
    );
    assert!(error.contains("is the server running"), "{error}");
    assert!(!error.contains("secret"), "the password is shown: {error}");
    let Err(error) = Location::parse("postgres://db.example:port/wf").open_existing() else {
        panic!("a bad URL opens")
    };
    let error = error.message().to_string();
    assert!(error.contains("is not a PostgreSQL URL"), "{error}");
}

#[test]
fn a_unix_socket_url_reaches_the_server() {
    let server = Postgres::shared();
    let database = server.database("socket");
    let name = database.rsplit('/').next().unwrap();
    let socket_dir: String = server.dir().display().to_string().replace('/', "%2F");
    let url = format!("postgres://postgres@{socket_dir}:{}/{name}", server.port());
    let mut store = Location::parse(&url).open(wfhost::SyncMode::Full).unwrap();
    assert_eq!(store.high_water().unwrap(), (0, 0));
}

#[test]
fn a_nul_in_what_a_guest_says_cannot_fail_a_postgres_commit() {
    use wfhost::__testing::{Ending, NewWorkflow, Op};
    let url = Postgres::shared().database("nul");
    let mut store = Location::parse(&url).open(wfhost::SyncMode::Full).unwrap();
    store
        .commit(&[Op::Start(NewWorkflow {
            num: 1,
            id: "w1".into(),
            parent: None,
            module: "m".into(),
            module_name: "m".into(),
            entry: "main\0".into(),
            input: Vec::new(),
            started: 0,
            trace: None,
        })])
        .unwrap();
    store
        .commit(&[Op::End {
            num: 1,
            ending: Ending::Failed {
                kind: "failed".into(),
                message: "bad\0news".into(),
            },
            at: 1,
        }])
        .unwrap();
    let workflow = store.workflow("w1").unwrap().unwrap();
    assert_eq!(workflow.start.entry, "main\u{FFFD}");
    assert_eq!(
        workflow.ending,
        Some(Ending::Failed {
            kind: "failed".into(),
            message: "bad\u{FFFD}news".into(),
        })
    );
}

#[test]
fn top_level_ids_cannot_take_a_childs() {
    assert!(wfhost::bad_id("order-1/3.0").is_some());
    assert!(wfhost::bad_id("").is_some());
    assert!(wfhost::bad_id("a\nb").is_some());
    assert!(wfhost::bad_id(".").is_some());
    assert_eq!(wfhost::bad_id(".x"), None);
    assert_eq!(wfhost::bad_id("order-1"), None);
}

/// A host of two workers on the store at `url`, with the probe module.
fn probe_host(url: &str) -> Host {
    let host = Host::builder()
        .workers(2)
        .store(url, wfhost::SyncMode::Full)
        .build()
        .unwrap();
    host.load_module("probe", wfhost_test_programs::PROBE)
        .unwrap();
    host
}

/// Two hosts on one database start the same 40 ids at once, from 8 threads each (their starts
/// sharing their writers' commits): every start succeeds or says the other host runs it, each id
/// is one workflow, run once, by one of them, with the result its input gives.
#[test]
fn hosts_starting_the_same_ids_at_once_start_each_once() {
    const IDS: u64 = 40;
    let url = Postgres::shared().database("start_race");
    let hosts = [probe_host(&url), probe_host(&url)];
    let client = &wfhost::Client::open(url.as_str());
    let results: Vec<(String, Value)> = std::thread::scope(|scope| {
        let mut threads = Vec::new();
        for host in &hosts {
            for thread in 0..8u64 {
                threads.push(scope.spawn(move || {
                    let mut results = Vec::new();
                    for n in (0..IDS).map(|i| (i + thread * 5) % IDS) {
                        let id = format!("race-{n}");
                        let result = loop {
                            match host.start(&id, "probe", "echo", json(json!(n))) {
                                Ok(run) => {
                                    break run
                                        .wait_timeout(PATIENCE)
                                        .unwrap_or_else(|| panic!("{id} did not end"))
                                        .unwrap_or_else(|e| panic!("{id} failed: {e}"))
                                }
                                // The other host's start won, and it runs there (its result
                                // is read from the store), or another thread's start of it
                                // here is under way (it says to ask again).
                                Err(e) if e.kind() == wfhost::ErrorKind::Unavailable => {
                                    if let Ok(status) = client.result(&id, Some(PATIENCE)) {
                                        break status
                                            .result
                                            .unwrap_or_else(|| panic!("{id} has no result"));
                                    }
                                }
                                Err(e) => panic!("{id}: {e}"),
                            }
                        };
                        results.push((id, result.decode::<Value>().unwrap()));
                    }
                    results
                }));
            }
        }
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    assert_eq!(results.len(), (IDS * 16) as usize);
    for (id, value) in &results {
        let n: u64 = id.trim_start_matches("race-").parse().unwrap();
        assert_eq!(value, &json!(n), "{id}");
    }
    let mut store = Location::parse(&url).open_existing().unwrap();
    let all = store.workflows(false).unwrap();
    assert_eq!(all.len(), IDS as usize);
    assert!(all.iter().all(|w| w.state == State::Done), "{all:?}");
    for host in hosts {
        assert!(host.store_failure().is_none());
        host.shutdown(Duration::from_secs(10));
    }
}

/// On a shared store a host's start reads nothing first: a start of an id the store has is
/// written as one that gives way, and then answered from the store as a read first answered it.
/// Running, it is followed; finished, its stored result is given and it does not run again; with
/// another entry point or input, or an input its entry point refuses, it is a conflict.
#[test]
fn starting_an_id_again_on_a_shared_store_is_idempotent() {
    let url = Postgres::shared().database("idempotent");
    let host = probe_host(&url);
    let first = host.start("w", "probe", "nap", json(json!(50))).unwrap();
    let second = host.start("w", "probe", "nap", json(json!(50))).unwrap();
    assert_eq!(first.pid(), second.pid());
    let a = first.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(second.wait_timeout(PATIENCE).unwrap().unwrap(), a);
    let mut store = Location::parse(&url).open_existing().unwrap();
    let before = store.workflow("w").unwrap().unwrap();
    assert_eq!(before.state, State::Done);
    let again = host
        .start(
            "w",
            "probe",
            "nap",
            wfhost::Payload::json_bytes(b" 50 ".to_vec()),
        )
        .unwrap();
    assert_eq!(again.pid(), first.pid());
    assert_eq!(again.wait_timeout(PATIENCE).unwrap().unwrap(), a);
    for (entry, input, differs) in [
        ("echo", json!("other"), "another entry point"),
        ("nap", json!(51), "another input"),
        // Refused by `nap` (not a number): the id's workflow answers, as it did.
        ("nap", json!("x"), "another input"),
    ] {
        let error = host.start("w", "probe", entry, json(input)).unwrap_err();
        assert_eq!(error.kind(), wfhost::ErrorKind::Conflict, "{error}");
        assert!(error.message().contains(differs), "{error}");
    }
    // Nothing ran again, and nothing more was written.
    let after = store.workflow("w").unwrap().unwrap();
    assert_eq!(
        (after.steps, after.finished),
        (before.steps, before.finished)
    );
    assert_eq!(store.workflows(false).unwrap().len(), 1);
    assert!(host.store_failure().is_none());
    host.shutdown(Duration::from_secs(10));
}
