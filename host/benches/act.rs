//! Workflows that act, on a SQLite store (`synchronous=FULL`): `cargo bench -p wfhost --bench
//! act [-- workload ...]`.
//!
//! - `roundtrip`: one workflow calls a worker function `WFHOST_BENCH_CALLS` (default 2,000)
//!   times, one after another; one worker (a thread with the API's client over HTTP) answers
//!   each at once. The round trip (the call journaled, the task to the worker, its completion,
//!   the completion journaled and the next call made) is the time between two tasks reaching
//!   the worker: p50 and p99.
//! - `throughput`: `WFHOST_BENCH_FLOWS` (default 200) workflows calling a worker function 100
//!   times each, served by `WFHOST_BENCH_WORKERS` (default 16) workers: tasks per second.
//! - `waiting`: `WFHOST_BENCH_WAITING` (default 100,000) processes each waiting in a call that
//!   no worker takes: the host's resident memory and threads before and after.
//! - `outbound`: `WFHOST_BENCH_FLOWS` workflows making 100 HTTP requests each, one after
//!   another, to a local server (thread per connection, kept alive): requests per second, each
//!   journaled.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::env_count as count;
use wfhost::tasks::{TaskSettings, Tasks};
use wfhost::{Client, Grants, Host, HostBuilder, Payload, SyncMode};
use wfhost_client::wire::CompleteRequest;
use wfhost_server::http::{Api, ServeOptions, Serving};
use wfhost_test_programs::PROBE;

