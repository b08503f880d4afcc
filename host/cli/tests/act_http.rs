//! Workflows that call HTTP through a real `wfhost serve --allow-http`, against a local server
//! of the test's own that counts the requests it gets: what the allowlist lets through and what
//! it refuses (another host, a redirect to a refused host, loopback by a pattern that does not
//! name it), a response over the limit, the idempotency key the server sees, and no second
//! request on replay after the host is killed mid-workflow.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::http::{put_probe, start_request, HttpServer};
use serde_json::{json, Value};

/// What the test server saw: each request's path and idempotency key, and the attempt numbers
/// beside the keys.
#[derive(Default)]
struct Seen {
    requests: Vec<(String, Option<String>)>,
    attempts: Vec<Option<String>>,
}

/// A server on 127.0.0.1: `/ok` answers `hello N` (N: how many `/ok` so far), `/redirect`
/// sends to `localhost` on the same port, `/big` answers 3 MiB, `/fail` 500, and `/flaky` 503
/// to its first two requests and `ok after N` after.
fn test_server() -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let recorded = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let recorded = Arc::clone(&recorded);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let method = line.split_whitespace().next().unwrap_or("").to_string();
                    let mut key = None;
                    let mut attempt = None;
                    let mut length = 0usize;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        let header = header.trim();
                        if header.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':') {
                            if name.eq_ignore_ascii_case("idempotency-key") {
                                key = Some(value.trim().to_string());
                            }
                            if name.eq_ignore_ascii_case("wfhost-attempt") {
                                attempt = Some(value.trim().to_string());
                            }
                            if name.eq_ignore_ascii_case("content-length") {
                                length = value.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    if std::io::Read::read_exact(&mut reader, &mut body).is_err() {
                        return;
                    }
                    let (status, extra, body) = {
                        let mut seen = recorded.lock().unwrap();
                        seen.requests.push((path.clone(), key));
                        seen.attempts.push(attempt);
                        let oks = seen.requests.iter().filter(|(p, _)| p == "/ok").count();
                        let flaky = seen.requests.iter().filter(|(p, _)| p == "/flaky").count();
                        match path.as_str() {
                            "/ok" => ("200 OK", String::new(), format!("hello {oks}").into_bytes()),
                            "/redirect" => (
                                "302 Found",
                                format!("Location: http://localhost:{port}/ok\r\n"),
                                Vec::new(),
                            ),
                            "/big" => ("200 OK", String::new(), vec![b'x'; 3 << 20]),
                            "/echo" => (
                                "201 Created",
                                String::new(),
                                format!("{method} {}", String::from_utf8_lossy(&body)).into_bytes(),
                            ),
                            "/fail" => (
                                "500 Internal Server Error",
                                String::new(),
                                b"broken".to_vec(),
                            ),
                            "/flaky" if flaky <= 2 => {
                                ("503 Service Unavailable", String::new(), b"busy".to_vec())
                            }
                            "/flaky" => (
                                "200 OK",
                                String::new(),
                                format!("ok after {flaky}").into_bytes(),
                            ),
                            _ => ("404 Not Found", String::new(), Vec::new()),
                        }
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\n\r\n",
                        body.len()
                    );
                    if stream.write_all(head.as_bytes()).is_err()
                        || stream.write_all(&body).is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://127.0.0.1:{port}"), seen)
}

fn run(api: &wfhost_client::Client, module: &str, id: &str, entry: &str, input: Value) -> Value {
    api.start(&start_request(id, module, entry, input)).unwrap();
    let done = api.result(id, Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed", "{id}: {done:?}");
    serde_json::from_str(done.result.unwrap().get()).unwrap()
}

#[test]
fn the_allowlist_decides_what_a_workflow_reaches() {
    let dir = common::tempdir("act-http", "allowlist");
    let (base, seen) = test_server();
    let store = dir.join("wf.db");
    let explicit = format!("{base}/*");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--allow-http", &explicit, "--allow-http", "http://*:*/*"],
    );
    let api = server.client();
    let module = put_probe(&api);

    let ok = run(&api, &module, "ok", "http_get", json!(format!("{base}/ok")));
    assert_eq!(ok, json!({"status": 200, "body": "hello 1"}));
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.requests.len(), 1);
        // The call's key: the workflow's id and the call's tag.
        let key = seen.requests[0].1.clone().expect("an idempotency key");
        assert!(key.starts_with("ok#"), "{key}");
    }

    // A redirect is checked as the first request was: localhost is loopback, and the pattern
    // that matches it (*) does not name it.
    let redirected = run(
        &api,
        &module,
        "redirect",
        "http_get",
        json!(format!("{base}/redirect")),
    );
    assert_eq!(redirected["error"], "not-allowed", "{redirected}");
    assert!(
        redirected["message"]
            .as_str()
            .unwrap()
            .contains("localhost"),
        "{redirected}"
    );
    // Loopback through a pattern that does not name it: refused before any connection (the
    // test server listens on 127.0.0.1 only, so a connection would be refused, not this).
    let port = base.rsplit(':').next().unwrap();
    let loopback = run(
        &api,
        &module,
        "loopback",
        "http_get",
        json!(format!("http://127.0.0.2:{port}/ok")),
    );
    assert_eq!(loopback["error"], "not-allowed", "{loopback}");
    assert!(
        loopback["message"]
            .as_str()
            .unwrap()
            .contains("not a public address"),
        "{loopback}"
    );
    // A name that resolves to loopback only, through the wildcard.
    let named = run(
        &api,
        &module,
        "named",
        "http_get",
        json!(format!("http://localhost:{port}/ok")),
    );
    assert_eq!(named["error"], "not-allowed", "{named}");
    // Credentials in the URL are not sent anywhere.
    let userinfo = run(
        &api,
        &module,
        "userinfo",
        "http_get",
        json!(format!("http://user:secret@127.0.0.1:{port}/ok")),
    );
    assert_eq!(userinfo["error"], "not-allowed", "{userinfo}");
    // Another scheme's URL is in no pattern.
    let other = run(
        &api,
        &module,
        "other",
        "http_get",
        json!("https://example.com/"),
    );
    assert_eq!(other["error"], "not-allowed", "{other}");
    assert!(
        other["message"]
            .as_str()
            .unwrap()
            .contains("is not in the host's HTTP allowlist"),
        "{other}"
    );
    let big = run(
        &api,
        &module,
        "big",
        "http_get",
        json!(format!("{base}/big")),
    );
    assert_eq!(big["error"], "limit-reached", "{big}");

    // A request with a method, headers and a body; what the host sets itself is not the
    // workflow's to set, nor are methods beyond the usual.
    let request = |method: &str, header: (&str, &str)| {
        json!({
            "method": method,
            "url": format!("{base}/echo"),
            "headers": [{"name": header.0, "value": header.1}],
            "body": b"hi".to_vec(),
            "timeout": null,
        })
    };
    let posted = run(
        &api,
        &module,
        "post",
        "http_request",
        request("POST", ("x-a", "1")),
    );
    assert_eq!(posted, json!({"status": 201, "body": "POST hi"}));
    for (id, method, header) in [
        ("host", "PUT", ("Host", "evil")),
        ("connect", "CONNECT", ("x", "1")),
        ("split", "GET", ("x", "a\r\nb: c")),
    ] {
        let refused = run(&api, &module, id, "http_request", request(method, header));
        assert_eq!(refused["error"], "invalid-input", "{id}: {refused}");
    }

    let seen = seen.lock().unwrap();
    let paths: Vec<&str> = seen.requests.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["/ok", "/redirect", "/big", "/echo"]);
}

