//! [`Client`]: everything that is not running workflows. It starts workflows for hosts to run,
//! reads where they stand, messages and cancels them, lists a store's workflows and reads their
//! histories, page by page.
//!
//! A client runs no host: on a store hosts share (PostgreSQL) a start is a row that one of the
//! `wfhost serve` hosts claims, and a message or a cancel is taken by the host that runs the
//! workflow. On a SQLite file, whose one host takes work only from its own application, a
//! client reads beside that host.

mod types;

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wfcontract::Payload;

pub use types::{
    Cancelled, Failure, HistoryStep, ListQuery, Page, Started, WorkflowState, WorkflowStatus,
    DEFAULT_PAGE, MAX_PAGE,
};

use crate::durable::now_millis;
use crate::durable::record::StepRecord;
use crate::durable::store::{
    ClientStore, Filter, Location, NewWorkflow, Read, SqliteStore, State, StoreError, Submit,
    Workflow,
};
use crate::error::{Error, ErrorKind, Result};
use crate::wasm::ModuleInfo;

/// A client of a store: a SQLite file or a PostgreSQL database (see [`Location`]).
///
/// Every operation takes `&self`, from any thread; the store's connection is made at the first
/// and made again after a failure.
pub struct Client {
    location: Location,
    store: Mutex<Option<ClientStore>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the store at `location` (a path, a URL, or a [`Location`]). Nothing is
    /// opened until the first operation, which says if the store cannot be reached.
    pub fn open(location: impl Into<Location>) -> Client {
        Client {
            location: location.into(),
            store: Mutex::new(None),
        }
    }

    /// Where the store is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Starts entry point `entry` of `module` (a module's bytes; the store keeps them by hash)
    /// with `input`, as workflow `id` (`None`: a new id), for a host of the store to claim and
    /// run.
    ///
    /// Idempotent: an id that exists with the same module, entry point and input starts nothing
    /// ([`Started::new`] is false); with another, it is an [`ErrorKind::Conflict`] error naming
    /// what differs. The input is not run here: a tool that wants it checked against the entry
    /// point first does so with a host ([`Host::check_input`](crate::Host::check_input)).
    ///
    /// Only a store hosts share takes starts from clients: on a SQLite file this is an
    /// [`ErrorKind::Config`] error that says how to run the workflow instead.
    pub fn start(
        &self,
        id: Option<&str>,
        module: &[u8],
        module_name: &str,
        entry: &str,
        input: &Payload,
    ) -> Result<Started> {
        let id = id.map_or_else(new_id, str::to_string);
        if let Some(why) = crate::durable::bad_id(&id) {
            return Err(Error::new(ErrorKind::InvalidInput, why));
        }
        let info = ModuleInfo::inspect(module)?;
        if !info.has_entry(entry) {
            return Err(info.unknown_entry(entry));
        }
        let encoded = postcard::to_allocvec(input)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the input: {e}")))?;
        let workflow = NewWorkflow {
            num: 0,
            id: id.clone(),
            parent: None,
            module: info.sha256.clone(),
            module_name: module_name.to_string(),
            entry: entry.to_string(),
            input: encoded.clone(),
            started: now_millis(),
        };
        let started = self.submit(true, |store| {
            store.submit_start((&info.sha256, module), &workflow)
        })?;
        if started.is_none() {
            let stored = self.find(&id)?;
            stored.start.may_follow(&info.sha256, entry, &encoded)?;
        }
        Ok(Started {
            id,
            new: started.is_some(),
        })
    }

    /// Where workflow `id` stands.
    pub fn status(&self, id: &str) -> Result<WorkflowStatus> {
        let workflow = self.find(id)?;
        let (host, waiting) = self.host_of(&workflow)?;
        let mut status = WorkflowStatus::of(workflow);
        status.host = host;
        status.waiting_for_host = waiting;
        Ok(status)
    }

