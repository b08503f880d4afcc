//! What a store guarantees and what the commands say, tried as a user would with the real
//! binary: a closed pipe ends a command quietly, a SQLite file has one host at a time, nothing
//! that could not run is written, damage is shown rather than hidden, messages to the host reach
//! someone, a clean stop leaves the whole store in its file, messages and cancels reach the
//! workflows `run` runs on a shared store, an id started again with another input is refused,
//! a reworded log line replays, and the errors say what was wrong.

mod common;

use common::{text, wait_until, wfhost};

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

use serde_json::Value;
use wfhost::__testing::{Open as _, SqliteStore};
use wfhost::store::Location;
use wfhost::Payload;
use wfhost_test_programs::postgres::Postgres;
use wfhost_test_programs::PROBE;

fn tempdir(name: &str) -> std::path::PathBuf {
    common::tempdir("guarantees", name)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `wfhost ARGS`, waited for.
fn run(args: &[&str]) -> Output {
    wfhost().args(args).output().unwrap()
}

/// `wfhost ARGS`, which must succeed: its stdout.
fn ok(args: &[&str]) -> String {
    let output = run(args);
    assert!(
        output.status.success(),
        "wfhost {args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// A `wfhost` process in the background, its stderr in a file; killed when dropped.
struct Background {
    child: Child,
    log: PathBuf,
}

impl Background {
    fn start(args: &[&str], log: PathBuf) -> Background {
        let child = wfhost()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Background { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for it to end: its status, stdout and stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String, String) {
        let output = std::mem::replace(&mut self.child, spawn_nothing())
            .wait_with_output()
            .unwrap();
        (output.status, text(&output.stdout), self.log())
    }
}

/// A process that has ended, to leave in a `Background` that was waited for.
fn spawn_nothing() -> Child {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let _ = child.wait();
    child
}

impl Drop for Background {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every command that prints ends as a Unix tool does when its reader goes away: killed by
/// SIGPIPE, nothing on stderr (it panicked with "failed printing to stdout" and exit code 101).
#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempdir("pipe");
    let store = dir.join("wf.db");
    let store = path(&store);
    ok(&[
        "run", PROBE, "report", "--input", "3", "--store", store, "--id", "g",
    ]);
    let commands: &[&[&str]] = &[
        &["list", "--store", store],
        &["status", "g", "--store", store],
        &["status", "g", "--json", "--store", store],
        &["result", "g", "--store", store],
        &["history", "--store", store, "g"],
        &["history", "--store", store, "g", "--json"],
        &["inspect", PROBE],
        &["inspect", PROBE, "--json"],
        &["run", PROBE, "echo", "--input", "[1,2,3]"],
        &["replay", "--store", store, "g"],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = wfhost()
            .args(*args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(
            output.status.signal(),
            Some(libc_sigpipe()),
            "wfhost {args:?}: {:?}: {}",
            output.status,
            text(&output.stderr)
        );
        assert_eq!(text(&output.stderr), "", "wfhost {args:?}");
    }
    // A host whose stdout closes stops cleanly before it ends: its store is closed (the
    // write-ahead log emptied into the file) and its lock let go.
    let unfinished = dir.join("unfinished.db");
    let crashed = wfhost()
        .args([
            "run",
            PROBE,
            "nap",
            "--input",
            "1",
            "--store",
            path(&unfinished),
            "--id",
            "z",
        ])
        .env("WFHOST_CRASH_AFTER_COMMITS", "2")
        .output()
        .unwrap();
    assert!(!crashed.status.success());
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let resumed = wfhost()
        .args(["resume", "--store", path(&unfinished)])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        resumed.status.signal(),
        Some(libc_sigpipe()),
        "{}",
        text(&resumed.stderr)
    );
    let wal = std::fs::metadata(dir.join("unfinished.db-wal")).map_or(0, |m| m.len());
    assert_eq!(wal, 0, "the write-ahead log holds {wal} bytes");
    assert_eq!(SqliteStore::holder(&unfinished), None);
    assert_eq!(
        ok(&["result", "z", "--store", path(&unfinished)]).trim(),
        "\"rested\""
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGPIPE's number (13 on every Unix wfhost runs on).
fn libc_sigpipe() -> i32 {
    13
}

/// A SQLite file has one host at a time: a second `serve`, `run --store` or `resume` is refused
/// at once with the holder's pid and what to do instead, while the read-only commands work
/// beside the host; a host killed with SIGKILL leaves no lock behind.
#[test]
fn a_sqlite_store_is_held_by_one_host_and_read_beside_it() {
    let dir = tempdir("held");
    let store = dir.join("ss.db");
    let store = path(&store);
    ok(&[
        "run", PROBE, "echo", "--input", "\"kept\"", "--store", store, "--id", "done",
    ]);
    ok(&[
        "run", PROBE, "tally", "--input", "0", "--store", store, "--id", "t",
    ]);
    let mut serve = Background::start(&["serve", "--store", store], dir.join("serve.log"));
    wait_until("the host serves", || {
        serve.log().contains("as the only host")
    });
    let pid = serve.child.id();
    let second: &[&[&str]] = &[
        &["serve", "--store", store],
        &["run", PROBE, "echo", "--store", store, "--id", "other"],
        &["resume", "--store", store],
    ];
    for args in second {
        let output = run(args);
        assert_eq!(output.status.code(), Some(2), "wfhost {args:?}");
        let said = text(&output.stderr);
        assert!(
            said.contains(&format!("held by another host (pid {pid}: wfhost serve)")),
            "wfhost {args:?}: {said}"
        );
        assert!(said.contains("wfhost serve --store postgres://"), "{said}");
    }
    // Beside the host: the reading commands.
    assert!(ok(&["list", "--store", store]).contains("done"));
    assert_eq!(ok(&["result", "done", "--store", store]).trim(), "\"kept\"");
    let status = ok(&["status", "done", "--store", store]);
    assert!(status.contains("status:   completed"), "{status}");
    assert!(ok(&["history", "--store", store, "t"]).contains("step 1"));
    assert!(ok(&["replay", "--store", store, "t"]).contains("replay the same"));
    assert!(ok(&["backup", "--store", store, path(&dir.join("copy.db"))]).is_empty());
    assert!(ok(&["list", "--store", path(&dir.join("copy.db"))]).contains("done"));
    // Killed: the OS drops its lock, and the next host takes the file.
    let status = ok(&["status", "done", "--store", store]);
    assert!(
        !status.contains("host:"),
        "a finished workflow has no host: {status}"
    );
    serve.kill();
    ok(&["resume", "--store", store]);
    assert_eq!(SqliteStore::holder(store), None);
    let _ = std::fs::remove_dir_all(dir);
}

/// Hosts started at once on a new file do not race: each either runs its workflow to the end
/// or is refused because another holds the file, never a half-made schema or a number taken
/// twice ("table modules already exists", "UNIQUE constraint failed").
#[test]
fn hosts_started_at_once_on_a_new_file_never_race() {
    let dir = tempdir("race");
    let store = dir.join("two.db");
    let store = path(&store);
    let runs: Vec<_> = (0..6)
        .map(|n| {
            let id = format!("r-{n}");
            let child = wfhost()
                .args([
                    "run", PROBE, "nap", "--input", "300", "--store", store, "--id", &id,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (id, child)
        })
        .collect();
    let mut ran = Vec::new();
    for (id, child) in runs {
        let output = child.wait_with_output().unwrap();
        match output.status.code() {
            Some(0) => {
                assert_eq!(text(&output.stdout).trim(), "\"rested\"");
                ran.push(id);
            }
            Some(2) => assert!(
                text(&output.stderr).contains("is held by another host"),
                "{id}: {}",
                text(&output.stderr)
            ),
            other => panic!("{id}: {other:?}: {}", text(&output.stderr)),
        }
    }
    assert!(!ran.is_empty());
    let mut reader = Location::parse(store).open_existing().unwrap();
    let mut listed: Vec<String> = reader
        .workflows(false)
        .unwrap()
        .into_iter()
        .map(|w| {
            assert_eq!(w.state.name(), "done", "{}", w.start.id);
            w.start.id
        })
        .collect();
    listed.sort();
    ran.sort();
    assert_eq!(listed, ran);
    let _ = std::fs::remove_dir_all(dir);
}

/// `run --store` refuses an input over the payload limit before writing anything, as `run`
/// without a store does; so does `start` on a shared store, and an input the entry point does
/// not take.
#[test]
fn a_start_over_the_payload_limit_or_of_the_wrong_type_writes_nothing() {
    let dir = tempdir("payload");
    let big = dir.join("5mb.json");
    std::fs::write(&big, format!("\"{}\"", "x".repeat(5 << 20))).unwrap();
    let store = dir.join("s.db");
    let store = path(&store);
    ok(&[
        "run", PROBE, "echo", "--input", "1", "--store", store, "--id", "small",
    ]);
    let before = std::fs::metadata(store).unwrap().len();
    let output = run(&[
        "run",
        PROBE,
        "echo",
        "--input-file",
        path(&big),
        "--store",
        store,
        "--id",
        "x",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("more than the payload limit of 4194304"),
        "{}",
        text(&output.stderr)
    );
    let typed = run(&[
        "run",
        PROBE,
        "nap",
        "--input",
        r#"{"id":"x"}"#,
        "--store",
        store,
        "--id",
        "y",
    ]);
    assert_eq!(typed.status.code(), Some(2), "{}", text(&typed.stderr));
    assert!(
        text(&typed.stderr).contains("cannot use its input"),
        "{}",
        text(&typed.stderr)
    );
    let listed = ok(&["list", "--store", store]);
    assert!(
        !listed.contains("\nx ") && !listed.contains("\ny "),
        "{listed}"
    );
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(std::fs::metadata(store).unwrap().len() < before + (1 << 20));
    // On a shared store, `start` checks the same before it writes.
    let server = Postgres::shared();
    let shared = server.database("payload");
    for (args, said) in [
        (
            vec![
                "start",
                PROBE,
                "echo",
                "--input-file",
                path(&big),
                "--id",
                "big",
            ],
            "more than the payload limit",
        ),
        (
            vec![
                "start",
                PROBE,
                "nap",
                "--input",
                r#"{"id":"x"}"#,
                "--id",
                "bad-2",
            ],
            "cannot use its input",
        ),
    ] {
        let output = wfhost()
            .args(&args)
            .args(["--store", &shared])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
        assert!(
            text(&output.stderr).contains(said),
            "{}",
            text(&output.stderr)
        );
        assert!(text(&output.stderr).contains("nothing started"));
    }
    let mut reader = Location::parse(&shared).open_existing().unwrap();
    assert!(reader.workflows(false).unwrap().is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

/// The journal of a parent whose child waits, with the host killed; then one step of the
/// parent's journal (or its input) is damaged in the file.
fn damaged_store(dir: &Path, damage: &str) -> PathBuf {
    let store = dir.join("damaged.db");
    let mut host = Background::start(
        &[
            "run",
            PROBE,
            "supervise",
            "--input",
            r#"[null, "nap", 3000]"#,
            "--store",
            path(&store),
            "--id",
            "p",
        ],
        dir.join("run.log"),
    );
    let steps = |id: &str| {
        Location::parse(path(&store))
            .open_existing()
            .ok()
            .and_then(|mut s| s.workflow(id).ok().flatten())
            .map_or(0, |w| w.steps)
    };
    wait_until("the parent joins and the child naps", || {
        steps("p") >= 2 && steps("p/1.0") >= 1
    });
    host.kill();
    assert_eq!(damage_rows(&store, damage), 1, "the damage touched one row");
    store
}

/// Runs the UPDATE `sql` on the SQLite file: the rows it changed. `{steps}` stands for the
/// table of steps: a step is in the log until a host moves it, in `steps` after; both are tried.
fn damage_rows(store: &Path, sql: &str) -> usize {
    let connection = rusqlite::Connection::open(store).unwrap();
    if !sql.contains("{steps}") {
        return connection.execute(sql, []).unwrap();
    }
    ["log", "steps"]
        .iter()
        .map(|table| {
            connection
                .execute(&sql.replace("{steps}", table), [])
                .unwrap()
        })
        .sum()
}

/// A journal step that does not decode is damage, not a failure: `resume` exits 5 naming the
/// workflow and the step, leaves the workflow and its tree as they were (running, their steps
/// as they were), `list` and `status` show them damaged, every later `resume` says so again,
/// and once the store is repaired, `resume` finishes them.
#[test]
fn a_journal_that_does_not_decode_is_shown_as_damage_and_left_as_it_was() {
    let dir = tempdir("damage");
    let store = damaged_store(
        &dir,
        "UPDATE {steps} SET record = substr(record, 1, 3) WHERE seq = 2 AND num = \
         (SELECT num FROM workflows WHERE id = 'p')",
    );
    let store_text = path(&store);
    for _ in 0..2 {
        let resumed = run(&["resume", "--store", store_text]);
        assert_eq!(resumed.status.code(), Some(5), "{}", text(&resumed.stderr));
        let said = text(&resumed.stderr);
        assert!(
            said.contains("step 2 of its journal does not decode"),
            "{said}"
        );
        assert!(said.contains("'p', 'p/1.0'"), "{said}");
        assert_eq!(text(&resumed.stdout), "");
    }
    let listed = ok(&["list", "--store", store_text]);
    assert_eq!(listed.matches("damaged").count(), 2, "{listed}");
    let status = ok(&["status", "p", "--store", store_text]);
    assert!(status.contains("status:   damaged"), "{status}");
    assert!(
        status.contains("step 2 of its journal does not decode"),
        "{status}"
    );
    let child = ok(&["status", "p/1.0", "--json", "--store", store_text]);
    let child: Value = serde_json::from_str(&child).unwrap();
    assert_eq!(child["status"], "damaged");
    assert_eq!(child["steps"], 1);
    let result = run(&["result", "p", "--wait", "--store", store_text]);
    assert_eq!(result.status.code(), Some(5), "{}", text(&result.stderr));
    let mut reader = Location::parse(store_text).open_existing().unwrap();
    for id in ["p", "p/1.0"] {
        assert_eq!(
            reader.workflow(id).unwrap().unwrap().state.name(),
            "running"
        );
    }
    drop(reader);
    let _ = std::fs::remove_dir_all(dir);
}

/// The same for an input that does not decode; once it is put right, `resume` finishes the tree
/// and the damage is no longer shown.
#[test]
fn an_input_that_does_not_decode_is_damage_until_repaired() {
    let dir = tempdir("damaged-input");
    let store = damaged_store(&dir, "UPDATE workflows SET input = x'ff' WHERE id = 'p'");
    let store_text = path(&store);
    let resumed = run(&["resume", "--store", store_text]);
    assert_eq!(resumed.status.code(), Some(5), "{}", text(&resumed.stderr));
    assert!(text(&resumed.stderr).contains("its input does not decode"));
    let input =
        postcard::to_allocvec(&Payload::json_bytes(br#"[null, "nap", 3000]"#.to_vec())).unwrap();
    let connection = rusqlite::Connection::open(&store).unwrap();
    connection
        .execute("UPDATE workflows SET input = ?1 WHERE id = 'p'", [&input])
        .unwrap();
    drop(connection);
    let resumed = run(&["resume", "--store", store_text]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert_eq!(text(&resumed.stdout).trim(), r#"p: {"ok":"rested"}"#);
    let listed = ok(&["list", "--store", store_text]);
    assert!(!listed.contains("damaged"), "{listed}");
    assert_eq!(listed.matches("completed").count(), 2, "{listed}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A workflow killed after sending the host 150-odd of its 400 messages: `resume` prints each
/// message sent after the restart once (and none sent before), and the store keeps all 401.
#[test]
fn messages_to_the_host_after_a_restart_are_printed_and_kept() {
    let dir = tempdir("resumed-messages");
    let store = dir.join("m.db");
    let store_text = path(&store);
    let crashed = wfhost()
        .args([
            "run", PROBE, "report", "--input", "400", "--store", store_text, "--id", "g",
        ])
        .env("WFHOST_CRASH_AFTER_COMMITS", "150")
        .output()
        .unwrap();
    assert!(!crashed.status.success());
    let kept = |id: &str| -> Vec<String> {
        let mut reader = Location::parse(store_text).open_existing().unwrap();
        let Some(workflow) = reader.workflow(id).unwrap() else {
            return Vec::new();
        };
        reader
            .host_messages(workflow.start.num, 0, usize::MAX)
            .unwrap()
            .iter()
            .map(|m| {
                postcard::from_bytes::<Payload>(&m.payload)
                    .unwrap()
                    .decode::<String>()
                    .unwrap()
            })
            .collect()
    };
    let before = kept("g").len();
    assert!(
        before > 0 && before < 400,
        "{before} kept before the restart"
    );
    let resumed = run(&["resume", "--store", store_text]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert_eq!(text(&resumed.stdout).trim(), "g: 400");
    let printed: Vec<String> = text(&resumed.stderr)
        .lines()
        .filter_map(|line| line.split("message to the host: \"").nth(1))
        .map(|rest| rest.split('"').next().unwrap().to_string())
        .collect();
    let mut expected: Vec<String> = (before..400).map(|i| format!("progress {i}")).collect();
    expected.push("from a child".into());
    assert_eq!(printed, expected);
    let all: Vec<String> = (0..400).map(|i| format!("progress {i}")).collect();
    assert_eq!(kept("g"), all);
    assert_eq!(kept("g/401.0"), ["from a child"]);
    let _ = std::fs::remove_dir_all(dir);
}

/// After `run --store` exits, its file holds everything: copied alone (no `-wal` beside it),
/// it lists the workflow and its result.
#[test]
fn after_a_clean_exit_the_file_alone_is_the_store() {
    let dir = tempdir("clean");
    let store = dir.join("clean.db");
    ok(&[
        "run",
        PROBE,
        "echo",
        "--input",
        r#"{"a":1}"#,
        "--store",
        path(&store),
        "--id",
        "c",
    ]);
    assert!(std::fs::metadata(dir.join("clean.db-wal")).map_or(true, |m| m.len() == 0));
    let elsewhere = tempdir("clean-copy");
    let copy = elsewhere.join("copy.db");
    std::fs::copy(&store, &copy).unwrap();
    assert_eq!(
        ok(&["result", "c", "--store", path(&copy)]).trim(),
        r#"{"a":1}"#
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(elsewhere);
}

/// On a shared store, the host `run --store` starts takes the messages and cancels clients send
/// its workflow (they were acknowledged, then lost); a host serving the store runs a workflow
/// that sends the host messages (it failed with "the host no longer listens").
#[test]
fn run_on_a_shared_store_takes_messages_and_cancels_and_serve_keeps_messages_to_the_host() {
    let dir = tempdir("shared-run");
    let server = Postgres::shared();
    let store = server.database("shared_run");
    let waiting = Background::start(
        &[
            "run",
            PROBE,
            "wait_message",
            "--input",
            "60000",
            "--store",
            &store,
            "--id",
            "o-10",
        ],
        dir.join("o-10.log"),
    );
    let cancellable = Background::start(
        &[
            "run",
            PROBE,
            "cleanup_on_cancel",
            "--store",
            &store,
            "--id",
            "o-12",
        ],
        dir.join("o-12.log"),
    );
    for id in ["o-10", "o-12"] {
        wait_until("it waits", || {
            let status = run(&["status", id, "--json", "--store", &store]);
            serde_json::from_slice::<Value>(&status.stdout).is_ok_and(|s| s["steps"] == 1)
        });
    }
    let number = ok(&["send", "o-10", r#""1Z999AA""#, "--store", &store]);
    assert!(number.trim().parse::<u64>().is_ok());
    let (status, out, log) = waiting.finish();
    assert!(status.success(), "{log}");
    assert_eq!(out.trim(), r#""1Z999AA""#);
    run(&["cancel", "o-12", "--store", &store]);
    let (status, out, log) = cancellable.finish();
    assert!(status.success(), "{log}");
    assert_eq!(out.trim(), "\"cleaned up\"");
    // A workflow that reports to the host, served.
    let serve = Background::start(
        &["serve", "--store", &store, "--poll", "50ms"],
        dir.join("serve.log"),
    );
    ok(&[
        "start", PROBE, "report", "--input", "3", "--id", "r", "--store", &store,
    ]);
    let result = ok(&[
        "result",
        "r",
        "--wait",
        "--timeout",
        "120s",
        "--store",
        &store,
    ]);
    assert_eq!(result.trim(), "3");
    let log = serve.log();
    for message in ["progress 0", "progress 1", "progress 2", "from a child"] {
        assert!(
            log.contains(&format!("message to the host: \"{message}\"")),
            "{log}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Starting an id that exists with the same module, entry point and input is idempotent (JSON
/// compared as values); with another, it is refused with exit code 3, saying what differs.
#[test]
fn an_id_started_again_with_another_input_is_refused() {
    let dir = tempdir("conflict");
    let store = dir.join("s.db");
    let store = path(&store);
    let start = |entry: &str, input: &str| {
        run(&[
            "run", PROBE, entry, "--input", input, "--store", store, "--id", "o-4",
        ])
    };
    assert_eq!(
        text(&start("echo", r#"{"id":"o-4"}"#).stdout).trim(),
        r#"{"id":"o-4"}"#
    );
    let same = start("echo", r#"{ "id" : "o-4" }"#);
    assert!(same.status.success());
    assert_eq!(text(&same.stdout).trim(), r#"{"id":"o-4"}"#);
    let other = start("echo", r#"{"id":"o-4-NEW"}"#);
    assert_eq!(other.status.code(), Some(3), "{}", text(&other.stderr));
    assert!(text(&other.stderr).contains("exists with another input"));
    assert_eq!(text(&other.stdout), "");
    let entry = start("measure", r#"{"id":"o-4"}"#);
    assert_eq!(entry.status.code(), Some(3));
    assert!(text(&entry.stderr).contains("another entry point (it runs 'echo'"));
    // `start` on a shared store.
    let server = Postgres::shared();
    let shared = server.database("conflict");
    let start = |input: &str| {
        run(&[
            "start", PROBE, "echo", "--input", input, "--id", "o-4", "--store", &shared,
        ])
    };
    assert!(start("1").status.success());
    assert!(start(" 1 ").status.success());
    let other = start("2");
    assert_eq!(other.status.code(), Some(3), "{}", text(&other.stderr));
    assert!(text(&other.stderr).contains("exists with another input"));
    let _ = std::fs::remove_dir_all(dir);
}

/// A module whose only change is the text of its log lines replays a journal the old one wrote;
/// one that changes what it returns does not.
#[test]
fn a_reworded_log_line_replays_and_a_changed_effect_does_not() {
    let dir = tempdir("logs");
    let store = dir.join("s.db");
    let store = path(&store);
    ok(&[
        "run", PROBE, "logged", "--input", "7", "--store", store, "--id", "l",
    ]);
    let original = std::fs::read(PROBE).unwrap();
    let patched = |from: &str, to: &str, name: &str| -> PathBuf {
        assert_eq!(from.len(), to.len());
        let at: Vec<usize> = original
            .windows(from.len())
            .enumerate()
            .filter(|(_, w)| *w == from.as_bytes())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(at.len(), 1, "'{from}' is in the module once");
        let mut bytes = original.clone();
        bytes[at[0]..at[0] + to.len()].copy_from_slice(to.as_bytes());
        let file = dir.join(name);
        std::fs::write(&file, bytes).unwrap();
        file
    };
    let reworded = patched(
        "the logged workflow starts",
        "THE LOGGED WORKFLOW BEGINS",
        "v2.wasm",
    );
    let replayed = run(&["replay", "--store", store, "l", "--module", path(&reworded)]);
    assert!(replayed.status.success(), "{}", text(&replayed.stderr));
    assert!(text(&replayed.stdout).contains("replay the same"));
    // A changed message to the host is an effect: the replay stops at it.
    ok(&[
        "run", PROBE, "report", "--input", "2", "--store", store, "--id", "r",
    ]);
    let changed = patched("progress ", "PROGRESS ", "v3.wasm");
    let replayed = run(&["replay", "--store", store, "r", "--module", path(&changed)]);
    assert_eq!(
        replayed.status.code(),
        Some(1),
        "{}",
        text(&replayed.stderr)
    );
    assert!(
        text(&replayed.stderr).contains("diverged from its journal at step 1"),
        "{}",
        text(&replayed.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The small errors: a store that fills stops the workflow "resumable" (exit code 4), not
/// "failed", and a host with room finishes it; an empty store path says so; `--id` without a
/// store says to give one; the workflow's log lines name it; a failed workflow's status shows
/// its error, an unclaimed start says it waits for a host, a served one names its host;
/// `history` reads as words; `list` stays aligned for long ids.
#[test]
fn errors_and_statuses_say_what_is_so() {
    let dir = tempdir("errors");
    let store = dir.join("full.db");
    let store_text = path(&store);
    ok(&[
        "run", PROBE, "echo", "--input", "1", "--store", store_text, "--id", "a",
    ]);
    let full = run(&[
        "run",
        PROBE,
        "report",
        "--input",
        "3000",
        "--store",
        store_text,
        "--store-limit",
        "1B",
        "--id",
        "g",
    ]);
    assert_eq!(full.status.code(), Some(4), "{}", text(&full.stderr));
    let said = text(&full.stderr);
    assert!(said.contains("the workflow stopped, resumable"), "{said}");
    assert!(said.contains("is full"), "{said}");
    assert!(!said.contains("failed:"), "{said}");
    let status = ok(&["status", "g", "--store", store_text]);
    assert!(
        status.contains("status:   running (waiting for a host"),
        "{status}"
    );
    let resumed = ok(&["resume", "--store", store_text]);
    assert_eq!(resumed.trim(), "g: 3000");
    // An empty path.
    let empty = run(&["run", PROBE, "echo", "--store", "", "--id", "e"]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(
        text(&empty.stderr).contains("the store's path is empty"),
        "{}",
        text(&empty.stderr)
    );
    // --id without --store.
    let id = run(&["run", PROBE, "echo", "--id", "foo"]);
    assert_eq!(id.status.code(), Some(2));
    assert!(
        text(&id.stderr).contains("give --store too"),
        "{}",
        text(&id.stderr)
    );
    assert!(
        !text(&id.stderr).contains("--input <"),
        "{}",
        text(&id.stderr)
    );
    // Log lines name the workflow.
    let logged = run(&[
        "run", PROBE, "logged", "--input", "1", "--store", store_text, "--id", "named",
    ]);
    assert!(
        text(&logged.stderr).contains("workflow=\"named\""),
        "{}",
        text(&logged.stderr)
    );
    // A failed workflow's status has its error.
    let failed = run(&[
        "run", PROBE, "fail", "--input", "\"boom\"", "--store", store_text, "--id", "f",
    ]);
    assert_eq!(failed.status.code(), Some(1));
    let status = ok(&["status", "f", "--store", store_text]);
    assert!(status.contains("status:   failed"), "{status}");
    assert!(
        status.contains("error:    failed: entry point 'fail' failed: boom"),
        "{status}"
    );
    // History in words: no Rust debug output, no postcard bytes where the value is known.
    ok(&[
        "run",
        PROBE,
        "supervise",
        "--input",
        r#"[null, "echo", 5]"#,
        "--store",
        store_text,
        "--id",
        "sup",
    ]);
    let history = ok(&["history", "--store", store_text, "sup"]);
    assert!(history.contains("#1 spawn 'echo' with 5"), "{history}");
    assert!(history.contains("#1 spawn: started <"), "{history}");
    assert!(history.contains("(sup/1.0)"), "{history}");
    assert!(
        !history.contains("Spawn(") && !history.contains("postcard"),
        "{history}"
    );
    let lines: Vec<Value> = ok(&["history", "--store", store_text, "sup", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let spawned = &lines[2]["events"][0];
    assert_eq!(spawned["answers"], "spawn");
    assert_eq!(spawned["ok"]["id"], "sup/1.0");
    // `list` stays aligned when an id is long.
    let long = "a-workflow-id-that-is-much-longer-than-thirty-two-characters";
    ok(&[
        "run", PROBE, "echo", "--input", "1", "--store", store_text, "--id", long,
    ]);
    let listed = ok(&["list", "--store", store_text]);
    let column = listed.lines().next().unwrap().find("STATUS").unwrap();
    for line in listed.lines().skip(1) {
        let word = &line[column..];
        assert!(
            ["completed", "failed", "running"]
                .iter()
                .any(|s| word.starts_with(s)),
            "misaligned: {line}"
        );
    }
    // On a shared store: an unclaimed start waits for a host, a started one names it.
    let server = Postgres::shared();
    let shared = server.database("statuses");
    let input_file = dir.join("big-input.json");
    std::fs::write(&input_file, format!("\"{}\"", "y".repeat(200 << 10))).unwrap();
    ok(&[
        "start",
        PROBE,
        "echo",
        "--input-file",
        path(&input_file),
        "--id",
        "w",
        "--store",
        &shared,
    ]);
    let status = ok(&["status", "w", "--store", &shared]);
    assert!(
        status.contains("waiting for a host to start it"),
        "{status}"
    );
    let serve = Background::start(
        &["serve", "--store", &shared, "--poll", "50ms"],
        dir.join("serve.log"),
    );
    let echoed = ok(&[
        "result",
        "w",
        "--wait",
        "--timeout",
        "120s",
        "--store",
        &shared,
    ]);
    assert_eq!(echoed.trim().len(), (200 << 10) + 2);
    ok(&[
        "start", PROBE, "nap", "--input", "60000", "--id", "n", "--store", &shared,
    ]);
    wait_until("a host runs it", || {
        ok(&["status", "n", "--store", &shared]).contains("host:")
    });
    let status = ok(&["status", "n", "--store", &shared]);
    assert!(status.contains("status:   running\n"), "{status}");
    drop(serve);
    // A user without privileges is told so, once.
    server.psql(
        &shared,
        "DO $$ BEGIN CREATE ROLE nopriv LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    );
    let nopriv = shared.replace("postgres://postgres@", "postgres://nopriv@");
    let denied = run(&["list", "--store", &nopriv]);
    assert_eq!(denied.status.code(), Some(2));
    let said = text(&denied.stderr);
    assert_eq!(said.matches("in the store").count(), 1, "{said}");
    assert!(said.contains("permission denied"), "{said}");
    assert!(said.contains("privileges"), "{said}");
    let _ = std::fs::remove_dir_all(dir);
}
