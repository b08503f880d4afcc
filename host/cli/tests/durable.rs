//! Durable runs with the real binary: a workflow killed after exactly N journal commits (for every
//! N the run reaches) resumes and ends with the result of an uninterrupted run, every message taken
//! once, every yield completed once, no child started twice.

mod common;

use common::{text, wfhost};

use std::collections::{BTreeMap, HashSet};
use std::process::Output;

use serde_json::{json, Value};
use wfhost::__testing::{Open as _, State, StepRecord};
use wfhost::contract::EventKind;
use wfhost::store::Location;
use wfhost_test_programs::postgres::Postgres;
use wfhost_test_programs::PROBE;

/// Children of the mix.
const CHILDREN: u32 = 6;

/// How often the runs of the crash sweep save snapshots: after every step at odd crash points
/// (so that recovery starts from a snapshot, whatever the point), as by default at even ones.
fn snapshot_every(n: u64) -> &'static str {
    if n % 2 == 1 {
        "1"
    } else {
        "1000"
    }
}

fn run_mix(store: &str, crash_after: Option<u64>) -> Output {
    let mut command = wfhost();
    command.args([
        "run",
        PROBE,
        "durable_mix",
        "--input",
        &CHILDREN.to_string(),
        "--store",
        store,
        "--id",
        "mix",
        "--snapshot-every",
        crash_after.map_or("1000", snapshot_every),
        // On PostgreSQL, a crashed run's workflows are claimed once its lease runs out.
        "--lease",
        "300ms",
    ]);
    if let Some(n) = crash_after {
        command.env("WFHOST_CRASH_AFTER_COMMITS", n.to_string());
    }
    command.output().unwrap()
}

fn expected() -> Value {
    // Children 0..6 send i*i (55 in all) and get back i*i + 1 (61 in all). Child 3's saga fails
    // its last activity and undoes the two before it.
    json!({
        "sum": 55,
        "joined": 61,
        "sagas": [
            "reserve-0,charge-0,ship-0",
            "reserve-1,charge-1,ship-1",
            "reserve-2,charge-2,ship-2",
            "compensated charge-3-3,reserve-3-3",
            "reserve-4,charge-4,ship-4",
            "reserve-5,charge-5,ship-5",
        ],
        "extra": 0,
        "distinct": 6,
        "clock_forward": true,
        "randoms_differ": true,
    })
}

/// The mix, its 6 children, 3 activities for each, 2 compensations for child 3.
const WORKFLOWS: usize = 1 + 6 + 6 * 3 + 2;
/// The parent takes 6 messages, each child 1.
const MESSAGES: usize = 12;

/// What the store holds, checked for what must hold after any crash and resume.
struct Audit {
    /// Workflow id → state.
    workflows: BTreeMap<String, State>,
    /// Messages taken by a step, in all.
    messages: usize,
}

fn audit(store: &str) -> Audit {
    let mut store = Location::parse(store).open_existing().unwrap();
    let mut workflows = BTreeMap::new();
    let mut numbers = HashSet::new();
    let mut messages = 0;
    for workflow in store.workflows(false).unwrap() {
        let id = workflow.start.id.clone();
        assert!(
            workflows.insert(id.clone(), workflow.state).is_none(),
            "workflow {id} twice"
        );
        let mut completed = HashSet::new();
        for step in store.steps(workflow.start.num, 0).unwrap() {
            let record = StepRecord::decode(&step.record).unwrap();
            for event in &record.events {
                match event.kind {
                    // A timer, a spawn, a join, a send: each completes once.
                    EventKind::YieldComplete => assert!(
                        completed.insert(event.tag),
                        "{id}: yield {} completed twice",
                        event.tag.0
                    ),
                    EventKind::Message => {
                        messages += 1;
                        assert!(
                            numbers.insert(event.tag),
                            "{id}: message {} taken twice",
                            event.tag.0
                        );
                    }
                    EventKind::Cancel => panic!("{id}: nothing cancels in the mix"),
                }
            }
        }
    }
    Audit {
        workflows,
        messages,
    }
}

fn assert_complete(store: &str, what: &str) {
    let audit = audit(store);
    assert_eq!(
        audit.workflows.len(),
        WORKFLOWS,
        "{what}: {:?}",
        audit.workflows
    );
    let failed: Vec<_> = audit
        .workflows
        .iter()
        .filter(|(_, state)| **state != State::Done)
        .collect();
    // The failing activity is the only failed workflow.
    assert_eq!(failed.len(), 1, "{what}: {failed:?}");
    assert_eq!(failed[0].1, &State::Failed, "{what}");
    assert_eq!(audit.messages, MESSAGES, "{what}");
}

#[test]
fn an_uninterrupted_durable_run_gives_the_result_and_a_journal() {
    let dir = tempdir("uninterrupted");
    uninterrupted(dir.join("wf.db").to_str().unwrap());
    uninterrupted(&Postgres::shared().database("uninterrupted"));
    let _ = std::fs::remove_dir_all(dir);
}

