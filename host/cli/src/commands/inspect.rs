use crate::output::outln;
use std::path::PathBuf;

use anyhow::Context as _;
use wfhost::ModuleInfo;

/// Shows what a module declares (ABI version, entry points, imports) without running or
/// compiling it.
#[derive(Debug, clap::Parser)]
pub struct InspectCommand {
    /// The module (.wasm).
    module: PathBuf,

    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl InspectCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let bytes = std::fs::read(&self.module)
            .with_context(|| format!("cannot read module {}", self.module.display()))?;
        let info = ModuleInfo::inspect(&bytes)
            .with_context(|| format!("{} is not a module wfhost can run", self.module.display()))?;
        if self.json {
            let imports: Vec<String> = info
                .imports
                .iter()
                .map(|(module, name)| format!("{module}::{name}"))
                .collect();
            let json = serde_json::json!({
                "module": self.module.display().to_string(),
                "abi_version": info.abi_version,
                "entry_points": info.entries,
                "imports": imports,
                "size": info.size,
                "sha256": info.sha256,
            });
            outln!("{json}")?;
            return Ok(());
        }
        outln!("module:       {}", self.module.display())?;
        outln!("size:         {} bytes", info.size)?;
        outln!("sha256:       {}", info.sha256)?;
        outln!("abi version:  {}", info.abi_version)?;
        outln!("entry points: {}", info.entries.join(", "))?;
        let mut imports: Vec<&str> = info.imports.iter().map(|(_, name)| name.as_str()).collect();
        imports.sort_unstable();
        outln!(
            "imports:      {} WASI preview 1 function(s){}{}",
            imports.len(),
            if imports.is_empty() { "" } else { ": " },
            imports.join(", ")
        )?;
        Ok(())
    }
}
