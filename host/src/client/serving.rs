//! A client of a host this program runs: what the HTTP API's handlers call. A start runs in the
//! host; a message or a cancel of a workflow it runs reaches it at once (journaled first), and
//! one of a workflow it does not run is written to the store for its host; a wait for an end or
//! a message to the host is fired by the host's journal, with no thread per waiter (on a store
//! hosts share, also by one task that reads the store for what other hosts did); everything
//! else is read from the store beside the host.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wfcontract::{Payload, Pid};

use super::backend::{Backend, Waiting};
use super::schedules::{self, Direct};
use super::store::{unknown_module, StoreBackend, MAX_OUTBOX_PAGE};
use super::types::{
    Cancelled, HistoryStep, HostStatus, ListQuery, OutboxPage, Page, PauseChange, PruneQuery,
    Pruned, Started, StoredModule, Waits, WorkflowCounts, WorkflowStatus,
};
use super::{blocking, new_id, parse_cursor, ModuleRef, Start};
use crate::durable::resolve::stored_name;
use crate::durable::store::{Location, Op, Read, StoreError};
use crate::durable::waiters::{Topic, Waiters};
use crate::durable::Durable;
use crate::engine::check_payload;
use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::host::Host;
use crate::wasm::Loaded;
use crate::wasm::ModuleInfo;
use crate::Upgraded;

/// How often the store is read for what other hosts did to the workflows waited for (a store
/// hosts share): one read for every waiter at once.
const REMOTE_POLL: Duration = Duration::from_millis(250);

/// The most a wait may last, whatever it asks (the HTTP API caps its waits far below).
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Reads of the store that async waits (`result_async`, `outbox_async`) run at once, at most:
/// each holds a thread of tokio's blocking pool while it runs; the others wait for a turn
/// without one, so that ten thousand waiters starting together take a few threads, not one
/// each.
const ASYNC_READS: usize = 8;

pub(crate) struct ServingBackend {
    pub(crate) host: Host,
    pub(crate) durable: Arc<Durable>,
    pub(crate) grants: Grants,
    pub(crate) store: StoreBackend,
    /// Whether the task that reads the store for other hosts' work runs.
    polling: Arc<AtomicBool>,
    /// Held while a module is loaded: the starts of a module not loaded yet that come at once
    /// compile it once, not once each.
    loading: Mutex<()>,
    /// Turns for the async waits' reads of the store ([`ASYNC_READS`]).
    reads: Arc<tokio::sync::Semaphore>,
}

impl ServingBackend {
    pub(crate) fn new(host: &Host, grants: Grants) -> Result<ServingBackend> {
        let durable = host.durable_part().cloned().ok_or_else(|| {
            Error::new(
                ErrorKind::Config,
                "a client serving a host needs a host with a store (HostBuilder::store)",
            )
        })?;
        let mut store = StoreBackend::new(durable.location.clone());
        store.serving = true;
        Ok(ServingBackend {
            host: host.clone(),
            durable,
            grants,
            store,
            polling: Arc::new(AtomicBool::new(false)),
            loading: Mutex::new(()),
            reads: Arc::new(tokio::sync::Semaphore::new(ASYNC_READS)),
        })
    }

    pub(crate) fn shared(&self) -> bool {
        self.durable.shared()
    }

    /// The module with `hash`, held for the start that asks: the one the host loaded under a
    /// name of its own (with that name's grants), or the store's copy loaded as
    /// `wfhost:<hash>` with the grants this client was given.
    fn loaded(&self, hash: &str, bytes: Option<&[u8]>) -> Result<Loaded> {
        let modules = &self.host.engine().modules;
        if let Some(loaded) = modules.by_hash(hash) {
            // Started by hash, the store must keep the bytes (a prune may have removed them
            // since they were loaded here): a workflow is never journaled with a module that
            // another host, or this one restarted, could not load.
            if !self.store.has_module(hash)? {
                match bytes {
                    Some(bytes) => self.durable.keep_module(hash, bytes)?,
                    None => return Err(unknown_module(hash)),
                }
            }
            return Ok(loaded);
        }
        let _loading = self.loading.lock();
        // Loaded meanwhile, by the start that held the lock before.
        if let Some(loaded) = modules.by_hash(hash) {
            return Ok(loaded);
        }
        let stored;
        let bytes = match bytes {
            Some(bytes) => bytes,
            None => {
                stored = self
                    .store
                    .module(hash)?
                    .ok_or_else(|| unknown_module(hash))?;
                &stored[..]
            }
        };
        self.host
            .load_stored_module(&stored_name(hash), bytes, self.grants.clone())
    }

