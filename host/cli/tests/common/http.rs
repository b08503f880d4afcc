//! A `wfhost serve --http` of a test's own, and what talking to it takes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use super::{wait_until, wfhost};

/// A `wfhost serve --http 127.0.0.1:0` on a store, its stderr in a log; killed when dropped.
pub struct HttpServer {
    pub child: Child,
    pub url: String,
    pub log: PathBuf,
}

impl HttpServer {
    /// A server on `store` with `args` beside the defaults, in `dir`.
    pub fn start(dir: &Path, store: &str, args: &[&str]) -> HttpServer {
        HttpServer::start_with_env(dir, store, args, &[])
    }

    /// As [`start`](Self::start), with variables in its environment.
    pub fn start_with_env(
        dir: &Path,
        store: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> HttpServer {
        HttpServer::start_under(dir, store, args, env, &[])
    }

    /// As [`start_with_env`](Self::start_with_env), run by `under` (a program and its
    /// arguments, which then run the server: `["prlimit", "--nofile=300", "--"]`).
    pub fn start_under(
        dir: &Path,
        store: &str,
        args: &[&str],
        env: &[(&str, &str)],
        under: &[&str],
    ) -> HttpServer {
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = dir.join(format!("serve-{n}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut command = wfhost();
        if let Some((program, rest)) = under.split_first() {
            let binary = command.get_program().to_owned();
            let mut wrapped = std::process::Command::new(program);
            wrapped.args(rest).arg(binary);
            for (key, value) in command.get_envs() {
                match value {
                    Some(value) => wrapped.env(key, value),
                    None => wrapped.env_remove(key),
                };
            }
            command = wrapped;
        }
        command.args(["serve", "--store", store]);
        if !args.contains(&"--http") {
            command.args(["--http", "127.0.0.1:0"]);
        }
        command.args(["--workers", "2", "--grace", "1s", "--poll", "50ms"]);
        if !args.contains(&"--lease") {
            command.args(["--lease", "1s"]);
        }
        command
            .args(args)
            .env_remove("WFHOST_TOKEN")
            .stdout(Stdio::null())
            .stderr(file);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().unwrap();
        let mut server = HttpServer {
            child,
            url: String::new(),
            log,
        };
        wait_until("the server listens", || {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("the server exited ({status}): {}", server.log());
            }
            server.log().contains("listens on ")
        });
        let log = server.log();
        let line = log.lines().find(|l| l.contains("listens on ")).unwrap();
        server.url = line.split("listens on ").nth(1).unwrap().trim().to_string();
        wait_until("the server has its host", || {
            server.log().contains("serving ")
        });
        // Its host recovers what the store holds before the API reaches it: until then, 503.
        // (Over TLS, the test waits with a client that trusts the server.)
        if server.url.starts_with("http://") {
            let token = match args.iter().position(|a| *a == "--token-file") {
                Some(at) => std::fs::read_to_string(args[at + 1])
                    .unwrap()
                    .trim()
                    .to_string(),
                None => env
                    .iter()
                    .find(|(key, _)| *key == "WFHOST_TOKEN")
                    .map(|(_, value)| value.to_string())
                    .unwrap_or_default(),
            };
            let authorization = if token.is_empty() {
                String::new()
            } else {
                format!("Authorization: Bearer {token}\r\n")
            };
            let probe = format!(
                "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n{authorization}Connection: close\r\n\r\n"
            );
            let addr = server.addr();
            wait_until("the server is ready", || {
                raw(&addr, probe.as_bytes()).0 == 200
            });
        }
        server
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its address (`127.0.0.1:PORT`).
    pub fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_string()
    }

    /// A client of it (no token).
    pub fn client(&self) -> wfhost_client::Client {
        wfhost_client::Client::new(&self.url).unwrap()
    }

    /// Kills it as `kill -9` would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A certificate for 127.0.0.1 and localhost, signed by itself, written to `dir` as
/// `cert.pem` and `key.pem`: the certificate, and the two files' paths.
pub fn self_signed(dir: &Path) -> (rcgen::Certificate, PathBuf, PathBuf) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    (certified.cert, cert, key)
}

/// One raw exchange on a fresh connection: `request` as written, and the answer's status and
/// body (the connection closed after it).
pub fn raw(addr: &str, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // The server may answer (and close) before it has read everything: a failed write is
    // fine, the answer is what counts.
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

/// The `error.code` of an error body.
pub fn code(body: &str) -> String {
    let value: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not a JSON error ({e}): {body:?}"));
    value["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The probe module's bytes.
pub fn probe() -> Vec<u8> {
    std::fs::read(wfhost_test_programs::PROBE).unwrap()
}

/// Stores the probe module: its hash.
pub fn put_probe(client: &wfhost_client::Client) -> String {
    client.put_module(&probe()).unwrap().0.hash
}

/// A start of `entry` of `module` with `input` as `id`.
pub fn start_request(
    id: &str,
    module: &str,
    entry: &str,
    input: serde_json::Value,
) -> wfhost_client::wire::StartRequest {
    wfhost_client::wire::StartRequest {
        id: Some(id.to_string()),
        module: module.to_string(),
        entry: entry.to_string(),
        input: serde_json::value::to_raw_value(&input).unwrap(),
    }
}

/// Checks `text` with Prometheus' own parser and linter (`promtool check metrics`, from
/// Debian's package `prometheus`, which `.ci/run` installs).
pub fn promtool_check(text: &str) {
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = child.unwrap_or_else(|e| {
        panic!(
            "promtool is not installed ({e}): install Debian's package `prometheus` \
             (apt-get install -y prometheus); ./test.sh does"
        )
    });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics refused the exposition: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Checks `document` with a real OpenAPI validator (`openapi-spec-validator`, from PyPI, which
/// `./test.sh` installs into `target/test-tools/venv`, or where `WFHOST_TEST_TOOLS` says).
pub fn openapi_check(document: &serde_json::Value) {
    let tools = std::env::var_os("WFHOST_TEST_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| wfhost_test_programs::workspace_root().join("target/test-tools"));
    let validator = tools.join("venv/bin/openapi-spec-validator");
    let file = std::env::temp_dir().join(format!("wfhost-openapi-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec(document).unwrap()).unwrap();
    let output = std::process::Command::new(&validator)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{} cannot run ({e}): the README's test command (./test.sh) installs \
                 openapi-spec-validator there (python3 -m venv; pip install openapi-spec-validator)",
                validator.display()
            )
        });
    let _ = std::fs::remove_file(&file);
    assert!(
        output.status.success(),
        "openapi-spec-validator refused the document: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
