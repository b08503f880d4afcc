//! Traces over OTLP, against a real `wfhost serve --otlp-endpoint` and a collector the test
//! runs itself (it decodes what the exporter sends with the OTLP protobuf types): one trace
//! from a caller's `traceparent` through the request's span, the workflow's run, its steps and
//! its calls (a worker's task and an HTTP request, each handed the call's span), to a child's
//! run; and the run after a crash, in the same trace.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::http::{put_probe, start_request, HttpServer};
use common::tasks::ok;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::json;
use wfhost_test_programs::postgres::Postgres;

/// The caller's span: `traceparent` of the W3C's example.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

fn caller() -> String {
    format!("00-{TRACE}-{CALLER}-01")
}

/// What the collector heard: spans, and the `traceparent` of each `GET /hello`.
enum Heard {
    Spans(Vec<Span>),
    Hello(Option<String>),
}

/// A collector on loopback: `POST /v1/traces` (OTLP, protobuf) and `GET /hello`.
fn collector() -> (String, mpsc::Receiver<Heard>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || connection(stream, &tx));
        }
    });
    (url, rx)
}

/// Answers the requests of one connection (kept alive) until the client closes it.
fn connection(stream: TcpStream, tx: &mpsc::Sender<Heard>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = HashMap::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
            }
        }
        let length: usize = headers
            .get("content-length")
            .map_or(0, |l| l.parse().unwrap());
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let answer: &[u8] = if line.starts_with("POST /v1/traces ") {
            let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
            let spans = request
                .resource_spans
                .into_iter()
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .collect();
            let _ = tx.send(Heard::Spans(spans));
            b""
        } else if line.starts_with("GET /hello ") {
            let _ = tx.send(Heard::Hello(headers.get("traceparent").cloned()));
            b"hi"
        } else {
            b"?"
        };
        write!(
            writer,
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        )
        .unwrap();
        writer.write_all(answer).unwrap();
    }
}

/// What the collector has heard so far, and the spans by name.
#[derive(Default)]
struct Heards {
    spans: Vec<Span>,
    hellos: Vec<Option<String>>,
}

impl Heards {
    /// Takes what the collector hears until `done` holds (at most a minute).
    fn until(&mut self, rx: &mpsc::Receiver<Heard>, done: impl Fn(&Heards) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Heard::Spans(spans)) => self.spans.extend(spans),
                Ok(Heard::Hello(parent)) => self.hellos.push(parent),
                Err(_) => panic!(
                    "the collector heard only {:?}",
                    self.spans.iter().map(|s| &s.name).collect::<Vec<_>>()
                ),
            }
        }
    }

    fn named(&self, name: &str) -> Vec<&Span> {
        self.spans.iter().filter(|s| s.name == name).collect()
    }

    /// The one span named `name` whose `wfhost.workflow.id` is `id` (a second is an error).
    fn run_of(&self, name: &str, id: &str) -> Option<&Span> {
        let runs: Vec<&Span> = self
            .named(name)
            .into_iter()
            .filter(|s| attribute(s, "wfhost.workflow.id").as_deref() == Some(id))
            .collect();
        assert!(runs.len() <= 1, "{} spans of {id}'s run", runs.len());
        runs.first().copied()
    }

    fn children_of<'a>(&'a self, parent: &Span, name: &str) -> Vec<&'a Span> {
        self.spans
            .iter()
            .filter(|s| s.name == name && s.parent_span_id == parent.span_id)
            .collect()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    Some(match value.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(n) => n.to_string(),
        Value::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

/// A span's status: its code (0 unset, 1 ok, 2 error) and message.
fn status(span: &Span) -> (i32, String) {
    span.status
        .as_ref()
        .map_or((0, String::new()), |s| (s.code, s.message.clone()))
}

/// The span id a `traceparent` names, checking its trace is `trace`.
fn span_of(traceparent: &str, trace: &str) -> String {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], trace, "{traceparent}");
    parts[2].to_string()
}

