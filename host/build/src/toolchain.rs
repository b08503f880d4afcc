//! Building the language runtimes (`runtimes/`, a workspace of their own) for wasm32-wasip1 with
//! cargo: what the build script does for a build that embeds them (feature `embedded`), and what
//! the library does on first use otherwise. Shared by both (`build.rs` includes this file).

use std::path::Path;
use std::process::Command;

/// The target the runtimes are built for.
pub const TARGET: &str = "wasm32-wasip1";

/// (package, the module's file name as cargo writes it).
pub const RUNTIMES: &[(&str, &str)] = &[
    ("wfhost-python", "wfhost_python.wasm"),
    ("wfhost-js", "wfhost_js.wasm"),
];

/// Builds the runtimes of the workspace at `runtimes` into `target_dir` with `cargo` (release,
/// `--locked`): nothing when they are up to date. Its output goes to this process's stderr.
pub fn build_runtimes(
    cargo: &std::ffi::OsStr,
    runtimes: &Path,
    target_dir: &Path,
) -> Result<(), String> {
    ensure_target()?;
    let mut command = Command::new(cargo);
    command
        .current_dir(runtimes)
        .args(["build", "--release", "--locked", "--target", TARGET])
        .arg("--target-dir")
        .arg(target_dir)
        // Flags meant for the host build (`--cfg loom`, instrumentation) are not for guests.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS");
    for (package, _) in RUNTIMES {
        command.args(["-p", package]);
    }
    let status = command.status().map_err(|e| {
        format!(
            "cargo could not be run ({e}): the runtimes are built with the Rust toolchain \
             (https://rustup.rs)"
        )
    })?;
    if !status.success() {
        return Err(format!(
            "building the language runtimes in {} failed (see above). If the {TARGET} target \
             is missing, install it: rustup target add {TARGET}",
            runtimes.display()
        ));
    }
    Ok(())
}

/// Installs the wasm32-wasip1 target with rustup when rustup is there and the target is not
/// (as `wfhost build` does for a workflow crate), so that a fresh machine needs nothing
/// installed by hand.
fn ensure_target() -> Result<(), String> {
    let Ok(output) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        return Ok(()); // No rustup: cargo reports a missing target itself.
    };
    if String::from_utf8_lossy(&output.stdout)
        .lines()
        .any(|line| line.trim() == TARGET)
    {
        return Ok(());
    }
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    if !status.is_ok_and(|status| status.success()) {
        return Err(format!(
            "`rustup target add {TARGET}` failed; install the target and build again"
        ));
    }
    Ok(())
}
