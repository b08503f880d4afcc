//! `wfhost replay --all --module NEW.wasm`: before a deploy, which running workflows a new build
//! would break. Each running workflow whose entry point the build exports is replayed with it,
//! beside the server that runs them; one whose journal the build would not repeat is named with
//! the step, and the command exits 1.

mod common;

use std::path::{Path, PathBuf};

use common::http::{put_probe, start_request, HttpServer};
use common::{text, wait_until, wfhost, PATIENCE};
use serde_json::json;
use wfhost_test_programs::PROBE;

/// A copy of the probe module in `dir` with `from` replaced by `to` (of the same length).
fn patched(dir: &Path, from: &str, to: &str, name: &str) -> PathBuf {
    let mut bytes = std::fs::read(PROBE).unwrap();
    let at: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from.as_bytes())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "'{from}' is in the module once");
    bytes[at[0]..at[0] + to.len()].copy_from_slice(to.as_bytes());
    let file = dir.join(name);
    std::fs::write(&file, bytes).unwrap();
    file
}

#[test]
fn replay_all_names_the_running_workflows_a_new_build_would_break() {
    let dir = common::tempdir("replay-all", "break");
    let store = dir.join("wf.db");
    let store = store.to_str().unwrap();
    let server = HttpServer::start(&dir, store, &[]);
    let api = server.client();
    let module = put_probe(&api);
    // One that told the host its progress and waits; one that only waits; one that ended.
    api.start(&start_request(
        "reporter",
        &module,
        "report_then_wait",
        json!(2),
    ))
    .unwrap();
    api.start(&start_request(
        "quiet",
        &module,
        "wait_message",
        json!(600_000),
    ))
    .unwrap();
    api.start(&start_request("done", &module, "echo", json!(1)))
        .unwrap();
    api.result("done", Some(PATIENCE)).unwrap();
    for id in ["reporter", "quiet"] {
        wait_until(&format!("{id} waits for a message"), || {
            api.waits(id).unwrap().message
        });
    }
    let replay_all = |module: &Path, extra: &[&str]| {
        let output = wfhost()
            .args(["replay", "--all", "--store", store, "--module"])
            .arg(module)
            .args(extra)
            .output()
            .unwrap();
        (
            output.status.code(),
            text(&output.stdout),
            text(&output.stderr),
        )
    };
    // The same build repeats both.
    let (code, out, err) = replay_all(Path::new(PROBE), &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let mut lines: Vec<String> = out
        .lines()
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect();
    lines.sort();
    assert_eq!(lines, ["same quiet", "same reporter"], "{out}");
    assert!(err.contains("2 running workflow(s) replayed"), "{err}");
    // A build that says its progress otherwise breaks the one that said it.
    let changed = patched(&dir, "progress ", "PROGRESS ", "v2.wasm");
    let (code, out, err) = replay_all(&changed, &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    let breaks: Vec<&str> = out.lines().filter(|l| l.starts_with("breaks")).collect();
    assert_eq!(breaks.len(), 1, "{out}");
    assert!(breaks[0].starts_with("breaks  reporter"), "{out}");
    assert!(breaks[0].contains("step 1"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("same    quiet")), "{out}");
    assert!(err.contains("1 the same, 1 would break"), "{err}");
    // Only the workflows of another module: none here.
    let (code, out, err) = replay_all(&changed, &["--of", "someone-else"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains("0 running workflow(s) replayed"), "{err}");
    // The workflows ran on, untouched.
    assert_eq!(api.status("reporter").unwrap().status, "running");
}
