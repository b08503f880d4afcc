//! Python workflows, built with `wfhost build suite.py` and run by the real binary: the scenario
//! suite (`tests/python/suite.py`, which imports `helpers.py` beside it), sandboxed, durable and
//! replayable as a Rust workflow is.

mod common;

use common::{tempdir, text, wfhost};

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use serde_json::{json, Value};

/// Builds `script` into `module` with `wfhost build`: the module's bytes.
fn build(script: &Path, module: &Path) -> Vec<u8> {
    let output = wfhost()
        .arg("build")
        .arg(script)
        .arg("--output")
        .arg(module)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim(), module.display().to_string());
    std::fs::read(module).unwrap()
}

fn suite_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/suite.py")
}

/// The suite's module, built once for the whole file.
fn suite() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let module = tempdir("python", "suite").join("suite.wasm");
        build(&suite_script(), &module);
        module
    })
}

fn run(entry: &str, input: Value, flags: &[&str]) -> Output {
    wfhost()
        .arg("run")
        .arg(suite())
        .arg(entry)
        .args(["--input", &input.to_string()])
        .args(flags)
        .output()
        .unwrap()
}

/// The result of a run that must succeed.
fn result(entry: &str, input: Value) -> Value {
    let output = run(entry, input, &[]);
    assert!(output.status.success(), "{entry}: {}", text(&output.stderr));
    serde_json::from_str(text(&output.stdout).trim()).unwrap()
}

/// A run that must succeed with `expected` and say `said` on stderr (a log line, a message to
/// the host).
fn result_saying(entry: &str, input: Value, expected: Value, said: &str) {
    let output = run(entry, input, &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let value: Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(value, expected);
    assert!(
        text(&output.stderr).contains(said),
        "{entry}: {}",
        text(&output.stderr)
    );
}

/// The error line of a run that must fail with exit code 1.
fn failure(entry: &str, input: Value, flags: &[&str]) -> String {
    let output = run(entry, input, flags);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{entry}: {}",
        text(&output.stderr)
    );
    text(&output.stderr)
}

