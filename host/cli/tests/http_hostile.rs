//! What a client can throw at `wfhost serve --http`, and what a crash does to what it
//! acknowledged: malformed and mistyped JSON, unknown modules, bad ids, a 1 GiB body, a client
//! that sends a header byte a second, thousands of idle connections, missing and wrong tokens,
//! a server exposed without a token; each gets its error and the next good request is answered
//! at once. Every start a server acknowledged survives `kill -9` and finishes with its result.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::http::{code, put_probe, raw, start_request, HttpServer};
use common::{text, wfhost};
use serde_json::{json, Value};

fn tempdir(name: &str) -> std::path::PathBuf {
    common::tempdir("http-hostile", name)
}

/// A good request, answered at once.
fn healthy(server: &HttpServer) {
    let (status, body) = raw(
        &server.addr(),
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
}

fn post(server: &HttpServer, path: &str, body: &[u8]) -> (u16, String) {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    raw(&server.addr(), &request)
}

#[test]
fn bad_requests_get_their_error_and_the_server_goes_on() {
    let dir = tempdir("bad");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let module = put_probe(&server.client());
    let start = |body: Value| post(&server, "/v1/workflows", body.to_string().as_bytes());

    let cases: Vec<(&str, (u16, String), u16, &str)> = vec![
        (
            "malformed JSON",
            post(&server, "/v1/workflows", b"{\"module\": "),
            400,
            "bad_request",
        ),
        (
            "a number for a string",
            start(json!({"module": module, "entry": 5})),
            400,
            "bad_request",
        ),
        (
            "a field it does not know",
            start(json!({"module": module, "entry": "echo", "inptu": 1})),
            400,
            "bad_request",
        ),
        (
            "no module",
            start(json!({"entry": "echo"})),
            400,
            "bad_request",
        ),
        (
            "a module it does not keep",
            start(json!({"module": "ab".repeat(32), "entry": "echo"})),
            404,
            "unknown_module",
        ),
        (
            "an entry point the module lacks",
            start(json!({"module": module, "entry": "nope", "id": "x1"})),
            400,
            "unknown_entry",
        ),
        (
            "an input the entry point does not take",
            start(json!({"module": module, "entry": "nap", "input": "soon", "id": "x2"})),
            400,
            "invalid_input",
        ),
        (
            "an id with /",
            start(json!({"module": module, "entry": "echo", "id": "a/b"})),
            400,
            "invalid_input",
        ),
        (
            "an id with ..",
            start(json!({"module": module, "entry": "echo", "id": ".."})),
            400,
            "invalid_input",
        ),
        (
            "an id with NUL",
            start(json!({"module": module, "entry": "echo", "id": "a\u{0}b"})),
            400,
            "invalid_input",
        ),
        (
            "a module that is not wasm",
            post(&server, "/v1/modules", b"not a module"),
            400,
            "bad_module",
        ),
        (
            "NUL in a path",
            raw(
                &server.addr(),
                b"GET /v1/workflows/a%00b HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            ),
            400,
            "bad_request",
        ),
        (
            "a wait that is not one",
            raw(
                &server.addr(),
                b"GET /v1/workflows/x/result?wait=soon HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            ),
            400,
            "bad_request",
        ),
        (
            "an unknown workflow",
            raw(
                &server.addr(),
                b"GET /v1/workflows/nobody HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            ),
            404,
            "unknown_workflow",
        ),
    ];
    for (what, (status, body), want_status, want_code) in cases {
        assert_eq!(
            (status, code(&body).as_str()),
            (want_status, want_code),
            "{what}: {body}"
        );
        let message: Value = serde_json::from_str(&body).unwrap();
        assert!(
            message["error"]["message"].as_str().unwrap().len() > 20,
            "{what}: the message says what was wrong: {body}"
        );
        healthy(&server);
    }
    // Nothing of those was started.
    let listed = server.client().list(&Default::default()).unwrap();
    assert!(listed.workflows.is_empty(), "{:?}", listed.workflows);
}

#[test]
fn a_huge_body_is_refused_without_being_read() {
    let dir = tempdir("huge");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    // A gibibyte announced, a little sent: refused at once, not read to the end.
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head =
        "POST /v1/workflows HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1073741824\r\n\r\n";
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(&[b' '; 64 * 1024]);
    let mut answer = vec![0u8; 4096];
    let n = stream.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("too_large"), "{answer}");
    drop(stream);
    // A module past the module limit, streamed.
    let (status, body) = post(&server, "/v1/modules", &vec![0u8; 65 << 20]);
    assert_eq!((status, code(&body).as_str()), (413, "too_large"), "{body}");
    healthy(&server);
}

#[test]
fn slow_and_idle_clients_hold_up_nobody() {
    let dir = tempdir("slow");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &["--header-timeout", "2s"]);
    raise_file_limit(6_000);

    // One header byte a second: closed once the header timeout passes, while others are served.
    let slow = TcpStream::connect(server.addr()).unwrap();
    let closed = Arc::new(Mutex::new(None));
    let writer = {
        let mut slow = slow.try_clone().unwrap();
        let closed = Arc::clone(&closed);
        std::thread::spawn(move || {
            for byte in b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                .iter()
                .cycle()
                .take(120)
            {
                if slow.write_all(&[*byte]).is_err() {
                    *closed.lock().unwrap() = Some("write failed");
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    healthy(&server);
    let mut reader = slow;
    reader
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut answer = Vec::new();
    // The server ends the connection (it may say 408 first): the read ends, it does not time
    // out.
    let read = reader.read_to_end(&mut answer);
    // Closed (a reset too: the server had unread bytes of ours), not timed out.
    let closed = match &read {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(closed, "the slow connection was not closed: {read:?}");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    drop(reader);
    writer.join().unwrap();

    // Five thousand connections that say nothing, on a server with the default header
    // timeout (10 s): all still open while the good requests are answered.
    let patient = HttpServer::start(&dir, dir.join("wf2.db").to_str().unwrap(), &[]);
    let idle: Vec<TcpStream> = (0..5_000)
        .map(|_| TcpStream::connect(patient.addr()).unwrap())
        .collect();
    // Accepted (the kernel takes a connection before the server does): all held at once.
    let open = || {
        patient
            .client()
            .metrics()
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("wfhost_http_connections ")
                    .map(str::to_string)
            })
            .map(|v| v.trim().parse::<u64>().unwrap())
            .unwrap()
    };
    common::wait_until("the server holds the 5,000", || open() >= 5_000);
    healthy(&patient);
    let module = put_probe(&patient.client());
    let started = patient
        .client()
        .start(&start_request("while-idle", &module, "echo", json!(1)))
        .unwrap();
    assert!(started.new);
    drop(idle);
    healthy(&patient);
}

#[test]
fn past_its_limits_a_server_refuses_at_once_and_goes_on() {
    let dir = tempdir("limits");
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--max-connections", "4", "--max-waiting", "1"],
    );
    let module = put_probe(&server.client());
    server
        .client()
        .start(&start_request(
            "waits",
            &module,
            "wait_message",
            json!(600_000),
        ))
        .unwrap();
    let addr = server.addr();
    let metrics = || {
        raw(
            &addr,
            b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
    };
    // One request waits; a second is refused.
    let mut waiting = TcpStream::connect(&addr).unwrap();
    waiting
        .write_all(b"GET /v1/workflows/waits/result?wait=60s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    common::wait_until("the first request waits", || {
        let (status, body) = metrics();
        status == 200 && body.contains("wfhost_http_waiting_results 1\n")
    });
    let (status, body) = raw(
        &addr,
        b"GET /v1/workflows/waits/result?wait=60s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        (status, code(&body).as_str()),
        (503, "too_many_waiting"),
        "{body}"
    );
    // Four connections open (the waiting one, three idle): one more is refused at once.
    let idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    common::wait_until("the four are counted", || {
        let (status, body) = metrics();
        // Refused while four are in: the fifth is this one.
        status == 503 && code(&body) == "too_many_connections"
    });
    // Room again once they go.
    drop(idle);
    drop(waiting);
    common::wait_until("the server takes connections again", || metrics().0 == 200);
    healthy(&server);
}

#[test]
fn a_token_is_wanted_everywhere_but_healthz() {
    let dir = tempdir("token");
    let store = dir.join("wf.db");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &["--token-file", token_file.to_str().unwrap()],
    );
    healthy(&server);
    let get = |headers: &str| {
        raw(
            &server.addr(),
            format!("GET /v1/workflows HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Connection: close\r\n\r\n")
                .as_bytes(),
        )
    };
    let (status, body) = get("");
    assert_eq!(
        (status, code(&body).as_str()),
        (401, "unauthorized"),
        "{body}"
    );
    assert!(body.contains("wants a token"), "{body}");
    let (status, body) = get("Authorization: Bearer wrong\r\n");
    assert_eq!(
        (status, code(&body).as_str()),
        (401, "unauthorized"),
        "{body}"
    );
    assert!(body.contains("not this server's"), "{body}");
    // A client without the token keeps no connection: asked to keep it, it is closed anyway.
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .write_all(b"GET /v1/workflows HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    let (status, _) = get("Authorization: Basic czNjcmV0LXRva2Vu\r\n");
    assert_eq!(status, 401);
    let (status, body) = get("Authorization: Bearer s3cret-token\r\n");
    assert_eq!(status, 200, "{body}");
    for path in [
        "/metrics",
        "/readyz",
        "/v1/openapi.json",
        "/v1/hosts",
        "/v1/modules",
    ] {
        let (status, _) = raw(
            &server.addr(),
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(status, 401, "{path}");
    }
    // The client and the CLI send it.
    let client = server.client().with_token("s3cret-token");
    assert_eq!(client.ready().unwrap().status, "ok");
    let output = wfhost()
        .args(["list", "--server", &server.url])
        .env("WFHOST_TOKEN", "s3cret-token")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let output = wfhost()
        .args(["list", "--server", &server.url])
        .env_remove("WFHOST_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("WFHOST_TOKEN"),
        "{}",
        text(&output.stderr)
    );
    // The token is never in the log.
    assert!(!server.log().contains("s3cret"), "{}", server.log());
}

#[test]
fn what_a_web_page_could_send_is_refused() {
    let dir = tempdir("origin");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let addr = server.addr();
    let get = |headers: String| {
        raw(
            &addr,
            format!("GET /v1/workflows HTTP/1.1\r\n{headers}Connection: close\r\n\r\n").as_bytes(),
        )
    };
    // Another origin: a page's script.
    let (status, body) = get(format!("Host: {addr}\r\nOrigin: http://evil.example\r\n"));
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "cross_origin"),
        "{body}"
    );
    // A name rebound to 127.0.0.1, on a server with no token.
    let (status, body) = get("Host: evil.example:8080\r\n".into());
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "not_loopback"),
        "{body}"
    );
    // No origin a browser would name, or an Origin without a Host.
    let (status, body) = get(format!("Host: {addr}\r\nOrigin: null\r\n"));
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "cross_origin"),
        "{body}"
    );
    let (status, body) = get(format!("Origin: http://{addr}\r\n"));
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "cross_origin"),
        "{body}"
    );
    // A target that names another host than its Host header: neither is taken.
    let (status, body) = raw(
        &addr,
        format!(
            "GET http://evil.example:8080/v1/workflows HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(
        (status, code(&body).as_str()),
        (400, "bad_request"),
        "{body}"
    );
    // IPv6's loopback is loopback.
    let (status, body) = get("Host: [::1]:8080\r\n".into());
    assert_eq!(status, 200, "{body}");
    // The server's own origin, and programs (no Origin), are let in.
    let (status, body) = get(format!("Host: {addr}\r\nOrigin: http://{addr}\r\n"));
    assert_eq!(status, 200, "{body}");
    let (status, body) = get("Host: localhost\r\n".into());
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(&server, "/v1/workflows", b"{}");
    assert_eq!(status, 400, "{body}");
}

