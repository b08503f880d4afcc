//! A module lives as long as a workflow uses it: a workflow that waits while clients start a
//! hundred other modules through the server still spawns children of its own module when it
//! wakes, and an upgrade refused at the same moment as another one accepted to the same build
//! leaves that build loaded for the workflow that took it. Through a real `wfhost serve`.

mod common;

use std::path::Path;

use common::http::{put_probe, start_request, HttpServer};
use common::{wait_until, PATIENCE};
use serde_json::{json, Value};
use wfhost_test_programs::{probe_version, variant, TINY};

fn send(api: &wfhost_client::Client, id: &str, message: Value) {
    api.send(id, &serde_json::value::to_raw_value(&message).unwrap())
        .unwrap();
}

fn result(api: &wfhost_client::Client, id: &str) -> Value {
    let ended = api.result(id, Some(PATIENCE)).unwrap();
    assert_eq!(ended.status, "completed", "{id}: {ended:?}");
    serde_json::from_str(ended.result.unwrap().get()).unwrap()
}

fn wait_steps(api: &wfhost_client::Client, id: &str, steps: u64) {
    wait_until(&format!("{id} takes step {steps}"), || {
        api.status(id).unwrap().steps >= steps
    });
}

#[test]
fn a_waiting_workflow_keeps_its_module_while_a_hundred_others_come_and_go() {
    let dir = common::tempdir("module-life", "many");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let api = server.client();
    let probe = put_probe(&api);
    api.start(&start_request(
        "holder",
        &probe,
        "wait_then_chain",
        json!(null),
    ))
    .unwrap();
    wait_steps(&api, "holder", 1);
    let tiny = std::fs::read(TINY).unwrap();
    for n in 0..100 {
        let module = api.put_module(&variant(&tiny, n)).unwrap().0.hash;
        let id = format!("other-{n}");
        api.start(&start_request(&id, &module, "tally", json!(0)))
            .unwrap();
        assert_eq!(result(&api, &id), json!([0, 0]), "{id}");
    }
    // It wakes and spawns three children of its own module: 0 + 1 + 2.
    send(&api, "holder", json!(3));
    assert_eq!(result(&api, "holder"), json!(3));
    // A module no workflow holds any more was let go, and comes back for the next start.
    let module = api.put_module(&variant(&tiny, 0)).unwrap().0.hash;
    api.start(&start_request("again", &module, "tally", json!(0)))
        .unwrap();
    assert_eq!(result(&api, "again"), json!([0, 0]));
    let _ = std::fs::remove_dir_all(dir);
}

/// Writes version `v` of the probe to `dir`.
fn version(dir: &Path, v: u8) -> Vec<u8> {
    let bytes = probe_version(v);
    std::fs::write(dir.join(format!("v{v}.wasm")), &bytes).unwrap();
    bytes
}

#[test]
fn a_refused_upgrade_leaves_the_build_another_upgrade_switched_to() {
    let dir = common::tempdir("module-life", "upgrades");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let api = server.client();
    let v1 = put_probe(&api);
    let v3 = version(&dir, 3);
    for round in 0..6 {
        // `taker` runs code version 3 repeats; `refuser` got its first number under version 1,
        // which version 3 would have slept after.
        let taker = format!("taker-{round}");
        let refuser = format!("refuser-{round}");
        api.start(&start_request(&taker, &v1, "wait_then_chain", json!(null)))
            .unwrap();
        api.start(&start_request(&refuser, &v1, "versioned", json!(null)))
            .unwrap();
        send(&api, &refuser, json!(1));
        wait_steps(&api, &taker, 1);
        wait_steps(&api, &refuser, 2);
        // A fresh build each round, so that each round loads it anew: both requests at once.
        let to = variant(&v3, round);
        let hash = api.put_module(&to).unwrap().0.hash;
        let (accepted, refused) = std::thread::scope(|scope| {
            let refused = scope.spawn(|| server.client().upgrade(&refuser, &hash));
            let accepted = scope.spawn(|| server.client().upgrade(&taker, &hash));
            (accepted.join().unwrap(), refused.join().unwrap())
        });
        let accepted = accepted.unwrap();
        assert_eq!(accepted.to, hash, "{accepted:?}");
        let refused = refused.expect_err("version 3 does not repeat what version 1 did");
        assert!(refused.to_string().contains("step"), "{refused}");
        // The taker wakes on version 3 and spawns two children of it: 0 + 1.
        send(&api, &taker, json!(2));
        assert_eq!(result(&api, &taker), json!(1), "{taker}");
        send(&api, &refuser, json!(2));
        assert_eq!(result(&api, &refuser), json!("v1 3"), "{refuser}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
