use crate::output::outln;
use anyhow::Context as _;
use std::path::PathBuf;

/// Prints the TypeScript types of the "wfhost" module JavaScript workflows import (the context,
/// `HOST`, `Cancelled`, `CommandError`): save them beside your sources as `wfhost.d.ts`, compile
/// with your own tsc or esbuild, and `wfhost build` the JavaScript it writes.
#[derive(Debug, clap::Parser)]
pub struct TypesCommand {
    /// Write them to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

impl TypesCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        match self.output {
            Some(path) => std::fs::write(&path, wfhost_build::JAVASCRIPT_TYPES)
                .with_context(|| format!("writing {}", path.display())),
            None => outln!("{}", wfhost_build::JAVASCRIPT_TYPES.trim_end()),
        }
    }
}
