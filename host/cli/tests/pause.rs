//! Pausing a running workflow, through a real `wfhost serve --http` and the `wfhost` command: a
//! paused workflow takes no step while messages and a due timer wait for it (the same host
//! meanwhile steps an unpaused twin), stays paused across `kill -9`, and once unpaused ends with
//! the result an unpaused run gives. On a store hosts share, a pause written through one host
//! holds the workflow another runs.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::http::{put_probe, start_request, HttpServer};
use common::{text, wait_until, wfhost, PATIENCE};
use serde_json::json;
use wfhost_test_programs::postgres::Postgres;

/// How long the workflows nap before they wait for a message.
const NAP_MS: u64 = 2_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The steps `id` has journaled.
fn steps(api: &wfhost_client::Client, id: &str) -> u64 {
    api.status(id).unwrap().steps
}

/// Starts `id` napping, and waits for its first step (which yields the nap's timer).
fn start_napper(api: &wfhost_client::Client, module: &str, id: &str) {
    api.start(&start_request(
        id,
        module,
        "nap_then_message",
        json!(NAP_MS),
    ))
    .unwrap();
    wait_until(&format!("{id}'s first step"), || steps(api, id) >= 1);
}

/// Waits until `id`'s nap is over by the clock, and `twin`, which napped as long from later,
/// has taken its timer (a step): the host has stepped what was due.
fn wait_past_nap(api: &wfhost_client::Client, id: &str, twin: &str) {
    let due = api.waits(id).unwrap().waits[0].fires_at.unwrap();
    wait_until("the paused workflow's timer is due", || now_ms() > due);
    wait_until("the twin took its timer", || steps(api, twin) >= 2);
}

