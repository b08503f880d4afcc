//! JavaScript workflows, built with `wfhost build suite.js` and run by the real binary: the
//! scenario suite (`tests/js/suite.js`, which imports `helpers.js` beside it), sandboxed, durable
//! and replayable as a Rust workflow is; the same scenarios as `python.rs`.

mod common;

use common::scripts::{self, Suite};
use common::{tempdir, text, wfhost};

use std::path::Path;
use std::sync::OnceLock;

use serde_json::{json, Value};

/// The suite, built once for the whole file.
fn suite() -> &'static Suite {
    static SUITE: OnceLock<Suite> = OnceLock::new();
    SUITE.get_or_init(|| Suite::new("js", "js"))
}

fn result(entry: &str, input: Value) -> Value {
    suite().result(entry, input)
}

fn failure(entry: &str, input: Value, flags: &[&str]) -> String {
    suite().failure(entry, input, flags)
}

#[test]
fn the_build_prints_the_module_and_inspect_lists_the_exported_async_functions() {
    // `helper` is exported but not async: not an entry point.
    suite().lists(&[
        "bomb",
        "call",
        "canceller",
        "clock",
        "counter",
        "deep",
        "echo",
        "fail",
        "family",
        "fetch",
        "forbidden",
        "greet",
        "messages",
        "patched",
        "reads",
        "remind",
        "select",
        "spin",
        "square",
        "stubborn",
        "stuck",
        "timers",
        "values",
    ]);
}

#[test]
fn an_entry_point_returns_its_value_and_logs() {
    suite().result_saying("greet", json!("Ada"), json!("Hello, Ada!"), "greeting Ada");
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
    suite().result_saying(
        "messages",
        json!(3),
        json!({"got": [0, 2, 4], "nothing": null, "echoed": 3}),
        r#"{"got":[0,2,4]}"#,
    );
}

#[test]
fn children_are_joined_and_a_failed_child_throws() {
    assert_eq!(
        result("family", json!(4)),
        json!({"values": [0, 1, 4, 9], "caught": "child-failed"})
    );
}

#[test]
fn a_thrown_error_fails_the_workflow_with_its_stack() {
    let stderr = failure("fail", json!("out of stock"), &[]);
    assert!(stderr.contains("RangeError: out of stock"), "{stderr}");
    assert!(stderr.contains("at fail (suite.js:"), "{stderr}");
}

