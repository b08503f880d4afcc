//! Workflows in Python and JavaScript beside the same shapes in Rust (`examples/fanout`: its
//! `lib.rs`, `fanout.py` and `fanout.js`), in one run: what BENCHMARKS.md's "Workflows in Python
//! and JavaScript" quotes.
//!
//! - `build`: `wfhost build` of the script (the runtime already built), 3 times.
//! - `spawn`: `WFHOST_BENCH_SPAWNS` (default 1,000) workflows of `piece` started through the
//!   library at once and waited for: spawn, first (and only) step, end.
//! - `step` (Python and JavaScript): a ping-pong of `WFHOST_BENCH_TRIPS` (default 2,000) round trips between two
//!   workflows: each round trip is two steps, each taking a message and sending one.
//! - `waiting`: `WFHOST_BENCH_WAITING` (default 1,000) workflows waiting for a message,
//!   hibernated (`Hibernation::Always`), then as many again: the host's resident memory grown
//!   per workflow of the second batch (Python and JavaScript; `wasm`'s `idle` bench measures
//!   Rust's).
//! - `http`: `WFHOST_BENCH_STARTS` (default 1,000; a tenth of it for Python) workflows of
//!   `piece` started and waited for over HTTP (`POST /v1/workflows`, then
//!   `GET /v1/workflows/{id}/result?wait=`) by 16 clients, on a durable SQLite host.
//!
//! `cargo bench -p wfhost-cli --bench languages [-- build spawn step waiting http]`

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wfhost::{Client, Grants, Hibernation, Host, Payload, SyncMode};
use wfhost_server::http::{Api, ServeOptions};

/// The languages, and where each one's module of the shapes comes from.
#[derive(Clone, Copy, PartialEq)]
enum Language {
    Rust,
    JavaScript,
    Python,
}

const LANGUAGES: [Language; 3] = [Language::Rust, Language::JavaScript, Language::Python];

impl Language {
    fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::JavaScript => "js",
            Language::Python => "python",
        }
    }
}

fn count(variable: &str, default: usize) -> usize {
    std::env::var(variable)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn fanout_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fanout")
}

/// The module of `language`, built (timed, for the scripts) once.
fn module(language: Language) -> (Vec<u8>, Option<f64>) {
    let started = Instant::now();
    let bytes = match language {
        Language::Rust => std::fs::read(wfhost_test_programs::FANOUT).expect("the fanout module"),
        Language::JavaScript => {
            wfhost_build::javascript(&fanout_dir().join("fanout.js"), &[])
                .expect("fanout.js builds")
                .module
        }
        Language::Python => {
            wfhost_build::python(&fanout_dir().join("fanout.py"), &[])
                .expect("fanout.py builds")
                .module
        }
    };
    let took = (language != Language::Rust).then(|| started.elapsed().as_secs_f64());
    (bytes, took)
}

/// The resident memory of this process, in bytes.
fn resident() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb * 1024.0)
}

fn json(value: serde_json::Value) -> Payload {
    Payload::json_bytes(value.to_string().into_bytes())
}

fn memory_host(hibernation: Hibernation) -> Host {
    Host::builder()
        .hibernation(hibernation)
        .module_cache(std::env::temp_dir().join("wfhost-bench-languages-cache"))
        .build()
        .expect("a host")
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("languages: {cores} cores, medians of 3");
    let modules: Vec<(Language, Vec<u8>)> = LANGUAGES
        .iter()
        .map(|&language| {
            let (bytes, took) = module(language);
            if wanted("build") {
                if let Some(first) = took {
                    let mut times = vec![first];
                    for _ in 0..2 {
                        times.push(module(language).1.unwrap_or_default());
                    }
                    println!(
                        "build {}: {:.2} s, module {:.1} MiB",
                        language.name(),
                        median(times),
                        bytes.len() as f64 / (1 << 20) as f64
                    );
                }
            }
            (language, bytes)
        })
        .collect();
    for (language, bytes) in &modules {
        if wanted("spawn") {
            spawn(*language, bytes);
        }
        if wanted("step") && *language != Language::Rust {
            step(*language, bytes);
        }
        // The Rust fan-out has no waiting entry point (`wasm`'s `idle` bench measures Rust's).
        if wanted("waiting") && *language != Language::Rust {
            waiting(*language, bytes);
        }
    }
    if wanted("http") {
        for (language, bytes) in &modules {
            http(*language, bytes);
        }
    }
}

