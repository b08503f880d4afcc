//! The web UI's speed, as a person sees it: `cargo bench -p wfhost-cli --bench ui`.
//!
//! A SQLite store of `WFHOST_BENCH_UI_WORKFLOWS` (default 1,000,000) finished workflows, one
//! more that ran 10,000 steps (`countdown` from 9,999, a timer a step) and one paused after
//! 10,000 steps (for `GET .../waits` of a running workflow), served by the HTTP API
//! as `wfhost serve --http` serves it. Headless Chromium (Debian's `chromium` and
//! `chromium-driver`) loads the list page (`/#/`: counts, filters, the first 50 rows) and the
//! long workflow's page (`/#/w/long`: facts, children, a timeline of all 10,000 steps) afresh,
//! `WFHOST_BENCH_ROUNDS` (default 10) times each, alternating. A load's time runs from the
//! start of navigation to the page's `wfhost-rendered` mark, set once it has drawn everything
//! and the browser has painted it: the server's time and the browser's together. Printed: the
//! first (cold) load, then the median and the slowest of the rest, and the median of the time
//! from the page's first API call to its last answer. Before them, the server's time for each call the pages make
//! (median of 20, each on a fresh connection).

#[path = "../tests/common/chromium.rs"]
mod chromium;
#[path = "../../benches/common/filled.rs"]
mod filled;

use std::time::{Duration, Instant};

use fantoccini::Client as Browser;
use serde_json::Value;
use wfhost::{Client, Grants, Host, Payload, SyncMode};
use wfhost_server::http::{Api, ServeOptions};

/// The long workflow's steps: its first, and one a timer.
const STEPS: u64 = 10_000;

