//! New code for running workflows (`Host::upgrade`): a module whose code replays a workflow's
//! journal switches it, between two steps, and the workflow finishes with the new code's
//! result; one that does not is refused with the step named and the workflow untouched;
//! `ctx.patched` takes the new branch in new executions and the old one in histories recorded
//! before it; a workflow recovered dormant after a restart is upgraded too.

use std::time::{Duration, Instant};

use serde_json::json as value;
use wfhost::{Client, ErrorKind, Grants, Host, Payload, Run};

use super::common::{host_on, json, tempdir, PATIENCE};

/// The probe module as version `v` of its `versioned` code (see the probe).
fn version(v: u8) -> Vec<u8> {
    wfhost_test_programs::probe_version(v)
}

fn sha256(bytes: &[u8]) -> String {
    wfhost::ModuleInfo::inspect(bytes).unwrap().sha256
}

/// Waits until workflow `id` has journaled `steps` steps.
fn wait_steps(client: &Client, id: &str, steps: u64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = client.status(id).unwrap().steps;
        if now == steps {
            return;
        }
        assert!(now < steps, "{id} took {now} steps, more than {steps}");
        assert!(Instant::now() < deadline, "{id} never took step {steps}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn send(host: &Host, run: &Run, n: u64) {
    host.send(run.pid(), Payload::to_json(&n).unwrap()).unwrap();
}

fn result(run: &Run) -> String {
    run.wait_timeout(PATIENCE)
        .expect("the workflow ends")
        .unwrap()
        .decode()
        .unwrap()
}

#[test]
fn an_upgrade_switches_only_a_workflow_whose_journal_replays_the_same() {
    let dir = tempdir("upgrade");
    let store = dir.join("wf.db");
    let (v1, v2, v3) = (version(1), version(2), version(3));
    let host = host_on(Host::builder(), &store);
    let client = Client::serving(&host, Grants::default()).unwrap();
    let start = |id: &str| {
        host.start(id, "probe", "versioned", json(value!(null)))
            .unwrap()
    };
    // `fresh` waits for its first number; `mid` and `broken` got theirs and wait for the second.
    let fresh = start("fresh");
    let mid = start("mid");
    let broken = start("broken");
    send(&host, &mid, 5);
    send(&host, &broken, 5);
    wait_steps(&client, "fresh", 1);
    wait_steps(&client, "mid", 2);
    wait_steps(&client, "broken", 2);

    // Version 3 naps where version 1 received: refused at step 2, nothing changed.
    let error = host.upgrade("broken", &v3).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Conflict, "{error}");
    assert!(error.message().contains("at step 2"), "{error}");
    assert!(error.message().contains("was not upgraded"), "{error}");
    let status = client.status("broken").unwrap();
    assert_eq!(
        (status.module.as_str(), status.steps),
        (sha256(&v1).as_str(), 2)
    );

    // Version 2 replays both histories: `mid`'s passed the patch point under version 1.
    let upgraded = host.upgrade("fresh", &v2).unwrap();
    assert_eq!(
        (
            upgraded.from.as_str(),
            upgraded.to.as_str(),
            upgraded.steps,
            upgraded.already
        ),
        (sha256(&v1).as_str(), sha256(&v2).as_str(), 1, false)
    );
    assert_eq!(host.upgrade("mid", &v2).unwrap().steps, 2);
    assert!(host.upgrade("mid", &v2).unwrap().already);
    for id in ["fresh", "mid"] {
        assert_eq!(client.status(id).unwrap().module, sha256(&v2));
    }

    // `fresh` reaches the patch point under version 2: the new branch (it tells the host).
    send(&host, &fresh, 5);
    send(&host, &fresh, 6);
    assert_eq!(result(&fresh), "v2 patched 22");
    let outbox = client.outbox("fresh", None, 10, None).unwrap();
    assert_eq!(outbox.messages.len(), 1);
    // `mid` passed it under version 1: the old branch, with the new code.
    send(&host, &mid, 6);
    assert_eq!(result(&mid), "v2 unpatched 11");
    // `broken` still runs version 1.
    send(&host, &broken, 6);
    assert_eq!(result(&broken), "v1 11");

    // A timer set before the switch still fires after it: its yields stayed armed.
    let napper = host
        .start("napper", "probe", "nap_then_message", json(value!(300)))
        .unwrap();
    wait_steps(&client, "napper", 1);
    assert_eq!(host.upgrade("napper", &v2).unwrap().steps, 1);
    host.send(napper.pid(), Payload::to_json(&"woke").unwrap())
        .unwrap();
    assert_eq!(result(&napper), "woke after 300 ms");

    // An ended workflow has nothing to upgrade.
    let error = host.upgrade("mid", &v3).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_upgraded_workflow_recovers_with_its_new_module_and_a_dormant_one_upgrades() {
    let dir = tempdir("upgrade-restart");
    let store = dir.join("wf.db");
    let v2 = version(2);
    {
        let host = host_on(Host::builder(), &store);
        let client = Client::serving(&host, Grants::default()).unwrap();
        for id in ["switched", "dormant"] {
            let run = host
                .start(id, "probe", "versioned", json(value!(null)))
                .unwrap();
            send(&host, &run, 1);
            wait_steps(&client, id, 2);
        }
        assert_eq!(host.upgrade("switched", &v2).unwrap().steps, 2);
        // `patched` reaches the patch under version 2 before the restart: its journal records
        // that the step asked, and its replay after the restart takes the new branch again.
        let patched = host
            .start("patched", "probe", "versioned", json(value!(null)))
            .unwrap();
        wait_steps(&client, "patched", 1);
        assert_eq!(host.upgrade("patched", &v2).unwrap().steps, 1);
        send(&host, &patched, 1);
        wait_steps(&client, "patched", 3);
        host.shutdown(Duration::from_secs(5));
    }
    // After a restart: `switched` runs version 2 (the store's copy), `dormant` version 1 until
    // it is upgraded, dormant (recovered, not yet restored).
    let host = host_on(Host::builder(), &store);
    host.load_module_bytes("probe-v2", &v2).unwrap();
    let runs: std::collections::HashMap<String, Run> =
        host.recover().unwrap().into_iter().collect();
    assert_eq!(runs.len(), 3);
    let upgraded = host.upgrade("dormant", &v2).unwrap();
    assert_eq!((upgraded.steps, upgraded.already), (2, false));
    for (id, run) in &runs {
        send(&host, run, 2);
        let expected = if id == "patched" {
            "v2 patched 6"
        } else {
            "v2 unpatched 3"
        };
        assert_eq!(result(run), expected, "{id}");
    }
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}
