//! Client commands: `start`, `status` and `result`, against a store that hosts (`wfhost serve`)
//! share. They run no host of their own: a start is a row a host claims, a result is read from
//! the store whichever host ran the workflow.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use wfhost::store::{Ending, Location, NewWorkflow, State, Workflow};
use wfhost::{ModuleInfo, Payload};

use super::durable::{find, new_id, open, time};
use super::limits::parse_duration;
use super::WorkflowFailed;

/// Starts a workflow on a store that hosts share, for one of them to claim and run; prints its
/// id. Idempotent: starting an id that exists starts nothing (and says so).
#[derive(Debug, clap::Parser)]
pub struct StartCommand {
    /// The workflow module: a `.wasm` file, or a workflow crate's directory (built first).
    module: PathBuf,

    /// The entry point to start.
    entry: String,

    /// The input, as JSON. Default: null.
    #[arg(long, value_name = "JSON")]
    input: Option<String>,

    /// The workflow's id. Default: a new random id.
    #[arg(long, value_name = "ID")]
    id: Option<String>,

    /// The store: a PostgreSQL URL that `wfhost serve` hosts share.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,
}

impl StartCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let input = self.input.unwrap_or_else(|| "null".to_string());
        if let Err(error) = serde_json::from_str::<serde_json::Value>(&input) {
            bail!("--input is not valid JSON: {error} (strings need quotes: --input '\"world\"')");
        }
        let path = if self.module.is_dir() {
            wfhost_cli::build::build_workflow(&self.module, true)?
        } else {
            self.module.clone()
        };
        let bytes = std::fs::read(&path)
            .with_context(|| format!("cannot read module {}", path.display()))?;
        let info = ModuleInfo::inspect(&bytes)
            .with_context(|| format!("{} is not a module wfhost can run", path.display()))?;
        if !info.has_entry(&self.entry) {
            bail!(
                "{} has no entry point '{}' (it has: {})",
                path.display(),
                self.entry,
                info.entries.join(", ")
            );
        }
        let id = self.id.unwrap_or_else(new_id);
        if let Some(why) = wfhost::bad_id(&id) {
            bail!("{why}");
        }
        let input = postcard::to_allocvec(&Payload::json_bytes(input.into_bytes()))
            .context("encoding the input")?;
        let mut store = self.store.open(wfhost::SyncMode::Full)?;
        let started = store.start_once(
            Some((&info.sha256, &bytes)),
            &NewWorkflow {
                num: 0,
                id: id.clone(),
                parent: None,
                module: info.sha256.clone(),
                module_name: path
                    .file_stem()
                    .map_or_else(|| "main".into(), |s| s.to_string_lossy().into_owned()),
                entry: self.entry.clone(),
                input,
                started: unix_millis(),
            },
        )?;
        match started {
            Some(_) => eprintln!("started {id}"),
            None => eprintln!("{id} exists already: nothing started"),
        }
        println!("{id}");
        Ok(())
    }
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Sends a message (JSON) to a running workflow on a store hosts share; the host that runs it
/// delivers it. Prints the message's number.
#[derive(Debug, clap::Parser)]
pub struct SendCommand {
    /// The workflow's id.
    id: String,

    /// The message, as JSON.
    message: String,

    /// The store: a PostgreSQL URL that `wfhost serve` hosts share.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,
}

impl SendCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        if let Err(error) = serde_json::from_str::<serde_json::Value>(&self.message) {
            bail!("the message is not valid JSON: {error} (strings need quotes: '\"hi\"')");
        }
        let payload = postcard::to_allocvec(&Payload::json_bytes(self.message.into_bytes()))
            .context("encoding the message")?;
        let mut store = open(&self.store)?;
        match store.send_to(&self.id, &payload)? {
            Some(number) => {
                println!("{number}");
                Ok(())
            }
            None => bail!(
                "no running workflow '{}' in {} (`wfhost status {}` says where it stands)",
                self.id,
                self.store,
                self.id
            ),
        }
    }
}

