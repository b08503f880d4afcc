//! Workflows written in Python and JavaScript, built with `wfhost build` and run by the real
//! binary: what `python.rs` and `js.rs` share, so that both languages' suites ask the same.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use serde_json::Value;

use super::http::HttpServer;
use super::{tempdir, text, wfhost};

/// Builds `script` into `module` with `wfhost build`: the module's bytes.
pub fn build(script: &Path, module: &Path) -> Vec<u8> {
    let output = wfhost()
        .arg("build")
        .arg(script)
        .arg("--output")
        .arg(module)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim(), module.display().to_string());
    std::fs::read(module).unwrap()
}

/// A language's scenario suite: its script, built once per test file.
pub struct Suite {
    language: &'static str,
    script: PathBuf,
    module: OnceLock<PathBuf>,
}

impl Suite {
    /// The suite of `language` (`python`, `js`): `tests/<language>/suite.<extension>`.
    pub fn new(language: &'static str, extension: &str) -> Suite {
        Suite {
            language,
            script: Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests")
                .join(language)
                .join(format!("suite.{extension}")),
            module: OnceLock::new(),
        }
    }

    pub fn script(&self) -> &Path {
        &self.script
    }

    /// The suite's module.
    pub fn module(&self) -> &Path {
        self.module.get_or_init(|| {
            let module = tempdir(self.language, "suite").join("suite.wasm");
            build(&self.script, &module);
            module
        })
    }

    pub fn run(&self, entry: &str, input: Value, flags: &[&str]) -> Output {
        wfhost()
            .arg("run")
            .arg(self.module())
            .arg(entry)
            .args(["--input", &input.to_string()])
            .args(flags)
            .output()
            .unwrap()
    }

    /// The result of a run that must succeed.
    pub fn result(&self, entry: &str, input: Value) -> Value {
        let output = self.run(entry, input, &[]);
        assert!(output.status.success(), "{entry}: {}", text(&output.stderr));
        serde_json::from_str(text(&output.stdout).trim()).unwrap()
    }

    /// A run that must succeed with `expected` and say `said` on stderr (a log line, a message
    /// to the host).
    pub fn result_saying(&self, entry: &str, input: Value, expected: Value, said: &str) {
        let output = self.run(entry, input, &[]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let value: Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
        assert_eq!(value, expected);
        assert!(
            text(&output.stderr).contains(said),
            "{entry}: {}",
            text(&output.stderr)
        );
    }

    /// The error text of a run that must fail with exit code 1.
    pub fn failure(&self, entry: &str, input: Value, flags: &[&str]) -> String {
        let output = self.run(entry, input, flags);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{entry}: {}",
            text(&output.stderr)
        );
        text(&output.stderr)
    }

