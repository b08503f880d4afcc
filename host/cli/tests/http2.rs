//! `wfhost serve --http` over HTTP/2: with prior knowledge on plain HTTP and by ALPN over TLS,
//! many waits on one connection, the same limit on requests at once as over HTTP/1.1, and an
//! idle connection closed.

mod common;

use std::time::Duration;

use common::http::{code, put_probe, raw, start_request, HttpServer};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http2::SendRequest;
use hyper::{Request, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

fn tempdir(name: &str) -> std::path::PathBuf {
    common::tempdir("http2", name)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP/2 connection to `addr` with prior knowledge, and the task that drives it (it ends
/// when the connection does). One request has been answered on it, so the client knows the
/// server's settings (how many streams it takes) before the test opens more.
async fn connect(
    addr: &str,
) -> (
    SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let driver = tokio::spawn(connection);
    let (status, version, _) = get(sender.clone(), addr, "/healthz").await;
    assert_eq!((status, version), (200, Version::HTTP_2));
    (sender, driver)
}

/// `GET path` on `sender`: the status, the version it came in, and the body.
async fn get(sender: SendRequest<Empty<Bytes>>, addr: &str, path: &str) -> (u16, Version, String) {
    let request = Request::get(format!("http://{addr}{path}"))
        .body(Empty::new())
        .unwrap();
    send(sender, request).await
}

/// `request` on `sender`: the status, the version it came in, and the body.
async fn send(
    mut sender: SendRequest<Empty<Bytes>>,
    request: Request<Empty<Bytes>>,
) -> (u16, Version, String) {
    sender.ready().await.unwrap();
    let answer = sender.send_request(request).await.unwrap();
    let (status, version) = (answer.status().as_u16(), answer.version());
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    (status, version, String::from_utf8_lossy(&body).into_owned())
}

fn waiting_results(server: &HttpServer) -> u64 {
    server
        .client()
        .metrics()
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("wfhost_http_waiting_results "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap()
}

#[test]
fn many_waits_share_one_http2_connection() {
    let dir = tempdir("waits");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let client = server.client();
    let module = put_probe(&client);
    const WAITS: usize = 300;
    for n in 0..WAITS {
        client
            .start(&start_request(
                &format!("w-{n}"),
                &module,
                "collect",
                json!(1),
            ))
            .unwrap();
    }
    let addr = server.addr();
    let runtime = runtime();
    let (sender, driver) = runtime.block_on(connect(&addr));
    // More than one connection's streams (128): the client queues the rest until some end.
    let waits: Vec<_> = (0..WAITS)
        .map(|n| {
            let (sender, addr) = (sender.clone(), addr.clone());
            runtime.spawn(async move {
                get(
                    sender,
                    &addr,
                    &format!("/v1/workflows/w-{n}/result?wait=60s"),
                )
                .await
            })
        })
        .collect();
    // The server holds as many waits as one connection may carry.
    common::wait_until("128 waits held", || waiting_results(&server) >= 128);
    assert_eq!(waiting_results(&server), 128);
    for n in 0..WAITS {
        client
            .send(
                &format!("w-{n}"),
                &serde_json::value::to_raw_value(&7).unwrap(),
            )
            .unwrap();
    }
    let answers = runtime.block_on(async {
        let mut answers = Vec::new();
        for wait in waits {
            let answer = tokio::time::timeout(Duration::from_secs(60), wait).await;
            answers.push(answer.expect("every wait is answered").unwrap());
        }
        answers
    });
    assert_eq!(answers.len(), WAITS);
    for (status, version, body) in &answers {
        assert_eq!((*status, *version), (200, Version::HTTP_2), "{body}");
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["result"], json!([7]), "{body}");
    }
    drop(sender);
    runtime.block_on(driver).unwrap().unwrap();
}

#[test]
fn over_http2_each_request_takes_a_slot_of_max_connections() {
    let dir = tempdir("slots");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &["--max-connections", "4"]);
    let client = server.client();
    let module = put_probe(&client);
    for n in 0..5 {
        client
            .start(&start_request(
                &format!("s-{n}"),
                &module,
                "collect",
                json!(1),
            ))
            .unwrap();
    }
    drop(client);
    let addr = server.addr();
    let runtime = runtime();
    let (sender, _driver) = runtime.block_on(connect(&addr));
    // Until the other connections (the starts', the readiness probe's) are gone, they hold
    // slots too: the count goes down after their slot is free.
    runtime.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (_, _, metrics) = get(sender.clone(), &addr, "/metrics").await;
            if metrics.lines().any(|l| l == "wfhost_http_connections 1") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{metrics}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // The connection holds one slot of four: three of the five waits get one, two are refused.
    let mut waits = tokio::task::JoinSet::new();
    for n in 0..5 {
        let (sender, addr) = (sender.clone(), addr.clone());
        waits.spawn_on(
            async move {
                get(
                    sender,
                    &addr,
                    &format!("/v1/workflows/s-{n}/result?wait=5m"),
                )
                .await
            },
            runtime.handle(),
        );
    }
    for _ in 0..2 {
        let next = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), waits.join_next()).await
        });
        let (status, version, body) = next.expect("two are refused at once").unwrap().unwrap();
        assert_eq!((status, version), (503, Version::HTTP_2), "{body}");
        assert_eq!(code(&body), "too_many_requests", "{body}");
        assert!(body.contains("--max-connections"), "{body}");
    }
    assert!(waits.try_join_next().is_none(), "the other three wait");
    // All four slots are held: a new HTTP/1.1 connection is turned away as ever.
    let (status, body) = raw(
        &addr,
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        (status, code(&body).as_str()),
        (503, "too_many_connections")
    );
    // The three waits given up (their streams reset): their slots come back.
    waits.abort_all();
    common::wait_until("the slots come back", || {
        raw(
            &addr,
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
        .0 == 200
    });
    let (status, version, _) = runtime.block_on(get(sender, &addr, "/healthz"));
    assert_eq!((status, version), (200, Version::HTTP_2));
}

