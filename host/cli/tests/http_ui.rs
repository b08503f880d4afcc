//! What the web UI stands on, through a real `wfhost serve --http`: its page and files served
//! without a token and with a policy that keeps them to their own server, the counts by status
//! its list shows, and the children a workflow's page lists.

mod common;

use std::time::Duration;

use common::http::{put_probe, raw, start_request, HttpServer};
use serde_json::json;
use wfhost_client::wire::{CountParams, ListParams};

fn sqlite_server(name: &str, args: &[&str]) -> (std::path::PathBuf, HttpServer) {
    let dir = common::tempdir("http_ui", name);
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), args);
    (dir, server)
}

fn get(server: &HttpServer, path: &str, extra: &str) -> (u16, String) {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n");
    raw(&server.addr(), request.as_bytes())
}

/// The page, its script and its stylesheet need no token (they hold no data), come with their
/// types and a policy that lets them load nothing from elsewhere, and answer `304` to a browser
/// that has them; what the page then asks for needs the token as every API call does.
#[test]
fn the_page_and_its_files_are_served_without_a_token_and_the_data_needs_one() {
    let dir = common::tempdir("http_ui", "token");
    std::fs::write(dir.join("token"), "s3cret-token\n").unwrap();
    let token_file = dir.join("token");
    let (_dir, server) = sqlite_server(
        "token-server",
        &["--token-file", token_file.to_str().unwrap()],
    );
    for (path, kind, marker) in [
        ("/", "text/html", "<script src=\"/ui/app.js\""),
        ("/ui/app.js", "text/javascript", "Bearer "),
        ("/ui/app.css", "text/css", ".timeline"),
    ] {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        let (status, body) = raw(&server.addr(), request.as_bytes());
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.contains(marker), "{path} lacks {marker}");
        let head = raw_head(&server, path, "");
        assert!(
            head.contains(&format!("content-type: {kind}")),
            "{path}: {head}"
        );
        assert!(
            head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
            "{head}"
        );
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        let etag = head
            .lines()
            .find_map(|l| l.strip_prefix("etag: "))
            .expect("an etag")
            .trim()
            .to_string();
        let again = raw_head(&server, path, &format!("If-None-Match: {etag}\r\n"));
        assert!(again.starts_with("http/1.1 304"), "{again}");
    }
    let (status, _) = get(&server, "/v1/workflow-counts", "");
    assert_eq!(status, 401);
    let (status, _) = get(
        &server,
        "/v1/workflow-counts",
        "Authorization: Bearer wrong\r\n",
    );
    assert_eq!(status, 401);
    let (status, body) = get(
        &server,
        "/v1/workflow-counts",
        "Authorization: Bearer s3cret-token\r\n",
    );
    assert_eq!(status, 200, "{body}");
    // Another site's page cannot call the API through the visitor's browser.
    let (status, _) = get(
        &server,
        "/v1/workflow-counts",
        "Origin: http://evil.example\r\nAuthorization: Bearer s3cret-token\r\n",
    );
    assert_eq!(status, 403);
}

/// The status line and headers of a `GET`, lowercased.
fn raw_head(server: &HttpServer, path: &str, extra: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).to_string();
    answer
        .split("\r\n\r\n")
        .next()
        .unwrap()
        .to_ascii_lowercase()
}

/// Counts by status, with a listing's filters; the children of a workflow by its number, a page
/// at a time.
#[test]
fn counts_by_status_and_the_children_of_a_workflow() {
    let (_dir, server) = sqlite_server("counts", &[]);
    let api = server.client();
    let module = put_probe(&api);
    let counts = api.counts(&CountParams::default()).unwrap();
    assert_eq!(
        (
            counts.running,
            counts.completed,
            counts.failed,
            counts.cancelled
        ),
        (0, 0, 0, 0)
    );
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
    api.start(&start_request("parent", &module, "spawn_many", json!(7)))
        .unwrap();
    for id in ["echo-0", "echo-1", "echo-2", "parent"] {
        api.result(id, Some(Duration::from_secs(60))).unwrap();
    }
    api.cancel("waiter").unwrap();
    api.result("waiter", Some(Duration::from_secs(60))).unwrap();
    let counts = api.counts(&CountParams::default()).unwrap();
    // Three echoes, the parent and its seven children completed; the waiter cancelled.
    assert_eq!(
        (
            counts.running,
            counts.completed,
            counts.failed,
            counts.cancelled
        ),
        (0, 11, 0, 1)
    );
    let top = api
        .counts(&CountParams {
            top_level: Some(true),
            ..CountParams::default()
        })
        .unwrap();
    assert_eq!((top.completed, top.cancelled), (4, 1));
    let echoes = api
        .counts(&CountParams {
            prefix: Some("echo-".into()),
            ..CountParams::default()
        })
        .unwrap();
    assert_eq!(echoes.completed, 3);
    let parent = api.status("parent").unwrap();
    let mut children = Vec::new();
    let mut params = ListParams {
        parent: Some(parent.number),
        limit: Some(3),
        ..ListParams::default()
    };
    loop {
        let page = api.list(&params).unwrap();
        children.extend(page.workflows);
        match page.next {
            Some(next) => params.after = Some(next),
            None => break,
        }
    }
    assert_eq!(children.len(), 7);
    assert!(children
        .iter()
        .all(|c| c.parent == Some(parent.number) && c.entry == "echo"));
    let of_children = api
        .counts(&CountParams {
            parent: Some(parent.number),
            ..CountParams::default()
        })
        .unwrap();
    assert_eq!(of_children.completed, 7);
    // A parameter that is not one says so.
    let (status, body) = get(&server, "/v1/workflow-counts?status=running", "");
    assert_eq!(status, 400, "{body}");
}

