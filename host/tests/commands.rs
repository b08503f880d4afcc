//! Every command through real guests: the happy path and the error path of each.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use wfhost::{CommandError, CommandErrorKind, CommandKind, Grants, Host, Payload};
use wfhost_test_programs::{FANOUT, HELLO, ORDER, PROBE, RING};

const PATIENCE: Duration = Duration::from_secs(60);

fn host_with(builder: wfhost::HostBuilder) -> Host {
    let host = builder.workers(2).build().unwrap();
    for (name, path) in [
        ("probe", PROBE),
        ("hello", HELLO),
        ("order", ORDER),
        ("ring", RING),
        ("fanout", FANOUT),
    ] {
        // The probe is trusted with every host function; grants have their own test below.
        let grants = match name {
            "probe" => Grants::default().allow_all_functions(),
            _ => Grants::default(),
        };
        host.load_module_with(name, path, grants).unwrap();
    }
    host
}

fn host() -> Host {
    host_with(Host::builder())
}

/// Runs `module::entry` with JSON `input` and returns its JSON result.
fn run(host: &Host, module: &str, entry: &str, input: Value) -> Result<Value, wfhost::Error> {
    let run = host.spawn(module, entry, Payload::to_json(&input).unwrap())?;
    let result = run.wait_timeout(PATIENCE).expect("finished in time")?;
    Ok(result.decode().unwrap())
}

#[test]
fn messages_between_guests_keep_their_order() {
    let host = host();
    let seen = run(&host, "probe", "ordered", json!(500)).unwrap();
    let expected: Vec<u32> = (0..500).collect();
    assert_eq!(seen, json!(expected));
}

#[test]
fn sending_to_an_unknown_pid_is_an_error_the_guest_sees() {
    let host = host();
    let seen = run(&host, "probe", "send_to", json!(999_999)).unwrap();
    assert_eq!(seen["kind"], "no-such-process");
    assert_eq!(
        seen["message"],
        "no process <999999>: it never existed or has already finished (no-such-process)"
    );
}

#[test]
fn recv_timeout_returns_a_message_or_nothing() {
    let host = host();
    assert_eq!(
        run(&host, "probe", "wait_message", json!(20)).unwrap(),
        Value::Null
    );
    let waiting = host
        .spawn(
            "probe",
            "wait_message",
            Payload::to_json(&json!(60_000)).unwrap(),
        )
        .unwrap();
    host.send(waiting.pid(), Payload::to_json("ping").unwrap())
        .unwrap();
    let got = waiting.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(got.decode::<Value>().unwrap(), json!("ping"));
}

#[test]
fn the_host_sends_to_a_process_and_learns_when_it_is_gone() {
    let host = host();
    let relay = host
        .spawn("probe", "cleanup_on_cancel", Payload::empty())
        .unwrap();
    host.send(relay.pid(), Payload::to_json(&1).unwrap())
        .unwrap();
    host.cancel(relay.pid()).unwrap();
    let pid = relay.pid();
    assert_eq!(
        relay
            .wait_timeout(PATIENCE)
            .unwrap()
            .unwrap()
            .decode::<String>()
            .unwrap(),
        "cleaned up"
    );
    let err = host.send(pid, Payload::empty()).unwrap_err();
    assert_eq!(err.kind(), wfhost::ErrorKind::NoSuchProcess);
}

#[test]
fn a_child_runs_and_its_result_is_joined() {
    let host = host();
    let outcome = run(
        &host,
        "probe",
        "supervise",
        json!([null, "measure", {"a": [1, 2, 3]}]),
    )
    .unwrap();
    // The length of `{"a":[1,2,3]}`.
    assert_eq!(outcome, json!({ "ok": 13 }));
}

#[test]
fn a_failing_child_is_an_error_value_not_a_crash_of_the_parent() {
    let host = host();
    let outcome = run(
        &host,
        "probe",
        "supervise",
        json!([null, "measure", "fail"]),
    )
    .unwrap();
    assert_eq!(outcome["error"], "child-failed");
    let message = outcome["message"].as_str().unwrap();
    assert!(
        message.ends_with("failed: entry point 'measure' failed: asked to fail (child-failed)"),
        "{message}"
    );
}