#[test]
fn an_idle_http2_connection_is_closed_and_a_waiting_one_is_not() {
    let dir = tempdir("idle");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &["--header-timeout", "3s"]);
    let client = server.client();
    let module = put_probe(&client);
    client
        .start(&start_request("long", &module, "collect", json!(1)))
        .unwrap();
    let addr = server.addr();
    let runtime = runtime();
    // A wait three times the header timeout keeps its connection open, and is answered.
    let (sender, driver) = runtime.block_on(connect(&addr));
    let (status, _, body) = runtime.block_on(get(
        sender.clone(),
        &addr,
        "/v1/workflows/long/result?wait=9s",
    ));
    assert_eq!(status, 202, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["status"], json!("running"), "{body}");
    // Still open after the wait: it takes the next request (the idle time counts from the
    // wait's end).
    let (status, version, _) = runtime.block_on(get(sender.clone(), &addr, "/healthz"));
    assert_eq!((status, version), (200, Version::HTTP_2));
    // Then idle: the server closes it (the client's side of it ends), though the client keeps
    // its handle to send more.
    let ended =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(60), driver).await });
    assert!(ended.is_ok(), "the idle connection was not closed");
    assert!(sender.is_closed());
}

#[test]
fn over_tls_a_client_that_offers_h2_gets_http2() {
    let dir = tempdir("tls");
    let (certificate, cert, key) = common::http::self_signed(&dir);
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certificate.der().clone()).unwrap();
    let connect_tls = |alpn: &[&[u8]]| {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let addr = server.addr();
        async move {
            let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            connector.connect(name, stream).await.unwrap()
        }
    };
    let runtime = runtime();
    let addr = server.addr();
    // Offered h2 and http/1.1: the server picks h2 and speaks it.
    let stream = runtime.block_on(connect_tls(&[b"h2", b"http/1.1"]));
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, origin) = runtime.block_on(async {
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        (sender, format!("https://{addr}"))
    });
    let (status, version, body) = runtime.block_on(get(sender.clone(), &addr, "/readyz"));
    assert_eq!((status, version), (200, Version::HTTP_2), "{body}");
    // A browser's write over HTTP/2 names its host in `:authority` alone: its own page's
    // `Origin` is the server's, so it is let through (the workflow is unknown: 404) ...
    let cancel = |origin: &str| {
        Request::post(format!("https://{addr}/v1/workflows/nobody/cancel"))
            .header("origin", origin)
            .body(Empty::new())
            .unwrap()
    };
    let (status, _, body) = runtime.block_on(send(sender.clone(), cancel(&origin)));
    assert_eq!(
        (status, code(&body).as_str()),
        (404, "unknown_workflow"),
        "{body}"
    );
    // ... and another page's is refused, as over HTTP/1.1.
    let (status, _, body) = runtime.block_on(send(sender, cancel("https://elsewhere.example")));
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "cross_origin"),
        "{body}"
    );
    // Offered http/1.1 only: HTTP/1.1, as before.
    let stream = runtime.block_on(connect_tls(&[b"http/1.1"]));
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (status, version) = runtime.block_on(async {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = Request::get(format!("https://{addr}/readyz"))
            .header("host", addr.as_str())
            .body(Empty::<Bytes>::new())
            .unwrap();
        let answer = sender.send_request(request).await.unwrap();
        (answer.status().as_u16(), answer.version())
    });
    assert_eq!((status, version), (200, Version::HTTP_11));
}

