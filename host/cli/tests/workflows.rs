//! Workflows run with the `wfhost` binary as a new user would: floods, hogs, messages to the
//! host, the event printout, the logs of hibernation, and the module cache.

mod common;

use common::wfhost;

use std::process::{Command, Output};

use serde_json::{json, Value};
use wfhost_test_programs::PROBE;

fn run(args: &[&str]) -> Output {
    wfhost().args(args).output().expect("run wfhost")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn result(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
    serde_json::from_str(&stdout(output)).expect("a JSON result")
}

/// The case that killed the victim before: a flooder sending 3 MiB messages to a victim inside a
/// sleep. The messages wait in the victim's 32 MiB mailbox; the flooder is refused after ten.
#[test]
fn a_flood_cannot_kill_a_sleeping_workflow() {
    let output = run(&[
        "run",
        PROBE,
        "flood_victim",
        "--input",
        &json!([3 << 20, 300]).to_string(),
        "--mailbox-bytes",
        "32MiB",
    ]);
    let result = result(&output);
    assert_eq!(result["flood"]["sent"], 10, "{result}");
    assert_eq!(result["flood"]["refused"]["error"], "mailbox-full");
    assert_eq!(
        (result["received"].clone(), result["bytes"].clone()),
        (json!(10), json!(30 << 20))
    );
}

/// Two workflows burning 250 ms per step (under a 300 ms step limit) on two workers do not keep 200
/// children that sleep 100 ms from finishing.
#[test]
fn hogs_do_not_keep_sleepers_from_finishing() {
    let output = run(&[
        "run",
        PROBE,
        "crowd",
        "--input",
        "[2, 200]",
        "--workers",
        "2",
        "--step-limit",
        "300ms",
    ]);
    assert_eq!(result(&output), json!(200));
}

#[test]
fn a_workflow_that_never_stops_asking_to_run_ends_at_its_cpu_time_limit() {
    let output = run(&[
        "run",
        PROBE,
        "hog_loop",
        "--input",
        "50",
        "--max-cpu",
        "300ms",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "(entry point 'hog_loop') used up its CPU time limit of 300ms over its life and was \
             stopped (Limits::max_cpu_time, --max-cpu)"
        ),
        "{}",
        stderr(&output)
    );
    let bad = run(&["run", PROBE, "echo", "--max-cpu", "lots"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("'lots' is not a duration"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn messages_to_the_host_are_printed_as_they_come() {
    let output = run(&["run", PROBE, "send-report", "--input", "2"]);
    assert_eq!(result(&output), json!(2));
    let lines: Vec<String> = stderr(&output)
        .lines()
        .filter(|line| line.starts_with("message from"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        [
            r#"message from <1>: "progress 0""#,
            r#"message from <1>: "progress 1""#,
            r#"message from <2>: "from a child""#,
        ]
    );
}

/// `--events` shows large payloads cut, with their size, not whole.
#[test]
fn events_cut_large_payloads() {
    let big = json!([null, "measure", "x".repeat(300_000)]).to_string();
    let input = std::env::temp_dir().join(format!("wfhost-big-input-{}", std::process::id()));
    std::fs::write(&input, big).unwrap();
    let output = run(&[
        "run",
        PROBE,
        "supervise",
        "--input-file",
        input.to_str().unwrap(),
        "--events",
    ]);
    std::fs::remove_file(&input).unwrap();
    assert_eq!(result(&output), json!({ "ok": 300_002 }));
    let err = stderr(&output);
    assert!(err.contains("... (300002 bytes in all)"), "{err}");
    let longest = err.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 1_000, "a line of {longest} bytes");
}

/// At `-vv`, the log says when a process hibernates (with what it saved) and is restored.
#[test]
fn hibernation_and_restores_are_logged_at_debug() {
    let output = run(&[
        "-vv",
        "run",
        PROBE,
        "nap",
        "--input",
        "20",
        "--hibernate",
        "always",
    ]);
    assert_eq!(result(&output), json!("rested"));
    let err = stderr(&output);
    assert!(err.contains("process hibernated"), "{err}");
    assert!(err.contains("saved="), "{err}");
    assert!(err.contains("process restored into"), "{err}");
}

/// A second run of the same module loads its compiled code from the cache instead of compiling,
/// also for a user whose umask lets their group write new files (the default on many
/// distributions); `--no-module-cache` compiles even where the environment names a cache.
#[test]
fn a_second_run_does_not_compile_again() {
    let dir = std::env::temp_dir().join(format!("wfhost-cli-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run_once = || {
        let output = Command::new("sh")
            .args(["-c", "umask 002 && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_wfhost"))
            .env_remove("RUST_LOG")
            .env("WFHOST_MODULE_CACHE", &dir)
            .args(["-vv", "run", PROBE, "echo", "--input", "1"])
            .output()
            .expect("run wfhost");
        assert_eq!(result(&output), json!(1));
        stderr(&output)
            .lines()
            .filter(|line| line.contains("wfhost::wasm::cache"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let first = run_once();
    assert!(first.contains("compiled in"), "{first}");
    let second = run_once();
    assert!(
        second.contains("loaded its compiled code from the module cache"),
        "{second}"
    );
    assert!(!second.contains("compiled in"), "{second}");
    let uncached = run(&[
        "-vv",
        "run",
        PROBE,
        "echo",
        "--input",
        "1",
        "--no-module-cache",
    ]);
    assert!(stderr(&uncached).contains("compiled in"));
    std::fs::remove_dir_all(&dir).unwrap();
}