/// `GET .../waits`, read by a workflow's page: what it waits for, worked out from its journal
/// on the server. A workflow waiting for a message with a timeout waits for a timer (firing
/// when the timeout ends) and a message; one that joins a child waits for that child; one that
/// ended waits for nothing.
#[test]
fn what_a_workflow_waits_for_is_read_from_its_journal() {
    // Read from the journal alone, and from a snapshot after every event and the journal
    // after it.
    waits_on("waits", &[]);
    waits_on("waits-snapshots", &["--snapshot-every", "1"]);
}

fn waits_on(name: &str, args: &[&str]) {
    let (dir, server) = sqlite_server(name, args);
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "waiter",
        &module,
        "wait_message",
        json!(600_000),
    ))
    .unwrap();
    api.start(&start_request(
        "joiner",
        &module,
        "supervise",
        json!([null, "wait_message", 600_000]),
    ))
    .unwrap();
    api.start(&start_request("echo", &module, "echo", json!(1)))
        .unwrap();
    api.result("echo", Some(Duration::from_secs(60))).unwrap();
    let waits = |id: &str| -> serde_json::Value {
        let (status, body) = get(&server, &format!("/v1/workflows/{id}/waits"), "");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    // Its first step journaled, the waiter has yielded its timer and asked for a message.
    common::wait_until("the waiter's first step", || {
        waits("waiter")["steps"].as_u64() == Some(1)
    });
    let waiter = waits("waiter");
    assert_eq!(waiter["message"], true, "{waiter}");
    let timers = waiter["waits"].as_array().unwrap();
    assert_eq!(timers.len(), 1, "{waiter}");
    assert_eq!(timers[0]["yielded"]["kind"], "sleep", "{waiter}");
    // When it fires, as the host decided: ten minutes after the step that asked, which ran
    // between the start and now.
    let fires_at = timers[0]["fires_at"].as_u64().unwrap();
    let started = api.status("waiter").unwrap().started;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        (started + 600_000..=now + 600_000).contains(&fires_at),
        "{waiter}: started {started}, now {now}"
    );
    // The joiner has spawned its child (one step), then waits to join it (the next).
    common::wait_until("the joiner joins its child", || {
        waits("joiner")["waits"]
            .as_array()
            .is_some_and(|w| w.len() == 1 && w[0]["yielded"]["kind"] == "join")
    });
    let joiner = waits("joiner");
    assert_eq!(joiner["message"], false, "{joiner}");
    assert_eq!(joiner["waits"][0]["fires_at"], serde_json::Value::Null);
    let child = api
        .list(&ListParams {
            parent: Some(api.status("joiner").unwrap().number),
            ..ListParams::default()
        })
        .unwrap()
        .workflows;
    assert_eq!(child.len(), 1);
    assert!(
        joiner["waits"][0]["yielded"]["words"]
            .as_str()
            .unwrap()
            .contains(&child[0].id),
        "{joiner}"
    );
    // The API's own client reads the same.
    let typed = api.waits("waiter").unwrap();
    assert_eq!(
        (typed.steps, typed.message, typed.waits.len()),
        (1, true, 1)
    );
    assert_eq!(typed.waits[0].fires_at, Some(fires_at));
    if !args.is_empty() {
        let snapshots: i64 = rusqlite::Connection::open(dir.join("wf.db"))
            .unwrap()
            .query_row(
                "SELECT count(*) FROM snapshots s JOIN workflows w ON w.num = s.num \
                 WHERE w.id IN ('waiter', 'joiner')",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(snapshots, 2, "the waits were read from snapshots");
    }
    let echo = waits("echo");
    assert_eq!(echo["waits"], json!([]), "{echo}");
    assert_eq!(echo["message"], false);
    let (status, body) = get(&server, "/v1/workflows/nobody/waits", "");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("unknown_workflow"), "{body}");
}
