//! The HTTP API of two `wfhost serve --http` hosts on one PostgreSQL store: a request to the
//! host that does not own the workflow is answered from the store, and its messages and
//! cancels reach the owner.

mod common;

use std::time::Duration;

use common::http::{put_probe, start_request, HttpServer};
use serde_json::{json, Value};
use wfhost_test_programs::postgres::Postgres;

fn json_of(raw: &serde_json::value::RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap()
}

#[test]
fn either_host_answers_for_every_workflow() {
    let dir = common::tempdir("http-hosts", "two");
    let store = Postgres::shared().database("http_two_hosts");
    // Leases long enough that a late renewal on a busy machine gives nothing away.
    let a = HttpServer::start(&dir, &store, &["--lease", "10s"]);
    let b = HttpServer::start(&dir, &store, &["--lease", "10s"]);
    let (on_a, on_b) = (a.client(), b.client());

    // A module stored through one host is there for the other: both keep it in the store.
    let module = put_probe(&on_a);
    let (stored, new) = on_b.put_module(&common::http::probe()).unwrap();
    assert!(!new);
    assert_eq!(stored.hash, module);

    // Started on A, it runs on A.
    let started = on_a
        .start(&start_request("pg-1", &module, "collect", json!(2)))
        .unwrap();
    assert!(started.new);
    let hosts = on_b.hosts().unwrap().hosts;
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    assert_eq!(hosts.iter().filter(|h| h.this).count(), 1);
    let b_number = hosts.iter().find(|h| h.this).unwrap().id;
    let a_number = hosts.iter().find(|h| !h.this).unwrap().id;
    let status = on_b.status("pg-1").unwrap();
    assert_eq!(status.status, "running");
    let host = status.host.unwrap();
    assert!(
        host.starts_with(&format!("{a_number} (")),
        "{host} (A is {a_number})"
    );
    assert!(!status.waiting_for_host);

    // Its messages sent through B reach it on A; B waits for its end and hears of it.
    on_b.send("pg-1", &serde_json::value::to_raw_value(&1).unwrap())
        .unwrap();
    on_a.send("pg-1", &serde_json::value::to_raw_value(&2).unwrap())
        .unwrap();
    let done = on_b.result("pg-1", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed");
    let mut collected: Vec<u64> =
        serde_json::from_value(json_of(done.result.as_ref().unwrap())).unwrap();
    collected.sort_unstable();
    assert_eq!(collected, vec![1, 2]);

    // The same start through B: the same workflow, nothing new.
    let again = on_b
        .start(&start_request("pg-1", &module, "collect", json!(2)))
        .unwrap();
    assert!(!again.new);
    assert_eq!(again.workflow.status, "completed");

    // A cancel through B of a workflow A runs; before it, the same start of it through B.
    let waiting = start_request("pg-2", &module, "wait_message", json!(600_000));
    on_a.start(&waiting).unwrap();
    let same = on_b.start(&waiting).unwrap();
    assert!(!same.new);
    assert_eq!(same.workflow.status, "running");
    let other = on_b
        .start(&start_request("pg-2", &module, "wait_message", json!(1)))
        .unwrap_err();
    assert_eq!(other.status(), Some(409));
    assert_eq!(on_b.cancel("pg-2").unwrap().cancel, "asked");
    let cancelled = on_b.result("pg-2", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(cancelled.status, "cancelled");

    // Started on B, it runs on B; A lists both.
    on_b.start(&start_request("pg-3", &module, "echo", json!("b")))
        .unwrap();
    let done = on_a.result("pg-3", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(json_of(done.result.as_ref().unwrap()), json!("b"));
    let listed = on_a.list(&Default::default()).unwrap();
    let ids: Vec<&str> = listed.workflows.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["pg-1", "pg-2", "pg-3"]);
    let history = on_a
        .history("pg-3", &wfhost_client::wire::HistoryParams::default())
        .unwrap();
    assert_eq!(history.steps.len() as u64, done.steps);
    assert_ne!(a_number, b_number);
}
