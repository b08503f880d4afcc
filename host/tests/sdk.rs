//! What the guest SDK gives a workflow author, through real guests on the real host: the standard
//! future combinators, joins that survive being abandoned, typed receives that can be handled,
//! timers at a wall-clock time, messages to the host, many spawns in one step, entry point names
//! with `-` and `.`, and how a child that was cancelled looks to its parent.

use std::time::Duration;

use serde_json::{json, Value};
use wfhost::{ErrorKind, Host, Payload, Pid};
use wfhost_test_programs::PROBE;

const PATIENCE: Duration = Duration::from_secs(120);

fn host() -> Host {
    let host = Host::builder()
        .workers(2)
        .max_children(Some(20_000))
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    host
}

fn run(host: &Host, entry: &str, input: Value) -> wfhost::Result<Value> {
    host.spawn("probe", entry, Payload::to_json(&input).unwrap())?
        .decoded::<Value>()
        .wait_timeout(PATIENCE)
        .expect("finished")
}

#[test]
fn join_all_select_and_futures_unordered_work_on_the_sdks_futures() {
    let host = host();
    assert_eq!(
        run(&host, "combinators", json!(4)).unwrap(),
        json!({ "lengths": [2, 3, 4, 5], "winner": "short", "order": [10, 20, 30] })
    );
}

/// A join abandoned by a `select` (the sleep won) does not lose the child's result: the next join
/// of the same child gets it.
#[test]
fn an_abandoned_join_does_not_lose_the_result() {
    let host = host();
    assert_eq!(
        run(&host, "impatient_join", json!(100)).unwrap(),
        json!({ "first": "timed out", "second": "rested" })
    );
}

/// A message of the wrong type is an error the workflow can match, holding the message and its
/// sender; `recv_valid` skips such messages.
#[test]
fn messages_of_the_wrong_type_can_be_handled_or_skipped() {
    let host = host();
    let run = host
        .spawn("probe", "typed_messages", Payload::to_json(&3).unwrap())
        .unwrap();
    for message in [json!(1), json!("one"), json!(2), json!({"n": 3}), json!(7)] {
        host.send(run.pid(), Payload::to_json(&message).unwrap())
            .unwrap();
    }
    let result: Value = run
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(
        result,
        json!({ "good": [1, 2], "bad": 1, "first_bad": 0, "valid": 7 })
    );
}

/// `recv_valid_timeout` skips a message of the wrong type and goes on waiting for a good one
/// within the same timeout; with none, it gives `None` when the time is up.
#[test]
fn recv_valid_timeout_skips_bad_messages_and_times_out() {
    let host = host();
    let waiting = host
        .spawn(
            "probe",
            "valid_within",
            Payload::to_json(&60_000u64).unwrap(),
        )
        .unwrap();
    for message in [json!("not a number"), json!({"n": 1}), json!(7)] {
        host.send(waiting.pid(), Payload::to_json(&message).unwrap())
            .unwrap();
    }
    let result: Value = waiting
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(result, json!(7));
    assert_eq!(run(&host, "valid_within", json!(20)).unwrap(), Value::Null);
}

/// By default (`?`), a message of the wrong type fails the workflow, naming the sender.
#[test]
fn a_message_of_the_wrong_type_passed_on_fails_the_workflow_naming_its_sender() {
    let host = host();
    let run = host
        .spawn("probe", "strict_recv", Payload::to_json(&()).unwrap())
        .unwrap();
    host.send(run.pid(), Payload::to_json(&"not a number").unwrap())
        .unwrap();
    let error = run.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Failed);
    assert!(
        error.message().starts_with(
            "entry point 'strict_recv' failed: a message from process <0> is not a u32: "
        ),
        "{error}"
    );
}

#[test]
fn sleep_until_wakes_at_the_hosts_wall_clock_time() {
    let host = host();
    assert_eq!(run(&host, "alarm", json!(50)).unwrap(), json!(true));
}

/// Messages to `Pid::HOST` arrive on the `Run` of the process the application started, its
/// children's too, in order; then its result.
#[test]
fn messages_to_the_host_arrive_on_the_run() {
    let host = host();
    let run = host
        .spawn("probe", "report", Payload::to_json(&3).unwrap())
        .unwrap()
        .decoded::<u32>();
    let mut messages = Vec::new();
    while let Some(message) = run.recv_message() {
        messages.push((
            message.from == run.pid(),
            message.decode::<String>().unwrap(),
        ));
    }
    assert_eq!(
        messages,
        [
            (true, "progress 0".to_string()),
            (true, "progress 1".to_string()),
            (true, "progress 2".to_string()),
            (false, "from a child".to_string()),
        ]
    );
    assert_eq!(run.wait().unwrap(), 3);
}

/// More spawns in one step than the host's yield limit (10,000) go out over several steps: the
/// SDK holds the rest back instead of the workflow failing.
#[test]
fn more_spawns_in_one_step_than_the_yield_limit_all_happen() {
    let host = host();
    assert_eq!(
        run(&host, "spawn_many", json!(10_500)).unwrap(),
        json!(10_500)
    );
}

#[test]
fn entry_point_names_may_hold_dashes_and_dots() {
    let host = host();
    let info = host.module_info("probe").unwrap();
    assert!(info.has_entry("send-report") && info.has_entry("v2.echo"));
    assert_eq!(
        run(&host, "v2.echo", json!("dotted")).unwrap(),
        json!("dotted")
    );
    let report = host
        .spawn("probe", "send-report", Payload::to_json(&1).unwrap())
        .unwrap();
    assert_eq!(
        report.recv_message().unwrap().decode::<String>().unwrap(),
        "progress 0"
    );
}

/// A child cancelled by its parent joins as `child-cancelled`, not `child-failed`, and the text
/// names it once.
#[test]
fn a_cancelled_child_joins_as_child_cancelled() {
    let host = host();
    let parent = host
        .spawn("probe", "cancel_sleeper", Payload::to_json(&()).unwrap())
        .unwrap();
    let child = Pid(parent.pid().0 + 1);
    let result: Value = parent
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(
        result,
        json!({
            "error": "child-cancelled",
            "message": format!(
                "process {child} was stopped: entry point 'nap' stopped: it was cancelled \
                 (child-cancelled)"
            ),
        })
    );
}

/// A child's failure names the child once, not "process <n> failed: process <n> ...".
#[test]
fn a_failed_childs_error_names_it_once() {
    let host = host();
    let parent = host
        .spawn(
            "probe",
            "supervise",
            Payload::to_json(&json!([null, "panic", "boom"])).unwrap(),
        )
        .unwrap();
    let child = Pid(parent.pid().0 + 1);
    let result: Value = parent
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(result["error"], "child-failed");
    let message = result["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "process {child} (entry point 'panic') panicked: boom"
        )),
        "{message}"
    );
    assert_eq!(message.matches(&child.to_string()).count(), 1, "{message}");
}