#[test]
fn without_a_token_the_server_listens_on_loopback_only() {
    let dir = tempdir("exposed");
    let output = wfhost()
        .args(["serve", "--store"])
        .arg(dir.join("wf.db"))
        .args(["--http", "0.0.0.0:0"])
        .env_remove("WFHOST_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let error = text(&output.stderr);
    assert!(error.contains("beyond this machine"), "{error}");
    assert!(error.contains("--token-file"), "{error}");
    // With a token it may.
    let server = HttpServer::start_with_env(
        &dir,
        dir.join("wf2.db").to_str().unwrap(),
        &["--http", "0.0.0.0:0"],
        &[("WFHOST_TOKEN", "t")],
    );
    assert!(server.url.starts_with("http://0.0.0.0:"), "{}", server.url);
}

#[test]
fn every_acknowledged_start_survives_kill_9() {
    let dir = tempdir("kill");
    let store = dir.join("wf.db");
    let mut server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let module = put_probe(&server.client());
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let url = server.url.clone();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (acknowledged, url, module) =
                (Arc::clone(&acknowledged), url.clone(), module.clone());
            std::thread::spawn(move || {
                let client = wfhost_client::Client::new(&url)
                    .unwrap()
                    .with_timeout(Duration::from_secs(10));
                for i in 0..125 {
                    let n = t * 125 + i;
                    let id = format!("k-{n}");
                    // Every other one naps ten seconds: those are running when the server
                    // dies (and still when it is back, however long the restart takes on a
                    // busy machine), and go on after the restart; the others end with their
                    // input.
                    let (entry, input, result) = if n % 2 == 0 {
                        ("nap", json!(10_000), json!("rested"))
                    } else {
                        ("sleepy", json!(n % 7 + 1), json!(n % 7 + 1))
                    };
                    match client.start(&start_request(&id, &module, entry, input)) {
                        Ok(started) => acknowledged.lock().unwrap().push((id, started.new, result)),
                        // The server is gone: whatever was not acknowledged may or may not
                        // exist.
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    common::wait_until("a third of the starts are acknowledged", || {
        acknowledged.lock().unwrap().len() >= 333
    });
    server.kill();
    for thread in threads {
        thread.join().unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() >= 333, "{}", acknowledged.len());
    assert!(acknowledged.iter().all(|(_, new, _)| *new));

    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let client = server.client();
    let running = acknowledged
        .iter()
        .filter(|(id, _, _)| client.status(id).unwrap().status == "running")
        .count();
    assert!(running > 0, "none was running when the server was killed");
    for (id, _, expected) in &acknowledged {
        let done = client.result(id, Some(Duration::from_secs(120))).unwrap();
        assert_eq!(done.status, "completed", "{id}: {done:?}");
        let result: Value = serde_json::from_str(done.result.unwrap().get()).unwrap();
        assert_eq!(&result, expected, "{id}");
    }
}

/// Raises this process's limit on open files to at least `files` (its hard limit at most).
fn raise_file_limit(files: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid resource and a pointer to a live rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < files {
            limit.rlim_cur = files.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    assert!(
        limit.rlim_cur >= files,
        "this machine lets a process open only {} files",
        limit.rlim_cur
    );
}

/// A server whose process may open fewer files than `--max-connections` asks for serves as many
/// connections as fit, says so when it starts, and answers the clients past them 503 at once,
/// rather than failing its accepts and leaving them hanging with no answer.
#[test]
fn past_its_open_file_limit_a_server_answers_503_and_says_so() {
    let dir = tempdir("nofile");
    let store = dir.join("wf.db");
    let server = HttpServer::start_under(
        &dir,
        store.to_str().unwrap(),
        // The held connections send nothing: they must outlast the checks, however slow the
        // machine, rather than be closed by the header timeout (10 s by default).
        &["--max-connections", "20000", "--header-timeout", "10m"],
        &[],
        &["prlimit", "--nofile=300:300", "--"],
    );
    let log = server.log();
    let said = log
        .lines()
        .find(|l| l.contains("connections at once, not the 20000 asked for"))
        .unwrap_or_else(|| panic!("the server says how many connections it takes: {log}"));
    let cap: usize = said
        .split("serves at most ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!((100..300).contains(&cap), "{said}");
    let addr = server.addr();
    // As many as it takes, held open (each waits for a request, as a connection does).
    let held: Vec<TcpStream> = (0..cap)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    common::wait_until("the server is full", || {
        raw(
            &addr,
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
        .0 == 503
    });
    // Every one past them is answered at once; none hangs.
    for _ in 0..40 {
        let (status, body) = raw(
            &addr,
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(
            (status, code(&body).as_str()),
            (503, "too_many_connections")
        );
    }
    drop(held);
    common::wait_until("the server takes connections again", || {
        raw(
            &addr,
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
        .0 == 200
    });
    healthy(&server);
}
