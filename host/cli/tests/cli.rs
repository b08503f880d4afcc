//! The `wfhost` binary, run the way a user runs it: stdout, stderr and exit codes.

mod common;

use common::wfhost;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wfhost_test_programs::{COUNTDOWN, GUEST_TARGET_DIR, HELLO, PROBE};

fn run(args: &[&str]) -> Output {
    wfhost().args(args).output().expect("run wfhost")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Bad input must never surface as a Rust panic or backtrace.
fn assert_no_panic(output: &Output) {
    let err = stderr(output);
    assert!(!err.contains("panicked at"), "wfhost panicked:\n{err}");
    assert!(
        !err.contains("RUST_BACKTRACE"),
        "wfhost printed a backtrace hint:\n{err}"
    );
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wfhost-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn run_hello_greet_prints_the_greeting_as_json() {
    let output = run(&["run", HELLO, "greet", "--input", "\"world\""]);
    assert_eq!(stdout(&output), "\"Hello, world!\"\n");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn input_can_come_from_a_file() {
    let input = temp_file("names.json", br#"["Ada", "Alan"]"#);
    let output = run(&[
        "run",
        HELLO,
        "greet_all",
        "--input-file",
        input.to_str().unwrap(),
    ]);
    assert_eq!(stdout(&output), "[\"Hello, Ada!\",\"Hello, Alan!\"]\n");
    assert_eq!(output.status.code(), Some(0));
    // Structured log fields reach the host's log, tagged with the pid.
    assert!(
        stderr(&output).contains("greeted pid=1 fields=name=Ada"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_failing_workflow_exits_one_with_its_message() {
    let output = run(&["run", PROBE, "fail", "--input", "\"out of stock\""]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout(&output), "");
    assert!(
        stderr(&output).contains("error: entry point 'fail' failed: out of stock"),
        "{}",
        stderr(&output)
    );
    assert_no_panic(&output);
}

#[test]
fn a_guest_panic_fails_the_process_and_names_entry_point_and_cause() {
    let output = run(&["run", PROBE, "panic", "--input", "\"boom\""]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("error: process <1> (entry point 'panic') panicked: boom (at "),
        "{err}"
    );
}

#[test]
fn a_guest_exit_is_a_failure_with_its_code() {
    let output = run(&["run", PROBE, "exit", "--input", "3"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("process <1> (entry point 'exit') exited with code 3"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_step_that_never_ends_is_stopped_at_the_limit() {
    let output = run(&["run", PROBE, "spin", "--step-limit", "200ms"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(
            "process <1> (entry point 'spin') ran longer than the step time limit of 200ms and was stopped"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_guest_cannot_sleep_on_the_worker_thread() {
    let output = run(&["run", PROBE, "thread_sleep", "--input", "60000"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(
            "process <1> (entry point 'thread_sleep') called WASI poll_oneoff, which would block a \
             worker thread (std::thread::sleep does this); a workflow waits with ctx.sleep"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn memory_beyond_the_limit_is_refused() {
    let within = run(&["run", PROBE, "hog", "--input", "4", "--max-memory", "16MiB"]);
    assert_eq!(stdout(&within), "4\n", "{}", stderr(&within));
    let beyond = run(&[
        "run",
        PROBE,
        "hog",
        "--input",
        "64",
        "--max-memory",
        "16MiB",
    ]);
    assert_eq!(beyond.status.code(), Some(1));
    let err = stderr(&beyond);
    assert!(
        err.contains(
            "process <1> (entry point 'hog') ran out of memory: it asked to grow its memory to \
             66688 KiB, past the limit of 16 MiB (Limits::max_memory_bytes, --max-memory), and then \
             trapped"
        ),
        "{err}"
    );
    assert!(
        err.contains("(its last words on stderr: memory allocation of 67108864 bytes failed)"),
        "{err}"
    );
}

#[test]
fn the_sandbox_shows_nothing_of_the_host() {
    let output = run(&["run", PROBE, "sandbox"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let seen: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        seen,
        serde_json::json!({
            "args": 0,
            "vars": 0,
            "read_root": false,
            "open_file": false,
            "create_file": false,
            "stdin_bytes": 0,
        })
    );
}

#[test]
fn guest_output_goes_to_the_log_with_its_pid() {
    let output = run(&[
        "run",
        PROBE,
        "print",
        "--input",
        r#"["first line", "second line"]"#,
    ]);
    assert_eq!(stdout(&output), "2\n");
    let err = stderr(&output);
    assert!(err.contains("first line pid=1 stream=\"stdout\""), "{err}");
    assert!(err.contains("second line pid=1 stream=\"stdout\""), "{err}");
    assert!(err.contains("done pid=1 stream=\"stderr\""), "{err}");
}

#[test]
fn a_guest_logs_at_most_a_thousand_lines_per_step() {
    let lines: Vec<String> = (0..1500).map(|n| format!("line {n}")).collect();
    let input = serde_json::to_string(&lines).unwrap();
    let output = run(&["run", PROBE, "print", "--input", &input]);
    assert_eq!(stdout(&output), "1500\n");
    let err = stderr(&output);
    let logged = err.matches("wfhost::guest: line ").count();
    assert_eq!(logged, 1000, "{err}");
    assert!(
        err.contains("dropped 500 lines: a process may log 1000 lines per stream per step"),
        "{err}"
    );
    // The other stream has its own budget.
    assert!(err.contains("done pid=1 stream=\"stderr\""), "{err}");
}

#[test]
fn run_help_lists_every_sandbox_limit() {
    let help = stdout(&run(&["run", "--help"]));
    for flag in [
        "--max-memory",
        "--max-table-elements",
        "--max-memories",
        "--max-tables",
        "--step-limit",
        "--fuel",
        "--max-stack",
        "--max-yields",
        "--max-payload",
        "--max-output",
        "--max-module-size",
        "--compile-limit",
        "--max-processes",
        "--max-children",
        "--mailbox-limit",
        "--mailbox-bytes",
        "--max-sleeps",
        "--pooling",
        "--hibernate",
        "--deny",
    ] {
        assert!(help.contains(flag), "{flag} is missing from:\n{help}");
    }
    assert!(help.contains("[default: 64MiB]"), "{help}");
}

#[test]
fn a_workflow_that_hibernates_at_every_wait_finishes_the_same() {
    let output = run(&[
        "run",
        COUNTDOWN,
        "countdown",
        "--hibernate",
        "always",
        "--input",
        r#"{"from": 3, "interval_ms": 10}"#,
    ]);
    assert_eq!(stdout(&output), "\"liftoff\"\n");
    let err = stderr(&output);
    assert_eq!(
        err.lines().filter(|l| l.contains("tick pid=1")).count(),
        3,
        "{err}"
    );

    let bad = run(&["run", COUNTDOWN, "countdown", "--hibernate", "sometimes"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad)
            .contains("'sometimes' is not a hibernation policy: use when-full, always or off"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn countdown_sleeps_logs_and_finishes() {
    let output = run(&[
        "run",
        COUNTDOWN,
        "countdown",
        "--input",
        r#"{"from": 3, "interval_ms": 10}"#,
    ]);
    assert_eq!(stdout(&output), "\"liftoff\"\n");
    let err = stderr(&output);
    let ticks: Vec<&str> = err.lines().filter(|l| l.contains("tick pid=1")).collect();
    assert_eq!(ticks.len(), 3, "{err}");
    assert!(
        ticks[0].ends_with("fields=n=3") && ticks[2].ends_with("fields=n=1"),
        "{err}"
    );

    let both = run(&["run", COUNTDOWN, "both", "--input", "[30, 20]"]);
    assert_eq!(stdout(&both), "{\"slept_ms\":[30,20]}\n");
}

#[test]
fn an_unknown_entry_point_exits_two_and_lists_the_real_ones() {
    let output = run(&["run", HELLO, "shout"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output).trim(),
        "error: unknown entry point 'shout' (module exposes: greet, greet_all)"
    );
    assert_no_panic(&output);
}

#[test]
fn input_that_is_not_json_exits_two() {
    let output = run(&["run", HELLO, "greet", "--input", "world"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("error: --input is not valid JSON"),
        "{}",
        stderr(&output)
    );
    let missing = run(&["run", HELLO, "greet", "--input-file", "/no/such/input.json"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("cannot read the input file /no/such/input.json"));
}

/// Input the entry point cannot use means the workflow could not start: exit code 2, as for
/// input that is not JSON at all.
#[test]
fn input_of_the_wrong_type_exits_two() {
    let output = run(&["run", HELLO, "greet", "--input", "12"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("entry point 'greet' cannot use its input: invalid JSON payload"),
        "{}",
        stderr(&output)
    );
}

/// A module text with a manifest, exports and imports of our choosing.
fn wat_module(manifest: &str, imports: &str, exports: bool) -> Vec<u8> {
    let exports = if exports {
        r#"
        (func (export "wfhost_reserve") (param i32) (result i32) i32.const 0)
        (func (export "wfhost_init") (param i32) (result i64) i64.const 0)
        (func (export "wfhost_step") (param i32) (result i64) i64.const 0)
        (func (export "wfhost_panic_message") (result i64) i64.const 0)"#
    } else {
        ""
    };
    let text = format!(
        r#"(module {imports}
            (memory (export "memory") 1)
            {exports}
            (@custom "wfhost-manifest" "{manifest}"))"#
    );
    wat::parse_str(text).unwrap()
}

#[test]
fn modules_that_are_not_workflows_are_refused_with_the_reason() {
    let hello = std::fs::read(HELLO).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "text.wasm",
            b"this is not wasm".to_vec(),
            "not a WebAssembly module: the file does not start with the wasm magic number",
        ),
        (
            "truncated.wasm",
            hello[..hello.len() / 2].to_vec(),
            "malformed module:",
        ),
        (
            "component.wasm",
            b"\0asm\x0d\0\x01\0".to_vec(),
            "a WebAssembly component or an unknown wasm version",
        ),
        (
            "plain.wasm",
            wat::parse_str("(module (memory (export \"memory\") 1))").unwrap(),
            "not a wfhost workflow: the module has no 'wfhost-manifest' section",
        ),
        (
            "abi99.wasm",
            wat_module("wfhost-abi 99\\nentry go\\n", "", true),
            "the module was built for wfhost ABI version 99, but this host runs versions 2 to 3",
        ),
        (
            "no-exports.wasm",
            wat_module("wfhost-abi 2\\nentry go\\n", "", false),
            "not a wfhost workflow: the module does not export 'wfhost_reserve'",
        ),
        (
            "imports.wasm",
            wat_module(
                "wfhost-abi 2\\nentry go\\n",
                r#"(import "env" "open_socket" (func (param i32)))"#,
                true,
            ),
            "the module imports 'env::open_socket', which wfhost does not provide",
        ),
        (
            "wasi-unknown.wasm",
            wat_module(
                "wfhost-abi 2\\nentry go\\n",
                r#"(import "wasi_snapshot_preview1" "sock_bind" (func (param i32)))"#,
                true,
            ),
            "the module needs an import wfhost does not provide",
        ),
    ];
    for (name, bytes, expected) in cases {
        let path = temp_file(name, &bytes);
        let output = run(&["run", path.to_str().unwrap(), "go"]);
        assert_eq!(output.status.code(), Some(2), "{name}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(expected),
            "{name}: {}",
            stderr(&output)
        );
        assert_no_panic(&output);
    }
    let missing = run(&["run", "/no/such/module.wasm", "go"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("cannot read module /no/such/module.wasm"));
}

#[test]
fn inspect_reads_the_manifest_without_running_anything() {
    let output = run(&["inspect", HELLO]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    let abi = wfhost::contract::abi::VERSION;
    assert!(text.contains(&format!("abi version:  {abi}\n")), "{text}");
    assert!(text.contains("entry points: greet, greet_all\n"), "{text}");

    let json = run(&["inspect", "--json", PROBE]);
    let info: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(info["abi_version"], abi);
    assert_eq!(info["entry_points"][0], "echo");

    let bad = run(&[
        "inspect",
        Path::new(PROBE).parent().unwrap().to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert_no_panic(&bad);
}

#[test]
fn build_prints_the_module_path_last() {
    let root = wfhost_test_programs::workspace_root();
    let output = wfhost()
        .args(["build", root.join("examples/hello").to_str().unwrap()])
        // The guests are already built there, so this is quick.
        .env("CARGO_TARGET_DIR", GUEST_TARGET_DIR)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let last = stdout(&output)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    assert!(last.ends_with("wasm32-wasip1/release/hello.wasm"), "{last}");
    assert!(Path::new(&last).is_file());

    let not_a_crate = run(&["build", "/no/such/crate"]);
    assert_eq!(not_a_crate.status.code(), Some(2));
    assert!(stderr(&not_a_crate).contains("/no/such/crate has no Cargo.toml"));
}

#[test]
fn run_accepts_a_crate_directory() {
    let root = wfhost_test_programs::workspace_root();
    let output = wfhost()
        .args([
            "run",
            root.join("examples/hello").to_str().unwrap(),
            "greet",
        ])
        .args(["--input", "\"crate\""])
        .env("CARGO_TARGET_DIR", GUEST_TARGET_DIR)
        .output()
        .unwrap();
    assert_eq!(
        stdout(&output),
        "\"Hello, crate!\"\n",
        "{}",
        stderr(&output)
    );
}

#[test]
fn usage_errors_exit_two_and_help_explains() {
    let help = run(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    for word in ["build", "run", "inspect", "Exit codes"] {
        assert!(stdout(&help).contains(word), "{word}: {}", stdout(&help));
    }
    let run_help = run(&["run", "--help"]);
    assert!(stdout(&run_help).contains("--input-file"));
    let nothing = run(&[]);
    assert_eq!(nothing.status.code(), Some(2));
    let no_entry = run(&["run", HELLO]);
    assert_eq!(no_entry.status.code(), Some(2));
    let zero_workers = run(&["run", HELLO, "greet", "--workers", "0"]);
    assert_eq!(zero_workers.status.code(), Some(2));
    assert_no_panic(&zero_workers);
}

#[test]
fn a_host_command_not_granted_is_an_error_the_workflow_sees() {
    // The CLI registers no host functions and grants none.
    let output = run(&["run", PROBE, "unknown_command"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let seen: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(seen["kind"], "not-allowed");
}

#[test]
fn a_denied_builtin_is_an_error_the_workflow_sees() {
    let output = run(&[
        "run",
        PROBE,
        "supervise",
        "--input",
        r#"[null, "echo", 1]"#,
        "--deny",
        "spawn",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let seen: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        seen,
        serde_json::json!({
            "error": "not-allowed",
            "message": "this module may not use the 'spawn' command: the host did not grant it (not-allowed)"
        })
    );
}

#[test]
fn extra_modules_can_be_spawned_by_name() {
    let output = run(&[
        "run",
        PROBE,
        "supervise",
        "--input",
        r#"["greeter", "greet", "module"]"#,
        "--module",
        &format!("greeter={HELLO}"),
    ]);
    assert_eq!(
        stdout(&output),
        "{\"ok\":\"Hello, module!\"}\n",
        "{}",
        stderr(&output)
    );
    let malformed = run(&["run", PROBE, "echo", "--module", "no-equals-sign"]);
    assert_eq!(malformed.status.code(), Some(2));
    assert!(stderr(&malformed).contains("is not NAME=PATH"));
}

#[test]
fn events_are_printed_without_changing_the_result() {
    let output = run(&[
        "run",
        PROBE,
        "supervise",
        "--events",
        "--input",
        r#"[null, "measure", 7]"#,
    ]);
    assert_eq!(stdout(&output), "{\"ok\":1}\n");
    let err = stderr(&output);
    for expected in [
        "event: <1> spawned 'supervise'",
        "event: <1> yield #1: spawn (self)::measure",
        "event: <2> spawned 'measure' (parent <1>)",
        "event: <1> completion #1: postcard:02",
        "event: <1> yield #2: join <2>",
        "event: <2> finished: json:1",
        "event: <1> completion #2: json:1",
        "event: <1> finished: json:{\"ok\":1}",
    ] {
        assert!(err.contains(expected), "missing '{expected}' in:\n{err}");
    }
}

#[test]
fn ctrl_c_cancels_the_workflow_which_cleans_up_and_exits() {
    use std::io::{BufRead, BufReader};
    let mut child = wfhost()
        .args(["run", PROBE, "cleanup_on_cancel"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr_lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // Wait until the workflow is running.
    let mut seen = Vec::new();
    for line in stderr_lines.by_ref() {
        let line = line.unwrap();
        let ready = line.contains("waiting for messages");
        seen.push(line);
        if ready {
            break;
        }
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    seen.extend(stderr_lines.map(Result::unwrap));
    let output = child.wait_with_output().unwrap();
    let err = seen.join("\n");
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "\"cleaned up\"\n");
    assert!(
        err.contains("interrupted: cancelling the workflow"),
        "{err}"
    );
    assert!(err.contains("cleanup ran pid=1"), "{err}");
}

#[test]
fn the_examples_give_the_results_their_readmes_state() {
    use wfhost_test_programs::{FANOUT, ORDER, RING};
    let order = r#"{"id":"o-1","sku":"kettle","quantity":2,"amount_cents":4999}"#;
    let completed = run(&["run", ORDER, "place_order", "--input", order]);
    assert_eq!(
        stdout(&completed),
        "{\"order\":\"o-1\",\"status\":\"completed\",\"log\":[\"reserve_stock: reserved 2 (simulated)\",\"charge_payment: charged 4999 cents\",\"ship_order: shipped o-1\"]}\n"
    );
    let failing =
        r#"{"id":"o-2","sku":"kettle","quantity":2,"amount_cents":4999,"fail_at":"ship"}"#;
    let compensated = run(&["run", ORDER, "place_order", "--input", failing]);
    assert_eq!(
        stdout(&compensated),
        "{\"order\":\"o-2\",\"status\":\"compensated\",\"log\":[\"reserve_stock: reserved 2 (simulated)\",\"charge_payment: charged 4999 cents\",\"ship_order: failed\",\"refund_payment: refunded 4999 cents\",\"release_stock: released 2\"]}\n"
    );
    let fanout = run(&[
        "run",
        FANOUT,
        "fanout",
        "--input",
        r#"{"children": 100, "piece": 1000}"#,
    ]);
    assert_eq!(stdout(&fanout), "{\"children\":100,\"total\":4999950000}\n");
    let ring = run(&[
        "run",
        RING,
        "ring",
        "--input",
        r#"{"members": 100, "hops": 10000}"#,
    ]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&ring)).unwrap();
    assert_eq!(
        (report["members"].as_u64(), report["hops"].as_u64()),
        (Some(100), Some(10_000))
    );
}

/// A `WFHOST_*` variable set and empty is unset: `WFHOST_SERVER=` beside `--store` is no second
/// place to look (it was refused with "give one of --store and --server").
#[test]
fn an_empty_setting_is_no_setting() {
    let dir = std::env::temp_dir().join(format!("wfhost-cli-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("wf.db");
    let store = store.to_str().unwrap();
    let ran = run(&[
        "run", PROBE, "echo", "--input", "1", "--store", store, "--id", "e",
    ]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    let listed = wfhost()
        .args(["list", "--store", store])
        .env("WFHOST_SERVER", "")
        .env("WFHOST_TOKEN", "")
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(stdout(&listed).contains('e'), "{}", stdout(&listed));
    // And with the store in an empty variable too: nothing is given, and it says so.
    let nowhere = wfhost()
        .args(["list"])
        .env("WFHOST_SERVER", "")
        .env("WFHOST_STORE", "")
        .output()
        .unwrap();
    assert_eq!(nowhere.status.code(), Some(2), "{}", stderr(&nowhere));
    assert!(
        stderr(&nowhere).contains("where are the workflows?"),
        "{}",
        stderr(&nowhere)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