fn serve(dir: &std::path::Path, collector: &str, extra: &[&str]) -> HttpServer {
    let store = dir.join("wf.db");
    let mut args = vec![
        "--otlp-endpoint",
        collector,
        "--worker-function",
        "payments.charge",
    ];
    args.extend_from_slice(extra);
    // Batches go every 50 ms rather than every 5 s.
    HttpServer::start_with_env(
        dir,
        store.to_str().unwrap(),
        &args,
        &[("OTEL_BSP_SCHEDULE_DELAY", "50")],
    )
}

#[test]
fn a_callers_trace_goes_through_the_request_the_run_its_steps_its_calls_and_its_children() {
    let dir = common::tempdir("traces", "one-trace");
    let (url, rx) = collector();
    let allowed = format!("{url}/*");
    let server = serve(&dir, &url, &["--allow-http", &allowed]);
    let api = server.client().with_traceparent(caller());
    let module = put_probe(&api);

    // A worker's task: handed the call's span.
    let request = start_request(
        "pay",
        &module,
        "call_retrying",
        json!(["payments.charge", {"amount": 3}, 1, 10]),
    );
    api.start(&request).unwrap();
    let task = api
        .poll_task(&["payments.charge".to_string()], Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    let task_parent = task.traceparent.clone().expect("the task's traceparent");
    let task_span = span_of(&task_parent, TRACE);
    api.complete_task(&task.task, &ok(json!("charged")))
        .unwrap();
    let done = api.result("pay", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed", "{done:?}");

    // An HTTP request: sent with the call's span.
    let request = start_request("fetch", &module, "http_get", json!(format!("{url}/hello")));
    api.start(&request).unwrap();
    let done = api.result("fetch", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed", "{done:?}");

    // A child: its run is its parent's run's child.
    api.start(&start_request("tree", &module, "nest", json!(1)))
        .unwrap();
    let done = api.result("tree", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed", "{done:?}");

    // A failure: its run's span is an error, with the failure's message.
    api.start(&start_request(
        "broken",
        &module,
        "fail",
        json!("out of stock"),
    ))
    .unwrap();
    let done = api.result("broken", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "failed", "{done:?}");

    let mut heard = Heards::default();
    heard.until(&rx, |h| {
        h.named("POST /v1/workflows").len() == 4
            && h.run_of("run call_retrying", "pay").is_some()
            && h.run_of("run http_get", "fetch").is_some()
            && h.named("run nest").len() == 2
            && h.run_of("run fail", "broken").is_some()
            && !h.hellos.is_empty()
            && h.named("call payments.charge").len() == 1
            && h.named("call wfhost.http").len() == 1
    });

    // A worker's polls are no spans: its task's span is the call's.
    assert!(heard.named("POST /v1/tasks/poll").is_empty());
    // Every span of the workflows is in the caller's trace.
    for span in &heard.spans {
        assert_eq!(hex(&span.trace_id), TRACE, "{}", span.name);
    }
    // The requests' spans are the caller's span's children.
    let starts = heard.named("POST /v1/workflows");
    assert_eq!(starts.len(), 4);
    // Each run ended with its workflow: ok, or the failure as the span's error.
    for name in ["run call_retrying", "run http_get", "run nest"] {
        for run in heard.named(name) {
            assert_eq!(status(run), (1, String::new()), "{name}");
            assert_eq!(attribute(run, "wfhost.left"), None, "{name}");
        }
    }
    let broken = heard.run_of("run fail", "broken").unwrap();
    assert_eq!(status(broken).0, 2);
    assert!(
        status(broken).1.contains("out of stock"),
        "{:?}",
        status(broken)
    );
    for start in &starts {
        assert_eq!(hex(&start.parent_span_id), CALLER);
        assert_eq!(start.kind, SpanKind::Server as i32);
        assert_eq!(
            attribute(start, "http.response.status_code").as_deref(),
            Some("201")
        );
    }
    let started_by_a_request = |run: &Span| starts.iter().any(|s| s.span_id == run.parent_span_id);

    // The worker's task.
    let pay = heard.run_of("run call_retrying", "pay").unwrap();
    assert!(started_by_a_request(pay));
    assert_eq!(
        attribute(pay, "wfhost.entry").as_deref(),
        Some("call_retrying")
    );
    let steps = heard.children_of(pay, "step");
    assert_eq!(steps.len(), 2, "the call, then its answer");
    let calls = heard.children_of(pay, "call payments.charge");
    assert_eq!(calls.len(), 1);
    assert_eq!(hex(&calls[0].span_id), task_span);
    assert_eq!(attribute(calls[0], "wfhost.attempt").as_deref(), Some("1"));
    assert_eq!(
        attribute(calls[0], "wfhost.idempotency_key").as_deref(),
        task.idempotency_key.as_deref()
    );
    // The run began before its call, and ended after it.
    assert!(pay.start_time_unix_nano <= calls[0].start_time_unix_nano);
    assert!(pay.end_time_unix_nano >= calls[0].end_time_unix_nano);

    // The HTTP request.
    let fetch = heard.run_of("run http_get", "fetch").unwrap();
    assert!(started_by_a_request(fetch));
    let calls = heard.children_of(fetch, "call wfhost.http");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].kind, SpanKind::Client as i32);
    let sent = heard.hellos[0]
        .as_deref()
        .expect("a traceparent on the request");
    assert_eq!(span_of(sent, TRACE), hex(&calls[0].span_id));

    // The child.
    let tree = heard.run_of("run nest", "tree").unwrap();
    assert!(started_by_a_request(tree));
    let child = heard
        .named("run nest")
        .into_iter()
        .find(|s| s.span_id != tree.span_id)
        .unwrap();
    assert_eq!(child.parent_span_id, tree.span_id);
    assert_ne!(
        attribute(child, "wfhost.workflow.id").as_deref(),
        Some("tree")
    );
    assert!(!heard.children_of(child, "step").is_empty());
}

/// `wfhost start` sends the `TRACEPARENT` of its environment, and `wfhost worker` hands its
/// command the call's span as `TRACEPARENT`.
#[test]
fn the_cli_takes_and_gives_traceparent_in_the_environment() {
    let dir = common::tempdir("traces", "worker");
    let (url, rx) = collector();
    let server = serve(&dir, &url, &[]);
    let api = server.client().with_traceparent(caller());
    let module = put_probe(&api);
    let mut worker = common::wfhost()
        .args([
            "worker",
            "--server",
            server.url(),
            "--function",
            "payments.charge",
            "--",
        ])
        .args(["sh", "-c", "printf '\"%s\"' \"$TRACEPARENT\""])
        // The worker's own trace is not the task's.
        .env(
            "TRACEPARENT",
            "00-11111111111111111111111111111111-2222222222222222-01",
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = common::wfhost()
        .args([
            "start",
            &module,
            "call_retrying",
            "--id",
            "traced",
            "--server",
            server.url(),
        ])
        .args(["--input", r#"["payments.charge", 1, 1, 10]"#])
        .env("TRACEPARENT", caller())
        .output()
        .unwrap();
    assert!(
        started.status.success(),
        "{}",
        common::text(&started.stderr)
    );
    let done = api.result("traced", Some(Duration::from_secs(60))).unwrap();
    let _ = worker.kill();
    let _ = worker.wait();
    assert_eq!(done.status, "completed", "{done:?}");
    let result: serde_json::Value = serde_json::from_str(done.result.unwrap().get()).unwrap();
    let parent = result["ok"].as_str().expect("the command's TRACEPARENT");
    let span = span_of(parent, TRACE);
    let mut heard = Heards::default();
    heard.until(&rx, |h| {
        h.named("call payments.charge").len() == 1
            && h.run_of("run call_retrying", "traced").is_some()
    });
    assert_eq!(hex(&heard.named("call payments.charge")[0].span_id), span);
    // The start's request is a child of the script's span.
    let run = heard.run_of("run call_retrying", "traced").unwrap();
    let request = heard
        .spans
        .iter()
        .find(|s| s.span_id == run.parent_span_id)
        .unwrap();
    assert_eq!(request.name, "POST /v1/workflows");
    assert_eq!(hex(&request.parent_span_id), CALLER);
}

#[test]
fn a_run_taken_up_after_a_crash_is_in_the_trace_of_the_run_before() {
    let dir = common::tempdir("traces", "crash");
    let store = dir.join("wf.db");
    crash(&dir, store.to_str().unwrap(), &[]);
}

/// On PostgreSQL the task's row, taken over by the host that takes the workflow up, carries
/// that host's call's span.
#[test]
fn a_run_another_host_takes_over_is_in_the_trace_of_the_run_before() {
    let dir = common::tempdir("traces", "takeover");
    let store = Postgres::shared().database("traces_takeover");
    // The first delivery, held by the test when the host dies, runs out in 2 s.
    crash(&dir, &store, &["--lease", "2s", "--task-timeout", "2s"]);
}

/// Kills the host of a workflow waiting for a worker, starts another, and checks the run it
/// takes up.
fn crash(dir: &std::path::Path, store: &str, extra: &[&str]) {
    let (url, rx) = collector();
    // The collector from the standard variable alone; a start with no traceparent.
    let env = [
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
    ];
    let mut args = vec!["--worker-function", "payments.charge"];
    args.extend_from_slice(extra);
    let mut server = HttpServer::start_with_env(dir, store, &args, &env);
    let api = server.client();
    let module = put_probe(&api);
    let request = start_request(
        "order",
        &module,
        "call_retrying",
        json!(["payments.charge", 1, 1, 10]),
    );
    api.start(&request).unwrap();
    let first = api
        .poll_task(&["payments.charge".to_string()], Duration::from_secs(30))
        .unwrap()
        .expect("a task");
    let before = api.status("order").unwrap().host;
    let mut heard = Heards::default();
    // The request's span, a trace's root, is exported before the crash.
    heard.until(&rx, |h| !h.named("POST /v1/workflows").is_empty());
    let start = heard.named("POST /v1/workflows")[0].clone();
    assert!(start.parent_span_id.is_empty(), "a trace's root");
    let trace = hex(&start.trace_id);
    assert_eq!(
        span_of(first.traceparent.as_deref().unwrap(), &trace).len(),
        16
    );
    server.kill();

    let server = HttpServer::start_with_env(dir, store, &args, &env);
    let api = server.client();
    // Taken up by the new host (on a shared store, once the dead one's lease is over).
    common::wait_until("the new host takes the workflow up", || {
        let host = api.status("order").unwrap().host;
        host.is_some() && host != before
    });
    let task = api
        .poll_task(&["payments.charge".to_string()], Duration::from_secs(30))
        .unwrap()
        .expect("the call, made again");
    assert_eq!(task.idempotency_key, first.idempotency_key);
    let again = span_of(task.traceparent.as_deref().unwrap(), &trace);
    api.complete_task(&task.task, &ok(json!("charged")))
        .unwrap();
    let done = api.result("order", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed", "{done:?}");

    heard.until(&rx, |h| h.run_of("run call_retrying", "order").is_some());
    let run = heard.run_of("run call_retrying", "order").unwrap();
    assert_eq!(hex(&run.trace_id), trace);
    assert_eq!(
        run.parent_span_id, start.span_id,
        "the request's span is its parent"
    );
    assert_eq!(attribute(run, "wfhost.resumed").as_deref(), Some("true"));
    assert_eq!(status(run), (1, String::new()), "ended ok");
    let calls = heard.children_of(run, "call payments.charge");
    assert_eq!(calls.len(), 1);
    assert_eq!(hex(&calls[0].span_id), again);
    // Its replayed step is no span; the step that took the answer is.
    assert_eq!(heard.children_of(run, "step").len(), 1);
}