const FUNCTION: &str = "bench.echo";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let wanted = common::wanted(&args);
    let dir = std::env::temp_dir().join(format!("wfhost-bench-act-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("act: {cores} cores");
    if wanted("roundtrip") {
        roundtrip(count("WFHOST_BENCH_CALLS", 2_000), &dir);
    }
    if wanted("throughput") {
        throughput(
            count("WFHOST_BENCH_FLOWS", 200),
            count("WFHOST_BENCH_WORKERS", 16),
            &dir,
        );
    }
    if wanted("waiting") {
        waiting(count("WFHOST_BENCH_WAITING", 100_000));
    }
    if wanted("outbound") {
        outbound(count("WFHOST_BENCH_FLOWS", 200), &dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A durable host with the worker function, a serving client, the probe stored, and the API
/// (with the task routes) on a port of its own.
struct Setup {
    host: Host,
    client: Client,
    module: String,
    serving: Serving,
    url: String,
}

fn setup(dir: &Path, name: &str, configure: impl FnOnce(HostBuilder) -> HostBuilder) -> Setup {
    let tasks = Tasks::new(TaskSettings::default());
    let builder = Host::builder()
        .store(dir.join(format!("{name}.db")), SyncMode::Full)
        .tasks(tasks.clone())
        .worker_function(FUNCTION);
    let host = configure(builder).build().expect("a host");
    let grants = Grants::default().allow_function(FUNCTION).allow_http();
    let client = Client::serving(&host, grants).expect("a serving client");
    let module = client
        .put_module(&std::fs::read(PROBE).expect("the probe module"))
        .expect("stored")
        .hash;
    // Compiled before anything is timed.
    let warm = Payload::json_bytes(b"1".to_vec());
    client
        .start_stored(Some("warm"), &module, "echo", &warm)
        .expect("started");
    client
        .result("warm", Some(Duration::from_secs(60)))
        .expect("warmed");
    let api = Api::new(Some(client.clone())).tasks(tasks);
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let serving = api.serve(listener, ServeOptions::new()).expect("serving");
    let url = format!("http://{}", serving.local_addr());
    Setup {
        host,
        client,
        module,
        serving,
        url,
    }
}

/// `workers` threads answering every task with its input, each noting when tasks reach it,
/// until `stop`.
fn workers(
    url: &str,
    workers: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<Instant>>> {
    (0..workers)
        .map(|_| {
            let client = wfhost_client::Client::new(url).expect("a client");
            let stop = Arc::clone(stop);
            std::thread::spawn(move || {
                let functions = [FUNCTION.to_string()];
                let mut arrivals = Vec::new();
                let wait = Duration::from_millis(200);
                let mut next = None;
                while !stop.load(Ordering::Relaxed) {
                    let task = match next.take() {
                        Some(task) => task,
                        None => match client.poll_task(&functions, wait).expect("a poll") {
                            Some(task) => task,
                            None => continue,
                        },
                    };
                    arrivals.push(Instant::now());
                    let done = CompleteRequest {
                        result: Some(task.input),
                        error: None,
                        next: None,
                    };
                    // Completed, and the next taken, in one request.
                    next = client
                        .complete_and_poll(&task.task, done, &functions, wait)
                        .expect("completed");
                }
                arrivals
            })
        })
        .collect()
}

fn start(setup: &Setup, id: &str, entry: &str, input: serde_json::Value) {
    let input = Payload::json_bytes(input.to_string().into_bytes());
    setup
        .client
        .start_stored(Some(id), &setup.module, entry, &input)
        .expect("started");
}

fn finish(setup: &Setup, id: &str) -> serde_json::Value {
    let status = setup
        .client
        .result(id, Some(Duration::from_secs(600)))
        .expect("a result");
    let result = status.result.expect("completed");
    serde_json::from_slice(&result.bytes).expect("JSON")
}

fn percentile(mut values: Vec<f64>, p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let at = ((values.len() as f64 - 1.0) * p).round() as usize;
    values.get(at).copied().unwrap_or(f64::NAN)
}

fn stop(setup: Setup) {
    setup.serving.stop();
    setup.host.shutdown(Duration::from_secs(5));
}

fn roundtrip(calls: usize, dir: &Path) {
    let setup = setup(dir, "roundtrip", |b| b);
    let stop_flag = Arc::new(AtomicBool::new(false));
    let threads = workers(&setup.url, 1, &stop_flag);
    let started = Instant::now();
    start(
        &setup,
        "loop",
        "call_loop",
        serde_json::json!([FUNCTION, calls]),
    );
    assert_eq!(finish(&setup, "loop"), serde_json::json!(calls));
    let elapsed = started.elapsed();
    stop_flag.store(true, Ordering::Relaxed);
    let arrivals: Vec<Instant> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("a worker"))
        .collect();
    let gaps: Vec<f64> = arrivals
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .collect();
    println!(
        "roundtrip: {calls} calls through one worker: p50 {:.2} ms, p99 {:.2} ms, mean {:.2} ms",
        percentile(gaps.clone(), 0.5),
        percentile(gaps, 0.99),
        elapsed.as_secs_f64() * 1e3 / calls as f64
    );
    stop(setup);
}

fn throughput(flows: usize, worker_count: usize, dir: &Path) {
    let per_flow = 100;
    let setup = setup(dir, "throughput", |b| b);
    let stop_flag = Arc::new(AtomicBool::new(false));
    let threads = workers(&setup.url, worker_count, &stop_flag);
    let started = Instant::now();
    for n in 0..flows {
        start(
            &setup,
            &format!("t{n}"),
            "call_loop",
            serde_json::json!([FUNCTION, per_flow]),
        );
    }
    for n in 0..flows {
        assert_eq!(
            finish(&setup, &format!("t{n}")),
            serde_json::json!(per_flow)
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop_flag.store(true, Ordering::Relaxed);
    let served: usize = threads
        .into_iter()
        .map(|t| t.join().expect("a worker").len())
        .sum();
    assert_eq!(served, flows * per_flow);
    println!(
        "throughput: {served} tasks, {flows} workflows, {worker_count} workers: {:.0} tasks/s",
        served as f64 / elapsed
    );
    stop(setup);
}

/// A field of this process's `/proc/self/status`, as a number (kB for sizes).
fn own_status(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn waiting(count: usize) {
    let tasks = Tasks::new(TaskSettings::default());
    // Waiting processes keep what differs from a fresh instance only.
    let host = Host::builder()
        .hibernation(wfhost::Hibernation::Always)
        .tasks(tasks.clone())
        .worker_function(FUNCTION)
        .max_processes(Some(count + 1_000))
        .function_queue(count + 1_000)
        .build()
        .expect("a host");
    host.load_module_with("probe", PROBE, Grants::default().allow_function(FUNCTION))
        .expect("loaded");
    let (rss, threads) = (own_status("VmRSS"), own_status("Threads"));
    let started = Instant::now();
    let runs: Vec<_> = (0..count)
        .map(|n| {
            let input = Payload::to_json(&(FUNCTION, n)).expect("json");
            host.spawn("probe", "call", input)
                .expect("spawned")
                .without_messages()
        })
        .collect();
    while tasks.counts().map_or(0, |(queued, _)| queued) < count {
        std::thread::sleep(Duration::from_millis(50));
    }
    let elapsed = started.elapsed();
    let (rss_after, threads_after) = (own_status("VmRSS"), own_status("Threads"));
    println!(
        "waiting: {count} calls waiting for a worker after {:.1} s: resident {} MiB -> {} MiB \
         ({:.1} KiB a waiting process with its task), threads {threads} -> {threads_after}",
        elapsed.as_secs_f64(),
        rss / 1024,
        rss_after / 1024,
        (rss_after.saturating_sub(rss)) as f64 / count as f64,
    );
    drop(runs);
    host.shutdown(Duration::from_secs(5));
}

/// A local HTTP server answering `ok` to every request, a thread per connection.
fn local_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = listener.local_addr().expect("an address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("a stream"));
                loop {
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if stream.write_all(answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

fn outbound(flows: usize, dir: &Path) {
    let per_flow = 100;
    let base = local_server();
    let pattern = format!("{base}/*");
    let setup = setup(dir, "outbound", |b| b.allow_http(&pattern));
    let url = format!("{base}/ok");
    let started = Instant::now();
    for n in 0..flows {
        start(
            &setup,
            &format!("o{n}"),
            "http_loop",
            serde_json::json!([url, per_flow]),
        );
    }
    for n in 0..flows {
        assert_eq!(
            finish(&setup, &format!("o{n}")),
            serde_json::json!(per_flow)
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "outbound: {} requests from {flows} workflows: {:.0} requests/s, journaled",
        flows * per_flow,
        (flows * per_flow) as f64 / elapsed
    );
    stop(setup);
}
