//! What the CLI's test files share.

use std::process::Command;

/// The binary, with a module cache of the tests' own rather than the user's.
pub fn wfhost() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wfhost"));
    command.env_remove("RUST_LOG").env(
        "WFHOST_MODULE_CACHE",
        std::env::temp_dir().join("wfhost-tests-module-cache"),
    );
    command
}
