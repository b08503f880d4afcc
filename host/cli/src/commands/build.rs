use crate::output::outln;
use std::path::PathBuf;

/// Builds a workflow crate for wasm32-wasip1 and prints the module's path as the last line.
///
/// Runs `cargo build --target wasm32-wasip1 --release` on the crate (installing the target with
/// rustup first if it is missing). Cargo's progress and errors go to stderr.
#[derive(Debug, clap::Parser)]
pub struct BuildCommand {
    /// The workflow crate: a directory holding its Cargo.toml.
    crate_dir: PathBuf,

    /// Build with the dev profile instead of release.
    #[arg(long)]
    debug: bool,
}

impl BuildCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let module = wfhost_cli::build::build_workflow(&self.crate_dir, !self.debug)?;
        outln!("{}", module.display())?;
        Ok(())
    }
}
