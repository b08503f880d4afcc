use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, Context as _};
use wfhost::store::Location;
use wfhost::{ErrorKind, Host, Payload, Pid, Run};

use crate::args::input::read_input;
use crate::args::limits::{CacheArgs, LimitArgs};
use crate::args::show::render;
use crate::args::units::parse_duration;
use crate::events::EventPrinter;
use crate::exit::WorkflowFailed;
use crate::output::outln;

/// Runs one entry point of a workflow module to completion and prints its result as JSON.
///
/// The module is a .wasm file, or a workflow crate's directory (built first, as `wfhost build`
/// would). The result goes to stdout; logs (including the workflow's own) and the messages it
/// sends the host (`ctx.send(Pid::HOST, ...)`, one line each) go to stderr. Ctrl-C cancels the
/// workflow, which may clean up; if it has not finished within --grace, it is terminated (a
/// second Ctrl-C terminates it at once).
#[derive(Debug, clap::Parser)]
pub struct RunCommand {
    /// The module: a .wasm file, or the directory of a workflow crate.
    module: PathBuf,

    /// The entry point to run.
    entry: String,

    /// The entry point's input, as JSON text. Default: null.
    #[arg(long, conflicts_with = "input_file")]
    input: Option<String>,

    /// Read the input (JSON) from this file.
    #[arg(long, value_name = "FILE")]
    input_file: Option<PathBuf>,

    /// Also load this module under NAME, for workflows that spawn its entry points
    /// (`ctx.spawn_module("NAME", ...)`). Repeatable.
    #[arg(long = "module", value_name = "NAME=PATH", value_parser = parse_module)]
    modules: Vec<(String, PathBuf)>,

    /// Print a line on stderr for every spawn, event, yield and exit of every process.
    #[arg(long)]
    events: bool,

    /// Worker threads. Default: one per core.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,

    #[command(flatten)]
    metrics: crate::args::http::MetricsArgs,

    /// After Ctrl-C, how long the workflow may clean up before it is terminated (e.g. 10s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    grace: Duration,

    /// Run durably, journaling every step in this store: a SQLite file (created if need be) or
    /// a PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE). A run that is killed
    /// resumes with `wfhost resume --store STORE`. Unfinished workflows already in the store
    /// resume too, while this one runs. Ctrl-C stops the host without cancelling anything.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Option<Location>,

    /// The durable workflow's id (with --store). Running an id that finished with the same
    /// module, entry point and input prints its stored result; with others, it is refused (exit
    /// code 3). Default: a new random id, printed on stderr.
    #[arg(long, value_name = "ID")]
    id: Option<String>,

    #[command(flatten)]
    durability: crate::args::host::DurabilityArgs,

    #[command(flatten)]
    limits: LimitArgs,

    #[command(flatten)]
    cache: CacheArgs,
}

/// "name=path".
fn parse_module(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!(
            "'{text}' is not NAME=PATH (e.g. --module billing=billing.wasm)"
        )),
    }
}

