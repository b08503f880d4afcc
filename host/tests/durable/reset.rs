//! Resets (`Host::reset`): a failed workflow runs again from one of its steps as a new run of
//! its id. The steps kept are replayed, not done again; what came after them is done again
//! with keys of the new run's; the run before is kept whole under `<id>/run-<n>`; messages it
//! took after the steps kept are sent again; a restart recovers the new run with its keys; and
//! what cannot be reset is refused with why. On SQLite and on PostgreSQL.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{json as value, Value};
use wfhost::contract::{CommandError, ErrorKind as CallError};
use wfhost::{Client, ErrorKind, Grants, Host, HostBuilder, Payload, WorkflowState};
use wfhost_test_programs::postgres::Postgres;

use super::common::{host_on, json, tempdir, PATIENCE};

/// The calls the activity functions got: (function, idempotency key).
type Calls = Arc<Mutex<Vec<(String, String)>>>;

/// `inventory.reserve`, `payments.charge` and `shipping.ship`, noting each call; `ship` fails
/// while `broken` is set.
fn activities(builder: HostBuilder, calls: &Calls, broken: &Arc<AtomicBool>) -> HostBuilder {
    let mut builder = builder;
    for name in ["inventory.reserve", "payments.charge", "shipping.ship"] {
        let (calls, broken) = (Arc::clone(calls), Arc::clone(broken));
        builder = builder.function_raw(name, move |info, _input| {
            let key = info.idempotency_key.clone().unwrap_or_default();
            calls.lock().push((name.to_string(), key));
            if name == "shipping.ship" && broken.load(Ordering::SeqCst) {
                return Err(CommandError::new(CallError::Failed, "no courier"));
            }
            Ok(Payload::to_json(&format!("{name} done")).unwrap())
        });
    }
    builder
}

/// How many calls `name` got, and the keys it got them with.
fn keys(calls: &Calls, name: &str) -> Vec<String> {
    calls
        .lock()
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, key)| key.clone())
        .collect()
}

/// Waits until workflow `id` has finished; its status.
fn finished(client: &Client, id: &str) -> wfhost::WorkflowStatus {
    let status = client.result(id, Some(PATIENCE)).unwrap();
    assert!(status.is_finished(), "{id} did not finish: {status:?}");
    status
}

