//! `wfhost upgrade`: new code for running workflows, each switched only if its journal replays
//! the same with it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use wfhost::{Client, ErrorKind, Grants, SyncMode};

use crate::args::limits::CacheArgs;
use crate::exit::WorkflowFailed;
use crate::output::outln;

/// Gives a running workflow new code: its journal is replayed against the new module first, and
/// it switches (between two of its steps) only if every step is the same; otherwise nothing
/// changes, the step that differs is named, and the exit code is 1. With `--all --of MODULE`:
/// every running workflow of that module that the new module could run.
///
/// Through a server (`--server`), the host that runs the workflow switches it at once. On a
/// store (`--store`), only workflows no host runs are switched (a SQLite store no host holds,
/// or workflows of a shared store that no host owns).
#[derive(Debug, clap::Parser)]
pub struct UpgradeCommand {
    /// The workflow's id.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    id: Option<String>,

    /// The new module (a `.wasm` file).
    #[arg(long, value_name = "FILE")]
    module: PathBuf,

    /// Every running workflow of the module --of names whose entry point the new module exports:
    /// a line each (`upgraded`, `already`, `refused` and why), and exit code 1 if any was
    /// refused.
    #[arg(long, requires = "of")]
    all: bool,

    /// With --all: the module whose workflows to upgrade (its name, or at least the first 8
    /// digits of its hash).
    #[arg(long, value_name = "MODULE", requires = "all")]
    of: Option<String>,

    #[command(flatten)]
    target: crate::args::target::Target,

    #[command(flatten)]
    cache: CacheArgs,
}

impl UpgradeCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let wasm = std::fs::read(&self.module)
            .with_context(|| format!("cannot read the module {}", self.module.display()))?;
        let info = wfhost::ModuleInfo::inspect(&wasm)
            .with_context(|| format!("{} is not a module wfhost runs", self.module.display()))?;
        let (client, host) = if self.target.is_server() {
            (self.target.client()?, None)
        } else {
            // A host of its own over the store, which runs nothing: it checks and switches
            // the workflows no host runs.
            let location = self.target.location()?;
            let builder = crate::args::host::builder(Some(1), None, &self.cache, None)?;
            let host = crate::args::host::build(builder.store(location, SyncMode::Full))?;
            (Client::serving(&host, Grants::default())?, Some(host))
        };
        let result = match &self.id {
            Some(id) => self.one(&client, id, &wasm),
            None => self.every(&client, &info, &wasm),
        };
        drop(client);
        if let Some(host) = host {
            host.shutdown(Duration::from_secs(1));
        }
        result
    }

    fn one(&self, client: &Client, id: &str, wasm: &[u8]) -> anyhow::Result<()> {
        match client.upgrade(id, wasm) {
            Ok(upgraded) if upgraded.already => {
                outln!("{id} runs {} already: nothing changed", short(&upgraded.to))?;
                Ok(())
            }
            Ok(upgraded) => {
                outln!(
                    "{id} upgraded: {} -> {} ({} step(s) replayed the same)",
                    short(&upgraded.from),
                    short(&upgraded.to),
                    upgraded.steps
                )?;
                Ok(())
            }
            Err(error) if error.kind() == ErrorKind::Conflict => {
                Err(WorkflowFailed(error.message().to_string()).into())
            }
            Err(error) => Err(error.into()),
        }
    }

    fn every(&self, client: &Client, info: &wfhost::ModuleInfo, wasm: &[u8]) -> anyhow::Result<()> {
        let (mut upgraded, mut already, mut refused, mut failed) = (0u64, 0u64, 0u64, 0u64);
        crate::args::select::each_running(client, info, self.of.as_deref(), |workflow| {
            match client.upgrade(&workflow.id, wasm) {
                Ok(done) if done.already => {
                    already += 1;
                    outln!("already   {}", workflow.id)?;
                }
                Ok(done) => {
                    upgraded += 1;
                    outln!("upgraded  {}  ({} step(s))", workflow.id, done.steps)?;
                }
                Err(error) if error.kind() == ErrorKind::Conflict => {
                    refused += 1;
                    outln!("refused   {}  {}", workflow.id, error.message())?;
                }
                Err(error) => {
                    failed += 1;
                    outln!("error     {}  {}", workflow.id, error.message())?;
                }
            }
            Ok(())
        })?;
        eprintln!(
            "{upgraded} upgraded to {}, {already} ran it already, {refused} refused (their \
             journals differ), {failed} not upgraded for another reason",
            self.module.display()
        );
        if refused + failed > 0 {
            return Err(WorkflowFailed(format!(
                "{refused} workflow(s) refused the new module and {failed} could not be upgraded: \
                 they run the module they ran"
            ))
            .into());
        }
        Ok(())
    }
}

/// The start of a module's hash, as the other commands show it.
fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}
