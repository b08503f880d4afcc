//! A PostgreSQL server of the tests' own: `initdb` and `pg_ctl` from the server binaries (the
//! Debian package `postgresql`), a data directory in a temporary directory, a free port on
//! 127.0.0.1. As root the server runs as the user `postgres` (it refuses to run as root).
//!
//! [`Postgres::shared`] is one server per test binary, with a fresh database per test
//! ([`Postgres::database`]); [`Postgres::start`] is a server of the test's own, for tests that
//! stop and restart it. Whatever way the test binary ends, a watcher process stops the server
//! and removes its directory once the binary is gone.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A running server.
#[derive(Debug)]
pub struct Postgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// The user the server runs as, when the tests run as root.
    run_as: Option<String>,
}

static SHARED: OnceLock<Postgres> = OnceLock::new();
static DATABASES: AtomicU64 = AtomicU64::new(0);

/// Where the server binaries are: `WFHOST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin`, else `pg_ctl` on the `PATH`.
fn binaries() -> PathBuf {
    if let Some(dir) = std::env::var_os("WFHOST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|dir| dir.join("pg_ctl").exists() && dir.join("initdb").exists())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "the PostgreSQL server binaries (initdb, pg_ctl) are not installed: install the \
             package `postgresql` (apt-get install -y postgresql), or name their directory in \
             WFHOST_PG_BIN"
        )
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn id_of(user: &str, flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, user])
        .output()
        .unwrap_or_else(|e| panic!("running `id {flag} {user}`: {e}"));
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| {
            panic!(
                "the tests run as root and PostgreSQL refuses to: they run it as the user \
                 `{user}`, which does not exist (the `postgresql` package creates it)"
            )
        })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port on 127.0.0.1")
}

impl Postgres {
    /// The server shared by the tests of this binary, started on first use.
    pub fn shared() -> &'static Postgres {
        SHARED.get_or_init(Postgres::start)
    }

    /// A server of the caller's own, stopped (and its directory removed) when dropped.
    pub fn start() -> Postgres {
        let bin = binaries();
        let run_as = is_root().then(|| "postgres".to_string());
        let base = if run_as.is_some() {
            PathBuf::from("/tmp")
        } else {
            std::env::temp_dir()
        };
        static SERVERS: AtomicU64 = AtomicU64::new(0);
        let dir = base.join(format!(
            "wfhost-pg-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the server's directory");
        if let Some(user) = &run_as {
            std::os::unix::fs::chown(&dir, Some(id_of(user, "-u")), Some(id_of(user, "-g")))
                .expect("giving the server's directory to its user");
        }
        let mut server = Postgres {
            dir,
            bin,
            port: 0,
            run_as,
        };
        server.watch();
        server.run(
            "initdb",
            &[
                "-D",
                &server.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        // The port is free when chosen and may be taken before the server binds it.
        let mut last = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.try_start() {
                Ok(()) => return server,
                Err(why) => last = why,
            }
        }
        panic!("PostgreSQL did not start: {last}");
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// `program` from the server binaries, as the server's user.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn try_start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").display().to_string();
        let out = self
            .command("pg_ctl")
            .args([
                "-D",
                &self.data(),
                "-l",
                &log,
                "-w",
                "-t",
                "120",
                "-o",
                &options,
                "start",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running pg_ctl: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{}{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        ))
    }

    /// A process that waits for this test binary to end, then stops the server and removes its
    /// directory: a static server is never dropped, and a test binary may die.
    fn watch(&self) {
        let stop = format!(
            "{} -D {} -m immediate stop",
            self.bin.join("pg_ctl").display(),
            self.data()
        );
        let stop = match &self.run_as {
            Some(user) => format!("runuser -u {user} -- {stop}"),
            None => stop,
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            dir = self.dir.display()
        );
        // Never waited for: it outlives this process by design, and ends only after it.
        #[allow(clippy::zombie_processes)]
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the server's watcher");
    }

    /// The URL of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// A new, empty database, named after `hint`: its URL.
    pub fn database(&self, hint: &str) -> String {
        let name: String = hint
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let name = format!("{name}_{}", DATABASES.fetch_add(1, Ordering::Relaxed));
        let port = self.port.to_string();
        self.run(
            "createdb",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", &name],
        );
        self.url(&name)
    }

    /// Runs `sql` on the database `url` names (one of this server's) with `psql`: its rows, one
    /// line each, columns separated by `|`.
    pub fn psql(&self, url: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-A",
                "-t",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                url,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running psql: {e}"));
        assert!(
            out.status.success(),
            "psql failed on `{sql}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Stops the server: `fast` (clients are disconnected, a clean shutdown) or `immediate` (as
    /// a crash: the next start replays its write-ahead log).
    pub fn stop(&self, mode: &str) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", mode, "-w", "stop"]);
    }

    /// Starts the server again, on the same port.
    pub fn start_again(&self) {
        if let Err(why) = self.try_start() {
            panic!("PostgreSQL did not start again: {why}");
        }
    }

    /// The server's directory (its data and log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
