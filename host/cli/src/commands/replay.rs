//! `wfhost replay`: a workflow's journal replayed with a module, running nothing.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use wfhost::store::Location;
use wfhost::Client;

use super::limits::CacheArgs;
use super::WorkflowFailed;
use crate::output::outln;

/// Replays a workflow's journal with a module, running nothing: does a new build do what the one
/// that wrote the journal did? Exit code 1 when it does not, with the step and what differs.
#[derive(Debug, clap::Parser)]
pub struct ReplayCommand {
    /// The store: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// The workflow's id.
    id: String,

    /// The module to replay with (a `.wasm` file). Default: the one the workflow started with,
    /// as the store kept it.
    #[arg(long, value_name = "FILE")]
    module: Option<PathBuf>,

    #[command(flatten)]
    cache: CacheArgs,
}

impl ReplayCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let client = Client::open(&self.store);
        let workflow = client.status(&self.id)?;
        // Beside the host that may run the store: this one only reads it.
        let builder = super::host::builder(Some(1), None, &self.cache, None)?;
        let host = super::host::build(builder.read_store(&self.store))?;
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
        let replayed = host.replay(&self.id, "replayed");
        host.shutdown(Duration::from_secs(1));
        match replayed {
            Ok(steps) => {
                outln!(
                    "workflow {}: {steps} step(s) replay the same with {shown}",
                    self.id
                )?;
                Ok(())
            }
            Err(error) if error.kind() == wfhost::ErrorKind::Nondeterminism => {
                Err(WorkflowFailed(error.message().to_string()).into())
            }
            Err(error) => Err(error.into()),
        }
    }
}
