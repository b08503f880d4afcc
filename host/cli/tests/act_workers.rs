//! Activity workers against a real `wfhost serve --worker-function`: a Python worker (the
//! example) and a `wfhost worker` shell command serve a saga; a worker that vanishes mid-task
//! loses it to another, and its late completion is refused; a host killed with tasks
//! outstanding offers them again after recovery, with the same keys; a worker token reaches its
//! own functions only.

mod common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::http::{put_probe, start_request, HttpServer};
use common::tasks::{error, ok, result, tasks_of};
use common::wfhost;
use serde_json::{json, Value};
use wfhost_client::wire::CompleteRequest;

const SAGA: [&str; 8] = [
    "--worker-function",
    "inventory.reserve",
    "--worker-function",
    "inventory.release",
    "--worker-function",
    "payments.charge",
    "--worker-function",
    "shipping.ship",
];

/// Killed when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn functions(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_python_worker_and_a_shell_command_serve_a_saga() {
    let dir = common::tempdir("act-workers", "saga");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &SAGA);
    let api = server.client();
    let module = put_probe(&api);

    let root = wfhost_test_programs::workspace_root();
    let _python = Worker(
        std::process::Command::new("python3")
            .arg(root.join("examples/workers/worker.py"))
            .env("WFHOST_SERVER", &server.url)
            .env_remove("WFHOST_TOKEN")
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 runs"),
    );
    let _shell = Worker(
        wfhost()
            .args([
                "worker",
                "--server",
                &server.url,
                "--function",
                "payments.charge",
            ])
            .args(["--concurrency", "2", "--poll-wait", "1s", "--"])
            .args([
                "sh",
                root.join("examples/workers/charge.sh").to_str().unwrap(),
            ])
            .env_remove("WFHOST_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let order = json!({"sku": "kettle", "amount": 12, "address": "1 Main St"});
    api.start(&start_request("o1", &module, "activity_saga", order))
        .unwrap();
    let done = api.result("o1", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed", "{done:?}");
    let value = result(done.result.as_ref().unwrap());
    let reserve_key = value[0]["key"].as_str().unwrap().to_string();
    let charge_key = value[1]["key"].as_str().unwrap().to_string();
    assert!(reserve_key.starts_with("o1#") && charge_key.starts_with("o1#"));
    assert_ne!(reserve_key, charge_key);
    assert_eq!(
        value,
        json!([
            {"reserved": "kettle", "key": reserve_key},
            {"charged": {"sku": "kettle", "amount": 12, "address": "1 Main St"}, "key": charge_key, "attempt": 1},
            {"shipped_to": "1 Main St"}
        ])
    );

    // An order without an address: the Python worker rejects it for good, and the saga's
    // `?` fails the workflow with its message.
    let order = json!({"sku": "kettle", "amount": 12});
    api.start(&start_request("o2", &module, "activity_saga", order))
        .unwrap();
    let done = api.result("o2", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "failed", "{done:?}");
    let failure = done.error.unwrap();
    assert!(
        failure
            .message
            .contains("the order has no address (rejected)"),
        "{failure:?}"
    );
}

#[test]
fn a_vanished_worker_loses_its_task_and_its_late_completion_is_refused() {
    let dir = common::tempdir("act-workers", "vanished");
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &[
            "--worker-function",
            "payments.charge",
            "--task-timeout",
            "300ms",
        ],
    );
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "c1",
        &module,
        "call",
        json!(["payments.charge", {"amount": 5}]),
    ))
    .unwrap();
    let charge = functions(&["payments.charge"]);
    let first = api
        .poll_task(&charge, Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    assert_eq!(first.attempt, 1);
    assert_eq!(result(&first.input), json!({"amount": 5}));
    // The first worker says nothing by its deadline: the task goes to the next poll.
    let second = api
        .poll_task(&charge, Duration::from_secs(30))
        .unwrap()
        .expect("the task again");
    assert_eq!(second.attempt, 2);
    assert_eq!(second.idempotency_key, first.idempotency_key);
    assert_ne!(second.task, first.task);
    let late = api
        .complete_task(&first.task, &ok(json!("first")))
        .unwrap_err();
    assert_eq!(late.status(), Some(409), "{late}");
    let beat = api.heartbeat_task(&first.task).unwrap_err();
    assert_eq!(beat.status(), Some(409), "{beat}");
    api.heartbeat_task(&second.task).unwrap();
    // A completion whose poll for the next is bad is refused whole: nothing applied.
    let bad = api
        .complete_and_poll(&second.task, ok(json!("bad")), &[], Duration::ZERO)
        .unwrap_err();
    assert_eq!(bad.status(), Some(400), "{bad}");
    // Completed with a poll for the next in the same request: there is none.
    let next = api
        .complete_and_poll(&second.task, ok(json!("second")), &charge, Duration::ZERO)
        .unwrap();
    assert!(next.is_none());
    let again = api
        .complete_task(&second.task, &ok(json!("third")))
        .unwrap_err();
    assert_eq!(again.status(), Some(409), "{again}");
    let done = api.result("c1", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(
        result(done.result.as_ref().unwrap()),
        json!({"ok": "second"})
    );
    // Nothing else waits.
    assert!(api.poll_task(&charge, Duration::ZERO).unwrap().is_none());
    // Bad completions say what is wrong.
    let unknown = api
        .complete_task("12345.0000000000000000", &ok(json!(1)))
        .unwrap_err();
    assert_eq!(unknown.status(), Some(404), "{unknown}");
    let neither = api
        .complete_task(
            &second.task,
            &CompleteRequest {
                result: None,
                error: None,
                next: None,
            },
        )
        .unwrap_err();
    assert_eq!(neither.status(), Some(400), "{neither}");
}

/// A worker that writes every field of a completion (`"result": null` beside its error) has
/// its error applied, not refused as "both".
#[test]
fn an_error_beside_a_null_result_is_the_error() {
    let dir = common::tempdir("act-workers", "null-and-error");
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--worker-function", "payments.charge"],
    );
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "both",
        &module,
        "call",
        json!(["payments.charge", 1]),
    ))
    .unwrap();
    let charge = functions(&["payments.charge"]);
    let task = api
        .poll_task(&charge, Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    let body = r#"{"result": null, "error": {"message": "card declined", "retryable": false}}"#;
    let addr = server.addr();
    let request = format!(
        "POST /v1/tasks/{}/complete HTTP/1.1\r\nHost: {addr}\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        task.task,
        body.len()
    );
    let (status, answer) = common::http::raw(&addr, request.as_bytes());
    assert_eq!(status, 204, "{answer}");
    let done = api.result("both", Some(Duration::from_secs(60))).unwrap();
    let outcome = result(done.result.as_ref().unwrap());
    assert_eq!(outcome["error"], "rejected", "{outcome}");
    assert!(
        outcome["message"]
            .as_str()
            .unwrap()
            .contains("card declined"),
        "{outcome}"
    );
}

