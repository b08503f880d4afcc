//! `wfhost start`: a workflow started on a store hosts share, for one of them to run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use wfhost::Payload;

use crate::args::input::module_with;
use crate::output::outln;

/// Starts a workflow on a store that hosts share, for one of them to claim and run, or through a
/// `wfhost serve --http` server (`--server`: the module is uploaded first); prints its id. The input is checked against the entry point first (as `wfhost run` checks it), and
/// nothing is written for one it does not take. Idempotent: starting an id that exists with the
/// same module, entry point and input starts nothing (and says so); with another, it is refused
/// (exit code 3).
#[derive(Debug, clap::Parser)]
pub struct StartCommand {
    /// The workflow module: a `.wasm` file, a workflow crate's directory (built first), or one
    /// the store keeps: a name it was deployed under (`orders`: its latest version; `orders@3`)
    /// or its hash (a file or folder of that name here is taken first). A start by name is
    /// checked by the host that runs it, not here.
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
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = crate::args::units::parse_size)]
    max_payload: usize,

    #[command(flatten)]
    target: crate::args::target::Target,

    #[command(flatten)]
    cache: crate::args::limits::CacheArgs,
}

impl StartCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let input =
            crate::args::input::read_input(self.input.as_deref(), self.input_file.as_deref())?;
        if let Some(why) = self.id.as_deref().and_then(wfhost::bad_id) {
            bail!("{why}");
        }
        let payload = Payload::json_bytes(input.into_bytes());
        // Not a file or folder here, nor a path: a module the store keeps, by name or hash.
        let looks_like_a_file = self
            .module
            .extension()
            .is_some_and(|e| ["wasm", "py", "js", "mjs", "ts"].contains(&&*e.to_string_lossy()));
        let reference = self.module.to_str().filter(|text| {
            !self.module.exists()
                && !looks_like_a_file
                && !text.contains(std::path::MAIN_SEPARATOR)
                && wfhost::bad_module_reference(text).is_none()
        });
        if let Some(reference) = reference {
            let client = self.target.client()?;
            client.takes_work()?;
            let started = client
                .start_named(self.id.as_deref(), reference, &self.entry, &payload)
                .map_err(refused)?;
            return said(started);
        }
        let (path, bytes) = module_with(&self.module, &self.entry)?;
        let client = self.target.client()?;
        // A store that takes no client starts says so before anything is checked.
        client.takes_work()?;
        let name = path
            .file_stem()
            .map_or_else(|| "main".into(), |s| s.to_string_lossy().into_owned());
        // A server checks the input itself, in the host that runs the workflow.
        if !self.target.is_server() {
            self.check_input(&name, &bytes, &payload)?;
        }
        let started = client
            .start(self.id.as_deref(), &bytes, &name, &self.entry, &payload)
            .map_err(refused)?;
        said(started)
    }

    /// Refuses an input past `--max-payload`, or one the entry point does not take: its start
    /// runs in a sandboxed instance here, and nothing else.
    fn check_input(&self, name: &str, bytes: &[u8], input: &Payload) -> anyhow::Result<()> {
        let builder = crate::args::host::builder(Some(1), None, &self.cache, None)?
            .limits(wfhost::Limits::default().max_payload_bytes(self.max_payload));
        let host = crate::args::host::build(builder).context("cannot check the input")?;
        let checked = host
            .load_module_bytes(name, bytes)
            .and_then(|_| host.check_input(name, &self.entry, input));
        host.shutdown(Duration::from_secs(1));
        checked.map_err(|e| anyhow::Error::new(e).context("nothing started"))
    }
}

/// A refused start, in words.
fn refused(error: wfhost::Error) -> anyhow::Error {
    match error.kind() {
        wfhost::ErrorKind::Conflict => anyhow::Error::new(error).context("nothing started"),
        _ => error.into(),
    }
}

/// Says what a start did, and prints the workflow's id.
fn said(started: wfhost::Started) -> anyhow::Result<()> {
    let id = started.id;
    if started.new {
        eprintln!("started {id}");
    } else {
        eprintln!("{id} exists already, started the same way: nothing started");
    }
    outln!("{id}")?;
    Ok(())
}