    /// Where workflow `id` stands once it has finished, waiting up to `wait` for that (`None`:
    /// not at all). Still running at the deadline: its status as it is (see
    /// [`WorkflowStatus::is_finished`]). A damaged workflow goes no further until the store is
    /// repaired: an [`ErrorKind::Damaged`] error says so at once.
    pub fn result(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowStatus> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(20);
        loop {
            let status = self.status(id)?;
            if status.is_finished() {
                return Ok(status);
            }
            if let Some(why) = &status.damaged {
                return Err(Error::new(
                    ErrorKind::Damaged,
                    format!(
                        "workflow '{id}' is damaged and goes no further until the store is \
                         repaired (or the build fixed) and a host resumes it: {why}"
                    ),
                ));
            }
            let left = wait.map_or(Duration::ZERO, |w| w.saturating_sub(started.elapsed()));
            if left.is_zero() {
                return Ok(status);
            }
            std::thread::sleep(delay.min(left));
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    /// Sends `message` to the unfinished workflow `id`, for the host that runs it to deliver:
    /// the message's number. An id that is not running is an [`ErrorKind::UnknownWorkflow`]
    /// error.
    pub fn send(&self, id: &str, message: &Payload) -> Result<u64> {
        let payload = postcard::to_allocvec(message)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the message: {e}")))?;
        match self.submit(false, |store| store.submit_message(id, &payload))? {
            Some(number) => Ok(number),
            None => Err(Error::new(
                ErrorKind::UnknownWorkflow,
                format!(
                    "no running workflow '{id}' in {} (`wfhost status {id}` says where it \
                     stands)",
                    self.location
                ),
            )),
        }
    }

    /// Asks workflow `id` to cancel; the host that runs it delivers the cancel, and the
    /// workflow decides what to do (it may clean up first).
    pub fn cancel(&self, id: &str) -> Result<Cancelled> {
        if self.submit(false, |store| store.submit_cancel(id))? {
            return Ok(Cancelled::Asked);
        }
        let status = WorkflowStatus::of(self.find(id)?);
        Ok(match status.state {
            WorkflowState::Running => Cancelled::AskedBefore,
            state => Cancelled::Ended(state),
        })
    }

    /// A page of the store's workflows that `query` lets through, oldest first, and the cursor
    /// of the next page. A page is read with the index on workflow numbers from the cursor on,
    /// never the whole table at once (a filter that matches few reads on until it has a page).
    pub fn list(&self, query: &ListQuery) -> Result<Page<WorkflowStatus>> {
        if query.limit == 0 || query.limit > MAX_PAGE {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "a page holds 1 to {MAX_PAGE} workflows, not {}",
                    query.limit
                ),
            ));
        }
        let after = match &query.after {
            Some(cursor) => parse_cursor(cursor)?,
            None => 0,
        };
        let filter = Filter {
            state: query.state.map(|s| match s {
                WorkflowState::Running => State::Running,
                WorkflowState::Completed => State::Done,
                WorkflowState::Failed | WorkflowState::Cancelled => State::Failed,
            }),
            cancelled: match query.state {
                Some(WorkflowState::Cancelled) => Some(true),
                Some(WorkflowState::Failed) => Some(false),
                _ => None,
            },
            entry: query.entry.clone(),
            prefix: query.prefix.clone(),
            started_before: query.started_before,
            started_after: query.started_after,
            top_level: query.top_level,
        };
        // One more than asked: whether there is a next page.
        let mut rows = self.read(|store| store.page(&filter, after, query.limit + 1))?;
        let next = (rows.len() > query.limit).then(|| {
            rows.truncate(query.limit);
            cursor(rows.last().map_or(after, |w| w.start.num))
        });
        Ok(Page {
            items: rows.into_iter().map(WorkflowStatus::of).collect(),
            next,
        })
    }

    /// Up to `limit` steps of workflow `id`'s journal after step `after` (0: from the first),
    /// and the cursor of the next page. A step that cannot be decoded is an
    /// [`ErrorKind::Damaged`] error naming it.
    pub fn history(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<HistoryStep>> {
        let workflow = self.find(id)?;
        let after = match after {
            Some(cursor) => parse_cursor(cursor)?,
            None => 0,
        };
        let limit = limit.clamp(1, MAX_PAGE);
        let mut steps =
            self.read(|store| store.step_page(workflow.start.num, after, Some(limit + 1)))?;
        let next = (steps.len() > limit).then(|| {
            steps.truncate(limit);
            cursor(steps.last().map_or(after, |s| s.seq))
        });
        let mut items = Vec::with_capacity(steps.len());
        for step in steps {
            let record = StepRecord::decode(&step.record).map_err(|e| {
                Error::new(
                    ErrorKind::Damaged,
                    format!(
                        "step {} of the journal of '{id}' does not decode ({e}): the store is \
                         damaged there (`wfhost status {id}` says more)",
                        step.seq
                    ),
                )
            })?;
            items.push(HistoryStep::of(step.seq, step.at, record));
        }
        Ok(Page { items, next })
    }

    /// The id of the workflow numbered `number`, if the store has it (a history names other
    /// workflows by number).
    pub fn id_of(&self, number: u64) -> Result<Option<String>> {
        Ok(self
            .read(|store| store.workflow_by_num(number))?
            .map(|w| w.start.id))
    }

    /// The bytes of the module with SHA-256 `hash` (hex), as the store keeps them.
    pub fn module(&self, hash: &str) -> Result<Option<Vec<u8>>> {
        self.read(|store| store.module(hash))
    }

    /// Workflow `id`, or an [`ErrorKind::UnknownWorkflow`] error that says how to list them.
    fn find(&self, id: &str) -> Result<Workflow> {
        self.read(|store| store.workflow(id))?.ok_or_else(|| {
            Error::new(
                ErrorKind::UnknownWorkflow,
                format!(
                    "no workflow '{id}' in {0} (`wfhost list --store {0}` shows them)",
                    self.location
                ),
            )
        })
    }

    /// Who runs `workflow`, in words, and whether it waits for a host: on a SQLite file, the
    /// host that holds the file; on a shared store, the host that owns it, and whether its
    /// lease holds.
    fn host_of(&self, workflow: &Workflow) -> Result<(Option<String>, bool)> {
        if workflow.state != State::Running {
            return Ok((None, false));
        }
        if let Some(path) = self.location.path() {
            return Ok(match SqliteStore::holder(path) {
                Some(holder) => (Some(format!("{holder} (holds the store)")), false),
                None => (None, true),
            });
        }
        let Some(owner) = workflow.owner else {
            return Ok((None, true));
        };
        let info = self.submit(false, |store| store.host_info(owner))?;
        Ok(match info {
            Some(info) if info.alive => (Some(format!("{} ({})", info.id, info.name)), false),
            Some(info) => (
                Some(format!("{} ({}), whose lease ran out", info.id, info.name)),
                true,
            ),
            None => (Some(format!("{owner}")), true),
        })
    }

    /// Runs `read` on the store, opened if need be (it must exist).
    fn read<T>(
        &self,
        read: impl FnOnce(&mut dyn Read) -> std::result::Result<T, StoreError>,
    ) -> Result<T> {
        let mut store = self.store.lock();
        if store.is_none() {
            *store = Some(self.location.open_client(false).map_err(store_error)?);
        }
        let result = match store.as_mut().expect("opened above") {
            ClientStore::Own(own) => read(own.as_mut()),
            ClientStore::Shared(shared) => read(shared.as_mut()),
        };
        result.map_err(|e| {
            *store = None;
            store_error(e)
        })
    }

    /// Whether the store takes work from clients (starts, messages, cancels): a store hosts
    /// share does (it is reached, and its tables are made if need be); a SQLite file, one
    /// host's own, does not, and the error says what to do instead ([`ErrorKind::Config`]).
    pub fn takes_work(&self) -> Result<()> {
        self.refuse_own()?;
        self.submit(true, |_| Ok(()))
    }

    /// An error for a store of one host's own, which takes no client work.
    fn refuse_own(&self) -> Result<()> {
        match self.location.path() {
            Some(_) => Err(self.own_store()),
            None => Ok(()),
        }
    }

    /// What a client's write to a store of one host's own (a SQLite file) is told.
    fn own_store(&self) -> Error {
        let held = self
            .location
            .path()
            .and_then(SqliteStore::holder)
            .map(|holder| format!(" (it is held by {holder})"))
            .unwrap_or_default();
        Error::new(
            ErrorKind::Config,
            format!(
                "{} is one host's own store, a SQLite file{held}: run workflows with `wfhost run \
                 --store` or a host of your own (Host::start, Host::send, Host::cancel); client \
                 commands need a store hosts share (PostgreSQL)",
                self.location
            ),
        )
    }

    /// Runs `write` on a store hosts share, opened if need be (with `create`, its tables are
    /// made if it has none: a start; without, they must be there: a message or a cancel, which
    /// has nothing to reach in an empty database); on a store of one host's own, an error that
    /// says what to do instead.
    fn submit<T>(
        &self,
        create: bool,
        write: impl FnOnce(&mut dyn Submit) -> std::result::Result<T, StoreError>,
    ) -> Result<T> {
        self.refuse_own()?;
        let mut store = self.store.lock();
        if !matches!(*store, Some(ClientStore::Shared(_))) {
            *store = Some(self.location.open_client(create).map_err(store_error)?);
        }
        let Some(ClientStore::Shared(shared)) = store.as_mut() else {
            return Err(self.own_store());
        };
        write(shared.as_mut()).map_err(|e| {
            *store = None;
            store_error(e)
        })
    }
}

/// An error of the store, as a client's error.
fn store_error(error: StoreError) -> Error {
    crate::durable::store_error(error)
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
fn cursor(position: u64) -> String {
    format!("c{position:x}")
}

/// The position a cursor stands for.
fn parse_cursor(cursor: &str) -> Result<u64> {
    cursor
        .strip_prefix('c')
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
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
