//! Client commands: `start`, `status` and `result`, against a store that hosts (`wfhost serve`)
//! share. They run no host of their own: a start is a row a host claims, a result is read from
//! the store whichever host ran the workflow.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use wfhost::store::{Ending, Location, NewWorkflow, State, Store, Workflow};
use wfhost::{ModuleInfo, Payload};

use super::durable::{find, new_id, open, status_word, time};
use super::limits::parse_duration;
use super::WorkflowFailed;
use crate::output::outln;

/// Starts a workflow on a store that hosts share, for one of them to claim and run; prints its
/// id. The input is checked against the entry point first (as `wfhost run` checks it), and
/// nothing is written for one it does not take. Idempotent: starting an id that exists with the
/// same module, entry point and input starts nothing (and says so); with another, it is refused
/// (exit code 3).
#[derive(Debug, clap::Parser)]
pub struct StartCommand {
    /// The workflow module: a `.wasm` file, or a workflow crate's directory (built first).
    module: PathBuf,

    /// The entry point to start.
    entry: String,

    /// The input, as JSON. Default: null.
    #[arg(long, value_name = "JSON", conflicts_with = "input_file")]
    input: Option<String>,

    /// Read the input (JSON) from this file: for inputs too long for a command line.
    #[arg(long, value_name = "FILE")]
    input_file: Option<PathBuf>,

    /// The workflow's id. Default: a new random id.
    #[arg(long, value_name = "ID")]
    id: Option<String>,

    /// The largest input to start with: the `--max-payload` of the hosts that run it.
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = super::limits::parse_size)]
    max_payload: usize,

    /// The store: a PostgreSQL URL that `wfhost serve` hosts share.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    #[command(flatten)]
    cache: super::limits::CacheArgs,
}

