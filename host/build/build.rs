//! Says where the language runtimes (`runtimes/`, a workspace of their own) are and where they
//! build (`<target>/wfhost-runtimes`, beside this build's profiles, shared by every profile and
//! command), for `src/runtime.rs` to build them on first use. With the feature `embedded`, it
//! builds them now, for wasm32-wasip1, and puts each module where `src/runtime.rs` includes it:
//! a binary that needs no sources at run time, for a build that is installed elsewhere.

use std::path::{Path, PathBuf};

#[path = "src/toolchain.rs"]
#[allow(dead_code)]
mod toolchain;

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
    let target_dir = shared_target_dir(&out_dir);
    println!(
        "cargo:rustc-env=WFHOST_RUNTIMES_SOURCE={}",
        runtimes.display()
    );
    println!(
        "cargo:rustc-env=WFHOST_RUNTIMES_TARGET={}",
        target_dir.display()
    );
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/toolchain.rs");
    if std::env::var_os("CARGO_FEATURE_EMBEDDED").is_none() {
        return;
    }
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
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    if let Err(why) = toolchain::build_runtimes(&cargo, &runtimes, &target_dir) {
        panic!("{why}");
    }
    for (_, file) in toolchain::RUNTIMES {
        let built = target_dir
            .join(toolchain::TARGET)
            .join("release")
            .join(file);
        std::fs::copy(&built, out_dir.join(file))
            .unwrap_or_else(|e| panic!("{} was not built: {e}", built.display()));
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