#[test]
fn spawning_an_unknown_entry_point_or_module_is_an_error_value() {
    let host = host();
    let outcome = run(&host, "probe", "supervise", json!([null, "nope", 1])).unwrap();
    assert_eq!(outcome["error"], "invalid-input");
    assert!(outcome["message"]
        .as_str()
        .unwrap()
        .starts_with("unknown entry point 'nope' (module exposes: echo, fail, panic"));
    let outcome = run(&host, "probe", "supervise", json!(["billing", "charge", 1])).unwrap();
    assert_eq!(outcome["error"], "invalid-input");
    assert_eq!(
        outcome["message"],
        "no module is loaded under the name 'billing' (loaded: fanout, hello, order, probe, ring) (invalid-input)"
    );
}

#[test]
fn spawn_module_starts_another_loaded_module() {
    let host = host();
    let outcome = run(
        &host,
        "probe",
        "supervise",
        json!(["hello", "greet", "world"]),
    );
    assert_eq!(outcome.unwrap(), json!({ "ok": "Hello, world!" }));
}

#[test]
fn fanout_joins_a_hundred_children() {
    let host = host();
    let sum = run(
        &host,
        "fanout",
        "fanout",
        json!({ "children": 100, "piece": 1000 }),
    )
    .unwrap();
    assert_eq!(sum, json!({ "children": 100, "total": 4_999_950_000u64 }));
    // Joined children are reaped: nothing is left behind.
    assert_eq!(host.live(), 0);
}