#[test]
fn tasks_outstanding_when_the_host_is_killed_are_offered_again_with_their_keys() {
    let dir = common::tempdir("act-workers", "killed");
    let store = dir.join("wf.db");
    let args = ["--worker-function", "payments.charge"];
    let mut server = HttpServer::start(&dir, store.to_str().unwrap(), &args);
    let api = server.client();
    let module = put_probe(&api);
    for n in 0..3 {
        api.start(&start_request(
            &format!("k{n}"),
            &module,
            "call",
            json!(["payments.charge", n]),
        ))
        .unwrap();
    }
    let charge = functions(&["payments.charge"]);
    let mut keys = std::collections::BTreeMap::new();
    while keys.len() < 3 {
        let task = api
            .poll_task(&charge, Duration::from_secs(30))
            .unwrap()
            .unwrap();
        keys.insert(
            result(&task.input).as_u64().unwrap(),
            task.idempotency_key.unwrap(),
        );
    }
    server.kill();

    let server = HttpServer::start(&dir, store.to_str().unwrap(), &args);
    let api = server.client();
    let mut again = std::collections::BTreeMap::new();
    while again.len() < 3 {
        let task = api
            .poll_task(&charge, Duration::from_secs(30))
            .unwrap()
            .unwrap();
        let n = result(&task.input).as_u64().unwrap();
        again.insert(n, task.idempotency_key.clone().unwrap());
        api.complete_task(&task.task, &ok(json!(n * 10))).unwrap();
    }
    assert_eq!(again, keys, "the same calls, with the same keys");
    for n in 0..3u64 {
        let done = api
            .result(&format!("k{n}"), Some(Duration::from_secs(60)))
            .unwrap();
        assert_eq!(result(done.result.as_ref().unwrap()), json!({"ok": n * 10}));
    }
}