impl RunCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        if self.id.is_some() && self.store.is_none() {
            bail!(
                "--id names a durable workflow, which is journaled in a store: give --store too \
                 (--store wf.db, or a postgres:// URL)"
            );
        }
        let input = read_input(self.input.as_deref(), self.input_file.as_deref())?;
        let module = if self.module.is_dir() {
            wfhost_cli::build::build_workflow(&self.module, true)?
        } else {
            self.module.clone()
        };
        let name = module_name(&module);

        let metrics = wfhost::Metrics::new();
        let host = self.host(&name, &module, &metrics)?;
        let _stopping = crate::args::host::Stopping(host.clone());
        let _serving = self.metrics.serve(&metrics)?;
        let run = self.start(&host, &name, Payload::json_bytes(input.into_bytes()))?;
        // What the workflow sends the host, as it comes; then its result.
        while let Some(message) = run.recv_message() {
            // A message is the workflow talking, not its result: shown whatever it holds.
            let shown = render(&message.data).unwrap_or_else(|_| {
                format!(
                    "(JSON that is not UTF-8) {}",
                    String::from_utf8_lossy(&message.data.bytes)
                )
            });
            eprintln!("message from {}: {shown}", message.from);
        }
        let outcome = run.wait();
        host.shutdown(Duration::from_secs(1));
        self.outcome(&host, outcome)
    }

    /// The host this run asks for, with its module (as `name`) and any others loaded.
    fn host(&self, name: &str, module: &Path, metrics: &wfhost::Metrics) -> anyhow::Result<Host> {
        let store = self.store.as_ref().map(|store| (store, &self.durability));
        let mut builder =
            crate::args::host::builder(self.workers, Some(&self.limits), &self.cache, store)?
                .cancel_grace(Some(self.grace));
        if self.metrics.requested() {
            builder = builder.metrics(metrics);
        }
        if self.events {
            builder = builder.observer(Arc::new(EventPrinter));
        }
        let host = crate::args::host::build(builder)?;
        let grants = self.limits.grants();
        let loaded = host
            .load_module_with(name, module, grants.clone())
            .map(|_| ());
        let loaded = loaded.and_then(|()| {
            self.modules.iter().try_for_each(|(extra, path)| {
                host.load_module_with(extra, path, grants.clone())
                    .map(|_| ())
            })
        });
        if let Err(error) = loaded {
            host.shutdown(Duration::from_secs(1));
            return Err(error.into());
        }
        Ok(host)
    }

    /// Starts the workflow: durable under an id (after resuming what the store holds), or a
    /// process of its own.
    fn start(&self, host: &Host, name: &str, input: Payload) -> anyhow::Result<Run> {
        let grants = self.limits.grants();
        Ok(match &self.store {
            Some(store) => {
                // Followed by nobody here: their messages to the host are logged and kept.
                // (What is damaged was logged as the recovery found it.)
                let recovered = host.recover_with(grants)?;
                if !recovered.is_empty() {
                    eprintln!(
                        "resuming {} unfinished workflow(s) of {} beside this one",
                        recovered.len(),
                        store
                    );
                }
                let id = match &self.id {
                    Some(id) => id.clone(),
                    None => {
                        let id = crate::args::host::new_id();
                        eprintln!("workflow id: {id}");
                        id
                    }
                };
                let run = host.start(&id, name, &self.entry, input)?;
                crate::args::host::stop_on_ctrl_c(host.clone(), store.clone())?;
                run
            }
            None => {
                let run = host.spawn(name, &self.entry, input)?;
                on_ctrl_c(host.clone(), run.pid(), self.grace)?;
                run
            }
        })
    }

    /// What the command says of the workflow's outcome: its result, or why it stopped.
    fn outcome(&self, host: &Host, outcome: wfhost::Result<Payload>) -> anyhow::Result<()> {
        match outcome {
            Ok(result) => {
                outln!("{}", render(&result)?)?;
                Ok(())
            }
            // It never started: the entry point does not exist or refused its input.
            Err(error)
                if matches!(
                    error.kind(),
                    ErrorKind::UnknownEntry | ErrorKind::InvalidInput
                ) =>
            {
                Err(anyhow::Error::new(error))
            }
            // The store stopped it where its journal ends: it resumes.
            Err(error)
                if self.store.is_some()
                    && (host.store_failure().is_some() || crate::args::host::interrupted()) =>
            {
                let store = self
                    .store
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                Err(crate::exit::Stopped(format!(
                    "the workflow stopped, resumable: {} (`wfhost resume --store {store}` goes \
                     on with it)",
                    error.message()
                ))
                .into())
            }
            Err(error) => Err(WorkflowFailed(error.message().to_string()).into()),
        }
    }
}

/// The module's name: its file name without the extension.
fn module_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "main".into())
}

/// Ctrl-C cancels the workflow, which may clean up within `grace`; a second terminates it.
fn on_ctrl_c(host: Host, root: Pid, grace: Duration) -> anyhow::Result<()> {
    let interrupts = AtomicUsize::new(0);
    ctrlc::set_handler(move || {
        if interrupts.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!(
                "interrupted: cancelling the workflow; it has {grace:?} to clean up (Ctrl-C again \
                 to terminate it now)"
            );
            // It may have finished just now; then there is nothing to cancel.
            let _ = host.cancel(root);
        } else {
            let _ = host.terminate(root, "terminated: interrupted twice");
        }
    })
    .context("cannot install the Ctrl-C handler")
}
