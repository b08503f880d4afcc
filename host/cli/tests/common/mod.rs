//! What the CLI's test files share. (Each file uses some of it.)
#![allow(dead_code)]

pub mod chromium;
pub mod http;
pub mod scripts;
pub mod tasks;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a test waits for what it waits for before it fails.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh directory for one test: `wfhost-<suite>-<name>-<pid>` in the temporary directory.
/// Removed when the test process exits, unless a test in it failed (its files are then kept
/// to look at).
pub fn tempdir(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wfhost-{suite}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    cleanup::remove_at_exit(&dir);
    dir
}

/// The test directories a test process made, removed as it exits if none of its tests failed
/// (each run of the CLI's tests left a few hundred MiB of stores and built modules in the
/// temporary directory, and they piled up).
mod cleanup {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, Once};

    static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    static FAILED: AtomicBool = AtomicBool::new(false);
    static WATCH: Once = Once::new();

    pub fn remove_at_exit(dir: &Path) {
        WATCH.call_once(|| {
            // A test fails by panicking: its directory is kept.
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                FAILED.store(true, Ordering::Relaxed);
                previous(info);
            }));
            // SAFETY: `remove` is an `extern "C"` function without arguments that cannot
            // unwind: it calls nothing that panics (a poisoned lock and a failed removal are
            // passed over).
            #[cfg(unix)]
            unsafe {
                libc::atexit(remove);
            }
        });
        if let Ok(mut dirs) = DIRS.lock() {
            dirs.push(dir.to_path_buf());
        }
    }

    extern "C" fn remove() {
        if FAILED.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(dirs) = DIRS.lock() {
            for dir in dirs.iter() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// Waits until `done` holds, checking every 20 ms, for up to [`PATIENCE`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < PATIENCE,
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The binary, with a module cache of the tests' own rather than the user's, and none of the
/// OpenTelemetry settings of the environment the tests run in (a test that traces sets its own).
pub fn wfhost() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wfhost"));
    command.env_remove("RUST_LOG").env(
        "WFHOST_MODULE_CACHE",
        std::env::temp_dir().join("wfhost-tests-module-cache"),
    );
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    command
}
