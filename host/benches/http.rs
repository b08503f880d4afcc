//! The HTTP API, next to the library it calls, side by side in one run:
//! `cargo bench -p wfhost --bench http [-- workload ...]`.
//!
//! - `starts`: workflows started (and run: `echo`, one step each) on a SQLite store
//!   (`synchronous=FULL`) by `WFHOST_BENCH_CLIENTS` (default 32) clients at once, each with a
//!   kept-alive connection, over HTTP and through the library `Client` serving the same host,
//!   alternating; starts per second and the p50 and p99 of a start's latency.
//! - `waiters`: `WFHOST_BENCH_WAITERS` (default 10,000) clients waiting in `GET
//!   .../result?wait=60s` at once on a `wfhost serve --http` of its own (a child process, so
//!   that its memory and threads are its own): its threads and resident memory while they wait,
//!   then every workflow sent the message that ends it, and the time until every waiter has
//!   its answer.
//! - `waiters-h2`: the same waiters over HTTP/2 (prior knowledge), `WFHOST_BENCH_H2_STREAMS`
//!   (default 100) on each connection.
//! - `list`: `GET /v1/workflows?limit=100` on a store of `WFHOST_BENCH_LIST` (default
//!   1,000,000) workflows: the first page, a page in the middle and the last (by cursor), and a
//!   filtered page; milliseconds each, medians of 20.
//! - `metrics`: `GET /metrics` with `WFHOST_BENCH_LIVE` (default 100,000) live processes:
//!   milliseconds a scrape, median of 20.
//! - `counted`: what counting costs the steps: the wasm ring (1,000 processes,
//!   `WFHOST_BENCH_RING_HOPS`, default 200,000 hops, each a step) on a host with metrics and on
//!   one without, alternating; hops per second each.
//!
//! `WFHOST_BENCH_ROUNDS` (default 3) sets the rounds of `starts`. The wfhost binary of `waiters`
//! is `target/release/wfhost` (`cargo build --release -p wfhost-cli` first) or
//! `WFHOST_BENCH_BIN`.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{env_count as count, median};
use wfhost::{Client, Grants, Host, Metrics, Payload, SyncMode};
use wfhost_server::http::{Api, ServeOptions};
use wfhost_test_programs::{PROBE, RING};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let wanted = common::wanted(&args);
    let rounds = count("WFHOST_BENCH_ROUNDS", 3);
    let dir = std::env::temp_dir().join(format!("wfhost-bench-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("http: {cores} cores, medians");
    if wanted("starts") {
        starts(rounds, &dir);
    }
    if wanted("waiters") {
        waiters(count("WFHOST_BENCH_WAITERS", 10_000), None, &dir);
    }
    if wanted("waiters-h2") {
        let streams = count("WFHOST_BENCH_H2_STREAMS", 100);
        waiters(count("WFHOST_BENCH_WAITERS", 10_000), Some(streams), &dir);
    }
    if wanted("list") {
        list(count("WFHOST_BENCH_LIST", 1_000_000), &dir);
    }
    if wanted("metrics") {
        metrics(count("WFHOST_BENCH_LIVE", 100_000));
    }
    if wanted("counted") {
        counted(rounds, count("WFHOST_BENCH_RING_HOPS", 200_000) as u64);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host on a fresh SQLite store in `dir`, counting into `metrics`.
fn host(dir: &Path, name: &str, metrics: &Metrics) -> Host {
    let store = dir.join(format!("{name}.db"));
    Host::builder()
        .store(&store, SyncMode::Full)
        .metrics(metrics)
        .build()
        .expect("a host")
}

/// Starts per second and the latencies of `total` starts by `clients` threads, each calling
/// `start(client, n)`.
fn drive(clients: usize, total: usize, start: impl Fn(usize, usize) + Sync) -> (f64, Vec<f64>) {
    let next = AtomicU64::new(0);
    let started = Instant::now();
    let latencies: Vec<f64> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..clients)
            .map(|client| {
                let (next, start) = (&next, &start);
                scope.spawn(move || {
                    let mut latencies = Vec::new();
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                        if n >= total {
                            return latencies;
                        }
                        let at = Instant::now();
                        start(client, n);
                        latencies.push(at.elapsed().as_secs_f64());
                    }
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("a client thread"))
            .collect()
    });
    (total as f64 / started.elapsed().as_secs_f64(), latencies)
}

fn percentile(mut values: Vec<f64>, p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let at = ((values.len() as f64 - 1.0) * p).round() as usize;
    values.get(at).copied().unwrap_or(f64::NAN)
}

fn starts(rounds: usize, dir: &Path) {
    let clients = count("WFHOST_BENCH_CLIENTS", 32);
    let total = count("WFHOST_BENCH_STARTS", 20_000);
    let metrics = Metrics::new();
    let host = host(dir, "starts", &metrics);
    let library = Client::serving(&host, Grants::default()).expect("a serving client");
    let module = library
        .put_module(&std::fs::read(PROBE).expect("the probe module"))
        .expect("stored")
        .hash;
    let api = Api::new(Some(library.clone())).max_store_calls(count(
        "WFHOST_BENCH_STORE_CALLS",
        wfhost_server::http::DEFAULT_MAX_STORE_CALLS,
    ));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let serving = api.serve(listener, ServeOptions::new()).expect("serving");
    let url = format!("http://{}", serving.local_addr());
    let http: Vec<wfhost_client::Client> = (0..clients)
        .map(|_| wfhost_client::Client::new(&url).expect("a client"))
        .collect();
    let round = AtomicU64::new(0);
    let input = Payload::json_bytes(b"1".to_vec());
    // Compiled before the rounds, not during the first.
    library
        .start_stored(Some("warm"), &module, "echo", &input)
        .expect("started");
    let mut over_http = Vec::new();
    let mut direct = Vec::new();
    let mut http_latency = Vec::new();
    let mut direct_latency = Vec::new();
    // Commits a start (each start's own and its workflow's one step and end), each side.
    let (mut http_commits, mut direct_commits) = (Vec::new(), Vec::new());
    let commits = || {
        metrics
            .encode_text()
            .lines()
            .find_map(|line| line.strip_prefix("wfhost_journal_commits_total "))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // For profiling one side alone: WFHOST_BENCH_ONLY=http or library.
    let only = std::env::var("WFHOST_BENCH_ONLY").unwrap_or_default();
    for _ in 0..rounds {
        let r = round.fetch_add(1, Ordering::Relaxed);
        if only == "library" {
            over_http.push(f64::NAN);
        } else {
            let before = commits();
            let (rate, latencies) = drive(clients, total, |client, n| {
                let start = wfhost_client::wire::StartRequest {
                    id: Some(format!("h{r}-{n}")),
                    module: module.clone(),
                    entry: "echo".into(),
                    input: serde_json::value::to_raw_value(&1).expect("json"),
                };
                let started = http[client].start(&start).expect("started over HTTP");
                assert!(started.new);
            });
            over_http.push(rate);
            http_latency.extend(latencies);
            http_commits.push((commits() - before) / total as f64);
        }
        if only == "http" {
            direct.push(f64::NAN);
            continue;
        }
        let before = commits();
        let (rate, latencies) = drive(clients, total, |_, n| {
            let started = library
                .start_stored(Some(&format!("d{r}-{n}")), &module, "echo", &input)
                .expect("started");
            assert!(started.new);
        });
        direct.push(rate);
        direct_latency.extend(latencies);
        direct_commits.push((commits() - before) / total as f64);
    }
    let (h, d) = (median(over_http), median(direct));
    println!(
        "starts: {clients} clients, {total} a round: http {h:.0}/s (p50 {:.2} ms, p99 {:.2} ms), \
         library {d:.0}/s (p50 {:.2} ms, p99 {:.2} ms); http/library {:.2}; commits a start: \
         http {:.3}, library {:.3}",
        percentile(http_latency.clone(), 0.5) * 1e3,
        percentile(http_latency, 0.99) * 1e3,
        percentile(direct_latency.clone(), 0.5) * 1e3,
        percentile(direct_latency, 0.99) * 1e3,
        h / d,
        median(http_commits),
        median(direct_commits),
    );
    serving.stop();
    host.shutdown(Duration::from_secs(5));
}

/// A field of `/proc/<pid>/status` (`VmRSS`, `Threads`), as a number (kB for sizes).
fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `waiters` clients waiting, each on a connection of its own, or `h2_streams` to an HTTP/2
/// connection.
fn waiters(waiters: usize, h2_streams: Option<usize>, dir: &Path) {
    let name = if h2_streams.is_some() {
        "waiters-h2"
    } else {
        "waiters"
    };
    let bin = std::env::var("WFHOST_BENCH_BIN").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/release/wfhost")
    });
    if !Path::new(&bin).exists() {
        println!("waiters: skipped ({bin} is not built: cargo build --release -p wfhost-cli)");
        return;
    }
    let store = dir.join(format!("{name}.db"));
    let log = dir.join(format!("{name}.log"));
    /// The server, killed however the bench ends.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let server = Child(
        std::process::Command::new(&bin)
            .args(["serve", "--store"])
            .arg(&store)
            .args(["--http", "127.0.0.1:0", "--max-connections", "30000"])
            // The workflows hibernate as they wait: what is measured is the waiters' cost.
            .args(["--hibernate", "always"])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log"))
            .spawn()
            .expect("wfhost serve"),
    );
    let pid = server.0.id();
    let addr = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("listens on http://")) {
            break line
                .rsplit("http://")
                .next()
                .expect("an address")
                .trim()
                .to_string();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let url = format!("http://{addr}");
    let api = wfhost_client::Client::new(&url).expect("a client");
    // Listening comes before the host: ready once it has one.
    while api.ready().is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let module = api
        .put_module(&std::fs::read(PROBE).expect("the probe module"))
        .expect("stored")
        .0
        .hash;
    // Each waits for one message.
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (url, module) = (&url, &module);
            scope.spawn(move || {
                let api = wfhost_client::Client::new(url).expect("a client");
                for n in (t..waiters).step_by(8) {
                    api.start(&wfhost_client::wire::StartRequest {
                        id: Some(format!("w-{n}")),
                        module: module.clone(),
                        entry: "collect".into(),
                        input: serde_json::value::to_raw_value(&1).expect("json"),
                    })
                    .expect("started");
                }
            });
        }
    });
    println!(
        "waiters: {waiters} workflows started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let rss_before = proc_status(pid, "VmRSS");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let answered = Arc::new(AtomicU64::new(0));
    let waiting: Vec<_> = {
        let _entered = runtime.enter();
        match h2_streams {
            None => (0..waiters)
                .map(|n| runtime.spawn(wait_h1(addr.clone(), n, Arc::clone(&answered))))
                .collect(),
            Some(streams) => (0..waiters)
                .step_by(streams.max(1))
                .map(|first| {
                    let ns = first..(first + streams.max(1)).min(waiters);
                    runtime.spawn(wait_h2(addr.clone(), ns, Arc::clone(&answered)))
                })
                .collect(),
        }
    };
    // Every waiter connected and waiting: the server holds that many connections.
    let metrics = || api.metrics().unwrap_or_default();
    let waiting_now = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("wfhost_http_waiting_results "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while waiting_now(&metrics()) < waiters as u64 {
        assert!(
            Instant::now() < deadline,
            "the waiters did not all get to wait"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let threads = proc_status(pid, "Threads");
    let mut names = std::collections::BTreeMap::<String, usize>::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        *names.entry(name.trim().to_string()).or_default() += 1;
    }
    println!("waiters: the server's threads by name: {names:?}");
    let rss = proc_status(pid, "VmRSS");
    let message = serde_json::value::to_raw_value(&7).expect("json");
    let sent = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (url, message) = (&url, &message);
            scope.spawn(move || {
                let api = wfhost_client::Client::new(url).expect("a client");
                for n in (t..waiters).step_by(8) {
                    api.send(&format!("w-{n}"), message).expect("sent");
                }
            });
        }
    });
    runtime.block_on(async {
        for task in waiting {
            task.await.expect("a waiter");
        }
    });
    let all = sent.elapsed().as_secs_f64();
    assert_eq!(answered.load(Ordering::Relaxed), waiters as u64);
    println!(
        "{name}: {waiters} waiting: server threads {threads}, resident {:.0} MiB (before the \
         waiters {:.0} MiB); every one answered {all:.2} s after the first message was sent",
        rss as f64 / 1024.0,
        rss_before as f64 / 1024.0,
    );
    drop(server);
}

