//! A client that reads and writes a store itself: a SQLite file (read beside its one host) or
//! a PostgreSQL database hosts share (read, and written for them to run).

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wfcontract::Payload;

use super::backend::Backend;
use super::schedules::Direct;
use super::types::{
    Cancelled, HistoryStep, HostStatus, ListQuery, OutboxMessage, OutboxPage, Page, PauseChange,
    PruneQuery, Pruned, Started, StoredModule, Waits, WorkflowCounts, WorkflowState,
    WorkflowStatus, MAX_PAGE,
};
use super::{cursor, needs_host, new_id, parse_cursor, poll_outbox, ModuleRef, Start};
use crate::durable::now_millis;
use crate::durable::record::StepRecord;
use crate::durable::store::{
    ClientStore, Filter, Held, Location, NewWorkflow, Op, Open as _, Read, SqliteStore, State,
    StoreError, Submit, SyncMode, Workflow,
};
use crate::error::{Error, ErrorKind, Result};
use crate::wasm::ModuleInfo;
use crate::Upgraded;

/// Connections kept for the next call: as many as the calls a server runs at once
/// (`wfhost-server`'s `Api::max_store_calls`).
const KEPT_CONNECTIONS: usize = 16;

/// The most bytes of inputs and results one page of workflows holds: a page stops before the
/// workflow that would take it past this (it holds at least one).
const PAGE_BYTES: u64 = 64 << 20;

/// The most messages one page of the outbox holds.
pub(crate) const MAX_OUTBOX_PAGE: usize = 10_000;

/// The most bytes of records one page of a history holds (it holds at least one step).
const HISTORY_BYTES: u64 = 16 << 20;

/// The most bytes of messages one page of the outbox holds (it holds at least one).
const OUTBOX_BYTES: u64 = 32 << 20;

/// How many of the leading `sizes` fit in `budget` bytes: at least one, if there is one.
fn within(sizes: &[u64], budget: u64) -> usize {
    let mut total = 0u64;
    let mut fit = 0;
    for &size in sizes {
        total = total.saturating_add(size);
        if fit > 0 && total > budget {
            break;
        }
        fit += 1;
    }
    fit
}

/// A client of the store at a location.
pub(crate) struct StoreBackend {
    pub(crate) location: Location,
    /// Connections not in use; a call takes one (or opens one) and puts it back.
    idle: Mutex<Vec<ClientStore>>,
    /// The modules read back so far, by hash (a hash's bytes never change).
    inspected: Mutex<std::collections::HashMap<String, StoredModule>>,
    /// Reading for a host this program serves: errors name neither the store nor the CLI.
    pub(crate) serving: bool,
}

/// What a store reads for `query`: a page of at most [`PAGE_BYTES`] of inputs and results.
fn filter_of(query: &ListQuery) -> Filter {
    Filter {
        state: query.state.map(|s| match s {
            WorkflowState::Running | WorkflowState::Paused | WorkflowState::Damaged => {
                State::Running
            }
            WorkflowState::Completed => State::Done,
            WorkflowState::Failed | WorkflowState::Cancelled => State::Failed,
        }),
        cancelled: match query.state {
            Some(WorkflowState::Cancelled) => Some(true),
            Some(WorkflowState::Failed) => Some(false),
            _ => None,
        },
        held: match query.state {
            Some(WorkflowState::Running) => Some(Held::No),
            Some(WorkflowState::Paused) => Some(Held::Paused),
            Some(WorkflowState::Damaged) => Some(Held::Damaged),
            _ => None,
        },
        entry: query.entry.clone(),
        // Every id starts with the empty prefix: no filter.
        prefix: query.prefix.clone().filter(|p| !p.is_empty()),
        // Beyond what a store holds, as good as for ever.
        started_before: query.started_before.map(|t| t.min(i64::MAX as u64)),
        started_after: query.started_after.map(|t| t.min(i64::MAX as u64)),
        top_level: query.top_level,
        // Beyond what a store numbers: no workflow's children.
        parent: query.parent.map(|p| p.min(i64::MAX as u64)),
        max_bytes: Some(PAGE_BYTES),
    }
}

impl StoreBackend {
    pub(crate) fn new(location: Location) -> StoreBackend {
        StoreBackend {
            location,
            idle: Mutex::new(Vec::new()),
            inspected: Mutex::new(std::collections::HashMap::new()),
            serving: false,
        }
    }

