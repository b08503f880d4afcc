//! Schedules, through real `wfhost serve` hosts and the `wfhost schedule` command: a schedule
//! every second, fired by two hosts on PostgreSQL of which one is killed, starts exactly one
//! workflow per firing with no firing missed; after five seconds with no host, the catch-up
//! policies run exactly what each promises; and the schedule commands say what they did.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::http::{put_probe, HttpServer};
use common::{text, wait_until, wfhost};
use wfhost::schedules::firing_time;
use wfhost::store::Location;
use wfhost::{Client, ListQuery, WorkflowStatus};
use wfhost_test_programs::postgres::Postgres;
use wfhost_test_programs::PROBE;

/// The workflows schedule `id` started, by the nominal time of their firing.
fn firings(client: &Client, id: &str) -> BTreeMap<u64, WorkflowStatus> {
    let mut all = BTreeMap::new();
    let mut query = ListQuery::new().prefix(format!("{id}@"));
    loop {
        let page = client.list(&query).unwrap();
        for workflow in page.items {
            let at = firing_time(&workflow.id).expect("a firing's id says its time");
            assert!(
                all.insert(at, workflow).is_none(),
                "two workflows for one firing"
            );
        }
        match page.next {
            Some(next) => query = query.after(next),
            None => return all,
        }
    }
}