fn pause_with_cli(server: &HttpServer, verb: &str, id: &str) -> String {
    let output = wfhost()
        .args([verb, id, "--server", server.url()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stderr)
}

#[test]
fn a_paused_workflow_waits_through_kill_9_and_ends_as_an_unpaused_one_would() {
    let dir = common::tempdir("pause", "kill");
    let sqlite = dir.join("wf.db");
    for store in [
        sqlite.to_str().unwrap().to_string(),
        Postgres::shared().database("pause_kill"),
    ] {
        paused_through_kill(&dir, &store);
    }
}

fn paused_through_kill(dir: &std::path::Path, store: &str) {
    let mut server = HttpServer::start(dir, store, &[]);
    let api = server.client();
    let module = put_probe(&api);
    // Unpaused, as a baseline.
    start_napper(&api, &module, "free");
    api.send(
        "free",
        &serde_json::value::to_raw_value(&json!("hello")).unwrap(),
    )
    .unwrap();
    let free = api.result("free", Some(PATIENCE)).unwrap();
    assert_eq!(
        free.result.as_ref().map(|r| r.get()),
        Some("\"hello after 2000 ms\"")
    );

    start_napper(&api, &module, "held");
    assert_eq!(
        pause_with_cli(&server, "pause", "held").trim(),
        "held paused"
    );
    assert_eq!(
        pause_with_cli(&server, "pause", "held").trim(),
        "held was paused already"
    );
    let status = api.status("held").unwrap();
    assert!(status.paused && status.status == "paused", "{status:?}");
    let shown = wfhost()
        .args(["status", "held", "--server", server.url()])
        .output()
        .unwrap();
    assert!(
        text(&shown.stdout).contains("status:   paused"),
        "{}",
        text(&shown.stdout)
    );
    // One word for it everywhere: the result's wait, the listings by status (CLI and API), the
    // counts.
    let waited = api
        .result("held", Some(std::time::Duration::from_millis(10)))
        .unwrap();
    assert_eq!(waited.status, "paused");
    let listed = wfhost()
        .args(["list", "--status", "paused", "--server", server.url()])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let rows: Vec<String> = text(&listed.stdout)
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(rows, ["held"], "{}", text(&listed.stdout));
    let page = api
        .list(&wfhost_client::wire::ListParams {
            status: Some("paused".into()),
            ..Default::default()
        })
        .unwrap();
    let ids: Vec<&str> = page.workflows.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["held"]);
    let running = api
        .list(&wfhost_client::wire::ListParams {
            status: Some("running".into()),
            ..Default::default()
        })
        .unwrap();
    assert!(running.workflows.iter().all(|w| w.id != "held"));
    let counts = api.counts(&Default::default()).unwrap();
    assert_eq!((counts.paused, counts.completed), (1, 1), "{counts:?}");
    // A message and a due timer wait for it; its twin, started after it, takes its timer.
    api.send(
        "held",
        &serde_json::value::to_raw_value(&json!("hello")).unwrap(),
    )
    .unwrap();
    start_napper(&api, &module, "twin");
    wait_past_nap(&api, "held", "twin");
    assert_eq!(steps(&api, "held"), 1, "a paused workflow took a step");
    assert_eq!(api.status("held").unwrap().unread_messages, 1);

    // Killed and started again, the host holds it still.
    server.kill();
    let server = HttpServer::start(dir, store, &[]);
    let api = server.client();
    api.send(
        "twin",
        &serde_json::value::to_raw_value(&json!("again")).unwrap(),
    )
    .unwrap();
    let twin = api.result("twin", Some(PATIENCE)).unwrap();
    assert_eq!(
        twin.result.as_ref().map(|r| r.get()),
        Some("\"again after 2000 ms\"")
    );
    let status = api.status("held").unwrap();
    assert!(status.paused && status.steps == 1, "{status:?}");

    // Unpaused, it takes what waited and ends as the unpaused run did.
    let answer = api.unpause("held").unwrap();
    assert_eq!((answer.pause.as_str(), answer.paused), ("done", false));
    let held = api.result("held", Some(PATIENCE)).unwrap();
    assert_eq!(
        held.result.as_ref().map(|r| r.get()),
        free.result.as_ref().map(|r| r.get())
    );
    assert!(!held.paused);
    // Nothing to pause once it ended; an unknown id is not found.
    let ended = api.pause("held").unwrap();
    assert_eq!(
        (ended.pause.as_str(), ended.status.as_str()),
        ("ended", "completed")
    );
    let unknown = api.pause("nobody").unwrap_err();
    assert_eq!(unknown.status(), Some(404), "{unknown}");
    // A cancel of a paused workflow is held as well, until its grace period (the default 10 s)
    // ends the workflow without another step.
    start_napper(&api, &module, "stuck");
    assert_eq!(api.pause("stuck").unwrap().pause, "done");
    api.cancel("stuck").unwrap();
    let stuck = api.result("stuck", Some(PATIENCE)).unwrap();
    assert!(stuck.is_finished(), "{stuck:?}");
    assert_eq!((stuck.steps, stuck.paused), (1, false), "{stuck:?}");
}

#[test]
fn a_pause_written_through_one_host_holds_the_workflow_another_runs() {
    let dir = common::tempdir("pause", "hosts");
    let store = Postgres::shared().database("pause_two_hosts");
    let a = HttpServer::start(&dir, &store, &["--lease", "10s"]);
    let b = HttpServer::start(&dir, &store, &["--lease", "10s"]);
    let (on_a, on_b) = (a.client(), b.client());
    let module = put_probe(&on_a);
    // Started on A, they run on A; B pauses one of them.
    start_napper(&on_a, &module, "held");
    let answer = on_b.pause("held").unwrap();
    assert_eq!((answer.pause.as_str(), answer.paused), ("done", true));
    assert!(on_a.status("held").unwrap().paused);
    on_b.send(
        "held",
        &serde_json::value::to_raw_value(&json!("hi")).unwrap(),
    )
    .unwrap();
    start_napper(&on_a, &module, "twin");
    wait_past_nap(&on_a, "held", "twin");
    // A learns of the pause when B writes it (and at every look for messages, each 50 ms
    // here), long before the timer is due.
    assert_eq!(steps(&on_a, "held"), 1, "a paused workflow took a step");
    let answer = on_b.unpause("held").unwrap();
    assert_eq!(answer.pause, "done");
    let held = on_a.result("held", Some(PATIENCE)).unwrap();
    assert_eq!(
        held.result.as_ref().map(|r| r.get()),
        Some("\"hi after 2000 ms\"")
    );
}
