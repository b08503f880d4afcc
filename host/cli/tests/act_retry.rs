//! Retry policies, against a real `wfhost serve` whose worker function the test serves itself:
//! a function failing twice then succeeding is called three times with the policy's waits (as
//! the host's clock journaled them); an error marked not retryable fails at once; the host's
//! default policy (`--retry`) applies to a plain `ctx.call`; and a host killed mid-backoff
//! resumes the same schedule.

mod common;

use std::time::Duration;

use common::http::{put_probe, start_request, HttpServer};
use common::tasks::{error, ok, result};
use serde_json::json;
use wfhost_client::wire::{HistoryParams, TaskJson};

fn take(api: &wfhost_client::Client) -> TaskJson {
    api.poll_task(&["payments.charge".to_string()], Duration::from_secs(30))
        .unwrap()
        .expect("a task")
}

/// Each step's time (ms, the host's clock) and what it yielded, in words.
fn history(api: &wfhost_client::Client, id: &str) -> Vec<(u64, Vec<String>)> {
    let page = api.history(id, &HistoryParams::default()).unwrap();
    page.steps
        .iter()
        .map(|step| {
            let words = step
                .yields
                .iter()
                .map(|y| {
                    // Without the tag ("#3 sleep 1s").
                    let words = y["words"].as_str().unwrap_or_default();
                    words
                        .split_once(' ')
                        .map_or(words, |(_, rest)| rest)
                        .to_string()
                })
                .collect();
            (step.at, words)
        })
        .collect()
}

/// Every yield's words, in order.
fn yields(api: &wfhost_client::Client, id: &str) -> Vec<String> {
    history(api, id).into_iter().flat_map(|(_, w)| w).collect()
}

fn server(name: &str, extra: &[&str]) -> (std::path::PathBuf, HttpServer) {
    let dir = common::tempdir("act-retry", name);
    let store = dir.join("wf.db");
    let mut args = vec!["--worker-function", "payments.charge"];
    args.extend_from_slice(extra);
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &args);
    (dir, server)
}

#[test]
fn a_call_failing_twice_then_succeeding_is_made_three_times_with_the_policys_waits() {
    let (_dir, server) = server("flaky", &[]);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "r1",
        &module,
        "call_retrying",
        json!(["payments.charge", {"amount": 3}, 5, 200]),
    ))
    .unwrap();
    let mut keys = Vec::new();
    for (n, completion) in [
        error("card network down", true),
        error("card network down again", true),
        ok(json!("charged")),
    ]
    .into_iter()
    .enumerate()
    {
        let task = take(&api);
        assert_eq!(result(&task.input), json!({"amount": 3}), "attempt {n}");
        keys.push(task.idempotency_key.clone().unwrap());
        api.complete_task(&task.task, &completion).unwrap();
    }
    let done = api.result("r1", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(
        result(done.result.as_ref().unwrap()),
        json!({"ok": "charged"})
    );
    assert!(api
        .poll_task(&["payments.charge".to_string()], Duration::ZERO)
        .unwrap()
        .is_none());
    let call = "call 'payments.charge' with {\"amount\":3}";
    let again =
        |n: u32| format!("call 'payments.charge' again (attempt {n} of #1) with {{\"amount\":3}}");
    let words = yields(&api, "r1");
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_eq!(
        words,
        [call, "sleep 200ms", &again(2), "sleep 400ms", &again(3)]
    );
    // The waits as the host's clock saw them: a step yields each sleep, the next step (the
    // time came) yields the next attempt.
    let steps = history(&api, "r1");
    for (wait, sleep_step) in [(200, 1), (400, 3)] {
        let slept = steps[sleep_step + 1].0 - steps[sleep_step].0;
        assert!(slept >= wait, "waited {slept} ms for a {wait} ms backoff");
    }
    assert_eq!(keys.len(), 3);
    assert_eq!(
        keys.iter().collect::<std::collections::BTreeSet<_>>().len(),
        1,
        "every attempt of the call has its key: {keys:?}"
    );
}

#[test]
fn an_error_not_worth_retrying_fails_at_once() {
    let (_dir, server) = server("rejected", &[]);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "r2",
        &module,
        "call_retrying",
        json!(["payments.charge", 1, 5, 10]),
    ))
    .unwrap();
    let task = take(&api);
    api.complete_task(&task.task, &error("card declined", false))
        .unwrap();
    let done = api.result("r2", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(
        result(done.result.as_ref().unwrap()),
        json!({"error": "rejected", "message": "card declined (rejected)"})
    );
    assert_eq!(yields(&api, "r2"), ["call 'payments.charge' with 1"]);
}

#[test]
fn the_hosts_default_policy_retries_a_plain_call_and_gives_up() {
    let (_dir, server) = server(
        "default",
        &[
            "--retry",
            "payments.charge=attempts:3,initial:50ms,backoff:1",
        ],
    );
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "r3",
        &module,
        "call",
        json!(["payments.charge", 7]),
    ))
    .unwrap();
    for n in 1..=3 {
        let task = take(&api);
        api.complete_task(&task.task, &error(&format!("down {n}"), true))
            .unwrap();
    }
    let done = api.result("r3", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(
        result(done.result.as_ref().unwrap()),
        json!({"error": "failed", "message": "down 3 (gave up after 3 attempts) (failed)"})
    );
    let call = "call 'payments.charge' with 7";
    let again = |n: u32| format!("call 'payments.charge' again (attempt {n} of #1) with 7");
    let policy = "call 'wfhost.retry-policy' with \"payments.charge\"";
    let words = yields(&api, "r3");
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_eq!(
        words,
        [
            call,
            policy,
            "sleep 50ms",
            &again(2),
            "sleep 50ms",
            &again(3)
        ],
        "the policy is asked once, at the first failure"
    );
}

#[test]
fn a_host_killed_mid_backoff_resumes_the_same_schedule() {
    let (dir, mut server) = server("backoff", &[]);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "r4",
        &module,
        "call_retrying",
        json!(["payments.charge", 9, 3, 1500]),
    ))
    .unwrap();
    let task = take(&api);
    api.complete_task(&task.task, &error("timeout upstream", true))
        .unwrap();
    common::wait_until("the backoff is journaled", || {
        yields(&api, "r4").iter().any(|w| w == "sleep 1.5s")
    });
    server.kill();

    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--worker-function", "payments.charge"],
    );
    let api = server.client();
    let task = take(&api);
    api.complete_task(&task.task, &ok(json!("paid"))).unwrap();
    let done = api.result("r4", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(result(done.result.as_ref().unwrap()), json!({"ok": "paid"}));
    let call = "call 'payments.charge' with 9";
    let again = "call 'payments.charge' again (attempt 2 of #1) with 9";
    let words = yields(&api, "r4");
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    // One sleep: the restart went on with the one journaled, not a new schedule.
    assert_eq!(words, [call, "sleep 1.5s", again]);
    let steps = history(&api, "r4");
    let slept = steps[2].0 - steps[1].0;
    assert!(slept >= 1500, "the backoff was cut short: {slept} ms");
}