    /// `wfhost inspect` lists each of `entries`.
    pub fn lists(&self, entries: &[&str]) {
        let output = wfhost().arg("inspect").arg(self.module()).output().unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        let listed = text(&output.stdout);
        let line = listed
            .lines()
            .find(|line| line.starts_with("entry points:"))
            .unwrap_or_else(|| panic!("no entry points in:\n{listed}"));
        let names: Vec<&str> = line["entry points:".len()..]
            .split(',')
            .map(str::trim)
            .collect();
        let mut expected = entries.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected, "{listed}");
    }

    /// A workflow killed by a crash after its first step (which read the clocks and randomness
    /// and printed what it read) reads the same when it resumes, and a replay of its journal
    /// finds nothing different.
    pub fn reads_survive_a_crash(&self) {
        let dir = tempdir(self.language, "reads");
        let store = dir.join("store.db");
        let store = store.to_str().unwrap();
        // Commits: the module, the start, the first step (its reads and its message): killed
        // there.
        let crashed = wfhost()
            .arg("run")
            .arg(self.module())
            .args(["reads", "--store", store, "--id", "reads"])
            .env("WFHOST_CRASH_AFTER_COMMITS", "3")
            .output()
            .unwrap();
        assert!(!crashed.status.success());
        let before = first_reads(&text(&crashed.stderr));
        let resumed = wfhost()
            .args(["resume", "--store", store])
            .output()
            .unwrap();
        assert!(resumed.status.success(), "{}", text(&resumed.stderr));
        let again = wfhost()
            .arg("run")
            .arg(self.module())
            .args(["reads", "--store", store, "--id", "reads"])
            .output()
            .unwrap();
        assert!(again.status.success(), "{}", text(&again.stderr));
        let after: Value = serde_json::from_str(text(&again.stdout).trim()).unwrap();
        assert_eq!(after, before);
        let replay = wfhost()
            .args(["replay", "--store", store, "reads"])
            .output()
            .unwrap();
        assert!(replay.status.success(), "{}", text(&replay.stderr));
    }

    /// A replay of `timers` (run with input 2) with `changed` (a script whose `timers` sleeps
    /// once rather than twice at first, named `changed.<extension>`) fails and names the step.
    pub fn replay_names_the_changed_step(&self, file: &str, changed: &str) {
        let dir = tempdir(self.language, "replay");
        let store = dir.join("store.db");
        let store = store.to_str().unwrap();
        let output = wfhost()
            .arg("run")
            .arg(self.module())
            .args(["timers", "--input", "2", "--store", store, "--id", "t"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        let script = dir.join(file);
        std::fs::write(&script, changed).unwrap();
        let module = dir.join("changed.wasm");
        build(&script, &module);
        let replay = wfhost()
            .args(["replay", "--store", store, "t", "--module"])
            .arg(&module)
            .output()
            .unwrap();
        assert_eq!(replay.status.code(), Some(1), "{}", text(&replay.stderr));
        let said = format!("{}{}", text(&replay.stdout), text(&replay.stderr));
        assert!(said.contains("step"), "{said}");
    }

    /// Each of `scripts` (file name, source, what the error says) fails to build with exit code
    /// 2, saying it, and leaves no module behind.
    pub fn refuses_to_build(&self, scripts: &[(&str, &str, &str)]) {
        let dir = tempdir(self.language, "broken");
        for (name, source, expect) in scripts {
            let script = dir.join(name);
            std::fs::write(&script, source).unwrap();
            let output = wfhost().arg("build").arg(&script).output().unwrap();
            assert_eq!(
                output.status.code(),
                Some(2),
                "{name}: {}",
                text(&output.stderr)
            );
            assert!(
                text(&output.stderr).contains(expect),
                "{name}: {}",
                text(&output.stderr)
            );
            assert!(!script.with_extension("wasm").exists(), "{name}");
        }
    }

    /// The same sources build the same module.
    pub fn builds_the_same_module_twice(&self) {
        let dir = tempdir(self.language, "twice");
        let first = build(&self.script, &dir.join("first.wasm"));
        assert!(first == build(&self.script, &dir.join("second.wasm")));
    }

    /// `remind` under the test harness's virtual clock: three days of sleeps run at once, the
    /// worker's texts reach the host at the virtual times, and the language's clock and the
    /// context's both moved three days.
    pub fn skips_time(&self) {
        let run = wfhost::testing::TestEnv::new(self.module())
            .unwrap()
            .function("reminder_text", |day: u32| Ok(format!("day {day}")))
            .run("remind", &3u32)
            .unwrap();
        assert_eq!(
            run.result::<Value>().unwrap(),
            serde_json::json!({"days": 3, "ctx_days": 3})
        );
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(
            run.sent_to_host::<String>().unwrap(),
            vec![
                (day, "day 1".to_string()),
                (day * 2, "day 2".to_string()),
                (day * 3, "day 3".to_string()),
            ]
        );
    }

    /// Under `wfhost serve`: a workflow adding up messages and one waiting on a worker's call
    /// both survive the server's `kill -9`; after the restart the messages before and after add
    /// up, and the call's task is there to take and complete.
    pub fn serves_across_a_kill(&self) {
        let dir = tempdir(self.language, "serve");
        let store = dir.join("wf.db");
        let store = store.to_str().unwrap();
        let args = ["--worker-function", "double"];
        let mut server = HttpServer::start(&dir, store, &args);
        let api = server.client();
        let module = api
            .put_module(&std::fs::read(self.module()).unwrap())
            .unwrap()
            .0
            .hash;
        api.start(&super::http::start_request(
            "sum",
            &module,
            "counter",
            Value::Null,
        ))
        .unwrap();
        api.start(&super::http::start_request(
            "call",
            &module,
            "call",
            serde_json::json!(21),
        ))
        .unwrap();
        for n in [1, 2] {
            api.send("sum", &raw(&serde_json::json!(n))).unwrap();
        }
        server.kill();
        let server = HttpServer::start(&dir, store, &args);
        let api = server.client();
        for message in [serde_json::json!(3), serde_json::json!("stop")] {
            api.send("sum", &raw(&message)).unwrap();
        }
        let wait = Some(std::time::Duration::from_secs(60));
        let done = api.result("sum", wait).unwrap();
        assert_eq!(done.status, "completed", "{done:?}");
        assert_eq!(payload(&done), serde_json::json!(6));
        let task = api
            .poll_task(&["double".to_string()], std::time::Duration::from_secs(60))
            .unwrap()
            .expect("the call's task, after the restart");
        assert_eq!(super::tasks::result(&task.input), serde_json::json!(21));
        api.complete_task(&task.task, &super::tasks::ok(serde_json::json!(42)))
            .unwrap();
        let done = api.result("call", wait).unwrap();
        assert_eq!(payload(&done), serde_json::json!(42));
    }

    /// A running `counter` is upgraded to the suite with its last line changed (`from` becomes
    /// `to`): the journal replays the same, and the new code finishes it.
    pub fn upgrades_a_running_workflow(&self, from: &str, to: &str) {
        let dir = tempdir(self.language, "upgrade");
        let changed = dir.join("changed");
        std::fs::create_dir_all(&changed).unwrap();
        let folder = self.script.parent().unwrap();
        for entry in std::fs::read_dir(folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                let source = std::fs::read_to_string(&path).unwrap();
                let source = if path == self.script {
                    assert!(source.contains(from), "{from} is not in the suite");
                    source.replace(from, to)
                } else {
                    source
                };
                std::fs::write(changed.join(path.file_name().unwrap()), source).unwrap();
            }
        }
        let module = dir.join("changed.wasm");
        build(&changed.join(self.script.file_name().unwrap()), &module);
        let store = dir.join("wf.db");
        let server = HttpServer::start(&dir, store.to_str().unwrap(), &[]);
        let api = server.client();
        let old = api
            .put_module(&std::fs::read(self.module()).unwrap())
            .unwrap()
            .0
            .hash;
        let new = api
            .put_module(&std::fs::read(&module).unwrap())
            .unwrap()
            .0
            .hash;
        assert_ne!(old, new);
        api.start(&super::http::start_request(
            "up",
            &old,
            "counter",
            Value::Null,
        ))
        .unwrap();
        for n in [4, 5] {
            api.send("up", &raw(&serde_json::json!(n))).unwrap();
        }
        // Each message is a step: the upgrade replays the start and both.
        super::wait_until("both messages are taken", || {
            api.history("up", &Default::default())
                .is_ok_and(|page| page.steps.len() >= 3)
        });
        let upgraded = api.upgrade("up", &new).unwrap();
        assert_eq!(
            (upgraded.to.as_str(), upgraded.already),
            (new.as_str(), false)
        );
        assert!(upgraded.steps >= 3, "{upgraded:?}");
        api.send("up", &raw(&serde_json::json!("stop"))).unwrap();
        let done = api
            .result("up", Some(std::time::Duration::from_secs(60)))
            .unwrap();
        assert_eq!(payload(&done), serde_json::json!({"total": 9}));
    }

    /// `fetch` (a POST with two `x-` headers and the body "ping") goes through the host's
    /// allowlist to a local server, and is refused without it.
    pub fn fetches_through_the_allowlist(&self) {
        let url = one_answer();
        let output = self.run(
            "fetch",
            Value::String(url.clone()),
            &["--allow-http", &url, "--allow-private-http"],
        );
        assert!(output.status.success(), "{}", text(&output.stderr));
        let value: Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"status": 200, "body": "gnip", "seen": "POST x-one=1 x-two=2"})
        );
        let stderr = self.failure("fetch", Value::String(url), &[]);
        assert!(stderr.contains("not-allowed"), "{stderr}");
    }
}