/// `wfhost worker`'s command: what it prints is the result; a non-zero exit an error worth
/// retrying, with the end of stderr; exit 100 one that is not; output that is not JSON, one that
/// is not either; a run past `--timeout` is killed (with what it started) and fails.
#[test]
fn wfhost_worker_turns_a_commands_outcome_into_the_calls() {
    let dir = common::tempdir("act-workers", "command");
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--worker-function", "shell.run"],
    );
    let api = server.client();
    let module = put_probe(&api);
    let script = r#"input=$(cat)
case "$input" in
  '"slow"') sleep 30 & sleep 30 ;;
  '"bad"') echo 'not json' ;;
  '"no"') echo 'the card was declined' >&2; exit 100 ;;
  '"flaky"') echo 'try later' >&2; exit 3 ;;
  *) echo "{\"echo\": $input}" ;;
esac"#;
    let _worker = Worker(
        wfhost()
            .args(["worker", "--server", &server.url, "--function", "shell.run"])
            .args(["--concurrency", "4", "--timeout", "1s", "--poll-wait", "1s"])
            .args(["--", "sh", "-c", script])
            .env_remove("WFHOST_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let cases = [
        ("fine", json!({"ok": {"echo": "fine"}})),
        (
            "no",
            json!({"error": "rejected", "message": "sh exited with status 100: the card was declined (rejected)"}),
        ),
        (
            "flaky",
            json!({"error": "failed", "message": "sh exited with status 3: try later (failed)"}),
        ),
        ("bad", Value::Null),
        ("slow", Value::Null),
    ];
    for (input, _) in &cases {
        api.start(&start_request(
            input,
            &module,
            "call",
            json!(["shell.run", input]),
        ))
        .unwrap();
    }
    for (input, expected) in cases {
        let done = api.result(input, Some(Duration::from_secs(60))).unwrap();
        let outcome = result(done.result.as_ref().unwrap());
        match input {
            "bad" => {
                assert_eq!(outcome["error"], "rejected", "{outcome}");
                assert!(outcome["message"]
                    .as_str()
                    .unwrap()
                    .contains("printed what is not JSON"));
            }
            "slow" => {
                assert_eq!(outcome["error"], "failed", "{outcome}");
                assert!(
                    outcome["message"]
                        .as_str()
                        .unwrap()
                        .contains("did not finish within 1s"),
                    "{outcome}"
                );
            }
            _ => assert_eq!(outcome, expected, "{input}"),
        }
    }
}

