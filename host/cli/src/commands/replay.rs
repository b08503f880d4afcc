//! `wfhost replay`: a workflow's journal replayed with a module, running nothing.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use wfhost::store::Location;
use wfhost::Client;

use crate::args::limits::CacheArgs;
use crate::exit::WorkflowFailed;
use crate::output::outln;

/// Replays a workflow's journal with a module, running nothing: does a new build do what the one
/// that wrote the journal did? Exit code 1 when it does not, with the step and what differs.
/// With `--all --module NEW.wasm`: every running workflow the new build could run, each
/// replayed with it: which would a deploy of it break?
#[derive(Debug, clap::Parser)]
pub struct ReplayCommand {
    /// The store: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// The workflow's id.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    id: Option<String>,

    /// Every running workflow whose entry point the module (--module) exports, each replayed
    /// with it: a line each (`same` or `breaks` and where), and exit code 1 if any breaks.
    #[arg(long, requires = "module")]
    all: bool,

    /// With --all: only the workflows started from this module (its name, or at least the first
    /// 8 digits of its hash).
    #[arg(long, value_name = "MODULE", requires = "all")]
    of: Option<String>,

    /// The module to replay with (a `.wasm` file). Default: the one the workflow started with,
    /// as the store kept it.
    #[arg(long, value_name = "FILE")]
    module: Option<PathBuf>,

    #[command(flatten)]
    cache: CacheArgs,
}

impl ReplayCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        if self.all {
            return self.all_running();
        }
        let client = Client::open(&self.store);
        let id = self.id.clone().unwrap_or_default();
        let workflow = client.status(&id)?;
        // Beside the host that may run the store: this one only reads it.
        let builder = crate::args::host::builder(Some(1), None, &self.cache, None)?;
        let host = crate::args::host::build(builder.read_store(&self.store))?;
        let shown = match &self.module {
            Some(path) => {
                host.load_module("replayed", path)?;
                path.display().to_string()
            }
            None => {
                let hash = &workflow.module;
                let bytes = client.module(hash)?.with_context(|| {
                    format!("the store lacks the module {hash} the workflow started with")
                })?;
                host.load_module_bytes("replayed", &bytes)?;
                format!("its own module ({hash})")
            }
        };
        let replayed = host.replay(&id, "replayed");
        host.shutdown(Duration::from_secs(1));
        match replayed {
            Ok(steps) => {
                outln!("workflow {id}: {steps} step(s) replay the same with {shown}")?;
                Ok(())
            }
            Err(error) if error.kind() == wfhost::ErrorKind::Nondeterminism => {
                Err(WorkflowFailed(error.message().to_string()).into())
            }
            Err(error) => Err(error.into()),
        }
    }
}

impl ReplayCommand {
    /// `--all`: every running workflow the module could run, replayed with it.
    fn all_running(&self) -> anyhow::Result<()> {
        let Some(path) = &self.module else {
            anyhow::bail!("--all replays with a new build: give it with --module FILE");
        };
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read the module {}", path.display()))?;
        let info = wfhost::ModuleInfo::inspect(&bytes)?;
        let client = Client::open(&self.store);
        let builder = crate::args::host::builder(Some(1), None, &self.cache, None)?;
        let host = crate::args::host::build(builder.read_store(&self.store))?;
        host.load_module_bytes("replayed", &bytes)?;
        let (mut same, mut broken, mut failed) = (0u64, 0u64, 0u64);
        crate::args::select::each_running(&client, &info, self.of.as_deref(), |workflow| {
            match host.replay(&workflow.id, "replayed") {
                Ok(steps) => {
                    same += 1;
                    outln!("same    {}  ({steps} step(s))", workflow.id)?;
                }
                Err(error) if error.kind() == wfhost::ErrorKind::Nondeterminism => {
                    broken += 1;
                    outln!("breaks  {}  {}", workflow.id, error.message())?;
                }
                Err(error) => {
                    failed += 1;
                    outln!("error   {}  {}", workflow.id, error.message())?;
                }
            }
            Ok(())
        })?;
        host.shutdown(Duration::from_secs(1));
        eprintln!(
            "{} running workflow(s) replayed with {}: {same} the same, {broken} would break{}",
            same + broken + failed,
            path.display(),
            if failed > 0 {
                format!(", {failed} could not be read")
            } else {
                String::new()
            }
        );
        if broken + failed > 0 {
            return Err(WorkflowFailed(format!(
                "{broken} running workflow(s) would break with {} (and {failed} could not be \
                 replayed)",
                path.display()
            ))
            .into());
        }
        Ok(())
    }
}
