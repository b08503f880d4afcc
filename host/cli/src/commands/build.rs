use crate::output::outln;
use anyhow::Context as _;
use std::path::{Path, PathBuf};

/// Builds a workflow and prints the module's path as the last line.
///
/// A Rust workflow is a crate: `cargo build --target wasm32-wasip1 --release` runs on it
/// (installing the target with rustup first if it is missing); cargo's progress and errors go to
/// stderr. A Python workflow is the `.py` file that registers its entry points
/// (`@wfhost.entry`): it is packed with every `.py` file under its folder and under each
/// `--path`. A JavaScript workflow is the ES module (`.js`, `.mjs`) that exports its entry
/// points (`export async function`): it is packed with the modules under its project's folder
/// (the nearest holding a `package.json`), the packages its `package.json` depends on, and
/// each `--path`. Either is loaded once by its language's runtime (its top-level code runs,
/// with no files, network or environment, for at most a minute), and the loaded interpreter is
/// written into `<file>.wasm` beside it (or `--output`).
#[derive(Debug, clap::Parser)]
pub struct BuildCommand {
    /// The workflow: a crate's directory (holding its Cargo.toml), a Python file (`.py`) or a
    /// JavaScript module (`.js`, `.mjs`).
    source: PathBuf,

    /// Build with the dev profile instead of release (Rust).
    #[arg(long)]
    debug: bool,

    /// A folder of pure-Python or pure-JavaScript packages the workflow imports (a virtual
    /// environment's site-packages, a vendored folder); repeatable. Searched after the
    /// workflow's own folder.
    #[arg(long = "path", value_name = "DIR")]
    paths: Vec<PathBuf>,

    /// Where to write the module of a Python or JavaScript workflow (default: beside the file,
    /// `.wasm`).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

impl BuildCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let module = match self.source.extension().and_then(|e| e.to_str()) {
            Some("py") => self.write(wfhost_build::python(&self.source, &self.paths)?)?,
            Some("js" | "mjs") => {
                self.write(wfhost_build::javascript(&self.source, &self.paths)?)?
            }
            Some("ts" | "mts") => anyhow::bail!(
                "{} is TypeScript: compile it to a JavaScript module first (tsc or esbuild, \
                 target ES2022, module ESNext) and build the .js file; `wfhost types` writes \
                 the types of the \"wfhost\" module",
                self.source.display()
            ),
            _ if self.source.is_file() => anyhow::bail!(
                "{} is neither a crate's folder, a Python file (.py) nor a JavaScript module \
                 (.js, .mjs): name the folder that holds the workflow's Cargo.toml, or the file \
                 that defines its entry points",
                self.source.display()
            ),
            _ => {
                if !self.source.join("Cargo.toml").is_file() && self.source.is_dir() {
                    anyhow::bail!(
                        "{} holds no Cargo.toml: for a Python or JavaScript workflow, name the \
                         file that defines its entry points (wfhost build {}/shop.py); the \
                         files beside it are packed with it",
                        self.source.display(),
                        self.source.display()
                    );
                }
                if !self.paths.is_empty() || self.output.is_some() {
                    anyhow::bail!(
                        "--path and --output are for Python and JavaScript workflows; a \
                         crate's module is where cargo writes it"
                    );
                }
                wfhost_cli::build::build_workflow(&self.source, !self.debug)?
            }
        };
        outln!("{}", module.display())?;
        Ok(())
    }

    /// Writes a module built from sources: where it went.
    fn write(&self, built: wfhost_build::Built) -> anyhow::Result<PathBuf> {
        let output = self
            .output
            .clone()
            .unwrap_or_else(|| self.source.with_extension("wasm"));
        write(&output, &built.module)?;
        eprintln!(
            "built {} ({} entry point{}: {}; {:.1} MiB)",
            output.display(),
            built.entries.len(),
            if built.entries.len() == 1 { "" } else { "s" },
            built.entries.join(", "),
            built.module.len() as f64 / (1 << 20) as f64
        );
        Ok(output)
    }
}

/// Writes `bytes` to `path` whole or not at all (a temporary file renamed into place).
fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    // Named for this process, so that two builds of one script do not write into one file; gone
    // again if the write fails (a full disk), so that nothing half written is left behind.
    let temporary = path.with_file_name(format!(
        ".{}.{}.partial",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = std::fs::write(&temporary, bytes)
        .with_context(|| format!("writing {}", temporary.display()))
        .and_then(|()| {
            std::fs::rename(&temporary, path).with_context(|| format!("writing {}", path.display()))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}