#[test]
fn over_http2_a_request_without_the_token_closes_its_connection() {
    let dir = tempdir("token");
    let store = dir.join("wf.db");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    // An idle connection would be closed after the header timeout: a minute, longer than the
    // test waits for the close.
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &[
            "--token-file",
            token_file.to_str().unwrap(),
            "--header-timeout",
            "60s",
        ],
    );
    let addr = server.addr();
    let runtime = runtime();
    let list = |token: Option<&str>| {
        let mut request = Request::get(format!("http://{addr}/v1/workflows"));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.body(Empty::new()).unwrap()
    };
    // With the token: answered, and the connection stays.
    let (sender, driver) = runtime.block_on(connect(&addr));
    let (status, version, body) =
        runtime.block_on(send(sender.clone(), list(Some("s3cret-token"))));
    assert_eq!((status, version), (200, Version::HTTP_2), "{body}");
    assert!(!driver.is_finished());
    // Without it: 401, and the server closes the connection (a client without the token
    // keeps none, as over HTTP/1.1).
    let (status, _, body) = runtime.block_on(send(sender.clone(), list(None)));
    assert_eq!(
        (status, code(&body).as_str()),
        (401, "unauthorized"),
        "{body}"
    );
    let ended =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(60), driver).await });
    assert!(ended.is_ok(), "the connection was kept");
    assert!(sender.is_closed());
}

#[test]
fn an_http2_answer_the_client_takes_nothing_of_closes_its_connection() {
    let dir = tempdir("stall");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let addr = server.addr();
    let runtime = runtime();
    let (mut sender, driver) = runtime.block_on(async {
        let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        // Each stream's window: 1 KiB, opened again only as the client reads.
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(1024)
            .handshake(TokioIo::new(stream))
            .await
            .unwrap();
        (sender, tokio::spawn(connection))
    });
    // The web UI's style sheet (6 KiB: one chunk, the answer's last byte apart), its body never
    // read: the server can send 1 KiB of it.
    let script = Request::get(format!("http://{addr}/ui/app.css"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let held = runtime.block_on(async {
        sender.ready().await.unwrap();
        sender.send_request(script).await.unwrap()
    });
    assert_eq!(held.status(), 200);
    // The connection is kept busy with a request a second, so it is never idle: only the
    // stalled answer (60 s without moving) closes it.
    let closed = runtime.block_on(async {
        let busy = async {
            loop {
                let request = Request::get(format!("http://{addr}/healthz"))
                    .body(Empty::new())
                    .unwrap();
                let ready = sender.ready().await;
                if ready.is_err() || sender.send_request(request).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(120), async {
            busy.await;
            driver.await
        })
        .await
    });
    assert!(closed.is_ok(), "the stalled answer's connection was kept");
    drop(held);
}

#[test]
fn over_http2_the_host_a_request_names_is_checked_as_over_http1() {
    let dir = tempdir("host");
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    let addr = server.addr();
    let runtime = runtime();
    let (sender, _driver) = runtime.block_on(connect(&addr));
    // A name rebound to 127.0.0.1, on a server with no token: HTTP/2 names it in `:authority`.
    let (status, _, body) =
        runtime.block_on(get(sender.clone(), "evil.example:8080", "/v1/workflows"));
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "not_loopback"),
        "{body}"
    );
    // A user in the name.
    let (status, _, body) = runtime.block_on(get(
        sender.clone(),
        &format!("127.0.0.1@{addr}"),
        "/v1/workflows",
    ));
    assert_eq!(
        (status, code(&body).as_str()),
        (400, "bad_request"),
        "{body}"
    );
    // `:authority` and a `Host` header that disagree.
    let request = Request::get(format!("http://{addr}/v1/workflows"))
        .header("host", "localhost")
        .body(Empty::new())
        .unwrap();
    let (status, _, body) = runtime.block_on(send(sender.clone(), request));
    assert_eq!(
        (status, code(&body).as_str()),
        (400, "bad_request"),
        "{body}"
    );
    // Loopback's own name: answered.
    let (status, _, body) = runtime.block_on(get(sender, &addr, "/v1/workflows"));
    assert_eq!(status, 200, "{body}");
}