    /// Starts `start` (its id given).
    fn start_with_id(&self, start: &Start<'_>) -> Result<Started> {
        let id = start.id.unwrap_or_default().to_string();
        let (hash, bytes, shown) = match start.module {
            ModuleRef::Bytes(bytes) => (ModuleInfo::inspect(bytes)?.sha256, Some(bytes), None),
            ModuleRef::Hash(hash) => (hash.to_string(), None, None),
            ModuleRef::Named(reference) => {
                let (hash, shown) = self.store.resolve_start(&id, reference)?;
                (hash, None, shown)
            }
        };
        let loaded = match self.loaded(&hash, bytes) {
            Ok(loaded) => loaded,
            // A module the store no longer keeps, or that no longer loads: a start of an id
            // that exists is still answered.
            Err(error) => {
                return match self.started_before(&id, &hash, start)? {
                    Some(started) => Ok(started),
                    None => Err(error),
                }
            }
        };
        let started = self.durable.start_loaded(
            self.host.engine(),
            &id,
            (&loaded, shown.as_deref()),
            start.entry,
            (start.input.clone(), start.trace),
        );
        match started {
            // Its result is read from the store; what it sends the host is kept there.
            Ok((_, Some(record))) => {
                let mut workflow = WorkflowStatus::of(crate::durable::store::Workflow {
                    start: record,
                    state: crate::durable::store::State::Running,
                    ending: None,
                    finished: None,
                    steps: 0,
                    cancel: crate::durable::store::Cancel::No,
                    damaged: None,
                    unread: 0,
                    owner: None,
                    paused: false,
                    run: 1,
                });
                self.mark_host(&mut workflow);
                Ok(Started {
                    id,
                    new: true,
                    workflow,
                })
            }
            Ok((_, None)) => Ok(Started {
                id: id.clone(),
                new: false,
                workflow: self.status(&id)?,
            }),
            // It runs on another host, or waits for a host, or is damaged, or was started
            // meanwhile by another request: the same start again, or a conflict, as the store
            // says. (Any other error, one after its start was written included, is the
            // start's: it is not told as a start that existed.)
            Err(error) if matches!(error.kind(), ErrorKind::Unavailable | ErrorKind::Store) => {
                match self.started_before(&id, &hash, start)? {
                    Some(started) => Ok(started),
                    None => Err(error),
                }
            }
            Err(error) => Err(error),
        }
    }

    /// The start of `id` the store has, if it has one: an [`ErrorKind::Conflict`] error if it
    /// started with another module, entry point or input.
    fn started_before(&self, id: &str, hash: &str, start: &Start<'_>) -> Result<Option<Started>> {
        if crate::ids::bad_id(id).is_some() {
            // Refused by the start, which says why.
            return Ok(None);
        }
        let Some(existing) = self.store.read(|store| store.workflow(id))? else {
            return Ok(None);
        };
        let input = postcard::to_allocvec(start.input)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the input: {e}")))?;
        existing.start.may_follow(hash, start.entry, &input)?;
        Ok(Some(Started {
            id: id.to_string(),
            new: false,
            workflow: self.status(id)?,
        }))
    }

    /// Names this host as the one that runs `status`'s workflow, when it does. On a store of
    /// its own, an unfinished workflow it does not run has ended since it was read, or waits
    /// (for its module, or a repair: then the host knows of it).
    fn mark_host(&self, status: &mut WorkflowStatus) {
        if status.is_finished() {
            return;
        }
        if self.durable.ids.pid_of(&status.id).is_none() {
            if !self.shared() {
                let waits = status.damaged.is_some()
                    || self.durable.waiting_warned.lock().contains(&status.number);
                status.waiting_for_host = waits;
                status.host = (!waits).then(|| format!("{} (this host)", self.durable.host_name));
            }
            return;
        }
        status.host = Some(match self.durable.store_host() {
            Some(number) => format!("{number} ({}, this host)", self.durable.host_name),
            None => format!("{} (this host)", self.durable.host_name),
        });
        status.waiting_for_host = false;
    }