#[test]
fn worker_tokens_need_a_server_token() {
    let dir = common::tempdir("act-workers", "tokenless");
    std::fs::write(dir.join("worker.token"), "w\n").unwrap();
    let tokens = format!("a.b={}", dir.join("worker.token").display());
    let store = dir.join("wf.db");
    let output = wfhost()
        .args([
            "serve",
            "--store",
            store.to_str().unwrap(),
            "--http",
            "127.0.0.1:0",
        ])
        .args(["--worker-function", "a.b", "--worker-token-file", &tokens])
        .env_remove("WFHOST_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = common::text(&output.stderr);
    assert!(
        stderr.contains("worker tokens restrict nothing"),
        "{stderr}"
    );
}

#[test]
fn a_worker_token_reaches_its_own_functions_only() {
    let dir = common::tempdir("act-workers", "tokens");
    let store = dir.join("wf.db");
    std::fs::write(dir.join("server.token"), "server-secret\n").unwrap();
    std::fs::write(dir.join("worker.token"), "charge-only\n").unwrap();
    let tokens = format!("payments.charge={}", dir.join("worker.token").display());
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &[
            "--token-file",
            dir.join("server.token").to_str().unwrap(),
            "--worker-function",
            "payments.charge",
            "--worker-function",
            "shipping.ship",
            "--worker-token-file",
            &tokens,
        ],
    );
    let admin = server.client().with_token("server-secret");
    let module = put_probe(&admin);
    let worker = server.client().with_token("charge-only");
    for (id, function) in [("t1", "payments.charge"), ("t2", "shipping.ship")] {
        admin
            .start(&start_request(id, &module, "call", json!([function, 1])))
            .unwrap();
    }
    let refused = worker
        .poll_task(&functions(&["shipping.ship"]), Duration::ZERO)
        .unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
    // Not a key to the rest of the API.
    assert_eq!(worker.hosts().unwrap_err().status(), Some(401));
    let task = worker
        .poll_task(&functions(&["payments.charge"]), Duration::from_secs(30))
        .unwrap()
        .unwrap();
    assert_eq!(task.function, "payments.charge");
    let ship = admin
        .poll_task(&functions(&["shipping.ship"]), Duration::from_secs(30))
        .unwrap()
        .unwrap();
    let other = worker.complete_task(&ship.task, &ok(json!(0))).unwrap_err();
    assert_eq!(other.status(), Some(403), "{other}");
    worker
        .complete_task(&task.task, &error("card declined", false))
        .unwrap();
    admin
        .complete_task(&ship.task, &ok(json!("shipped")))
        .unwrap();
    let declined = admin.result("t1", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(
        result(declined.result.as_ref().unwrap()),
        json!({"error": "rejected", "message": "card declined (rejected)"})
    );
    let shipped = admin.result("t2", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(
        result(shipped.result.as_ref().unwrap()),
        json!({"ok": "shipped"})
    );
}

/// `{"result": null}` is a result (a function that returns nothing): applied once, the
/// workflow gets `null`, and the task is not offered again. It was answered 400 ("neither
/// result nor error"), so `wfhost worker` and the Python example repeated the task forever.
#[test]
fn a_null_result_completes_the_task_once() {
    let dir = common::tempdir("act-workers", "null");
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--worker-function", "mail.send", "--task-timeout", "500ms"],
    );
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "mail",
        &module,
        "call",
        json!(["mail.send", {"to": "a@example.com"}]),
    ))
    .unwrap();
    let mail = functions(&["mail.send"]);
    let task = api
        .poll_task(&mail, Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    // Sent as a worker in any language writes it.
    let addr = server.addr();
    let body = r#"{"result": null}"#;
    let request = format!(
        "POST /v1/tasks/{}/complete HTTP/1.1\r\nHost: {addr}\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        task.task,
        body.len()
    );
    let (status, answer) = common::http::raw(&addr, request.as_bytes());
    assert_eq!(status, 204, "{answer}");
    let done = api.result("mail", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(result(done.result.as_ref().unwrap()), json!({"ok": null}));
    // Past its timeout, nothing is offered again.
    assert!(api
        .poll_task(&mail, Duration::from_secs(1))
        .unwrap()
        .is_none());
    let again = api.complete_task(&task.task, &ok(Value::Null)).unwrap_err();
    assert_eq!(again.status(), Some(409), "{again}");
}

/// Stops `server` as a service manager does (SIGTERM) and waits for it.
fn stop(server: &mut HttpServer) {
    let pid = server.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    server.child.wait().unwrap();
}

/// A workflow in flight never fails because of how a host was started: restarted without the
/// `--worker-function` its pending call needs, the host leaves the call waiting, and says so
/// (the waits, `wfhost status`, the metrics); the next host that serves the function answers it.
/// (It failed for good: "this module may not call host function ...: the host did not grant
/// it".)
#[test]
fn a_call_waits_for_a_host_that_serves_it() {
    let dir = common::tempdir("act-workers", "unserved");
    let store = dir.join("wf.db");
    let store = store.to_str().unwrap();
    let serving = ["--worker-function", "inventory.reserve"];
    let mut first = HttpServer::start(&dir, store, &serving);
    let api = first.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "order-7",
        &module,
        "call",
        json!(["inventory.reserve", {"sku": "A1"}]),
    ))
    .unwrap();
    let reserve = functions(&["inventory.reserve"]);
    let task = api
        .poll_task(&reserve, Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    stop(&mut first);

    // Without the flag: the workflow waits, and everything says for what.
    let mut second = HttpServer::start(&dir, store, &[]);
    let api = second.client();
    let waits = api.waits("order-7").unwrap();
    let unserved: Vec<&str> = waits
        .waits
        .iter()
        .filter_map(|w| w.unserved.as_deref())
        .collect();
    assert_eq!(unserved.len(), 1, "{waits:?}");
    assert!(
        unserved[0].contains("--worker-function inventory.reserve"),
        "{}",
        unserved[0]
    );
    assert_eq!(api.status("order-7").unwrap().status, "running");
    let shown = wfhost()
        .args(["status", "order-7", "--server", second.url()])
        .output()
        .unwrap();
    assert!(
        common::text(&shown.stdout)
            .contains("waits:    this host does not serve 'inventory.reserve'"),
        "{}",
        common::text(&shown.stdout)
    );
    let metrics = api.metrics().unwrap();
    assert!(
        metrics.contains("wfhost_unserved_calls_total 1"),
        "{metrics}"
    );
    stop(&mut second);

    // With it again: the call is made again, under the same key, and answered.
    let third = HttpServer::start(&dir, store, &serving);
    let api = third.client();
    let again = api
        .poll_task(&reserve, Duration::from_secs(30))
        .unwrap()
        .expect("the call, made again");
    assert_eq!(again.idempotency_key, task.idempotency_key);
    api.complete_task(&again.task, &ok(json!("reserved")))
        .unwrap();
    let done = api
        .result("order-7", Some(Duration::from_secs(60)))
        .unwrap();
    assert_eq!(done.status, "completed", "{done:?}");
    assert_eq!(
        result(done.result.as_ref().unwrap()),
        json!({"ok": "reserved"})
    );
}

