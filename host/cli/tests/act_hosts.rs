//! Activity workers and two `wfhost serve` hosts on one PostgreSQL store: a worker polling
//! either host takes the tasks of both, each once; and the tasks of a host that is killed are
//! offered again, with the same keys, once the other host takes its workflows over.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::http::{put_probe, start_request, HttpServer};
use common::tasks::{ok, result, tasks_of};
use serde_json::json;
use wfhost_test_programs::postgres::Postgres;

const ARGS: [&str; 6] = [
    "--worker-function",
    "payments.charge",
    "--lease",
    "3s",
    "--task-timeout",
    "2s",
];

#[test]
fn a_worker_polling_one_host_serves_both_and_each_task_is_taken_once() {
    let dir = common::tempdir("act-hosts", "both");
    let store = Postgres::shared().database("act_two_hosts");
    let a = HttpServer::start(&dir, &store, &ARGS);
    let b = HttpServer::start(&dir, &store, &ARGS);
    let (on_a, on_b) = (a.client(), b.client());
    let module = put_probe(&on_a);
    // Started through each host: each runs its own.
    for n in 0..6u64 {
        let api = if n % 2 == 0 { &on_a } else { &on_b };
        api.start(&start_request(
            &format!("w{n}"),
            &module,
            "call",
            json!(["payments.charge", n]),
        ))
        .unwrap();
    }
    let hosts: std::collections::BTreeSet<String> = (0..6)
        .map(|n| {
            on_a.status(&format!("w{n}"))
                .unwrap()
                .host
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(hosts.len(), 2, "both hosts run workflows: {hosts:?}");

    // Two workers, one on each host, race for the six tasks: each is taken once.
    let charge = vec!["payments.charge".to_string()];
    let taken: Vec<(u64, String, String)> = std::thread::scope(|scope| {
        let workers: Vec<_> = [&on_a, &on_b]
            .into_iter()
            .map(|api| {
                let charge = &charge;
                scope.spawn(move || {
                    let mut taken = Vec::new();
                    while let Some(task) =
                        api.poll_task(charge, Duration::from_millis(1500)).unwrap()
                    {
                        let n = result(&task.input).as_u64().unwrap();
                        taken.push((n, task.task, task.idempotency_key.unwrap()));
                    }
                    taken
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let by_input: BTreeMap<u64, (String, String)> = taken
        .iter()
        .map(|(n, task, key)| (*n, (task.clone(), key.clone())))
        .collect();
    assert_eq!(taken.len(), 6, "each task taken once: {taken:?}");
    assert_eq!(by_input.len(), 6);
    for (n, (task, key)) in &by_input {
        assert!(key.starts_with(&format!("w{n}#")), "{key}");
        // Completed through the host that did not hand it out, half the time.
        let api = if n % 2 == 0 { &on_b } else { &on_a };
        api.complete_task(task, &ok(json!(n * 100))).unwrap();
        let again = api.complete_task(task, &ok(json!(0))).unwrap_err();
        assert_eq!(again.status(), Some(409), "{again}");
    }
    for n in 0..6u64 {
        let done = on_b
            .result(&format!("w{n}"), Some(Duration::from_secs(60)))
            .unwrap();
        assert_eq!(done.status, "completed", "{done:?}");
        assert_eq!(
            result(done.result.as_ref().unwrap()),
            json!({"ok": n * 100})
        );
    }
}

#[test]
fn the_tasks_of_a_killed_host_come_back_with_their_keys() {
    let dir = common::tempdir("act-hosts", "killed");
    let store = Postgres::shared().database("act_killed_host");
    let mut a = HttpServer::start(&dir, &store, &ARGS);
    let on_a = a.client();
    let module = put_probe(&on_a);
    on_a.start(&start_request(
        "k1",
        &module,
        "call",
        json!(["payments.charge", 1]),
    ))
    .unwrap();
    let charge = vec!["payments.charge".to_string()];
    let first = on_a
        .poll_task(&charge, Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    a.kill();

    let b = HttpServer::start(&dir, &store, &ARGS);
    let on_b = b.client();
    // B takes the workflow over once A's lease runs out, and calls again: the same key. (Until
    // the lease runs out A may look alive, and its task may be offered once more; a worker that
    // does it does it under the same key, and its answer goes nowhere.)
    let mut deliveries = 0;
    loop {
        let task = on_b.poll_task(&charge, Duration::from_secs(5)).unwrap();
        if let Some(task) = task {
            deliveries += 1;
            assert_eq!(task.idempotency_key, first.idempotency_key);
            on_b.complete_task(&task.task, &ok(json!("paid"))).unwrap();
        }
        let status = on_b.status("k1").unwrap();
        if status.status == "completed" {
            assert_eq!(
                result(status.result.as_ref().unwrap()),
                json!({"ok": "paid"})
            );
            break;
        }
        assert!(deliveries < 5, "{status:?}");
    }
    // The dead host's delivery is over.
    let late = on_b
        .complete_task(&first.task, &ok(json!("late")))
        .unwrap_err();
    assert_eq!(late.status(), Some(409), "{late}");
    assert!(on_b.poll_task(&charge, Duration::ZERO).unwrap().is_none());
}

/// Sends `signal` (`STOP`, `CONT`) to `server`.
fn signal(server: &HttpServer, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// A worker holds tasks while their host is stopped past its lease and another host takes the
/// workflows over: its completions, given before and after the takeover, are each applied once
/// (204 means the workflow has the outcome), the calls are not offered again with their attempts
/// counted from 1, and every workflow ends with the worker's first and only answer. (They were
/// answered 204 and thrown away with the stopped host's rows, and the calls offered again.)
#[test]
fn a_completion_reaches_the_workflow_whichever_host_runs_it_by_then() {
    let dir = common::tempdir("act-hosts", "stopped");
    let store = Postgres::shared().database("act_stopped_host");
    let args = [
        "--worker-function",
        "payments.charge",
        "--lease",
        "2s",
        "--task-timeout",
        "60s",
    ];
    let a = HttpServer::start(&dir, &store, &args);
    let on_a = a.client();
    let module = put_probe(&on_a);
    const CALLS: u64 = 10;
    for n in 0..CALLS {
        on_a.start(&start_request(
            &format!("s{n}"),
            &module,
            "call",
            json!(["payments.charge", n]),
        ))
        .unwrap();
    }
    let charge = vec!["payments.charge".to_string()];
    let mut held = BTreeMap::new();
    while held.len() < CALLS as usize {
        let task = on_a
            .poll_task(&charge, Duration::from_secs(30))
            .unwrap()
            .expect("a task");
        assert_eq!(task.attempt, 1);
        held.insert(result(&task.input).as_u64().unwrap(), task);
    }
    let a_name = on_a.status("s0").unwrap().host.unwrap();
    signal(&a, "STOP");
    let b = HttpServer::start(&dir, &store, &args);
    let on_b = b.client();
    // Half are completed while no host runs their workflows.
    for n in 0..CALLS / 2 {
        on_b.complete_task(&held[&n].task, &ok(json!(format!("paid {n}"))))
            .unwrap();
    }
    common::wait_until("the other host runs every workflow", || {
        (0..CALLS).all(|n| {
            let status = on_b.status(&format!("s{n}")).unwrap();
            status.status == "completed" || status.host.is_some_and(|h| h != a_name)
        })
    });
    // The rest once it does.
    for n in CALLS / 2..CALLS {
        on_b.complete_task(&held[&n].task, &ok(json!(format!("paid {n}"))))
            .unwrap();
    }
    for n in 0..CALLS {
        let ended = on_b
            .result(&format!("s{n}"), Some(Duration::from_secs(60)))
            .unwrap();
        assert_eq!(ended.status, "completed", "s{n}: {ended:?}");
        assert_eq!(
            result(ended.result.as_ref().unwrap()),
            json!({"ok": format!("paid {n}")})
        );
    }
    // Nothing is offered again, now or once the stopped host comes back.
    signal(&a, "CONT");
    assert!(on_b
        .poll_task(&charge, Duration::from_secs(3))
        .unwrap()
        .is_none());
    let rows = Postgres::shared().psql(&store, "SELECT count(*) FROM wfhost.tasks");
    assert_eq!(
        rows, "0",
        "every call's task went with the step that took it"
    );
}

#[test]
fn every_hosts_tasks_are_seen_and_one_given_back_goes_to_the_next_poll() {
    let dir = common::tempdir("act-hosts", "visible");
    let store = Postgres::shared().database("act_hosts_visible");
    let a = HttpServer::start(&dir, &store, &ARGS);
    let b = HttpServer::start(&dir, &store, &ARGS);
    let (on_a, on_b) = (a.client(), b.client());
    let module = put_probe(&on_a);
    on_a.start(&start_request(
        "v0",
        &module,
        "call",
        json!(["payments.charge", 0]),
    ))
    .unwrap();
    on_b.start(&start_request(
        "v1",
        &module,
        "call",
        json!(["payments.charge", 1]),
    ))
    .unwrap();
    let charge = |api: &wfhost_client::Client| tasks_of(api, "payments.charge");
    // Either host sees both hosts' tasks waiting.
    common::wait_until("both tasks wait", || charge(&on_b).waiting == 2);
    assert_eq!(charge(&on_a).waiting, 2);
    assert!(charge(&on_a).oldest_waiting_ms.is_some());

    // A task given back through one host goes to the next poll through the other, at once
    // (its deadline is 2 s away), with its key and its attempt counted on.
    let functions = vec!["payments.charge".to_string()];
    let first = on_b
        .poll_task(&functions, Duration::ZERO)
        .unwrap()
        .expect("a task");
    assert_eq!((charge(&on_a).waiting, charge(&on_a).in_flight), (1, 1));
    on_b.release_task(&first.task).unwrap();
    let again = on_b.release_task(&first.task).unwrap_err();
    assert_eq!(again.status(), Some(409), "{again}");
    let mut taken = Vec::new();
    while taken.len() < 2 {
        let task = on_a
            .poll_task(&functions, Duration::from_secs(30))
            .unwrap()
            .expect("a task");
        taken.push(task);
    }
    let second = taken
        .iter()
        .find(|t| t.idempotency_key == first.idempotency_key)
        .expect("the task given back");
    assert_eq!(second.attempt, first.attempt + 1);
    let late = on_a.complete_task(&first.task, &ok(json!(0))).unwrap_err();
    assert_eq!(late.status(), Some(409), "{late}");
    for task in &taken {
        on_a.complete_task(&task.task, &ok(result(&task.input)))
            .unwrap();
    }
    for id in ["v0", "v1"] {
        let done = on_b.result(id, Some(Duration::from_secs(60))).unwrap();
        assert_eq!(done.status, "completed", "{done:?}");
    }
    let done = charge(&on_a);
    assert_eq!((done.waiting, done.in_flight, done.completed), (0, 0, 2));
}
