//! The hosts under test: real `wfhost serve --http` processes on one store, started, stopped
//! cleanly, killed, frozen (SIGSTOP) and thawed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a host may take to start listening and be ready.
const START: Duration = Duration::from_secs(60);

/// The lease hosts hold on a store they share: short, so that a frozen host loses it soon.
pub(crate) const LEASE: Duration = Duration::from_millis(1500);

/// How long a worker holds a task before it goes to another.
pub(crate) const TASK_TIMEOUT: &str = "2s";

/// The worker function the workflows call.
pub(crate) const FUNCTION: &str = "chaos.work";

/// One `wfhost serve` process.
pub(crate) struct Host {
    child: Option<Child>,
    pub(crate) url: String,
    log: PathBuf,
    /// Frozen by SIGSTOP: it answers nothing until thawed.
    pub(crate) frozen: bool,
}

/// What the hosts run on, and how to start one.
pub(crate) struct Launcher {
    pub(crate) wfhost: PathBuf,
    pub(crate) store: String,
    pub(crate) dir: PathBuf,
    started: u32,
}

impl Launcher {
    pub(crate) fn new(wfhost: &Path, store: &str, dir: &Path) -> Launcher {
        Launcher {
            wfhost: wfhost.to_path_buf(),
            store: store.to_string(),
            dir: dir.to_path_buf(),
            started: 0,
        }
    }

    /// A command of the binary's, with a module cache of the run's own.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(&self.wfhost);
        command
            .env_remove("RUST_LOG")
            .env_remove("WFHOST_TOKEN")
            .env_remove("WFHOST_SERVER")
            .env_remove("WFHOST_STORE")
            .env("WFHOST_MODULE_CACHE", self.dir.join("module-cache"));
        command
    }

    /// Starts a host and waits until it is ready.
    pub(crate) fn start(&mut self) -> Result<Host, String> {
        self.started += 1;
        let log = self.dir.join(format!("serve-{}.log", self.started));
        let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let lease = format!("{}ms", LEASE.as_millis());
        let child = self
            .command()
            .args(["serve", "--store", &self.store, "--http", "127.0.0.1:0"])
            .args(["--workers", "2", "--grace", "1s", "--poll", "50ms"])
            .args(["--lease", &lease, "--task-timeout", TASK_TIMEOUT])
            .args(["--worker-function", FUNCTION])
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.wfhost.display()))?;
        let mut host = Host {
            child: Some(child),
            url: String::new(),
            log,
            frozen: false,
        };
        let began = Instant::now();
        loop {
            if let Some(status) = host
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!("a host exited at start ({status}): {}", host.log()));
            }
            let text = host.log();
            if let Some(line) = text.lines().find(|l| l.contains("listens on ")) {
                if text.contains("serving ") {
                    host.url = line
                        .split("listens on ")
                        .nth(1)
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                    break;
                }
            }
            if began.elapsed() > START {
                return Err(format!("a host did not start in {START:?}: {text}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Ready once it has recovered what the store holds.
        let client = host.client();
        while client.ready().is_err() {
            if began.elapsed() > START {
                return Err(format!("a host did not become ready: {}", host.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(host)
    }
}

impl Host {
    /// Its log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A client of its API that gives up after a few seconds.
    pub(crate) fn client(&self) -> wfhost_client::Client {
        wfhost_client::Client::new(&self.url)
            .map(|c| c.with_timeout(Duration::from_secs(10)))
            .unwrap_or_else(|_| panic!("a host's URL is a URL: {}", self.url))
    }

    /// Its process id, while it runs.
    pub(crate) fn pid(&self) -> Option<i32> {
        self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok())
    }

    fn signal(&self, signal: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: a signal to a child process this host owns (and has not waited for).
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// Stops it as a service manager does (SIGTERM), and waits for it.
    pub(crate) fn stop(&mut self) -> Result<(), String> {
        if self.frozen {
            self.thaw();
        }
        self.signal(libc::SIGTERM);
        if let Some(mut child) = self.child.take() {
            let status = child.wait().map_err(|e| e.to_string())?;
            if !status.success() {
                return Err(format!("a host stopped with {status}: {}", self.log()));
            }
        }
        Ok(())
    }

    /// Kills it as `kill -9` does.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes it (SIGSTOP): it holds its connections and answers nothing.
    pub(crate) fn freeze(&mut self) {
        self.signal(libc::SIGSTOP);
        self.frozen = true;
    }

    /// Thaws it (SIGCONT).
    pub(crate) fn thaw(&mut self) {
        self.signal(libc::SIGCONT);
        self.frozen = false;
    }

    /// Whether it has exited on its own (a host that lost its lease exits or restarts itself).
    pub(crate) fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.frozen {
            self.thaw();
        }
        self.kill();
    }
}