fn uninterrupted(store: &str) {
    let store = &store.to_string();
    let output = run_mix(store, None);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let result: Value = serde_json::from_str(&text(&output.stdout)).unwrap();
    assert_eq!(result, expected());
    assert_complete(store, "uninterrupted");
    let steps = audit(store).workflows;
    // Running the same id again prints the stored result without running anything.
    let again = run_mix(store, None);
    assert_eq!(text(&again.stdout).trim(), result.to_string());
    assert_eq!(audit(store).workflows, steps);
    // `history --json`: one line for the workflow, one per step, events as objects.
    let history = wfhost()
        .args(["history", "--store", store, "mix", "--json"])
        .output()
        .unwrap();
    assert!(history.status.success(), "{}", text(&history.stderr));
    let lines: Vec<Value> = text(&history.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines[0]["id"], "mix");
    assert_eq!(lines[0]["status"], "completed");
    let taken = lines[1..]
        .iter()
        .flat_map(|step| step["events"].as_array().unwrap().iter())
        .filter(|event| event["kind"] == "message")
        .count();
    assert_eq!(taken, CHILDREN as usize);
    // Its journal replays with the module it kept; a module without its entry point is caught.
    let replay = |module: Option<&str>| {
        let mut command = wfhost();
        command.args(["replay", "--store", store, "mix"]);
        if let Some(module) = module {
            command.args(["--module", module]);
        }
        command.output().unwrap()
    };
    let same = replay(None);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same.stderr));
    assert!(
        text(&same.stdout).contains("replay the same"),
        "{}",
        text(&same.stdout)
    );
    let other = replay(Some(wfhost_test_programs::TINY));
    assert_eq!(other.status.code(), Some(1), "{}", text(&other.stderr));
    assert!(
        text(&other.stderr).contains("diverged from its journal at step 0: it does not start"),
        "{}",
        text(&other.stderr)
    );
}

#[test]
fn a_run_killed_after_any_commit_resumes_to_the_same_result() {
    let dir = tempdir("crashes");
    let crashed = sweep(1.., |n| {
        dir.join(format!("crash-{n}.db"))
            .to_str()
            .unwrap()
            .to_string()
    });
    // Every commit of the run is a crash point. How many there are depends on how the writer
    // batches steps: its steps that stay inside the journal (children, messages, joins) share
    // commits with those that wait (24 to 26 here; 50 to 60 when every step waited for its
    // own). This checks that the sweep covered a run's worth of them, not a count of commits.
    assert!(crashed >= 18, "only {crashed} crash points were reached");
    let _ = std::fs::remove_dir_all(dir);
}

/// The same on PostgreSQL, at every third crash point: a fresh database for each.
#[test]
fn a_run_on_postgres_killed_after_any_commit_resumes_to_the_same_result() {
    let server = Postgres::shared();
    let crashed = sweep((1..).step_by(3), |n| server.database(&format!("crash{n}")));
    assert!(crashed >= 6, "only {crashed} crash points were reached");
}

/// Kills the run after commit `n` for each `n` of `points` (up to 400) until a run finishes
/// without reaching it, on the store `store_for(n)`, and checks the resume: the crash points
/// reached.
fn sweep(points: impl Iterator<Item = u64>, mut store_for: impl FnMut(u64) -> String) -> usize {
    let mut crashed = 0;
    for n in points.take_while(|n| *n <= 400) {
        let store = &store_for(n);
        let output = run_mix(store, Some(n));
        if output.status.success() {
            // Fewer commits than n in the whole run: nothing left to crash.
            assert_complete(store, &format!("a run of fewer than {n} commits"));
            break;
        }
        crashed += 1;
        if n % 5 == 0 {
            // A crash while recovering: the resume after it finishes the job.
            let mut resume = wfhost();
            resume
                .args(["resume", "--store", store, "--lease", "300ms"])
                .args(["--snapshot-every", snapshot_every(n)])
                .env("WFHOST_CRASH_AFTER_COMMITS", (n % 7 + 1).to_string());
            let output = resume.output().unwrap();
            assert!(
                output.status.code() != Some(2),
                "crash after commit {n}, then while resuming: {}",
                text(&output.stderr)
            );
        }
        // The resume that must finish holds a lease long enough to be renewed on a loaded
        // machine (a 300 ms one lapsed under the full test suite once); the crashed runs' short
        // leases still make the takeover quick.
        let mut resume = wfhost();
        resume
            .args(["resume", "--store", store, "--lease", "3s"])
            .args(["--snapshot-every", snapshot_every(n)]);
        if n % 4 == 2 {
            // Every waiting step hibernates: a replay must keep its instance from one replayed
            // step to the next.
            resume.args(["--hibernate", "always"]);
        }
        let resumed = resume.output().unwrap();
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "crash after commit {n}: {}",
            text(&resumed.stderr)
        );
        if n == 1 {
            // The first commit is the module; the workflow's start came after it: it never existed.
            assert!(audit(store).workflows.is_empty(), "crash after commit 1");
            assert_eq!(text(&resumed.stdout).trim(), "");
            continue;
        }
        // Running the id again gives its result: from the store if the resume finished it, or
        // because the workflow's end was on disk before the crash.
        let again = run_mix(store, None);
        assert_eq!(
            again.status.code(),
            Some(0),
            "crash after commit {n}: {}",
            text(&again.stderr)
        );
        let result: Value = serde_json::from_str(text(&again.stdout).trim()).unwrap();
        assert_eq!(result, expected(), "crash after commit {n}");
        assert_complete(store, &format!("crash after commit {n}"));
        if let Location::Sqlite(path) = Location::parse(store) {
            let _ = std::fs::remove_file(path);
        }
    }
    crashed
}