impl StartCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let input = super::run::read_input(self.input.as_deref(), self.input_file.as_deref())?;
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
        let id = self.id.clone().unwrap_or_else(new_id);
        if let Some(why) = wfhost::bad_id(&id) {
            bail!("{why}");
        }
        // A store that takes no client starts says so before anything is checked or built.
        let mut store = self.store.open_client()?;
        let payload = Payload::json_bytes(input.into_bytes());
        let name = path
            .file_stem()
            .map_or_else(|| "main".into(), |s| s.to_string_lossy().into_owned());
        self.check_input(&name, &bytes, &payload)?;
        let input = postcard::to_allocvec(&payload).context("encoding the input")?;
        let started = store.start_once(
            Some((&info.sha256, &bytes)),
            &NewWorkflow {
                num: 0,
                id: id.clone(),
                parent: None,
                module: info.sha256.clone(),
                module_name: name,
                entry: self.entry.clone(),
                input: input.clone(),
                started: unix_millis(),
            },
        )?;
        match started {
            Some(_) => eprintln!("started {id}"),
            None => {
                let stored = find(&mut *store, &self.store, &id)?;
                stored
                    .start
                    .may_follow(&info.sha256, &self.entry, &input)
                    .context("nothing started")?;
                eprintln!("{id} exists already, started the same way: nothing started");
            }
        }
        outln!("{id}")?;
        Ok(())
    }

    /// Refuses an input past `--max-payload`, or one the entry point does not take: its start
    /// runs in a sandboxed instance here, and nothing else.
    fn check_input(&self, name: &str, bytes: &[u8], input: &Payload) -> anyhow::Result<()> {
        let mut builder = wfhost::Host::builder()
            .workers(1)
            .limits(wfhost::Limits::default().max_payload_bytes(self.max_payload));
        if let Some(dir) = self.cache.dir() {
            builder = builder.module_cache(dir);
        }
        let host = builder
            .build()
            .context("cannot start a host to check the input")?;
        let checked = host
            .load_module_bytes(name, bytes)
            .and_then(|_| host.check_input(name, &self.entry, input));
        host.shutdown(Duration::from_secs(1));
        checked.map_err(|e| anyhow::Error::new(e).context("nothing started"))
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
                outln!("{number}")?;
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

/// Shows where a workflow stands: running (and on which host, or waiting for one), done, failed
/// or cancelled (with its result or error), or damaged (its journal cannot be read back); its
/// steps, times and the messages waiting for it.
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
        let host = host_of(&mut *store, &self.store, &workflow)?;
        let status = status_word(&workflow);
        let (result, error) = match &workflow.ending {
            Some(Ending::Done(bytes)) => (
                Some(
                    postcard::from_bytes::<Payload>(bytes)
                        .ok()
                        .and_then(|p| super::run::render(&p).ok())
                        .unwrap_or_else(|| "(a result that does not decode)".into()),
                ),
                None,
            ),
            Some(Ending::Failed { kind, message }) => (None, Some((kind.clone(), message.clone()))),
            None => (None, None),
        };
        if self.json {
            let result = result
                .as_deref()
                .map(|text| serde_json::from_str::<serde_json::Value>(text).unwrap_or(text.into()));
            outln!(
                "{}",
                serde_json::json!({
                    "id": workflow.start.id,
                    "pid": workflow.start.num,
                    "entry": workflow.start.entry,
                    "module": workflow.start.module_name,
                    "status": status,
                    "waiting_for_host": host.waiting,
                    "host": host.text,
                    "started": workflow.start.started,
                    "finished": workflow.finished,
                    "steps": workflow.steps,
                    "result": result,
                    "error": error.as_ref().map(|(kind, message)| serde_json::json!({
                        "kind": kind,
                        "message": message,
                    })),
                    "damaged": workflow.damaged,
                    "unread_messages": workflow.unread,
                })
            )?;
            return Ok(());
        }
        outln!("id:       {}", workflow.start.id)?;
        outln!(
            "entry:    {} ({})",
            workflow.start.entry,
            workflow.start.module_name
        )?;
        let waiting = match (&workflow.damaged, host.waiting) {
            (Some(_), _) => "",
            (None, true) if workflow.steps == 0 => {
                " (waiting for a host to start it: `wfhost serve` or `wfhost resume`)"
            }
            (None, true) => " (waiting for a host: `wfhost serve` or `wfhost resume` goes on)",
            (None, false) => "",
        };
        outln!("status:   {status}{waiting}")?;
        if let Some(why) = &workflow.damaged {
            outln!(
                "damaged:  {why} (left as it was; a host resumes it once the store is repaired \
                 or the build fixed)"
            )?;
        }
        if let Some(text) = &host.text {
            outln!("host:     {text}")?;
        }
        outln!("started:  {}", time(workflow.start.started))?;
        if let Some(finished) = workflow.finished {
            outln!("finished: {}", time(finished))?;
        }
        outln!("steps:    {}", workflow.steps)?;
        match (workflow.unread, workflow.state) {
            (0, _) => {}
            (n, State::Running) => outln!("messages: {n} waiting to be taken")?,
            (n, _) => outln!("messages: {n} sent to it were never read (it ended first)")?,
        }
        if let Some(result) = result {
            outln!("result:   {result}")?;
        }
        if let Some((kind, message)) = error {
            outln!("error:    {kind}: {message}")?;
        }
        Ok(())
    }
}

/// Who runs a workflow, as a status shows it.
struct HostOf {
    /// In words, if there is anything to say.
    text: Option<String>,
    /// It is unfinished and no live host runs it.
    waiting: bool,
}

/// Who runs `workflow`: on a SQLite file, the host that holds the file; on a shared store, the
/// host that owns it, and whether its lease holds.
fn host_of(
    store: &mut dyn Store,
    location: &Location,
    workflow: &Workflow,
) -> anyhow::Result<HostOf> {
    if workflow.state != State::Running {
        return Ok(HostOf {
            text: None,
            waiting: false,
        });
    }
    let (text, live) = match location.path() {
        Some(path) => match wfhost::store::SqliteStore::holder(path) {
            Some(holder) => (Some(format!("{holder} (holds the store)")), true),
            None => (None, false),
        },
        None => match workflow.owner {
            Some(owner) => match store.host_info(owner)? {
                Some(info) if info.alive => (Some(format!("{} ({})", info.id, info.name)), true),
                Some(info) => (
                    Some(format!("{} ({}), whose lease ran out", info.id, info.name)),
                    false,
                ),
                None => (Some(format!("{owner}")), false),
            },
            None => (None, false),
        },
    };
    Ok(HostOf {
        text,
        waiting: !live,
    })
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
            if let Some(why) = &workflow.damaged {
                return Err(super::Damaged(format!(
                    "workflow '{}' is damaged and goes no further until the store is repaired \
                     (or the build fixed) and a host resumes it: {why}",
                    self.id
                ))
                .into());
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
            outln!("{}", super::run::render(&result)?)?;
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
