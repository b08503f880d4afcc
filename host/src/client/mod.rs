//! [`Client`]: everything that is not running workflows. It stores modules, starts workflows
//! for hosts to run, reads where they stand, messages and cancels them, lists a store's
//! workflows and reads their histories and their messages to the host, page by page.
//!
//! One `Client`, three ways to reach the workflows, with the same answers:
//!
//! | Opened with | It reaches | Used by |
//! |---|---|---|
//! | [`Client::open`] on a store | the store itself: a PostgreSQL database hosts share (read, and written for them), or a SQLite file (read beside its one host) | the CLI's client commands with `--store` |
//! | [`Client::open`] on `http://` or `https://` | a `wfhost serve --http` server, over its API | the CLI with `--server`, applications |
//! | [`Client::serving`] a host | the host itself (a start runs in it, a message reaches it at once) and its store | the HTTP API's handlers, embedders |

mod backend;
mod builtin_words;
mod names;
mod narrator;
mod prune;
mod remote;
mod schedules;
mod serving;
mod store;
mod types;
mod waits;

use std::sync::Arc;
use std::time::Duration;

use wfcontract::Payload;

pub use names::{bad_module_name, bad_module_reference};
pub use narrator::{utc_time, Narrator};
pub use schedules::SCHEDULES_LOOK_EVERY;
pub use types::{
    Cancelled, Failure, Fired, HistoryStep, HostStatus, ListQuery, ModuleVersion, OpenYield,
    OutboxMessage, OutboxPage, Page, PauseChange, PruneQuery, Pruned, Started, StoredModule, Waits,
    WorkflowCounts, WorkflowState, WorkflowStatus, DEFAULT_PAGE, MAX_PAGE,
};

use crate::durable::store::Location;
use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::host::Host;
use backend::Backend;
use remote::RemoteBackend;
use serving::ServingBackend;
use store::StoreBackend;

/// The store backend, for the durable layer's writes that clients make on a shared store.
pub(crate) type StoreClient = StoreBackend;

/// A client of workflows: of a store, of a `wfhost serve --http` server, or of a host this
/// program runs (see the module's table). Cheap to clone: clones share connections.
///
/// Every operation takes `&self`, from any thread, and blocks until it has its answer; a
/// connection is made at the first and made again after a failure.
#[derive(Clone)]
pub struct Client {
    backend: Arc<dyn Backend>,
    /// The span its starts' runs are children of ([`traced`](Self::traced)).
    trace: Option<Arc<str>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("location", self.location())
            .finish_non_exhaustive()
    }
}

