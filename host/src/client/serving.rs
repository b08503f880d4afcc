//! A client of a host this program runs: what the HTTP API's handlers call. A start runs in the
//! host; a message or a cancel of a workflow it runs reaches it at once (journaled first), and
//! one of a workflow it does not run is written to the store for its host; a wait for an end is
//! fired by the host's journal, with no thread per waiter; everything else is read from the
//! store beside the host.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wfcontract::{Payload, Pid};

use super::store::{not_running, unknown_module, StoreBackend};
use super::types::{
    Cancelled, HostStatus, ListQuery, OutboxPage, Page, Started, StoredModule, WorkflowState,
    WorkflowStatus,
};
use super::{blocking, new_id, parse_cursor, Client, ModuleRef, Start};
use crate::durable::waiters::Topic;
use crate::durable::Durable;
use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::host::Host;
use crate::wasm::ModuleInfo;

/// How often a wait for a workflow another host runs looks at the store (a store hosts share:
/// its end is not this host's to see): one read for every waiter at once.
const REMOTE_POLL: Duration = Duration::from_millis(250);

/// The most a wait may last, whatever it asks: a client that wants longer asks again.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(300);

pub(crate) struct ServingBackend {
    host: Host,
    durable: Arc<Durable>,
    grants: Grants,
    pub(crate) store: StoreBackend,
    /// Whether a task reads the store for the ends of workflows other hosts run.
    polling: Arc<AtomicBool>,
}

impl ServingBackend {
    pub(crate) fn new(host: &Host, grants: Grants) -> Result<ServingBackend> {
        let durable = host.durable_part().cloned().ok_or_else(|| {
            Error::new(
                ErrorKind::Config,
                "a client serving a host needs a host with a store (HostBuilder::store)",
            )
        })?;
        let location = durable.location.clone();
        Ok(ServingBackend {
            host: host.clone(),
            durable,
            grants,
            store: StoreBackend::new(location),
            polling: Arc::new(AtomicBool::new(false)),
        })
    }

    fn shared(&self) -> bool {
        self.durable.shared()
    }

    pub(crate) fn put_module(&self, wasm: &[u8]) -> Result<StoredModule> {
        let info = ModuleInfo::inspect(wasm)?;
        let had = self.store.module(&info.sha256)?.is_some();
        // Loaded (so compiled, and refused now if it does not compile) and kept in the store.
        self.loaded(&info.sha256, wasm)?;
        Ok(StoredModule::of(&info, !had))
    }

    /// The name the module with `hash` is loaded under: one the host loaded it under itself
    /// (with that name's grants), or `wfhost:<hash>`, loaded now from `bytes` with the grants
    /// this client was given.
    fn loaded(&self, hash: &str, bytes: &[u8]) -> Result<String> {
        if let Some(loaded) = self.host.engine().modules.by_hash(hash) {
            return Ok(loaded.name.to_string());
        }
        let name = format!("wfhost:{hash}");
        self.host
            .load_module_bytes_with(&name, bytes, self.grants.clone())?;
        Ok(name)
    }

    pub(crate) fn start(&self, start: &Start<'_>) -> Result<Started> {
        let id = start.id.map_or_else(new_id, str::to_string);
        let stored;
        let (hash, bytes) = match start.module {
            ModuleRef::Bytes(bytes) => (ModuleInfo::inspect(bytes)?.sha256, bytes),
            ModuleRef::Hash(hash) => {
                if let Some(loaded) = self.host.engine().modules.by_hash(hash) {
                    return self.start_loaded(&id, &loaded.name, start);
                }
                stored = self
                    .store
                    .module(hash)?
                    .ok_or_else(|| unknown_module(hash))?;
                (hash.to_string(), &stored[..])
            }
        };
        let name = self.loaded(&hash, bytes)?;
        self.start_loaded(&id, &name, start)
    }

    fn start_loaded(&self, id: &str, name: &str, start: &Start<'_>) -> Result<Started> {
        let (spawned, new) = self.durable.start_new(
            self.host.engine(),
            id,
            name,
            start.entry,
            start.input.clone(),
        )?;
        // Its result is read from the store; what it sends the host is kept there.
        drop(spawned);
        Ok(Started {
            id: id.to_string(),
            new,
            workflow: self.status(id)?,
        })
    }

