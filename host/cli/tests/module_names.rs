//! Modules with names and versions, through a real `wfhost serve --http` and on a store no
//! server holds: `wfhost deploy --name` stores a module as the name's next version (the same
//! bytes again are no new version), starts name the latest version or `name@version`, the
//! workflows show the name and `upgrade --all --of NAME` selects them; bad names and unknown
//! versions are refused with why. On SQLite and PostgreSQL.

mod common;

use std::path::{Path, PathBuf};

use common::http::{raw, start_request, HttpServer};
use common::{text, wfhost};
use serde_json::json;
use wfhost_test_programs::postgres::Postgres;

/// The probe module as version `v` of its `versioned` code, written to `dir`.
fn version(dir: &Path, v: u8) -> PathBuf {
    let file = dir.join(format!("v{v}.wasm"));
    std::fs::write(&file, wfhost_test_programs::probe_version(v)).unwrap();
    file
}

fn sha256(file: &Path) -> String {
    wfhost::ModuleInfo::inspect(&std::fs::read(file).unwrap())
        .unwrap()
        .sha256
}

/// `wfhost` with `args`: its exit code, stdout and stderr.
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let output = wfhost().args(args).output().unwrap();
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

#[test]
fn named_modules_take_versions_and_starts_name_them() {
    let dir = common::tempdir("module-names", "server");
    let (v1, v2) = (version(&dir, 1), version(&dir, 2));
    let sqlite = dir.join("wf.db");
    for store in [
        sqlite.to_str().unwrap().to_string(),
        Postgres::shared().database("module_names"),
    ] {
        named_through(&dir, &store, &v1, &v2);
    }
}

fn named_through(dir: &Path, store: &str, v1: &Path, v2: &Path) {
    let mut server = HttpServer::start(dir, store, &[]);
    let url = server.url().to_string();
    let api = server.client();
    let deploy = |file: &Path, name: &str| {
        let (code, out, err) = run(&[
            "deploy",
            file.to_str().unwrap(),
            "--name",
            name,
            "--server",
            &url,
        ]);
        assert_eq!(code, Some(0), "{out}{err}");
        out
    };
    assert!(deploy(v1, "orders").starts_with(&format!("orders@1 {}", &sha256(v1)[..12])));
    // The same bytes again: no new version.
    assert!(deploy(v1, "orders").starts_with("orders@1 "));
    assert!(deploy(v2, "orders").starts_with(&format!("orders@2 {}", &sha256(v2)[..12])));

    // By name: the latest version, shown under the name; by name@version: that one.
    let start = |module: &str, id: &str| {
        let (code, out, err) = run(&["start", module, "versioned", "--id", id, "--server", &url]);
        assert_eq!(code, Some(0), "{out}{err}");
        api.status(id).unwrap()
    };
    let latest = start("orders", "by-name");
    assert_eq!(
        (latest.module_name.as_str(), latest.module.as_str()),
        ("orders", sha256(v2).as_str())
    );
    let first = start("orders@1", "by-version");
    assert_eq!(
        (first.module_name.as_str(), first.module.as_str()),
        ("orders", sha256(v1).as_str())
    );
    // Sent again after a new version, a start by name follows the workflow it started.
    assert!(deploy(v1, "orders").starts_with("orders@3 "));
    let again = start("orders", "by-name");
    assert_eq!(again.module, sha256(v2));
    // The list of modules names them.
    let (code, out, err) = run(&["modules", "--json", "--server", &url]);
    assert_eq!(code, Some(0), "{out}{err}");
    let names: Vec<(String, u64)> = out
        .lines()
        .flat_map(|line| {
            let module: serde_json::Value = serde_json::from_str(line).unwrap();
            module["names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| {
                    (
                        n["name"].as_str().unwrap().to_string(),
                        n["version"].as_u64().unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        names,
        [
            ("orders".to_string(), 1),
            ("orders".to_string(), 3),
            ("orders".to_string(), 2)
        ]
    );
    // `--of orders` finds both (they show the name); the one on version 1 is upgraded.
    let (code, out, err) = run(&[
        "upgrade",
        "--all",
        "--of",
        "orders",
        "--module",
        v2.to_str().unwrap(),
        "--server",
        &url,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let mut lines: Vec<&str> = out.lines().map(str::trim).collect();
    lines.sort();
    assert_eq!(
        lines,
        ["already   by-name", "upgraded  by-version  (1 step(s))"]
    );

    // Refused: a name that is not one, a name nothing was stored under, a version it lacks.
    let (status, body) = raw(
        &server.addr(),
        b"POST /v1/modules?name=9lives HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("starting with a letter"), "{body}");
    for (module, says) in [
        ("nobody", "no module is named 'nobody'"),
        ("orders@7", "no version 7"),
    ] {
        let error = api
            .start(&start_request("refused", module, "versioned", json!(null)))
            .unwrap_err();
        assert_eq!(error.status(), Some(404), "{error}");
        assert!(error.to_string().contains(says), "{error}");
    }
    let error = api
        .start(&start_request("refused", "a b", "versioned", json!(null)))
        .unwrap_err();
    assert_eq!(error.status(), Some(400), "{error}");
    server.kill();
}

#[test]
fn a_module_deployed_to_a_store_no_server_holds_starts_by_name_once_one_serves_it() {
    let dir = common::tempdir("module-names", "store");
    let v1 = version(&dir, 1);
    let store = dir.join("wf.db");
    let store = store.to_str().unwrap();
    // A store made by a server first.
    let mut server = HttpServer::start(&dir, store, &[]);
    server.kill();
    let (code, out, err) = run(&[
        "deploy",
        v1.to_str().unwrap(),
        "--name",
        "billing",
        "--store",
        store,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("billing@1 "), "{out}");
    let mut server = HttpServer::start(&dir, store, &[]);
    let api = server.client();
    api.start(&start_request("bill", "billing", "versioned", json!(null)))
        .unwrap();
    assert_eq!(api.status("bill").unwrap().module_name, "billing");
    server.kill();
}