#[test]
fn a_module_without_the_grant_cannot_call_http() {
    let dir = common::tempdir("act-http", "denied");
    let (base, seen) = test_server();
    let store = dir.join("wf.db");
    let explicit = format!("{base}/*");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--allow-http", &explicit, "--deny", "wfhost.http"],
    );
    let api = server.client();
    let module = put_probe(&api);
    let denied = run(
        &api,
        &module,
        "denied",
        "http_get",
        json!(format!("{base}/ok")),
    );
    assert_eq!(denied["error"], "not-allowed", "{denied}");
    assert!(seen.lock().unwrap().requests.is_empty());
}

#[test]
fn a_replay_after_a_kill_sends_no_request_again() {
    let dir = common::tempdir("act-http", "replay");
    let (base, seen) = test_server();
    let store = dir.join("wf.db");
    let explicit = format!("{base}/*");
    let args = ["--allow-http", explicit.as_str()];
    let mut server = HttpServer::start(&dir, store.to_str().unwrap(), &args);
    let api = server.client();
    let module = put_probe(&api);
    let ok = format!("{base}/ok");
    api.start(&start_request(
        "twice",
        &module,
        "http_twice",
        json!([[ok], 1500]),
    ))
    .unwrap();
    // Killed once the step that got the answer is journaled (it yields the sleep).
    common::wait_until("the first answer is journaled", || {
        api.status("twice").unwrap().steps >= 2
    });
    server.kill();
    assert_eq!(seen.lock().unwrap().requests.len(), 1);

    let server = HttpServer::start(&dir, store.to_str().unwrap(), &args);
    let api = server.client();
    let done = api.result("twice", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed", "{done:?}");
    let bodies: Value = serde_json::from_str(done.result.unwrap().get()).unwrap();
    // The first answer came from the journal: one request before the sleep, one after.
    assert_eq!(bodies, json!(["hello 1", "hello 2"]));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.requests.len(), 2);
    assert_ne!(
        seen.requests[0].1, seen.requests[1].1,
        "each call has its own key"
    );
}

