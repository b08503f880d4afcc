//! The HTTP API of a real `wfhost serve --http` on a SQLite store, through a real HTTP client:
//! modules, starts (new, idempotent, conflicting), results with and without a wait, messages,
//! the outbox, cancels, pages of workflows across a cursor, history, hosts, metrics (read by
//! Prometheus' own parser), the OpenAPI document; and the CLI's client commands with
//! `--server`, and the library's `Client` over HTTP.

mod common;

use std::time::Duration;

use common::http::{
    code, openapi_check, promtool_check, put_probe, raw, start_request, HttpServer,
};
use common::{text, wfhost};
use serde_json::{json, Value};
use wfhost_client::wire::{HistoryParams, ListParams, OutboxParams};

fn tempdir(name: &str) -> std::path::PathBuf {
    common::tempdir("http", name)
}

fn sqlite_server(name: &str) -> (std::path::PathBuf, HttpServer) {
    let dir = tempdir(name);
    let store = dir.join("wf.db");
    let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
    (dir, server)
}

fn json_of(raw: &serde_json::value::RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap()
}

#[test]
fn a_workflow_from_its_module_to_its_result() {
    let (_dir, server) = sqlite_server("lifecycle");
    let api = server.client();

    let probe = common::http::probe();
    let (module, new) = api.put_module(&probe).unwrap();
    assert!(new);
    assert_eq!(module.size, probe.len() as u64);
    assert!(module.entry_points.contains(&"echo".to_string()));
    let (again, new) = api.put_module(&probe).unwrap();
    assert!(!new, "a module stored twice is stored once");
    assert_eq!(again.hash, module.hash);
    let listed = api.modules().unwrap();
    assert_eq!(listed.modules.len(), 1);
    assert_eq!(listed.modules[0].hash, module.hash);

    let started = api
        .start(&start_request(
            "e1",
            &module.hash,
            "echo",
            json!({"a": [1, 2]}),
        ))
        .unwrap();
    assert!(started.new);
    assert_eq!(started.workflow.id, "e1");
    let done = api.result("e1", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "completed");
    assert_eq!(json_of(done.result.as_ref().unwrap()), json!({"a": [1, 2]}));
    assert_eq!(json_of(&done.input), json!({"a": [1, 2]}));
    assert_eq!(done.steps, 1);
    assert!(done.finished.is_some());

    // The same start again: the same workflow, nothing new.
    let same = api
        .start(&start_request(
            "e1",
            &module.hash,
            "echo",
            json!({"a": [1, 2]}),
        ))
        .unwrap();
    assert!(!same.new);
    assert_eq!(same.workflow.status, "completed");
    // Another input under the id: refused, naming what differs.
    let error = api
        .start(&start_request("e1", &module.hash, "echo", json!(5)))
        .unwrap_err();
    assert_eq!(error.status(), Some(409));
    assert_eq!(error.code(), "conflict");
    assert!(
        error.message().contains("another input"),
        "{}",
        error.message()
    );

    // A start without an id gets one.
    let mut anonymous = start_request("x", &module.hash, "echo", json!(1));
    anonymous.id = None;
    let made = api.start(&anonymous).unwrap();
    assert!(made.workflow.id.starts_with("wf-"), "{}", made.workflow.id);

    // Without a wait a running workflow answers 202 at once; with one, 200 once it ends.
    api.start(&start_request("nap", &module.hash, "nap", json!(300)))
        .unwrap();
    let (status, body) = raw(
        &server.addr(),
        b"GET /v1/workflows/nap/result HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    let body: Value = serde_json::from_str(&body).unwrap();
    if body["status"] == "running" {
        assert_eq!(status, 202);
    } else {
        assert_eq!(status, 200, "{body}");
    }
    let rested = api.result("nap", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(rested.status, "completed");
    assert_eq!(json_of(rested.result.as_ref().unwrap()), json!("rested"));

    // Failures come back as errors with their kind.
    api.start(&start_request(
        "f1",
        &module.hash,
        "fail",
        json!("on purpose"),
    ))
    .unwrap();
    let failed = api.result("f1", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(failed.status, "failed");
    let error = failed.error.unwrap();
    assert_eq!(error.kind, "failed");
    assert!(error.message.contains("on purpose"), "{}", error.message);

    // Its history has exactly the steps its status counts, each in words.
    let history = api.history("nap", &HistoryParams::default()).unwrap();
    assert_eq!(history.steps.len() as u64, rested.steps);
    assert_eq!(history.next, None);
    assert_eq!(history.steps[0].yields[0]["kind"], "sleep");
    assert_eq!(history.steps[0].yields[0]["words"], "#1 sleep 300ms");
    let last = history.steps.last().unwrap();
    assert_eq!(last.status, json!({"done": "rested"}));
    // Page by page, a completion is told in the words of the command an earlier page yielded.
    let first = api
        .history(
            "nap",
            &HistoryParams {
                after: None,
                limit: Some(1),
            },
        )
        .unwrap();
    assert_eq!(first.steps.len(), 1);
    let second = api
        .history(
            "nap",
            &HistoryParams {
                after: first.next.clone(),
                limit: Some(1),
            },
        )
        .unwrap();
    assert_eq!(second.steps[0].step, 2);
    assert_eq!(second.steps[0].events[0]["answers"], "sleep");
    assert_eq!(
        second.steps[0].events[0]["words"],
        "#1 sleep: the time came"
    );

    // The one host, alive.
    let hosts = api.hosts().unwrap();
    assert_eq!(hosts.hosts.len(), 1);
    assert!(hosts.hosts[0].alive && hosts.hosts[0].this);
    assert_eq!(api.ready().unwrap().status, "ok");
}

#[test]
fn a_start_waits_for_the_result_in_one_request() {
    let (_dir, server) = sqlite_server("start-and-wait");
    let api = server.client();
    let module = put_probe(&api);

    // Ended within the wait: the result in the start's own answer.
    let started = api
        .start_and_wait(
            &start_request("sw-1", &module, "echo", json!({"n": 7})),
            Duration::from_secs(60),
        )
        .unwrap();
    assert!(started.new);
    assert_eq!(started.workflow.status, "completed");
    assert_eq!(
        json_of(started.workflow.result.as_ref().unwrap()),
        json!({"n": 7})
    );
    // The same start again: nothing new, the same result (200).
    let body = serde_json::to_string(
        &json!({"id": "sw-1", "module": module, "entry": "echo", "input": {"n": 7}}),
    )
    .unwrap();
    let request = format!(
        "POST /v1/workflows?wait=5s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, answer) = raw(&server.addr(), request.as_bytes());
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["new"], false);
    assert_eq!(answer["workflow"]["result"], json!({"n": 7}));

    // Still running at the deadline: 202, and where it stands.
    let body = serde_json::to_string(
        &json!({"id": "sw-2", "module": module, "entry": "wait_message", "input": 600_000}),
    )
    .unwrap();
    let request = format!(
        "POST /v1/workflows?wait=50ms HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, answer) = raw(&server.addr(), request.as_bytes());
    assert_eq!(status, 202, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        (answer["new"].clone(), answer["workflow"]["status"].clone()),
        (json!(true), json!("running"))
    );
    // Its message comes; the start sent again waits for it to end.
    api.send(
        "sw-2",
        &serde_json::value::to_raw_value(&json!("go")).unwrap(),
    )
    .unwrap();
    let ended = api
        .start_and_wait(
            &start_request("sw-2", &module, "wait_message", json!(600_000)),
            Duration::from_secs(60),
        )
        .unwrap();
    assert!(!ended.new);
    assert_eq!(ended.workflow.status, "completed");
    assert_eq!(
        json_of(ended.workflow.result.as_ref().unwrap()),
        json!("go")
    );

    // A failure is an answer, not an error: the workflow's error is in it.
    let failed = api
        .start_and_wait(
            &start_request("sw-3", &module, "fail", json!("on purpose")),
            Duration::from_secs(60),
        )
        .unwrap();
    assert_eq!(failed.workflow.status, "failed");
    assert!(failed
        .workflow
        .error
        .unwrap()
        .message
        .contains("on purpose"));

    // A bad wait starts nothing.
    let body = serde_json::to_string(
        &json!({"id": "sw-4", "module": module, "entry": "echo", "input": 1}),
    )
    .unwrap();
    let request = format!(
        "POST /v1/workflows?wait=soon HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, answer) = raw(&server.addr(), request.as_bytes());
    assert_eq!(status, 400, "{answer}");
    assert_eq!(api.status("sw-4").unwrap_err().status(), Some(404));
}

#[test]
fn pages_follow_a_cursor_to_the_end() {
    let (_dir, server) = sqlite_server("pages");
    let api = server.client();
    let module = put_probe(&api);
    for n in 0..7 {
        api.start(&start_request(
            &format!("page-{n}"),
            &module,
            "echo",
            json!(n),
        ))
        .unwrap();
    }
    api.start(&start_request("other", &module, "echo", json!("x")))
        .unwrap();
    let mut seen = Vec::new();
    let mut params = ListParams {
        prefix: Some("page-".into()),
        limit: Some(3),
        ..ListParams::default()
    };
    let mut pages = 0;
    loop {
        let page = api.list(&params).unwrap();
        pages += 1;
        assert!(page.workflows.len() <= 3);
        seen.extend(page.workflows.iter().map(|w| w.id.clone()));
        match page.next {
            Some(next) => params.after = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..7).map(|n| format!("page-{n}")).collect();
    assert_eq!(seen, expected);
    // Filters by entry point and status.
    for n in 0..7 {
        api.result(&format!("page-{n}"), Some(Duration::from_secs(60)))
            .unwrap();
    }
    let completed = api
        .list(&ListParams {
            status: Some("completed".into()),
            entry: Some("echo".into()),
            ..ListParams::default()
        })
        .unwrap();
    assert_eq!(completed.workflows.len(), 8);
    let running = api
        .list(&ListParams {
            status: Some("running".into()),
            ..ListParams::default()
        })
        .unwrap();
    assert!(running.workflows.is_empty());
    // A cursor that is not one.
    let error = api
        .list(&ListParams {
            after: Some("nonsense".into()),
            ..ListParams::default()
        })
        .unwrap_err();
    assert_eq!(error.status(), Some(400));
}

#[test]
fn messages_reach_the_workflow_and_its_own_come_back_through_the_outbox() {
    let (_dir, server) = sqlite_server("messages");
    let api = server.client();
    let module = put_probe(&api);

    api.start(&start_request("c1", &module, "collect", json!(2)))
        .unwrap();
    let first = api
        .send("c1", &serde_json::value::to_raw_value(&7).unwrap())
        .unwrap();
    let second = api
        .send("c1", &serde_json::value::to_raw_value(&8).unwrap())
        .unwrap();
    assert!(second.message > first.message);
    let done = api.result("c1", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(json_of(done.result.as_ref().unwrap()), json!([7, 8]));
    // A finished workflow takes no more messages.
    let error = api
        .send("c1", &serde_json::value::to_raw_value(&9).unwrap())
        .unwrap_err();
    assert_eq!(error.status(), Some(404));
    // A message that is not JSON.
    let (status, body) = raw(
        &server.addr(),
        b"POST /v1/workflows/c1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assert_eq!(
        (status, code(&body).as_str()),
        (400, "bad_request"),
        "{body}"
    );

    // The outbox: what `report` sends the host, waited for, then paged by cursor.
    api.start(&start_request("r1", &module, "report", json!(3)))
        .unwrap();
    let mut messages = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = api
            .outbox(
                "r1",
                &OutboxParams {
                    after: after.clone(),
                    limit: Some(2),
                    wait: Some("30s".into()),
                },
            )
            .unwrap();
        messages.extend(page.messages.iter().map(|m| json_of(&m.data)));
        after = Some(page.next.clone());
        if page.finished && page.messages.is_empty() {
            break;
        }
    }
    assert_eq!(
        messages,
        vec![
            json!("progress 0"),
            json!("progress 1"),
            json!("progress 2")
        ]
    );
}

#[test]
fn a_cancel_from_http_cancels() {
    let (_dir, server) = sqlite_server("cancel");
    let api = server.client();
    let module = put_probe(&api);
    api.start(&start_request(
        "k1",
        &module,
        "cleanup_on_cancel",
        json!(null),
    ))
    .unwrap();
    let cancelled = api.cancel("k1").unwrap();
    assert_eq!(cancelled.cancel, "asked");
    let done = api.result("k1", Some(Duration::from_secs(60))).unwrap();
    // It cleaned up and returned normally.
    assert_eq!(done.status, "completed");
    assert_eq!(json_of(done.result.as_ref().unwrap()), json!("cleaned up"));
    assert_eq!(api.cancel("k1").unwrap().cancel, "ended");
    // One that does not clean up ends cancelled.
    api.start(&start_request(
        "k2",
        &module,
        "wait_message",
        json!(600_000),
    ))
    .unwrap();
    assert_eq!(api.cancel("k2").unwrap().cancel, "asked");
    let done = api.result("k2", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done.status, "cancelled");
    let error = api.cancel("nobody").unwrap_err();
    assert_eq!(
        (error.status(), error.code()),
        (Some(404), "unknown_workflow")
    );
}

#[test]
fn metrics_pass_prometheus_own_parser_and_count_what_happened() {
    let (_dir, server) = sqlite_server("metrics");
    let api = server.client();
    let module = put_probe(&api);
    for n in 0..3 {
        api.start(&start_request(&format!("m{n}"), &module, "echo", json!(n)))
            .unwrap();
        api.result(&format!("m{n}"), Some(Duration::from_secs(60)))
            .unwrap();
    }
    let text = api.metrics().unwrap();
    promtool_check(&text);
    let value = |line: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no {line} in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(
        value("wfhost_workflows_started_total{kind=\"top_level\"} "),
        3.0
    );
    assert_eq!(
        value("wfhost_workflows_ended_total{outcome=\"completed\"} "),
        3.0
    );
    assert_eq!(value("wfhost_store_up "), 1.0);
    assert!(value("wfhost_journal_commits_total ") >= 3.0);
    assert!(value("wfhost_steps_total ") >= 3.0);
    assert_eq!(
        value(
            "wfhost_http_requests_total{route=\"/v1/workflows\",method=\"POST\",status=\"201\"} "
        ),
        3.0
    );
    assert!(text.contains("wfhost_journal_commit_duration_seconds_bucket"));
    assert!(text.contains("wfhost_step_duration_seconds_count"));
    // What Prometheus asks for: OpenMetrics.
    let (status, open) = raw(
        &server.addr(),
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/openmetrics-text;version=1.0.0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200);
    assert!(open.trim_end().ends_with("# EOF"), "{open}");
}

#[test]
fn the_openapi_document_describes_every_route_and_every_route_answers() {
    let (_dir, server) = sqlite_server("openapi");
    let api = server.client();
    let document = api.openapi().unwrap();
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    // Valid as client generators read it (operation ids unique, among the rest).
    openapi_check(&document);
    let paths = document["paths"].as_object().unwrap();
    let mut routes: Vec<String> = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            routes.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    routes.sort();
    assert_eq!(
        routes,
        [
            "DELETE /v1/schedules/{id}",
            "GET /healthz",
            "GET /metrics",
            "GET /readyz",
            "GET /v1/hosts",
            "GET /v1/modules",
            "GET /v1/openapi.json",
            "GET /v1/schedules",
            "GET /v1/schedules/{id}",
            "GET /v1/workers",
            "GET /v1/workflow-counts",
            "GET /v1/workflows",
            "GET /v1/workflows/{id}",
            "GET /v1/workflows/{id}/history",
            "GET /v1/workflows/{id}/outbox",
            "GET /v1/workflows/{id}/result",
            "GET /v1/workflows/{id}/runs",
            "GET /v1/workflows/{id}/waits",
            "POST /v1/modules",
            "POST /v1/prune",
            "POST /v1/schedules",
            "POST /v1/schedules/{id}/pause",
            "POST /v1/schedules/{id}/resume",
            "POST /v1/schedules/{id}/trigger",
            "POST /v1/tasks/poll",
            "POST /v1/tasks/{task}/complete",
            "POST /v1/tasks/{task}/heartbeat",
            "POST /v1/tasks/{task}/release",
            "POST /v1/workflows",
            "POST /v1/workflows/{id}/cancel",
            "POST /v1/workflows/{id}/messages",
            "POST /v1/workflows/{id}/pause",
            "POST /v1/workflows/{id}/reset",
            "POST /v1/workflows/{id}/unpause",
            "POST /v1/workflows/{id}/upgrade",
        ]
    );
    // Every route the document names is served: none answers the server's "no route".
    for route in &routes {
        let (method, path) = route.split_once(' ').unwrap();
        let path = path.replace("{id}", "nobody").replace("{task}", "1.0");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        let (status, body) = raw(&server.addr(), request.as_bytes());
        if status >= 400 {
            let code = code(&body);
            assert!(
                code != "not_found" && code != "method_not_allowed",
                "{route}: {status} {body}"
            );
        }
    }
    // Every body the routes write is described.
    let schemas = document["components"]["schemas"].as_object().unwrap();
    for schema in [
        "StartRequest",
        "StartedJson",
        "WorkflowJson",
        "WorkflowPage",
        "CountsJson",
        "HistoryPage",
        "WaitsJson",
        "WaitJson",
        "OutboxPage",
        "ModuleJson",
        "ModuleList",
        "HostList",
        "ErrorBody",
        "SentJson",
        "CancelJson",
        "PauseJson",
        "PruneRequest",
        "PrunedJson",
        "PollRequest",
        "TaskJson",
        "CompleteRequest",
        "HeartbeatJson",
        "WorkersJson",
        "FunctionWorkersJson",
        "PollerJson",
        "UpgradeRequest",
        "UpgradeJson",
        "ScheduleRequest",
        "ScheduleJson",
        "ScheduleList",
        "ScheduleChangeJson",
    ] {
        assert!(schemas.contains_key(schema), "no schema {schema}");
    }
}

#[test]
fn the_client_commands_work_through_a_server() {
    let (dir, server) = sqlite_server("cli");
    let run = |args: &[&str]| {
        let output = wfhost()
            .args(args)
            .env("WFHOST_SERVER", &server.url)
            .env_remove("WFHOST_STORE")
            .output()
            .unwrap();
        (
            output.status.code(),
            text(&output.stdout),
            text(&output.stderr),
        )
    };
    let probe = wfhost_test_programs::PROBE;
    let (code, out, err) = run(&["start", probe, "collect", "--input", "1", "--id", "cli-1"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "cli-1");
    let (code, out, err) = run(&["status", "cli-1", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["status"], "running");
    let (code, out, err) = run(&["send", "cli-1", "41"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.trim().parse::<u64>().is_ok(), "{out}");
    let (code, out, err) = run(&["result", "cli-1", "--wait", "--timeout", "60s"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "[41]");
    let (code, out, err) = run(&["list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().any(|l| l.starts_with("cli-1 ")), "{out}");
    let (code, out, err) = run(&["history", "cli-1"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("message "), "{out}");
    // A failed workflow exits 1, an id started another way 3.
    run(&["start", probe, "fail", "--input", "\"no\"", "--id", "cli-2"]);
    let (code, _, err) = run(&["result", "cli-2", "--wait", "--timeout", "60s"]);
    assert_eq!(code, Some(1), "{err}");
    let (code, _, err) = run(&[
        "start", probe, "fail", "--input", "\"yes\"", "--id", "cli-2",
    ]);
    assert_eq!(code, Some(3), "{err}");
    // A cancel.
    run(&[
        "start",
        probe,
        "wait_message",
        "--input",
        "600000",
        "--id",
        "cli-3",
    ]);
    let (code, _, err) = run(&["cancel", "cli-3"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("asked cli-3 to cancel"), "{err}");
    // Both a store and a server: refused, saying why.
    let output = wfhost()
        .args(["status", "cli-1", "--store"])
        .arg(dir.join("wf.db"))
        .env("WFHOST_SERVER", &server.url)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("not both"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn the_library_client_talks_to_a_server_as_to_a_store() {
    let (_dir, server) = sqlite_server("library");
    let client = wfhost::Client::open(server.url.as_str());
    let probe = common::http::probe();
    let input = wfhost::Payload::json_bytes(br#"{"n":1}"#.to_vec());
    let started = client
        .start(Some("lib-1"), &probe, "probe", "echo", &input)
        .unwrap();
    assert!(started.new);
    let done = client
        .result("lib-1", Some(Duration::from_secs(60)))
        .unwrap();
    assert_eq!(done.state, wfhost::WorkflowState::Completed);
    assert_eq!(&done.result.unwrap().bytes[..], br#"{"n":1}"#);
    assert_eq!(done.input.unwrap(), input);
    let history = client.history("lib-1", None, 100).unwrap();
    assert_eq!(history.items.len(), 1);
    let page = client.list(&wfhost::ListQuery::new()).unwrap();
    assert_eq!(page.items.len(), 1);
    let error = client.status("nobody").unwrap_err();
    assert_eq!(error.kind(), wfhost::ErrorKind::UnknownWorkflow);
}

#[test]
fn run_serves_its_metrics_while_it_runs() {
    let dir = tempdir("run-metrics");
    let log = dir.join("run.log");
    let mut child = wfhost()
        .args([
            "run",
            wfhost_test_programs::PROBE,
            "wait_message",
            "--input",
            "600000",
        ])
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut addr = String::new();
    common::wait_until("the run says where its metrics are", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        match text
            .lines()
            .find_map(|l| l.split("metrics at http://").nth(1))
        {
            Some(rest) => {
                addr = rest.trim().trim_end_matches("/metrics").to_string();
                true
            }
            None => false,
        }
    });
    let mut text = String::new();
    common::wait_until("the run's process is counted", || {
        let (status, body) = raw(
            &addr,
            b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        );
        text = body;
        status == 200 && text.contains("wfhost_processes 1\n")
    });
    promtool_check(&text);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn https_with_a_certificate_of_its_own() {
    let dir = tempdir("tls");
    let (certificate, cert, key) = common::http::self_signed(&dir);
    let pem = certificate.pem();
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
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );
    let trusting = wfhost_client::Client::new(&server.url)
        .unwrap()
        .with_root_certificates(pem.as_bytes())
        .unwrap();
    common::wait_until("the server is ready", || trusting.ready().is_ok());
    let module = put_probe(&trusting);
    trusting
        .start(&start_request("tls-1", &module, "echo", json!("sealed")))
        .unwrap();
    let done = trusting
        .result("tls-1", Some(Duration::from_secs(60)))
        .unwrap();
    assert_eq!(json_of(done.result.as_ref().unwrap()), json!("sealed"));
    // A client that does not trust the certificate gets no answer, and says why.
    let error = server.client().ready().unwrap_err();
    assert_eq!((error.status(), error.code()), (None, "unreachable"));
    // Plain HTTP to it is not HTTP's: no answer.
    let mut plain = std::net::TcpStream::connect(server.addr()).unwrap();
    std::io::Write::write_all(
        &mut plain,
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut plain, &mut answer);
    assert!(!answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    // The CLI trusts it with --ca-file.
    let output = wfhost()
        .args(["status", "tls-1", "--server", &server.url, "--ca-file"])
        .arg(&cert)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("status:   completed"),
        "{}",
        text(&output.stdout)
    );
}