#[test]
fn the_ring_passes_the_token_the_exact_number_of_hops() {
    let host = host();
    let report = run(
        &host,
        "ring",
        "ring",
        json!({ "members": 50, "hops": 10_000 }),
    )
    .unwrap();
    assert_eq!(report["hops"], 10_000);
    assert_eq!(report["members"], 50);
    assert!(report["hops_per_second"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_order_saga_completes_or_compensates_in_reverse() {
    let host = host();
    let order = |fail_at: Value| json!({ "id": "o-9", "sku": "kettle", "quantity": 2, "amount_cents": 4999, "fail_at": fail_at });
    let done = run(&host, "order", "place_order", order(Value::Null)).unwrap();
    assert_eq!(done["status"], "completed");
    let charge = run(&host, "order", "place_order", order(json!("charge"))).unwrap();
    assert_eq!(
        charge["log"],
        json!([
            "reserve_stock: reserved 2 (simulated)",
            "charge_payment: failed",
            "release_stock: released 2"
        ])
    );
    let ship = run(&host, "order", "place_order", order(json!("ship"))).unwrap();
    assert_eq!(
        ship["log"],
        json!([
            "reserve_stock: reserved 2 (simulated)",
            "charge_payment: charged 4999 cents",
            "ship_order: failed",
            "refund_payment: refunded 4999 cents",
            "release_stock: released 2"
        ])
    );
    assert_eq!(ship["status"], "compensated");
}

#[test]
fn a_cancelled_workflow_sees_the_cancel_and_cleans_up() {
    let host = host();
    assert_eq!(
        run(&host, "probe", "cancel_child", json!(null)).unwrap(),
        json!("cleaned up")
    );
    let outcome = run(&host, "probe", "cancel_unknown", json!(424_242)).unwrap();
    assert_eq!(outcome["error"], "no-such-process");
}

#[test]
fn a_cancel_overtakes_a_queued_backlog() {
    let host = host();
    let consumer = host
        .spawn("probe", "slow_consumer", Payload::empty())
        .unwrap();
    for n in 0..10_000 {
        host.send(consumer.pid(), Payload::to_json(&n).unwrap())
            .unwrap();
    }
    host.cancel(consumer.pid()).unwrap();
    let handled: u32 = consumer
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap()
        .decode()
        .unwrap();
    // Each message takes 50 ms to handle: behind the backlog, the cancel would wait 500 s.
    assert!(
        handled < 100,
        "handled {handled} messages before the cancel"
    );
}

#[test]
fn a_workflow_that_ignores_its_cancel_is_terminated_after_the_grace_period() {
    let host = host_with(Host::builder().cancel_grace(Some(Duration::from_millis(100))));
    let stubborn = host.spawn("probe", "stubborn", Payload::empty()).unwrap();
    host.cancel(stubborn.pid()).unwrap();
    let err = stubborn.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(
        err.message(),
        "terminated: it did not finish within 100ms of being cancelled"
    );
}

#[test]
fn host_commands_run_off_the_workers_and_answer_the_guest() {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let host = host_with(
        Host::builder()
            .function("math.double", move |n: i64| {
                counted.fetch_add(1, Ordering::Relaxed);
                let thread = std::thread::current();
                assert!(thread.name().unwrap().starts_with("wfhost-function"));
                n.checked_mul(2).ok_or("overflow")
            })
            .function_raw("echo.raw", |info, input| {
                Ok(
                    Payload::to_json(&json!({ "pid": info.pid.0, "bytes": input.bytes.len() }))
                        .unwrap(),
                )
            })
            .function("always.fails", |_: Value| -> Result<Value, String> {
                Err("the payment provider said no".into())
            }),
    );
    let doubled = run(&host, "probe", "call", json!(["math.double", 21])).unwrap();
    assert_eq!(doubled, json!({ "ok": 42 }));
    let overflow = run(&host, "probe", "call", json!(["math.double", i64::MAX])).unwrap();
    assert_eq!(overflow["error"], "failed");
    assert_eq!(overflow["message"], "overflow (failed)");
    let bad_input = run(&host, "probe", "call", json!(["math.double", "two"])).unwrap();
    assert_eq!(bad_input["error"], "invalid-input");
    let raw = run(&host, "probe", "call", json!(["echo.raw", [1, 2, 3]])).unwrap();
    // The input travels in the caller's encoding: JSON here, `[1,2,3]`.
    assert_eq!(raw["ok"]["bytes"], 7);
    let failed = run(&host, "probe", "call", json!(["always.fails", null])).unwrap();
    assert_eq!(failed["message"], "the payment provider said no (failed)");
    let unknown = run(&host, "probe", "call", json!(["math.triple", 1])).unwrap();
    assert_eq!(unknown["error"], "unknown-command");
    assert_eq!(
        unknown["message"],
        "no host function named 'math.triple' (registered: always.fails, echo.raw, math.double) (unknown-command)"
    );
    // 21 and i64::MAX reached the function; "two" was refused before it.
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[test]
fn a_module_uses_only_the_commands_it_was_granted() {
    let host = host_with(
        Host::builder()
            .function("math.double", |n: i64| Ok::<_, String>(n * 2))
            .function("math.half", |n: i64| Ok::<_, String>(n / 2)),
    );
    host.load_module("default", PROBE).unwrap();
    host.load_module_with(
        "doubler",
        PROBE,
        Grants::default()
            .allow_function("math.double")
            .deny(CommandKind::Spawn),
    )
    .unwrap();
    let refused = run(&host, "default", "call", json!(["math.double", 2])).unwrap();
    assert_eq!(refused["error"], "not-allowed");
    assert_eq!(
        refused["message"],
        "this module may not call host function 'math.double': the host did not grant it (it grants none) (not-allowed)"
    );
    let granted = run(&host, "doubler", "call", json!(["math.double", 2])).unwrap();
    assert_eq!(granted, json!({ "ok": 4 }));
    let other = run(&host, "doubler", "call", json!(["math.half", 2])).unwrap();
    assert_eq!(
        other["message"],
        "this module may not call host function 'math.half': the host did not grant it (it grants math.double) (not-allowed)"
    );
    // A denied built-in: the spawn never happens, so nothing but the parent ever ran.
    let spawns = host.counters().spawns;
    let no_child = run(
        &host,
        "doubler",
        "supervise",
        json!(["hello", "greet", "x"]),
    )
    .unwrap();
    assert_eq!(no_child["error"], "not-allowed");
    assert_eq!(host.counters().spawns, spawns + 1);
}

#[test]
fn a_module_cancels_only_its_own_children_unless_granted_any_process() {
    let host = host();
    host.load_module_with("supervisor", PROBE, Grants::default().allow_any_process())
        .unwrap();
    let stranger = host
        .spawn("probe", "wait_message", Payload::to_json(&600_000).unwrap())
        .unwrap();
    let pid = stranger.pid().0;
    let refused = run(&host, "probe", "cancel_unknown", json!(pid)).unwrap();
    assert_eq!(refused["error"], "not-allowed");
    assert_eq!(
        refused["message"],
        format!("process <{pid}> is not a child of this process; this module may cancel only its own children (not-allowed)")
    );
    assert!(
        stranger.wait_timeout(Duration::ZERO).is_none(),
        "still running"
    );
    let done = run(&host, "supervisor", "cancel_unknown", json!(pid)).unwrap();
    assert_eq!(done, json!("cancelled"));
    let err = stranger.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(
        err.message(),
        "entry point 'wait_message' stopped: it was cancelled"
    );
}

#[test]
fn a_panicking_host_command_fails_the_call_not_the_host() {
    let host = host_with(
        Host::builder().function("boom", |_: Value| -> Result<Value, CommandError> {
            panic!("the database fell over")
        }),
    );
    let outcome = run(&host, "probe", "call", json!(["boom", null])).unwrap();
    assert_eq!(
        outcome["message"],
        "host function 'boom' panicked: the database fell over (failed)"
    );
    // The pool thread survived.
    let again = run(&host, "probe", "call", json!(["boom", null])).unwrap();
    assert_eq!(again["error"], "failed");
}

#[test]
fn registering_a_command_twice_is_refused() {
    let err = Host::builder()
        .function("x", |v: Value| Ok::<_, String>(v))
        .function("x", |v: Value| Ok::<_, String>(v))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), wfhost::ErrorKind::Config);
    assert_eq!(err.message(), "host function 'x' is registered twice");
}

#[test]
fn time_and_randomness_come_from_the_host() {
    let host = host();
    let seen = run(&host, "probe", "time_and_chance", json!(null)).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let reported = seen["unix_seconds"].as_u64().unwrap();
    assert!(reported <= now && now - reported < 60, "{seen}");
    assert_eq!(seen["randoms_differ"], true);
    assert_eq!(CommandErrorKind::Unavailable.name(), "unavailable");
}

#[test]
fn a_guest_that_spawns_without_end_hits_the_process_limit() {
    let host = host_with(Host::builder().max_processes(Some(20)));
    let outcome = run(&host, "probe", "fork", json!(1_000)).unwrap();
    // The forking process itself counts: 19 children fit beside it.
    assert_eq!(outcome["children"], 19);
    assert_eq!(outcome["refused"]["error"], "limit-reached");
    assert_eq!(
        outcome["refused"]["message"],
        "the host is at its capacity of 20 live processes; try again when some have finished (limit-reached)"
    );
    // The children ignore the cancel their parent's exit sent them: close them now.
    let report = host.shutdown(Duration::from_millis(50));
    assert_eq!(report.closed, 19);
}

#[test]
fn a_sender_that_outpaces_its_receiver_hits_the_mailbox_limit() {
    let host = host_with(Host::builder().mailbox_limit(Some(100)));
    let outcome = run(&host, "probe", "flood", json!(1_000)).unwrap();
    assert_eq!(outcome["sent"], 100);
    assert_eq!(outcome["refused"]["error"], "mailbox-full");
    host.shutdown(Duration::from_millis(50));
}

#[test]
fn the_mailbox_also_counts_bytes() {
    // Each message is a JSON number of 1 to 3 bytes: 0..=9 take 10 bytes, 10..=99 take 180.
    let host = host_with(Host::builder().mailbox_bytes(Some(190)));
    let outcome = run(&host, "probe", "flood", json!(1_000)).unwrap();
    assert_eq!(outcome["sent"], 100);
    assert_eq!(outcome["refused"]["error"], "mailbox-full");
    host.shutdown(Duration::from_millis(50));
}

#[test]
fn a_process_may_have_only_so_many_children() {
    let host = host_with(Host::builder().max_children(Some(5)));
    let outcome = run(&host, "probe", "fork", json!(1_000)).unwrap();
    assert_eq!(outcome["children"], 5);
    assert_eq!(outcome["refused"]["error"], "limit-reached");
    let message = outcome["refused"]["message"].as_str().unwrap();
    assert!(
        message.ends_with(
            "already has its limit of 5 children (running, or finished and not yet joined); join \
             some first (limit-reached)"
        ),
        "{message}"
    );
    let report = host.shutdown(Duration::from_millis(50));
    assert_eq!(report.closed, 5);
}

#[test]
fn oversized_payloads_are_refused_where_they_enter() {
    let limits = wfhost::Limits::default().max_payload_bytes(200);
    let host = host_with(Host::builder().limits(limits));
    let big = Payload::to_json(&"x".repeat(300)).unwrap();
    let err = host.spawn("probe", "echo", big.clone()).unwrap_err();
    assert_eq!(err.kind(), wfhost::ErrorKind::Limit);
    assert_eq!(
        err.message(),
        "the input is 302 bytes, more than the payload limit of 200 (Limits::max_payload_bytes, --max-payload)"
    );
    let waiting = host
        .spawn("probe", "wait_message", Payload::to_json(&60_000).unwrap())
        .unwrap();
    let err = host.send(waiting.pid(), big).unwrap_err();
    assert_eq!(err.kind(), wfhost::ErrorKind::Limit);
    // A guest's oversized message completes with an error it sees.
    let outcome = run(&host, "probe", "call_sized", json!(["nothing", 300])).unwrap();
    assert_eq!(outcome["error"], "limit-reached");
    assert_eq!(
        outcome["message"],
        "the host function's input is 302 bytes, more than the payload limit of 200 (Limits::max_payload_bytes, --max-payload) (limit-reached)"
    );
    host.cancel(waiting.pid()).unwrap();
}