    async fn wait_for_result(
        self: Arc<Self>,
        id: String,
        wait: Option<Duration>,
    ) -> Result<WorkflowStatus> {
        let id = id.as_str();
        let deadline = Instant::now() + wait.unwrap_or_default().min(MAX_WAIT);
        let status = self.read_status(id).await?;
        if status.is_finished() || deadline <= Instant::now() {
            return Ok(status);
        }
        status.refuse_damaged()?;
        let mut watch = self.durable.waiters.watch(Topic::End, status.number, 0);
        self.poll_other_hosts();
        // Registered, then read again: an end committed between the two reads fires it.
        let status = self.read_status(id).await?;
        if status.is_finished() {
            return Ok(status);
        }
        watch
            .fired(deadline.saturating_duration_since(Instant::now()))
            .await;
        drop(watch);
        self.read_status(id).await
    }

    /// Where workflow `id` stands, read on a thread that may block, in its turn (held until
    /// the read is over, whoever stops waiting for it).
    async fn read_status(self: &Arc<Self>, id: &str) -> Result<WorkflowStatus> {
        let turn = Arc::clone(&self.reads).acquire_owned().await;
        let (serving, id) = (Arc::clone(self), id.to_string());
        blocking(move || {
            let _turn = turn;
            ServingBackend::status(&serving, &id)
        })
        .await
    }

    /// A page of the outbox, read on a thread that may block, in its turn.
    async fn read_outbox(
        self: &Arc<Self>,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<OutboxPage> {
        let turn = Arc::clone(&self.reads).acquire_owned().await;
        let (serving, id, after) = (Arc::clone(self), id.to_string(), after.map(str::to_string));
        let limit = limit.min(MAX_OUTBOX_PAGE);
        blocking(move || {
            let _turn = turn;
            serving.store.outbox_page(&id, after.as_deref(), limit)
        })
        .await
    }

    /// On a store hosts share: starts the task that reads, every [`REMOTE_POLL`], which of the
    /// workflows waited for have ended or sent the host a message (on any host), unless it
    /// runs; it stops once nobody waits.
    fn poll_other_hosts(self: &Arc<Self>) {
        if !self.shared() || self.polling.swap(true, Ordering::SeqCst) {
            return;
        }
        let (waiters, polling, serving) = (
            Arc::clone(&self.durable.waiters),
            Arc::clone(&self.polling),
            Arc::clone(self),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REMOTE_POLL).await;
                if !waiters.any() {
                    // SeqCst, as the waiters' count: a waiter that registered after the look
                    // and saw the flag still set is served by taking the flag back here.
                    polling.store(false, Ordering::SeqCst);
                    if !waiters.any() || polling.swap(true, Ordering::SeqCst) {
                        return;
                    }
                    continue;
                }
                let reader = Arc::clone(&serving);
                let watched = Arc::clone(&waiters);
                let read = blocking(move || look_at_other_hosts(&reader, &watched)).await;
                if let Err(error) = read {
                    tracing::debug!("reading what other hosts did: {error}");
                }
            }
        });
    }

    async fn wait_for_outbox(
        self: Arc<Self>,
        id: String,
        after: Option<String>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Result<OutboxPage> {
        let (id, after) = (id.as_str(), after.as_deref());
        let position = after.map(parse_cursor).transpose()?.unwrap_or(0);
        let deadline = Instant::now() + wait.unwrap_or_default().min(MAX_WAIT);
        loop {
            let page = self.read_outbox(id, after, limit).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !page.messages.is_empty() || page.finished || left.is_zero() {
                return Ok(page);
            }
            let waiters = &self.durable.waiters;
            let mut sent = waiters.watch(Topic::Outbox, page.number, position);
            let mut ended = waiters.watch(Topic::End, page.number, 0);
            self.poll_other_hosts();
            let again = self.read_outbox(id, after, limit).await?;
            if !again.messages.is_empty() || again.finished {
                return Ok(again);
            }
            tokio::select! {
                _ = sent.fired(left) => {}
                _ = ended.fired(left) => {}
            }
        }
    }
}

