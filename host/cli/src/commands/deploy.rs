//! `wfhost deploy`: a workflow built and stored under a name, as that name's next version.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use wfhost::{Client, Grants, SyncMode};

use crate::args::limits::CacheArgs;
use crate::output::outln;

/// Builds a workflow (a crate's folder, a Python file or a JavaScript module; or takes a `.wasm`
/// module as it is) and stores it under a name, in the store or on a server: it becomes the
/// name's next version, unless it is the name's latest already. Starts then name it by the
/// name (`wfhost start orders ENTRY --server URL`: the latest version) or `orders@3`, and its
/// workflows show the name (`wfhost list`, `wfhost upgrade --all --of orders`). Prints the
/// version (`orders@3`) and the module's hash.
#[derive(Debug, clap::Parser)]
pub struct DeployCommand {
    /// The workflow: a crate's directory, a Python file (`.py`), a JavaScript module (`.js`,
    /// `.mjs`), or a built module (`.wasm`).
    source: PathBuf,

    /// The name to store it under (letters, digits, '-', '_' and '.', starting with a letter).
    #[arg(long, value_name = "NAME")]
    name: String,

    /// A folder of pure-Python or pure-JavaScript packages the workflow imports; repeatable.
    #[arg(long = "path", value_name = "DIR")]
    paths: Vec<PathBuf>,

    #[command(flatten)]
    target: crate::args::target::Target,

    #[command(flatten)]
    cache: CacheArgs,
}

impl DeployCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        if let Some(why) = wfhost::bad_module_name(&self.name) {
            anyhow::bail!("--name {}: {why}", self.name);
        }
        let wasm = built(&self.source, &self.paths)?;
        let stored = if self.target.is_server() {
            self.target.client()?.put_module_named(&wasm, &self.name)?
        } else {
            // A host of its own over the store, which runs nothing: a store of a host's own
            // is written by one.
            let location = self.target.location()?;
            let builder = crate::args::host::builder(Some(1), None, &self.cache, None)?;
            let host = crate::args::host::build(builder.store(location, SyncMode::Full))?;
            let stored = Client::serving(&host, Grants::default())
                .and_then(|client| client.put_module_named(&wasm, &self.name));
            host.shutdown(Duration::from_secs(1));
            stored?
        };
        let version = stored
            .names
            .iter()
            .find(|n| n.name == self.name)
            .map_or_else(|| self.name.clone(), ToString::to_string);
        outln!(
            "{version} {} ({} entry point{}: {})",
            &stored.hash[..12],
            stored.entry_points.len(),
            if stored.entry_points.len() == 1 {
                ""
            } else {
                "s"
            },
            stored.entry_points.join(", ")
        )?;
        Ok(())
    }
}

/// The module `source` is: built from a crate's folder, a Python file or a JavaScript module,
/// or read from a `.wasm` file.
fn built(source: &Path, paths: &[PathBuf]) -> anyhow::Result<Vec<u8>> {
    match source.extension().and_then(|e| e.to_str()) {
        Some("py") => Ok(wfhost_build::python(source, paths)?.module),
        Some("js" | "mjs") => Ok(wfhost_build::javascript(source, paths)?.module),
        Some("wasm") => {
            std::fs::read(source).with_context(|| format!("cannot read {}", source.display()))
        }
        _ if source.join("Cargo.toml").is_file() => {
            let path = wfhost_cli::build::build_workflow(source, true)?;
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
        }
        _ => anyhow::bail!(
            "{} is neither a crate's folder, a Python file (.py), a JavaScript module (.js, .mjs) \
             nor a module (.wasm)",
            source.display()
        ),
    }
}