fn count(variable: &str, default: usize) -> usize {
    std::env::var(variable)
        .ok()
        .and_then(|v| v.replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

fn main() {
    let workflows = count("WFHOST_BENCH_UI_WORKFLOWS", 1_000_000);
    let rounds = count("WFHOST_BENCH_ROUNDS", 10).max(2);
    let dir = std::env::temp_dir().join(format!("wfhost-bench-ui-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("ui.db");
    let started = Instant::now();
    filled::fill(&path, workflows);
    println!(
        "ui: {workflows} workflows written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let host = Host::builder()
        .store(&path, SyncMode::Normal)
        .build()
        .expect("a host");
    let client = Client::serving(&host, Grants::default()).expect("a serving client");
    let started = Instant::now();
    let module = std::fs::read(wfhost_test_programs::COUNTDOWN).expect("the countdown module");
    let input = Payload::json_bytes(format!(r#"{{"from":{},"interval_ms":0}}"#, STEPS - 1).into());
    client
        .start(Some("long"), &module, "countdown", "countdown", &input)
        .expect("started");
    let long = client
        .result("long", Some(Duration::from_secs(600)))
        .expect("its result");
    assert_eq!(long.steps, STEPS, "the long workflow's steps");
    println!(
        "ui: the long workflow ran its {} steps in {:.1} s",
        long.steps,
        started.elapsed().as_secs_f64()
    );
    // One more that runs: paused once it has journaled 10,000 steps, so that what it waits for
    // is read from its latest snapshot and the steps after it.
    client
        .start(
            Some("running"),
            &module,
            "countdown",
            "countdown",
            &Payload::json_bytes(br#"{"from":1000000,"interval_ms":0}"#.to_vec()),
        )
        .expect("started");
    while client.status("running").expect("its status").steps < STEPS {
        std::thread::sleep(Duration::from_millis(10));
    }
    client.pause("running").expect("paused");
    let api = Api::new(Some(client));
    let serving = api
        .serve(
            std::net::TcpListener::bind("127.0.0.1:0").expect("a port"),
            ServeOptions::new(),
        )
        .expect("serving");
    let addr = serving.local_addr().to_string();
    let base = format!("http://{addr}");
    for path in [
        "/v1/workflows?limit=50",
        "/v1/workflow-counts",
        "/v1/workflow-counts?entry=refund",
        "/v1/workflow-counts?prefix=order-0099",
        "/v1/workflows?limit=50&prefix=order-0099",
        "/v1/workflow-counts?prefix=order-",
        "/v1/workflows?limit=50&prefix=order-",
        "/v1/workflows/long",
        "/v1/workflows/long/history?limit=500",
        "/v1/workflows/long/history?limit=10000",
        "/v1/workflows/running/waits",
    ] {
        let mut times: Vec<f64> = (0..20).map(|_| get_ms(&addr, path)).collect();
        times.sort_by(f64::total_cmp);
        println!("ui: GET {path:<42} {:>7.2} ms", times[times.len() / 2]);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let driver = chromium::Driver::start();
        let browser = driver.browser().await;
        let pages = [
            ("list", format!("{base}/#/")),
            ("workflow", format!("{base}/#/w/long")),
        ];
        let mut loads: Vec<Vec<Load>> = vec![Vec::new(); pages.len()];
        for _ in 0..rounds {
            for (at, (_, url)) in pages.iter().enumerate() {
                loads[at].push(load(&browser, url).await);
            }
        }
        for ((name, _), loads) in pages.iter().zip(&loads) {
            let (first, rest) = loads.split_first().expect("rounds");
            let mut totals: Vec<f64> = rest.iter().map(|l| l.total_ms).collect();
            let mut calls: Vec<f64> = rest.iter().map(|l| l.api_ms).collect();
            totals.sort_by(f64::total_cmp);
            calls.sort_by(f64::total_cmp);
            println!(
                "ui: {name:<8} first load {:.0} ms; then median {:.0} ms, slowest {:.0} ms \
                 (first API call to last answer: median {:.0} ms; {} rows drawn)",
                first.total_ms,
                totals[totals.len() / 2],
                totals[totals.len() - 1],
                calls[calls.len() / 2],
                first.drawn,
            );
        }
        browser.close().await.expect("closed");
    });
    drop(serving);
    drop(host);
    let _ = std::fs::remove_dir_all(&dir);
}

#[derive(Clone, Copy, Debug)]
struct Load {
    total_ms: f64,
    api_ms: f64,
    drawn: u64,
}

/// Loads `url` afresh (from a blank page, so the page loads whole) and reads the page's own
/// timings once it says it has drawn everything.
async fn load(browser: &Browser, url: &str) -> Load {
    browser.goto("about:blank").await.expect("a blank page");
    browser.goto(url).await.expect("the page");
    let started = Instant::now();
    loop {
        let answer = browser
            .execute(
                "const mark = performance.getEntriesByName('wfhost-rendered')[0];
                 if (!mark) return null;
                 const calls = performance.getEntriesByType('resource')
                   .filter((r) => new URL(r.name).pathname.startsWith('/v1/'));
                 const first = Math.min(...calls.map((r) => r.startTime));
                 const last = Math.max(...calls.map((r) => r.responseEnd));
                 return { total: mark.startTime, api: calls.length ? last - first : 0,
                   drawn: document.querySelectorAll('#rows tbody tr, #timeline > li').length };",
                vec![],
            )
            .await
            .expect("the page's timings");
        if let Value::Object(timings) = answer {
            return Load {
                total_ms: timings["total"].as_f64().unwrap_or(f64::NAN),
                api_ms: timings["api"].as_f64().unwrap_or(f64::NAN),
                drawn: timings["drawn"].as_u64().unwrap_or(0),
            };
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{url} did not finish drawing within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Milliseconds `GET path` takes on a fresh connection, to the last byte of the answer.
fn get_ms(addr: &str, path: &str) -> f64 {
    use std::io::{Read, Write};
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(addr).expect("connected");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("sent");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read");
    assert!(answer.starts_with(b"HTTP/1.1 200"), "GET {path} failed");
    started.elapsed().as_secs_f64() * 1_000.0
}