/// Fires the waiters of the workflows that other hosts ended, or that sent the host a message,
/// as the store says: one read for each.
fn look_at_other_hosts(serving: &ServingBackend, waiters: &Waiters) -> Result<()> {
    let ends = waiters.watched(Topic::End);
    if !ends.is_empty() {
        let ended = serving.store.finished_among(&ends)?;
        waiters.fire(Topic::End, &ended);
    }
    let senders = waiters.watched(Topic::Outbox);
    if !senders.is_empty() {
        let latest = serving
            .store
            .read(|store| store.latest_host_messages(&senders))?;
        waiters.fire_sent(&latest);
    }
    Ok(())
}

impl Backend for ServingBackend {
    fn location(&self) -> &Location {
        &self.store.location
    }

    /// Keeps a module in the store (what it says of itself checked first, as `wfhost inspect`
    /// does); it is compiled when a workflow first starts it.
    fn put_module(&self, wasm: &[u8], name: Option<&str>) -> Result<StoredModule> {
        let info = ModuleInfo::inspect(wasm)?;
        let limit = self.host.engine().wasm.limits.max_module_bytes;
        if wasm.len() > limit {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "the module is {} bytes, more than this host loads ({limit}, \
                     --max-module-size)",
                    wasm.len()
                ),
            ));
        }
        let had = self.store.module(&info.sha256)?.is_some();
        // Stored again even if it was there: its time moves on, so that a prune keeps it.
        self.durable.keep_module(&info.sha256, wasm)?;
        let mut stored = StoredModule::of(&info, !had);
        if let Some(name) = name {
            self.durable.name_module(&self.store, name, &info.sha256)?;
            stored
                .names
                .extend(self.store.version_of(name, &info.sha256)?);
        }
        Ok(stored)
    }

    fn modules(&self) -> Result<Vec<StoredModule>> {
        self.store.modules()
    }

    fn module(&self, hash: &str) -> Result<Option<Vec<u8>>> {
        self.store.module(hash)
    }

    fn start(&self, start: &Start<'_>) -> Result<Started> {
        let id = start.id.map_or_else(new_id, str::to_string);
        let start = Start {
            id: Some(&id),
            ..*start
        };
        self.start_with_id(&start)
    }

    fn status(&self, id: &str) -> Result<WorkflowStatus> {
        let mut status = self.store.status(id)?;
        self.mark_host(&mut status);
        Ok(status)
    }

    fn result(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowStatus> {
        let deadline = Instant::now() + wait.unwrap_or_default().min(MAX_WAIT);
        loop {
            let status = self.status(id)?;
            if status.is_finished() {
                return Ok(status);
            }
            status.refuse_damaged()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(status);
            }
            let mut watch = self
                .durable
                .waiters
                .watch_blocking(Topic::End, status.number, 0);
            // Registered, then read again: an end committed between the two reads fires it.
            let again = self.status(id)?;
            if again.is_finished() {
                return Ok(again);
            }
            // Another host may end it: this thread looks again now and then.
            let step = if self.shared() {
                left.min(REMOTE_POLL)
            } else {
                left
            };
            watch.fired_blocking(step);
        }
    }

    fn result_async(
        self: Arc<Self>,
        id: String,
        wait: Option<Duration>,
    ) -> Option<Waiting<WorkflowStatus>> {
        Some(Box::pin(self.wait_for_result(id, wait)))
    }

    fn send(&self, id: &str, message: &Payload) -> Result<u64> {
        check_payload(&self.host.engine().wasm.limits, "the message", message)?;
        if let Some(pid) = self.durable.ids.pid_of(id) {
            let sent =
                self.durable
                    .send_from_host(&self.host.engine().handle, pid, message.clone());
            return match sent {
                // It ended between the look and the send.
                Err(error) if error.kind() == ErrorKind::NoSuchProcess => {
                    Err(self.store.not_running(id))
                }
                sent => sent,
            };
        }
        if self.shared() {
            return self.store.send(id, message);
        }
        // Unfinished and not running here (it waits for its module, or is damaged, or a reset's
        // new run is starting): kept for the recovery that starts it, under the lock recoveries
        // take, so that one starting it now either reads the message or runs it first.
        let taking = self.durable.taking.lock();
        if self.durable.ids.pid_of(id).is_some() {
            drop(taking);
            return self.send(id, message);
        }
        let workflow = self.store.find(id)?;
        if workflow.state != crate::durable::store::State::Running {
            return Err(self.store.not_running(id));
        }
        self.durable.keep_message(workflow.start.num, message)
    }

    fn cancel(&self, id: &str) -> Result<Cancelled> {
        if self.shared() && self.durable.ids.pid_of(id).is_none() {
            return self.store.cancel(id);
        }
        let status = self.store.status(id)?;
        if status.is_finished() {
            return Ok(Cancelled::Ended(status.state));
        }
        if status.cancel_asked {
            return Ok(Cancelled::AskedBefore);
        }
        match self.durable.ids.pid_of(id) {
            Some(pid) => match self.host.cancel(pid) {
                Ok(()) => Ok(Cancelled::Asked),
                // It ended meanwhile.
                Err(error) if error.kind() == ErrorKind::NoSuchProcess => {
                    Ok(Cancelled::Ended(self.store.status(id)?.state))
                }
                Err(error) => Err(error),
            },
            None => {
                // Kept for the recovery that starts it, under the lock recoveries take (as a
                // message is).
                let taking = self.durable.taking.lock();
                if self.durable.ids.pid_of(id).is_some() {
                    drop(taking);
                    return self.cancel(id);
                }
                let status = self.store.status(id)?;
                if status.is_finished() {
                    return Ok(Cancelled::Ended(status.state));
                }
                self.durable.keep_cancel(Pid(status.number))?;
                let now = self.store.status(id)?;
                Ok(match now.state {
                    ended if ended.is_finished() => Cancelled::Ended(ended),
                    _ => Cancelled::Asked,
                })
            }
        }
    }

    fn pause(&self, id: &str, paused: bool) -> Result<PauseChange> {
        if self.shared() && self.durable.ids.pid_of(id).is_none() {
            return self.store.pause(id, paused);
        }
        // One pause or unpause at a time, and none while the host takes others' (`inbox.rs`).
        let _taking = self.durable.taking.lock();
        let status = self.store.status(id)?;
        if status.is_finished() {
            return Ok(PauseChange::Ended(status.state));
        }
        if status.paused == paused {
            return Ok(PauseChange::Already);
        }
        match self.durable.ids.pid_of(id) {
            Some(pid) => self.durable.pause(pid, paused)?,
            // Not running here yet (a child whose start is journaled and not yet spawned) or
            // not at all (it waits for its module, or is damaged): held from its first turn,
            // here or after the recovery that starts it.
            None => {
                self.durable.write(vec![crate::durable::store::Op::Pause {
                    num: status.number,
                    paused,
                }])?;
                self.durable.mark_paused(status.number, paused);
            }
        }
        Ok(PauseChange::Done)
    }

    fn upgrade(&self, id: &str, wasm: &[u8]) -> Result<Upgraded> {
        self.host.upgrade_with(id, wasm, self.grants.clone())
    }

    fn upgrade_stored(&self, id: &str, module: &str) -> Result<Upgraded> {
        let (hash, _) = self.store.resolve(module)?;
        let module = &hash;
        let wasm = self.store.module(module)?.ok_or_else(|| {
            Error::new(
                ErrorKind::UnknownModule,
                format!("the store keeps no module {module}: store it first (`POST /v1/modules`)"),
            )
        })?;
        self.host.upgrade_with(id, &wasm, self.grants.clone())
    }

    fn reset(
        &self,
        id: &str,
        to_step: Option<u64>,
        module: Option<super::ModuleRef<'_>>,
    ) -> Result<crate::WorkflowReset> {
        let stored;
        let wasm = match module {
            None => None,
            Some(super::ModuleRef::Bytes(bytes)) => Some(bytes),
            Some(super::ModuleRef::Hash(reference) | super::ModuleRef::Named(reference)) => {
                let (hash, _) = self.store.resolve(reference)?;
                let hash = &hash;
                stored = self.store.module(hash)?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::UnknownModule,
                        format!(
                            "the store keeps no module {hash}: store it first (`POST /v1/modules`)"
                        ),
                    )
                })?;
                Some(&stored[..])
            }
        };
        self.host.reset_with(id, to_step, wasm, self.grants.clone())
    }

    fn list(&self, query: &ListQuery) -> Result<Page<WorkflowStatus>> {
        let mut page = self.store.list(query)?;
        for status in &mut page.items {
            self.mark_host(status);
        }
        Ok(page)
    }

    fn counts(&self, query: &ListQuery) -> Result<WorkflowCounts> {
        self.store.counts(query)
    }

    fn history(&self, id: &str, after: Option<&str>, limit: usize) -> Result<Page<HistoryStep>> {
        self.store.history(id, after, limit)
    }

    fn outbox(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Result<OutboxPage> {
        let position = after.map(parse_cursor).transpose()?.unwrap_or(0);
        let deadline = Instant::now() + wait.unwrap_or_default().min(MAX_WAIT);
        loop {
            let page = self.store.outbox_page(id, after, limit)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !page.messages.is_empty() || page.finished || left.is_zero() {
                return Ok(page);
            }
            let (mut sent, _ended) = self
                .durable
                .waiters
                .watch_sent_or_end_blocking(page.number, position);
            let again = self.store.outbox_page(id, after, limit)?;
            if !again.messages.is_empty() || again.finished {
                return Ok(again);
            }
            let step = if self.shared() {
                left.min(REMOTE_POLL)
            } else {
                left
            };
            sent.fired_blocking(step);
        }
    }

    fn outbox_async(
        self: Arc<Self>,
        id: String,
        after: Option<String>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Option<Waiting<OutboxPage>> {
        Some(Box::pin(self.wait_for_outbox(id, after, limit, wait)))
    }

    /// As the store says, with the calls this host does not serve marked.
    fn waits(&self, id: &str) -> Result<Waits> {
        let mut waits = self.store.waits(id)?;
        for open in &mut waits.open {
            if let Some(call) = open.yielded.command.call() {
                if !self.durable.serves(&call.name) {
                    open.unserved = Some(format!(
                        "this host does not serve '{}': the call waits for a host that does ({})",
                        call.name,
                        crate::functions::how_to_serve(&call.name)
                    ));
                }
            }
        }
        Ok(waits)
    }

    fn id_of(&self, number: u64) -> Result<Option<String>> {
        self.store.id_of(number)
    }

    fn hosts(&self) -> Result<Vec<HostStatus>> {
        if !self.shared() {
            return Ok(vec![HostStatus {
                id: 0,
                name: self.durable.host_name.clone(),
                alive: self.durable.store_failure().is_none(),
                lease_until: None,
                workflows: self.store.count_running()?,
                this: true,
            }]);
        }
        let me = self.durable.store_host();
        let mut hosts = self.store.hosts()?;
        for host in &mut hosts {
            host.this = Some(host.id) == me;
        }
        Ok(hosts)
    }

    /// Whether the host takes work: its store takes its writes (and on a store hosts share, its
    /// lease holds) and answers reads.
    fn ready(&self) -> Result<()> {
        if let Some(error) = self.durable.store_failure() {
            return Err(Error::new(ErrorKind::Unavailable, error.message()));
        }
        self.host.engine().running()?;
        self.store.count_running().map(drop)
    }

    fn takes_work(&self) -> Result<()> {
        ServingBackend::ready(self)
    }

    fn prune(&self, query: &PruneQuery, deadline: Option<Instant>) -> Result<Pruned> {
        self.store
            .prune_with(query, deadline, |ops| self.durable.write(ops))
    }
}

impl Direct for ServingBackend {
    fn read_store<T>(
        &self,
        read: impl FnOnce(&mut dyn Read) -> std::result::Result<T, StoreError>,
    ) -> Result<T> {
        self.store.read(read)
    }

    fn write_schedule(&self, op: Op, id: &str) -> Result<bool> {
        if self.shared() {
            return self.store.submit(true, |s| s.submit_schedule(&op));
        }
        // One host writes a SQLite store: through its writer, and read back, one write at a
        // time (what it reads back is its own).
        let _one = self.durable.taking.lock();
        let before = self.store.read(|s| s.schedule(id))?;
        self.durable.write(vec![op.clone()])?;
        let after = self.store.read(|s| s.schedule(id))?;
        Ok(schedules::changed(&op, before.as_ref(), after.as_ref()))
    }
}