    pub(crate) fn status(&self, id: &str) -> Result<WorkflowStatus> {
        let mut status = self.store.status(id)?;
        self.mark_host(&mut status);
        Ok(status)
    }

    /// Names this host as the one that runs `status`'s workflow, when it does.
    fn mark_host(&self, status: &mut WorkflowStatus) {
        if status.is_finished() || self.durable.ids.pid_of(&status.id).is_none() {
            return;
        }
        status.host = Some(match self.durable.store_host() {
            Some(number) => format!("{number} ({}, this host)", self.durable.host_name),
            None => format!("{} (this host)", self.durable.host_name),
        });
        status.waiting_for_host = false;
    }

    pub(crate) fn list(&self, query: &ListQuery) -> Result<Page<WorkflowStatus>> {
        let mut page = self.store.list(query)?;
        for status in &mut page.items {
            self.mark_host(status);
        }
        Ok(page)
    }

    pub(crate) fn result(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowStatus> {
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
                .watch_blocking(Topic::End, status.number);
            // Registered, then read again: an end committed between the two reads fires it.
            let again = self.status(id)?;
            if again.is_finished() {
                return Ok(again);
            }
            let step = if self.shared() {
                left.min(REMOTE_POLL)
            } else {
                left
            };
            watch.fired_blocking(step);
        }
    }

    pub(crate) async fn result_async(
        &self,
        client: &Client,
        id: &str,
        wait: Option<Duration>,
    ) -> Result<WorkflowStatus> {
        let deadline = Instant::now() + wait.unwrap_or_default().min(MAX_WAIT);
        let status = read_status(client, id).await?;
        if status.is_finished() || deadline <= Instant::now() {
            return Ok(status);
        }
        status.refuse_damaged()?;
        let mut watch = self.durable.waiters.watch(Topic::End, status.number);
        if self.shared() {
            self.poll_remote_ends(client);
        }
        // Registered, then read again: an end committed between the two reads fires it.
        let status = read_status(client, id).await?;
        if status.is_finished() {
            return Ok(status);
        }
        watch
            .fired(deadline.saturating_duration_since(Instant::now()))
            .await;
        drop(watch);
        read_status(client, id).await
    }