/// Which module a start runs: its bytes, or the hash of bytes the store keeps.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ModuleRef<'a> {
    Bytes(&'a [u8]),
    Hash(&'a str),
    /// A hash, `name` or `name@version` (`names.rs`).
    Named(&'a str),
}

/// A start, as every backend takes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Start<'a> {
    pub(crate) id: Option<&'a str>,
    pub(crate) module: ModuleRef<'a>,
    pub(crate) module_name: Option<&'a str>,
    pub(crate) entry: &'a str,
    pub(crate) input: &'a Payload,
    /// The span the workflow's runs are children of (a W3C `traceparent`), if any.
    pub(crate) trace: Option<&'a str>,
}

impl Client {
    /// A client of `location`: a store (a SQLite file's path, a `postgres://` URL), or the HTTP
    /// API of a `wfhost serve --http` server (an `http://` or `https://` URL; give its token
    /// with [`with_token`](Self::with_token)). Nothing is opened until the first operation,
    /// which says if it cannot be reached.
    pub fn open(location: impl Into<Location>) -> Client {
        let location = location.into();
        let backend: Arc<dyn Backend> = match &location {
            Location::Server(url) => Arc::new(RemoteBackend::new(location.clone(), url)),
            _ => Arc::new(StoreBackend::new(location)),
        };
        Client {
            backend,
            trace: None,
        }
    }

    /// A client of `host`, which runs beside it in this program (the HTTP API's handlers are
    /// one): a start runs in `host`, a message or a cancel of a workflow it runs reaches it at
    /// once, a wait for a result takes no thread, and everything else is read from its store.
    /// The workflows of modules the host has not loaded (a module stored by hash, say) run with
    /// `grants`. The host must have a store ([`HostBuilder::store`](crate::HostBuilder::store)).
    pub fn serving(host: &Host, grants: Grants) -> Result<Client> {
        Ok(Client {
            backend: Arc::new(ServingBackend::new(host, grants)?),
            trace: None,
        })
    }

    /// The same client, sending `token` to a server as `Authorization: Bearer` (the server's
    /// `--token-file`). Only a client of a server sends it; others ignore it.
    pub fn with_token(self, token: &str) -> Client {
        match self.backend.with_token(token) {
            Some(backend) => Client {
                backend,
                trace: self.trace.clone(),
            },
            None => self,
        }
    }

    /// The same client, its starts traced as children of the span `traceparent` names (W3C
    /// Trace Context: `00-<trace id>-<span id>-<flags>`; one that is not is ignored, as the
    /// standard says): the workflows' runs are that span's children, in its trace, and a client
    /// of a server sends it as the request's `traceparent`. The HTTP API's handlers give their
    /// request's span.
    pub fn traced(self, traceparent: &str) -> Client {
        // Kept as version 00 writes it: a later version's extra fields go.
        let trace = crate::trace::parse_traceparent(traceparent)
            .map(|span| Arc::from(crate::trace::traceparent(&span)));
        Client { trace, ..self }
    }

    /// The same client of a server, trusting the certificates in `pem` for `https://` (a
    /// server whose certificate no public authority signed).
    pub fn with_root_certificates(self, pem: &[u8]) -> Result<Client> {
        Ok(match self.backend.with_root_certificates(pem)? {
            Some(backend) => Client {
                backend,
                trace: self.trace.clone(),
            },
            None => self,
        })
    }

    /// Where the workflows are: the store, or the server.
    pub fn location(&self) -> &Location {
        self.backend.location()
    }

    /// Stores a module's bytes in the store, by their SHA-256, for starts that name it
    /// ([`start_stored`](Self::start_stored)). A module that does not inspect (not wasm, no
    /// manifest, another ABI) is an [`ErrorKind::BadModule`] error saying why; one the store
    /// has already is left as it is ([`StoredModule::new`] is false).
    pub fn put_module(&self, wasm: &[u8]) -> Result<StoredModule> {
        self.backend.put_module(wasm, None)
    }

    /// As [`put_module`](Self::put_module), under name `name`: the module takes the name's
    /// next version, unless it is the name's latest already ([`StoredModule::names`] says
    /// which). A start names it `name` (its latest version) or `name@version`
    /// ([`start_named`](Self::start_named)), and its workflows show the name. A name that is
    /// not one is an [`ErrorKind::InvalidInput`] error ([`bad_module_name`]).
    pub fn put_module_named(&self, wasm: &[u8], name: &str) -> Result<StoredModule> {
        if let Some(why) = bad_module_name(name) {
            return Err(Error::new(ErrorKind::InvalidInput, why));
        }
        self.backend.put_module(wasm, Some(name))
    }

    /// The modules the store keeps, by hash, with their entry points.
    pub fn modules(&self) -> Result<Vec<StoredModule>> {
        self.backend.modules()
    }

    /// Starts entry point `entry` of `module` (a module's bytes; the store keeps them by hash)
    /// with `input`, as workflow `id` (`None`: a new id), under `module_name` (the name `wfhost
    /// list` shows).
    ///
    /// Idempotent: an id that exists with the same module, entry point and input starts nothing
    /// ([`Started::new`] is false); with another, it is an [`ErrorKind::Conflict`] error naming
    /// what differs.
    ///
    /// On a store hosts share, the start waits for a host to claim it (its input is not run
    /// here: a tool that wants it checked first does so with a host,
    /// [`Host::check_input`](crate::Host::check_input)); on a SQLite file, which takes work only
    /// from its one host, this is an [`ErrorKind::Config`] error that says what to do instead.
    /// Through a server or a serving host, the start runs in that host, its input checked
    /// before anything is written.
    pub fn start(
        &self,
        id: Option<&str>,
        module: &[u8],
        module_name: &str,
        entry: &str,
        input: &Payload,
    ) -> Result<Started> {
        self.backend.start(&Start {
            id,
            module: ModuleRef::Bytes(module),
            module_name: Some(module_name),
            entry,
            input,
            trace: self.trace.as_deref(),
        })
    }

    /// As [`start`](Self::start), with a module the store keeps, named by its SHA-256 in hex
    /// ([`put_module`](Self::put_module)): an [`ErrorKind::UnknownModule`] error if it keeps
    /// none by that hash.
    pub fn start_stored(
        &self,
        id: Option<&str>,
        hash: &str,
        entry: &str,
        input: &Payload,
    ) -> Result<Started> {
        self.backend.start(&Start {
            id,
            module: ModuleRef::Hash(hash),
            module_name: None,
            entry,
            input,
            trace: self.trace.as_deref(),
        })
    }

    /// As [`start_stored`](Self::start_stored), with the module named `module`: its SHA-256,
    /// a name it was uploaded under ([`put_module_named`](Self::put_module_named): the name's
    /// latest version), or `name@version`. Started by name, the workflow shows the name.
    pub fn start_named(
        &self,
        id: Option<&str>,
        module: &str,
        entry: &str,
        input: &Payload,
    ) -> Result<Started> {
        names::Reference::parse(module)?;
        self.backend.start(&Start {
            id,
            module: ModuleRef::Named(module),
            module_name: None,
            entry,
            input,
            trace: self.trace.as_deref(),
        })
    }

    /// Where workflow `id` stands.
    pub fn status(&self, id: &str) -> Result<WorkflowStatus> {
        self.backend.status(id)
    }

    /// Where workflow `id` stands once it has finished, waiting up to `wait` for that (`None`:
    /// not at all). Still running at the deadline: its status as it is (see
    /// [`WorkflowStatus::is_finished`]). A damaged workflow goes no further until the store is
    /// repaired: an [`ErrorKind::Damaged`] error says so at once.
    pub fn result(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowStatus> {
        self.backend.result(id, wait)
    }

    /// As [`result`](Self::result), for async code: a client serving a host waits without a
    /// thread (the host's journal says when the workflow ends); the others wait on a thread
    /// of tokio's blocking pool. Must be called within a tokio runtime.
    pub async fn result_async(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowStatus> {
        if let Some(waiting) = Arc::clone(&self.backend).result_async(id.to_string(), wait) {
            return waiting.await;
        }
        let client = self.clone();
        let id = id.to_string();
        blocking(move || client.result(&id, wait)).await
    }

    /// Sends `message` to the unfinished workflow `id`: the message's number. The host that
    /// runs it delivers it; an id that is not running is an [`ErrorKind::UnknownWorkflow`]
    /// error.
    pub fn send(&self, id: &str, message: &Payload) -> Result<u64> {
        self.backend.send(id, message)
    }

    /// Asks workflow `id` to cancel; the host that runs it delivers the cancel, and the
    /// workflow decides what to do (it may clean up first).
    pub fn cancel(&self, id: &str) -> Result<Cancelled> {
        self.backend.cancel(id)
    }

    /// Pauses workflow `id`: it takes no step until [`unpause`](Self::unpause)d. What reaches it
    /// meanwhile (messages, timers that fire, answers, a cancel) waits, and it keeps its pause
    /// across restarts of its host. A step under way when the pause is written ends as usual.
    pub fn pause(&self, id: &str) -> Result<PauseChange> {
        self.backend.pause(id, true)
    }

    /// Unpauses workflow `id`: it takes what waited for it, and goes on where it was.
    pub fn unpause(&self, id: &str) -> Result<PauseChange> {
        self.backend.pause(id, false)
    }

    /// Gives the running workflow `id` new code, the module `wasm`, if its journal replays the
    /// same with it (see [`Host::upgrade`](crate::Host::upgrade)); otherwise nothing changes and
    /// the error ([`ErrorKind::Conflict`]) names the step and what differs. It needs a host: a
    /// client of a serving host or of a server.
    pub fn upgrade(&self, id: &str, wasm: &[u8]) -> Result<crate::Upgraded> {
        self.backend.upgrade(id, wasm)
    }

    /// As [`upgrade`](Self::upgrade), to a module the store keeps, by its SHA-256.
    pub fn upgrade_stored(&self, id: &str, module: &str) -> Result<crate::Upgraded> {
        self.backend.upgrade_stored(id, module)
    }

    /// Resets the finished top-level workflow `id`: a new run of it keeps its journal up to
    /// step `to_step` (`None`: up to the step before the one that ended it) and goes on from
    /// there under the same id, with `wasm` in place of its module if given (it must replay the
    /// steps kept). The run before is kept as `<id>/run-<n>`. See
    /// [`Host::reset`](crate::Host::reset) for what is done again and what is refused. It needs
    /// a host: a client of a serving host or of a server.
    pub fn reset(
        &self,
        id: &str,
        to_step: Option<u64>,
        wasm: Option<&[u8]>,
    ) -> Result<crate::WorkflowReset> {
        self.backend.reset(id, to_step, wasm.map(ModuleRef::Bytes))
    }

    /// As [`reset`](Self::reset), with a module the store keeps, by its SHA-256, if any.
    pub fn reset_stored(
        &self,
        id: &str,
        to_step: Option<u64>,
        module: Option<&str>,
    ) -> Result<crate::WorkflowReset> {
        self.backend.reset(id, to_step, module.map(ModuleRef::Hash))
    }

    /// The runs of workflow `id`, first to last: those a reset ended (`<id>/run-1`, ...), and
    /// the one the id names now.
    pub fn runs(&self, id: &str) -> Result<Vec<WorkflowStatus>> {
        let current = self.status(id)?;
        let mut runs = Vec::with_capacity(current.run as usize);
        for run in 1..current.run {
            match self.status(&crate::ids::run_id(id, run)) {
                Ok(status) => runs.push(status),
                // Pruned since: the runs left are shown.
                Err(error) if error.kind() == ErrorKind::UnknownWorkflow => {}
                Err(error) => return Err(error),
            }
        }
        runs.push(current);
        Ok(runs)
    }

    /// A page of the store's workflows that `query` lets through, oldest first, and the cursor
    /// of the next page. A page is read with the index on workflow numbers from the cursor on,
    /// never the whole table at once (a filter that matches few reads on until it has a page).
    pub fn list(&self, query: &ListQuery) -> Result<Page<WorkflowStatus>> {
        self.backend.list(query)
    }

    /// How many of the store's workflows that `query` lets through stand each way (its state,
    /// page size and cursor aside): what a listing's counts by status show.
    pub fn counts(&self, query: &ListQuery) -> Result<WorkflowCounts> {
        self.backend.counts(query)
    }

    /// Up to `limit` steps of workflow `id`'s journal after the cursor `after` (none: from the
    /// first), and the cursor of the next page. A step that cannot be decoded is an
    /// [`ErrorKind::Damaged`] error naming it.
    pub fn history(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<HistoryStep>> {
        self.backend.history(id, after, limit)
    }

    /// Up to `limit` messages (1 to 10,000) workflow `id` sent the host after the cursor
    /// `after` (none: from the first), in order; with `wait`, waits up to that long for one
    /// when none is there yet and the workflow runs.
    pub fn outbox(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Result<OutboxPage> {
        self.backend.outbox(id, after, limit, wait)
    }

    /// As [`outbox`](Self::outbox), for async code (see [`result_async`](Self::result_async)).
    pub async fn outbox_async(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Result<OutboxPage> {
        let waiting = Arc::clone(&self.backend).outbox_async(
            id.to_string(),
            after.map(str::to_string),
            limit,
            wait,
        );
        if let Some(waiting) = waiting {
            return waiting.await;
        }
        let client = self.clone();
        let (id, after) = (id.to_string(), after.map(str::to_string));
        blocking(move || client.outbox(&id, after.as_deref(), limit, wait)).await
    }

    /// The hosts of the store: on a store hosts share, those alive or owning unfinished
    /// workflows, with their leases; on a SQLite file, the one that holds it, if one does.
    pub fn hosts(&self) -> Result<Vec<HostStatus>> {
        self.backend.hosts()
    }

    /// Whether the workflows can be reached: the store answers (and a serving host's store
    /// takes its writes and its lease holds), or the server says it is ready.
    pub fn ready(&self) -> Result<()> {
        self.backend.ready()
    }

    /// The id of the workflow numbered `number`, if the store has it (a history names other
    /// workflows by number).
    pub fn id_of(&self, number: u64) -> Result<Option<String>> {
        self.backend.id_of(number)
    }

    /// The bytes of the module with SHA-256 `hash` (hex), as the store keeps them.
    pub fn module(&self, hash: &str) -> Result<Option<Vec<u8>>> {
        self.backend.module(hash)
    }

    /// Whether the store takes work from clients (starts, messages, cancels): a store hosts
    /// share does (it is reached, and its tables are made if need be), and so do a server and
    /// a serving host; a SQLite file, one host's own, does not, and the error says what to do
    /// instead ([`ErrorKind::Config`]).
    pub fn takes_work(&self) -> Result<()> {
        self.backend.takes_work()
    }
}

/// Runs `work` on tokio's blocking pool (a store's connection blocks its thread).
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("the request's thread did not finish: {e}"),
        ))
    })
}

/// Reads the outbox until it has a message, the workflow ends or `wait` passes.
pub(super) fn poll_outbox(
    read: impl Fn() -> Result<OutboxPage>,
    wait: Option<Duration>,
) -> Result<OutboxPage> {
    let started = std::time::Instant::now();
    let mut delay = Duration::from_millis(20);
    loop {
        let page = read()?;
        let left = wait.map_or(Duration::ZERO, |w| w.saturating_sub(started.elapsed()));
        if !page.messages.is_empty() || page.finished || left.is_zero() {
            return Ok(page);
        }
        std::thread::sleep(delay.min(left));
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

/// A new workflow id: "wf-" and 16 random hex digits.
pub fn new_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = crate::durable::now_nanos().to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("wf-{hex}")
}

/// The cursor of a page that ends at `position`.
pub(crate) fn cursor(position: u64) -> String {
    format!("c{position:x}")
}

/// The position a cursor stands for.
pub(crate) fn parse_cursor(cursor: &str) -> Result<u64> {
    cursor
        .strip_prefix('c')
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        // Positions are what a store can number: a larger one was never given.
        .filter(|&position| position <= i64::MAX as u64)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "'{cursor}' is not a cursor: give the `next` of the page before, as it was \
                     printed"
                ),
            )
        })
}

/// Why a client of a store alone cannot upgrade a workflow.
pub(super) fn needs_host() -> Error {
    Error::new(
        ErrorKind::Config,
        "an upgrade or a reset replays the workflow's journal, which takes a host: ask the \
         server that runs the store (`--server URL`), or a host of this program's own over the \
         store",
    )
}
