//! Readers beside a host lose nothing: a `wfhost serve` on a SQLite file, stopped cleanly and
//! started again, with every read-only command run beside it again and again while it takes
//! starts and messages; then `kill -9` and a restart find every start, message and result it
//! acknowledged. (A reader that closed its connection used to find the host's SQLite locks
//! dropped by the host's own reads of the file, checkpoint, and delete the write-ahead log the
//! host still wrote to.)

mod common;

use common::http::{put_probe, start_request, HttpServer};
use common::{text, wfhost};

use std::time::Duration;

use serde_json::{json, Value};

fn tempdir(name: &str) -> std::path::PathBuf {
    common::tempdir("readers", name)
}

/// Stops `server` as a service manager does (SIGTERM) and waits for it to end.
fn stop_cleanly(server: &mut HttpServer) {
    let pid = server.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let ended = server.child.wait().unwrap();
    assert!(ended.success(), "{ended}: {}", server.log());
}

/// `wfhost ARGS`, which must succeed.
fn read(args: &[&str]) {
    let output = wfhost().args(args).output().unwrap();
    assert!(
        output.status.success(),
        "wfhost {args:?}: {}",
        text(&output.stderr)
    );
}

fn result_of(client: &wfhost_client::Client, id: &str) -> Value {
    let workflow = client.result(id, Some(Duration::from_secs(60))).unwrap();
    assert_eq!(workflow.status, "completed", "{id}: {workflow:?}");
    serde_json::from_str(workflow.result.unwrap().get()).unwrap()
}

#[test]
fn readers_beside_a_restarted_host_lose_nothing_it_acknowledged() {
    let dir = tempdir("restarted");
    let store = dir.join("wf.db");
    let store = store.to_str().unwrap();
    let mut first = HttpServer::start(&dir, store, &[]);
    let hash = put_probe(&first.client());
    first
        .client()
        .start(&start_request("before", &hash, "echo", json!("first host")))
        .unwrap();
    assert_eq!(result_of(&first.client(), "before"), json!("first host"));
    stop_cleanly(&mut first);

    let mut second = HttpServer::start(&dir, store, &[]);
    let client = second.client();
    let copies = dir.join("copies");
    std::fs::create_dir_all(&copies).unwrap();
    const ROUNDS: usize = 12;
    for round in 0..ROUNDS {
        // Every read-only command, beside the host, each round.
        let copy = copies.join(format!("copy-{round}.db"));
        let readers: [Vec<&str>; 6] = [
            vec!["list", "--store", store],
            vec!["status", "before", "--store", store],
            vec!["result", "before", "--store", store],
            vec!["history", "before", "--store", store],
            vec!["replay", "before", "--store", store],
            vec!["backup", "--store", store, copy.to_str().unwrap()],
        ];
        for args in &readers {
            read(args);
        }
        // A workflow that ends (its result read back), and one that waits with a message.
        let done = format!("done-{round}");
        client
            .start(&start_request(&done, &hash, "collect", json!(2)))
            .unwrap();
        for n in [round * 10, round * 10 + 1] {
            let message = serde_json::value::to_raw_value(&n).unwrap();
            client.send(&done, &message).unwrap();
        }
        assert_eq!(
            result_of(&client, &done),
            json!([round * 10, round * 10 + 1])
        );
        let open = format!("open-{round}");
        client
            .start(&start_request(&open, &hash, "collect", json!(2)))
            .unwrap();
        let message = serde_json::value::to_raw_value(&round).unwrap();
        client.send(&open, &message).unwrap();
        // Once more after the writes: a reader that closes now finds the host's locks held.
        read(&["list", "--store", store]);
    }
    second.kill();

    let third = HttpServer::start(&dir, store, &[]);
    let client = third.client();
    assert_eq!(result_of(&client, "before"), json!("first host"));
    for round in 0..ROUNDS {
        assert_eq!(
            result_of(&client, &format!("done-{round}")),
            json!([round * 10, round * 10 + 1]),
            "round {round}"
        );
        // Its first message was acknowledged before the kill: the second completes it.
        let open = format!("open-{round}");
        let message = serde_json::value::to_raw_value(&1000).unwrap();
        client.send(&open, &message).unwrap();
        assert_eq!(result_of(&client, &open), json!([round, 1000]), "{open}");
    }
    // Every copy opens as a whole store of its own.
    for round in [0, ROUNDS - 1] {
        let copy = copies.join(format!("copy-{round}.db"));
        read(&["result", "before", "--store", copy.to_str().unwrap()]);
    }
    let _ = std::fs::remove_dir_all(dir);
}