fn tempdir(name: &str) -> std::path::PathBuf {
    common::tempdir("durable", name)
}

#[test]
fn a_resumed_workflow_does_not_print_again_what_its_replayed_steps_printed() {
    let dir = tempdir("replay-print");
    let store = dir.join("print.db");
    let store = store.to_str().unwrap();
    let run = |crash_after: Option<u64>| {
        let mut command = wfhost();
        command.args([
            "run",
            PROBE,
            "print_around_sleep",
            "--input",
            // A second's sleep: the first step goes on before it is on disk (a sleep stays
            // inside the journal), so the kill must come before the timer fires.
            r#"["before the sleep", 1000, "after the sleep"]"#,
            "--store",
            store,
            "--id",
            "printer",
        ]);
        if let Some(n) = crash_after {
            command.env("WFHOST_CRASH_AFTER_COMMITS", n.to_string());
        }
        command.output().unwrap()
    };
    // Commits: the module, the start, the first step (which printed and sleeps): killed there.
    let crashed = run(Some(3));
    assert!(!crashed.status.success());
    assert!(text(&crashed.stderr).contains("before the sleep"));
    assert!(!text(&crashed.stderr).contains("after the sleep"));
    let resumed = wfhost()
        .args(["resume", "--store", store])
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let printed = text(&resumed.stderr);
    assert_eq!(printed.matches("after the sleep").count(), 1, "{printed}");
    assert_eq!(printed.matches("before the sleep").count(), 0, "{printed}");
    assert!(text(&resumed.stdout).contains("after the sleep"));
    let _ = std::fs::remove_dir_all(dir);
}

/// `wfhost list` on a store of 100,000 workflows prints one page (`--limit`) and, on stderr,
/// the command for the next, whose `--after` goes on where the page ended.
#[test]
fn list_pages_a_large_store_by_cursor() {
    use wfhost::__testing::{NewWorkflow, Op, SyncMode};
    let path = tempdir("list-pages").join("wf.db");
    {
        let mut store = Location::Sqlite(path.clone())
            .open(SyncMode::Normal)
            .unwrap();
        let input = postcard::to_allocvec(&wfhost::Payload::empty()).unwrap();
        let ops: Vec<Op> = (1..=100_000u64)
            .map(|num| {
                Op::Start(NewWorkflow {
                    num,
                    id: format!("w{num:06}"),
                    parent: None,
                    module: "ab".repeat(32),
                    module_name: "probe".into(),
                    entry: "nap".into(),
                    input: input.clone(),
                    started: num,
                    trace: None,
                })
            })
            .collect();
        store.commit(&ops).unwrap();
    }
    let store = path.to_str().unwrap();
    let first = wfhost()
        .args(["list", "--store", store, "--limit", "10"])
        .output()
        .unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    let lines: Vec<String> = text(&first.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 11, "{lines:?}");
    assert!(lines[1].starts_with("w000001 "), "{lines:?}");
    assert!(lines[10].starts_with("w000010 "), "{lines:?}");
    let stderr = text(&first.stderr);
    let cursor = stderr
        .split_whitespace()
        .skip_while(|word| *word != "--after")
        .nth(1)
        .unwrap_or_else(|| panic!("no cursor in: {stderr}"))
        .to_string();
    let second = wfhost()
        .args([
            "list", "--store", store, "--limit", "10", "--after", &cursor,
        ])
        .output()
        .unwrap();
    assert!(second.status.success(), "{}", text(&second.stderr));
    let lines: Vec<String> = text(&second.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 11, "{lines:?}");
    assert!(lines[1].starts_with("w000011 "), "{lines:?}");
    let last = wfhost()
        .args([
            "list", "--store", store, "--limit", "5", "--prefix", "w09999",
        ])
        .output()
        .unwrap();
    let lines: Vec<String> = text(&last.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert!(lines[5].starts_with("w099994 "), "{lines:?}");
    assert!(
        text(&last.stderr).contains("--after"),
        "{}",
        text(&last.stderr)
    );
    let bad = wfhost()
        .args(["list", "--store", store, "--after", "oops"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("is not a cursor"),
        "{}",
        text(&bad.stderr)
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
