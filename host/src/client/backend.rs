//! What a [`Client`](super::Client) reaches its workflows through: one trait, and one file per
//! backend that implements it: a store read and written directly (`store.rs`), a host this
//! program serves (`serving.rs`), a server over HTTP (`remote.rs`). The `Client` checks what a
//! caller gave and hands the operation to its backend; it never asks which one it has.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wfcontract::Payload;

use super::types::{
    Cancelled, Fired, HistoryStep, HostStatus, ListQuery, OutboxPage, Page, PauseChange,
    PruneQuery, Pruned, Started, StoredModule, Waits, WorkflowCounts, WorkflowStatus,
};
use super::{ModuleRef, Start};
use crate::durable::store::Location;
use crate::error::Result;
use crate::schedules::{NewSchedule, Schedule};
use crate::Upgraded;

/// A wait that holds no thread ([`Backend::result_async`], [`Backend::outbox_async`]).
pub(crate) type Waiting<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// The operations of a [`Client`](super::Client), as each backend carries them out. See the
/// `Client`'s methods of the same names for what each does.
pub(crate) trait Backend: Schedules + Send + Sync + 'static {
    /// Where the workflows are: the store, or the server.
    fn location(&self) -> &Location;

    fn put_module(&self, wasm: &[u8], name: Option<&str>) -> Result<StoredModule>;
    fn modules(&self) -> Result<Vec<StoredModule>>;
    fn module(&self, hash: &str) -> Result<Option<Vec<u8>>>;

    fn start(&self, start: &Start<'_>) -> Result<Started>;
    fn status(&self, id: &str) -> Result<WorkflowStatus>;
    fn result(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowStatus>;
    fn send(&self, id: &str, message: &Payload) -> Result<u64>;
    fn cancel(&self, id: &str) -> Result<Cancelled>;
    fn pause(&self, id: &str, paused: bool) -> Result<PauseChange>;
    fn upgrade(&self, id: &str, wasm: &[u8]) -> Result<Upgraded>;
    fn upgrade_stored(&self, id: &str, module: &str) -> Result<Upgraded>;
    fn reset(
        &self,
        id: &str,
        to_step: Option<u64>,
        module: Option<ModuleRef<'_>>,
    ) -> Result<crate::WorkflowReset>;

    fn list(&self, query: &ListQuery) -> Result<Page<WorkflowStatus>>;
    fn counts(&self, query: &ListQuery) -> Result<WorkflowCounts>;
    fn history(&self, id: &str, after: Option<&str>, limit: usize) -> Result<Page<HistoryStep>>;
    fn outbox(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Result<OutboxPage>;
    fn waits(&self, id: &str) -> Result<Waits>;
    fn id_of(&self, number: u64) -> Result<Option<String>>;
    fn hosts(&self) -> Result<Vec<HostStatus>>;
    fn ready(&self) -> Result<()>;
    fn takes_work(&self) -> Result<()>;
    fn prune(&self, query: &PruneQuery, deadline: Option<Instant>) -> Result<Pruned>;

    /// A wait for a result that holds no thread, where the backend has one (a serving host's
    /// journal says when a workflow ends); `None`: the client waits on tokio's blocking pool.
    fn result_async(
        self: Arc<Self>,
        id: String,
        wait: Option<Duration>,
    ) -> Option<Waiting<WorkflowStatus>> {
        let _ = (id, wait);
        None
    }

    /// As [`result_async`](Self::result_async), for the outbox.
    fn outbox_async(
        self: Arc<Self>,
        id: String,
        after: Option<String>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Option<Waiting<OutboxPage>> {
        let _ = (id, after, limit, wait);
        None
    }

    /// The same backend sending `token` (a server's client); `None`: a backend that sends none.
    fn with_token(&self, token: &str) -> Option<Arc<dyn Backend>> {
        let _ = token;
        None
    }

    /// The same backend trusting the certificates in `pem` (a server's client); `None`: a
    /// backend that makes no TLS connection.
    fn with_root_certificates(&self, pem: &[u8]) -> Result<Option<Arc<dyn Backend>>> {
        let _ = pem;
        Ok(None)
    }
}

/// A backend's schedules: kept in the store by the backends that write it themselves (every
/// [`Direct`](super::schedules::Direct) one, in `schedules.rs`), asked of its server by the
/// remote one.
pub(crate) trait Schedules {
    fn create_schedule(&self, schedule: &NewSchedule) -> Result<Schedule>;
    fn schedules(&self) -> Result<Vec<Schedule>>;
    fn schedule(&self, id: &str) -> Result<Schedule>;
    fn pause_schedule(&self, id: &str, paused: bool) -> Result<bool>;
    fn delete_schedule(&self, id: &str) -> Result<bool>;
    fn trigger_schedule(&self, id: &str) -> Result<Started>;
    fn fire_schedules(&self, since: Option<u64>) -> Result<Fired>;
}
