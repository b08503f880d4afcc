//! Runs the loom models (`src/loom_models.rs`) as part of `cargo test`: they need the crate built
//! with `--cfg loom`, so this test builds and runs them in a target directory of their own.
//! `WFHOST_SKIP_LOOM=1` skips them.
#![cfg(not(loom))]

use std::path::PathBuf;
use std::process::Command;

#[test]
fn loom_models_hold() {
    if std::env::var_os("WFHOST_SKIP_LOOM").is_some() {
        eprintln!("WFHOST_SKIP_LOOM is set: loom models skipped");
        return;
    }
    // From the environment cargo runs tests in: a binary reused from a build of another
    // checkout must build this one.
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let manifest = package.join("Cargo.toml");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| package.join("../../target"))
        .join("loom");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["test", "--release", "--lib", "--manifest-path"])
        .arg(&manifest)
        .args(["--", "loom_", "--test-threads=2"])
        .env("RUSTFLAGS", "--cfg loom")
        .env("CARGO_TARGET_DIR", &target)
        // Bounding preemptions keeps the two-worker model to seconds; the smaller models are
        // explored exhaustively within the bound.
        .env("LOOM_MAX_PREEMPTIONS", "3")
        .output()
        .expect("run cargo for the loom models");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "loom models failed:\n{stdout}\n{stderr}"
    );
    // Six models, all run: a filter typo must not pass silently.
    assert!(
        stdout.contains("test result: ok. 6 passed"),
        "expected 6 loom models to pass:\n{stdout}"
    );
}
