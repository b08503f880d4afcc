//! Python workflows, built with `wfhost build suite.py` and run by the real binary: the scenario
//! suite (`tests/python/suite.py`, which imports `helpers.py` beside it), sandboxed, durable and
//! replayable as a Rust workflow is.

mod common;

use common::scripts::{self, Suite};

use std::path::Path;
use std::sync::OnceLock;

use serde_json::{json, Value};

/// The suite, built once for the whole file.
fn suite() -> &'static Suite {
    static SUITE: OnceLock<Suite> = OnceLock::new();
    SUITE.get_or_init(|| Suite::new("python", "py"))
}

fn result(entry: &str, input: Value) -> Value {
    suite().result(entry, input)
}

fn result_saying(entry: &str, input: Value, expected: Value, said: &str) {
    suite().result_saying(entry, input, expected, said)
}

fn failure(entry: &str, input: Value, flags: &[&str]) -> String {
    suite().failure(entry, input, flags)
}

#[test]
fn the_build_prints_the_module_and_inspect_lists_the_entry_points() {
    suite().lists(&[
        "abandon",
        "bomb",
        "call",
        "canceller",
        "counter",
        "echo",
        "fail",
        "family",
        "fetch",
        "forbidden",
        "greet",
        "messages",
        "misuse",
        "patched",
        "reads",
        "remind",
        "spin",
        "square",
        "stubborn",
        "swallow",
        "timers",
    ]);
}

#[test]
fn an_entry_point_returns_its_value_and_logs() {
    result_saying("greet", json!("Ada"), json!("Hello, Ada!"), "greeting Ada");
}

#[test]
fn timers_run_at_once_and_end_in_the_order_of_their_lengths() {
    assert_eq!(
        result("timers", json!(4)),
        json!({"values": [0, 1, 2, 3], "order": [3, 2, 1, 0], "first": 1})
    );
}

#[test]
fn messages_go_between_workflows_and_to_the_host() {
    // The message to the host is a line on stderr.
    result_saying(
        "messages",
        json!(3),
        json!({"got": [0, 2, 4], "nothing": null, "echoed": 3}),
        r#"{"got":[0,2,4]}"#,
    );
}

#[test]
fn children_are_joined_and_a_failed_child_raises() {
    assert_eq!(
        result("family", json!(4)),
        json!({"values": [0, 1, 4, 9], "caught": "child-failed"})
    );
}

#[test]
fn a_raised_exception_fails_the_workflow_with_its_traceback() {
    let stderr = failure("fail", json!("out of stock"), &[]);
    assert!(stderr.contains("ValueError: out of stock"), "{stderr}");
    assert!(stderr.contains("suite.py"), "{stderr}");
}

#[test]
fn a_cancelled_workflow_cleans_up_and_ends_cancelled() {
    result_saying(
        "canceller",
        json!("stubborn"),
        json!("child-cancelled"),
        "cleaned up",
    );
}

#[test]
fn except_exception_does_not_swallow_a_cancel() {
    assert_eq!(
        result("canceller", json!("swallow")),
        json!("child-cancelled")
    );
}

#[test]
fn a_coroutine_a_failed_gather_abandons_is_closed_and_its_finally_runs() {
    result_saying(
        "abandon",
        Value::Null,
        json!("short failed"),
        "the abandoned coroutine closed",
    );
}

#[test]
fn blocking_sleeps_and_a_coroutine_awaited_twice_are_refused_with_the_reason() {
    let stderr = failure("misuse", json!("sleep"), &[]);
    assert!(stderr.contains("await ctx.sleep(seconds)"), "{stderr}");
    let stderr = failure("misuse", json!("twice"), &[]);
    assert!(stderr.contains("awaited already"), "{stderr}");
}

#[test]
fn the_same_sources_build_the_same_module() {
    suite().builds_the_same_module_twice();
}

#[test]
fn a_new_execution_takes_the_patched_branch() {
    assert_eq!(result("patched", Value::Null), json!(true));
}

#[test]
fn files_sockets_threads_and_subprocesses_are_not_there() {
    for (what, expect) in [
        ("file", "No such file or directory"),
        ("socket", "a workflow opens no sockets"),
        ("thread", "a workflow runs no threads"),
        ("subprocess", "wasi does not support processes"),
    ] {
        let stderr = failure("forbidden", json!(what), &[]);
        assert!(stderr.contains("failed: Traceback"), "{what}: {stderr}");
        assert!(stderr.contains(expect), "{what}: {stderr}");
    }
}

#[test]
fn an_endless_loop_is_stopped_by_the_step_limit() {
    let stderr = failure("spin", Value::Null, &["--step-limit", "500ms"]);
    assert!(
        stderr.contains("ran longer than the step time limit of 500ms"),
        "{stderr}"
    );
}

#[test]
fn a_memory_bomb_is_stopped_by_the_memory_limit() {
    let stderr = failure("bomb", Value::Null, &["--max-memory", "96MiB"]);
    assert!(stderr.contains("96 MiB"), "{stderr}");
}

#[test]
fn a_workflow_killed_after_its_reads_reads_the_same_when_it_resumes() {
    suite().reads_survive_a_crash();
}

#[test]
fn a_replay_with_a_script_that_does_something_else_names_the_step() {
    // The same entry point, sleeping once rather than twice at first.
    suite().replay_names_the_changed_step(
        "changed.py",
        "import wfhost\n\n@wfhost.entry\nasync def timers(ctx, n):\n    await ctx.sleep(1)\n    \
         return {}\n",
    );
}

#[test]
fn a_script_that_does_not_load_fails_the_build_with_its_traceback() {
    suite().refuses_to_build(&[
        ("syntax.py", "import wfhost\ndef (:\n", "SyntaxError"),
        (
            "missing.py",
            "import wfhost\nimport no_such_module\n",
            "no_such_module",
        ),
        (
            "none.py",
            "import wfhost\n\nasync def f(ctx, x):\n    return x\n",
            "no entry point",
        ),
        (
            "sync.py",
            "import wfhost\n\n@wfhost.entry\ndef f(ctx, x):\n    return x\n",
            "async def",
        ),
        (
            "sleeps.py",
            "import time\ntime.sleep(3600)\n",
            "await ctx.sleep",
        ),
        ("hoards.py", "hoard = bytearray(1 << 30)\n", "memory"),
    ]);
}

#[test]
fn the_order_example_does_what_the_rust_one_does() {
    scripts::order_example_matches_rust(
        "python",
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-py/shop.py"),
    );
}

#[test]
fn an_outbound_request_goes_through_the_hosts_allowlist() {
    suite().fetches_through_the_allowlist();
}

#[test]
fn the_time_skipping_harness_runs_a_python_workflow() {
    suite().skips_time();
}

#[test]
fn messages_and_a_worker_call_survive_a_killed_server() {
    suite().serves_across_a_kill();
}

#[test]
fn a_running_workflow_is_upgraded_to_a_compatible_script() {
    suite().upgrades_a_running_workflow("return total  # v1", "return {\"total\": total}  # v2");
}
