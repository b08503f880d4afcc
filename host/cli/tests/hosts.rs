//! Many `wfhost serve` processes on one PostgreSQL store, started by the client commands: work
//! spreads, a host killed mid-run loses nothing, a host paused past its lease is fenced off, and
//! a start from two clients at once makes one workflow.

mod common;

use common::{text, wait_until, wfhost};

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Stdio};

use serde_json::{json, Value};
use wfhost::__testing::{Open as _, StepRecord};
use wfhost::contract::EventKind;
use wfhost::store::Location;
use wfhost_test_programs::postgres::Postgres;
use wfhost_test_programs::PROBE;

fn tempdir(name: &str) -> std::path::PathBuf {
    common::tempdir("hosts", name)
}

/// A `wfhost serve` on `store`, its stderr in `log`; killed when dropped.
struct Serve {
    child: Child,
    log: PathBuf,
}

impl Serve {
    fn start(store: &str, log: PathBuf) -> Serve {
        Serve::with_lease(store, log, "1s")
    }

    fn with_lease(store: &str, log: PathBuf, lease: &str) -> Serve {
        Serve::with(store, log, lease, "50ms")
    }

    fn with(store: &str, log: PathBuf, lease: &str, poll: &str) -> Serve {
        let file = std::fs::File::create(&log).unwrap();
        let child = wfhost()
            .args(["serve", "--store", store, "--lease", lease, "--poll", poll])
            // The joins by number below are of workflows that are not the joiner's children.
            .args(["--workers", "2", "--grace", "1s", "--allow-any-process"])
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        Serve { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its host numbers, in the order it served as them.
    fn hosts(&self) -> Vec<i64> {
        self.log()
            .lines()
            .filter_map(|line| line.split(" as host ").nth(1))
            .filter_map(|n| n.trim().parse().ok())
            .collect()
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(store: &str, entry: &str, input: &str, id: &str) {
    let output = wfhost()
        .args([
            "start", PROBE, entry, "--input", input, "--id", id, "--store", store,
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim(), id);
}

fn result(store: &str, id: &str) -> Value {
    let output = wfhost()
        .args([
            "result",
            id,
            "--wait",
            "--timeout",
            "120s",
            "--store",
            store,
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{id}: {}", text(&output.stderr));
    serde_json::from_str(text(&output.stdout).trim()).unwrap()
}

/// The mix's result with 6 children (as `durable.rs` checks it on one host).
fn mix_result() -> Value {
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

/// Checks every journal of the store: each workflow once, each yield completed once, each message
/// taken once. The workflows by state.
fn audit(store: &str) -> BTreeMap<&'static str, usize> {
    let mut store = Location::parse(store).open_existing().unwrap();
    let mut ids = HashSet::new();
    let mut taken = HashSet::new();
    let mut states = BTreeMap::new();
    for workflow in store.workflows(false).unwrap() {
        let id = workflow.start.id.clone();
        assert!(ids.insert(id.clone()), "workflow {id} twice");
        *states.entry(workflow.state.name()).or_insert(0) += 1;
        let mut completed = HashSet::new();
        for step in store.steps(workflow.start.num, 0).unwrap() {
            let record = StepRecord::decode(&step.record).unwrap();
            for event in &record.events {
                match event.kind {
                    EventKind::YieldComplete => assert!(
                        completed.insert(event.tag),
                        "{id}: yield {} completed twice",
                        event.tag.0
                    ),
                    EventKind::Message => assert!(
                        taken.insert(event.tag),
                        "{id}: message {} taken twice",
                        event.tag.0
                    ),
                    EventKind::Cancel => {}
                }
            }
        }
    }
    states
}

/// The host that owns the most unfinished workflows named `prefix...`, and how many.
fn busiest(server: &Postgres, store: &str, prefix: &str) -> Option<(i64, usize)> {
    let rows = server.psql(
        store,
        &format!(
            "SELECT owner, count(*) FROM wfhost.workflows WHERE state = 0 AND owner IS NOT NULL \
             AND id LIKE '{prefix}%' GROUP BY owner ORDER BY 2 DESC LIMIT 1"
        ),
    );
    let (owner, count) = rows.split_once('|')?;
    Some((owner.parse().ok()?, count.parse().ok()?))
}

/// Mixes of 27 workflows each (the mix, 6 children, 18 activities, 2 compensations).
const MIXES: usize = 37;
const NAPS: usize = 12;
/// Workflows that send to a workflow probably on another host, and those they send to.
const PAIRS: usize = 10;

#[test]
fn three_hosts_share_a_thousand_workflows_and_one_killed_mid_run_loses_nothing() {
    // 37 mixes of 27 workflows, 12 naps, 10 senders and their 10 receivers: 1,031 workflows.
    let dir = tempdir("kill");
    let server = Postgres::shared();
    let store = server.database("three_hosts");
    let mut hosts: Vec<Serve> = (0..3)
        .map(|i| Serve::start(&store, dir.join(format!("host-{i}.log"))))
        .collect();
    wait_until("every host serves", || {
        hosts.iter().all(|h| !h.hosts().is_empty())
    });
    for n in 0..MIXES {
        start(&store, "durable_mix", "6", &format!("mix-{n}"));
    }
    // Receivers and senders, each pair most likely on two hosts: the message goes through the
    // store.
    for n in 0..PAIRS {
        start(&store, "wait_message", "60000", &format!("receiver-{n}"));
    }
    for n in 0..PAIRS {
        let id = format!("receiver-{n}");
        let status = wfhost()
            .args(["status", &id, "--json", "--store", &store])
            .output()
            .unwrap();
        let status: Value = serde_json::from_str(text(&status.stdout).trim()).unwrap();
        let pid = status["pid"].as_u64().unwrap();
        start(&store, "send_to", &pid.to_string(), &format!("sender-{n}"));
    }
    // Naps that are still asleep when the kill comes.
    for n in 0..NAPS {
        start(&store, "nap", "5000", &format!("nap-{n}"));
    }
    // Kill the host that owns the most sleeping naps, with nothing flushed.
    wait_until("the naps are claimed", || {
        server.psql(
            &store,
            "SELECT count(*) FROM wfhost.workflows WHERE id LIKE 'nap-%' AND owner IS NULL",
        ) == "0"
    });
    let (victim, owned) = busiest(server, &store, "nap-").expect("a host owns naps");
    assert!(owned > 0);
    let index = hosts
        .iter()
        .position(|h| h.hosts().contains(&victim))
        .expect("the victim is one of ours");
    hosts[index].signal("-KILL");
    let killed = hosts.remove(index);
    // Everything finishes on the two others, with the results of one host alone.
    for n in 0..NAPS {
        assert_eq!(
            result(&store, &format!("nap-{n}")),
            json!("rested"),
            "nap-{n}"
        );
    }
    for n in 0..MIXES {
        assert_eq!(result(&store, &format!("mix-{n}")), mix_result(), "mix-{n}");
    }
    for n in 0..PAIRS {
        assert_eq!(result(&store, &format!("sender-{n}")), json!("sent"));
        assert_eq!(result(&store, &format!("receiver-{n}")), json!("hello"));
    }
    let states = audit(&store);
    // In each mix one activity fails, by design.
    assert_eq!(states.get("done"), Some(&(MIXES * 26 + NAPS + 2 * PAIRS)));
    assert_eq!(states.get("failed"), Some(&MIXES));
    assert_eq!(states.get("running"), None);
    // The naps the killed host owned were taken over: each counts a takeover.
    let taken_over = server.psql(
        &store,
        "SELECT count(*) FROM wfhost.workflows WHERE id LIKE 'nap-%' AND token > 1",
    );
    assert!(
        taken_over.parse::<usize>().unwrap() >= owned,
        "{taken_over} < {owned}"
    );
    // Work spread: each surviving host ran some.
    for host in &hosts {
        let ran = server.psql(
            &store,
            &format!(
                "SELECT count(*) FROM wfhost.workflows WHERE owner = {}",
                host.hosts()[0]
            ),
        );
        assert_ne!(ran, "0", "a host ran nothing:\n{}", host.log());
    }
    drop(killed);
    // A graceful stop gives back nothing left to run and ends the lease.
    for host in &hosts {
        host.signal("-TERM");
    }
    for mut host in hosts {
        let status = host.child.wait().unwrap();
        assert!(status.success(), "{}", host.log());
        let id = host.hosts()[0];
        assert_eq!(
            server.psql(
                &store,
                &format!("SELECT dead FROM wfhost.hosts WHERE id = {id}")
            ),
            "t"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_host_paused_past_its_lease_is_fenced_off_and_nothing_is_journaled_twice() {
    let dir = tempdir("pause");
    let server = Postgres::shared();
    let store = server.database("paused");
    let paused = Serve::start(&store, dir.join("paused.log"));
    wait_until("the first host serves", || !paused.hosts().is_empty());
    let first = paused.hosts()[0];
    for n in 0..4 {
        start(&store, "nap", "1500", &format!("nap-{n}"));
    }
    wait_until("the first host owns the naps", || {
        busiest(server, &store, "nap-") == Some((first, 4))
    });
    paused.signal("-STOP");
    // Another host takes the naps over once the lease runs out, and runs them to the end.
    let other = Serve::start(&store, dir.join("other.log"));
    for n in 0..4 {
        assert_eq!(result(&store, &format!("nap-{n}")), json!("rested"));
    }
    assert_eq!(
        server.psql(
            &store,
            &format!("SELECT dead FROM wfhost.hosts WHERE id = {first}")
        ),
        "t"
    );
    // Woken, the first host tries to journal the naps' next steps: refused by the fence, it
    // starts again as a new host.
    paused.signal("-CONT");
    wait_until("the paused host starts again as a new host", || {
        paused.hosts().len() >= 2
    });
    assert!(paused.log().contains("lost its lease"), "{}", paused.log());
    // Each nap: one start, one sleep, one end; no step twice.
    let steps = server.psql(
        &store,
        "SELECT w.id, count(s.seq) FROM wfhost.workflows w JOIN wfhost.steps s ON s.num = w.num \
         GROUP BY w.id ORDER BY w.id",
    );
    assert_eq!(steps, "nap-0|2\nnap-1|2\nnap-2|2\nnap-3|2");
    let states = audit(&store);
    assert_eq!(states.get("done"), Some(&4));
    drop((paused, other));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_start_from_two_clients_at_once_is_one_workflow() {
    let server = Postgres::shared();
    let store = server.database("twice");
    for round in 0..5 {
        let id = format!("same-{round}");
        let clients: Vec<Child> = (0..2)
            .map(|_| {
                wfhost()
                    .args(["start", PROBE, "nap", "--input", "10", "--id", &id])
                    .args(["--store", &store])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut said = Vec::new();
        for client in clients {
            let output = client.wait_with_output().unwrap();
            assert!(output.status.success(), "{}", text(&output.stderr));
            said.push(text(&output.stderr));
        }
        let started = said.iter().filter(|s| s.starts_with("started")).count();
        assert_eq!(started, 1, "{said:?}");
        assert_eq!(
            server.psql(
                &store,
                &format!("SELECT count(*) FROM wfhost.workflows WHERE id = '{id}'")
            ),
            "1"
        );
    }
    // A host runs them all; their results are read from the store.
    let dir = tempdir("twice");
    let _host = Serve::start(&store, dir.join("host.log"));
    for round in 0..5 {
        assert_eq!(result(&store, &format!("same-{round}")), json!("rested"));
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn client_commands_say_what_is_wrong() {
    let server = Postgres::shared();
    let store = server.database("client_errors");
    let run = |args: &[&str]| {
        wfhost()
            .args(args)
            .args(["--store", &store])
            .output()
            .unwrap()
    };
    let missing = run(&["start", PROBE, "no_such_entry"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("has no entry point 'no_such_entry'"));
    let bad = run(&["start", PROBE, "nap", "--input", "{oops"]);
    assert!(text(&bad.stderr).contains("--input is not valid JSON"));
    let empty = run(&["result", "nobody"]);
    assert!(
        text(&empty.stderr).contains("holds no wfhost store"),
        "{}",
        text(&empty.stderr)
    );
    start(&store, "nap", "60000", "sleeper");
    let unknown = run(&["result", "nobody"]);
    assert!(
        text(&unknown.stderr).contains("no workflow 'nobody'"),
        "{}",
        text(&unknown.stderr)
    );
    let unfinished = run(&["result", "sleeper"]);
    assert!(text(&unfinished.stderr).contains("has not finished"));
    let status = run(&["status", "sleeper", "--json"]);
    let status: Value = serde_json::from_str(text(&status.stdout).trim()).unwrap();
    assert_eq!(status["status"], "running");
    // A SQLite file is one host's own: no client starts there.
    let file = tempdir("client-sqlite").join("wf.db");
    let sqlite = wfhost()
        .args(["start", PROBE, "nap", "--store", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        text(&sqlite.stderr).contains("client commands need a store hosts share"),
        "{}",
        text(&sqlite.stderr)
    );
}

fn owner(server: &Postgres, store: &str, id: &str) -> String {
    server.psql(
        store,
        &format!("SELECT coalesce(owner, 0) FROM wfhost.workflows WHERE id = '{id}'"),
    )
}

#[test]
fn messages_and_cancels_reach_workflows_on_other_hosts() {
    let dir = tempdir("across");
    let server = Postgres::shared();
    let store = server.database("across");
    let first = Serve::with_lease(&store, dir.join("first.log"), "10s");
    wait_until("the first host serves", || !first.hosts().is_empty());
    let a = first.hosts()[0].to_string();
    start(&store, "wait_message", "60000", "receiver");
    start(&store, "tally", "3", "tally");
    start(&store, "cleanup_on_cancel", "null", "cancellable");
    for id in ["receiver", "tally", "cancellable"] {
        wait_until("the first host owns it", || owner(server, &store, id) == a);
    }
    // The second host takes the sender while the first is paused (well within its lease).
    let second = Serve::with_lease(&store, dir.join("second.log"), "10s");
    wait_until("the second host serves", || !second.hosts().is_empty());
    let b = second.hosts()[0].to_string();
    first.signal("-STOP");
    let status = wfhost()
        .args(["status", "receiver", "--json", "--store", &store])
        .output()
        .unwrap();
    let status: Value = serde_json::from_str(text(&status.stdout).trim()).unwrap();
    let pid = status["pid"].as_u64().unwrap();
    start(&store, "send_to", &pid.to_string(), "sender");
    wait_until("the second host owns the sender", || {
        owner(server, &store, "sender") == b
    });
    first.signal("-CONT");
    // Workflow to workflow across hosts, through the store.
    assert_eq!(result(&store, "sender"), json!("sent"));
    assert_eq!(result(&store, "receiver"), json!("hello"));
    // Client to workflow: three numbers, each delivered once.
    for n in [5, 7, 30] {
        let sent = wfhost()
            .args(["send", "tally", &n.to_string(), "--store", &store])
            .output()
            .unwrap();
        assert!(sent.status.success(), "{}", text(&sent.stderr));
    }
    assert_eq!(result(&store, "tally"), json!([3, 42]));
    // A cancel from a client: the workflow cleans up and says so.
    let cancel = wfhost()
        .args(["cancel", "cancellable", "--store", &store])
        .output()
        .unwrap();
    assert!(text(&cancel.stderr).contains("asked cancellable to cancel"));
    assert_eq!(result(&store, "cancellable"), json!("cleaned up"));
    let again = wfhost()
        .args(["cancel", "cancellable", "--store", &store])
        .output()
        .unwrap();
    assert!(
        text(&again.stderr).contains("has ended (completed)"),
        "{}",
        text(&again.stderr)
    );
    // Joins of workflows the other host ran and runs: answered from the store, at once and
    // when it ends. The second host takes the nap and the first the joins, each while the
    // other is paused (well within its lease).
    let pid_of = |id: &str| -> u64 {
        let status = wfhost()
            .args(["status", id, "--json", "--store", &store])
            .output()
            .unwrap();
        let status: Value = serde_json::from_str(text(&status.stdout).trim()).unwrap();
        status["pid"].as_u64().unwrap()
    };
    first.signal("-STOP");
    start(&store, "nap", "1500", "late");
    wait_until("the second host owns the nap", || {
        owner(server, &store, "late") == b
    });
    first.signal("-CONT");
    second.signal("-STOP");
    start(
        &store,
        "join_pid",
        &pid_of("tally").to_string(),
        "join-ended",
    );
    start(
        &store,
        "join_pid",
        &pid_of("late").to_string(),
        "join-running",
    );
    for id in ["join-ended", "join-running"] {
        wait_until("the first host owns the join", || {
            owner(server, &store, id) == a
        });
    }
    second.signal("-CONT");
    assert_eq!(result(&store, "join-ended"), json!({ "ok": [3, 42] }));
    assert_eq!(result(&store, "join-running"), json!({ "ok": "rested" }));
    let nobody = wfhost()
        .args(["send", "nobody", "1", "--store", &store])
        .output()
        .unwrap();
    assert!(text(&nobody.stderr).contains("no running workflow 'nobody'"));
    // Both stayed the hosts they were: nothing was taken over.
    assert_eq!(first.hosts().len(), 1, "{}", first.log());
    assert_eq!(owner(server, &store, "receiver"), a);
    audit(&store);
    drop((first, second));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_client_start_wakes_a_host_that_polls_rarely() {
    let dir = tempdir("notify");
    let server = Postgres::shared();
    let store = server.database("notify");
    // Polling every 10 minutes: only the notification can bring the work in time.
    let host = Serve::with(&store, dir.join("host.log"), "10s", "10m");
    wait_until("the host serves", || !host.hosts().is_empty());
    for n in 0..3 {
        let id = format!("woken-{n}");
        start(&store, "nap", "1", &id);
        let output = wfhost()
            .args([
                "result",
                &id,
                "--wait",
                "--timeout",
                "60s",
                "--store",
                &store,
            ])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        assert_eq!(text(&output.stdout).trim(), "\"rested\"");
    }
    drop(host);
    let _ = std::fs::remove_dir_all(dir);
}