/// `wfhost schedule ARGS` against `server`: its exit code and stderr.
fn schedule(server: &HttpServer, args: &[&str]) -> (Option<i32>, String, String) {
    let output = wfhost()
        .arg("schedule")
        .args(args)
        .args(["--server", server.url()])
        .output()
        .unwrap();
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

fn create_every_second(server: &HttpServer, id: &str, catch_up: &str) {
    let (code, out, err) = schedule(
        server,
        &[
            "create",
            id,
            PROBE,
            "echo",
            "--every",
            "1s",
            "--input",
            "7",
            "--overlap",
            "allow-all",
            "--catch-up",
            catch_up,
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains(&format!("created {id}: every 1s")), "{err}");
}

#[test]
fn a_schedule_fires_once_a_firing_across_two_hosts_one_of_them_killed() {
    let dir = common::tempdir("schedules", "two-hosts");
    let store = Postgres::shared().database("schedules_two_hosts");
    let mut a = HttpServer::start(&dir, &store, &[]);
    let b = HttpServer::start(&dir, &store, &[]);
    let reader = Client::open(Location::parse(&store));
    create_every_second(&a, "tick", "all:100");
    wait_until("three firings", || firings(&reader, "tick").len() >= 3);
    a.kill();
    wait_until("ten seconds of firings", || {
        firings(&reader, "tick").len() >= 10
    });
    let (code, _, err) = schedule(&b, &["pause", "tick"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err.trim(), "tick paused");
    let fired = firings(&reader, "tick");
    // One workflow a second, none missed, none twice: consecutive firings a second apart.
    let times: Vec<u64> = fired.keys().copied().collect();
    for pair in times.windows(2) {
        assert_eq!(pair[1] - pair[0], 1_000, "{times:?}");
    }
    let api = b.client();
    for workflow in fired.values() {
        let ended = api.result(&workflow.id, Some(common::PATIENCE)).unwrap();
        assert_eq!(ended.result.map(|r| r.get().to_string()), Some("7".into()));
    }
    let shown = api.schedule("tick").unwrap();
    assert_eq!(shown.fired, fired.len() as u64);
    assert!(shown.paused);
    // Paused, it fires no more; listed, it says so.
    let (code, out, _) = schedule(&b, &["list"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("tick  paused  every 1s"), "{out}");
}

#[test]
fn after_five_seconds_with_no_host_each_catch_up_policy_runs_what_it_promises() {
    let dir = common::tempdir("schedules", "catch-up");
    // The on-time firing at the first look after the restart, and of the missed ones: none,
    // the latest, the latest three.
    for (policy, expected) in [("skip", 1), ("last", 2), ("all:3", 4)] {
        let store = dir.join(format!("{}.db", policy.replace(':', "-")));
        caught_up(&dir, &store, policy, expected);
    }
}

fn caught_up(dir: &Path, store: &Path, policy: &str, expected: usize) {
    let store_text = store.to_str().unwrap();
    let reader = Client::open(Location::Sqlite(store.to_path_buf()));
    let mut server = HttpServer::start(dir, store_text, &[]);
    put_probe(&server.client());
    create_every_second(&server, "job", policy);
    wait_until("two firings", || firings(&reader, "job").len() >= 2);
    server.kill();
    let before = firings(&reader, "job");
    // No host for five seconds: what this test is about, not a wait for something to happen.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let server = HttpServer::start(dir, store_text, &[]);
    let after = |reader: &Client| {
        let mut all = firings(reader, "job");
        all.retain(|at, _| !before.contains_key(at));
        all
    };
    // The first look's firings, then one more a second later: the first look is over.
    wait_until("a firing after the first look", || {
        let new = after(&reader);
        let first_started = new.values().map(|w| w.started).min();
        first_started.is_some_and(|first| new.keys().any(|&at| at > first))
    });
    let (code, _, err) = schedule(&server, &["pause", "job"]);
    assert_eq!(code, Some(0), "{err}");
    let new = after(&reader);
    let look = new.values().map(|w| w.started).min().unwrap();
    // The first look started every firing due at it (nominal time at most its time).
    let at_first_look: Vec<u64> = new.keys().copied().filter(|&at| at <= look).collect();
    assert_eq!(
        at_first_look.len(),
        expected,
        "catch-up {policy}: {at_first_look:?} at the look at {look}"
    );
    // The ones it ran are the latest: a second apart, up to the look.
    for pair in at_first_look.windows(2) {
        assert_eq!(pair[1] - pair[0], 1_000, "{at_first_look:?}");
    }
    assert!(look - at_first_look.last().unwrap() <= 1_000 + 500);
}

#[test]
fn schedule_commands_say_what_was_wrong() {
    let dir = common::tempdir("schedules", "words");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    create_every_second(&server, "hourly", "skip");
    // The same id again: refused, nothing changed.
    let (code, _, err) = schedule(
        &server,
        &["create", "hourly", PROBE, "echo", "--every", "1h"],
    );
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("a schedule 'hourly' exists"), "{err}");
    let (code, _, err) = schedule(
        &server,
        &["create", "bad", PROBE, "echo", "--cron", "every day"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("seconds first"), "{err}");
    let (code, _, err) = schedule(&server, &["create", "bad", PROBE, "nope", "--every", "1m"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no entry point 'nope'"), "{err}");
    let (code, _, err) = schedule(&server, &["create", "a@b", PROBE, "echo", "--every", "1m"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("has an '@'"), "{err}");
    let (code, _, err) = schedule(
        &server,
        &[
            "create",
            "paris",
            PROBE,
            "echo",
            "--cron",
            "0 0 9 * * Mon-Fri",
            "--time-zone",
            "Europe/Paris",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    // Triggered now: a workflow of its own, at once.
    let (code, out, err) = schedule(&server, &["trigger", "paris"]);
    assert_eq!(code, Some(0), "{err}");
    let id = out.trim();
    assert!(id.starts_with("paris@"), "{out}");
    let api = server.client();
    let ended = api.result(id, Some(common::PATIENCE)).unwrap();
    assert_eq!(ended.status, "completed");
    // Pause, resume, delete; an unknown schedule is not found.
    assert_eq!(
        schedule(&server, &["pause", "paris"]).2.trim(),
        "paris paused"
    );
    assert_eq!(
        schedule(&server, &["pause", "paris"]).2.trim(),
        "paris was paused already"
    );
    assert_eq!(
        schedule(&server, &["resume", "paris"]).2.trim(),
        "paris resumed"
    );
    assert_eq!(
        schedule(&server, &["delete", "paris"]).2.trim(),
        "paris deleted"
    );
    let (code, _, err) = schedule(&server, &["pause", "paris"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no schedule 'paris'"), "{err}");
    let missing = api.schedule("paris").unwrap_err();
    assert_eq!(missing.status(), Some(404), "{missing}");

    // A firing that can never start (its entry point refuses the input) is skipped, and the
    // schedule goes on rather than trying it for ever.
    let (code, _, err) = schedule(
        &server,
        &[
            "create", "refused", PROBE, "nap", "--every", "1s", "--input", "\"soon\"",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let first = api.schedule("refused").unwrap().next_fire.unwrap();
    wait_until("the schedule moves past two firings", || {
        api.schedule("refused").unwrap().next_fire.unwrap() >= first + 2_000
    });
    let refused = api.schedule("refused").unwrap();
    assert_eq!(refused.fired, 0);
    assert!(refused.last_workflow.is_none());
}