    /// Up to `limit` messages workflow `id` sent the host after the cursor (no waiting).
    pub(crate) fn outbox_page(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<OutboxPage> {
        let workflow = self.find(id)?;
        let after = match after {
            Some(cursor) => parse_cursor(cursor)?,
            None => 0,
        };
        let limit = limit.clamp(1, MAX_OUTBOX_PAGE);
        let ended = workflow.state != State::Running;
        let num = workflow.start.num;
        // As many messages as fit the byte budget (at least one), and whether more follow.
        let sizes = self.read(|store| store.host_message_sizes(num, after, limit + 1))?;
        let fit = within(&sizes[..sizes.len().min(limit)], OUTBOX_BYTES);
        let rows = if fit == 0 {
            Vec::new()
        } else {
            self.read(|store| store.host_messages(num, after, fit))?
        };
        // Nothing follows what an ended workflow's last page holds.
        let finished = ended && sizes.len() <= fit;
        let last = rows.last().map_or(after, |m| m.tag);
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            let data = postcard::from_bytes(&row.payload).map_err(|e| {
                Error::new(
                    ErrorKind::Damaged,
                    format!(
                        "message {} of '{id}' to the host does not decode ({e}): the store is \
                         damaged there",
                        row.tag
                    ),
                )
            })?;
            messages.push(OutboxMessage {
                tag: row.tag,
                at: row.at,
                data,
            });
        }
        Ok(OutboxPage {
            number: workflow.start.num,
            messages,
            next: cursor(last),
            finished,
        })
    }

    /// How many workflows are unfinished.
    pub(crate) fn count_running(&self) -> Result<u64> {
        self.read(|store| store.count_running())
    }

    /// Whether the store keeps the module with SHA-256 `hash`.
    pub(crate) fn has_module(&self, hash: &str) -> Result<bool> {
        self.read(|store| store.has_module(hash))
    }

    /// Those of the workflows numbered `nums` that have finished.
    pub(crate) fn finished_among(&self, nums: &[u64]) -> Result<Vec<u64>> {
        self.read(|store| store.finished_among(nums))
    }

    /// Workflow `id`, or an [`ErrorKind::UnknownWorkflow`] error that says how to list them.
    pub(crate) fn find(&self, id: &str) -> Result<Workflow> {
        self.read(|store| store.workflow(id))?.ok_or_else(|| {
            let message = if self.serving {
                format!("no workflow '{id}' (a list of them: GET /v1/workflows, `wfhost list`)")
            } else {
                format!(
                    "no workflow '{id}' in {0} (`wfhost list --store {0}` shows them)",
                    self.location
                )
            };
            Error::new(ErrorKind::UnknownWorkflow, message)
        })
    }

