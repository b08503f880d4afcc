//! Chromium over WebDriver, for the web UI's browser test and its benchmark: a chromedriver of
//! the caller's own on a free loopback port (Debian's `chromium` and `chromium-driver`, which
//! `.ci/run` installs), and a headless session of it at 1280x800.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// A chromedriver of the caller's own; stopped when dropped.
pub struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    pub fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run chromedriver ({e}): the browser tests need Debian's packages \
                     `chromium` and `chromium-driver` (`apt-get install chromium chromium-driver`; \
                     the README's test command, ./test.sh, installs them)"
                )
            });
        let addr = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while !answers(&addr) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "chromedriver does not answer on {addr} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Driver {
            child,
            url: format!("http://{addr}"),
        }
    }

    /// A headless Chromium session, its window 1280x800.
    pub async fn browser(&self) -> Client {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,800"],
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a Chromium session")
    }
}

/// Whether chromedriver answers `GET /status` with 200 at `addr`.
fn answers(addr: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer.starts_with(b"HTTP/1.1 200")
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