/// Asks a running workflow on a store hosts share to cancel; the host that runs it delivers the
/// cancel, and the workflow decides what to do (it may clean up first).
#[derive(Debug, clap::Parser)]
pub struct CancelCommand {
    /// The workflow's id.
    id: String,

    /// The store: a PostgreSQL URL that `wfhost serve` hosts share.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,
}

impl CancelCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let mut store = open(&self.store)?;
        if store.cancel_by_id(&self.id)? {
            eprintln!("asked {} to cancel", self.id);
            return Ok(());
        }
        let workflow = find(&mut *store, &self.store, &self.id)?;
        match workflow.state {
            State::Running => eprintln!("{} was asked to cancel already", self.id),
            state => eprintln!(
                "{} has ended ({}): nothing to cancel",
                self.id,
                state.name()
            ),
        }
        Ok(())
    }
}

/// Shows where a workflow stands: running, done or failed, with its steps and times.
#[derive(Debug, clap::Parser)]
pub struct StatusCommand {
    /// The workflow's id.
    id: String,

    /// The store: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl StatusCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let mut store = open(&self.store)?;
        let workflow = find(&mut *store, &self.store, &self.id)?;
        if self.json {
            println!(
                "{}",
                serde_json::json!({
                    "id": workflow.start.id,
                    "pid": workflow.start.num,
                    "entry": workflow.start.entry,
                    "module": workflow.start.module_name,
                    "status": workflow.state.name(),
                    "started": workflow.start.started,
                    "finished": workflow.finished,
                    "steps": workflow.steps,
                })
            );
            return Ok(());
        }
        println!("id:       {}", workflow.start.id);
        println!(
            "entry:    {} ({})",
            workflow.start.entry, workflow.start.module_name
        );
        println!("status:   {}", workflow.state.name());
        println!("started:  {}", time(workflow.start.started));
        if let Some(finished) = workflow.finished {
            println!("finished: {}", time(finished));
        }
        println!("steps:    {}", workflow.steps);
        Ok(())
    }
}

/// Prints a workflow's result (JSON), from the store whichever host ran it. Exit code 1 if it
/// failed; with --wait, waits for it to end.
#[derive(Debug, clap::Parser)]
pub struct ResultCommand {
    /// The workflow's id.
    id: String,

    /// The store: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// Wait for the workflow to end (otherwise an unfinished one is an error).
    #[arg(long)]
    wait: bool,

    /// With --wait: give up after this long (e.g. 30s, 5m). Default: wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "wait")]
    timeout: Option<Duration>,
}

impl ResultCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let mut store = open(&self.store)?;
        let started = Instant::now();
        let mut delay = Duration::from_millis(20);
        let workflow = loop {
            let workflow = find(&mut *store, &self.store, &self.id)?;
            if workflow.state != State::Running {
                break workflow;
            }
            if !self.wait {
                bail!(
                    "workflow '{}' has not finished (`wfhost result --wait` waits for it)",
                    self.id
                );
            }
            if self.timeout.is_some_and(|t| started.elapsed() >= t) {
                bail!(
                    "workflow '{}' did not finish within {:?}",
                    self.id,
                    self.timeout.unwrap_or_default()
                );
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(500));
        };
        print_result(&workflow)
    }
}

/// Prints what `workflow` ended with: its result on stdout, or its failure as an error.
fn print_result(workflow: &Workflow) -> anyhow::Result<()> {
    match &workflow.ending {
        Some(Ending::Done(bytes)) => {
            let result: Payload = postcard::from_bytes(bytes).with_context(|| {
                format!(
                    "the stored result of '{}' does not decode",
                    workflow.start.id
                )
            })?;
            println!("{}", super::run::render(&result)?);
            Ok(())
        }
        Some(Ending::Failed { kind, message }) => Err(WorkflowFailed(format!(
            "workflow '{}' failed ({kind}): {message}",
            workflow.start.id
        ))
        .into()),
        None => bail!("workflow '{}' has not finished", workflow.start.id),
    }
}