/// One waiter on a connection of its own, over HTTP/1.1.
async fn wait_h1(addr: String, n: usize, answered: Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connected");
    let request = format!(
        "GET /v1/workflows/w-{n}/result?wait=60s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("sent");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("an answer");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "w-{n}: {text}");
    assert!(text.contains("\"result\":[7]"), "w-{n}: {text}");
    answered.fetch_add(1, Ordering::Relaxed);
}

/// The waiters `ns` on one HTTP/2 connection, a stream each.
async fn wait_h2(addr: String, ns: std::ops::Range<usize>, answered: Arc<AtomicU64>) {
    use http_body_util::{BodyExt as _, Empty};
    let stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connected");
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 connection");
    tokio::spawn(connection);
    let waits: Vec<_> = ns
        .map(|n| {
            let (mut sender, addr, answered) =
                (sender.clone(), addr.clone(), Arc::clone(&answered));
            tokio::spawn(async move {
                let request = hyper::Request::get(format!(
                    "http://{addr}/v1/workflows/w-{n}/result?wait=60s"
                ))
                .body(Empty::<hyper::body::Bytes>::new())
                .expect("a request");
                sender.ready().await.expect("ready");
                let answer = sender.send_request(request).await.expect("an answer");
                let status = answer.status();
                let body = answer
                    .into_body()
                    .collect()
                    .await
                    .expect("a body")
                    .to_bytes();
                let text = String::from_utf8_lossy(&body);
                assert_eq!(status, 200, "w-{n}: {text}");
                assert!(text.contains("\"result\":[7]"), "w-{n}: {text}");
                answered.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    for wait in waits {
        wait.await.expect("a waiter");
    }
}

fn list(workflows: usize, dir: &Path) {
    let path = dir.join("list.db");
    let started = Instant::now();
    common::filled::fill(&path, workflows);
    println!(
        "list: {workflows} workflows written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let metrics = Metrics::new();
    let host = Host::builder()
        .store(&path, SyncMode::Full)
        .metrics(&metrics)
        .build()
        .expect("a host");
    let client = Client::serving(&host, Grants::default()).expect("a serving client");
    let api = Api::new(Some(client));
    let serving = api
        .serve(
            std::net::TcpListener::bind("127.0.0.1:0").expect("a port"),
            ServeOptions::new(),
        )
        .expect("serving");
    let addr = serving.local_addr().to_string();
    let middle = format!("c{:x}", workflows / 2);
    let last = format!("c{:x}", workflows.saturating_sub(100));
    for (what, query) in [
        ("first page", "limit=100".to_string()),
        ("middle page", format!("limit=100&after={middle}")),
        ("last page", format!("limit=100&after={last}")),
        (
            "first page of entry=refund",
            "limit=100&entry=refund".to_string(),
        ),
        (
            "middle page of entry=refund",
            format!("limit=100&entry=refund&after={middle}"),
        ),
    ] {
        let mut times = Vec::new();
        for _ in 0..20 {
            let at = Instant::now();
            let body = get(&addr, &format!("/v1/workflows?{query}"));
            times.push(at.elapsed().as_secs_f64());
            let page: serde_json::Value = serde_json::from_str(&body).expect("a page");
            assert_eq!(
                page["workflows"].as_array().map(Vec::len),
                Some(100),
                "{what}: {body:.300}"
            );
        }
        println!("list: {what}: {:.2} ms", median(times) * 1e3);
    }
    serving.stop();
    host.shutdown(Duration::from_secs(5));
}

/// A GET on a fresh connection: the body.
fn get(addr: &str, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connected");
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer:.300}");
    answer.split("\r\n\r\n").nth(1).expect("a body").to_string()
}

fn metrics(live: usize) {
    let metrics = Metrics::new();
    let host = Host::builder()
        .metrics(&metrics)
        .max_processes(Some(live + 1_000))
        .build()
        .expect("a host");
    host.load_module("probe", PROBE).expect("loaded");
    let runs: Vec<_> = (0..live)
        .map(|_| {
            host.spawn(
                "probe",
                "wait_message",
                Payload::to_json(&3_600_000u64).expect("json"),
            )
            .expect("spawned")
            .without_messages()
        })
        .collect();
    while host.residency().hibernated + host.residency().live_instances < live {
        std::thread::sleep(Duration::from_millis(50));
    }
    let api = Api::new(None).metrics(&metrics);
    let serving = api
        .serve(
            std::net::TcpListener::bind("127.0.0.1:0").expect("a port"),
            ServeOptions::new(),
        )
        .expect("serving");
    let addr = serving.local_addr().to_string();
    let mut times = Vec::new();
    for _ in 0..20 {
        let at = Instant::now();
        let body = get(&addr, "/metrics");
        times.push(at.elapsed().as_secs_f64());
        assert!(
            body.contains(&format!("wfhost_processes {live}\n")),
            "{body:.2000}"
        );
    }
    println!(
        "metrics: a scrape with {live} live processes: {:.2} ms",
        median(times) * 1e3
    );
    serving.stop();
    drop(runs);
    host.shutdown(Duration::from_secs(5));
}

fn counted(rounds: usize, hops: u64) {
    let ring = |metrics: Option<&Metrics>| {
        let mut builder = Host::builder();
        if let Some(metrics) = metrics {
            builder = builder.metrics(metrics);
        }
        let host = builder.build().expect("a host");
        host.load_module("ring", RING).expect("the ring module");
        let report = host
            .spawn(
                "ring",
                "ring",
                Payload::to_postcard(&(1_000u32, hops)).expect("encodes"),
            )
            .expect("spawned")
            .wait()
            .expect("the ring finishes");
        let (_, _, seconds, _): (u32, u64, f64, f64) = report.decode().expect("a report");
        host.shutdown(Duration::from_secs(10));
        seconds
    };
    let metrics = Metrics::new();
    let (counted, plain) = common::alternate(rounds, || ring(Some(&metrics)), || ring(None));
    println!(
        "counted: ring with metrics {:.0} hops/s, without {:.0} hops/s; with/without {:.3}",
        hops as f64 / counted,
        hops as f64 / plain,
        plain / counted
    );
}
