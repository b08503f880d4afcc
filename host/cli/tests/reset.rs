//! `wfhost reset`, through a real `wfhost serve --http` and on a store no server holds: a failed
//! workflow runs again as run 2 of its id, the run before kept as `<id>/run-1`; fixed code that
//! replays the steps kept finishes it with the new code's result, and code that does not is
//! refused with the step named; a workflow still running is refused. On SQLite and PostgreSQL.

mod common;

use std::path::Path;

use common::http::{put_probe, start_request, HttpServer};
use common::{text, wait_until, wfhost, PATIENCE};
use serde_json::json;
use wfhost_test_programs::postgres::Postgres;

/// `wfhost reset` with `args`: its exit code, stdout and stderr.
fn reset(args: &[&str]) -> (Option<i32>, String, String) {
    let output = wfhost().arg("reset").args(args).output().unwrap();
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

fn send(api: &wfhost_client::Client, id: &str, n: u64) {
    api.send(id, &serde_json::value::to_raw_value(&json!(n)).unwrap())
        .unwrap();
}

#[test]
fn a_reset_through_a_server_runs_a_new_run_and_keeps_the_one_before() {
    let dir = common::tempdir("reset", "server");
    let v3 = dir.join("v3.wasm");
    std::fs::write(&v3, wfhost_test_programs::probe_version(3)).unwrap();
    let sqlite = dir.join("wf.db");
    for store in [
        sqlite.to_str().unwrap().to_string(),
        Postgres::shared().database("reset_server"),
    ] {
        reset_through(&dir, &store, &v3);
    }
}

fn reset_through(dir: &Path, store: &str, v3: &Path) {
    let mut server = HttpServer::start(dir, store, &[]);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request("broken", &module, "fail", json!("boom")))
        .unwrap();
    assert_eq!(
        api.result("broken", Some(PATIENCE)).unwrap().status,
        "failed"
    );
    let (code, out, err) = reset(&["--server", server.url(), "broken"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.starts_with("broken reset: run 2 keeps 0 step(s) of the run before (now broken/run-1)"),
        "{out}"
    );
    // It fails again (its code is the same), as run 2; the run before is kept.
    let now = api.result("broken", Some(PATIENCE)).unwrap();
    assert_eq!((now.status.as_str(), now.run), ("failed", 2));
    assert_eq!(api.status("broken/run-1").unwrap().run, 1);

    // Version 1 of `versioned` got 5 and 6 and completed.
    api.start(&start_request(
        "versioned",
        &module,
        "versioned",
        json!(null),
    ))
    .unwrap();
    for (n, steps) in [(5, 2), (6, 3)] {
        wait_until("a number taken", || {
            api.status("versioned").unwrap().steps >= steps - 1
        });
        send(&api, "versioned", n);
    }
    let done = api.result("versioned", Some(PATIENCE)).unwrap();
    assert_eq!(done.result.unwrap().get(), "\"v1 11\"");
    // Version 3 naps where version 1 took its second number: refused at step 2.
    let v3 = v3.to_str().unwrap();
    let (code, out, err) = reset(&[
        "--server",
        server.url(),
        "versioned",
        "--to-step",
        "2",
        "--module",
        v3,
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("at step 2"), "{err}");
    // Kept to step 1, it replays: the new run takes the two numbers again, with version 3.
    let (code, out, err) = reset(&[
        "--server",
        server.url(),
        "versioned",
        "--to-step",
        "1",
        "--module",
        v3,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("2 message(s) it took after step 1 sent to the new run again"),
        "{out}"
    );
    let done = api.result("versioned", Some(PATIENCE)).unwrap();
    assert_eq!(done.result.unwrap().get(), "\"v3 11\"");

    // Running: refused, and nothing changed.
    api.start(&start_request("waiting", &module, "collect", json!(1)))
        .unwrap();
    let (code, out, err) = reset(&["--server", server.url(), "waiting"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("has not finished"), "{err}");
    assert_eq!(api.status("waiting").unwrap().run, 1);
    server.kill();
}

#[test]
fn a_reset_on_a_store_no_server_holds_waits_for_a_host() {
    let dir = common::tempdir("reset", "store");
    let store = dir.join("wf.db");
    let store = store.to_str().unwrap();
    let mut server = HttpServer::start(&dir, store, &[]);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request("later", &module, "fail", json!("boom")))
        .unwrap();
    assert_eq!(
        api.result("later", Some(PATIENCE)).unwrap().status,
        "failed"
    );
    server.kill();
    let (code, out, err) = reset(&["--store", store, "later"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("it runs once a host recovers the store"),
        "{out}"
    );
    // The next server runs it: it fails again, as run 2.
    let mut server = HttpServer::start(&dir, store, &[]);
    let api = server.client();
    let now = api.result("later", Some(PATIENCE)).unwrap();
    assert_eq!((now.status.as_str(), now.run), ("failed", 2));
    server.kill();
}