#[test]
fn the_build_prints_the_module_and_inspect_lists_the_entry_points() {
    let output = wfhost().arg("inspect").arg(suite()).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let listed = text(&output.stdout);
    for entry in [
        "abandon",
        "bomb",
        "call",
        "canceller",
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
        "spin",
        "square",
        "stubborn",
        "swallow",
        "timers",
    ] {
        assert!(
            listed
                .lines()
                .any(|line| line.trim() == entry || line.contains(&format!(" {entry}"))),
            "{entry} not in:\n{listed}"
        );
    }
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
    let dir = tempdir("python", "twice");
    let first = build(&suite_script(), &dir.join("first.wasm"));
    assert!(first == build(&suite_script(), &dir.join("second.wasm")));
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

/// The `reads` entry point's first message to the host: what it read before its first sleep.
fn first_reads(stderr: &str) -> Value {
    let line = stderr
        .lines()
        .find(|line| line.contains("\"ctx_random\""))
        .unwrap_or_else(|| panic!("no reads in:\n{stderr}"));
    let (start, end) = (line.find('{').unwrap(), line.rfind('}').unwrap());
    serde_json::from_str(&line[start..=end]).unwrap()
}

#[test]
fn a_workflow_killed_after_its_reads_reads_the_same_when_it_resumes() {
    let dir = tempdir("python", "reads");
    let store = dir.join("store.db");
    let store = store.to_str().unwrap();
    // Commits: the module, the start, the first step (its reads and its message): killed there.
    let crashed = wfhost()
        .arg("run")
        .arg(suite())
        .args(["reads", "--store", store, "--id", "reads"])
        .env("WFHOST_CRASH_AFTER_COMMITS", "3")
        .output()
        .unwrap();
    assert!(!crashed.status.success());
    let before = first_reads(&text(&crashed.stderr));
    let resumed = wfhost()
        .args(["resume", "--store", store])
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let again = wfhost()
        .arg("run")
        .arg(suite())
        .args(["reads", "--store", store, "--id", "reads"])
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", text(&again.stderr));
    let after: Value = serde_json::from_str(text(&again.stdout).trim()).unwrap();
    assert_eq!(after, before);
    // And a replay of its journal with the same module finds nothing different.
    let replay = wfhost()
        .args(["replay", "--store", store, "reads"])
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", text(&replay.stderr));
}

#[test]
fn a_replay_with_a_script_that_does_something_else_names_the_step() {
    let dir = tempdir("python", "replay");
    let store = dir.join("store.db");
    let store = store.to_str().unwrap();
    let output = wfhost()
        .arg("run")
        .arg(suite())
        .args(["timers", "--input", "2", "--store", store, "--id", "t"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    // The same entry point, sleeping once rather than twice at first.
    let changed = dir.join("changed.py");
    std::fs::write(
        &changed,
        "import wfhost\n\n@wfhost.entry\nasync def timers(ctx, n):\n    await ctx.sleep(1)\n    \
         return {}\n",
    )
    .unwrap();
    let built = wfhost().arg("build").arg(&changed).output().unwrap();
    assert!(built.status.success(), "{}", text(&built.stderr));
    let replay = wfhost()
        .args(["replay", "--store", store, "t", "--module"])
        .arg(dir.join("changed.wasm"))
        .output()
        .unwrap();
    assert_eq!(replay.status.code(), Some(1), "{}", text(&replay.stderr));
    let said = format!("{}{}", text(&replay.stdout), text(&replay.stderr));
    assert!(said.contains("step"), "{said}");
}

#[test]
fn a_script_that_does_not_load_fails_the_build_with_its_traceback() {
    let dir = tempdir("python", "broken");
    for (name, source, expect) in [
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
    ] {
        let script = dir.join(name);
        std::fs::write(&script, source).unwrap();
        let output = wfhost().arg("build").arg(&script).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{name}: {}",
            text(&output.stderr)
        );
        assert!(
            text(&output.stderr).contains(expect),
            "{name}: {}",
            text(&output.stderr)
        );
        assert!(!script.with_extension("wasm").exists(), "{name}");
    }
}

#[test]
fn the_order_example_does_what_the_rust_one_does() {
    let dir = tempdir("python", "order");
    let module = dir.join("shop.wasm");
    build(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-py/shop.py"),
        &module,
    );
    for fail_at in [None, Some("reserve"), Some("charge"), Some("ship")] {
        let mut order = json!({"id": "o-1", "sku": "kettle", "quantity": 2, "amount_cents": 4999});
        if let Some(step) = fail_at {
            order["fail_at"] = json!(step);
        }
        let outcome = |module: &Path| -> Value {
            let output = wfhost()
                .arg("run")
                .arg(module)
                .args(["place_order", "--input", &order.to_string()])
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{fail_at:?}: {}",
                text(&output.stderr)
            );
            serde_json::from_str(text(&output.stdout).trim()).unwrap()
        };
        assert_eq!(
            outcome(&module),
            outcome(Path::new(wfhost_test_programs::ORDER)),
            "{fail_at:?}"
        );
    }
}

/// A server on 127.0.0.1 that answers one request: 200, its body reversed, and in `x-seen` the
/// request's method and its `x-` headers.
fn one_answer() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/echo",
        listener.local_addr().unwrap().port()
    );
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let mut seen = vec![line.split_whitespace().next().unwrap().to_string()];
        let mut length = 0;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let Some((name, value)) = header.trim().split_once(':') else {
                break;
            };
            let (name, value) = (name.to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                length = value.parse().unwrap();
            } else if name.starts_with("x-") {
                seen.push(format!("{name}={value}"));
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        body.reverse();
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-seen: {}\r\nconnection: close\r\n\r\n",
            body.len(),
            seen.join(" ")
        )
        .unwrap();
        stream.write_all(&body).unwrap();
    });
    url
}

#[test]
fn an_outbound_request_goes_through_the_hosts_allowlist() {
    let url = one_answer();
    let output = run(
        "fetch",
        json!(url),
        &["--allow-http", &url, "--allow-private-http"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let value: Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(
        value,
        json!({"status": 200, "body": "gnip", "seen": "POST x-one=1 x-two=2"})
    );
    // Not allowed: refused, and the workflow sees why.
    let stderr = failure("fetch", json!(url), &[]);
    assert!(stderr.contains("not-allowed"), "{stderr}");
}