#[test]
fn a_cancelled_workflow_cleans_up_and_ends_cancelled() {
    suite().result_saying(
        "canceller",
        json!("stubborn"),
        json!("child-cancelled"),
        "cleaned up",
    );
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
fn node_modules_timers_weak_references_and_require_are_not_there() {
    for (what, expect) in [
        ("import", "module 'fs' is not available"),
        ("timer", "a workflow waits with 'await ctx.sleep(ms)'"),
        ("weakref", "WeakRef is not defined"),
        ("require", "require is not defined"),
    ] {
        let stderr = failure("forbidden", json!(what), &[]);
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
    // A step limit well past what filling 96 MiB takes on a loaded machine: the memory limit is
    // what must stop it.
    let stderr = failure(
        "bomb",
        Value::Null,
        &["--max-memory", "96MiB", "--step-limit", "120s"],
    );
    assert!(stderr.contains("96 MiB"), "{stderr}");
}

#[test]
fn deep_recursion_goes_to_ten_thousand_calls_and_fails_cleanly_past_them() {
    assert_eq!(result("deep", json!(9_000)), json!(9_000));
    let stderr = failure("deep", json!(50_000), &[]);
    assert!(
        stderr.contains("maximum number of recursive calls"),
        "{stderr}"
    );
    assert!(stderr.contains("more"), "the stack is shortened: {stderr}");
}

#[test]
fn a_workflow_killed_after_its_reads_reads_the_same_when_it_resumes() {
    suite().reads_survive_a_crash();
}

#[test]
fn a_replay_with_a_script_that_does_something_else_names_the_step() {
    // The same entry point, sleeping once rather than twice at first.
    suite().replay_names_the_changed_step(
        "changed.js",
        "export async function timers(ctx, n) {\n  await ctx.sleep(1);\n  return {};\n}\n",
    );
}

#[test]
fn a_script_that_does_not_load_fails_the_build_with_the_reason() {
    suite().refuses_to_build(&[
        ("syntax.js", "export async function f( {\n", "SyntaxError"),
        (
            "missing.js",
            "import { x } from \"./no_such_module.js\";\nexport async function f() {}\n",
            "cannot find module './no_such_module.js'",
        ),
        (
            "none.js",
            "export function f(ctx, x) { return x; }\n",
            "exports no entry point: an entry point is an exported 'async function' (f is \
             exported but not async)",
        ),
        (
            "throws.js",
            "throw new TypeError(\"bad config\");\n",
            "TypeError: bad config",
        ),
        (
            "waits.js",
            "await new Promise(() => {});\nexport async function f() {}\n",
            "waits for something that never comes",
        ),
        (
            "node.js",
            "import fs from \"node:fs\";\nexport async function f() {}\n",
            "module 'fs' is not available",
        ),
        (
            "hoards.js",
            "const hoard = [];\nfor (;;) hoard.push(new Array(1 << 20).fill(0.5));\n",
            "memory",
        ),
        (
            "dollar.js",
            "export async function $f() {}\n",
            "'$f' cannot name an entry point",
        ),
    ]);
}

#[test]
fn typescript_is_refused_with_the_way_to_build_it_and_types_are_printed() {
    let dir = tempdir("js", "typescript");
    let script = dir.join("shop.ts");
    std::fs::write(&script, "export async function f(): Promise<void> {}\n").unwrap();
    let output = wfhost().arg("build").arg(&script).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("compile it to a JavaScript module first"),
        "{}",
        text(&output.stderr)
    );
    let types = wfhost().arg("types").output().unwrap();
    assert!(types.status.success(), "{}", text(&types.stderr));
    let types = text(&types.stdout);
    assert!(types.contains("declare module \"wfhost\""), "{types}");
    assert!(types.contains("export class Context"), "{types}");
}

#[test]
fn packages_in_node_modules_load_as_node_finds_them() {
    let dir = tempdir("js", "packages");
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "package.json",
        r#"{"name": "shop", "type": "module", "dependencies": {"pad": "1", "@acme/money": "1"}}"#,
    );
    // A CommonJS package, which requires a file of its own and a dependency of its own.
    write(
        "node_modules/pad/package.json",
        r#"{"name": "pad", "main": "lib/pad.js", "dependencies": {"repeat": "1"}}"#,
    );
    write(
        "node_modules/pad/lib/pad.js",
        "const repeat = require('repeat');\nconst { fill } = require('./fill');\n\
         module.exports = function pad(s, n) { return repeat(fill, n - s.length) + s; };\n\
         module.exports.version = require('../package.json').name;\n",
    );
    write("node_modules/pad/lib/fill.js", "exports.fill = '*';\n");
    write("node_modules/repeat/package.json", r#"{"name": "repeat"}"#);
    write(
        "node_modules/repeat/index.js",
        "module.exports = (s, n) => s.repeat(Math.max(0, n));\n",
    );
    // An ES module package with `exports` conditions.
    write(
        "node_modules/@acme/money/package.json",
        r#"{"name": "@acme/money", "type": "module", "exports": {".": {"import": "./esm/index.js", "require": "./cjs/index.cjs"}}}"#,
    );
    write(
        "node_modules/@acme/money/esm/index.js",
        "export const cents = (n) => `${(n / 100).toFixed(2)} EUR`;\n",
    );
    // Installed, but not a dependency: not packed.
    write("node_modules/unused/index.js", "export const x = 1;\n");
    write("src/prices.json", r#"{"kettle": 4999}"#);
    write(
        "src/shop.js",
        "import pad, { version } from 'pad';\nimport { cents } from '@acme/money';\n\
         import prices from './prices.json';\n\
         export async function label(ctx, sku) {\n  return [pad(sku, 8), version, cents(prices[sku])];\n}\n",
    );
    let module = dir.join("shop.wasm");
    scripts::build(&dir.join("src/shop.js"), &module);
    let output = wfhost()
        .arg("run")
        .arg(&module)
        .args(["label", "--input", "\"kettle\""])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let value: Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(value, json!(["**kettle", "pad", "49.99 EUR"]));
    // What is not a dependency is not there.
    write(
        "src/other.js",
        "import { x } from 'unused';\nexport async function f() { return x; }\n",
    );
    let output = wfhost()
        .arg("build")
        .arg(dir.join("src/other.js"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("cannot find module 'unused'"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn the_order_example_does_what_the_rust_one_does() {
    scripts::order_example_matches_rust(
        "js",
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-js/shop.js"),
    );
}

#[test]
fn an_outbound_request_goes_through_the_hosts_allowlist() {
    suite().fetches_through_the_allowlist();
}

#[test]
fn the_time_skipping_harness_runs_a_javascript_workflow() {
    suite().skips_time();
}

#[test]
fn messages_and_a_worker_call_survive_a_killed_server() {
    suite().serves_across_a_kill();
}

#[test]
fn a_running_workflow_is_upgraded_to_a_compatible_script() {
    suite().upgrades_a_running_workflow("return total; // v1", "return { total }; // v2");
}

#[test]
fn select_abandons_the_commands_that_lost() {
    assert_eq!(
        result("select", Value::Null),
        json!({"first": 1, "got": [2, 4], "second": 1, "value": 2})
    );
}

#[test]
fn a_promise_nothing_can_settle_fails_the_workflow_rather_than_hanging_it() {
    let stderr = failure("stuck", Value::Null, &[]);
    assert!(
        stderr.contains("awaits a promise that nothing can settle"),
        "{stderr}"
    );
}

#[test]
fn values_are_json_as_json_stringify_writes_them() {
    assert_eq!(
        result("values", Value::Null),
        json!({
            "date": "1970-01-01T00:00:00.000Z",
            "custom": "custom",
            "map": {},
            "nan": null,
            "big": 1e21,
            "negative_zero": 0,
            "whole": 3
        })
    );
    let stderr = failure("values", json!("cycle"), &[]);
    assert!(stderr.contains("a workflow's values are JSON"), "{stderr}");
}

#[test]
fn the_clock_is_read_once_a_step() {
    assert_eq!(
        result("clock", Value::Null),
        json!({"same": true, "moved": true})
    );
}

#[test]
fn linked_packages_and_packages_naming_each_other_are_refused_with_the_reason() {
    let dir = tempdir("js", "links");
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("outside/secret/index.js", "export const secret = 1;\n");
    write(
        "project/package.json",
        r#"{"dependencies": {"linked": "1", "a": "1", "b": "1"}}"#,
    );
    write(
        "project/shop.js",
        "import { secret } from 'linked';\nexport async function f() { return secret; }\n",
    );
    std::fs::create_dir_all(dir.join("project/node_modules")).unwrap();
    std::os::unix::fs::symlink(
        dir.join("outside/secret"),
        dir.join("project/node_modules/linked"),
    )
    .unwrap();
    let output = wfhost()
        .arg("build")
        .arg(dir.join("project/shop.js"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("is a link or not a folder"),
        "{}",
        text(&output.stderr)
    );
    // Two packages whose entries name each other's folders: not found, not a crash.
    std::fs::remove_file(dir.join("project/node_modules/linked")).unwrap();
    write("project/node_modules/a/package.json", r#"{"main": "../b"}"#);
    write("project/node_modules/b/package.json", r#"{"main": "../a"}"#);
    write(
        "project/package.json",
        r#"{"dependencies": {"a": "1", "b": "1"}}"#,
    );
    write(
        "project/shop.js",
        "import a from 'a';\nexport async function f() { return a; }\n",
    );
    let output = wfhost()
        .arg("build")
        .arg(dir.join("project/shop.js"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("cannot find module 'a'"),
        "{}",
        text(&output.stderr)
    );
}