/// A response with a server error is the call's answer, counted by its status class (it was
/// counted `ok`).
#[test]
fn answers_are_counted_by_their_status_class() {
    let dir = common::tempdir("act-http", "classes");
    let (base, _seen) = test_server();
    let store = dir.join("wf.db");
    let explicit = format!("{base}/*");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &["--allow-http", &explicit]);
    let api = server.client();
    let module = put_probe(&api);
    let failed = run(
        &api,
        &module,
        "fail",
        "http_get",
        json!(format!("{base}/fail")),
    );
    assert_eq!(failed["status"], 500, "{failed}");
    let ok = run(&api, &module, "ok", "http_get", json!(format!("{base}/ok")));
    assert_eq!(ok["status"], 200, "{ok}");
    let metrics = api.metrics().unwrap();
    for class in ["5xx", "2xx"] {
        let line = format!(
            "wfhost_host_function_calls_total{{function=\"wfhost.http\",outcome=\"{class}\"}} 1"
        );
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }
}

/// Every attempt of one call carries one idempotency key, with its attempt number beside it,
/// and `on:5xx` retries the server errors a policy should (a payment API that charged and then
/// answered 503 sees the same key again, and does not charge twice).
#[test]
fn the_attempts_of_one_call_carry_one_key() {
    let dir = common::tempdir("act-http", "attempts");
    let (base, seen) = test_server();
    let store = dir.join("wf.db");
    let explicit = format!("{base}/*");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &[
            "--allow-http",
            &explicit,
            "--retry",
            "wfhost.http=attempts:5,initial:10ms,on:5xx",
        ],
    );
    let api = server.client();
    let module = put_probe(&api);
    let answer = run(
        &api,
        &module,
        "flaky",
        "http_get",
        json!(format!("{base}/flaky")),
    );
    assert_eq!(answer, json!({"status": 200, "body": "ok after 3"}));
    let seen = seen.lock().unwrap();
    let keys: Vec<&Option<String>> = seen.requests.iter().map(|(_, key)| key).collect();
    assert_eq!(keys.len(), 3, "{:?}", seen.requests);
    assert!(keys[0].is_some());
    assert!(keys.iter().all(|key| *key == keys[0]), "{keys:?}");
    let attempts: Vec<&str> = seen.attempts.iter().flatten().map(String::as_str).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    // The history shows each attempt as the call again.
    let history = api
        .history("flaky", &wfhost_client::wire::HistoryParams::default())
        .unwrap();
    let words: Vec<String> = history
        .steps
        .iter()
        .flat_map(|step| step.yields.iter())
        .filter_map(|y| y["words"].as_str().map(str::to_string))
        .filter(|w| w.contains("call 'wfhost.http'"))
        .collect();
    assert_eq!(words.len(), 3, "{words:?}");
    assert!(words[2].contains("again (attempt 3 of #"), "{words:?}");
    // In words: the request's method and URL, the answer's status and body, not postcard.
    let url = format!("{base}/flaky");
    assert!(
        words[0].ends_with(&format!("call 'wfhost.http': GET {url}")),
        "{words:?}"
    );
    let answers: Vec<(String, Value)> = history
        .steps
        .iter()
        .flat_map(|step| step.events.iter())
        .filter(|e| e["answers"] == "call" || e["answers"] == "retry")
        .map(|e| {
            (
                e["words"].as_str().unwrap_or_default().to_string(),
                e.clone(),
            )
        })
        .collect();
    let last = answers.last().unwrap();
    assert!(
        last.0
            .ends_with("'wfhost.http' answered 200 10 bytes: ok after 3"),
        "{answers:?}"
    );
    assert_eq!(
        (last.1["ok"]["status"].clone(), last.1["ok"]["body"].clone()),
        (json!(200), json!("ok after 3"))
    );
    let first_yield = &history
        .steps
        .iter()
        .flat_map(|s| s.yields.iter())
        .find(|y| y["kind"] == "call")
        .unwrap();
    assert_eq!(
        (
            first_yield["input"]["method"].clone(),
            first_yield["input"]["url"].clone()
        ),
        (json!("GET"), json!(url))
    );
}