/// The order example at `script` (`examples/order-py/shop.py`, ...) gives what the Rust one
/// gives, for an order that goes through and for one failing at each step.
pub fn order_example_matches_rust(language: &str, script: &Path) {
    let dir = tempdir(language, "order");
    let module = dir.join("shop.wasm");
    build(script, &module);
    for fail_at in [None, Some("reserve"), Some("charge"), Some("ship")] {
        let mut order =
            serde_json::json!({"id": "o-1", "sku": "kettle", "quantity": 2, "amount_cents": 4999});
        if let Some(step) = fail_at {
            order["fail_at"] = serde_json::json!(step);
        }
        let outcome = |module: &Path| -> Value {
            let output = wfhost()
                .arg("run")
                .arg(module)
                .args(["place_order", "--input", &order.to_string()])
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{fail_at:?}: {}",
                text(&output.stderr)
            );
            serde_json::from_str(text(&output.stdout).trim()).unwrap()
        };
        assert_eq!(
            outcome(&module),
            outcome(Path::new(wfhost_test_programs::ORDER)),
            "{fail_at:?}"
        );
    }
}

/// The `reads` entry point's first line of output: what it read before its first sleep.
fn first_reads(stderr: &str) -> Value {
    let line = stderr
        .lines()
        .find(|line| line.contains("\"ctx_random\""))
        .unwrap_or_else(|| panic!("no reads in:\n{stderr}"));
    let (start, end) = (line.find('{').unwrap(), line.rfind('}').unwrap());
    serde_json::from_str(&line[start..=end]).unwrap()
}

/// A server on 127.0.0.1 that answers one request: 200, its body reversed, and in `x-seen` the
/// request's method and its `x-` headers.
fn one_answer() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/echo",
        listener.local_addr().unwrap().port()
    );
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let mut seen = vec![line.split_whitespace().next().unwrap().to_string()];
        let mut length = 0;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let Some((name, value)) = header.trim().split_once(':') else {
                break;
            };
            let (name, value) = (name.to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                length = value.parse().unwrap();
            } else if name.starts_with("x-") {
                seen.push(format!("{name}={value}"));
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        body.reverse();
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-seen: {}\r\nconnection: close\r\n\r\n",
            body.len(),
            seen.join(" ")
        )
        .unwrap();
        stream.write_all(&body).unwrap();
    });
    url
}

fn raw(value: &Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(value).unwrap()
}

/// A finished workflow's result.
fn payload(done: &wfhost_client::wire::WorkflowJson) -> Value {
    let result = done
        .result
        .as_ref()
        .unwrap_or_else(|| panic!("no result: {done:?}"));
    serde_json::from_str(result.get()).unwrap()
}
