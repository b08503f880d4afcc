//! `Server`: the loop `wfhost serve` runs, for an application's own hosts. It runs what clients
//! start, leaves a workflow whose module it does not load for a host that does (never running it
//! without its module's grants), and stops when asked, giving its work back.

use std::time::Duration;

use serde_json::json;
use wfhost::{Client, Host, Payload, SyncMode, WorkflowState};
use wfhost_server::Server;
use wfhost_test_programs::postgres::Postgres;
use wfhost_test_programs::{PROBE, TINY};

use super::common::PATIENCE;

#[test]
fn a_server_runs_what_clients_start_and_leaves_what_it_does_not_load() {
    let url = Postgres::shared().database("server_loop");
    let client = Client::open(url.as_str());
    let probe = std::fs::read(PROBE).unwrap();
    let tiny = std::fs::read(TINY).unwrap();
    let five = Payload::to_json(&json!(5)).unwrap();
    let none = Payload::to_json(&json!(0)).unwrap();
    let started = client
        .start(Some("echoed"), &probe, "probe", "echo", &five)
        .unwrap();
    assert!(started.new);
    client
        .start(Some("tallied"), &tiny, "tiny", "tally", &none)
        .unwrap();
    // Other bytes under the name the host loads its module with: the name gives them nothing.
    client
        .start(Some("impostor"), &tiny, "probe", "tally", &none)
        .unwrap();
    // The same start again starts nothing.
    let again = client
        .start(Some("echoed"), &probe, "probe", "echo", &five)
        .unwrap();
    assert!(!again.new);
    let server = Server::new().poll(Duration::from_millis(20));
    let stopper = server.stopper();
    let store = url.clone();
    let serving = std::thread::spawn(move || {
        let mut built = 0;
        let served = server.run(|| {
            built += 1;
            let host = Host::builder()
                .workers(1)
                .store(store.as_str(), SyncMode::Normal)
                .build()?;
            host.load_module("probe", PROBE)?;
            Ok(host)
        });
        (served, built)
    });
    let echoed = client.result("echoed", Some(PATIENCE)).unwrap();
    assert_eq!(echoed.state, WorkflowState::Completed);
    assert_eq!(echoed.result, Some(five.clone()));
    // Claimed with "echoed" (both were there before the server's first claim), and given back
    // without running: its module is not loaded in that host.
    let tallied = client.status("tallied").unwrap();
    assert_eq!(tallied.state, WorkflowState::Running);
    assert_eq!(tallied.steps, 0);
    stopper.stop();
    let (served, built) = serving.join().unwrap();
    served.unwrap();
    assert_eq!(built, 1);
    for id in ["tallied", "impostor"] {
        let waiting = client.status(id).unwrap();
        assert_eq!((waiting.state, waiting.steps), (WorkflowState::Running, 0));
        assert!(waiting.waiting_for_host, "{waiting:?}");
    }
    let host = Host::builder()
        .workers(1)
        .store(url.as_str(), SyncMode::Normal)
        .build()
        .unwrap();
    host.load_module("tiny", TINY).unwrap();
    let runs = host.recover().unwrap();
    // A host that loads those bytes runs both (the impostor under the name it was started
    // with: its grants are those of the bytes "tiny" was loaded with here).
    let mut ids: Vec<&str> = runs.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["impostor", "tallied"]);
    for (_, run) in runs {
        assert_eq!(
            run.wait().unwrap(),
            Payload::to_json(&json!([0, 0])).unwrap()
        );
    }
    host.shutdown(Duration::from_secs(1));
}