/// `204` means the workflow has the outcome, even on a SQLite store whose host is killed before
/// the step that takes it is journaled (here the workflow is paused, so that step waits): the
/// next host hands it the outcome that was answered for, and offers the task to nobody again.
/// (The call was made again, a worker did it twice, and the workflow used the second answer.)
#[test]
fn a_completion_answered_204_survives_the_host_before_the_step_takes_it() {
    let dir = common::tempdir("act-workers", "kept");
    let store = dir.join("wf.db");
    let store = store.to_str().unwrap();
    let args = ["--worker-function", "payments.charge"];
    let mut server = HttpServer::start(&dir, store, &args);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "paid",
        &module,
        "call",
        json!(["payments.charge", {"amount": 9}]),
    ))
    .unwrap();
    let charge = functions(&["payments.charge"]);
    let task = api
        .poll_task(&charge, Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    assert!(api.pause("paid").unwrap().paused);
    api.complete_task(&task.task, &ok(json!("receipt-1")))
        .unwrap();
    server.kill();

    let server = HttpServer::start(&dir, store, &args);
    let api = server.client();
    api.unpause("paid").unwrap();
    let done = api.result("paid", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed", "{done:?}");
    assert_eq!(
        result(done.result.as_ref().unwrap()),
        json!({"ok": "receipt-1"})
    );
    assert!(api
        .poll_task(&charge, Duration::from_millis(500))
        .unwrap()
        .is_none());
}

#[test]
fn workers_and_the_tasks_they_leave_are_visible() {
    let dir = common::tempdir("act-workers", "visible");
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &[
            "--worker-function",
            "payments.charge",
            "--worker-function",
            "inventory.reserve",
        ],
    );
    let api = server.client();
    let module = put_probe(&api);
    let view = api.workers().unwrap();
    let names: Vec<&str> = view.functions.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(names, ["inventory.reserve", "payments.charge"]);
    assert!(view
        .functions
        .iter()
        .all(|f| f.pollers.is_empty() && f.waiting == 0));

    // A call nobody polls for: a task waiting, and no pollers.
    api.start(&start_request(
        "v1",
        &module,
        "call",
        json!(["payments.charge", 5]),
    ))
    .unwrap();
    let charge = |api: &wfhost_client::Client| tasks_of(api, "payments.charge");
    common::wait_until("the task waits", || charge(&api).waiting == 1);
    let waiting = charge(&api);
    assert_eq!((waiting.in_flight, waiting.pollers.len()), (0, 0));
    assert!(waiting.oldest_waiting_ms.is_some());

    // A named worker takes it: in flight, and the worker is seen.
    let billing = server.client().with_worker_name("billing-1", "machine-a");
    let task = billing
        .poll_task(&functions(&["payments.charge"]), Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    let taken = charge(&api);
    assert_eq!((taken.waiting, taken.in_flight), (0, 1));
    assert_eq!(taken.pollers.len(), 1);
    let poller = &taken.pollers[0];
    assert_eq!(
        (poller.name.as_str(), poller.host.as_str(), poller.polling),
        ("billing-1", "machine-a", false)
    );
    billing
        .complete_task(&task.task, &ok(json!("charged")))
        .unwrap();
    let done = charge(&api);
    assert_eq!((done.in_flight, done.completed, done.failed), (0, 1, 0));
    assert_eq!(
        result(
            api.result("v1", Some(Duration::from_secs(60)))
                .unwrap()
                .result
                .as_ref()
                .unwrap()
        ),
        json!({"ok": "charged"})
    );

    // A poll that waits shows as polling while it waits; an unnamed one by its address.
    let anonymous = server.client();
    let reserve = functions(&["inventory.reserve"]);
    let polling =
        std::thread::spawn(move || anonymous.poll_task(&reserve, Duration::from_secs(60)));
    let reserving = |api: &wfhost_client::Client| tasks_of(api, "inventory.reserve");
    common::wait_until("the poll waits", || {
        reserving(&api).pollers.first().is_some_and(|p| p.polling)
    });
    assert_eq!(reserving(&api).pollers[0].name, "127.0.0.1");
    api.start(&start_request(
        "v2",
        &module,
        "call",
        json!(["inventory.reserve", 1]),
    ))
    .unwrap();
    let task = polling
        .join()
        .unwrap()
        .unwrap()
        .expect("the waiting poll gets it");
    api.complete_task(&task.task, &error("out of stock", false))
        .unwrap();
    assert_eq!(reserving(&api).failed, 1);

    // The metrics say the same.
    let metrics = api.metrics().unwrap();
    for line in [
        "wfhost_tasks_waiting{function=\"payments.charge\"} 0",
        "wfhost_task_pollers{function=\"payments.charge\"} 1",
        "wfhost_task_wait_seconds_count{function=\"payments.charge\"} 1",
        "wfhost_task_completions_total{function=\"payments.charge\",outcome=\"result\"} 1",
        "wfhost_task_completions_total{function=\"inventory.reserve\",outcome=\"error\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
}

#[test]
fn a_cancelled_workflows_task_leaves_the_board() {
    let dir = common::tempdir("act-workers", "cancelled");
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--worker-function", "payments.charge"],
    );
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "gone",
        &module,
        "call",
        json!(["payments.charge", 1]),
    ))
    .unwrap();
    let charge = functions(&["payments.charge"]);
    let task = api
        .poll_task(&charge, Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    api.heartbeat_task(&task.task).unwrap();
    api.cancel("gone").unwrap();
    // The probe's `call` answers its call's error: the cancel reaches the call, and it ends.
    let done = api.result("gone", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed");
    assert_eq!(
        result(done.result.as_ref().unwrap())["message"],
        "cancelled",
        "{done:?}"
    );
    // Nothing waits for its answer: the task goes, and the worker hears so at its heartbeat.
    common::wait_until("the task leaves the board", || {
        api.heartbeat_task(&task.task)
            .is_err_and(|e| e.status() == Some(409))
    });
    let late = api
        .complete_task(&task.task, &ok(json!("charged")))
        .unwrap_err();
    assert_eq!(late.status(), Some(409), "{late}");
    let view = api.workers().unwrap();
    assert_eq!(
        (view.functions[0].waiting, view.functions[0].in_flight),
        (0, 0)
    );
}
