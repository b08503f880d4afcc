//! Building workflow crates with cargo, as `wfhost build` does.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why a workflow crate could not be built; the message says what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(String);

type Result<T> = std::result::Result<T, BuildError>;

/// The target workflows are built for.
pub const TARGET: &str = "wasm32-wasip1";

fn fail(message: impl Into<String>) -> BuildError {
    BuildError(message.into())
}

fn cargo() -> Command {
    // Inside `cargo run`, CARGO names the cargo that started us.
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Installs the wasm32-wasip1 target with rustup when rustup is there and the target is not.
fn ensure_target() -> Result<()> {
    let Ok(output) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        // No rustup: let cargo report a missing target itself.
        return Ok(());
    };
    if String::from_utf8_lossy(&output.stdout)
        .lines()
        .any(|line| line.trim() == TARGET)
    {
        return Ok(());
    }
    eprintln!("installing the {TARGET} target: rustup target add {TARGET}");
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status()
        .map_err(|e| fail(format!("cannot run rustup: {e}")))?;
    if !status.success() {
        return Err(fail(format!(
            "`rustup target add {TARGET}` failed; install the target and try again"
        )));
    }
    Ok(())
}

/// Builds the workflow crate in `crate_dir` for wasm32-wasip1 (release or dev profile) and
/// returns the path of its module. Installs the target with rustup if it is missing. Cargo's
/// progress and errors go to this process's stderr.
pub fn build_workflow(crate_dir: &Path, release: bool) -> Result<PathBuf> {
    let manifest = crate_dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(fail(format!(
            "{} has no Cargo.toml: give the directory of a workflow crate",
            crate_dir.display()
        )));
    }
    let manifest = manifest
        .canonicalize()
        .map_err(|e| fail(format!("cannot resolve {}: {e}", manifest.display())))?;
    ensure_target()?;
    let mut command = cargo();
    command
        .args([
            "build",
            "--target",
            TARGET,
            "--message-format=json-render-diagnostics",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if release {
        command.arg("--release");
    }
    let mut child = command
        .spawn()
        .map_err(|e| fail(format!("cannot run cargo: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| fail("cargo's output is not readable"))?;
    let mut modules = Vec::new();
    let mut package_seen = false;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| fail(format!("reading cargo's output: {e}")))?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let from_this_crate = message["manifest_path"]
            .as_str()
            .and_then(|p| Path::new(p).canonicalize().ok())
            .is_some_and(|p| p == manifest);
        if !from_this_crate {
            continue;
        }
        package_seen = true;
        let is_cdylib = message["target"]["crate_types"]
            .as_array()
            .is_some_and(|types| types.iter().any(|t| t == "cdylib"));
        if !is_cdylib {
            continue;
        }
        for file in message["filenames"].as_array().into_iter().flatten() {
            if let Some(file) = file.as_str().filter(|f| f.ends_with(".wasm")) {
                modules.push(PathBuf::from(file));
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| fail(format!("waiting for cargo: {e}")))?;
    if !status.success() {
        return Err(fail(format!(
            "cargo build failed for {} (see its errors above)",
            manifest.display()
        )));
    }
    match modules.pop() {
        Some(module) => Ok(module),
        None if package_seen => Err(fail(format!(
            "{} builds no wasm module: a workflow crate needs `[lib] crate-type = [\"cdylib\"]` \
             in its Cargo.toml",
            manifest.display()
        ))),
        None => Err(fail(format!(
            "cargo built nothing for {}",
            manifest.display()
        ))),
    }
}
