use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use crossbeam_channel::select;
use wfhost::{Encoding, ErrorKind, Host, Payload};

use super::limits::{parse_duration, LimitArgs};
use super::WorkflowFailed;
use crate::events::EventPrinter;

/// Runs one entry point of a workflow module to completion and prints its result as JSON.
///
/// The module is a .wasm file, or a workflow crate's directory (built first, as `wfhost build`
/// would). The result goes to stdout; logs (including the workflow's own) go to stderr. Ctrl-C
/// cancels the workflow, which may clean up; if it has not finished within --grace, it is
/// terminated (a second Ctrl-C terminates it at once).
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

    /// After Ctrl-C, how long the workflow may clean up before it is terminated (e.g. 10s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    grace: Duration,

    #[command(flatten)]
    limits: LimitArgs,
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
        let input = self.read_input()?;
        let module = if self.module.is_dir() {
            wfhost::build::build_workflow(&self.module, true)?
        } else {
            self.module.clone()
        };
        let name = module_name(&module);

        let mut builder = self
            .limits
            .apply(Host::builder())?
            .cancel_grace(Some(self.grace));
        if let Some(workers) = self.workers {
            if workers == 0 {
                bail!("--workers must be at least 1");
            }
            builder = builder.workers(workers);
        }
        if self.events {
            builder = builder.observer(Arc::new(EventPrinter));
        }
        let host = builder.build().context("cannot start the host")?;
        let grants = self.limits.grants();
        host.load_module_with(&name, &module, grants.clone())?;
        for (extra, path) in &self.modules {
            host.load_module_with(extra, path, grants.clone())?;
        }
        let run = host.spawn(&name, &self.entry, Payload::json_bytes(input.into_bytes()))?;
        let root = run.pid();

        let interrupted = ctrl_c()?;
        let mut interrupts = 0;
        let outcome = loop {
            select! {
                recv(run.receiver()) -> result => break result.ok().map(|(_, result)| {
                    result.map_err(|e| wfhost::Error::new(ErrorKind::Failed, e.message()))
                }),
                recv(interrupted) -> _ => {
                    interrupts += 1;
                    if interrupts == 1 {
                        eprintln!(
                            "interrupted: cancelling the workflow; it has {:?} to clean up \
                             (Ctrl-C again to terminate it now)",
                            self.grace
                        );
                        // It may have finished just now; then there is nothing to cancel.
                        let _ = host.cancel(root);
                    } else {
                        let _ = host.scheduler().terminate(root, "terminated: interrupted twice");
                    }
                }
            }
        };
        host.shutdown(Duration::from_secs(1));
        match outcome {
            Some(Ok(result)) => {
                println!("{}", render(&result)?);
                Ok(())
            }
            Some(Err(error)) => Err(WorkflowFailed(error.message().to_string()).into()),
            None => Err(WorkflowFailed("the workflow ended without a result".into()).into()),
        }
    }

    fn read_input(&self) -> anyhow::Result<String> {
        let (text, source) = match (&self.input, &self.input_file) {
            (Some(text), _) => (text.clone(), "--input".to_string()),
            (None, Some(path)) => (
                std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the input file {}", path.display()))?,
                path.display().to_string(),
            ),
            (None, None) => ("null".to_string(), String::new()),
        };
        if let Err(error) = serde_json::from_str::<serde_json::Value>(&text) {
            bail!("{source} is not valid JSON: {error} (strings need quotes: --input '\"world\"')");
        }
        Ok(text)
    }
}

/// The module's name: its file name without the extension.
fn module_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "main".into())
}

/// A channel that receives once per Ctrl-C.
fn ctrl_c() -> anyhow::Result<crossbeam_channel::Receiver<()>> {
    let (sender, receiver) = crossbeam_channel::bounded(1);
    ctrlc::set_handler(move || {
        let _ = sender.try_send(());
    })
    .context("cannot install the Ctrl-C handler")?;
    Ok(receiver)
}

/// The result as JSON text.
fn render(result: &Payload) -> anyhow::Result<String> {
    match result.encoding {
        Encoding::Json => String::from_utf8(result.bytes.clone())
            .context("the workflow returned JSON that is not UTF-8"),
        encoding => {
            let hex: String = result.bytes.iter().map(|b| format!("{b:02x}")).collect();
            Ok(serde_json::json!({ "encoding": encoding.name(), "bytes": hex }).to_string())
        }
    }
}