/// Waits until workflow `id` has journaled `steps` steps.
fn wait_steps(client: &Client, id: &str, steps: u64) {
    let deadline = Instant::now() + PATIENCE;
    while client.status(id).unwrap().steps < steps {
        assert!(Instant::now() < deadline, "{id} never took step {steps}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn a_failed_saga_is_reset_and_runs_again_from_the_step_before_the_failure(store: &Path) {
    let calls = Calls::default();
    let broken = Arc::new(AtomicBool::new(true));
    let host = host_on(activities(Host::builder(), &calls, &broken), store);
    let client = Client::serving(&host, Grants::default()).unwrap();
    host.start("order-1", "probe", "activity_saga", json(value!(1)))
        .unwrap();
    let failed = finished(&client, "order-1");
    assert_eq!(failed.state, WorkflowState::Failed);
    assert_eq!(failed.run, 1);

    // The courier is back: the reset runs `ship` again, as run 2.
    broken.store(false, Ordering::SeqCst);
    let reset = host.reset("order-1", None, None).unwrap();
    assert_eq!(
        (
            reset.run,
            reset.steps,
            reset.previous.as_str(),
            reset.messages
        ),
        (2, 3, "order-1/run-1", 0)
    );
    let done = finished(&client, "order-1");
    assert_eq!(done.state, WorkflowState::Completed, "{done:?}");
    assert_eq!(done.run, 2);
    assert_eq!(
        done.result.unwrap().decode::<Value>().unwrap(),
        value!([
            "inventory.reserve done",
            "payments.charge done",
            "shipping.ship done"
        ])
    );
    // Reserve and charge were kept (replayed); ship ran again, with the new run's key.
    assert_eq!(keys(&calls, "inventory.reserve").len(), 1);
    assert_eq!(keys(&calls, "payments.charge").len(), 1);
    let ships = keys(&calls, "shipping.ship");
    assert_eq!(ships.len(), 2, "{ships:?}");
    assert!(ships[0].starts_with("order-1#"), "{ships:?}");
    let tag = ships[0].strip_prefix("order-1#").unwrap();
    assert_eq!(ships[1], format!("order-1/run-2#{tag}"));

    // The run before is kept whole under its run's id.
    let before = client.status("order-1/run-1").unwrap();
    assert_eq!(
        (before.state, before.steps, before.run),
        (WorkflowState::Failed, failed.steps, 1)
    );
    let runs = client.runs("order-1").unwrap();
    let ids: Vec<(&str, u64)> = runs.iter().map(|r| (r.id.as_str(), r.run)).collect();
    assert_eq!(ids, [("order-1/run-1", 1), ("order-1", 2)]);

    // A completed run resets too, further back: everything after step 1 is done again.
    let again = host.reset("order-1", Some(1), None).unwrap();
    assert_eq!((again.run, again.steps), (3, 1));
    assert_eq!(finished(&client, "order-1").state, WorkflowState::Completed);
    assert_eq!(keys(&calls, "inventory.reserve").len(), 2);
    assert_eq!(keys(&calls, "payments.charge").len(), 2);
    assert_eq!(keys(&calls, "shipping.ship").len(), 3);
    assert!(keys(&calls, "payments.charge")[1].starts_with("order-1/run-3#"));
    assert_eq!(client.runs("order-1").unwrap().len(), 3);
    assert_eq!(
        client.status("order-1/run-2").unwrap().state,
        WorkflowState::Completed
    );

    // Refused: past the last step that may be kept, a running workflow, an unknown one.
    let error = host.reset("order-1", Some(99), None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    let most = client.status("order-1").unwrap().steps - 1;
    assert!(
        error.message().contains(&format!("step {most} at most")),
        "{error}"
    );
    host.start("waiting", "probe", "collect", json(value!(1)))
        .unwrap();
    let error = host.reset("waiting", None, None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Conflict, "{error}");
    assert!(error.message().contains("has not finished"), "{error}");
    let error = host.reset("nobody", None, None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnknownWorkflow, "{error}");
    host.shutdown(Duration::from_secs(5));
}

#[test]
fn a_failed_saga_is_reset_on_sqlite() {
    let dir = tempdir("reset-saga");
    a_failed_saga_is_reset_and_runs_again_from_the_step_before_the_failure(&dir.join("wf.db"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_failed_saga_is_reset_on_postgres() {
    let server = Postgres::start();
    let url = server.database("reset");
    a_failed_saga_is_reset_and_runs_again_from_the_step_before_the_failure(Path::new(&url));
}

#[test]
fn messages_taken_after_the_steps_kept_are_sent_again_and_a_cancel_is_not_kept() {
    let dir = tempdir("reset-messages");
    let host = host_on(Host::builder(), &dir.join("wf.db"));
    let client = Client::serving(&host, Grants::default()).unwrap();
    let run = host
        .start("inbox", "probe", "collect", json(value!(3)))
        .unwrap();
    wait_steps(&client, "inbox", 1);
    for (n, steps) in [(10, 2), (20, 3)] {
        host.send(run.pid(), Payload::to_json(&n).unwrap()).unwrap();
        wait_steps(&client, "inbox", steps);
    }
    client.cancel("inbox").unwrap();
    assert_eq!(finished(&client, "inbox").state, WorkflowState::Cancelled);

    // By default, back to the step before the one that took the cancel: both messages kept.
    let error = host.reset("inbox", Some(4), None).unwrap_err();
    assert!(error.message().contains("took the cancel"), "{error}");
    // Back to step 1: the two messages it took after it are sent to the new run again.
    let reset = host.reset("inbox", Some(1), None).unwrap();
    assert_eq!((reset.steps, reset.messages), (1, 2));
    wait_steps(&client, "inbox", 3);
    client
        .send("inbox", &Payload::to_json(&30).unwrap())
        .unwrap();
    let done = finished(&client, "inbox");
    assert_eq!(done.state, WorkflowState::Completed, "{done:?}");
    assert_eq!(
        done.result.unwrap().decode::<Vec<u32>>().unwrap(),
        [10, 20, 30]
    );

    // One it never read goes to the new run after those it took, in the order they came.
    // Paused while both come, so that both are taken in before it ends.
    let run = host
        .start("one", "probe", "collect", json(value!(1)))
        .unwrap();
    wait_steps(&client, "one", 1);
    client.pause("one").unwrap();
    for n in [1, 2] {
        host.send(run.pid(), Payload::to_json(&n).unwrap()).unwrap();
    }
    client.unpause("one").unwrap();
    let done = finished(&client, "one");
    assert_eq!(done.result.unwrap().decode::<Vec<u32>>().unwrap(), [1]);
    assert_eq!(done.unread, 1);
    let reset = host.reset("one", Some(0), None).unwrap();
    assert_eq!((reset.steps, reset.messages), (0, 2));
    let done = finished(&client, "one");
    assert_eq!(done.result.unwrap().decode::<Vec<u32>>().unwrap(), [1]);
    assert_eq!(done.unread, 1);
    assert_eq!(client.status("one/run-1").unwrap().unread, 0);
    // A run a reset ended is not reset itself.
    let error = host.reset("one/run-1", None, None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    assert!(error.message().contains("reset 'one'"), "{error}");
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_reset_written_without_a_host_is_recovered_with_the_new_runs_keys() {
    let dir = tempdir("reset-recover");
    let store = dir.join("wf.db");
    let calls = Calls::default();
    let broken = Arc::new(AtomicBool::new(true));
    {
        let host = host_on(activities(Host::builder(), &calls, &broken), &store);
        let client = Client::serving(&host, Grants::default()).unwrap();
        host.start("order-2", "probe", "activity_saga", json(value!(2)))
            .unwrap();
        assert_eq!(finished(&client, "order-2").state, WorkflowState::Failed);
        // Written and left for whoever recovers the store (what `wfhost reset --store` does).
        let reset = host.reset_unstarted("order-2", None, None).unwrap();
        assert_eq!(reset.run, 2);
        assert_eq!(
            client.status("order-2").unwrap().state,
            WorkflowState::Running
        );
        host.shutdown(Duration::from_secs(5));
    }
    broken.store(false, Ordering::SeqCst);
    let host = host_on(activities(Host::builder(), &calls, &broken), &store);
    let client = Client::serving(&host, Grants::default()).unwrap();
    assert_eq!(host.recover().unwrap().len(), 1);
    let done = finished(&client, "order-2");
    assert_eq!(
        done.state,
        WorkflowState::Completed,
        "{done:?} {:?}",
        calls.lock()
    );
    let ships = keys(&calls, "shipping.ship");
    assert_eq!(ships.len(), 2, "{ships:?}");
    assert!(ships[1].starts_with("order-2/run-2#"), "{ships:?}");
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn steps_that_spawned_a_child_are_not_kept() {
    let dir = tempdir("reset-children");
    let host = host_on(Host::builder(), &dir.join("wf.db"));
    let client = Client::serving(&host, Grants::default()).unwrap();
    // Spawns `fail` as a child, joins it, and reports its failure: completed.
    host.start(
        "parent",
        "probe",
        "supervise",
        json(value!([null, "fail", "boom"])),
    )
    .unwrap();
    let done = finished(&client, "parent");
    assert_eq!(done.state, WorkflowState::Completed);
    // Step 1 spawned the child: only a reset to step 0 (start over) may be done.
    let error = host.reset("parent", Some(1), None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    assert!(error.message().contains("--to-step 0"), "{error}");
    let reset = host.reset("parent", Some(0), None).unwrap();
    assert_eq!(reset.steps, 0);
    assert_eq!(finished(&client, "parent").state, WorkflowState::Completed);
    // The child of the run before kept its place under that run; the new run's child has the
    // id the first had.
    let children: Vec<String> = client
        .list(&wfhost::ListQuery::new().parent(client.status("parent/run-1").unwrap().number))
        .unwrap()
        .items
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(children.len(), 1);
    assert!(children[0].starts_with("parent/run-1/"), "{children:?}");
    let child = children[0].replacen("parent/run-1/", "parent/", 1);
    assert_eq!(client.status(&child).unwrap().state, WorkflowState::Failed);
    // A child itself is not reset.
    let error = host.reset(&child, None, None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_reset_with_a_new_module_must_replay_the_steps_kept() {
    let dir = tempdir("reset-module");
    let host = host_on(Host::builder(), &dir.join("wf.db"));
    let client = Client::serving(&host, Grants::default()).unwrap();
    let run = host
        .start("versioned", "probe", "versioned", json(value!(null)))
        .unwrap();
    wait_steps(&client, "versioned", 1);
    for (n, steps) in [(5, 2), (6, 3)] {
        host.send(run.pid(), Payload::to_json(&n).unwrap()).unwrap();
        wait_steps(&client, "versioned", steps);
    }
    let done = finished(&client, "versioned");
    assert_eq!(done.result.unwrap().decode::<String>().unwrap(), "v1 11");
    // Version 3 naps where version 1 received its second number (step 2): refused there.
    let v3 = wfhost_test_programs::probe_version(3);
    let error = host.reset("versioned", Some(2), Some(&v3)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Conflict, "{error}");
    assert!(error.message().contains("at step 2"), "{error}");
    assert_eq!(client.status("versioned").unwrap().run, 1);
    // Its first step it replays: the new run runs version 3, the two numbers sent again.
    let reset = host.reset("versioned", Some(1), Some(&v3)).unwrap();
    assert_eq!((reset.run, reset.steps, reset.messages), (2, 1, 2));
    assert_eq!(
        reset.module,
        wfhost::ModuleInfo::inspect(&v3).unwrap().sha256
    );
    let done = finished(&client, "versioned");
    assert_eq!(done.result.unwrap().decode::<String>().unwrap(), "v3 11");
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}
