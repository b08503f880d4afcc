//! `wfhost upgrade`, through a real `wfhost serve --http`: a new build that would not repeat a
//! running workflow's journal is refused with the step named and changes nothing; one that would
//! switches it (paused, it stays paused), survives `kill -9`, and the workflow finishes with the
//! new code's result; `ctx.patched` takes the new branch where the upgrade came before the patch
//! point and the old one where the old code passed it. `--all` upgrades every running workflow
//! the build can run. On SQLite and on PostgreSQL.

mod common;

use std::path::{Path, PathBuf};

use common::http::{put_probe, start_request, HttpServer};
use common::{text, wait_until, wfhost, PATIENCE};
use serde_json::json;
use wfhost_test_programs::postgres::Postgres;

/// The probe module as version `v` of its `versioned` code, written to `dir`.
fn version(dir: &Path, v: u8) -> PathBuf {
    let file = dir.join(format!("v{v}.wasm"));
    std::fs::write(&file, wfhost_test_programs::probe_version(v)).unwrap();
    file
}

fn send(api: &wfhost_client::Client, id: &str, n: u64) {
    api.send(id, &serde_json::value::to_raw_value(&json!(n)).unwrap())
        .unwrap();
}

fn result(api: &wfhost_client::Client, id: &str) -> String {
    let ended = api.result(id, Some(PATIENCE)).unwrap();
    ended
        .result
        .map(|r| r.get().to_string())
        .unwrap_or_default()
}

fn wait_steps(api: &wfhost_client::Client, id: &str, steps: u64) {
    wait_until(&format!("{id} takes step {steps}"), || {
        api.status(id).unwrap().steps == steps
    });
}

/// `wfhost upgrade` with `args`: its exit code, stdout and stderr.
fn upgrade(server: &HttpServer, args: &[&str], module: &Path) -> (Option<i32>, String, String) {
    let output = wfhost()
        .args(["upgrade", "--server", server.url(), "--module"])
        .arg(module)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

#[test]
fn an_upgrade_through_a_server_switches_only_what_replays_and_survives_kill_9() {
    let dir = common::tempdir("upgrade", "kill");
    let (v2, v3) = (version(&dir, 2), version(&dir, 3));
    let sqlite = dir.join("wf.db");
    for store in [
        sqlite.to_str().unwrap().to_string(),
        Postgres::shared().database("upgrade_kill"),
    ] {
        upgraded_through_kill(&dir, &store, &v2, &v3);
    }
}

fn upgraded_through_kill(dir: &Path, store: &str, v2: &Path, v3: &Path) {
    let mut server = HttpServer::start(dir, store, &[]);
    let api = server.client();
    let module = put_probe(&api);
    let start = |id: &str| {
        api.start(&start_request(id, &module, "versioned", json!(null)))
            .unwrap();
    };
    // `early` waits for its first number; `late` got it under version 1.
    start("early");
    start("late");
    send(&api, "late", 5);
    wait_steps(&api, "early", 1);
    wait_steps(&api, "late", 2);

    // Version 3 does not repeat `late`'s second step: refused, named, nothing changed.
    let (code, out, err) = upgrade(&server, &["late"], v3);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("at step 2"), "{err}");
    assert!(err.contains("was not upgraded"), "{err}");
    assert_eq!(api.status("late").unwrap().module, module);

    // Version 2 repeats both; `late` is paused, and stays so.
    assert_eq!(api.pause("late").unwrap().pause, "done");
    let (code, out, err) = upgrade(&server, &["late"], v2);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("late upgraded") && out.contains("(2 step(s)"),
        "{out}"
    );
    let late = api.status("late").unwrap();
    assert!(late.paused && late.module != module, "{late:?}");
    let new_module = late.module.clone();
    // Again: nothing to do.
    let (code, out, _) = upgrade(&server, &["late"], v2);
    assert_eq!(code, Some(0));
    assert!(out.contains("already"), "{out}");
    // `--all` takes the rest of the old module's: `early`. It names the module.
    let (code, _, err) = upgrade(&server, &["--all"], v2);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--of"), "{err}");
    let (code, out, err) = upgrade(&server, &["--all", "--of", &module[..12]], v2);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out.trim(), "upgraded  early  (1 step(s))", "{out}");
    assert_eq!(api.status("early").unwrap().module, new_module);

    // Killed and started again, both run version 2 from the store's copy.
    server.kill();
    let server = HttpServer::start(dir, store, &[]);
    let api = server.client();
    send(&api, "early", 5);
    send(&api, "early", 6);
    assert_eq!(result(&api, "early"), "\"v2 patched 22\"");
    send(&api, "late", 6);
    assert_eq!(api.unpause("late").unwrap().pause, "done");
    assert_eq!(result(&api, "late"), "\"v2 unpatched 11\"");
    // An ended workflow has nothing to upgrade; an unknown one is not found.
    let (code, _, err) = upgrade(&server, &["late"], v3);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("has ended"), "{err}");
    let missing = api.upgrade("nobody", &new_module).unwrap_err();
    assert_eq!(missing.status(), Some(404), "{missing}");
    // Neither a hash nor a name; a name nothing was stored under.
    let bad = api.upgrade("early", "not a hash").unwrap_err();
    assert_eq!(bad.status(), Some(400), "{bad}");
    let unnamed = api.upgrade("early", "nobody-named-this").unwrap_err();
    assert_eq!(unnamed.status(), Some(404), "{unnamed}");

    // With no server running, `--store` switches a workflow no host runs: on SQLite, any; on a
    // store hosts share, the killed host's workflow is its own until another claims it, and
    // the upgrade is refused.
    api.start(&start_request("offline", &module, "versioned", json!(null)))
        .unwrap();
    wait_steps(&api, "offline", 1);
    let mut server = server;
    server.kill();
    let output = wfhost()
        .args(["upgrade", "offline", "--store", store, "--module"])
        .arg(v2)
        .output()
        .unwrap();
    let (out, err) = (text(&output.stdout), text(&output.stderr));
    let shared = store.starts_with("postgres");
    if shared {
        assert_eq!(output.status.code(), Some(2), "{out}{err}");
        assert!(err.contains("runs on host"), "{err}");
    } else {
        assert_eq!(output.status.code(), Some(0), "{out}{err}");
        assert!(out.contains("offline upgraded"), "{out}");
    }
    let server = HttpServer::start(dir, store, &[]);
    let api = server.client();
    send(&api, "offline", 5);
    send(&api, "offline", 6);
    let expected = if shared {
        "\"v1 11\""
    } else {
        "\"v2 patched 22\""
    };
    assert_eq!(result(&api, "offline"), expected);
}