    /// On a store hosts share: starts the task that reads, every [`REMOTE_POLL`], which of the
    /// workflows waited for have ended (on any host), unless it runs; it stops once nobody
    /// waits.
    fn poll_remote_ends(&self, client: &Client) {
        if self.polling.swap(true, Ordering::AcqRel) {
            return;
        }
        let (waiters, polling, client) = (
            Arc::clone(&self.durable.waiters),
            Arc::clone(&self.polling),
            client.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REMOTE_POLL).await;
                let watched = waiters.watched(Topic::End);
                if watched.is_empty() {
                    polling.store(false, Ordering::Release);
                    // A waiter that registered after the look and saw the flag still set is
                    // served by taking the flag back.
                    if waiters.watched(Topic::End).is_empty()
                        || polling.swap(true, Ordering::AcqRel)
                    {
                        return;
                    }
                    continue;
                }
                let reader = client.clone();
                let ended = blocking(move || match &*reader.backend {
                    super::Backend::Serving(serving) => serving.store.finished_among(&watched),
                    _ => Ok(Vec::new()),
                })
                .await;
                match ended {
                    Ok(ended) => waiters.fire(Topic::End, &ended),
                    Err(error) => tracing::debug!("reading which workflows ended: {error}"),
                }
            }
        });
    }

    pub(crate) fn send(&self, id: &str, message: &Payload) -> Result<u64> {
        if let Some(pid) = self.durable.ids.pid_of(id) {
            crate::engine::check_payload(&self.host.engine().wasm.limits, "the message", message)?;
            return self
                .durable
                .send_from_host(&self.host.engine().handle, pid, message.clone());
        }
        if self.shared() {
            return self.store.send(id, message);
        }
        let workflow = self.store.find(id)?;
        if workflow.state != crate::durable::store::State::Running {
            return Err(not_running(id, &self.store.location));
        }
        // Unfinished and not running here (it waits for its module, or is damaged): kept for
        // the recovery that starts it.
        crate::engine::check_payload(&self.host.engine().wasm.limits, "the message", message)?;
        self.durable.keep_message(workflow.start.num, message)
    }

    pub(crate) fn cancel(&self, id: &str) -> Result<Cancelled> {
        if self.shared() && self.durable.ids.pid_of(id).is_none() {
            return self.store.cancel(id);
        }
        let status = self.store.status(id)?;
        if status.state != WorkflowState::Running {
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
                    let status = self.store.status(id)?;
                    Ok(Cancelled::Ended(status.state))
                }
                Err(error) => Err(error),
            },
            None => {
                // Kept for the recovery that starts it.
                self.durable.keep_cancel(Pid(status.number))?;
                Ok(Cancelled::Asked)
            }
        }
    }

    pub(crate) fn outbox(
        &self,
        id: &str,
        after: Option<&str>,
        wait: Option<Duration>,
    ) -> Result<OutboxPage> {
        if let Some(after) = after {
            parse_cursor(after)?;
        }
        let deadline = Instant::now() + wait.unwrap_or_default().min(MAX_WAIT);
        loop {
            let page = self.store.outbox(id, after)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !page.messages.is_empty() || page.finished || left.is_zero() {
                return Ok(page);
            }
            let mut watch = self
                .durable
                .waiters
                .watch_blocking(Topic::Outbox, page.number);
            let mut end = self.durable.waiters.watch_blocking(Topic::End, page.number);
            let again = self.store.outbox(id, after)?;
            if !again.messages.is_empty() || again.finished {
                return Ok(again);
            }
            let step = if self.shared() {
                left.min(REMOTE_POLL)
            } else {
                left
            };
            if !watch.fired_blocking(step) {
                end.fired_blocking(Duration::ZERO);
            }
        }
    }

    pub(crate) async fn outbox_async(
        &self,
        client: &Client,
        id: &str,
        after: Option<&str>,
        wait: Option<Duration>,
    ) -> Result<OutboxPage> {
        if let Some(after) = after {
            parse_cursor(after)?;
        }
        let deadline = Instant::now() + wait.unwrap_or_default().min(MAX_WAIT);
        loop {
            let page = read_outbox(client, id, after).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !page.messages.is_empty() || page.finished || left.is_zero() {
                return Ok(page);
            }
            let mut sent = self.durable.waiters.watch(Topic::Outbox, page.number);
            let mut ended = self.durable.waiters.watch(Topic::End, page.number);
            let again = read_outbox(client, id, after).await?;
            if !again.messages.is_empty() || again.finished {
                return Ok(again);
            }
            // On a store hosts share another host may run it: look again now and then.
            let step = if self.shared() {
                left.min(REMOTE_POLL)
            } else {
                left
            };
            tokio::select! {
                _ = sent.fired(step) => {}
                _ = ended.fired(step) => {}
            }
        }
    }

    pub(crate) fn hosts(&self) -> Result<Vec<HostStatus>> {
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
    pub(crate) fn ready(&self) -> Result<()> {
        if let Some(error) = self.durable.store_failure() {
            return Err(Error::new(ErrorKind::Unavailable, error.message()));
        }
        self.host.engine().running()?;
        self.store.count_running().map(drop)
    }
}

async fn read_status(client: &Client, id: &str) -> Result<WorkflowStatus> {
    let (client, id) = (client.clone(), id.to_string());
    blocking(move || client.status(&id)).await
}

async fn read_outbox(client: &Client, id: &str, after: Option<&str>) -> Result<OutboxPage> {
    let (client, id, after) = (client.clone(), id.to_string(), after.map(str::to_string));
    blocking(move || match &*client.backend {
        super::Backend::Serving(serving) => serving.store.outbox(&id, after.as_deref()),
        _ => client.outbox(&id, after.as_deref(), None),
    })
    .await
}