    /// No running workflow of that id.
    pub(crate) fn not_running(&self, id: &str) -> Error {
        let message = if self.serving {
            format!("no running workflow '{id}': it ended, or never was (GET /v1/workflows/{id})")
        } else {
            format!(
                "no running workflow '{id}' in {} (`wfhost status {id}` says where it stands)",
                self.location
            )
        };
        Error::new(ErrorKind::UnknownWorkflow, message)
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

    /// Runs `read` on a connection to the store (it must exist), opened if none is idle.
    pub(crate) fn read<T>(
        &self,
        read: impl FnOnce(&mut dyn Read) -> std::result::Result<T, StoreError>,
    ) -> Result<T> {
        let mut store = match self.idle.lock().pop() {
            Some(store) => store,
            None => self.location.open_client(false).map_err(store_error)?,
        };
        let result = match &mut store {
            ClientStore::Own(own) => read(own.as_mut()),
            ClientStore::Shared(shared) => read(shared.as_mut()),
        };
        // A connection that failed is dropped: the next call opens another.
        if result.is_ok() {
            self.put_back(store);
        }
        result.map_err(store_error)
    }

    fn put_back(&self, store: ClientStore) {
        let mut idle = self.idle.lock();
        if idle.len() < KEPT_CONNECTIONS {
            idle.push(store);
        }
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
                 --store`, or a host of your own (Host::start, Host::send, Host::cancel), or \
                 serve it with `wfhost serve --http` and give the client commands `--server`; \
                 client commands need a store hosts share (PostgreSQL) or a server",
                self.location
            ),
        )
    }

    /// Runs `write` on a store hosts share, on a connection opened if need be (with `create`,
    /// its tables are made if it has none: a start; without, they must be there: a message or
    /// a cancel, which has nothing to reach in an empty database); on a store of one host's
    /// own, an error that says what to do instead.
    pub(crate) fn submit<T>(
        &self,
        create: bool,
        write: impl FnOnce(&mut dyn Submit) -> std::result::Result<T, StoreError>,
    ) -> Result<T> {
        self.refuse_own()?;
        let idle = {
            let mut idle = self.idle.lock();
            let shared = idle
                .iter()
                .position(|store| matches!(store, ClientStore::Shared(_)));
            shared.map(|at| idle.swap_remove(at))
        };
        let mut store = match idle {
            // A connection opened to read may have found no tables: a start makes them.
            Some(store) if !create => store,
            _ => self.location.open_client(create).map_err(store_error)?,
        };
        let ClientStore::Shared(shared) = &mut store else {
            return Err(self.own_store());
        };
        let result = write(shared.as_mut());
        if result.is_ok() {
            self.put_back(store);
        }
        result.map_err(store_error)
    }
}

/// An error of the store, as a client's error.
pub(crate) fn store_error(error: StoreError) -> Error {
    crate::durable::store_error(error)
}

/// No module of that hash in the store.
pub(crate) fn unknown_module(hash: &str) -> Error {
    Error::new(
        ErrorKind::UnknownModule,
        format!(
            "the store keeps no module with SHA-256 {hash}: store it first (POST /v1/modules, or \
             start with the module's bytes)"
        ),
    )
}

impl Backend for StoreBackend {
    fn location(&self) -> &Location {
        &self.location
    }

    fn put_module(&self, bytes: &[u8], name: Option<&str>) -> Result<StoredModule> {
        let info = ModuleInfo::inspect(bytes)?;
        let had = self.read(|store| store.module(&info.sha256))?.is_some();
        // Stored again even if it was there, on a store clients write: its time moves on, so
        // that a prune keeps it.
        if !had || matches!(self.location, Location::Postgres(_)) {
            self.submit(true, |store| store.submit_module(&info.sha256, bytes))?;
        }
        let mut stored = StoredModule::of(&info, !had);
        if let Some(name) = name {
            self.submit(true, |store| store.submit_module_name(name, &info.sha256))?;
            stored.names.extend(self.version_of(name, &info.sha256)?);
        }
        Ok(stored)
    }

    fn modules(&self) -> Result<Vec<StoredModule>> {
        let listed = self.read(|store| store.module_list())?;
        let mut names = self.names_by_hash()?;
        let mut modules = Vec::with_capacity(listed.len());
        for (hash, _) in listed {
            let known = self.inspected.lock().get(&hash).cloned();
            let mut module = match known {
                Some(known) => known,
                None => match self.read(|store| store.module(&hash))? {
                    Some(bytes) => {
                        let module = StoredModule::inspected(&hash, &bytes);
                        self.inspected.lock().insert(hash.clone(), module.clone());
                        module
                    }
                    None => continue,
                },
            };
            module.names = names.remove(&hash).unwrap_or_default();
            modules.push(module);
        }
        Ok(modules)
    }

    fn module(&self, hash: &str) -> Result<Option<Vec<u8>>> {
        self.read(|store| store.module(hash))
    }

    fn start(&self, start: &Start<'_>) -> Result<Started> {
        let id = start.id.map_or_else(new_id, str::to_string);
        if let Some(why) = crate::ids::bad_id(&id) {
            return Err(Error::new(ErrorKind::InvalidInput, why));
        }
        self.refuse_own()?;
        let stored;
        let mut shown = start.module_name.map(str::to_string);
        let bytes = match start.module {
            ModuleRef::Bytes(bytes) => bytes,
            ModuleRef::Hash(reference) | ModuleRef::Named(reference) => {
                let (hash, name) = self.resolve_start(&id, reference)?;
                shown = shown.or(name);
                stored = self
                    .read(|store| store.module(&hash))?
                    .ok_or_else(|| unknown_module(&hash))?;
                &stored[..]
            }
        };
        let info = ModuleInfo::inspect(bytes)?;
        if !info.has_entry(start.entry) {
            return Err(info.unknown_entry(start.entry));
        }
        let encoded = postcard::to_allocvec(start.input)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the input: {e}")))?;
        let workflow = NewWorkflow {
            num: 0,
            id: id.clone(),
            parent: None,
            module: info.sha256.clone(),
            module_name: shown.unwrap_or_else(|| info.sha256.clone()),
            entry: start.entry.to_string(),
            input: encoded.clone(),
            started: now_millis(),
            trace: start.trace.map(str::to_string),
        };
        let started = self.submit(true, |store| {
            store.submit_start((&info.sha256, bytes), &workflow)
        })?;
        let status = self.status(&id)?;
        if started.is_none() {
            let stored = self.find(&id)?;
            stored
                .start
                .may_follow(&info.sha256, start.entry, &encoded)?;
        }
        Ok(Started {
            id,
            new: started.is_some(),
            workflow: status,
        })
    }

    fn status(&self, id: &str) -> Result<WorkflowStatus> {
        let workflow = self.find(id)?;
        if self.serving && self.location.path().is_some() {
            // The file's one host says whether it runs it (`ServingBackend::mark_host`).
            return Ok(WorkflowStatus::of(workflow));
        }
        let (host, waiting) = self.host_of(&workflow)?;
        let mut status = WorkflowStatus::of(workflow);
        status.host = host;
        status.waiting_for_host = waiting;
        Ok(status)
    }

    /// Polls until the workflow ends or `wait` passes.
    fn result(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowStatus> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(20);
        loop {
            let status = self.status(id)?;
            if status.is_finished() {
                return Ok(status);
            }
            status.refuse_damaged()?;
            let left = wait.map_or(Duration::ZERO, |w| w.saturating_sub(started.elapsed()));
            if left.is_zero() {
                return Ok(status);
            }
            std::thread::sleep(delay.min(left));
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    fn send(&self, id: &str, message: &Payload) -> Result<u64> {
        let payload = postcard::to_allocvec(message)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the message: {e}")))?;
        match self.submit(false, |store| store.submit_message(id, &payload))? {
            Some(number) => Ok(number),
            None => Err(self.not_running(id)),
        }
    }

    fn cancel(&self, id: &str) -> Result<Cancelled> {
        if self.submit(false, |store| store.submit_cancel(id))? {
            return Ok(Cancelled::Asked);
        }
        let status = WorkflowStatus::of(self.find(id)?);
        Ok(match status.state {
            state if state.is_finished() => Cancelled::Ended(state),
            _ => Cancelled::AskedBefore,
        })
    }

    fn pause(&self, id: &str, paused: bool) -> Result<PauseChange> {
        if self.submit(false, |store| store.submit_pause(id, paused))? {
            return Ok(PauseChange::Done);
        }
        let status = WorkflowStatus::of(self.find(id)?);
        Ok(match status.state {
            state if state.is_finished() => PauseChange::Ended(state),
            _ => PauseChange::Already,
        })
    }

    fn upgrade(&self, _id: &str, _wasm: &[u8]) -> Result<Upgraded> {
        Err(needs_host())
    }

    fn upgrade_stored(&self, _id: &str, _module: &str) -> Result<Upgraded> {
        Err(needs_host())
    }

    fn reset(
        &self,
        _id: &str,
        _to_step: Option<u64>,
        _module: Option<super::ModuleRef<'_>>,
    ) -> Result<crate::WorkflowReset> {
        Err(needs_host())
    }

    fn list(&self, query: &ListQuery) -> Result<Page<WorkflowStatus>> {
        query.check()?;
        let after = match &query.after {
            Some(cursor) => parse_cursor(cursor)?,
            None => 0,
        };
        let filter = filter_of(query);
        // One more than asked: whether there is a next page.
        let mut rows = self.read(|store| store.page(&filter, after, query.limit + 1))?;
        let next = if rows.len() > query.limit {
            rows.truncate(query.limit);
            Some(cursor(rows.last().map_or(after, |w| w.start.num)))
        } else {
            // Fewer than asked: the end, or a page cut at its byte budget, after which more
            // may follow.
            let last = rows.last().map_or(after, |w| w.start.num);
            let unbounded = Filter {
                max_bytes: None,
                ..filter.clone()
            };
            let more = !rows.is_empty()
                && !self
                    .read(|store| store.page(&unbounded, last, 1))?
                    .is_empty();
            more.then(|| cursor(last))
        };
        Ok(Page {
            items: rows.into_iter().map(WorkflowStatus::of).collect(),
            next,
        })
    }

    fn counts(&self, query: &ListQuery) -> Result<WorkflowCounts> {
        let filter = Filter {
            state: None,
            cancelled: None,
            held: None,
            max_bytes: None,
            ..filter_of(query)
        };
        let counts = self.read(|store| store.counts(&filter))?;
        Ok(WorkflowCounts::of_store(&counts))
    }

    fn history(&self, id: &str, after: Option<&str>, limit: usize) -> Result<Page<HistoryStep>> {
        let workflow = self.find(id)?;
        let after = match after {
            Some(cursor) => parse_cursor(cursor)?,
            None => 0,
        };
        let limit = limit.clamp(1, MAX_PAGE);
        let num = workflow.start.num;
        // As many steps as fit the byte budget (at least one), and whether more follow.
        let sizes = self.read(|store| store.step_sizes(num, after, limit + 1))?;
        let fit = within(&sizes[..sizes.len().min(limit)], HISTORY_BYTES);
        let more = sizes.len() > fit;
        let steps = self.read(|store| store.step_page(num, after, Some(fit)))?;
        let next = more.then(|| cursor(steps.last().map_or(after, |s| s.seq)));
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
            items.push(HistoryStep::of(step.seq, step.at, record, step.record));
        }
        Ok(Page { items, next })
    }

    fn outbox(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Result<OutboxPage> {
        poll_outbox(|| self.outbox_page(id, after, limit), wait)
    }

    fn waits(&self, id: &str) -> Result<Waits> {
        StoreBackend::waits(self, id)
    }

    fn id_of(&self, number: u64) -> Result<Option<String>> {
        Ok(self
            .read(|store| store.workflow_by_num(number))?
            .map(|w| w.start.id))
    }

    /// The hosts of a store hosts share; on a SQLite file, the one that holds it.
    fn hosts(&self) -> Result<Vec<HostStatus>> {
        if let Some(path) = self.location.path() {
            let holder = SqliteStore::holder(path);
            let running = match holder {
                Some(_) => self.count_running()?,
                None => 0,
            };
            return Ok(holder
                .map(|holder| HostStatus {
                    id: 0,
                    name: holder.to_string(),
                    alive: true,
                    lease_until: None,
                    workflows: running,
                    this: false,
                })
                .into_iter()
                .collect());
        }
        let rows = self.submit(false, |store| store.hosts())?;
        Ok(rows
            .into_iter()
            .map(|row| HostStatus {
                id: row.info.id,
                name: row.info.name,
                alive: row.info.alive,
                lease_until: row.lease_until,
                workflows: row.workflows,
                this: false,
            })
            .collect())
    }

    fn ready(&self) -> Result<()> {
        self.count_running().map(drop)
    }

    /// Whether the store takes work from clients (starts, messages, cancels): a store hosts
    /// share does (it is reached, and its tables are made if need be); a SQLite file, one
    /// host's own, does not, and the error says what to do instead ([`ErrorKind::Config`]).
    fn takes_work(&self) -> Result<()> {
        self.refuse_own()?;
        self.submit(true, |_| Ok(()))
    }

    fn prune(&self, query: &PruneQuery, deadline: Option<Instant>) -> Result<Pruned> {
        let mut journal = self
            .location
            .open_host(SyncMode::Full, None)
            .map_err(store_error)?
            .journal;
        self.prune_with(query, deadline, |ops| {
            journal.commit(&ops).map(drop).map_err(store_error)
        })
    }
}

impl Direct for StoreBackend {
    fn read_store<T>(
        &self,
        read: impl FnOnce(&mut dyn Read) -> std::result::Result<T, StoreError>,
    ) -> Result<T> {
        StoreBackend::read(self, read)
    }

    fn write_schedule(&self, op: Op, _id: &str) -> Result<bool> {
        self.submit(true, |s| s.submit_schedule(&op))
    }
}
#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn a_page_holds_what_fits_and_at_least_one() {
        assert_eq!(within(&[], 10), 0);
        assert_eq!(within(&[100], 10), 1);
        assert_eq!(within(&[4, 4, 4], 10), 2);
        assert_eq!(within(&[4, 6, 1], 10), 2);
        assert_eq!(within(&[1, 1, 1], 10), 3);
    }
}
