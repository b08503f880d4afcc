//! A server that is starting or restarting is asked again, within a bounded time, when asking
//! again cannot do anything twice; a call that may have been done is not sent again.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wfhost_client::wire::StartRequest;
use wfhost_client::Client;

/// A server that answers each request with the next of `answers` (status, body), each with
/// `Retry-After: 0`, and counts the requests; the last answer repeats.
struct Scripted {
    url: String,
    requests: Arc<AtomicUsize>,
}

fn scripted(answers: Vec<(u16, &'static str)>) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requests);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let (status, text) = answers[n.min(answers.len() - 1)];
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nretry-after: 0\r\n\
                 connection: close\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    Scripted { url, requests }
}

const STARTING: (u16, &str) = (
    503,
    r#"{"error": {"code": "not_ready", "message": "the server has no host just now"}}"#,
);
const STORE: (u16, &str) = (
    503,
    r#"{"error": {"code": "store", "message": "the store did not answer"}}"#,
);
const READY: (u16, &str) = (200, r#"{"status": "ok"}"#);
const STARTED: (u16, &str) = (
    201,
    r#"{"new": true, "workflow": {"id": "w", "status": "running", "entry": "e", "module": "m",
        "module_name": "m", "number": 1, "started": 0, "steps": 0, "waiting_for_host": false,
        "input": null, "unread_messages": 0, "cancel_asked": false, "paused": false}}"#,
);

fn start(id: Option<&str>) -> StartRequest {
    StartRequest {
        id: id.map(str::to_string),
        module: "m".repeat(64),
        entry: "e".into(),
        input: serde_json::value::to_raw_value(&1).unwrap(),
    }
}

#[test]
fn a_server_that_is_starting_is_asked_again_until_it_answers() {
    let server = scripted(vec![STARTING, STARTING, READY]);
    let client = Client::new(&server.url).unwrap();
    assert_eq!(client.ready().unwrap().status, "ok");
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
}

#[test]
fn a_start_without_an_id_is_not_sent_again_when_it_may_have_been_done() {
    // "not_ready": nothing was done, so even a start without an id is asked again.
    let server = scripted(vec![STARTING, STARTED]);
    let client = Client::new(&server.url).unwrap();
    assert!(client.start(&start(None)).unwrap().new);
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);

    // A store's error may come after the start was written: without an id, once.
    let server = scripted(vec![STORE, STARTED]);
    let client = Client::new(&server.url).unwrap();
    let error = client.start(&start(None)).unwrap_err();
    assert_eq!((error.status(), error.code()), (Some(503), "store"));
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    // With an id a start is safe to send again.
    let client = Client::new(&server.url).unwrap();
    assert!(client.start(&start(Some("w"))).unwrap().new);
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
}

#[test]
fn a_message_is_not_sent_twice() {
    let server = scripted(vec![STORE, (202, r#"{"message": 1}"#)]);
    let client = Client::new(&server.url).unwrap();
    let message = serde_json::value::to_raw_value(&"hi").unwrap();
    let error = client.send("w", &message).unwrap_err();
    assert_eq!(error.code(), "store");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn without_time_to_retry_the_refusal_is_the_answer() {
    let server = scripted(vec![STARTING, READY]);
    let client = Client::new(&server.url)
        .unwrap()
        .with_retry_for(Duration::ZERO);
    let error = client.ready().unwrap_err();
    assert_eq!((error.status(), error.code()), (Some(503), "not_ready"));
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn no_server_listening_is_said_as_refused() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Client::new(&format!("http://127.0.0.1:{port}"))
        .unwrap()
        .with_retry_for(Duration::ZERO);
    let error = client.ready().unwrap_err();
    assert_eq!((error.status(), error.code()), (None, "refused"));
    assert!(
        error.message().contains("is it running?"),
        "{}",
        error.message()
    );
}