fn spawn(language: Language, bytes: &[u8]) {
    let n = count("WFHOST_BENCH_SPAWNS", 1_000) / if language == Language::Python { 5 } else { 1 };
    let host = memory_host(Hibernation::WhenFull);
    host.load_module_bytes("m", bytes).expect("loads");
    // Warm: compiled and a first instance made.
    host.spawn("m", "piece", json(serde_json::json!([0, 3])))
        .expect("spawned")
        .wait()
        .expect("ran");
    let mut rates = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let runs: Vec<_> = (0..n)
            .map(|i| {
                host.spawn("m", "piece", json(serde_json::json!([i, 3])))
                    .expect("spawned")
            })
            .collect();
        for run in runs {
            run.wait().expect("ran");
        }
        rates.push(n as f64 / started.elapsed().as_secs_f64());
    }
    println!(
        "spawn {}: {:.0} workflows/s spawned, run and ended ({n} at once)",
        language.name(),
        median(rates)
    );
    host.shutdown(Duration::from_secs(5));
}

fn step(language: Language, bytes: &[u8]) {
    let trips = count("WFHOST_BENCH_TRIPS", 2_000);
    let host = memory_host(Hibernation::WhenFull);
    host.load_module_bytes("m", bytes).expect("loads");
    let mut per_step = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        host.spawn("m", "pingpong", json(serde_json::json!(trips)))
            .expect("spawned")
            .wait()
            .expect("ran");
        per_step.push(started.elapsed().as_secs_f64() / (2 * trips) as f64);
    }
    println!(
        "step {}: {:.1} us a step (a message in, a send out; {trips} round trips)",
        language.name(),
        median(per_step) * 1e6
    );
    host.shutdown(Duration::from_secs(5));
}

fn waiting(language: Language, bytes: &[u8]) {
    let n = count("WFHOST_BENCH_WAITING", 1_000);
    let host = memory_host(Hibernation::Always);
    host.load_module_bytes("m", bytes).expect("loads");
    // Two batches of `n`: the second's growth is what a waiting workflow costs, without what the
    // first paid once (warm instances, pooled slots the pool keeps resident, buffers).
    let mut runs = Vec::new();
    let mut resident_after = Vec::new();
    for batch in 1..=2 {
        runs.extend((0..n).map(|_| {
            host.spawn("m", "wait", json(serde_json::json!(null)))
                .expect("spawned")
        }));
        let deadline = Instant::now() + Duration::from_secs(120);
        while host.residency().hibernated < batch * n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        resident_after.push(resident());
    }
    let residency = host.residency();
    println!(
        "waiting {}: {:.1} KiB of resident memory a hibernated waiting workflow (the second {n} \
         over the first), {:.1} KiB of it its saved state ({} hibernated; the host's resident \
         memory {:.0} MiB in all)",
        language.name(),
        (resident_after[1] - resident_after[0]) / n as f64 / 1024.0,
        residency.hibernated_bytes as f64 / residency.hibernated.max(1) as f64 / 1024.0,
        residency.hibernated,
        resident_after[1] / (1 << 20) as f64
    );
    drop(runs);
    host.shutdown(Duration::from_secs(5));
}

fn http(language: Language, bytes: &[u8]) {
    let clients = 16;
    let total =
        count("WFHOST_BENCH_STARTS", 1_000) / if language == Language::Python { 10 } else { 1 };
    let dir = std::env::temp_dir().join(format!(
        "wfhost-bench-languages-{}-{}",
        language.name(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let host = Host::builder()
        .store(dir.join("wf.db"), SyncMode::Full)
        .module_cache(std::env::temp_dir().join("wfhost-bench-languages-cache"))
        .build()
        .expect("a host");
    let library = Client::serving(&host, Grants::default()).expect("a serving client");
    let module = library.put_module(bytes).expect("stored").hash;
    let api = Api::new(Some(library));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let serving = api.serve(listener, ServeOptions::new()).expect("serving");
    let url = format!("http://{}", serving.local_addr());
    let http: Vec<wfhost_client::Client> = (0..clients)
        .map(|_| wfhost_client::Client::new(&url).expect("a client"))
        .collect();
    let start_and_wait = |client: &wfhost_client::Client, id: String| {
        client
            .start(&wfhost_client::wire::StartRequest {
                id: Some(id.clone()),
                module: module.clone(),
                entry: "piece".into(),
                input: serde_json::value::to_raw_value(&[0, 3]).expect("json"),
            })
            .expect("started over HTTP");
        let done = client
            .result(&id, Some(Duration::from_secs(60)))
            .expect("a result");
        assert_eq!(done.status, "completed", "{done:?}");
    };
    start_and_wait(&http[0], "warm".into());
    let mut rates = Vec::new();
    for round in 0..3 {
        let next = AtomicUsize::new(0);
        let started = Instant::now();
        std::thread::scope(|scope| {
            for client in &http {
                let (next, start_and_wait) = (&next, &start_and_wait);
                scope.spawn(move || loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total {
                        return;
                    }
                    start_and_wait(client, format!("r{round}-{n}"));
                });
            }
        });
        rates.push(total as f64 / started.elapsed().as_secs_f64());
    }
    println!(
        "http {}: {:.0} workflows/s started and finished over HTTP ({clients} clients, durable)",
        language.name(),
        median(rates)
    );
    serving.stop();
    host.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}
