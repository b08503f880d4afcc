//! Builds the language runtimes (`runtimes/`, a workspace of their own) for wasm32-wasip1 and
//! puts each module where `src/python.rs` and `src/js.rs` include it. They build in a target directory beside
//! this build's profiles (`<target>/wfhost-runtimes`), shared by every profile and command, so
//! that a debug build, a release build and clippy build them once.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip1";

/// (package, the module's file name as cargo writes it).
const RUNTIMES: &[(&str, &str)] = &[
    ("wfhost-python", "wfhost_python.wasm"),
    ("wfhost-js", "wfhost_js.wasm"),
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let runtimes = root.join("runtimes");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());

    for watched in [
        "Cargo.toml",
        "runtimes/Cargo.toml",
        "runtimes/Cargo.lock",
        "runtimes/.cargo/config.toml",
        "runtimes/python/Cargo.toml",
        "runtimes/python/src",
        "runtimes/python/py",
        "runtimes/js/Cargo.toml",
        "runtimes/js/src",
        "runtimes/js/js",
        "guest-sdk/Cargo.toml",
        "guest-sdk/src",
        "wit/Cargo.toml",
        "wit/src",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    ensure_target();
    let target_dir = shared_target_dir(&out_dir);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&runtimes)
        .args(["build", "--release", "--locked", "--target", TARGET])
        .arg("--target-dir")
        .arg(&target_dir)
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
    let status = command
        .status()
        .expect("run cargo to build the language runtimes");
    if !status.success() {
        panic!(
            "building the language runtimes failed (see above). If the {TARGET} target is \
             missing, install it: rustup target add {TARGET}"
        );
    }
    for (_, file) in RUNTIMES {
        let built = target_dir.join(TARGET).join("release").join(file);
        std::fs::copy(&built, out_dir.join(file))
            .unwrap_or_else(|e| panic!("{} was not built: {e}", built.display()));
    }
}

/// Installs the wasm32-wasip1 target with rustup when rustup is there and the target is not
/// (as `wfhost build` does for a workflow crate), so that the first build on a fresh machine
/// needs nothing installed by hand.
fn ensure_target() {
    let Ok(output) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        return; // No rustup: cargo reports a missing target itself.
    };
    if String::from_utf8_lossy(&output.stdout)
        .lines()
        .any(|line| line.trim() == TARGET)
    {
        return;
    }
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    if !status.is_ok_and(|status| status.success()) {
        panic!("`rustup target add {TARGET}` failed; install the target and build again");
    }
}

/// `<target>/wfhost-runtimes`, from `OUT_DIR` (`<target>/<profile>/build/<package>/out`).
fn shared_target_dir(out_dir: &Path) -> PathBuf {
    let profile_dir = out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR lies four levels under the target directory");
    profile_dir
        .parent()
        .unwrap_or(profile_dir)
        .join("wfhost-runtimes")
}
