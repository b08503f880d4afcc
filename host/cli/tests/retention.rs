//! Retention through a real `wfhost serve --http` and the `wfhost` command: `wfhost prune`
//! removes exactly the finished trees before its cutoff (of a status, if asked) and leaves the
//! rest; `serve --retain` removes finished workflows once they are old enough; a SQLite file no
//! host holds is pruned directly, and one a host holds is refused with what to do.

mod common;

use common::http::{put_probe, start_request, HttpServer};
use common::{text, wait_until, wfhost, PATIENCE};
use serde_json::json;
use wfhost_test_programs::postgres::Postgres;

fn prune(args: &[&str]) -> (bool, String) {
    let output = wfhost().arg("prune").args(args).output().unwrap();
    (output.status.success(), text(&output.stderr))
}

fn gone(api: &wfhost_client::Client, id: &str) -> bool {
    api.status(id).is_err_and(|e| e.status() == Some(404))
}

#[test]
fn prune_removes_the_finished_trees_before_its_cutoff_and_leaves_the_rest() {
    let dir = common::tempdir("retention", "prune");
    let sqlite = dir.join("wf.db");
    for store in [
        sqlite.to_str().unwrap().to_string(),
        Postgres::shared().database("retention_prune"),
    ] {
        let server = HttpServer::start(&dir, &store, &[]);
        let api = server.client();
        let module = put_probe(&api);
        api.start(&start_request("nest", &module, "nest", json!(2)))
            .unwrap();
        for n in 0..3 {
            api.start(&start_request(
                &format!("echo-{n}"),
                &module,
                "echo",
                json!(n),
            ))
            .unwrap();
        }
        api.start(&start_request(
            "waiter",
            &module,
            "wait_message",
            json!(600_000),
        ))
        .unwrap();
        for id in ["nest", "echo-0", "echo-1", "echo-2"] {
            api.result(id, Some(PATIENCE)).unwrap();
        }
        let url = server.url();
        // None failed; none finished an hour ago.
        let (ok, said) = prune(&[
            "--finished-before",
            "0s",
            "--status",
            "failed",
            "--server",
            url,
        ]);
        assert!(ok && said.starts_with("removed 0 workflow(s)"), "{said}");
        let (ok, said) = prune(&["--finished-before", "1h", "--server", url]);
        assert!(ok && said.starts_with("removed 0 workflow(s)"), "{said}");
        assert_eq!(api.list(&Default::default()).unwrap().workflows.len(), 7);
        // `nest` and the two below it, and the three echoes; the waiter runs.
        let (ok, said) = prune(&["--finished-before", "0s", "--server", url]);
        assert!(
            ok && said.starts_with("removed 6 workflow(s): 4 top-level"),
            "{said}"
        );
        for id in ["nest", "echo-0", "echo-1", "echo-2"] {
            assert!(gone(&api, id), "{id} is still there");
        }
        let left: Vec<String> = api
            .list(&Default::default())
            .unwrap()
            .workflows
            .into_iter()
            .map(|w| w.id)
            .collect();
        assert_eq!(left, ["waiter"]);
        let counts = api.counts(&Default::default()).unwrap();
        assert_eq!((counts.running, counts.completed), (1, 0));
        // Over HTTP, a request that says nothing is refused with what to give.
        let refused = api
            .prune(&wfhost_client::wire::PruneRequest::default())
            .unwrap_err();
        assert_eq!(refused.status(), Some(400), "{refused}");
        assert!(refused.to_string().contains("older_than"), "{refused}");
        let bad_age = api
            .prune(&wfhost_client::wire::PruneRequest {
                older_than: Some("3 weeks".into()),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(bad_age.status(), Some(400), "{bad_age}");
        assert!(
            bad_age
                .to_string()
                .contains("older_than: '3 weeks' is not a duration"),
            "{bad_age}"
        );
    }
}

#[test]
fn a_server_that_retains_workflows_a_while_removes_them_after() {
    let dir = common::tempdir("retention", "retain");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &["--retain", "1s"]);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request("short", &module, "echo", json!(1)))
        .unwrap();
    api.start(&start_request(
        "waiter",
        &module,
        "wait_message",
        json!(600_000),
    ))
    .unwrap();
    api.result("short", Some(PATIENCE)).unwrap();
    wait_until("the finished workflow is removed", || gone(&api, "short"));
    assert_eq!(api.status("waiter").unwrap().status, "running");
}

#[test]
fn a_sqlite_store_is_pruned_directly_when_no_host_holds_it() {
    let dir = common::tempdir("retention", "direct");
    let store = dir.join("wf.db");
    let path = store.to_str().unwrap();
    let mut server = HttpServer::start(&dir, path, &[]);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request("done", &module, "echo", json!(1)))
        .unwrap();
    api.result("done", Some(PATIENCE)).unwrap();
    // Held by the server: refused, saying what to do.
    let (ok, said) = prune(&["--finished-before", "0s", "--store", path]);
    assert!(!ok, "{said}");
    assert!(said.contains("host"), "{said}");
    server.kill();
    let (ok, said) = prune(&["--finished-before", "0s", "--store", path]);
    assert!(ok && said.starts_with("removed 1 workflow(s)"), "{said}");
    let listed = wfhost().args(["list", "--store", path]).output().unwrap();
    // The header, and no workflow.
    assert_eq!(
        text(&listed.stdout).lines().count(),
        1,
        "{}",
        text(&listed.stdout)
    );
}

/// A prune marks a module no workflow uses any more, and removes it only at a prune a while
/// later (never at once: a start that found it there may be on its way); a start meanwhile uses
/// it again and keeps it. And a module stored again is written again (the host took it for kept
/// once it had written it, though a prune may have removed it since).
#[test]
fn a_prune_leaves_a_module_a_start_may_use() {
    let dir = common::tempdir("retention", "modules");
    let sqlite = dir.join("wf.db");
    for store in [
        sqlite.to_str().unwrap().to_string(),
        Postgres::shared().database("retention_modules"),
    ] {
        let server = HttpServer::start(&dir, &store, &[]);
        let api = server.client();
        let module = put_probe(&api);
        api.start(&start_request("first", &module, "echo", json!(1)))
            .unwrap();
        api.result("first", Some(PATIENCE)).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let pruned = api
            .prune(&wfhost_client::wire::PruneRequest {
                finished_before: Some(now + 1),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(pruned.trees, 1, "{store}");
        assert!(gone(&api, "first"));
        // Unused, and still there: a start by its hash runs.
        api.start(&start_request("second", &module, "echo", json!(2)))
            .unwrap();
        assert_eq!(
            api.result("second", Some(PATIENCE))
                .unwrap()
                .result
                .map(|r| r.get().to_string()),
            Some("2".to_string()),
            "{store}"
        );
        assert_eq!(put_probe(&api), module);
    }
}
